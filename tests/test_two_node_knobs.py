"""α-β fits kept apart by knob set on the namespace cluster (issue 24, item 5):
config/test/two_node_knobs.yaml through profiles/slurm into the report.

IMB Alltoall and Allgather over two nodes (Intel MPI, ofi-tcp, one rank per node) under two knob
sets: every knob set must be its own series, with its own α, β, their CIs and per-size α and β,
and the report's α-β section must name each beside its own values. Which set is faster is the
machine's business, not the test's. The cluster fixture and campaign helpers are
tests/test_two_node.py's; the fitting itself is unit-tested in tests/test_alphabeta.py.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl
import pytest

from conftest import EVERY_LAUNCH_COUNTS, campaign_workdir, run_campaign
from mpiatlas.report.formatting import fmt_num
from test_two_node import ONE_JOB_AT_A_TIME, PROFILE, netns_cluster  # noqa: F401 (netns_cluster: a fixture)

KNOBS = "config/test/two_node_knobs.yaml"
RESULTS = "results/two-node-knobs"
KNOB_SETS = {"tuning-none", "tuning-auto"}
BENCHMARKS = {"Alltoall", "Allgather"}
SIZES = [2**i for i in range(17)]  # msglog [0, 16]; 0 B rows are IMB no-ops, not fitted


def _ci_holds(value: float, ci: list[float] | None) -> bool:
    return ci is not None and all(math.isfinite(v) for v in ci) and ci[0] <= value <= ci[1]


@pytest.mark.infra
def test_alphabeta_fits_keep_two_knob_sets_apart(netns_cluster: Path, tmp_path: Path) -> None:  # noqa: F811
    # Each point from its own 2 repetitions: every launch counts, however busy the machine.
    work = campaign_workdir(tmp_path, KNOBS, perturbation=EVERY_LAUNCH_COUNTS)
    done = run_campaign(work, *PROFILE, *ONE_JOB_AT_A_TIME, timeout=1500, path_prefix=netns_cluster / "bin")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = work / RESULTS
    cells = pl.read_parquet(results / "tidy" / "cells.parquet")
    # Every cell ran over the two nodes, one rank on each, under the knob set its id names.
    assert cells.height == 8 and set(cells["status"]) == {"ok"}, cells.select("cell", "status", "reason").rows()
    assert all(json.loads(h) == {"0": "node1", "1": "node2"} for h in cells["hosts"])
    assert set(cells["knobs"]) == KNOB_SETS and cells["binding_ok"].to_list() == [True] * cells.height
    mode = {"tuning-none": "none", "tuning-auto": "auto"}
    for row in cells.iter_rows(named=True):
        prov = json.loads((results / "raw" / row["cell"] / "provenance.json").read_text())
        assert f"/knobs={row['knobs']}/" in row["cell"]
        assert prov["knobs"]["name"] == row["knobs"], row["cell"]
        assert prov["knobs"]["env"] == {"I_MPI_TUNING_MODE": mode[row["knobs"]]}, row["cell"]

    fits = json.loads((results / "fits" / "alphabeta.json").read_text())
    by_series = {(f["benchmark"], f["knobs"]): f for f in fits["fits"]}
    # One fit per knob set and benchmark, nothing pooled over the sets.
    assert set(by_series) == {(b, k) for b in BENCHMARKS for k in KNOB_SETS}, sorted(by_series)
    assert len(fits["fits"]) == len(by_series)
    for (bench, knobs), f in sorted(by_series.items()):
        assert "error" not in f, (bench, knobs, f.get("error"))
        assert (f["stack"], f["transport"], f["nodes"], f["ppn"]) == ("intelmpi", "ofi-tcp", [2], 1)
        assert f["options"] == "" and f["placement"] == "cyclic"
        assert f["alpha"] >= 0 and f["beta_us"] >= 0 and f["bandwidth_gbit_s"] == 10
        assert _ci_holds(f["alpha"], f["alpha_ci"]) and _ci_holds(f["beta_us"], f["beta_ci_us"]), (bench, knobs)
        # Only this set's points: one per size at m = 2, each from its own 2 repetitions.
        used = [p for p in f["points"] if p["used"]]
        assert sorted(p["bytes"] for p in used) == SIZES and {p["n_reps"] for p in used} == {2}, (bench, knobs)
        per_size = f["per_size"]
        assert per_size["model"] == f["best_model"] and [r["bytes"] for r in per_size["rows"]] == SIZES
        best = next(m for m in f["models"] if m["model"] == f["best_model"])
        for r in per_size["rows"]:
            # One (m, k) per size: β is held at the best model's all-size β, α is that size's own, with a CI.
            assert r["beta_fixed"] and r["beta_us"] == pytest.approx(best["beta_us"], rel=1e-9), (bench, knobs, r)
            assert r["alpha"] is not None and _ci_holds(r["alpha"], r["alpha_ci"]), (bench, knobs, r)
            assert r["beta_at_alpha_us"] is not None and _ci_holds(r["beta_at_alpha_us"], r["beta_at_alpha_ci_us"])
    print("α-β per knob set:", {k: (fmt_num(f["alpha"]), f["alpha_ci"], fmt_num(f["beta_us"]), f["beta_ci_us"])
                                for k, f in sorted(by_series.items())})

    html = (results / "report.html").read_text()
    section = re.search(r'<section id="alphabeta">(.*?)</section>', html, re.S)
    assert section is not None
    sec = section.group(1)
    assert "Options · knobs · placement" in sec
    for (bench, knobs), f in by_series.items():
        # Each set by name, with its own α in the parameter table and its own per-size rows.
        assert f"intelmpi · ofi-tcp · knobs={knobs} · cyclic · k = 1" in sec, knobs
        assert f"knobs={knobs} · cyclic" in sec and fmt_num(f["alpha"]) in sec, (bench, knobs)
