"""Run one campaign cell: launch, keep the raw output, decide its status.

A cell always ends with a status (ok, failed, timeout, unavailable, invalid)
written next to its raw output, so one broken cell never stops a campaign.
The output directory appears atomically (written aside, then renamed) and
its files are made read-only: raw data is never edited after the fact.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpiatlas import containers, multinode, provenance, topology
from mpiatlas.parsers.imb import ImbParseError, parse_imb_text
from mpiatlas.stacks import LaunchSpec, Stack, StackError, get_stack
from mpiatlas.stacks.base import INTRA_NODE_EXPECT

from mpiatlas.layout import PROVENANCE, STATUS, STDERR, STDOUT  # noqa: E402  (re-exported)


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | unavailable | invalid
    reason: str | None = None
    details: dict[str, Any] | None = None


def imb_args(benchmark: str, np: int, imb: dict[str, Any]) -> list[str]:
    lo, hi = imb["msglog"]
    args = [benchmark, "-msglog", f"{lo}:{hi}", "-npmin", str(np), "-time", str(imb["time_s"]), "-mem", str(imb["mem_gb"])]
    if imb.get("iterations"):
        args += ["-iter", str(imb["iterations"])]
    return args


def imb_program(stack: Stack, benchmark: str, np: int, imb: dict[str, Any]) -> list[str]:
    binary = stack.imb_binary("IMB-MPI1")
    if binary is None:
        raise StackError(f"unavailable: no IMB-MPI1 for {stack.kind} (IMB source not reachable or not built)")
    return [str(binary), *imb_args(benchmark, np, imb)]


def image_facts(container: dict[str, Any]) -> dict[str, Any]:
    """Digest and labels of a cell's image, from the record the image rule wrote at build time."""
    record = json.loads(Path(container["inspect"]).read_text())
    labels = record["inspect"]["data"]["attributes"].get("labels", {})
    return {"image": str(Path(container["image"]).resolve()), "digest": f"sha256:{record['sha256']}", "labels": labels}


def container_imb_program(container: dict[str, Any], facts: dict[str, Any], benchmark: str, np: int,
                          imb: dict[str, Any]) -> list[str]:
    """Hybrid model: the host launcher starts ``apptainer exec IMAGE IMB-MPI1 ...`` per rank."""
    status = facts["labels"].get("mpiatlas.imb", "")
    if status.startswith("unavailable"):
        raise StackError(f"unavailable: image {Path(facts['image']).name}: IMB {status}")
    return containers.exec_argv(facts["image"], ["IMB-MPI1", *imb_args(benchmark, np, imb)], container.get("binds", []))


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int | None, str, str, float]:
    """Run in its own process group so a timeout kills every rank, not just the launcher."""
    start = time.monotonic()
    with (cwd / STDOUT).open("w") as out, (cwd / STDERR).open("w") as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except CellInterrupted:
            _stop(proc)
            raise
        except subprocess.TimeoutExpired:
            _stop(proc)
            proc.wait()
            rc = None
    return rc, (cwd / STDOUT).read_text(errors="replace"), (cwd / STDERR).read_text(errors="replace"), time.monotonic() - start


def _stop(proc: subprocess.Popen) -> None:
    """TERM the launch's process group (srun passes it on to the step), KILL what is left."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def binding_problems(pins: list[int] | None, binding: dict[int, set[int]]) -> list[str]:
    if pins is None:
        return []
    if not binding:
        return ["the stack reported no binding, so pinning cannot be verified"]
    return topology.check_binding(pins, [binding.get(r, set()) for r in range(len(pins))])


def judge(stack: Stack, spec: dict[str, Any], pins: list[int] | None, rc: int | None,
          stdout: str, stderr: str) -> Outcome:
    """Decide a finished launch's status from its exit code, output and the evidence it printed."""
    ended = exit_outcome(spec, rc, stdout, stderr)
    if ended is not None:
        return ended
    try:
        rows = parse_imb_text(stdout, STDOUT)
    except ImbParseError as exc:
        return Outcome("failed", str(exc))
    output = stdout + "\n" + stderr
    details: dict[str, Any] = {"rows": rows.height, **transport_evidence(stack, spec["cell"]["transport"], output)}
    if int(spec["cell"]["np"]) == 1:
        # One rank has no peer: no transport is opened, so there is nothing to show or check.
        details["transport_ok"] = None
    binding = stack.obtained_binding(output)
    problems = binding_problems(pins, binding)
    details.update(
        obtained_binding={str(r): sorted(c) for r, c in sorted(binding.items())},
        binding_ok=None if pins is None else not problems,
    )
    if details["transport_ok"] is False:
        return Outcome("invalid", transport_reason(details), details)
    if problems:
        return Outcome("invalid", "; ".join(problems), details)
    return Outcome("ok", None, details)


