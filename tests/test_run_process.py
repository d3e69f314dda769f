"""How a launch is waited for and timed (mpiatlas.runner.process): a blocking wait, a deadline
kill of the whole process group, and ``wall_s`` measured around the child process only.

Real child processes (coreutils ``sleep``, ``sh``), no MPI needed."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from mpiatlas.runner import process
from mpiatlas.runner.lifecycle import CellInterrupted, _catch_stop_signals, _release_stop_signals

SLEEP = shutil.which("sleep") or "/bin/sleep"
SH = shutil.which("sh") or "/bin/sh"


def launch(tmp_path: Path, argv: list[str], timeout_s: float = 60.0) -> tuple[process.Finished, float]:
    """Run ``argv`` through run_launch; also the wall time around the whole call."""
    start = time.perf_counter()
    finished = process.run_launch(argv, dict(os.environ), tmp_path, tmp_path / "out", tmp_path / "err", timeout_s)
    return finished, time.perf_counter() - start


def gone(pid: int) -> bool:
    """The process no longer runs (exited; a zombie not yet reaped by init counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def test_exit_code_output_and_wall_time_of_a_launch(tmp_path: Path) -> None:
    finished, around = launch(tmp_path, [SH, "-c", f"echo out; echo err >&2; {SLEEP} 0.3; exit 3"])
    assert finished.exit_code == 3
    assert (tmp_path / "out").read_text() == "out\n" and (tmp_path / "err").read_text() == "err\n"
    # The child slept 0.3 s; wall_s is its time, inside the call's (what the harness adds is bench/'s figure).
    assert 0.3 <= finished.wall_s <= around


def test_waiting_does_not_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen.wait(timeout=...) sleeps in a loop (up to 50 ms after the child exits); the blocking
    # wait must not sleep at all.
    sleeps: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
    finished, _ = launch(tmp_path, [SLEEP, "0.2"])
    assert finished.exit_code == 0 and finished.wall_s >= 0.2
    assert sleeps == []


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The launcher (sh) starts a "rank" in the background and waits: both must go at the deadline.
    pidfile = tmp_path / "rank.pid"
    argv = [SH, "-c", f"{SLEEP} 60 & echo $! > {pidfile}; wait"]
    finished, around = launch(tmp_path, argv, timeout_s=0.5)
    assert finished.exit_code is None  # timed out
    assert 0.5 <= finished.wall_s < process.TERM_GRACE_S  # TERM sufficed: no KILL grace period
    assert finished.wall_s <= around
    assert wait_gone(int(pidfile.read_text()))


def test_a_launch_that_ignores_term_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "TERM_GRACE_S", 0.5)
    finished, _ = launch(tmp_path, [SH, "-c", f"trap '' TERM; {SLEEP} 60 & wait; {SLEEP} 60"], timeout_s=0.3)
    assert finished.exit_code is None
    assert 0.8 <= finished.wall_s < 10


def test_a_launch_within_its_timeout_is_not_a_timeout(tmp_path: Path) -> None:
    finished, _ = launch(tmp_path, [SLEEP, "0.1"], timeout_s=5.0)
    assert finished.exit_code == 0


def test_a_stop_signal_interrupts_the_wait_and_kills_the_launch(tmp_path: Path) -> None:
    # scancel / Ctrl-C: the runner's handler raises CellInterrupted in the waiting (main) thread.
    pidfile = tmp_path / "rank.pid"
    argv = [SH, "-c", f"{SLEEP} 60 & echo $! > {pidfile}; wait"]
    _catch_stop_signals()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        # The rank sleeps 60 s: without the interruption, launch() would return normally, not raise.
        with pytest.raises(CellInterrupted, match="SIGTERM"):
            launch(tmp_path, argv)
    finally:
        timer.cancel()
        _release_stop_signals()
    assert wait_gone(int(pidfile.read_text()))
