"""``mpiatlas compare`` of two kernel campaigns: ring, matsum, Jacobi, pingpong and coll tables.

The tables are built the way ``mpiatlas tidy`` builds them (the kernels' own parser, cell tags and row
finishing) from the recorded kernel outputs of tests/data/kernels; each repetition's times are the
recorded ones times seeded lognormal noise, and side B's times are side A's times a known factor per
kernel: the truth the ratios and their CIs are checked against.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.cli import main
from mpiatlas.compare.campaigns import compare, load_runs, load_side
from mpiatlas.compare.kernels import kernel_samples
from mpiatlas.matrix import layout
from mpiatlas.parsers.kernels import parse_kernel_output
from mpiatlas.programs import REGISTRY
from mpiatlas.programs.base import tag_columns
from mpiatlas.stats.ratios import FASTER, SAME, SLOWER

DATA = Path(__file__).parent / "data" / "kernels"
# kernel -> (recorded output, stack, ranks, variant group, threads per rank)
RECORDED = {
    "ring": ("ring_intelmpi_np3.txt", "intelmpi", 3, "blocking+ssend+nonblocking", 1),
    "matsum": ("matsum_openmpi_np4.txt", "openmpi", 4, "t1+2+3-slab+block", 1),
    "jacobi": ("jacobi_intelmpi_np2_hybrid.txt", "intelmpi", 2, "strong-N16-t2", 2),
    "pingpong": ("pingpong_openmpi_np2.txt", "openmpi", 2, "m0-16", 1),
    "coll": ("coll_intelmpi_np3.txt", "intelmpi", 3, "default", 1),
}
# B's times over A's, per kernel: slower, unchanged, faster.
FACTOR = {"ring": 1.5, "matsum": 1.0, "jacobi": 0.6, "pingpong": 1.0, "coll": 1.3}
REPS = 6
NOISE = 0.03  # lognormal σ per repetition


def kernel_table(name: str, factor: float, seed: int) -> pl.DataFrame:
    """The tidy kernel_<name> table of REPS launches of the recorded output, times scaled by factor × noise."""
    source, stack, np_, group, threads = RECORDED[name]
    frame = parse_kernel_output((DATA / source).read_text(), source)[name]
    program = REGISTRY[name]
    rng = np.random.default_rng(seed)
    reps = []
    for rep in range(REPS):
        row = {"cell_quality": "ok", "cell": f"kernel/{stack}/shm/core/np{np_}/{name}/{group}/rep{rep}", "stack": stack,
               "transport": "shm", "mapping": "core", "np": np_, "rep": rep, "status": "ok", "nodes": 1, "ppn": np_,
               "knobs": "", "quality": "ok", "oversubscribed": False}
        own = {"variant_group": (group, pl.String()), "cell_threads": (threads, pl.Int32())}
        tagged = program.finish_rows(tag_columns(frame, row, own, {"node_cores": (2, pl.Int32())}))
        # Each record of each launch its own noise: points are independent, as separate timings are.
        scale = pl.Series(factor * rng.lognormal(0.0, NOISE, tagged.height))
        times = [c for c in tagged.columns if c.endswith(("_us", "_usec")) and tagged.schema[c].is_float()]
        reps.append(tagged.with_columns(pl.col(c) * scale for c in times))
    return pl.concat(reps, how="diagonal_relaxed")


def write_campaign(root: Path, factor: dict[str, float], seed: int) -> Path:
    """A results directory with the five kernel tables and no IMB samples (a kernel-only campaign: tidy
    writes every program's table, IMB's without rows or columns)."""
    tidy = root / "tidy"
    tidy.mkdir(parents=True)
    pl.DataFrame().write_parquet(tidy / layout.IMB_SAMPLES)
    for i, name in enumerate(RECORDED):
        kernel_table(name, factor[name], seed + i).write_parquet(tidy / layout.kernel_table(name))
    return root


def test_reduction_takes_one_time_per_launch_and_point() -> None:
    ring = kernel_samples("ring", kernel_table("ring", 1.0, 0))
    # 3 variants × 2 streams × 1 size, per launch: the slowest of the 3 ranks.
    assert ring.height == 6 * REPS and set(ring["variant"]) == {"blocking", "ssend", "nonblocking"}
    raw = kernel_table("ring", 1.0, 0).filter((pl.col("rep") == 0) & (pl.col("variant") == "ssend")
                                              & (pl.col("streams") == 2))
    got = ring.filter((pl.col("rep") == 0) & (pl.col("variant") == "ssend") & (pl.col("streams") == 2))["t_usec"]
    assert got.to_list() == [raw["time_us"].max()]
    matsum = kernel_samples("matsum", kernel_table("matsum", 1.0, 0))
    assert matsum["bytes"].null_count() == matsum.height and matsum["problem"].unique().to_list() == ["30,20,10"]
    assert matsum.height == 6 * REPS  # topo 1, 2, 3 × dist slab, block
    assert set(ring["pinner"]) == {""}  # the id names no pinner: the stack's own binding (Cell.pinner "")
    likwid = kernel_table("ring", 1.0, 0).with_columns(pl.col("cell").str.replace("/rep", "/pinner=likwid/rep"))
    assert set(kernel_samples("ring", likwid)["pinner"]) == {"likwid"}
    coll = kernel_samples("coll", kernel_table("coll", 1.0, 0))
    assert set(coll["variant"]) == {"bcast", "allreduce", "alltoall"} and coll.height == 3 * 12 * REPS  # sizes 0, 1, 2, … 1024


def test_two_kernel_campaigns_give_ratios_with_cis_and_the_verdicts_they_imply(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_campaign(tmp_path / "a", dict.fromkeys(RECORDED, 1.0), seed=10)
    b = write_campaign(tmp_path / "b", FACTOR, seed=20)
    cmp = compare(load_side(a, "A"), load_side(b, "B"))
    assert cmp.sizes.height == 0 and [k.kernel for k in cmp.kernels] == list(RECORDED)
    held = 0
    points = {"ring": 6, "matsum": 6, "jacobi": 1, "pingpong": 18, "coll": 36}  # sizes 0, 1 … 64 KiB; 0, 1 … 1 KiB
    for kc in cmp.kernels:
        s, truth = kc.sizes, FACTOR[kc.kernel]
        assert s.height == points[kc.kernel] and "np" in kc.matching.keys, kc.kernel
        assert kc.only_a.height == kc.only_b.height == 0
        # Every point's ratio is within 10 % of the truth (two medians of 6 repetitions, 3 % noise each).
        assert s["ratio"].to_numpy() == pytest.approx(truth, rel=0.10), kc.kernel
        held += int(((s["ratio_ci_low"] <= truth) & (truth <= s["ratio_ci_high"])).sum())
        for row in s.to_dicts():  # each verdict the one its CI implies
            implied = SLOWER if row["ratio_ci_low"] > 1 else FASTER if row["ratio_ci_high"] < 1 else SAME
            assert row["verdict"] == implied, (kc.kernel, row)
        verdicts = s["verdict"].to_list()
        if truth > 1:
            assert set(verdicts) == {SLOWER}
        elif truth < 1:
            assert set(verdicts) == {FASTER}
        else:  # no change: at most a tenth of the points flagged by chance
            assert sum(v != SAME for v in verdicts) <= max(1, s.height // 10)
    # The 95 % CIs hold the truth at 90 % of the 67 points or more.
    assert held >= 0.9 * sum(points.values()), held
    # The command: summary lines per kernel, the JSON record, the diff report, the gate on kernel points.
    out = tmp_path / "cmp.json"
    code = main(["compare", str(a), str(b), "--plain", "--json", str(out), "--out", str(tmp_path / "d.html"),
                 "--fail-on-regression", "20%"])
    text = capsys.readouterr().out
    assert code == 1  # ring ×1.5 and coll ×1.3 are beyond 20 %
    assert "kernel ring: matched 6 sizes" in text and "6 significantly slower in B" in text
    assert "kernel jacobi: matched 1 point" in text and "1 faster" in text
    record = json.loads(out.read_text())
    assert set(record["kernels"]) == set(RECORDED)
    ring = record["kernels"]["ring"]
    assert ring["matched_on"][-1] == "bytes" and all(r["verdict"] == SLOWER for r in ring["sizes"])
    html = (tmp_path / "d.html").read_text()
    assert '<section id="kernels">' in html and "ring: B / A" in html and "jacobi: all 1 matched points" in html
    assert main(["compare", str(a), str(b), "--plain", "--fail-on-regression", "60%"]) == 0


def test_several_runs_per_side_put_run_to_run_variation_in_the_kernels_cis(tmp_path: Path) -> None:
    same = dict.fromkeys(RECORDED, 1.0)
    runs_a = [write_campaign(tmp_path / f"a{i}", same, seed=30 + 10 * i) for i in range(3)]
    runs_b = [write_campaign(tmp_path / f"b{i}", FACTOR, seed=70 + 10 * i) for i in range(3)]
    cmp = compare(load_runs(runs_a, "A"), load_runs(runs_b, "B"))
    assert cmp.two_level
    ring = next(k for k in cmp.kernels if k.kernel == "ring").sizes
    # Each point: 3 runs of 6 repetitions per side, the two-level CI (runs, then repetitions) holds ×1.5.
    assert ring["runs_a"].to_list() == [3] * 6 and ring["n_a"].to_list() == [3 * REPS] * 6
    assert ((ring["ratio_ci_low"] <= 1.5) & (ring["ratio_ci_high"] >= 1.5)).all()
    for kc in cmp.kernels:
        for row in kc.sizes.to_dicts():
            implied = SLOWER if row["ratio_ci_low"] > 1 else FASTER if row["ratio_ci_high"] < 1 else SAME
            assert row["verdict"] == implied, (kc.kernel, row)


def imb_pingpong(factor: float, seed: int) -> pl.DataFrame:
    """IMB PingPong samples (6 repetitions at 3 sizes) whose times are a known factor × lognormal noise."""
    rng = np.random.default_rng(seed)
    rows = [{"cell_quality": "ok", "cell": f"imb/intelmpi/shm/core/np2/PingPong/default/rep{rep}", "benchmark": "PingPong", "bytes": size,
             "t_usec": factor * (0.5 + size / 5000) * float(rng.lognormal(0.0, NOISE)), "status": "ok",
             "cell_status": "ok", "stack": "intelmpi", "transport": "shm", "mapping": "core", "np": 2,
             "algorithm": "default", "options": "", "knobs": "", "rep": rep, "nodes": 1}
            for rep in range(REPS) for size in (0, 1024, 65536)]
    return pl.DataFrame(rows)


def test_imb_and_kernel_tables_of_one_campaign_are_compared_side_by_side(tmp_path: Path) -> None:
    sides = []
    for name, factor, seed in (("a", dict.fromkeys(RECORDED, 1.0), 1), ("b", FACTOR, 2)):
        root = write_campaign(tmp_path / name, factor, seed)
        imb_pingpong(2.0 if name == "b" else 1.0, seed).write_parquet(root / "tidy" / layout.IMB_SAMPLES)
        sides.append(load_side(root, name.upper()))
    cmp = compare(*sides)
    assert cmp.sizes.height == 3 and set(cmp.sizes["verdict"]) == {SLOWER}  # IMB PingPong ×2
    assert cmp.sizes["ratio"].to_numpy() == pytest.approx(2.0, rel=0.10)
    assert [k.kernel for k in cmp.kernels] == list(RECORDED)
    assert cmp.all_sizes().height == 3 + sum(k.sizes.height for k in cmp.kernels)
