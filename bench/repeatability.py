#!/usr/bin/env python3
"""How repeatable is the headline? The default campaign twice, side by side in one run: once on the
machine as it is, once with a CPU hog on every cpu during part of it.

  .venv/bin/python bench/repeatability.py                  # config/config.yaml, hog on every cpu
  .venv/bin/python bench/repeatability.py --config config/test/tiny.yaml --json out.json

The hog is one busy process per cpu, pinned there; it starts when the campaign has sealed
``--hog-from`` of its cells and stops once it has sealed ``--hog-to`` (fractions of the planned cells,
counted from the raw directory as the campaign writes it: events, not a clock), so it lands on the
same stretch of the campaign whatever the machine's speed. Printed:

* each run's headline (λ and B of the first stack's PingPong fit, with their 95 % intervals: the
  campaign's closing lines) and the ratio hogged / clean of λ and of B;
* how many launches each run judged perturbed and measured again (provenance.json's ``machine``
  block, status.json's ``remeasured``), how many of those in the later round after a wait for a quiet
  machine (``quiet_wait``), and how many stayed perturbed;
* the machine probe's own cost per launch: its sampler's cpu time and its /proc snapshots' cpu time
  (median and maximum over the run's launches), against the launches' median wall time.

Target: the two headlines within 25 % of each other (issue #23). Both runs share the checkout's
stacks and the user's caches (limits, kernel builds), so a first campaign's downloads do not count.

Quiet mode (issue #33), ``--quiet K``: the campaign K times (K ≥ 5 for the targets), no hog. For each
headline figure (λ, the asymptotic B and the peak B of the first stack's PingPong fit, each with its
95 % interval) it prints the between-run CV, max/min and the coverage: the share of ordered pairs of
runs (i ≠ j) whose run i's interval holds run j's estimate (mpiatlas.stats.agreement). Targets:
coverage ≥ 80 % and max/min ≤ 1.25 for each figure; exit status 1 when one is missed.

  .venv/bin/python bench/repeatability.py --quiet 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from _harness_campaign import REPO, CampaignRun, load_config, make_workdir, run_campaign

TARGET = 0.25


def sealed_count(raw: Path) -> int:
    """Sealed cells under ``raw`` (status.json outside a scratch directory)."""
    if not raw.is_dir():
        return 0
    try:
        return sum(1 for p in raw.rglob("status.json")
                   if not any(part.startswith(".") for part in p.relative_to(raw).parts))
    except OSError:  # a scratch directory renamed under the walk (pathlib 3.11 raises): look again later
        return 0


def planned_cells(work: Path) -> int:
    """The campaign's cells as the workflow expands them (adaptive rounds may add more)."""
    from mpiatlas.campaign.auto_plan import load  # the campaign may say `auto`: planned as the campaign planned it
    from mpiatlas.programs import expand

    return len(expand(load(work / "config" / "campaign.yaml")))


class Hog:
    """A busy loop pinned on each cpu while the campaign's sealed cells are within [start, stop)."""

    SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"

    def __init__(self, raw: Path, start: int, stop: int) -> None:
        self.raw, self.start, self.stop = raw, start, stop
        self.done = threading.Event()
        self.spinners: list[subprocess.Popen] = []
        self.cells_at_start = self.cells_at_stop = None
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Hog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        self._stop_spinners()

    def _watch(self) -> None:
        # The campaign's own progress decides: poll the raw directory (cheap: one walk per second).
        while not self.done.wait(1.0):
            sealed = sealed_count(self.raw)
            if not self.spinners and self.cells_at_start is None and sealed >= self.start:
                self.cells_at_start = sealed
                self.spinners = [subprocess.Popen([sys.executable, "-c", self.SPIN, str(cpu)])
                                 for cpu in sorted(os.sched_getaffinity(0))]
            elif self.spinners and sealed >= self.stop:
                self.cells_at_stop = sealed
                self._stop_spinners()

    def _stop_spinners(self) -> None:
        for proc in self.spinners:
            proc.kill()
            proc.wait()
        self.spinners = []


