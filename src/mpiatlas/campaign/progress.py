"""Progress of long work: what a running campaign has done so far, and the bar of a command that
walks many files or cells.

The campaign's own record is the raw directory: a cell has a result once its status.json exists
(it appears whole, by rename). Watching that, rather than parsing Snakemake's log, gives the same
numbers under the local and the SLURM profile. Each poll looks only at cells still pending, and
at most ``batch`` of them, so a 10^5-cell campaign costs a bounded number of stat calls a second.

A command that reads many files or cells (import, tidy) shows :func:`progress_bar` instead of a
line per item: a bar on a terminal, nothing at all when stderr is a file or a pipe (a log, a
Snakemake job, a test), and one summary at the end from the command itself.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mpiatlas.matrix import layout

FAILURE_STATUSES = ("failed", "timeout")
REMEASURED_EVERY_S = 10.0


@dataclass
class Progress:
    """Cells of one campaign: which have a result, with which status, and how fast they come."""

    raw: Path
    cell_ids: list[str]
    batch: int = 5000
    statuses: Counter[str] = field(default_factory=Counter)
    # (cell id, status, reason) in the order this run saw them finish
    finished_now: list[tuple[str, str, str]] = field(default_factory=list)
    _pending: list[str] = field(default_factory=list)
    _cursor: int = 0
    _started: float = field(default_factory=time.monotonic)
    already_done: int = 0
    # Perturbed launches set aside and measured again (runner.run), counted under <results>/perturbed
    # at most every REMEASURED_EVERY_S (a walk of that tree; a shared file system pays per directory).
    remeasured: int = 0
    _remeasured_at: float | None = None

    def __post_init__(self) -> None:
        self.cell_ids = list(self.cell_ids)
        self._pending = list(self.cell_ids)
        self._known = set(self.cell_ids)
        self.poll(limit=None)
        self.already_done = self.done
        self.finished_now.clear()

    @property
    def total(self) -> int:
        return len(self.cell_ids)

    @property
    def done(self) -> int:
        return sum(self.statuses.values())

    @property
    def remaining(self) -> int:
        return self.total - self.done

    def plan_more(self, cell_ids: Iterable[str]) -> None:
        """Count cells planned after the start too (an adaptive campaign's later rounds): the ids not
        known yet join the campaign's cells and the pending ones."""
        new = [c for c in cell_ids if c not in self._known]
        self._known.update(new)
        self.cell_ids += new
        self._pending += new

    def poll(self, limit: int | None = -1) -> None:
        """Look at up to ``limit`` pending cells (default: ``batch``; None: all of them), going
        round the pending list so that every cell is seen within a few polls."""
        limit = self.batch if limit == -1 else limit
        n = len(self._pending)
        self._count_remeasured(every_s=0.0 if limit is None else REMEASURED_EVERY_S)
        if n == 0:
            return
        count = n if limit is None else min(limit, n)
        finished: set[int] = set()
        for i in ((self._cursor + k) % n for k in range(count)):
            status = read_status(self.raw / self._pending[i])
            if status is not None:
                finished.add(i)
                self.statuses[status[0]] += 1
                self.finished_now.append((self._pending[i], *status))
        if finished:
            self._pending = [c for i, c in enumerate(self._pending) if i not in finished]
        self._cursor = (self._cursor + count) % max(1, len(self._pending))

    def _count_remeasured(self, every_s: float) -> None:
        now = time.monotonic()
        if self._remeasured_at is None or now - self._remeasured_at >= every_s:
            self.remeasured = layout.count_perturbed_attempts(self.raw.parent)
            self._remeasured_at = now

    def eta_s(self) -> float | None:
        """Seconds left at this run's pace (None until a cell has finished in this run)."""
        finished = len(self.finished_now)
        if finished == 0:
            return None
        return (time.monotonic() - self._started) / finished * self.remaining

    def same_failure(self, threshold: int) -> tuple[str, str] | None:
        """(reason, cell id) when the first ``threshold`` cells this run finished all failed for
        one reason: the campaign should stop, since the rest will most likely fail the same way."""
        if threshold <= 0 or len(self.finished_now) < threshold:
            return None
        first = self.finished_now[:threshold]
        reasons = {reason for _, status, reason in first if status in FAILURE_STATUSES}
        if len(reasons) == 1 and all(status in FAILURE_STATUSES for _, status, _ in first):
            return reasons.pop(), first[0][0]
        return None

    def summary_line(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.statuses.items(), key=lambda kv: -kv[1]))
        missing = f", {self.remaining} not run" if self.remaining else ""
        again = f"; {self.remeasured} perturbed launch(es) measured again" if self.remeasured else ""
        return f"cells: {counts or 'none finished'}{missing} (of {self.total}){again}"


def read_status(cell_dir: Path) -> tuple[str, str] | None:
    """(status, reason) of a sealed cell, or None while it has no result (or lost its node: a
    re-run runs it again, runner.run)."""
    path = cell_dir / layout.STATUS
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError):
        return None
    if data.get(layout.NODE_LOST) is not None:
        return None
    return str(data.get("status")), str(data.get("reason") or "")


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "estimating"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


Advance = Callable[[int], None]


def _no_advance(count: int) -> None:
    """The bar's stand-in off a terminal: progress is not printed there."""


@contextmanager
def progress_bar(total: int, what: str) -> Iterator[Advance]:
    """A transient bar of ``total`` ``what`` (e.g. "files") on stderr, when stderr is a terminal;
    yields ``advance(count)``, safe to call from worker threads. Off a terminal it yields a
    function that does nothing, and rich is not even imported (it costs ~45 ms of start-up)."""
    if total <= 0 or not sys.stderr.isatty():
        yield _no_advance
        return
    from rich import console, progress  # the tidy and import rules run off a terminal: only here

    # transient: the bar goes once the work is done, leaving only the command's summary.
    columns = (progress.TextColumn(what), progress.BarColumn(), progress.MofNCompleteColumn(),
               progress.TimeRemainingColumn())
    with progress.Progress(*columns, console=console.Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda count: bar.advance(task, count)
