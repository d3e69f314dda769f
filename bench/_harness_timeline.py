"""bench/harness.py part 5 helpers: where a campaign's wall time goes, step by step.

``mpiatlas campaign`` runs as users run it (its own process, the local profile) while this process
watches, without touching the run: the command's output lines (timed as they arrive) and the
campaign's files as they appear (polled every ``POLL_S``). Each step ends when its mark is first
seen; a step's time is its mark less the previous step's:

  preflight        the run lock, the prerequisite checks and the plan, up to ``snakemake log:``
                   (the line printed just before Snakemake starts)
  snakemake start  Snakemake's interpreter, imports, the workflow's parse and the DAG, up to the
                   first job's log file (logs/**, Snakemake's own log aside)
  setup jobs       stack records, kernel builds, the cells manifest, up to a cell group's log
  cell groups      every group job, up to the last groups/<group>.json; Σ launch walls (the
                   cells' provenance ``wall_s``) beside it, and the groups' own cost: the rest
  tidy, aggregate, fit, report   up to tidy/cells.parquet, tidy/imb_summary.parquet,
                   fits/hockney.json, report.html
  snakemake exit   up to the Snakemake process's end (looked for in /proc once the report is there)
  finish           up to the command's exit (the summary it prints)

A file is seen at most ``POLL_S`` after it appears; the marks of steps that run side by side
(the limits probe beside the cell groups) are what the user waits for, not each job's own time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from _harness_campaign import CAMPAIGN_CONFIG, BenchError, CampaignRun, sealed_launches, venv_env

POLL_S = 0.02
STEPS = ("preflight", "snakemake start", "setup jobs", "cell groups", "tidy", "aggregate", "fit", "report",
         "snakemake exit", "finish")
SNAKEMAKE_LINE = "snakemake log:"


@dataclass
class Timeline:
    """Seconds from the command's start to each mark, and the step times they give."""

    marks: dict[str, float] = field(default_factory=dict)
    launch_walls_s: float = 0.0
    wall_s: float = 0.0

    def steps(self) -> dict[str, float | None]:
        """Each step's seconds (None: its mark was never seen, e.g. a step the run skipped)."""
        out: dict[str, float | None] = {}
        previous = 0.0
        for step in STEPS:
            mark = self.wall_s if step == "finish" else self.marks.get(step)
            out[step] = None if mark is None else max(0.0, mark - previous)
            previous = mark if mark is not None else previous
        return out

    def groups_own_s(self) -> float | None:
        """The cell groups' step less the launches in it: the groups' start-ups, judging, sealing."""
        groups = self.steps().get("cell groups")
        return None if groups is None else groups - self.launch_walls_s


class _Watcher(threading.Thread):
    """Polls the campaign's files and records when each step's mark first appears."""

    def __init__(self, results: Path, start: float, work: Path) -> None:
        super().__init__(daemon=True)
        self.results, self.t0, self.stop = results, start, threading.Event()
        self.marks: dict[str, float] = {}
        self.groups_seen: set[str] = set()
        self.work = work.resolve()
        self.files = {"tidy": results / "tidy" / "cells.parquet", "aggregate": results / "tidy" / "imb_summary.parquet",
                      "fit": results / "fits" / "hockney.json", "report": results / "report.html"}

    def _mark(self, name: str) -> None:
        self.marks.setdefault(name, time.monotonic() - self.t0)

    def _poll(self) -> None:
        logs = self.results / "logs"
        if "snakemake start" not in self.marks and logs.is_dir() and any(
                p.is_file() and p.name != "snakemake.log" for p in logs.rglob("*")):
            self._mark("snakemake start")
        if "setup jobs" not in self.marks and (logs / "groups").is_dir() and any((logs / "groups").iterdir()):
            self._mark("setup jobs")
        groups = self.results / "groups"
        if groups.is_dir():
            new = {p.name for p in groups.iterdir()} - self.groups_seen
            if new:  # the last group to finish ends the step
                self.groups_seen |= new
                self.marks["cell groups"] = time.monotonic() - self.t0
        for name, path in self.files.items():
            if name not in self.marks and path.exists():
                self._mark(name)
        if "report" in self.marks and "snakemake exit" not in self.marks and not self._snakemake_alive():
            self._mark("snakemake exit")

    def _snakemake_alive(self) -> bool:
        """A Snakemake process (``-m snakemake`` or mpiatlas's start module) working in the work directory."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")[:3]
                if not any(b"snakemake" in a for a in argv):
                    continue
                if Path(os.readlink(entry / "cwd")) == self.work:
                    return True
            except OSError:
                continue
        return False

    def run(self) -> None:
        while not self.stop.is_set():
            self._poll()
            self.stop.wait(POLL_S)
        self._poll()


def _read_lines(stream: IO[str], log: IO[str], marks: dict[str, float], start: float) -> None:
    for line in stream:
        log.write(line)
        if SNAKEMAKE_LINE in line:
            marks.setdefault("preflight", time.monotonic() - start)


def run_timed(work: Path, name: str, timeout_s: float, source: Path | None = None) -> tuple[CampaignRun, Timeline]:
    """``mpiatlas campaign`` in ``work`` (a harness work directory), timed step by step; with
    ``source``, the mpiatlas package under that directory (``<tree>/src`` of a ``git archive``)
    instead of this checkout's, for it and every rule it starts (PYTHONPATH comes before the
    installed package)."""
    env = venv_env() | ({"PYTHONPATH": str(source)} if source else {})
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", CAMPAIGN_CONFIG, "--directory", str(work)]
    results = work / "results" / name
    log_path = work / "campaign.out"
    start = time.monotonic()
    watcher = _Watcher(results, start, work)
    watcher.start()
    line_marks: dict[str, float] = {}
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, log, line_marks, start), daemon=True)
        reader.start()
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise BenchError(f"campaign {name} did not finish within {timeout_s:.0f} s (output: {log_path})") from None
        wall = time.monotonic() - start
        reader.join()
    watcher.stop.set()
    watcher.join()
    if returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise BenchError(f"campaign {name} exited {returncode} after {wall:.1f} s; end of {log_path}:\n{tail}")
    run = CampaignRun(name, work, wall, returncode, sealed_launches(results / "raw"))
    timeline = Timeline({**watcher.marks, **line_marks}, run.launch_wall_s, wall)
    return run, timeline