def headline(run: CampaignRun, label: str | None = None) -> dict[str, Any]:
    """The fit the campaign's closing lines print (the first stack/transport's PingPong fit), or the
    fit of ``label`` (the clean run's headline: the two runs are compared on one series)."""
    from mpiatlas.commands.campaign import headline as closing_lines
    from mpiatlas.campaign.auto_plan import load  # the campaign may say `auto`: planned as the campaign planned it

    config = load(run.work / "config" / "campaign.yaml")
    order = [(label, t) for label, s in config.stacks.items() for t in s.transports]
    fits = json.loads((run.work / "results" / run.name / "fits" / "hockney.json").read_text())
    results = run.work / "results" / run.name
    lines = closing_lines(results / "fits" / "hockney.json", order, results / "tidy" / "cells.parquet")
    rank = {key: i for i, key in enumerate(order)}
    pingpong = [f for f in fits if f.get("benchmark") in ("PingPong", "pingpong") and f.get("latency_us")]
    def label_of(fit: dict[str, Any]) -> str:
        return fit.get("label") or f"{fit.get('stack')}/{fit.get('transport')}"

    if label is not None:
        pingpong = [f for f in pingpong if label_of(f) == label]
    if not pingpong:  # every launch of the series left perturbed: the closing lines say so, no ratio
        return {"label": label or "{}/{}".format(*order[0]), **{key: None for key, _ in FIGURES},
                **{ci: None for _, ci in FIGURES}, "ci_method": None, "n_launches": None, "ci_warning": None,
                "lines": lines}
    first = min(pingpong, key=lambda f: rank.get((str(f.get("stack")), str(f.get("transport"))), len(rank)))
    return {"label": label_of(first), **{key: first.get(key) for key, _ in FIGURES},
            **{ci: first.get(ci) for _, ci in FIGURES}, "ci_method": first.get("ci_method"),
            "n_launches": first.get("n_launches"), "ci_warning": first.get("ci_warning"), "lines": lines}


# The headline figures and their interval keys (fits/hockney.json), each one fixed estimand.
FIGURES = (("latency_us", "latency_ci_us"), ("asymptotic_bandwidth_MBps", "asymptotic_bandwidth_ci_MBps"),
           ("peak_bandwidth_MBps", "peak_bandwidth_ci_MBps"))


def launch_facts(run: CampaignRun) -> dict[str, Any]:
    """Perturbed, re-measured and still-perturbed launches, and the probe's cost per launch."""
    statuses = [json.loads(Path(r["_path"]).with_name("status.json").read_text()) for r in run.launches]
    probes = [(r.get("machine") or {}).get("probe") or {} for r in run.launches]
    sampler = [float(p.get("sampler_cpu_s") or 0.0) for p in probes if p]
    snapshots = [float(p.get("snapshot_cpu_s") or 0.0) for p in probes if p]
    walls = [float(r["wall_s"]) for r in run.launches if r.get("wall_s")]
    remeasured = sum(len(s.get("remeasured") or []) for s in statuses)
    return {"launches": len(run.launches) + remeasured, "cells": len(run.launches),
            "perturbed_then_remeasured": remeasured,
            "still_perturbed": sum(1 for s in statuses if s.get("quality") == "perturbed"),
            # The later re-measure round (campaign.remeasure_later): cells relaunched after a wait for a quiet machine.
            "later_round_cells": sum(1 for s in statuses if s.get("quiet_wait")),
            "quiet_wait_s_total": quiet_wait_total(statuses),
            "probe_cpu_ms_median": round(1e3 * statistics.median([a + b for a, b in zip(sampler, snapshots)]), 3)
            if sampler else None,
            "probe_cpu_ms_max": round(1e3 * max(a + b for a, b in zip(sampler, snapshots)), 3) if sampler else None,
            "launch_wall_ms_median": round(1e3 * statistics.median(walls), 1) if walls else None,
            "campaign_wall_s": round(run.wall_s, 1)}


