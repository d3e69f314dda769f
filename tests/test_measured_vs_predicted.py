"""Measured against predicted (models/measured_vs_predicted.py) on recorded data: the ORFEO EPYC OSU Bcast
sets (valentinis dataset: basic_linear, chain, binary_tree and Open MPI's default under map-by core, socket
and node, P = 2..256), imported through mpiatlas's OSU importer, against the published EPYC region table on
the synthetic 2 × EPYC 7H12 topology (the same inputs as tests/test_predict_orfeo.py and test_loggp_orfeo.py).

Uncalibrated (region table, latency only, completion), every P, 4 B: the median |error| per algorithm is
the figure test_predict_orfeo states (its tolerances: the figure rounded up to the next 5 %), so the
library reproduces today's model exactly: basic_linear core 344 %, socket 210 %, node 370 %; chain 26 / 24
/ 31 %; binary_tree 42 / 51 / 56 %; default 47 / 37 / 53 %.

Calibrated leave-one-algorithm-out (each algorithm predicted by LogGP fitted on the three others, the
default Bcast's runs where Open MPI's decision calls the held-out algorithm held out too; rank_mean), every
16th P (P = 16, 32, .., 256: 12 calibrations of ~45 points keep the test short):

| algorithm | core | socket | node |
|---|---|---|---|
| basic_linear | 365 → 22 % | 218 → 97 % | 397 → 43 % |
| binary_tree | 30 → 16 % | 41 → 26 % | 53 → 5 % |
| chain | 23 → 14 % | 24 → 50 % | 37 → 6 % |
| default | 47 → 12 % | 39 → 46 % | 37 → 11 % |

(models/loggp.py: g only between back-to-back sends, a single message costs λ; a robust fit of log ratios.)
The misses are the ones tests/test_loggp_orfeo.py explains over every P: under socket mapping the runs above
P = 128 are perturbed run to run (a third of these 16 points), and a linear root's gap is not determined by
algorithms that send few messages back to back (4 from a chain root, up to 12 from a knomial one). Tolerances: the figure rounded up to the next 5 %.
"""

from __future__ import annotations

from functools import cache

import polars as pl
import pytest
import test_predict_orfeo as orfeo
from conftest import require_datasets

from mpiatlas.models.measured_vs_predicted import Comparison, SeriesInputs, compare, pick_size
from mpiatlas.models.region_latency import place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.tables.importer import import_files

UNCALIBRATED = {  # (mapping, algorithm) -> max median |error|, every P (test_predict_orfeo's tolerances)
    ("core", "basic_linear"): 3.45, ("socket", "basic_linear"): 2.15, ("node", "basic_linear"): 3.75,
    ("core", "chain"): 0.30, ("socket", "chain"): 0.30, ("node", "chain"): 0.35,
    ("core", "binary_tree"): 0.45, ("socket", "binary_tree"): 0.55, ("node", "binary_tree"): 0.60,
    ("core", "default"): 0.50, ("socket", "default"): 0.40, ("node", "default"): 0.55,
}  # fmt: skip
CALIBRATED = {  # (mapping, algorithm) -> max median |error| calibrated on the three others, every 16th P
    ("core", "basic_linear"): 0.25, ("socket", "basic_linear"): 1.00, ("node", "basic_linear"): 0.45,
    ("core", "chain"): 0.15, ("socket", "chain"): 0.50, ("node", "chain"): 0.10,
    ("core", "binary_tree"): 0.20, ("socket", "binary_tree"): 0.30, ("node", "binary_tree"): 0.10,
    ("core", "default"): 0.15, ("socket", "default"): 0.50, ("node", "default"): 0.15,
}  # fmt: skip


