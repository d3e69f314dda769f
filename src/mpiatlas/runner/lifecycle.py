"""The life cycle of one cell: a scratch directory, its provenance, a status, a read-only seal.

A cell always ends with a status (ok, failed, timeout, unavailable, invalid) written next to its
raw output, so one broken cell never stops a campaign. The output directory appears atomically
(written aside, then renamed) and its files are made read-only: raw data is never edited after
the fact. A cell stopped from outside (a signal, its batch job gone) is not sealed at all, unless
its job ended because SLURM lost one of its nodes (runner.scheduler_state): that cell is sealed as
``failed`` with SLURM's word, the group stops, and the next run runs it again (runner.run).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict

from mpiatlas.evidence import provenance
from mpiatlas.node import link_rate, topology
from mpiatlas.stats import quality
from mpiatlas.stats.quality import UNKNOWN
from mpiatlas.matrix.layout import NODE_LOST, PROVENANCE, STATUS, STDERR, STDOUT
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.evidence.provenance import UNSET, Provenance
from mpiatlas.runner.machine_record import MachineRecord
from mpiatlas.runner.scheduler_state import NodeLoss, node_failure_lines, node_loss
from mpiatlas.stacks import StackError

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec, ContainerSpec, ImageFacts


class CellInterrupted(RuntimeError):
    """The cell was stopped from outside (a signal, its batch job cancelled, timed out or
    preempted): it has no result, so it is not sealed and stays missing until it runs again."""


class NodeLost(CellInterrupted):
    """The cell's batch job lost a node: the cell is sealed as ``failed`` (why: SLURM's job state,
    srun's words), and the group stops, since its job is being ended."""


_INTERRUPTED: list[str] = []  # why the cell being run was interrupted (set by the signal handler)
# Signal -> the handler it had (what signal.signal returns and takes back: a function, SIG_DFL/SIG_IGN, or None).
_SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
_PREVIOUS_HANDLERS: dict[int, _SignalHandler] = {}
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
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


def _note_stop_signal(signum: int, frame: FrameType | None) -> None:
    _INTERRUPTED.append(f"received {signal.Signals(signum).name}")


def _hold_stop_signals() -> None:
    """While a cell is sealed (or its node loss recorded), a stop signal is noted, not raised:
    the record is written whole, and the group stops after it (see close_cell)."""
    for sig in _PREVIOUS_HANDLERS:
        signal.signal(sig, _note_stop_signal)


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


def _srun_failed(record: Provenance) -> bool:
    return record.launcher == "srun" and record.exit_code not in (0, None, UNSET)


def interruption(record: Provenance) -> str | None:
    """Why a finished cell has no result of its own, or None: a stop signal, or an srun launch
    that failed because its job is no longer running (scancel, time limit, preemption)."""
    if _INTERRUPTED:
        return _INTERRUPTED[0]
    if _srun_failed(record) and not slurm_job_alive():
        return f"srun exited with {record.exit_code} and SLURM job {os.environ.get('SLURM_JOB_ID')} is no longer running"
    return None


class SchedulerFacts(TypedDict):
    """The batch job a cell ran in, as provenance.json keeps it."""

    scheduler: str | None
    slurm_job_id: str | None
    slurm: dict[str, str] | None  # every SLURM_ variable


def scheduler_facts(environ: Mapping[str, str] | None = None) -> SchedulerFacts:
    """The batch job a cell ran in (SLURM), or nulls outside a scheduler."""
    environ = os.environ if environ is None else environ
    slurm = {k: v for k, v in sorted(environ.items()) if k.startswith("SLURM_")}
    return {"scheduler": "slurm" if environ.get("SLURM_JOB_ID") else None,
            "slurm_job_id": environ.get("SLURM_JOB_ID"), "slurm": slurm or None}


def clean_stale(out: Path) -> list[str]:
    """Remove scratch directories (``.<name>.*`` beside ``out``) left by earlier attempts at this
    cell that were killed before they could seal (e.g. scancel): only one attempt at a cell runs at
    a time (one job runs a group), so any such directory now is dead."""
    removed = []
    for stale in sorted(out.parent.glob(f".{out.name}.*")):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale.name)
    return removed


