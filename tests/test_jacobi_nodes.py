"""The hybrid-vs-pure Jacobi study over nodes (mpiatlas.models.jacobi_nodes) and its report section, on a
built kernel_jacobi table whose numbers are known: bytes per rank and per step, their totals and ratio,
halo and Allreduce times (mean and minimum over ranks) as medians over repetitions with CIs, the
hybrid/pure ratios with CIs, the run-to-run spread, and the one line on hybrid cells that could not run."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest

from mpiatlas.models.jacobi_nodes import hybrid_over_nodes, ratio_ci
from mpiatlas.report.data import ReportData
from mpiatlas.report.render import render_html
from mpiatlas.report.sections.kernel_jacobi_nodes import HEADING, not_run_line, section_kernel_jacobi_nodes

L = 16
FACE = L * L * 8  # bytes of one face of a weak L=16 rank
GLOBAL = {2: [2 * L, L, L], 4: [2 * L, 2 * L, L]}  # weak mode: the cores' grid, whatever the shape


def _rows(nodes: int, np_: int, threads: int, faces: list[int], rep: int, scale: float) -> list[dict]:
    """One cell's records: rank r sends faces[r] faces; its halo time is (r + 1) * scale µs, its
    Allreduce (r + 2) * scale, the slowest iteration 100 * scale."""
    placement = "core" if nodes == 1 else f"node{nodes}"
    cell = f"kernel/i/ofi-tcp/{placement}/np{np_}/jacobi/weak-L{L}-t{threads}/rep{rep}"
    return [{"cell": cell, "label": f"i/ofi-tcp/{placement}", "stack": "i", "transport": "ofi-tcp",
             "mapping": "core" if nodes == 1 else "node", "nodes": nodes, "np": np_, "cell_threads": threads,
             "rep": rep, "rank": r, "host": f"n{r % nodes}", "oversubscribed": False, "cell_status": "ok", "mode": "weak", "L": [L, L, L],
             "global_dims": GLOBAL[np_ * threads],
             "bytes_sent": faces[r] * FACE, "messages": faces[r], "halo_us": (r + 1) * scale,
             "allreduce_us": (r + 2) * scale, "iteration_us": 100.0 * scale}
            for r in range(np_)]


def _table() -> pl.DataFrame:
    rows = []
    for rep, scale in enumerate((1.0, 1.2, 1.1)):
        rows += _rows(1, 2, 1, [1, 1], rep, scale)  # one node, 2 cores: 2 x 1 (grid 2x1x1)
        rows += _rows(1, 1, 2, [0], rep, scale)  # 1 x 2: no neighbour
        rows += _rows(2, 4, 1, [1, 2, 2, 1], rep, 2 * scale)  # two nodes, 4 cores: 2 per node x 1 (grid 4x1x1)
        rows += _rows(2, 2, 2, [1, 1], rep, 3 * scale)  # 1 per node x 2 threads (grid 2x1x1)
    return pl.DataFrame(rows)


def test_study_pairs_each_hybrid_shape_with_pure_mpi_at_equal_cores_over_nodes() -> None:
    study = hybrid_over_nodes(_table())
    assert [(r["nodes"], r["cores"], r["hybrid"], r["pure"]) for r in study] == [
        (1, 2, "1 × 2", "2 × 1"), (2, 4, "1 × 2", "2 × 1")]
    one, two = study
    assert one["hybrid_bytes_per_rank"] == 0 and one["pure_bytes_total"] == 2 * FACE and one["bytes_ratio"] == 0
    assert two["hybrid_bytes_per_rank"] == FACE and two["hybrid_bytes_total"] == 2 * FACE
    assert two["pure_bytes_per_rank"] == 1.5 * FACE and two["pure_bytes_total"] == 6 * FACE
    assert two["bytes_ratio"] == pytest.approx(1 / 3)
    assert two["hybrid_messages_per_rank"] == 1 and two["pure_messages_per_rank"] == 1.5
    # Halo over ranks, hybrid over 2 nodes: ranks at 1x and 2x (3 * scale): mean 4.5 * scale, min 3 * scale;
    # medians over the scales 1.0, 1.2, 1.1 take 1.1.
    assert two["hybrid_halo_mean_us"]["median"] == pytest.approx(4.5 * 1.1)
    assert two["hybrid_halo_min_us"]["median"] == pytest.approx(3 * 1.1)
    assert two["pure_halo_mean_us"]["median"] == pytest.approx(2.5 * 2 * 1.1)  # ranks 1..4
    assert two["pure_allreduce_min_us"]["median"] == pytest.approx(2 * 2 * 1.1)
    low, high = two["hybrid_halo_mean_us"]["ci"]
    assert 4.5 * 1.0 <= low <= 4.5 * 1.1 <= high <= 4.5 * 1.2
    # Ratio of the medians (4.5 vs 5 x 1.1), its CI within what the repetitions' extremes allow.
    ratio = two["halo_mean_ratio"]
    assert ratio["ratio"] == pytest.approx(0.9)
    assert 4.5 / (5 * 1.2) <= ratio["ci"][0] <= 0.9 <= ratio["ci"][1] <= 4.5 * 1.2 / 5
    assert two["iteration_ratio"]["ratio"] == pytest.approx(1.5)
    # Spread over repetitions: (1.2 - 1.0) / 1.1 of the iteration time.
    assert two["hybrid_spread"] == pytest.approx(0.2 / 1.1) and two["hybrid_n_reps"] == 3


def test_explicit_grids_stay_out_of_the_study() -> None:
    table = _table().with_columns(pl.lit(False).alias("grid_explicit"))
    gridded = pl.DataFrame([{**r, "cell": r["cell"].replace("-t1/", "-t1-g1x4x1/"), "grid_explicit": True,
                             "iteration_us": 1e6} for r in _rows(2, 4, 1, [1, 2, 2, 1], 0, 1.0)])
    study = hybrid_over_nodes(pl.concat([table, gridded], how="diagonal_relaxed"))
    assert [r["pure_iteration_us"]["median"] for r in study] == pytest.approx([110.0, 220.0])


def test_unequal_global_grids_get_no_ratio() -> None:
    # A hybrid record from before weak mode gave each core L³ points: half the pure launch's grid.
    table = _table().with_columns(
        pl.when(pl.col("cell_threads") > 1).then(pl.lit([L, L, L])).otherwise(pl.col("global_dims"))
        .alias("global_dims"))
    for row in hybrid_over_nodes(table):
        assert not row["equal_work"] and row["hybrid_global_dims"] == [L, L, L]
        assert row["iteration_ratio"]["ratio"] is None and row["bytes_ratio"] is None
    assert all(r["equal_work"] for r in hybrid_over_nodes(_table()))


def test_ratio_ci_resamples_repetitions() -> None:
    rng = np.random.default_rng(1)
    a, b = list(2.0 + 0.1 * rng.standard_normal(20)), list(1.0 + 0.05 * rng.standard_normal(20))
    got = ratio_ci(a, b)
    assert got["ratio"] == pytest.approx(2.0, rel=0.05) and got["ci"][0] < got["ratio"] < got["ci"][1]
    assert ratio_ci([1.0], [2.0]) == {"ratio": 0.5, "ci": [None, None]}
    assert ratio_ci([], [2.0])["ratio"] is None


def test_section_shows_the_study_and_names_cells_that_could_not_run_once() -> None:
    cells = pl.DataFrame({
        "cell": [f"kernel/i/ofi-tcp/node2/np{n}/jacobi/weak-L16-t{t}/rep0" for n, t in ((2, 4), (4, 4), (4, 1))],
        "benchmark": ["jacobi"] * 3, "status": ["unavailable", "unavailable", "unavailable"],
        "reason": ["a rank of 4 threads needs 4 cores; a node has 2"] * 2 + ["pure"]})
    line = not_run_line(cells)
    assert line == "2 hybrid cell(s) could not run: a rank of 4 threads needs 4 cores; a node has 2 (2)"
    data = ReportData("t", datetime(2026, 11, 28, tzinfo=UTC), cells=cells, kernels={"jacobi": _table()})
    section = section_kernel_jacobi_nodes(data)
    assert section is not None
    html = render_html(data, [section])
    assert HEADING in html and "bytes hybrid/pure" in html and line in html
    assert html.count("could not run") == 1
    assert "0.333" in html and "18.2 %" in html  # the bytes ratio, the spread
    empty = ReportData("t", datetime(2026, 11, 28, tzinfo=UTC))
    assert section_kernel_jacobi_nodes(empty) is None
