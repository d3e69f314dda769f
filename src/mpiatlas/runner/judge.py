"""A finished launch's status: how it exited, what its program read, which transport and binding
the stack's own output shows, and, over several nodes, where the ranks really ran.

The program (mpiatlas.programs) reads its output (IMB's tables, the kernels' JSON records and
their own ``valid`` checks); everything else is judged here the same way for every program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpiatlas.evidence import mpi_library
from mpiatlas.node import multinode, ssh_hosts, topology
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.programs import program_of_spec
from mpiatlas.programs.base import Checked
from mpiatlas.runner.likwid_pin import is_likwid
from mpiatlas.stacks import Stack
from mpiatlas.stacks.base import CROSS_NODE, ON_NODE

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def exit_outcome(spec: CellSpec, rc: int | None, stdout: str, stderr: str) -> Outcome | None:
    """``timeout`` / ``failed`` for a launch that did not end cleanly, else None."""
    if rc is None:
        return Outcome("timeout", f"no result within {spec['timeout_s']} s")
    if rc != 0:
        return Outcome("failed", f"exit code {rc}: {_last_line(stderr) or _last_line(stdout)}")
    return None


def transport_evidence(stack: Stack, transport: str, output: str) -> dict[str, Any]:
    """Requested vs obtained transport, as the stack's verbose output shows it."""
    expected = stack.transport(transport).expect
    obtained = stack.obtained_transport(output)
    return {"requested_transport": expected, "obtained_transport": obtained,
            "transport_ok": (obtained == expected) if expected else None}


def mixed_transport_evidence(stack: Stack, transport: str, output: str, nodes: int) -> dict[str, Any]:
    """A mixed transport (Transport.mixed) judged per class of pairs: every line of the stack's
    verbose output that names a path must show shared memory for a pair on one node and the
    network for a pair on different nodes; pairs on one node, if the cell has any, must show theirs
    (all three stacks print it at MPI_Init). Cross-node pairs that never talked show nothing (Open
    MPI connects them on first use): their class is then recorded as unused, not guessed."""
    wanted = stack.transport(transport)
    rank_hosts = ssh_hosts.rank_hosts(output)
    evidence = [e for e in stack.pair_evidence(output, rank_hosts)
                # On one node nothing crosses nodes: a job-wide provider line speaks for no pair.
                if not (nodes == 1 and e.pair_class == CROSS_NODE and e.pair is None)]
    expected = {ON_NODE: wanted.expect, CROSS_NODE: wanted.expect_inter}
    problems = [f"{e.pair_class.replace('_', '-')} pair(s) {e.where()} used {e.transport!r}, not "
                f"{expected[e.pair_class]!r}: {e.line}" for e in evidence if e.transport != expected[e.pair_class]]
    used = {c: sorted({e.transport for e in evidence if e.pair_class == c}) for c in (ON_NODE, CROSS_NODE)}
    ranks_per_node = len(rank_hosts) // max(1, len(set(rank_hosts.values()))) if rank_hosts else 0
    if not used[ON_NODE] and (nodes == 1 or ranks_per_node > 1):
        problems.append(f"the {stack.kind} output shows no path for the pairs of ranks on one node "
                        f"(expected {wanted.expect!r})")
    # None when nothing was shown at all (e.g. one rank, no peer: the program decides what that means).
    obtained = "+".join(",".join(used[c]) or "none" for c in (ON_NODE, CROSS_NODE)) if evidence else None
    return {"requested_transport": f"{wanted.expect}+{wanted.expect_inter}", "obtained_transport": obtained,
            "transport_ok": not problems, "pair_classes": used,
            # A few lines per class, as the stack printed them: what the verdict rests on.
            "pair_evidence": {c: [e.line for e in evidence if e.pair_class == c][:4] for c in (ON_NODE, CROSS_NODE)},
            **({"transport_problems": problems} if problems else {})}


