"""Run one kernel cell (ring, matsum, jacobi, pingpong, coll of src/kernels): launch, keep the raw output, judge.

The same life cycle as an IMB cell (:mod:`mpiatlas.runner`: scratch directory, provenance,
status, read-only seal, timeout, transport and binding evidence); what differs:

* the program is the stack's kernel build (``results/kernels/<stack>/<kernel>``) or, with
  ``containers.enabled``, the kernel on the image's PATH run through ``apptainer exec``;
* a rank may own several cores (jacobi hybrid: ``threads`` OpenMP threads per rank): the
  placement takes ``np x threads`` cores of the mapping and gives each rank a *set* of them
  (``core``: consecutive cores; spreading mappings: every np-th core of the mapping's order,
  i.e. one core per domain round). ``OMP_NUM_THREADS`` is exported. A stack whose launch layer
  cannot bind a rank to a set (``Stack.multi_core_pins``) runs the cell without a pin list:
  the binding the stack reports is recorded and the status reason says so;
* the output is the kernels' JSON lines: a cell whose launch succeeded is ``failed`` when any
  rank reports ``"valid": false`` (a wrong ring sum, a matsum mismatch, a Jacobi residual
  that differs from the serial re-run), or when a rank's records are missing.

The thread placement is checked too: every OpenMP thread's cpu (``thread_cpus``, read at the
end of the run) must lie in its rank's set.

The `node` mapping over m nodes (one thread per rank) reuses the IMB runner's multi-node path
(runner.plan_multinode, runner.judge_placement, mpiatlas.multinode): srun inside the allocation,
ranks cyclic over the nodes, co-located nodes recognised by their kernel boot id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from mpiatlas import containers, multinode, topology
from mpiatlas.parsers.kernels import KernelParseError, parse_kernel_output
from mpiatlas.runner import (
    STDOUT,
    Outcome,
    binding_problems,
    cell_nodes,
    close_cell,
    error_outcome,
    exit_outcome,
    image_facts,
    interface_env,
    judge_placement,
    launch_and_run,
    launch_topology,
    open_cell,
    plan_multinode,
    resolve_launcher,
    transport_evidence,
    transport_reason,
)
from mpiatlas.stacks import LaunchSpec, Stack, StackError, get_stack


def rank_cpu_sets(topo: topology.Topology, mapping: str, np: int, threads: int, *,
                  oversubscribe: bool) -> list[tuple[int, ...]]:
    """The OS cpus of each rank: ``threads`` cores per rank under ``mapping``."""
    slots = topology.pin_list(topo, mapping, np * threads, oversubscribe=oversubscribe)
    if threads == 1:
        return [(cpu,) for cpu in slots]
    if mapping == "core":
        # Neighbouring cores (sharing the closest caches) for one rank's threads.
        return [tuple(slots[r * threads:(r + 1) * threads]) for r in range(np)]
    # l3/numa/socket order is round-robin over domains: stride np keeps a rank in its domain.
    return [tuple(slots[r + k * np] for k in range(threads)) for r in range(np)]


def set_binding_problems(requested: list[tuple[int, ...]], binding: dict[int, set[int]]) -> list[str]:
    """Problems between the requested cpu set of every rank and the one the stack reported."""
    if not binding:
        return ["the stack reported no binding, so pinning cannot be verified"]
    problems = []
    for rank, want in enumerate(requested):
        got = binding.get(rank, set())
        if not got:
            problems.append(f"rank {rank} asked for cpus {sorted(want)} but reported no binding")
        elif got != set(want):
            problems.append(f"rank {rank} asked for cpus {sorted(want)} but got {sorted(got)}")
    return problems


def thread_problems(frame: pl.DataFrame, sets: list[tuple[int, ...]] | None) -> list[str]:
    """OpenMP threads outside their rank's cpu set (jacobi's ``thread_cpus``)."""
    if sets is None or "thread_cpus" not in frame.columns:
        return []
    problems = []
    for row in frame.select("rank", "thread_cpus").iter_rows(named=True):
        cpus = set(row["thread_cpus"] or [])
        allowed = set(sets[row["rank"]]) if row["rank"] < len(sets) else set()
        if cpus - allowed:
            problems.append(f"rank {row['rank']}: OpenMP threads ran on cpus {sorted(cpus)}, "
                            f"outside its set {sorted(allowed)}")
    return problems


def invalid_records(frame: pl.DataFrame) -> str | None:
    """Why the kernel's own check failed (``valid: false`` on some rank), or None."""
    if "valid" not in frame.columns:
        return None
    bad = frame.filter(pl.col("valid") == False)  # noqa: E712 - polars expression, null is not false
    if bad.height == 0:
        return None
    ranks = sorted(set(bad["rank"].to_list()))
    show = [c for c in ("variant", "collective", "streams", "bytes", "topo", "dist", "mismatches", "max_rel_diff",
                        "payload_ok", "msgleft", "expected_left") if c in bad.columns]
    first = bad.row(0, named=True)
    what = ", ".join(f"{c}={first[c]}" for c in show)
    return (f"{bad.height} record(s) of rank(s) {', '.join(map(str, ranks))} report valid: false "
            f"(first: rank {first['rank']}{', ' + what if what else ''})")


