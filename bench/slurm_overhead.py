#!/usr/bin/env python3
"""What the SLURM profile costs: the same small campaign through SLURM and through the local profile.

For each profile (local; slurm with each --cells-per-job value) the campaign
(default config/test/slurm.yaml: 8 real Intel MPI + IMB cells) runs end to end,
`mpiatlas campaign` from nothing to results/<campaign>/report.html, in a fresh
work directory that reuses the checkout's stack installs (.stacks). Reported per run:

  wall_s        wall time of the whole campaign (DAG, cells, tidy, fits, report)
  ratio         wall_s / wall_s of the local profile in the same round
  cells_s       time spent inside the MPI launches (sum of the cells' wall_s)
  jobs          distinct SLURM job ids in the cells' provenance (SLURM_JOB_ID)
  jobs/cell     jobs / cells
  seen_s        how long after a batch job's `mpiatlas run-cell --group` ended (its log's last write)
                Snakemake logged the job finished: the job's own end (its Snakemake jobstep exits)
                plus the status polls' delay, median over jobs (the log has 1 s resolution);
                much less sensitive to the machine's load than the walls
  per_job_s     what SLURM adds per job beyond its launches: (wall_s - cells_s) minus the local
                profile's (wall_s - cells_s) in the same round, divided by jobs (#38 asks <= 2 s)

With --upstream the SLURM variants also run with upstream's executor plugin (`executor: slurm`,
its status polls 10 s further apart after each poll that saw no job end) beside profiles/slurm's
paced one (`executor: mpiatlas-slurm`, mpiatlas.campaign.status_pacing), in the same round.

Profiles are interleaved per round; with --rounds > 1 the median per profile is reported.
Needs a running SLURM cluster (../shared/tools/local-slurm.sh start) for the slurm rows.

  .venv/bin/python bench/slurm_overhead.py [--cells-per-job 1 4] [--rounds 1] [--upstream] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from mpiatlas.matrix import layout

REPO = Path(__file__).resolve().parents[1]


UPSTREAM_PROFILE = "profiles/slurm-upstream"


def upstream_profile(work: Path) -> None:
    """profiles/slurm as it would read with upstream's plugin: ``executor: slurm``, settings ``slurm-…``."""
    text = (REPO / "profiles" / "slurm" / "profile.yaml").read_text()
    text = text.replace("executor: mpiatlas-slurm", "executor: slurm").replace("\nmpiatlas-slurm-", "\nslurm-")
    (work / UPSTREAM_PROFILE).mkdir(parents=True)
    (work / UPSTREAM_PROFILE / "profile.yaml").write_text(text)


def workdir(tmp: Path, config: Path, cells_per_job: int | None) -> Path:
    (tmp / "workflow").symlink_to(REPO / "workflow")
    (tmp / "profiles").mkdir()
    for profile in (REPO / "profiles").iterdir():
        (tmp / "profiles" / profile.name).symlink_to(profile)
    upstream_profile(tmp)
    data = yaml.safe_load(config.read_text())
    data["campaign"]["stacks_dir"] = str(REPO / ".stacks")
    if cells_per_job is not None:
        data["campaign"]["cells_per_job"] = cells_per_job
    (tmp / "config").mkdir()
    (tmp / "config" / "campaign.yaml").write_text(yaml.safe_dump(data))
    return tmp


def results_dir(work: Path) -> Path:
    """results/<campaign name>: where the campaign in ``work`` writes its cells and report."""
    name = yaml.safe_load((work / "config" / "campaign.yaml").read_text())["campaign"]["name"]
    return work / layout.results_dir(name)