def transport_reason(details: dict[str, Any]) -> str:
    if details.get("transport_problems"):
        return "mixed transport: " + "; ".join(details["transport_problems"])[:1500]
    return (f"requested transport {details['requested_transport']!r} "
            f"but the stack used {details['obtained_transport']!r}")


def binding_problems(pins: list[int] | None, binding: dict[int, set[int]]) -> list[str]:
    if pins is None:
        return []
    if not binding:
        return ["the stack reported no binding, so pinning cannot be verified"]
    return topology.check_binding(pins, [binding.get(r, set()) for r in range(len(pins))])


def omp_bound(spec: CellSpec, sets: list[tuple[int, ...]] | None) -> bool:
    """Did OpenMP pin this cell's threads inside their rank's set (programs.kernels.thread_binding_env,
    applied by the runner to every hybrid rank the stack binds to a set, not under likwid-pin)?"""
    return sets is not None and int(spec["cell"].get("threads", 1)) > 1 and not is_likwid(spec)


def set_bound(got: set[int], want: tuple[int, ...], omp: bool) -> bool:
    """A rank bound to its cpu set: the set, as the launcher reports it before the rank starts; under
    OpenMP's binding, a report from inside the rank (Intel MPI's pin table) shows its main thread,
    which OpenMP pinned to the set's first cpu before MPI_Init (its threads are checked one by one)."""
    return got == set(want) or (omp and got == {min(want)})


def set_binding_problems(requested: list[tuple[int, ...]], binding: dict[int, set[int]],
                         omp: bool = False) -> list[str]:
    """Problems between the requested cpu set of every rank and the one the stack reported
    (``omp``: threads pinned by OpenMP, :func:`set_bound`)."""
    if not binding:
        return ["the stack reported no binding, so pinning cannot be verified"]
    problems = []
    for rank, want in enumerate(requested):
        got = binding.get(rank, set())
        if not got:
            problems.append(f"rank {rank} asked for cpus {sorted(want)} but reported no binding")
        elif not set_bound(got, want, omp):
            problems.append(f"rank {rank} asked for cpus {sorted(want)} but got {sorted(got)}")
    return problems


def judge(stack: Stack, spec: CellSpec, pins: list[int] | None, sets: list[tuple[int, ...]] | None,
          rc: int | None, stdout: str, stderr: str, unpinned_note: str | None = None,
          thread_sets: list[tuple[int, ...]] | None = None) -> Outcome:
    """Decide a finished launch's status from its exit code, its program's reading of the output
    and the evidence the stack printed. ``sets``: the cpu set of each rank of a one-node hybrid
    cell, or of every rank under the likwid pinner; ``unpinned_note``: why a hybrid cell ran unpinned.
    Under the likwid pinner the stack bound nothing (its report says so and is kept): where each
    thread ran, as the program reports it, is the binding evidence (Checked.binding_problems).
    ``thread_sets``: over nodes, each hybrid rank's cpu set on its node, for the program's check of
    its threads only (judge_placement checks the ranks' own binding)."""
    ended = exit_outcome(spec, rc, stdout, stderr)
    if ended is not None:
        return ended
    program = program_of_spec(spec)
    checked = program.check(spec, stdout, pins, sets if thread_sets is None else thread_sets)
    if isinstance(checked, Outcome):
        return checked
    output = stdout + "\n" + stderr
    name = spec["cell"]["transport"]
    if stack.transport(name).mixed:
        transport = mixed_transport_evidence(stack, name, output, int(spec["cell"].get("nodes", 1)))
    else:
        transport = transport_evidence(stack, name, output)
    if int(spec["cell"]["np"]) == 1:
        transport = program.single_rank_transport(transport)
    binding = stack.obtained_binding(output)
    if is_likwid(spec):
        problems = []
    else:
        problems = (set_binding_problems(sets, binding, omp_bound(spec, sets)) if sets is not None
                    else binding_problems(pins, binding))
    pinned = pins is not None or sets is not None
    details: dict[str, Any] = {
        **checked.details, **transport,
        "obtained_binding": {str(r): sorted(c) for r, c in sorted(binding.items())},
        "binding_ok": (not problems) if pinned else None,
    }
    return _verdict(checked, details, problems, binding, unpinned_note)


