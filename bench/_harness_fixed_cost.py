"""bench/harness.py part 5: the fixed cost of a campaign, step by step, beside ReFrame.

For each size (cells), ``rounds`` alternations of: the campaign under mpiatlas, timed per step
(bench/_harness_timeline.py), then ReFrame on exactly its launches (bench/_harness_reframe.py).
Each campaign is IMB PingPong on Intel MPI (PyPI), 2 ranks, one cell per repetition: up to 12
cells on shm alone, more split evenly between shm and ofi-tcp. The median of each side over the
rounds is compared: a drifting load on a shared machine hits both sides of a round alike.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness_campaign import CAMPAIGN_CONFIG, make_workdir, pingpong_launches
from _harness_reframe import run_reframe
from _harness_timeline import STEPS, Timeline, run_timed

SMALL_TARGET = 1.0  # 6 launches: mpiatlas wall <= ReFrame wall
LARGE_TARGET = 1.10  # 150 cells: campaign wall / Σ cell walls
ONE_TRANSPORT_UP_TO = 12


def campaign_config(cells: int) -> dict[str, Any]:
    """A campaign of ``cells`` IMB PingPong cells (one per repetition and transport)."""
    transports = ["shm"] if cells <= ONE_TRANSPORT_UP_TO else ["shm", "ofi-tcp"]
    if cells % len(transports):
        raise ValueError(f"{cells} cells do not split evenly over {transports}")
    return {
        "campaign": {"name": f"fixed-cost-{cells}", "repetitions": cells // len(transports), "timeout_s": 120},
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
        return {"cells": self.cells, "rounds": [
            {"wall_s": round(r.timeline.wall_s, 2), "launch_walls_s": round(r.timeline.launch_walls_s, 2),
             "steps_s": {k: None if v is None else round(v, 2) for k, v in r.timeline.steps().items()},
             "reframe_wall_s": round(r.reframe_wall_s, 2),
             "reframe_launch_walls_s": round(r.reframe_launch_walls_s, 2)} for r in self.rounds]}


def measure(cells: int, rounds: int, timeout_s: float, tmp: Path, say: Any) -> SizeResult:
    config = campaign_config(cells)
    name = config["campaign"]["name"]
    result = SizeResult(cells)
    for rnd in range(rounds):
        say(f"  {cells} cells, round {rnd + 1}/{rounds}: mpiatlas campaign ...")
        run, timeline = run_timed(make_workdir(tmp / f"{cells}-mpiatlas{rnd}", config), name, timeout_s)
        launches = pingpong_launches(run)
        if len(launches) != cells:
            raise RuntimeError(f"{name}: {len(launches)} PingPong cells ended ok, not {cells}")
        say(f"    wall {timeline.wall_s:.2f} s, Σ launch walls {timeline.launch_walls_s:.2f} s; ReFrame ...")
        rfm = run_reframe(launches, run.work / CAMPAIGN_CONFIG, tmp / f"{cells}-reframe{rnd}", timeout_s)
        if not rfm.passed == rfm.cases == cells:
            raise RuntimeError(f"ReFrame: {rfm.passed} of {rfm.cases} cases passed, {cells} launches")
        say(f"    ReFrame wall {rfm.wall_s:.2f} s, Σ launch walls {sum(rfm.launch_walls.values()):.2f} s")
        result.rounds.append(Round(timeline, cells, rfm.wall_s, sum(rfm.launch_walls.values())))
    return result


def table(results: list[SizeResult]) -> list[str]:
    """The per-step timeline of each size (medians over the rounds), ReFrame's wall beside it."""
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    head = ["step (s, median)", *(f"{r.cells} cells" for r in results)]
    rows = [[step, *(cell(r.step(step)) for r in results)] for step in STEPS]
    rows.append(["  of which launches (Σ)", *(cell(r.median(lambda x: x.timeline.launch_walls_s)) for r in results)])
    rows.append(["mpiatlas wall", *(cell(r.wall_s) for r in results)])
    rows.append(["wall / Σ cell walls", *(f"{r.ratio:.3f}" for r in results)])
    rows.append(["ReFrame wall, same launches", *(cell(r.reframe_wall_s) for r in results)])
    rows.append(["ReFrame Σ launch walls", *(cell(r.median(lambda x: x.reframe_launch_walls_s)) for r in results)])
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


def fixed_cost(sizes: list[int], rounds: int, timeout_s: float, tmp: Path, say: Any) -> list[SizeResult]:
    results = [measure(cells, rounds, timeout_s, tmp, say) for cells in sizes]
    for line in table(results):
        say(line)
    return results
