"""bench/harness.py part 5: the fixed cost of a campaign, step by step, beside ReFrame.

For each size (cells), ``rounds`` alternations of: the campaign under mpiatlas, timed per step
(bench/_harness_timeline.py), then ReFrame on exactly its launches (bench/_harness_reframe.py).
Each campaign is IMB PingPong on Intel MPI (PyPI), 2 ranks, one cell per repetition: up to 12
cells on shm alone, more split evenly between shm and ofi-tcp. The median of each side over the
rounds is compared: a drifting load on a shared machine hits both sides of a round alike.

Re-measures are off (``campaign.remeasure: 0``, no later round) unless ``remeasure`` is set: on a
shared machine every launch is judged perturbed, and the re-measures (with their waits for a quiet
machine, up to a minute a pass) would measure the other tenants, not the harness. The judgement
itself still runs: each launch's quality is recorded and the fits leave perturbed ones out.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness_campaign import CAMPAIGN_CONFIG, BenchError, make_workdir, pingpong_launches
from _harness_reframe import run_reframe
from _harness_timeline import STEPS, Timeline, run_timed

SMALL_TARGET = 1.0  # 6 launches: mpiatlas wall <= ReFrame wall
LARGE_TARGET = 1.10  # 150 cells: campaign wall / Σ cell walls
ONE_TRANSPORT_UP_TO = 12


def campaign_config(cells: int, remeasure: bool = False) -> dict[str, Any]:
    """A campaign of ``cells`` IMB PingPong cells (one per repetition and transport); with
    ``remeasure``, the default re-measures of perturbed launches."""
    transports = ["shm"] if cells <= ONE_TRANSPORT_UP_TO else ["shm", "ofi-tcp"]
    if cells % len(transports):
        raise ValueError(f"{cells} cells do not split evenly over {transports}")
    again = {} if remeasure else {"remeasure": 0, "remeasure_later": {"launches": 0}}
    return {
        "campaign": {"name": f"fixed-cost-{cells}", "repetitions": cells // len(transports), "timeout_s": 120,
                     **again},
        "stacks": {"intelmpi": {"kind": "intelmpi", "source": "pypi", "transports": transports}},
        "mappings": ["core"],
        "processes": [2],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 16], "time_s": 0.2, "mem_gb": 0.5, "iterations": 200},
    }


@dataclass
class Round:
    timeline: Timeline
    cells: int
    reframe_wall_s: float
    reframe_launch_walls_s: float


@dataclass
class SizeResult:
    cells: int
    rounds: list[Round] = field(default_factory=list)
    baseline: list[Timeline] = field(default_factory=list)  # the same campaign under --baseline-src

    def median(self, value: Any) -> float:
        return statistics.median(value(r) for r in self.rounds)

    @property
    def wall_s(self) -> float:
        return self.median(lambda r: r.timeline.wall_s)

    @property
    def ratio(self) -> float:
        return self.median(lambda r: r.timeline.wall_s / r.timeline.launch_walls_s)

    @property
    def reframe_wall_s(self) -> float:
        return self.median(lambda r: r.reframe_wall_s)

    def step(self, name: str) -> float | None:
        values = [r.timeline.steps()[name] for r in self.rounds]
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    def details(self) -> dict[str, Any]:
        return {"cells": self.cells, "baseline": [
            {"wall_s": round(t.wall_s, 2), "launch_walls_s": round(t.launch_walls_s, 2),
             "steps_s": {k: None if v is None else round(v, 2) for k, v in t.steps().items()}}
            for t in self.baseline], "rounds": [
            {"wall_s": round(r.timeline.wall_s, 2), "launch_walls_s": round(r.timeline.launch_walls_s, 2),
             "steps_s": {k: None if v is None else round(v, 2) for k, v in r.timeline.steps().items()},
             "reframe_wall_s": round(r.reframe_wall_s, 2),
             "reframe_launch_walls_s": round(r.reframe_launch_walls_s, 2)} for r in self.rounds]}


def measure(cells: int, rounds: int, timeout_s: float, tmp: Path, say: Any, remeasure: bool,
            baseline: Path | None) -> SizeResult:
    config = campaign_config(cells, remeasure)
    name = config["campaign"]["name"]
    result = SizeResult(cells)
    for rnd in range(rounds):
        if baseline is not None:
            say(f"  {cells} cells, round {rnd + 1}/{rounds}: mpiatlas campaign, baseline {baseline} ...")
            work = make_workdir(tmp / f"{cells}-baseline{rnd}", config, baseline)
            _, before = run_timed(work, name, timeout_s, baseline / "src")
            say(f"    wall {before.wall_s:.2f} s, Σ launch walls {before.launch_walls_s:.2f} s")
            result.baseline.append(before)
        say(f"  {cells} cells, round {rnd + 1}/{rounds}: mpiatlas campaign ...")
        run, timeline = run_timed(make_workdir(tmp / f"{cells}-mpiatlas{rnd}", config), name, timeout_s)
        launches = pingpong_launches(run)
        if len(launches) != cells:
            raise RuntimeError(f"{name}: {len(launches)} PingPong cells ended ok, not {cells}")
        say(f"    wall {timeline.wall_s:.2f} s, Σ launch walls {timeline.launch_walls_s:.2f} s; ReFrame ...")
        try:
            rfm = run_reframe(launches, run.work / CAMPAIGN_CONFIG, tmp / f"{cells}-reframe{rnd}", timeout_s)
        except BenchError as exc:  # e.g. an IMB time-out under a load spike fails its sanity check
            say(f"    ReFrame failed, its side of this round is not measured: {str(exc).splitlines()[0]}")
            result.rounds.append(Round(timeline, cells, math.nan, math.nan))
            continue
        if not rfm.passed == rfm.cases == cells:
            raise RuntimeError(f"ReFrame: {rfm.passed} of {rfm.cases} cases passed, {cells} launches")
        say(f"    ReFrame wall {rfm.wall_s:.2f} s, Σ launch walls {sum(rfm.launch_walls.values()):.2f} s")
        result.rounds.append(Round(timeline, cells, rfm.wall_s, sum(rfm.launch_walls.values())))
    return result


def _median_step(timelines: list[Timeline], name: str) -> float | None:
    known = [v for t in timelines if (v := t.steps()[name]) is not None]
    return statistics.median(known) if known else None


def table(results: list[SizeResult]) -> list[str]:
    """The per-step timeline of each size (medians over the rounds), the baseline's beside it when
    there is one, and ReFrame's wall on the same launches."""
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    head = ["step (s, median)"]
    for r in results:
        head += [f"{r.cells} cells, baseline", f"{r.cells} cells"] if r.baseline else [f"{r.cells} cells"]

    def row(label: str, now: Any, before: Any) -> list[str]:
        out = [label]
        for r in results:
            out += [before(r), now(r)] if r.baseline else [now(r)]
        return out

    rows = [row(step, lambda r, s=step: cell(r.step(s)), lambda r, s=step: cell(_median_step(r.baseline, s)))
            for step in STEPS]
    rows.append(row("  of which launches (Σ)", lambda r: cell(r.median(lambda x: x.timeline.launch_walls_s)),
                    lambda r: cell(statistics.median(t.launch_walls_s for t in r.baseline))))
    rows.append(row("mpiatlas wall", lambda r: cell(r.wall_s),
                    lambda r: cell(statistics.median(t.wall_s for t in r.baseline))))
    rows.append(row("wall / Σ cell walls", lambda r: f"{r.ratio:.3f}",
                    lambda r: f"{statistics.median(t.wall_s / t.launch_walls_s for t in r.baseline):.3f}"))
    rows = [[*row_, *([] if len(row_) == len(head) else [""] * (len(head) - len(row_)))] for row_ in rows]
    rows.append(row("ReFrame wall, same launches", lambda r: cell(r.reframe_wall_s), lambda r: ""))
    rows.append(row("ReFrame Σ launch walls", lambda r: cell(r.median(lambda x: x.reframe_launch_walls_s)),
                    lambda r: ""))
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows]]


def verdicts(result: SizeResult) -> tuple[str, str, str, bool]:
    """(what, measured, target, ok) of one size: the small one against ReFrame, the large one's ratio."""
    if result.cells <= ONE_TRANSPORT_UP_TO:
        return (f"{result.cells} launches: mpiatlas wall vs ReFrame wall (median of {len(result.rounds)})",
                f"{result.wall_s:.2f} s vs {result.reframe_wall_s:.2f} s", "mpiatlas <= ReFrame",
                result.wall_s <= SMALL_TARGET * result.reframe_wall_s)
    return (f"{result.cells} cells: campaign wall / Σ cell walls (median of {len(result.rounds)})",
            f"{result.ratio:.3f}", f"<= {LARGE_TARGET:.2f}", result.ratio <= LARGE_TARGET)


def fixed_cost(sizes: list[int], rounds: int, timeout_s: float, tmp: Path, say: Any,
               remeasure: bool = False, baseline: Path | None = None) -> list[SizeResult]:
    results = [measure(cells, rounds, timeout_s, tmp, say, remeasure, baseline) for cells in sizes]
    for line in table(results):
        say(line)
    return results