def judge_kernel(stack: Stack, spec: dict[str, Any], pins: list[int] | None, sets: list[tuple[int, ...]] | None,
                 rc: int | None, stdout: str, stderr: str, unpinned_note: str | None = None) -> Outcome:
    """Status of a finished kernel launch from its exit code, records and the stack's evidence."""
    ended = exit_outcome(spec, rc, stdout, stderr)
    if ended is not None:
        return ended
    name, np = spec["kernel"]["name"], spec["cell"]["np"]
    try:
        frames = parse_kernel_output(stdout, STDOUT)
    except KernelParseError as exc:
        return Outcome("failed", f"kernel output: {exc}")
    frame = frames.get(name)
    if frame is None or frame.height == 0:
        return Outcome("failed", f"no {name} records in the output")
    output = stdout + "\n" + stderr
    binding = stack.obtained_binding(output)
    if sets is not None:
        problems = set_binding_problems(sets, binding)
    else:
        problems = binding_problems(pins, binding)
    pinned = pins is not None or sets is not None
    transport = transport_evidence(stack, spec["cell"]["transport"], output)
    if np == 1 and transport["obtained_transport"] is None:
        # One rank has no peer: most stacks only show their transport when they first use it.
        transport.update(transport_ok=None, transport_note="not checked: a single rank sends no message to a peer")
    details: dict[str, Any] = {
        "records": frame.height, "threads": spec["kernel"]["threads"], **transport,
        "obtained_binding": {str(r): sorted(c) for r, c in sorted(binding.items())},
        "binding_ok": (not problems) if pinned else None,
        "pinning": "cpu set per rank" if sets is not None else ("cpu per rank" if pins is not None else "none"),
    }
    sizes = sorted(set(frame["size"].to_list()))
    per_rank = frame.group_by("rank").len()
    if sizes != [np] or per_rank.height != np:
        return Outcome("failed", f"expected records of {np} ranks, got sizes {sizes} from {per_rank.height} rank(s)",
                       details)
    invalid = invalid_records(frame)
    if invalid:
        return Outcome("failed", invalid, details)
    if details["transport_ok"] is False:
        return Outcome("invalid", transport_reason(details), details)
    problems += thread_problems(frame, sets)
    if problems:
        details["binding_ok"] = False
        return Outcome("invalid", "; ".join(problems), details)
    if unpinned_note:
        bound = ", ".join(f"rank {r} -> {sorted(c)}" for r, c in sorted(binding.items())) or "not reported"
        return Outcome("ok", f"{unpinned_note}; binding as the stack reports it: {bound}", details)
    return Outcome("ok", None, details)


