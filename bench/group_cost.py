#!/usr/bin/env python3
"""A cell group's harness cost, from a cProfile of one `mpiatlas run-cell --group` process.

  .venv/bin/python bench/group_cost.py --config R/campaign.json --group imb_intelmpi_np2_t1_0 \\
      --workdir /tmp/gc            # runs the group (its cells are written under WORKDIR/results/...)
  .venv/bin/python bench/group_cost.py --profile X.prof --raw WORKDIR/results/NAME/raw   # an existing profile

Prints, for the group: the time outside the cell loop (interpreter start-up to the loop and after
it: imports, config, expanding the cells, the done file), and per cell the time of everything
except the launch itself (``_run``: spawn, wait, read output) and the program's output check
(the parse), plus how much longer ``_run`` took than the ``wall_s`` it recorded. Wall-clock times:
on a shared machine compare runs made side by side, never a single figure.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pstats
import subprocess
import sys
from pathlib import Path

# (file suffix, function): the launch, and each program's check of its output.
LAUNCH = ("runner/run.py", "_run")
CHECKS = (("programs/imb.py", "check"), ("programs/kernels/__init__.py", "check"))
LOOP = ("runner/run.py", "run_group")


def cumulative(stats: pstats.Stats, where: tuple[str, str]) -> tuple[float, int]:
    """Cumulative seconds and call count of one function (0, 0 if it never ran)."""
    for (filename, _, name), (_, calls, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if filename.endswith(where[0]) and name == where[1]:
            return cum, calls
    return 0.0, 0


def figures(profile: Path, raw: Path) -> dict[str, float]:
    stats = pstats.Stats(str(profile))
    total = stats.total_tt  # type: ignore[attr-defined]
    loop, _ = cumulative(stats, LOOP)
    launch, cells = cumulative(stats, LAUNCH)
    check = sum(cumulative(stats, where)[0] for where in CHECKS)
    walls = [json.loads(Path(p).read_text())["wall_s"] for p in glob.glob(f"{raw}/**/provenance.json", recursive=True)]
    if not cells:
        raise SystemExit(f"{profile}: no launch ran in this profile")
    return {"cells": cells, "total_s": total, "sum_wall_s": sum(walls), "outside_loop_s": total - loop,
            "per_cell_harness_ms": (loop - launch - check) / cells * 1e3, "per_cell_check_ms": check / cells * 1e3,
            "per_cell_run_minus_wall_ms": (launch - sum(walls)) / cells * 1e3}


def run_group(config: Path, group: str, workdir: Path) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    profile = workdir / f"{group}.prof"
    name = json.loads(config.read_text())["campaign"]["name"]
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "mpiatlas.cli", "run-cell",
                    "--group", group, "--config", str(config.resolve()), "--done", str(workdir / "done.json")],
                   cwd=workdir, check=True, env=dict(os.environ), stdout=subprocess.DEVNULL)
    return profile, workdir / "results" / name / "raw"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, help="the campaign's campaign.json (results/<name>/campaign.json)")
    p.add_argument("--group", help="a job group id (results/<name>/groups/<id>.json)")
    p.add_argument("--workdir", type=Path, help="where to run the group (must not hold its cells yet)")
    p.add_argument("--profile", type=Path, help="an existing profile instead of running the group")
    p.add_argument("--raw", type=Path, help="with --profile: the raw directory the group wrote")
    args = p.parse_args()
    if args.profile:
        if not args.raw:
            p.error("--profile needs --raw")
        profile, raw = args.profile, args.raw
    elif args.config and args.group and args.workdir:
        profile, raw = run_group(args.config, args.group, args.workdir)
    else:
        p.error("give --config, --group and --workdir, or --profile and --raw")
    f = figures(profile, raw)
    print(f"{profile}: {f['cells']:.0f} cells, {f['total_s']:.2f} s in all, Σ wall_s {f['sum_wall_s']:.2f} s")
    print(f"  outside the cell loop (start-up, config, cells, done file): {f['outside_loop_s']:.3f} s")
    print(f"  per cell, harness (all but the launch and the output check): {f['per_cell_harness_ms']:.1f} ms")
    print(f"  per cell, output check (parse): {f['per_cell_check_ms']:.1f} ms")
    print(f"  per cell, _run beyond wall_s (spawn bookkeeping, reading output): "
          f"{f['per_cell_run_minus_wall_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