def run_campaign(work: Path, profile: str, timeout: float) -> float:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml",
            "--directory", str(work), "--profile", profile]
    start = time.monotonic()
    out = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - start
    if out.returncode != 0 or not (results_dir(work) / layout.REPORT).is_file():
        raise RuntimeError(f"campaign with {profile} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return wall


LOG_TIME = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def seen_delays(work: Path) -> list[float]:
    """Per cell_group job: Snakemake's "Finished jobid" time minus the last write of the group's log
    (its group file cannot tell: Snakemake touches a job's outputs when it sees it finish)."""
    log = results_dir(work) / "logs" / "snakemake.log"
    group_of: dict[str, str] = {}
    finished: dict[str, float] = {}
    stamp, in_group_rule, jobid = None, False, None
    for line in log.read_text().splitlines():
        if m := LOG_TIME.match(line):
            stamp = datetime.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        elif line.startswith(("rule ", "localrule ")):
            in_group_rule = line.strip() == "rule cell_group:"
        elif in_group_rule and line.strip().startswith("jobid:"):
            jobid = line.split(":", 1)[1].strip()
        elif in_group_rule and jobid and line.strip().startswith("wildcards: group="):
            group_of[jobid] = line.split("group=", 1)[1].strip()
        elif (m2 := re.match(r"Finished jobid: (\d+) \(Rule: cell_group\)", line)) and stamp is not None:
            finished[m2.group(1)] = stamp
    logs = results_dir(work) / "logs" / "groups"
    return [finished[j] - (logs / f"{g}.log").stat().st_mtime
            for j, g in group_of.items() if j in finished and (logs / f"{g}.log").is_file()]


def cell_facts(work: Path) -> dict[str, object]:
    raw = results_dir(work) / "raw"
    provs = [json.loads(p.read_text()) for p in raw.rglob("provenance.json")]
    statuses = [json.loads(p.read_text())["status"] for p in raw.rglob("status.json")]
    jobs = {p.get("slurm_job_id") for p in provs if p.get("slurm_job_id")}
    return {"cells": len(provs), "ok": statuses.count("ok"), "cells_s": round(sum(p.get("wall_s") or 0 for p in provs), 1),
            "jobs": len(jobs), "launchers": sorted({p.get("launcher") or "?" for p in provs})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=REPO / "config" / "test" / "slurm.yaml")
    ap.add_argument("--cells-per-job", type=int, nargs="+", default=[None],
                    help="campaign.cells_per_job values to run through SLURM (default: the config's)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--upstream", action="store_true", help="also run upstream's executor plugin, same round")
    ap.add_argument("--timeout", type=float, default=1200, help="per campaign, seconds")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if shutil.which("sbatch") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        print("no running SLURM cluster (sbatch/sinfo): start one with ../shared/tools/local-slurm.sh start", file=sys.stderr)
        return 2

    # One local campaign first, not counted: the per-boot caches (node limits, preflight's compiler
    # probe and stack hellos) are filled once, or the first variant pays them (196 s against 14 s).
    with tempfile.TemporaryDirectory(prefix="mpiatlas-slurm-bench-") as tmp:
        print(f"warm-up: local wall {run_campaign(workdir(Path(tmp), args.config, None), 'profiles/local', args.timeout):.1f} s",
              flush=True)
    runs: list[dict[str, object]] = []
    variants: list[tuple[str, str, int | None]] = [("local", "profiles/local", None)]
    profiles = [("slurm", "profiles/slurm")] + ([("upstream", UPSTREAM_PROFILE)] if args.upstream else [])
    variants += [(f"{label} cells_per_job={n if n is not None else 'config'}", profile, n)
                 for n in args.cells_per_job for label, profile in profiles]
    for rnd in range(args.rounds):
        order = variants if rnd % 2 == 0 else [variants[0], *reversed(variants[1:])]
        local_wall = local_cells = None
        for name, profile, per_job in order:
            with tempfile.TemporaryDirectory(prefix="mpiatlas-slurm-bench-") as tmp:
                work = workdir(Path(tmp), args.config, per_job)
                wall = run_campaign(work, profile, args.timeout)
                facts = cell_facts(work)
                seen = seen_delays(work) if profile != "profiles/local" else []
            if profile == "profiles/local":
                local_wall, local_cells = wall, float(facts["cells_s"])
            row = {"round": rnd, "variant": name, "wall_s": round(wall, 1), **facts,
                   "seen_s": [round(s, 1) for s in sorted(seen)]}
            row["jobs_per_cell"] = round(facts["jobs"] / facts["cells"], 3) if facts["cells"] else None
            row["ratio"] = round(wall / local_wall, 2) if local_wall else None
            row["per_job_s"] = (round((wall - float(facts["cells_s"]) - (local_wall - local_cells)) / facts["jobs"], 2)
                                if facts["jobs"] and local_wall is not None and local_cells is not None else None)
            runs.append(row)
            print(f"round {rnd}: {name:28s} wall {wall:6.1f} s  cells {facts['cells']} ok {facts['ok']}  "
                  f"in launches {facts['cells_s']:5.1f} s  jobs {facts['jobs']}  per job {row['per_job_s']} s  "
                  f"seen after {statistics.median(seen) if seen else float('nan'):.1f} s (max {max(seen, default=float('nan')):.1f})  "
                  f"launcher {','.join(facts['launchers'])}",
                  flush=True)

    print()
    print(f"{'variant':30s} {'wall_s':>8s} {'ratio':>6s} {'jobs':>5s} {'jobs/cell':>9s} {'per_job_s':>9s} {'seen_s':>7s}")
    summary = []
    for name, _, _ in variants:
        rows = [r for r in runs if r["variant"] == name]
        wall = statistics.median(r["wall_s"] for r in rows)
        ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
        ratio = statistics.median(ratios) if ratios else None
        jobs = statistics.median(r["jobs"] for r in rows)
        per_cell = statistics.median(r["jobs_per_cell"] for r in rows)
        per_job = [r["per_job_s"] for r in rows if r["per_job_s"] is not None]
        seen_all = [s for r in rows for s in r["seen_s"]]
        seen_s = statistics.median(seen_all) if seen_all else None
        per_job_s = statistics.median(per_job) if per_job else None
        summary.append({"variant": name, "wall_s": wall, "ratio_vs_local": ratio, "jobs": jobs, "jobs_per_cell": per_cell,
                        "per_job_s": per_job_s, "seen_s": seen_s})
        print(f"{name:30s} {wall:8.1f} {ratio if ratio is not None else float('nan'):6.2f} {jobs:5.0f} {per_cell:9.3f} "
              f"{per_job_s if per_job_s is not None else float('nan'):9.2f} "
              f"{seen_s if seen_s is not None else float('nan'):7.1f}")
    if args.json:
        args.json.write_text(json.dumps({"config": str(args.config), "runs": runs, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