def open_cell(spec: CellSpec, out: Path) -> tuple[Path, Provenance]:
    """Start a cell: refuse an existing ``out``, make the scratch directory the cell is written
    into (sealed into ``out`` by :func:`close_cell`), and the provenance record's first facts."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: raw output already exists and is never overwritten")
    out.parent.mkdir(parents=True, exist_ok=True)
    stale = clean_stale(out)
    # Absolute: the launch runs inside it, and launch-side files (rankfiles) are named by path.
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent)).resolve()
    host, job = provenance.host_facts(), scheduler_facts()
    record = Provenance(cell=spec["id"], coords=spec["cell"], start=provenance.now(), host=host["host"],
                        cpu_model=host["cpu_model"], kernel=host["kernel"], python=host["python"],
                        mpiatlas_version=host["mpiatlas_version"], stack_kind=spec["stack"]["kind"],
                        scheduler=job["scheduler"], slurm_job_id=job["slurm_job_id"], slurm=job["slurm"])
    record.nics = link_rate.node_nics()
    if stale:
        record.removed_stale_attempts = stale
    _catch_stop_signals()
    return work, record


def close_cell(work: Path, out: Path, spec: CellSpec, record: Provenance, outcome: Outcome) -> None:
    """End a cell: provenance and status next to the raw output, read-only, renamed into ``out``.
    An interrupted cell (see :func:`interruption`) is discarded instead and CellInterrupted raised:
    its raw directory never appears, so Snakemake and the partial report see it as missing. If its
    job lost a node, it is sealed as ``failed`` with SLURM's word and NodeLost raised."""
    _hold_stop_signals()
    try:
        why = interruption(record)
        noted = len(_INTERRUPTED)
        lost = _node_loss(work, record, why)
        if why is not None and lost is None:
            shutil.rmtree(work, ignore_errors=True)
            raise CellInterrupted(f"{spec['id']}: interrupted ({why}); not recorded, run it again")
        if lost is not None:
            record.interrupted_by = why
            outcome = Outcome("failed", lost.reason, {**(outcome.details or {}), NODE_LOST: lost.facts()})
        _seal_cell(work, out, spec, record, outcome)
        if lost is not None:
            raise NodeLost(f"{spec['id']}: {lost.reason}; sealed as failed, runs again on the next run")
        late = _INTERRUPTED[noted:]
    finally:
        _release_stop_signals()
    if late:  # stopped while this cell was being sealed: it is whole, the ones after it do not start
        raise CellInterrupted(f"{spec['id']}: sealed, then {late[0]}: the group stops")


def _seal_cell(work: Path, out: Path, spec: CellSpec, record: Provenance, outcome: Outcome) -> None:
    record.end = provenance.now()
    for name in (STDOUT, STDERR):
        (work / name).touch()
    _write_json(work / PROVENANCE, record.to_json())
    machine = None if record.machine is UNSET else record.machine
    details = outcome.details or {}
    threads = (details.get("thread_quality"), details.get("thread_quality_reason"))
    trust = launch_quality(spec, machine, record.oversubscribed is True, threads)
    _write_json(work / STATUS, {"cell": spec["id"], "status": outcome.status, "reason": outcome.reason,
                                **details, **(trust.status_fields() if trust else {})})
    _seal(work, Path(out))


@dataclass(frozen=True)
class Trust:
    """How far a launch's numbers are the machine's own: ``quality`` ok | perturbed | unknown (None:
    the machine record could not be judged) and why (status.json ``quality``, ``quality_reason``)."""

    quality: str | None
    reason: str | None

    def status_fields(self) -> dict[str, str | None]:
        return {"quality": self.quality, "quality_reason": self.reason}


def launch_quality(spec: CellSpec, machine: MachineRecord | None, oversubscribed: bool,
                   threads: tuple[str | None, str | None] = (None, None)) -> Trust | None:
    """``quality`` (ok | perturbed | unknown) and ``quality_reason`` of the launch, from its machine
    record (mpiatlas.stats.quality) and its OpenMP threads' evidence (``threads``: the program's
    (quality, reason), mpiatlas.programs.kernels.thread_quality); nothing for a cell that never
    launched. A separate axis from the status: a perturbed launch ran right, its numbers are just not
    the machine's own; an unknown one could not be judged, which is not the same as good."""
    judged, reason = (quality.judge_launch(machine, spec.get("perturbation"), oversubscribed) if machine
                      else (None, None))
    thread_judged, thread_reason = threads
    if thread_judged is None:
        return Trust(judged, reason) if machine else None
    if quality.PERTURBED in (judged, thread_judged):
        reasons = [r for q, r in ((judged, reason), (thread_judged, thread_reason)) if q == quality.PERTURBED and r]
        return Trust(quality.PERTURBED, "; ".join(reasons))
    if thread_judged == UNKNOWN:
        return Trust(UNKNOWN, thread_reason)
    return Trust(judged or thread_judged, reason)


def _node_loss(work: Path, record: Provenance, why: str | None) -> NodeLoss | None:
    """The node loss that ended the cell's job: asked of SLURM when the cell was interrupted, or
    when its srun failed saying a node failed (the job may not have left RUNNING yet)."""
    failed_srun = _srun_failed(record)
    if why is None and not failed_srun:
        return None
    output = _read(work / STDERR) + _read(work / STDOUT)
    if why is None and not node_failure_lines(output)[1]:
        return None
    return node_loss(output)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def error_outcome(exc: topology.MappingUnavailable | StackError) -> Outcome:
    """The status of a cell that could not be launched: ``unavailable`` (the node or the stack
    cannot do it) or ``failed``."""
    if isinstance(exc, topology.MappingUnavailable):
        return Outcome("unavailable", str(exc))
    text = str(exc)
    return Outcome("unavailable", text.removeprefix("unavailable: ")) if text.startswith("unavailable") \
        else Outcome("failed", text)


def image_facts(container: ContainerSpec) -> ImageFacts:
    """Digest and labels of a cell's image, from the record the image rule wrote at build time."""
    record = json.loads(Path(container["inspect"]).read_text())
    labels = record["inspect"]["data"]["attributes"].get("labels", {})
    return {"image": str(Path(container["image"]).resolve()), "digest": f"sha256:{record['sha256']}", "labels": labels}


def _write_json(path: Path, data: object) -> None:
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
    status: dict[str, Any] = json.loads((Path(cell_dir) / STATUS).read_text())
    return status
