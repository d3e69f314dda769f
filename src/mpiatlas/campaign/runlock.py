"""One campaign at a time per checkout, and recovery from a run that was killed.

Two campaigns on one 2..256-core node would skew each other's timings, and two Snakemake runs on
one directory would mix results: ``mpiatlas campaign`` holds an exclusive ``flock`` on
``.mpiatlas/campaign.lock`` for its whole run. The kernel drops a flock when its owner dies, so a
``kill -9`` can never leave this lock stale.

Snakemake's own lock (``.snakemake/locks``) does stay behind after a ``kill -9``, and the next run
then refuses with "Directory cannot be locked". Holding our lock proves no other ``mpiatlas
campaign`` runs here; a lock is stale when, besides, no live Snakemake process works in this
directory. Cells that the killed run had started may still be running as orphans; they are
stopped (their cells stay unsealed, so they run again) before the new run begins, and so is every
process they started: a launch runs in its own session (runner.process), so an orphaned launcher
and its proxies outlive a run-cell that died before it could stop them, and an MPI proxy whose
peer is gone can spin on a core for as long as the machine stays up, perturbing every launch after it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from mpiatlas.campaign.snakemake_start import MODULE

LOCK_FILE = Path(".mpiatlas") / "campaign.lock"
# How long the orphans get, after SIGTERM, to stop their launch and exit (runner.process waits
# TERM_GRACE_S = 10 s for a launch before it KILLs it) before everything left is KILLed.
ORPHAN_GRACE_S = 15.0
# How long SIGKILLed processes get to be gone (exited or zombies) before recovery goes on.
KILL_WAIT_S = 10.0


class CampaignRunning(RuntimeError):
    """Another campaign holds this checkout."""


@dataclass
class CampaignLock:
    fd: int
    path: Path

    def release(self) -> None:
        os.close(self.fd)  # closing drops the flock


def acquire(root: Path, campaign: str) -> CampaignLock:
    """Take the checkout's campaign lock or raise CampaignRunning naming the owner. Nothing is
    written unless the lock is ours (the file is created by the first campaign only)."""
    path = root / LOCK_FILE
    if path.exists():
        fd = os.open(path, os.O_RDWR)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise CampaignRunning(f"a campaign is running here ({owner}); wait for it to end, or stop it") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}, campaign {campaign}\n".encode(), 0)
    return CampaignLock(fd, path)


def _processes() -> list[tuple[int, Path | None, list[str]]]:
    """(pid, cwd, argv) of every process we may inspect."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd: Path | None = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        found.append((int(entry.name), cwd, [a.decode(errors="replace") for a in argv if a]))
    return found


def live_snakemake(root: Path) -> list[int]:
    """Pids of Snakemake processes working in ``root`` (other than this process): ``snakemake``,
    ``python -m snakemake`` and ``python -m mpiatlas.campaign.snakemake_start``."""
    root = root.resolve()
    return [pid for pid, cwd, argv in _processes()
            if pid != os.getpid() and cwd == root and any(Path(a).name == "snakemake" or a in ("snakemake", MODULE)
                                                          for a in argv[:3])]


def orphan_cells(root: Path) -> list[int]:
    """Pids of ``mpiatlas run-cell`` processes working in ``root``: with no Snakemake alive there,
    they belong to a run that was killed."""
    root = root.resolve()
    return [pid for pid, cwd, argv in _processes()
            if pid != os.getpid() and cwd == root and "run-cell" in argv and any("mpiatlas" in a for a in argv[:3])]


@dataclass(frozen=True)
class Proc:
    """One process as /proc/<pid>/stat shows it; ``start`` (clock ticks after boot) tells a process
    from a later one that reused its pid."""

    pid: int
    ppid: int
    pgid: int
    start: int
    zombie: bool


def _table() -> dict[int, Proc]:
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # Fields after the command: state ppid pgrp session ... starttime (the 20th of them).
        table[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[2]), int(fields[19]),
                                      fields[0] == "Z")
    return table


def descendants(table: dict[int, Proc], roots: list[int]) -> list[Proc]:
    """Every process below ``roots`` in ``table`` (children, their children, ...)."""
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def stop_orphans(root: Path, grace_s: float = ORPHAN_GRACE_S) -> int:
    """Stop the orphaned cells working in ``root`` and everything they started; return how many
    cells. SIGTERM first, to their process groups: a run-cell then leaves its cell unsealed and
    stops its launch's session itself. After ``grace_s``, SIGKILL to what is left of the tree seen
    before, and to the process groups its members lead (launches: their own session, see
    runner.process), so that a launcher's proxies are caught even once reparented away."""
    orphans = orphan_cells(root)
    if not orphans:
        return 0
    table = _table()
    tree = [table[pid] for pid in orphans if pid in table] + descendants(table, orphans)
    ours = {os.getpgrp(), 0, 1}
    led = {p.pgid for p in tree if p.pgid == p.pid} - ours
    for pgid in {table[pid].pgid for pid in orphans if pid in table} - ours:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pgid in led:
        _signal_group(pgid, signal.SIGKILL)
    for proc in _alive(tree):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # SIGKILL is delivered, not done: return once they are gone, so nothing of the killed run
    # still holds a core when the new run's first launch starts.
    deadline = time.monotonic() + KILL_WAIT_S
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(orphans)


def _alive(tree: list[Proc]) -> list[Proc]:
    now = _table()
    return [p for p in tree if (seen := now.get(p.pid)) is not None and seen.start == p.start and not seen.zombie]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def clear_stale(root: Path) -> list[str]:
    """Remove Snakemake locks no live process owns and stop orphaned cells; return what was done.
    Call only while holding :func:`acquire`'s lock."""
    if live_snakemake(root):
        return []
    notes = []
    stopped = stop_orphans(root)
    if stopped:
        notes.append(f"stopped {stopped} cell(s) left running by an interrupted run (they will run again)")
    locks = sorted((root / ".snakemake" / "locks").glob("*.lock"))
    for lock in locks:
        lock.unlink(missing_ok=True)
    if locks:
        notes.append("cleared a Snakemake lock left by an interrupted run (no Snakemake process is alive here)")
    return notes
