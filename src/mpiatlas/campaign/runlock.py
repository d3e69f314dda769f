"""One campaign at a time per checkout, and recovery from a run that was killed.

Two campaigns on one 2..256-core node would skew each other's timings, and two Snakemake runs on
one directory would mix results: ``mpiatlas campaign`` holds an exclusive ``flock`` on
``.mpiatlas/campaign.lock`` for its whole run. The kernel drops a flock when its owner dies, so a
``kill -9`` can never leave this lock stale.

Snakemake's own lock (``.snakemake/locks``) does stay behind after a ``kill -9``, and the next run
then refuses with "Directory cannot be locked". Holding our lock proves no other ``mpiatlas
campaign`` runs here; a lock is stale when, besides, no live Snakemake process works in this
directory. Cells that the killed run had started may still be running as orphans; they are
stopped (their cells stay unsealed, so they run again) before the new run begins.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = Path(".mpiatlas") / "campaign.lock"


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
    """Pids of Snakemake processes working in ``root`` (other than this process)."""
    root = root.resolve()
    return [pid for pid, cwd, argv in _processes()
            if pid != os.getpid() and cwd == root and any(Path(a).name == "snakemake" or a == "snakemake"
                                                          for a in argv[:3])]


def orphan_cells(root: Path) -> list[int]:
    """Pids of ``mpiatlas run-cell`` processes working in ``root``: with no Snakemake alive there,
    they belong to a run that was killed."""
    root = root.resolve()
    return [pid for pid, cwd, argv in _processes()
            if pid != os.getpid() and cwd == root and "run-cell" in argv and any("mpiatlas" in a for a in argv[:3])]


def clear_stale(root: Path) -> list[str]:
    """Remove Snakemake locks no live process owns and stop orphaned cells; return what was done.
    Call only while holding :func:`acquire`'s lock."""
    if live_snakemake(root):
        return []
    notes = []
    orphans = orphan_cells(root)
    for pid in orphans:
        try:
            os.killpg(os.getpgid(pid), signal.SIGTERM)
        except ProcessLookupError:
            continue
    if orphans:
        _wait_gone(orphans, 30.0)
        notes.append(f"stopped {len(orphans)} cell(s) left running by an interrupted run (they will run again)")
    locks = sorted((root / ".snakemake" / "locks").glob("*.lock"))
    for lock in locks:
        lock.unlink(missing_ok=True)
    if locks:
        notes.append("cleared a Snakemake lock left by an interrupted run (no Snakemake process is alive here)")
    return notes


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if not alive:
            return
        time.sleep(0.2)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