def kernel_program(spec: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """argv of one rank: the host build, or ``apptainer exec IMAGE <kernel>`` (hybrid model)."""
    kernel = spec["kernel"]
    name, args = kernel["name"], list(kernel["args"])
    container = spec.get("container")
    if container:
        facts = image_facts(container)
        record.update(containerized=True, image=facts["image"], image_digest=facts["digest"])
        listed = facts["labels"].get("mpiatlas.kernels")
        if listed is not None and name not in listed.split():
            raise StackError(f"unavailable: image {Path(facts['image']).name} has no kernel {name!r} "
                             f"(mpiatlas.kernels: {listed.strip() or 'none'})")
        return containers.exec_argv(facts["image"], [name, *args], container.get("binds", []))
    if not kernel.get("build_dir"):
        raise StackError(f"no build directory for kernel {name!r} and no container image")
    binary = Path(kernel["build_dir"]).resolve() / name
    if not binary.is_file():
        raise StackError(f"kernel {name} is not built: {binary} (rule kernels_build)")
    return [str(binary), *args]


def plan_single_node(stack: Stack, spec: dict[str, Any], topo: topology.Topology, launcher: str,
                     record: dict[str, Any]) -> tuple[list[int] | None, list[tuple[int, ...]] | None, bool, str | None]:
    """(pins, pin_sets, oversubscribed, unpinned note) of a one-node kernel cell: ``threads`` cores
    per rank under the mapping (rank_cpu_sets); a hybrid rank gets a cpu set where the stack can bind one."""
    cell, threads = spec["cell"], int(spec["kernel"]["threads"])
    ncores, cores = len(topo.cores), cell["np"] * threads
    oversubscribed = cores > ncores
    record.update(oversubscribed=oversubscribed, cores_requested=cores)
    if oversubscribed and not spec["allow_oversubscribe"]:
        raise topology.MappingUnavailable(
            cell["mapping"], f"{cell['np']} ranks x {threads} threads > {ncores} cores and oversubscription is off")
    sets = rank_cpu_sets(topo, cell["mapping"], cell["np"], threads, oversubscribe=oversubscribed)
    pins: list[int] | None = None
    pin_sets: list[tuple[int, ...]] | None = None
    unpinned_note = None
    if threads == 1:
        pins = [s[0] for s in sets]
        record["requested_pins"] = pins
    elif launcher in getattr(stack, "multi_core_pins", ()):
        pin_sets = sets
        record["requested_pins"] = [list(s) for s in sets]
    else:
        record["requested_pins"] = None
        record["wanted_cpu_sets"] = [list(s) for s in sets]
        unpinned_note = (f"hybrid ({threads} threads per rank): the {stack.kind} launch layer cannot bind a "
                         f"rank to several cores with {launcher}, so the ranks ran unpinned "
                         f"(wanted {[list(s) for s in sets]})")
    firsts = [s[0] for s in sets]
    record["region"] = topology.region(topo, firsts[0], firsts[1]) if len(firsts) > 1 else None
    return pins, pin_sets, oversubscribed, unpinned_note


def run_kernel_cell(spec: dict[str, Any], out: Path) -> Outcome:
    """Run the kernel cell described by ``spec`` (see kernel_matrix.kernel_spec) into ``out``.

    A cell over several nodes (the `node` mapping) is planned, launched and checked exactly like a
    multi-node IMB cell: runner.plan_multinode (srun only, no shared-memory transport, nodes
    probed, ranks placed) and runner.judge_placement (ranks on different hosts, bound as asked)."""
    work, record = open_cell(spec, out)
    cell, threads = spec["cell"], int(spec["kernel"]["threads"])
    stack = get_stack(spec["stack"]["kind"], spec["stack"]["prefix"], source=spec["stack"]["source"])
    outcome = Outcome("failed", "not run")
    try:
        launcher = record["launcher"] = resolve_launcher(spec.get("launcher"))
        topo = launch_topology(launcher)
        record.update(topology=topo.summary(), threads=threads)
        stack.check_launcher(launcher)
        nodes, ppn = cell_nodes(cell)
        facts: list[multinode.NodeFacts] | None = None
        unpinned_note = None
        if nodes > 1:
            if threads > 1:
                raise topology.MappingUnavailable(
                    "node", f"hybrid ranks ({threads} threads each) over {nodes} nodes are not supported "
                    "(multinode.placement gives one cpu, or one shared set, per rank)")
            pins, pin_sets, oversubscribed, facts = plan_multinode(stack, spec, topo, launcher, record)
            record["cores_requested"] = cell["np"]
        else:
            pins, pin_sets, oversubscribed, unpinned_note = plan_single_node(stack, spec, topo, launcher, record)
        record["stack_version"] = stack.version()
        program = kernel_program(spec, record)
        extra_env = {"OMP_NUM_THREADS": str(threads)}
        if oversubscribed and threads > 1:
            extra_env["OMP_WAIT_POLICY"] = "passive"  # threads sharing cores must not spin at barriers
        rc, stdout, stderr = launch_and_run(stack, program, LaunchSpec(
            np=cell["np"], transport=cell["transport"], pins=pins, pin_sets=pin_sets, oversubscribe=oversubscribed,
            workdir=work, launcher=launcher, nodes=nodes, ppn=ppn,
            # coll cells of a forced algorithm: the stack's own knob, exactly as for an IMB cell
            collective=spec["kernel"].get("collective"), algorithm=spec["kernel"].get("algorithm"),
        ), work, spec["timeout_s"], record, extra_env | interface_env(stack, spec))
        # Over nodes, the cpu sets of co-located nodes are checked by judge_placement (as for IMB).
        outcome = judge_kernel(stack, spec, pins, pin_sets if facts is None else None, rc, stdout, stderr,
                               unpinned_note)
        if facts is not None:
            outcome = judge_placement(outcome, spec, pin_sets, facts, stdout + "\n" + stderr, record)
            if pin_sets is not None and outcome.details is not None:
                outcome.details["pinning"] = "cpu set per rank"
    except (topology.MappingUnavailable, StackError) as exc:
        outcome = error_outcome(exc)
    finally:
        close_cell(work, out, spec, record, outcome)
    return outcome


__all__ = ["run_kernel_cell", "judge_kernel", "rank_cpu_sets", "set_binding_problems"]
