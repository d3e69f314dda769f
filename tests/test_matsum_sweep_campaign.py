"""A kernel sweep run for real: config/test/matsum_sweep.yaml (matsum at P = 2 over the explicit
process grids 2×1 and 1×2 and two matrix shapes, Intel MPI shared memory, 3 repetitions) through
``mpiatlas campaign``; the report's matsum section must hold every grid's measurements."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import announced_report
from conftest import REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.report.formatting import fmt_num

CONFIG = "config/test/matsum_sweep.yaml"
RESULTS = "results/matsum-sweep"
GRIDS = {"2×1": [2, 1], "1×2": [1, 2]}
DIMS = {"96×40×40", "40×96×40"}


def section(html: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert match, f"no section {sid}"
    return match.group(1)


@pytest.mark.infra
def test_matsum_grid_sweep_runs_each_grid_and_the_report_compares_them(tmp_path: Path) -> None:
    require_infra(shutil.which("gcc") is not None, "a C toolchain")
    require_infra((REPO / ".stacks" / "intelmpi").is_dir(), "Intel MPI from PyPI in .stacks/intelmpi")
    work = campaign_workdir(tmp_path, CONFIG)
    result = run_campaign(work, timeout=600)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    report = announced_report(result.stdout, work)
    results = work / RESULTS

    # Each grid really ran as asked: the kernel's own records name the grid and, with dist block,
    # split the matrix along that grid's axes.
    rows = pl.read_parquet(results / "tidy" / "kernel_matsum.parquet")
    assert set(rows["cell_status"]) == {"ok"} and rows["valid"].all()
    assert rows["cell"].n_unique() == 2 * 2 * 3  # grids x dims x repetitions
    for procdims in GRIDS.values():
        mine = rows.filter(pl.col("procdims") == pl.lit(procdims, dtype=pl.List(pl.Int64)))
        assert mine["grid_explicit"].all() and mine.height == 2 * 3 * 2 * 2  # dims x reps x ranks x dists
        assert all(f"--procdims {procdims[0]},{procdims[1]}" in c for c in mine["command"])
        block = mine.filter(pl.col("dist") == "block")
        assert {tuple(d) for d in block["decomposition"]} == {(*procdims, 1)}

    # The model's comparison is the tidy table's numbers: per dims x dist, each grid's median
    # over repetitions of its slowest rank's total time.
    comparisons = json.loads((results / "fits" / "kernels.json").read_text())["matsum_grids"]
    assert {(c["dims"], c["dist"], c["np"]) for c in comparisons} == {(d, s, 2) for d in DIMS for s in
                                                                     ("slab", "block")}
    html = section(report.read_text(), "kernel-matsum")
    assert "Process grids at equal P" in html
    for comparison in comparisons:
        assert {g["grid"] for g in comparison["grids"]} == set(GRIDS)
        for g in comparison["grids"]:
            dims = [int(v) for v in comparison["dims"].split("×")]
            cells = rows.filter((pl.col("dist") == comparison["dist"])
                                & (pl.col("dims") == ",".join(map(str, dims)))
                                & (pl.col("procdims") == pl.lit(GRIDS[g["grid"]], dtype=pl.List(pl.Int64))))
            slowest = cells.group_by("cell").agg(pl.col("total_us").max())["total_us"]
            assert slowest.len() == 3 and g["n_reps"] == 3
            assert g["measured_us"] == pytest.approx(slowest.median(), rel=1e-9) and g["measured_us"] > 0
            low, high = g["ci_us"]
            assert low <= g["measured_us"] <= high
            # the report's table row of this grid shows its median
            assert fmt_num(g["measured_us"]) in html
        assert min(g["vs_best"] for g in comparison["grids"]) == 1.0