def quiet_wait_total(statuses: list[dict[str, Any]]) -> float:
    """Seconds the later round waited for a quiet machine: one wait per pass over a group, shared by
    the pass's cells and recorded with each launch of it (final, or set aside), so counted once each."""
    waits = [s.get("quiet_wait") for s in statuses] + [a.get("quiet_wait") for s in statuses
                                                       for a in s.get("remeasured") or []]
    distinct = {json.dumps(w, sort_keys=True): w for w in waits if w}
    return round(sum(float(w["waited_s"]) for w in distinct.values()), 1)


def one_run(config: dict[str, Any], work: Path, timeout_s: float, hog: tuple[float, float] | None,
            label: str | None = None) -> dict[str, Any]:
    name = config["campaign"]["name"]
    make_workdir(work, config)
    if hog is None:
        run = run_campaign(work, name, timeout_s)
        return {"hog": None, "headline": headline(run), **launch_facts(run)}
    cells = planned_cells(work)
    with Hog(work / "results" / name / "raw", int(hog[0] * cells), int(hog[1] * cells)) as spinning:
        run = run_campaign(work, name, timeout_s)
    window = {"from_cells": spinning.cells_at_start, "to_cells": spinning.cells_at_stop, "planned_cells": cells,
              "cpus": len(os.sched_getaffinity(0))}
    return {"hog": window, "headline": headline(run, label), **launch_facts(run)}


