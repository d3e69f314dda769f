#!/usr/bin/env python3
"""What mpiatlas's harness costs next to what it measures, measured side by side in one run.

  1  campaign wall / Σ launch walls of a real campaign (`mpiatlas campaign --config X` in a
     throw-away work dir; launch walls = `wall_s` of every sealed cell's provenance.json).
     Target <= 1.3.
  2  the same ratio for ReFrame (reframe-hpc, pinned in bench/_harness_reframe.py, own venv under
     .cache/) running the same campaign's IMB PingPong cells: exactly those launches (argv and
     environment from the cells' provenance.json), one at a time, each timed inside ReFrame's job
     script. PASS when part 1's ratio <= ReFrame's (its median over --rounds rounds). Also printed:
     Σ launch walls of the same argv under mpiatlas / under ReFrame (a harness that disturbs its own
     launches looks cheaper). Parts 1 and 2 share one campaign run.
  3  `snakemake -n --profile profiles/slurm` on a generated 177,100-cell campaign: wall time and
     peak RSS of its process tree, under a timeout. Targets <= 10 s, <= 500 MB.
  4  import + aggregate of 1 M generated IMB rows: bench/parse_aggregate.py's main() (another
     engineer's; this harness only calls it, and says so when the file is not there yet).
     Targets: its own, <= 5 s and >= 5x a plain regex + pandas script.
  5  the fixed cost, step by step (bench/_harness_timeline.py): a 6-launch campaign and a 150-cell
     one (IMB PingPong, Intel MPI, 2 ranks), each timed per step (preflight, Snakemake start and
     DAG, setup jobs, cell groups, tidy, aggregate, fit, report), then ReFrame on the same
     launches; --rounds alternations, the median of each side kept. Targets: 6 launches, mpiatlas
     wall <= ReFrame wall; 150 cells, campaign wall / Σ cell walls <= 1.10.

Ratios rather than seconds: this 2-core VM is noisy, and a ratio taken within one run cancels most
of it. Run with the project's venv (mpiatlas importable):

  .venv/bin/python bench/harness.py                                   # all four, config/config.yaml
  .venv/bin/python bench/harness.py --only 1,2 --config config/test/tiny.yaml --reps 2
  .venv/bin/python bench/harness.py --only 2 --config config/test/tiny.yaml --rounds 3 --json out.json
  .venv/bin/python bench/harness.py --only 5 --rounds 3 --sizes 6,150
  git archive <commit> src workflow profiles containers | tar -x -C /tmp/base
  .venv/bin/python bench/harness.py --only 5 --sizes 6 --rounds 3 --baseline /tmp/base   # before and after
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import yaml

from _harness_campaign import (CAMPAIGN_CONFIG, REPO, BenchError, CampaignRun, load_config, make_workdir,
                               pingpong_launches, run_campaign, venv_env, with_repetitions)

CAMPAIGN_TARGET = 1.3
DRYRUN_TARGET_S = 10.0
DRYRUN_TARGET_MB = 500.0
PARSE_AGGREGATE = REPO / "bench" / "parse_aggregate.py"
# bench/parse_aggregate.py's own targets (it prints them): mpiatlas <= 5 s wall, >= 5x the baseline.
PARSE_TARGET_S = 5.0
PARSE_TARGET_SPEEDUP = 5.0


@dataclass
class Figure:
    part: int
    what: str
    value: str
    target: str
    verdict: str  # PASS | FAIL | ERROR | TIMEOUT | MISSING
    details: dict[str, Any] | None = None


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def say(text: str) -> None:
    print(text, flush=True)


# -- part 1 ----------------------------------------------------------------------------------------


def describe_campaign(run: CampaignRun) -> dict[str, Any]:
    cells = len(run.launches)
    overhead = run.wall_s - run.launch_wall_s
    return {"campaign": run.name, "cells": cells, "wall_s": round(run.wall_s, 2),
            "launch_walls_s": round(run.launch_wall_s, 2), "ratio": round(run.ratio, 3),
            "harness_s_per_cell": round(overhead / cells, 3) if cells else None, "work": str(run.work)}


def timed_campaign(config: dict[str, Any], work: Path, timeout_s: float) -> CampaignRun:
    name = config["campaign"]["name"]
    say(f"  running campaign {name} in {work} ...")
    run = run_campaign(make_workdir(work, config), name, timeout_s)
    facts = describe_campaign(run)
    say(f"  {facts['cells']} cells: campaign wall {facts['wall_s']} s, Σ launch walls {facts['launch_walls_s']} s, "
        f"ratio {facts['ratio']}, harness {facts['harness_s_per_cell']} s per cell")
    return run


def default_campaign(args: argparse.Namespace, tmp: Path) -> CampaignRun:
    """The default campaign, run once per harness invocation: part 1 times it and part 2 hands its
    PingPong launches to ReFrame."""
    if getattr(args, "campaign_run", None) is None:
        config = with_repetitions(load_config(args.config), args.reps)
        args.campaign_run = timed_campaign(config, tmp / "campaign", args.campaign_timeout)
    return args.campaign_run


def part1(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    run = default_campaign(args, tmp)
    return [Figure(1, f"campaign wall / Σ launch walls ({run.name}, {len(run.launches)} cells)",
                   f"{run.ratio:.2f}", f"<= {CAMPAIGN_TARGET}", verdict(run.ratio <= CAMPAIGN_TARGET),
                   describe_campaign(run))]


# -- part 2 ----------------------------------------------------------------------------------------


def part2(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    """The default campaign's IMB PingPong launches (argv and environment from its cells'
    provenance) run again by ReFrame, ``--rounds`` times; ReFrame's median ratio (its whole run's
    wall / Σ its launch walls) against the campaign's own ratio (part 1's figure)."""
    from _harness_reframe import REFRAME_PIN, run_reframe

    run = default_campaign(args, tmp)
    records = pingpong_launches(run)
    mine_launch_s = sum(float(r["wall_s"]) for r in records)
    rounds: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        say(f"  running the campaign's {len(records)} PingPong launches with ReFrame ({REFRAME_PIN}) ...")
        rfm = run_reframe(records, run.work / CAMPAIGN_CONFIG, tmp / f"reframe{rnd}", args.campaign_timeout)
        if not rfm.passed == rfm.cases == len(records):
            raise BenchError(f"ReFrame: {rfm.passed} of {rfm.cases} cases passed, {len(records)} launches")
        rfm_sum = sum(rfm.launch_walls.values())
        say(f"  ReFrame: {rfm.cases} cases passed: wall {rfm.wall_s:.2f} s, Σ launch walls {rfm_sum:.2f} s "
            f"(its own run phases: {rfm.time_run_s:.2f} s), ratio {rfm.ratio:.3f}")
        # The same argv under each harness: a slower launch under one of them is its own
        # disturbance (or the machine's noise), and it hides harness cost inside the denominator.
        rounds.append({"round": rnd, "wall_s": round(rfm.wall_s, 2), "launch_walls_s": round(rfm_sum, 2),
                       "time_run_s": round(rfm.time_run_s, 2), "ratio": round(rfm.ratio, 3),
                       "launch_slowdown_mpiatlas_vs_reframe": round(mine_launch_s / rfm_sum, 3)})
    theirs = statistics.median(r["ratio"] for r in rounds)
    slowdown = statistics.median(r["launch_slowdown_mpiatlas_vs_reframe"] for r in rounds)
    say(f"  same PingPong launches: Σ launch walls under mpiatlas / under ReFrame = {slowdown:.2f} (median)")
    details = {"reframe_pin": REFRAME_PIN, "launches": [r["cell"] for r in records], "rounds": rounds,
               "mpiatlas": describe_campaign(run),
               "launch_timing": "ReFrame: bash $EPOCHREALTIME around the launch in its job script; "
                                "mpiatlas: wall_s of each cell's provenance.json",
               "launch_slowdown_mpiatlas_vs_reframe": slowdown}
    what = (f"wall / Σ launch walls: mpiatlas ({run.name}, {len(run.launches)} cells) vs ReFrame "
            f"(its {len(records)} PingPong launches, {args.rounds} round(s))")
    return [Figure(2, what, f"{run.ratio:.2f} vs {theirs:.2f}", "mpiatlas <= ReFrame",
                   verdict(run.ratio <= theirs), details)]


# -- part 3 ----------------------------------------------------------------------------------------


def part3(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    from _harness_dryrun import EXPECTED_CELLS, big_config, count_cells, measure

    work = tmp / "dryrun"
    config = big_config()
    placeholder = work / "imb-openmpi-placeholder"
    cells = count_cells(config, placeholder)
    if cells != EXPECTED_CELLS:
        raise BenchError(f"the generated campaign has {cells} cells, not the issue's {EXPECTED_CELLS}: "
                         "the cell model changed; update bench/_harness_dryrun.py big_config()")
    work.mkdir(parents=True)
    placeholder.mkdir()
    for name in ("workflow", "profiles"):
        (work / name).symlink_to(REPO / name)
    config["campaign"]["stacks_dir"] = str(REPO / ".stacks")
    (work / "config").mkdir()
    (work / "config" / "campaign.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm", "--snakefile",
            "workflow/Snakefile", "--configfile", "config/campaign.yaml"]
    say(f"  snakemake -n --profile profiles/slurm on {cells:,} cells (timeout {args.dry_run_timeout:.0f} s) ...")
    env = venv_env() | {"MPIATLAS_IMB_OPENMPI": str(placeholder)}
    result = measure(argv, work, env, work / "snakemake-dryrun.log", args.dry_run_timeout)
    wall, peak = result["wall_s"], result["peak_rss_mb"]
    details = {"cells": cells, **{k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()},
               "log": str(work / "snakemake-dryrun.log")}
    if result["timed_out"]:
        return [Figure(3, f"snakemake -n, {cells:,} cells: time, peak RSS", f"> {wall:.0f} s, {peak:.0f} MB so far",
                       f"<= {DRYRUN_TARGET_S:.0f} s, <= {DRYRUN_TARGET_MB:.0f} MB", "TIMEOUT", details)]
    if result["returncode"] != 0:
        tail = "\n".join((work / "snakemake-dryrun.log").read_text(errors="replace").splitlines()[-15:])
        raise BenchError(f"snakemake -n exited {result['returncode']} after {wall:.1f} s:\n{tail}")
    ok = wall <= DRYRUN_TARGET_S and peak <= DRYRUN_TARGET_MB
    say(f"  dry run: {wall:.1f} s ({result['cpu_s']:.1f} s of CPU, load {result['load_1min']:.1f} on "
        f"{os.cpu_count()} cpus before it), peak RSS {peak:.0f} MB")
    return [Figure(3, f"snakemake -n, {cells:,} cells: time, peak RSS", f"{wall:.1f} s, {peak:.0f} MB",
                   f"<= {DRYRUN_TARGET_S:.0f} s, <= {DRYRUN_TARGET_MB:.0f} MB", verdict(ok), details)]


# -- part 4 ----------------------------------------------------------------------------------------


def part4(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    """HOOK: bench/parse_aggregate.py (another engineer's) measures import + aggregate of 1 M
    generated IMB rows, mpiatlas against a plain regex + pandas script. This part imports it and
    calls ``main(["--json", FILE])`` when the file exists (sys.argv is set to just its path, so
    nothing of the harness's options leaks into it), then reads FILE: ``mpiatlas.wall_s``,
    ``mpiatlas.peak_mb``, ``baseline.wall_s`` and ``ratio`` (baseline wall / mpiatlas wall).
    Targets: parse_aggregate.py's own (PARSE_TARGET_S, PARSE_TARGET_SPEEDUP)."""
    what = "import + aggregate of 1 M IMB rows (bench/parse_aggregate.py)"
    if not PARSE_AGGREGATE.is_file():
        return [Figure(4, what, "not measured", parse_target(), "MISSING",
                       {"hook": f"{PARSE_AGGREGATE} does not exist yet; this part calls its main() once it does"})]
    module = import_file("parse_aggregate", PARSE_AGGREGATE)
    if not callable(getattr(module, "main", None)):
        raise BenchError(f"{PARSE_AGGREGATE}: has no main() to call")
    out = tmp / "parse_aggregate.json"
    saved_argv, sys.argv = sys.argv, [str(PARSE_AGGREGATE)]
    start = time.monotonic()
    try:
        code = module.main(["--json", str(out)])
    finally:
        sys.argv = saved_argv
    wall = time.monotonic() - start
    if code not in (0, None) or not out.is_file():
        raise BenchError(f"{PARSE_AGGREGATE}: main() returned {code} after {wall:.0f} s and wrote no {out.name}")
    data = json.loads(out.read_text())
    try:
        mine, ratio = data["mpiatlas"], float(data["ratio"])
        value = f"{mine['wall_s']:.1f} s, {mine['peak_mb']:.0f} MB, {ratio:.1f}x baseline"
        ok = float(mine["wall_s"]) <= PARSE_TARGET_S and ratio >= PARSE_TARGET_SPEEDUP
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchError(f"{PARSE_AGGREGATE}: its --json output lacks {exc} (expected mpiatlas.wall_s, "
                         "mpiatlas.peak_mb, baseline.wall_s, ratio)") from None
    return [Figure(4, what, value, parse_target(), verdict(ok),
                   {"total_wall_s": round(wall, 1), **data})]


def parse_target() -> str:
    return f"<= {PARSE_TARGET_S:.0f} s, >= {PARSE_TARGET_SPEEDUP:.0f}x"


def import_file(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BenchError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    spec.loader.exec_module(module)
    return module


# -- driver ----------------------------------------------------------------------------------------

def part5(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    from _harness_fixed_cost import fixed_cost, verdicts

    figures = []
    for result in fixed_cost(args.sizes, args.rounds, args.campaign_timeout, tmp / "fixed-cost", say,
                             args.remeasure, args.baseline):
        what, value, target, ok = verdicts(result)
        figures.append(Figure(5, what, value, target, verdict(ok), result.details()))
    return figures


PARTS: dict[int, tuple[str, Callable[[argparse.Namespace, Path], list[Figure]]]] = {
    1: ("campaign wall / Σ launch walls", part1),
    2: ("PingPong: mpiatlas vs ReFrame", part2),
    3: ("snakemake -n on 177,100 cells", part3),
    4: ("import + aggregate 1 M rows", part4),
    5: ("the fixed cost, step by step, beside ReFrame", part5),
}


def run_part(number: int, args: argparse.Namespace, tmp: Path) -> list[Figure]:
    title, func = PARTS[number]
    say(f"[{number}] {title}")
    start = time.monotonic()
    try:
        figures = func(args, tmp)
    except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others' figures
        say(f"  ERROR: {exc}")
        figures = [Figure(number, title, "not measured", "", "ERROR", {"error": str(exc)})]
    say(f"  ({time.monotonic() - start:.0f} s)")
    return figures


def print_table(figures: list[Figure]) -> None:
    rows = [("#", "figure", "measured", "target", "verdict")]
    rows += [(str(f.part), f.what, f.value, f.target, f.verdict) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    say("")
    for i, row in enumerate(rows):
        say("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if i == 0:
            say("  ".join("-" * width for width in widths))


def parse_only(text: str) -> list[int]:
    try:
        chosen = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--only: {text!r} is not a comma-separated list of parts 1-5") from None
    if not chosen or any(n not in PARTS for n in chosen):
        raise argparse.ArgumentTypeError(f"--only: {text!r}: parts are 1, 2, 3, 4 and 5")
    return chosen


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes: {text!r} is not a comma-separated list of cell counts") from None
    if not sizes or any(n < 1 or (n > 12 and n % 2) for n in sizes):
        raise argparse.ArgumentTypeError(f"--sizes: {text!r}: cell counts of at least 1, even above 12 (two "
                                         "transports)")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", type=parse_only, default=sorted(PARTS), help="parts to run, e.g. 1,2 (default: all)")
    ap.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml",
                    help="campaign of parts 1 and 2 (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=None, help="override campaign.repetitions in parts 1 and 2")
    ap.add_argument("--rounds", type=int, default=1, help="part 2: ReFrame rounds "
                    "(its median ratio compared; default %(default)s)")
    ap.add_argument("--sizes", type=parse_sizes, default=[6, 150],
                    help="part 5: cells of its campaigns (default: 6,150)")
    ap.add_argument("--remeasure", action="store_true",
                    help="part 5: keep the campaigns' re-measures of perturbed launches (default: off, see "
                         "bench/_harness_fixed_cost.py)")
    ap.add_argument("--baseline", type=Path, default=None, metavar="TREE",
                    help="part 5: also run each campaign, alternated, with another commit's package and workflow "
                         "(`git archive <commit> src workflow profiles containers | tar -x -C TREE`): before and "
                         "after, side by side")
    ap.add_argument("--campaign-timeout", type=float, default=3600, help="seconds per campaign or ReFrame run")
    ap.add_argument("--dry-run-timeout", type=float, default=900, help="seconds for part 3 (reported as TIMEOUT)")
    ap.add_argument("--keep", action="store_true", help="keep the work directories (printed)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure and its details here")
    args = ap.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.config = args.config.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("mpiatlas") is None:
        print("bench/harness.py needs mpiatlas importable: run it with the project's venv (.venv/bin/python)",
              file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mpiatlas-harness-"))
    figures: list[Figure] = []
    try:
        for number in args.only:
            figures += run_part(number, args, tmp)
    finally:
        if args.keep:
            say(f"work directories kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(figures)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=1, default=str) + "\n")
    return 0 if all(f.verdict in ("PASS", "MISSING") for f in figures) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