def exit_outcome(spec: dict[str, Any], rc: int | None, stdout: str, stderr: str) -> Outcome | None:
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


def transport_reason(details: dict[str, Any]) -> str:
    return (f"requested transport {details['requested_transport']!r} "
            f"but the stack used {details['obtained_transport']!r}")


def resolve_launcher(requested: str | None, environ: dict[str, str] | None = None) -> str:
    """campaign.launcher -> the launcher to use here: auto is srun inside a SLURM job, else mpirun."""
    environ = os.environ if environ is None else environ
    if requested in (None, "", "auto"):
        return "srun" if environ.get("SLURM_JOB_ID") else "mpirun"
    if requested not in ("mpirun", "srun"):
        raise ValueError(f"unknown launcher {requested!r}; choose auto, mpirun or srun")
    return requested


def scheduler_facts(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The batch job a cell ran in (SLURM), or nulls outside a scheduler."""
    environ = os.environ if environ is None else environ
    slurm = {k: v for k, v in sorted(environ.items()) if k.startswith("SLURM_")}
    return {"scheduler": "slurm" if environ.get("SLURM_JOB_ID") else None,
            "slurm_job_id": environ.get("SLURM_JOB_ID"), "slurm": slurm or None}


class CellInterrupted(RuntimeError):
    """The cell was stopped from outside (a signal, its batch job cancelled, timed out or
    preempted): it has no result, so it is not sealed and stays missing until it runs again."""


_INTERRUPTED: list[str] = []  # why the cell being run was interrupted (set by the signal handler)
_PREVIOUS_HANDLERS: dict[int, Any] = {}
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _on_stop_signal(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    _INTERRUPTED.append(f"received {name}")
    raise CellInterrupted(f"received {name}")


def _catch_stop_signals() -> None:
    """scancel, a time limit or Snakemake's Ctrl-C send SIGTERM/SIGINT: stop the launch and leave
    the cell unsealed instead of recording a failure that was not the cell's."""
    _INTERRUPTED.clear()
    try:
        for sig in _STOP_SIGNALS:
            _PREVIOUS_HANDLERS[sig] = signal.signal(sig, _on_stop_signal)
    except ValueError:  # not the main thread: leave signals alone
        _PREVIOUS_HANDLERS.clear()


def _release_stop_signals() -> None:
    for sig, handler in _PREVIOUS_HANDLERS.items():
        signal.signal(sig, handler)
    _PREVIOUS_HANDLERS.clear()


def slurm_job_alive(environ: dict[str, str] | None = None) -> bool:
    """Is the SLURM job this process runs in still RUNNING (not cancelled, timed out, preempted
    or gone)? Unknown (squeue fails) counts as not alive: a cell left missing runs again later,
    a cell wrongly sealed as failed would not."""
    job = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    if not job or shutil.which("squeue") is None:
        return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "RUNNING"


def interruption(record: dict[str, Any]) -> str | None:
    """Why a finished cell has no result of its own, or None: a stop signal, or an srun launch
    that failed because its job is no longer running (scancel, time limit, preemption)."""
    if _INTERRUPTED:
        return _INTERRUPTED[0]
    if record.get("launcher") == "srun" and record.get("exit_code") not in (0, None) and not slurm_job_alive():
        return f"srun exited with {record.get('exit_code')} and SLURM job {os.environ.get('SLURM_JOB_ID')} is no longer running"
    return None


def clean_stale(out: Path) -> list[str]:
    """Remove scratch directories (``.<name>.*`` beside ``out``) left by earlier attempts at this
    cell that were killed before they could seal (e.g. scancel): only one attempt at a cell runs at
    a time (Snakemake owns ``out``), so any such directory now is dead."""
    removed = []
    for stale in sorted(out.parent.glob(f".{out.name}.*")):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale.name)
    return removed