def _verdict(checked: Checked, details: dict[str, Any], problems: list[str], binding: dict[int, set[int]],
             unpinned_note: str | None) -> Outcome:
    """The status, in order of what matters most: the program's own check, the transport, the binding."""
    if checked.failure:
        return Outcome("failed", checked.failure, details)
    if details["transport_ok"] is False:
        return Outcome("invalid", transport_reason(details), details)
    problems = problems + checked.binding_problems
    if problems:
        details["binding_ok"] = False
        return Outcome("invalid", "; ".join(problems), details)
    if unpinned_note:
        bound = ", ".join(f"rank {r} -> {sorted(c)}" for r, c in sorted(binding.items())) or "not reported"
        return Outcome("ok", f"{unpinned_note}; binding as the stack reports it: {bound}", details)
    return Outcome("ok", None, details)


def judge_placement(outcome: Outcome, spec: CellSpec, pin_sets: list[tuple[int, ...]] | None,
                    facts: list[multinode.NodeFacts], output: str, planned: list[int] | None = None) -> Outcome:
    """A multi-node cell is only ``ok`` if every rank really ran on the node its placement (cyclic |
    block; ``planned``: each rank's node, when the plan gave it) plans, each on the cpus asked for,
    and no two ranks of one machine were left to share a core (multinode.time_sliced). The details
    name the host of every rank (``rank_hosts``)."""
    if outcome.status not in ("ok", "invalid"):
        return outcome
    cell = spec["cell"]
    details = dict(outcome.details or {})
    hosts = ssh_hosts.rank_hosts(output)
    rank_hosts = {str(r): h for r, h in sorted(hosts.items())}
    binding = {int(r): set(c) for r, c in (details.get("obtained_binding") or {}).items()}
    omp = omp_bound(spec, pin_sets)
    wrong = [] if pin_sets is None else [r for r, cpus in enumerate(pin_sets)
                                         if not set_bound(binding.get(r, set()), cpus, omp)]
    if omp and pin_sets is not None and not wrong:
        # Hybrid ranks: what shares a machine's cpus is every rank's whole set, not its main thread's cpu.
        binding = {r: set(cpus) for r, cpus in enumerate(pin_sets)}
    problems = multinode.placement_problems(int(cell["np"]), int(cell["nodes"]), hosts, binding, facts,
                                            cell.get("distribution") or "cyclic", planned)
    if pin_sets is not None:
        details["binding_ok"] = not wrong
        if wrong:
            problems.append(f"ranks {wrong} were not bound to the cpu sets asked for ({[list(pin_sets[r]) for r in wrong]})")
    details.update(rank_hosts=rank_hosts, placement_ok=not problems)
    if outcome.status == "ok" and problems:
        return Outcome("invalid", "; ".join(problems), details)
    if problems:
        return Outcome("invalid", "; ".join([outcome.reason or "", *problems]).strip("; "), details)
    return Outcome(outcome.status, outcome.reason, details)


def judge_library(outcome: Outcome, seen: mpi_library.LibraryRecord) -> Outcome:
    """A cell is only ``ok`` if the library its ranks ran is its stack's (mpiatlas.evidence.mpi_library): the
    banner they printed names the stack's kind and version, the libmpi the loader resolves for its
    program is one of the stack's own files. A launch that failed or timed out keeps its status
    (its evidence is in provenance all the same)."""
    if outcome.status not in ("ok", "invalid"):
        return outcome
    problems = mpi_library.problems(seen)
    details = {**(outcome.details or {}), "mpi_library": mpi_library.label(seen),
               "libmpi_path": seen.get("libmpi_real_path"), "library_ok": not problems}
    if not problems:
        return Outcome(outcome.status, outcome.reason, details)
    reason = "MPI library: " + "; ".join(problems)
    return Outcome("invalid", reason if outcome.status == "ok" else f"{outcome.reason}; {reason}", details)