def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    """hogged / clean of one headline figure; None when a run has no trusted fit of the series."""
    if a["headline"][key] is None or b["headline"][key] is None:
        return None
    return round(b["headline"][key] / a["headline"][key], 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--hog-from", type=float, default=0.2, help="fraction of cells sealed when the hog starts")
    parser.add_argument("--hog-to", type=float, default=0.6, help="fraction of cells sealed when it stops")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per campaign, seconds")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the two campaigns' work directories")
    parser.add_argument("--quiet", type=int, metavar="K", help="run the campaign K times without a hog and "
                        "print each headline figure's between-run CV, max/min and interval coverage")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    if args.quiet is not None:
        return quiet(config, args)
    runs = []
    tmp = tempfile.mkdtemp(prefix="mpiatlas-repeat-")
    try:
        for name, hog in (("clean", None), ("hogged", (args.hog_from, args.hog_to))):
            print(f"running {config['campaign']['name']} ({name}) ...", flush=True)
            same = runs[0]["headline"]["label"] if runs else None
            runs.append({"run": name, **one_run(config, Path(tmp) / name, args.timeout, hog, same)})
    finally:
        if args.keep:
            print(f"work directories kept under {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    clean, hogged = runs
    figures = {"config": str(args.config), "runs": runs,
               "latency_ratio": ratio(clean, hogged, "latency_us"),
               "bandwidth_ratio": ratio(clean, hogged, "asymptotic_bandwidth_MBps")}
    known = [r for r in (figures["latency_ratio"], figures["bandwidth_ratio"]) if r is not None]
    worst = max((abs(r - 1) for r in known), default=None)
    figures["verdict"] = "FAIL (no trusted fit of the series)" if worst is None else "PASS" if worst <= TARGET else "FAIL"
    for run in runs:
        hog = run["hog"]
        where = (f"hog on {hog['cpus']} cpus from {hog['from_cells']} to {hog['to_cells']} of "
                 f"{hog['planned_cells']} cells sealed") if hog else "no hog"
        print(f"\n{run['run']} ({where}; campaign {run['campaign_wall_s']} s):")
        for line in run["headline"]["lines"]:
            print(f"  {line}")
        print(f"  launches: {run['launches']} for {run['cells']} cells; {run['perturbed_then_remeasured']} "
              f"perturbed and measured again, {run['still_perturbed']} still perturbed; {run['later_round_cells']} cells "
              f"re-measured in the later round after {run['quiet_wait_s_total']} s of waiting for a quiet machine")
        print(f"  probe cost per launch: {run['probe_cpu_ms_median']} ms of cpu (median; max "
              f"{run['probe_cpu_ms_max']} ms) against a median launch of {run['launch_wall_ms_median']} ms")
    print(f"\nheadline hogged / clean: λ {figures['latency_ratio']}, B {figures['bandwidth_ratio']} "
          f"(target within ±{TARGET:.0%}): {figures['verdict']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["verdict"] == "PASS" else 1


def quiet(config: dict[str, Any], args: argparse.Namespace) -> int:
    """The campaign ``args.quiet`` times, no hog: the between-run agreement of each headline figure."""
    from mpiatlas.stats.agreement import COVERAGE_TARGET, SPREAD_TARGET, agreement

    if args.quiet < 2:
        raise SystemExit("--quiet needs K >= 2 runs (5 for the targets)")
    runs: list[dict[str, Any]] = []
    tmp = tempfile.mkdtemp(prefix="mpiatlas-quiet-")
    try:
        for k in range(args.quiet):
            print(f"running {config['campaign']['name']} (quiet run {k + 1} of {args.quiet}) ...", flush=True)
            same = runs[0]["headline"]["label"] if runs else None
            runs.append({"run": k + 1, **one_run(config, Path(tmp) / f"run{k}", args.timeout, None, same)})
    finally:
        if args.keep:
            print(f"work directories kept under {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    rows: dict[str, Any] = {}
    for key, ci in FIGURES:
        usable = [r["headline"] for r in runs if r["headline"][key] is not None and r["headline"][ci] is not None]
        if len(usable) < 2:
            rows[key] = {"runs": len(usable), "verdict": "too few runs with this figure"}
            continue
        got = agreement([float(h[key]) for h in usable],
                        [(math.nan if h[ci][0] is None else float(h[ci][0]),
                          math.nan if h[ci][1] is None else float(h[ci][1])) for h in usable])
        rows[key] = {"runs": got.runs, "estimates": [h[key] for h in usable], "cv": round(got.cv, 4),
                     "max_over_min": round(got.max_over_min, 3), "coverage": round(got.coverage, 3),
                     "verdict": "PASS" if got.meets_targets else "FAIL"}
    scopes = sorted({f"{r['headline']['ci_method']} ({r['headline']['n_launches']} launches)" for r in runs})
    print(f"\n{args.quiet} quiet runs of {config['campaign']['name']} ({runs[0]['headline']['label']} PingPong; "
          f"intervals {', '.join(scopes)}):")
    print(f"  {'figure':28s} {'runs':>4s} {'CV':>7s} {'max/min':>8s} {'coverage':>9s}  verdict "
          f"(coverage ≥ {COVERAGE_TARGET:.0%}, max/min ≤ {SPREAD_TARGET})")
    for key, row in rows.items():
        if "cv" not in row:
            print(f"  {key:28s} {row['runs']:>4d}  {row['verdict']}")
            continue
        print(f"  {key:28s} {row['runs']:>4d} {row['cv']:>7.1%} {row['max_over_min']:>8.3f} {row['coverage']:>9.0%}  "
              f"{row['verdict']}")
    for r in runs:
        print(f"  run {r['run']}: " + "; ".join(r["headline"]["lines"][:2]) +
              f" ({r['perturbed_then_remeasured']} launches re-measured, {r['still_perturbed']} still perturbed)")
    if args.json:
        args.json.write_text(json.dumps({"config": str(args.config), "runs": runs, "figures": rows}, indent=2) + "\n")
    return 0 if all(row.get("verdict") == "PASS" for row in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