def open_cell(spec: dict[str, Any], out: Path) -> tuple[Path, dict[str, Any]]:
    """Start a cell: refuse an existing ``out``, make the scratch directory the cell is written
    into (sealed into ``out`` by :func:`close_cell`), and the provenance record's first facts."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: raw output already exists and is never overwritten")
    out.parent.mkdir(parents=True, exist_ok=True)
    stale = clean_stale(out)
    # Absolute: the launch runs inside it, and launch-side files (rankfiles) are named by path.
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent)).resolve()
    record: dict[str, Any] = {"cell": spec["id"], "coords": spec["cell"], "start": provenance.now(),
                              **provenance.host_facts(), "containerized": False, "image_digest": None,
                              "stack_kind": spec["stack"]["kind"], **scheduler_facts()}
    if stale:
        record["removed_stale_attempts"] = stale
    _catch_stop_signals()
    return work, record


def close_cell(work: Path, out: Path, spec: dict[str, Any], record: dict[str, Any], outcome: Outcome) -> None:
    """End a cell: provenance and status next to the raw output, read-only, renamed into ``out``.
    An interrupted cell (see :func:`interruption`) is discarded instead and CellInterrupted raised:
    its raw directory never appears, so Snakemake and the partial report see it as missing."""
    _release_stop_signals()
    why = interruption(record)
    if why is not None:
        shutil.rmtree(work, ignore_errors=True)
        raise CellInterrupted(f"{spec['id']}: interrupted ({why}); not recorded, run it again")
    record["end"] = provenance.now()
    for name in (STDOUT, STDERR):
        (work / name).touch()
    _write_json(work / PROVENANCE, record)
    _write_json(work / STATUS, {"cell": spec["id"], "status": outcome.status, "reason": outcome.reason,
                                **(outcome.details or {})})
    _seal(work, Path(out))


def error_outcome(exc: topology.MappingUnavailable | StackError) -> Outcome:
    """The status of a cell that could not be launched: ``unavailable`` (the node or the stack
    cannot do it) or ``failed``."""
    if isinstance(exc, topology.MappingUnavailable):
        return Outcome("unavailable", str(exc))
    text = str(exc)
    return Outcome("unavailable", text.removeprefix("unavailable: ")) if text.startswith("unavailable") \
        else Outcome("failed", text)


def launch_and_run(stack: Stack, program: list[str], launch_spec: LaunchSpec, work: Path, timeout_s: float,
                   record: dict[str, Any], extra_env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """Build the stack's launch of ``program``, run it in ``work`` with the timeout, and record
    argv, the relevant environment, exit code and wall time. ``extra_env`` (e.g. OMP_NUM_THREADS)
    goes to the launcher, which passes it on to the ranks."""
    launch = stack.launch(program, launch_spec)
    extra = dict(extra_env or {})
    env = stack.env() | launch.env | extra
    record.update(argv=launch.argv, env=provenance.relevant_env(stack.runtime_env() | launch.env | extra))
    rc, stdout, stderr, wall = _run(launch.argv, env, work, timeout_s)
    record.update(exit_code=rc, wall_s=round(wall, 3))
    return rc, stdout, stderr


def cell_nodes(cell: dict[str, Any]) -> tuple[int, int | None]:
    """(nodes, ranks per node) of a cell's launch; ranks per node is None on one node."""
    nodes = int(cell.get("nodes", 1))
    return nodes, (int(cell["np"]) // nodes if nodes > 1 else None)


def interface_env(stack: Stack, spec: dict[str, Any]) -> dict[str, str]:
    """Variables keeping the stack's TCP traffic on the cell's ``tcp_interface`` ({} without one)."""
    iface = spec.get("tcp_interface")
    return stack.interface_env(iface) if iface else {}


def launch_topology(launcher: str) -> topology.Topology:
    """The node's topology; under srun only the cores this batch job was given (its affinity):
    on a node shared with other jobs, a `core` cell must pin to its own cpus, not to cpu 0."""
    topo = topology.detect()
    if launcher == "srun" and os.environ.get("SLURM_JOB_ID"):
        topo = topo.restricted_to(os.sched_getaffinity(0))
    return topo


def plan_single_node(spec: dict[str, Any], topo: topology.Topology,
                     record: dict[str, Any]) -> tuple[list[int], None, bool]:
    """Pins of a one-node cell from the node's topology; oversubscribed when ranks > cores."""
    cell = spec["cell"]
    ncores = len(topo.cores)
    oversubscribed = record["oversubscribed"] = cell["np"] > ncores
    if oversubscribed and not spec["allow_oversubscribe"]:
        raise topology.MappingUnavailable(cell["mapping"], f"{cell['np']} ranks > {ncores} cores and oversubscription is off")
    pins = topology.pin_list(topo, cell["mapping"], cell["np"], oversubscribe=oversubscribed)
    record["requested_pins"] = list(pins)
    record["region"] = topology.region(topo, pins[0], pins[1]) if len(pins) > 1 else None
    return list(pins), None, oversubscribed


def plan_multinode(stack: Stack, spec: dict[str, Any], topo: topology.Topology, launcher: str,
                   record: dict[str, Any]) -> tuple[list[int] | None, list[tuple[int, ...]] | None, bool,
                                                    list[multinode.NodeFacts]]:
    """A `node`-mapped cell: refuse what cannot cross nodes, probe the allocation's nodes, and
    place the ranks (see multinode.placement)."""
    cell = spec["cell"]
    nodes, np = int(cell["nodes"]), int(cell["np"])
    if launcher != "srun":
        raise StackError(f"unavailable: a cell over {nodes} nodes runs inside a SLURM allocation with launcher "
                         f"srun (profiles/slurm); launcher {launcher} across hosts is not supported")
    transport = stack.transport(cell["transport"])
    if transport.expect in INTRA_NODE_EXPECT:
        raise StackError(f"unavailable: transport {cell['transport']!r} of {stack.kind} is shared memory "
                         f"({transport.expect}) and cannot connect ranks on different nodes")
    facts = multinode.probe_nodes(nodes)
    shared = multinode.colocated(facts)
    record.update(node_facts=multinode.facts_record(facts), colocated=shared)
    oversubscribed = record["oversubscribed"] = multinode.machine_oversubscribed(np, facts) or np // nodes > len(topo.cores)
    if oversubscribed and not spec["allow_oversubscribe"]:
        raise topology.MappingUnavailable("node", f"{np} ranks on {nodes} nodes need more cpus than the machine(s) "
                                          "have and oversubscription is off")
    pins, pin_sets = multinode.placement(topo, np, nodes, shared_machine=shared,
                                         policy=spec.get("colocated_nodes", "spread"))
    record["requested_pins"] = pins if pins is not None else [list(s) for s in pin_sets or []]
    record["region"] = "other_node" if np > 1 else None
    return pins, pin_sets, oversubscribed, facts


def judge_placement(outcome: Outcome, spec: dict[str, Any], pin_sets: list[tuple[int, ...]] | None,
                    facts: list[multinode.NodeFacts], output: str, record: dict[str, Any]) -> Outcome:
    """A multi-node cell is only ``ok`` if its ranks really ran on different nodes, each on the cpus
    asked for, and no two ranks of one machine were left to share a core (multinode.time_sliced)."""
    if outcome.status not in ("ok", "invalid"):
        return outcome
    cell = spec["cell"]
    details = dict(outcome.details or {})
    hosts = multinode.srun_hosts(output)
    record["rank_hosts"] = {str(r): h for r, h in sorted(hosts.items())}
    binding = {int(r): set(c) for r, c in (details.get("obtained_binding") or {}).items()}
    problems = multinode.placement_problems(int(cell["np"]), int(cell["nodes"]), hosts, binding, facts)
    if pin_sets is not None:
        wrong = [r for r, cpus in enumerate(pin_sets) if binding.get(r) != set(cpus)]
        details["binding_ok"] = not wrong
        if wrong:
            problems.append(f"ranks {wrong} were not bound to the cpu sets asked for ({[list(pin_sets[r]) for r in wrong]})")
    details.update(rank_hosts=record["rank_hosts"], placement_ok=not problems)
    if outcome.status == "ok" and problems:
        return Outcome("invalid", "; ".join(problems), details)
    if problems:
        return Outcome("invalid", "; ".join([outcome.reason or "", *problems]).strip("; "), details)
    return Outcome(outcome.status, outcome.reason, details)


def run_cell(spec: dict[str, Any], out: Path) -> Outcome:
    """Run the IMB cell described by ``spec`` (see matrix.cell_spec) into directory ``out``."""
    work, record = open_cell(spec, out)
    cell = spec["cell"]
    stack = get_stack(spec["stack"]["kind"], spec["stack"]["prefix"], source=spec["stack"]["source"],
                      imb_from=_absolute(spec["stack"].get("imb_from")))
    outcome = Outcome("failed", "not run")
    try:
        launcher = record["launcher"] = resolve_launcher(spec.get("launcher"))
        topo = launch_topology(launcher)
        record["topology"] = topo.summary()
        stack.check_launcher(launcher)
        nodes, ppn = cell_nodes(cell)
        if nodes > 1:
            pins, pin_sets, oversubscribed, node_facts = plan_multinode(stack, spec, topo, launcher, record)
        else:
            pins, pin_sets, oversubscribed, node_facts = (*plan_single_node(spec, topo, record), None)
        record["stack_version"] = stack.version()
        container = spec.get("container")
        if container:
            facts = image_facts(container)
            record.update(containerized=True, image=facts["image"], image_digest=facts["digest"])
            program = container_imb_program(container, facts, cell["benchmark"], cell["np"], spec["imb"])
        else:
            program = imb_program(stack, cell["benchmark"], cell["np"], spec["imb"])
        collective = cell["benchmark"].lower() if cell["algorithm"] != "default" else None
        rc, stdout, stderr = launch_and_run(stack, program, LaunchSpec(
            np=cell["np"], transport=cell["transport"], pins=pins, pin_sets=pin_sets, oversubscribe=oversubscribed,
            collective=collective, algorithm=cell["algorithm"], workdir=work, launcher=launcher,
            nodes=nodes, ppn=ppn,
        ), work, spec["timeout_s"], record, extra_env=interface_env(stack, spec))
        outcome = judge(stack, spec, pins, rc, stdout, stderr)
        if node_facts is not None:
            outcome = judge_placement(outcome, spec, pin_sets, node_facts, stdout + "\n" + stderr, record)
    except (topology.MappingUnavailable, StackError) as exc:
        outcome = error_outcome(exc)
    finally:
        close_cell(work, out, spec, record, outcome)
    return outcome


def _absolute(path: str | None) -> Path | None:
    # Launches run in a scratch directory: relative prefixes would point nowhere.
    return Path(path).resolve() if path else None


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _seal(work: Path, out: Path) -> None:
    """Make files read-only and move the finished directory into place in one rename."""
    for path in work.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    work.chmod(0o755)
    if out.exists():
        out.rmdir()  # empty: checked at start
    os.rename(work, out)


def read_status(cell_dir: Path) -> dict[str, Any]:
    return json.loads((Path(cell_dir) / STATUS).read_text())


__all__ = ["run_cell", "judge", "Outcome", "read_status", "imb_program"]