@cache
def _measured() -> pl.DataFrame:
    """OSU Avg Latency at 4 B, median per (mapping, algorithm, P), through `mpiatlas import`'s reader."""
    root = require_datasets() / "valentinis-orfeo-epyc-osu-bcast-barrier/exercise1/results_def"
    result = import_files(sorted(root.glob("bcast_*_results_wu_*.csv")))
    assert not result.failed and result.samples is not None
    samples = result.samples.filter(pl.col("bytes") == 4)
    return (
        samples.group_by("mapping", "algorithm", "np", "bytes")
        .agg(pl.col("t_usec").median().alias("measured_us"))
        .select(pl.col("mapping").alias("group"), pl.lit("bcast").alias("collective"), "algorithm",
                pl.col("np").cast(pl.Int64), pl.col("bytes").cast(pl.Int64), "measured_us")
    )


def _inputs() -> dict[str, SeriesInputs]:
    topo = parse_synthetic(orfeo.EPYC_TOPOLOGY)
    return {
        mapping: SeriesInputs(orfeo.EPYC_TABLE, place(topo, 256, nodes=2, placement=placement, mapping=order))
        for mapping, (placement, order) in orfeo.PLACEMENTS.items()
    }


def _median(c: Comparison, mapping: str, algorithm: str, column: str) -> float:
    row = c.summary.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    assert row.height == 1, f"{mapping}/{algorithm} missing from the summary"
    value = row.get_column(column).item()
    assert isinstance(value, float)
    return value


@cache
def _uncalibrated() -> Comparison:
    return compare(_measured(), _inputs(), calibrate=False)


@cache
def _calibrated() -> Comparison:
    return compare(_measured().filter(pl.col("np") % 16 == 0), _inputs())


@pytest.mark.parametrize(("mapping", "algorithm"), list(UNCALIBRATED))
def test_region_model_errors_are_todays(mapping: str, algorithm: str) -> None:
    c = _uncalibrated()
    points = c.points.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    assert points.height >= 240 and points.get_column("calibrated_us").null_count() == points.height
    median = _median(c, mapping, algorithm, "median_abs")
    assert median <= UNCALIBRATED[(mapping, algorithm)], f"{mapping}/{algorithm}: median |e| {median:.1%}"
    if algorithm == "basic_linear":  # the failure test_predict_orfeo pins: a full latency per send, 2-4x over
        assert 2.0 <= points.get_column("error").median() <= 4.0  # type: ignore[operator]


@pytest.mark.parametrize(("mapping", "algorithm"), list(CALIBRATED))
def test_leave_one_algorithm_out_errors(mapping: str, algorithm: str) -> None:
    c = _calibrated()
    median = _median(c, mapping, algorithm, "calibrated_median_abs")
    assert median <= CALIBRATED[(mapping, algorithm)], f"{mapping}/{algorithm}: calibrated median |e| {median:.1%}"
    others = {"basic_linear", "binary_tree", "chain", "default"} - {algorithm}
    row = c.summary.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    assert set(row.get_column("calibrated_on").item().split(", ")) == others


def test_point_errors_are_relative_to_the_measurement() -> None:
    points = _uncalibrated().points
    recomputed = (points["predicted_us"] - points["measured_us"]) / points["measured_us"]
    assert (recomputed - points["error"]).abs().max() < 1e-12  # type: ignore[operator]


def test_single_process_count_and_missing_table_are_said_once() -> None:
    one_p = _measured().filter(pl.col("np") == 64).with_columns(pl.lit("one-P").alias("group"))
    no_table = _measured().filter(pl.col("np") <= 8).with_columns(pl.lit("no-table").alias("group"))
    c = compare(pl.concat([one_p, no_table]), {})
    assert c.points.height == 0
    lines = c.note_lines()
    assert len(lines) == 2, lines
    assert any(line.startswith("measured at one process count only") and "one-P bcast chain" in line for line in lines)
    assert any(line.startswith("no region table") and "no-table bcast" in line for line in lines)


def test_pick_size_prefers_4_bytes() -> None:
    assert pick_size([{0, 1, 4, 8}, {1, 4}]) == 4
    assert pick_size([{0, 2, 8}, {2, 8, 16}]) == 2
    assert pick_size([{0}, {0}]) is None
