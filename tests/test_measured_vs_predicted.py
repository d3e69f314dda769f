"""Measured against predicted (models/measured_vs_predicted.py) on recorded data: the ORFEO EPYC OSU Bcast
sets (valentinis dataset: basic_linear, chain, binary_tree and Open MPI's default under map-by core, socket
and node, P = 2..256), imported through mpiatlas's OSU importer, against the published EPYC region table on
the synthetic 2 × EPYC 7H12 topology (the same inputs as tests/test_predict_orfeo.py and test_loggp_orfeo.py).

Uncalibrated (region table, latency only, completion), every P, 4 B: the median |error| per algorithm is
the figure test_predict_orfeo states (its tolerances: the figure rounded up to the next 5 %), so the
library reproduces today's model exactly: basic_linear core 344 %, socket 210 %, node 370 %; chain 26 / 24
/ 31 %; binary_tree 42 / 51 / 56 %; default 47 / 37 / 53 %.

Calibrated (LogGP o, g, h fitted with models/loggp_fit.py: g only between a rank's back-to-back sends,
spaced g + (m − 1)·G (loggp._Edges.spacing; at 4 B on a table without bandwidth, g), a single message
costs λ; a robust fit of log ratios; rank_mean, OSU's Avg Latency). **The split, fixed before any
prediction was looked at**: every 16th P (P = 16, 32, .., 256) of every series, so that
calibration and evaluation share the P grid and a calibration costs ~45 points;

* leave one algorithm out (LOAO): each algorithm under one mapping predicted by the three others under that
  mapping (the default Bcast's runs where Open MPI's decision calls the held-out algorithm held out too);
* leave one mapping out (LOMO): every algorithm under one mapping predicted by every algorithm under the two
  other mappings (each priced with its own placement);
* neither calibrates on a **perturbed launch** (models/perturbed_runs.py: its 1..16 B times, latency-bound,
  spread over 2x; no core-mapped launch spreads more than 1.70x: test_perturbed_launch_rule_comes_from_core).
  Under socket mapping that is 473 of the 503 launches from P = 128 on: 6 to 9 of a series' 15 or 16
  points.

Median |error| per held-out cell, over every point / over the unperturbed ones (before: LOAO calibrated on
every run, perturbed ones included; LOMO did not exist here: test_loggp_orfeo's, every 4th P, perturbed runs
included, has core 56-104 %, socket 10-39 %, node 19-41 %). ``*``: misses the 25 % goal on unperturbed
points, its cause in MISSES, tested below.

| LOAO | core | socket | node |
|---|---|---|---|
| basic_linear | 22 → 22 % | 97 → 35 / 29 %* | 43 → 45 %* |
| binary_tree | 16 → 16 % | 26 → 27 / 4 % | 5 → 5 % |
| chain | 14 → 14 % | 50 → 32 / 15 % | 6 → 6 / 7 % |
| default | 12 → 12 % | 46 → 32 / 18 % | 11 → 11 % |

| LOMO | core | socket | node |
|---|---|---|---|
| basic_linear | 61 %* | 12 / 10 % | 34 %* |
| binary_tree | 62 %* | 27 / 24 % | 40 %* |
| chain | 81 %* | 16 / 13 % | 18 % |
| default | 53 %* | 38 / 29 %* | 43 %* |

On every point, socket mapping misses in LOAO (27-35 %) and, for binary_tree and default, in LOMO: about
half its points are perturbed launches, whose 1..16 B times spread 11x at the median, which no model of
the collective follows.
Tolerances: the figure rounded up to the next 5 %.
"""

from __future__ import annotations

import dataclasses
import statistics
from functools import cache

import polars as pl
import pytest
import test_predict_orfeo as orfeo
from conftest import require_datasets

from mpiatlas.models.loggp_fit import Calibration, Measured, calibrate, calibrate_groups, predicted
from mpiatlas.models.measured_vs_predicted import Comparison, SeriesInputs, compare, pick_size
from mpiatlas.models.perturbed_runs import SPREAD, launch_spread, perturbed_launches
from mpiatlas.models.region_latency import place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.tables.importer import import_files

GOAL = 0.25
ALGORITHMS = ("basic_linear", "binary_tree", "chain", "default")
MAPPINGS = ("core", "socket", "node")
UNCALIBRATED = {  # (mapping, algorithm) -> max median |error|, every P (test_predict_orfeo's tolerances)
    ("core", "basic_linear"): 3.45, ("socket", "basic_linear"): 2.15, ("node", "basic_linear"): 3.75,
    ("core", "chain"): 0.30, ("socket", "chain"): 0.30, ("node", "chain"): 0.35,
    ("core", "binary_tree"): 0.45, ("socket", "binary_tree"): 0.55, ("node", "binary_tree"): 0.60,
    ("core", "default"): 0.50, ("socket", "default"): 0.40, ("node", "default"): 0.55,
}  # fmt: skip
# (mapping, algorithm) -> (max median |error| over every point, over the unperturbed points), every 16th P.
LOAO = {
    ("core", "basic_linear"): (0.25, 0.25), ("socket", "basic_linear"): (0.35, 0.30), ("node", "basic_linear"): (0.45, 0.45),
    ("core", "binary_tree"): (0.20, 0.20), ("socket", "binary_tree"): (0.30, 0.05), ("node", "binary_tree"): (0.05, 0.05),
    ("core", "chain"): (0.15, 0.15), ("socket", "chain"): (0.35, 0.20), ("node", "chain"): (0.10, 0.10),
    ("core", "default"): (0.15, 0.15), ("socket", "default"): (0.35, 0.20), ("node", "default"): (0.15, 0.15),
}  # fmt: skip
LOMO = {
    ("core", "basic_linear"): (0.65, 0.65), ("socket", "basic_linear"): (0.15, 0.15), ("node", "basic_linear"): (0.35, 0.35),
    ("core", "binary_tree"): (0.65, 0.65), ("socket", "binary_tree"): (0.30, 0.25), ("node", "binary_tree"): (0.45, 0.45),
    ("core", "chain"): (0.85, 0.85), ("socket", "chain"): (0.20, 0.15), ("node", "chain"): (0.20, 0.20),
    ("core", "default"): (0.55, 0.55), ("socket", "default"): (0.40, 0.30), ("node", "default"): (0.45, 0.45),
}  # fmt: skip
# The cells whose unperturbed median misses GOAL, each with its cause (tested below from the data).
_LINEAR_SOCKET = ("under socket mapping a linear root's P - 1 back-to-back sends leave 0.31 µs apart, 1.5x the gap "
                  "the other algorithms' 2 to 12 show (0.21 µs; each outside the other's 95 % CI, under core each inside): "
                  "test_linear_roots_gap_is_not_the_other_algorithms")
_LINEAR_NODE = ("under node mapping the other algorithms fit g 1.5x the linear runs' own (0.64 against 0.43 µs): their "
                "edge-less excess (test_loggp_orfeo::test_epyc_node_excess_is_in_no_edge) lands in g: "
                "test_linear_roots_gap_is_not_the_other_algorithms")
_CORE_FROM_NODE = ("core held out: h fitted with the node-mapped runs (0.72 µs) is 2.2x core's own (0.33 µs), the node "
                   "mapping's edge-less excess; over-predicted: test_node_runs_carry_an_excess_into_lomo")
_NODE_FROM_OTHERS = ("node held out: core + socket cannot show the node mapping's edge-less excess; under-predicted: "
                     "test_node_runs_carry_an_excess_into_lomo")
_DEFAULT_SOCKET = ("socket default from core + node: over-predicted (+29 %) on its knomial/binomial runs (P < 128), "
                   "cause not pinned down: test_node_runs_carry_an_excess_into_lomo pins the sign")
MISSES = {
    ("LOAO", "socket", "basic_linear"): _LINEAR_SOCKET, ("LOAO", "node", "basic_linear"): _LINEAR_NODE,
    **{("LOMO", "core", a): _CORE_FROM_NODE for a in ALGORITHMS},
    **{("LOMO", "node", a): _NODE_FROM_OTHERS for a in ("basic_linear", "binary_tree", "default")},
    ("LOMO", "socket", "default"): _DEFAULT_SOCKET,
}  # fmt: skip
CALIBRATION_P = 16  # every 16th P


@cache
def _samples() -> pl.DataFrame:
    root = require_datasets() / "valentinis-orfeo-epyc-osu-bcast-barrier/exercise1/results_def"
    result = import_files(sorted(root.glob("bcast_*_results_wu_*.csv")))
    assert not result.failed and result.samples is not None
    return result.samples


@cache
def _measured() -> pl.DataFrame:
    """OSU Avg Latency at 4 B, median per (mapping, algorithm, P), through `mpiatlas import`'s reader."""
    samples = _samples().filter(pl.col("bytes") == 4)
    return (
        samples.group_by("mapping", "algorithm", "np", "bytes")
        .agg(pl.col("t_usec").median().alias("measured_us"))
        .select(pl.col("mapping").alias("group"), pl.lit("bcast").alias("collective"), "algorithm",
                pl.col("np").cast(pl.Int64), pl.col("bytes").cast(pl.Int64), "measured_us")
    )


@cache
def _flagged() -> pl.DataFrame:
    """:func:`_measured` at every 16th P with each launch's ``perturbed`` flag (models/perturbed_runs.py)."""
    flags = perturbed_launches(_samples(), ["mapping", "algorithm", "np"]).select(
        pl.col("mapping").alias("group"), "algorithm", pl.col("np").cast(pl.Int64), "perturbed")
    out = _measured().filter(pl.col("np") % CALIBRATION_P == 0).join(flags, on=["group", "algorithm", "np"], how="left")
    assert out.get_column("perturbed").null_count() == 0
    return out.sort("group", "algorithm", "np")


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
    return compare(_flagged(), _inputs())


def _runs(mapping: str, algorithm: str | None = None, *, clean: bool = True) -> list[Measured]:
    f = _flagged().filter((pl.col("group") == mapping) & (~pl.col("perturbed") if clean else pl.lit(True)))
    if algorithm is not None:
        f = f.filter(pl.col("algorithm") == algorithm)
    return [Measured("bcast", a, n, b, t) for a, n, b, t in f.select("algorithm", "np", "bytes", "measured_us").iter_rows()]


@cache
def _lomo_calibration(held: str) -> Calibration:
    """Every algorithm's unperturbed runs under the two mappings other than ``held``, each with its placement."""
    groups = [(_runs(m), _inputs()[m].placement) for m in MAPPINGS if m != held]
    return calibrate_groups(groups, orfeo.EPYC_TABLE, quantity="rank_mean")


@cache
def _lomo(held: str) -> pl.DataFrame:
    """(algorithm, np, error, perturbed) of every run under ``held`` predicted by :func:`_lomo_calibration`."""
    f = _flagged().filter(pl.col("group") == held)
    runs = _runs(held, clean=False)
    pred = predicted(_lomo_calibration(held), [(runs, _inputs()[held].placement)], orfeo.EPYC_TABLE, quantity="rank_mean")
    assert [(x.algorithm, x.np) for x in runs] == list(f.select("algorithm", "np").iter_rows())
    return f.select("algorithm", "np", "perturbed").with_columns(
        pl.Series("error", [(p - x.latency_us) / x.latency_us for x, p in zip(runs, pred)]))


def _medians(errors: pl.DataFrame) -> tuple[float, float, float]:
    """(median |error| over every point, over the unperturbed ones, signed median over the unperturbed ones)."""
    clean = errors.filter(~pl.col("perturbed")).get_column("error").to_list()
    every = errors.get_column("error").to_list()
    return (statistics.median(abs(e) for e in every), statistics.median(abs(e) for e in clean),
            statistics.median(clean))  # fmt: skip


def _loao_errors(mapping: str, algorithm: str) -> pl.DataFrame:
    points = _calibrated().points.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    flags = _flagged().filter(pl.col("group") == mapping).select("algorithm", "np", "perturbed")
    return points.join(flags, on=["algorithm", "np"]).select("np", "perturbed", pl.col("calibrated_error").alias("error"))


def _check_cell(split: str, mapping: str, algorithm: str, errors: pl.DataFrame, tolerance: tuple[float, float]) -> None:
    every, clean, signed = _medians(errors)
    what = f"{split} {mapping}/{algorithm}: median |e| {every:.1%} every point, {clean:.1%} unperturbed ({signed:+.1%})"
    assert errors.height >= 15 and errors.get_column("error").null_count() == 0, what
    assert every <= tolerance[0] and clean <= tolerance[1], what
    # A cell leaves MISSES the day it meets the goal (and a new miss needs its cause).
    assert (clean > GOAL) == ((split, mapping, algorithm) in MISSES), what


@pytest.mark.parametrize(("mapping", "algorithm"), list(UNCALIBRATED))
def test_region_model_errors_are_todays(mapping: str, algorithm: str) -> None:
    c = _uncalibrated()
    points = c.points.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    assert points.height >= 240 and points.get_column("calibrated_us").null_count() == points.height
    median = _median(c, mapping, algorithm, "median_abs")
    assert median <= UNCALIBRATED[(mapping, algorithm)], f"{mapping}/{algorithm}: median |e| {median:.1%}"
    if algorithm == "basic_linear":  # the failure test_predict_orfeo pins: a full latency per send, 2-4x over
        assert 2.0 <= points.get_column("error").median() <= 4.0  # type: ignore[operator]


@pytest.mark.parametrize(("mapping", "algorithm"), list(LOAO))
def test_leave_one_algorithm_out_errors(mapping: str, algorithm: str) -> None:
    _check_cell("LOAO", mapping, algorithm, _loao_errors(mapping, algorithm), LOAO[(mapping, algorithm)])
    row = _calibrated().summary.filter((pl.col("group") == mapping) & (pl.col("algorithm") == algorithm))
    assert set(row.get_column("calibrated_on").item().split(", ")) == set(ALGORITHMS) - {algorithm}


@pytest.mark.parametrize(("mapping", "algorithm"), list(LOMO))
def test_leave_one_mapping_out_errors(mapping: str, algorithm: str) -> None:
    _check_cell("LOMO", mapping, algorithm, _lomo(mapping).filter(pl.col("algorithm") == algorithm), LOMO[(mapping, algorithm)])


def test_print_the_tables() -> None:
    """The two tables (run with -s to see them)."""
    for split in ("LOAO", "LOMO"):
        print(f"\n| {split} | " + " | ".join(MAPPINGS) + " |")
        for alg in ALGORITHMS:
            figures = []
            for m in MAPPINGS:
                errors = _loao_errors(m, alg) if split == "LOAO" else _lomo(m).filter(pl.col("algorithm") == alg)
                every, clean, signed = _medians(errors)
                figures.append(f"{every:.1%} / {clean:.1%} ({signed:+.1%})")
            print(f"| {alg} | " + " | ".join(figures) + " |")
    assert set(LOAO) == set(LOMO) == {(m, a) for m in MAPPINGS for a in ALGORITHMS}


def test_perturbed_launch_rule_comes_from_core() -> None:
    """models/perturbed_runs.py's threshold: no launch bound to its core (map-by core) spreads its 1..16 B times
    over 1.70x, so SPREAD = 2 flags none; from P = 128 on nearly every socket-mapped launch spreads more."""
    spread = launch_spread(_samples(), ["mapping", "algorithm", "np"])
    core = spread.filter(pl.col("mapping") == "core").get_column("spread")
    assert core.len() >= 1000 and core.max() <= 1.70 < SPREAD  # type: ignore[operator]
    late = spread.filter((pl.col("mapping") == "socket") & (pl.col("np") >= 128)).get_column("spread")
    assert (late > SPREAD).sum() >= 0.9 * late.len() and late.median() >= 5  # type: ignore[operator]
    early = spread.filter((pl.col("mapping") != "core") & (pl.col("np") < 128)).get_column("spread")
    assert (early > SPREAD).mean() <= 0.05  # type: ignore[operator]


def test_calibration_skips_perturbed_launches() -> None:
    """Scaling the flagged runs' times a hundredfold leaves every calibrated prediction of an unflagged run unchanged."""
    socket = _flagged().filter(pl.col("group") == "socket")
    assert socket.get_column("perturbed").sum() >= 30
    spoiled = socket.with_columns(pl.when(pl.col("perturbed")).then(pl.col("measured_us") * 100)
                                  .otherwise(pl.col("measured_us")).alias("measured_us"))  # fmt: skip
    inputs = {"socket": _inputs()["socket"]}
    a, b = (compare(f, inputs).points for f in (socket, spoiled))
    keep = ~socket.get_column("perturbed")
    assert (a.get_column("calibrated_us").filter(keep) - b.get_column("calibrated_us").filter(keep)).abs().max() < 1e-9  # type: ignore[operator]


def test_linear_roots_gap_is_not_the_other_algorithms() -> None:
    """g fitted on the other three algorithms' unperturbed runs against g fitted on the linear runs alone: under
    core each value lies inside the other's 95 % CI; under socket the linear root's gap is the larger by 1.3x or
    more, each value outside the other's CI; under node the other algorithms' g is the larger by 1.3x or more."""
    gap: dict[tuple[str, str], tuple[float, float, float]] = {}
    for m in MAPPINGS:
        others = [x for a in ALGORITHMS if a != "basic_linear" for x in _runs(m, a)]
        for name, runs in (("others", others), ("linear", _runs(m, "basic_linear"))):
            p = calibrate(runs, _inputs()[m].placement, orfeo.EPYC_TABLE, quantity="rank_mean").parameters[0]
            assert p.name == "gap_us" and p.fitted
            gap[(m, name)] = (p.value, p.ci_low, p.ci_high)
    def inside(a: str, b: str, m: str) -> bool:  # a's value inside b's 95 % CI
        return gap[(m, b)][1] <= gap[(m, a)][0] <= gap[(m, b)][2]

    assert inside("others", "linear", "core") and inside("linear", "others", "core"), gap
    assert gap[("socket", "linear")][0] >= 1.3 * gap[("socket", "others")][0], gap
    assert not inside("others", "linear", "socket") and not inside("linear", "others", "socket"), gap
    assert gap[("node", "others")][0] >= 1.3 * gap[("node", "linear")][0], gap


def test_node_runs_carry_an_excess_into_lomo() -> None:
    """Core held out: h fitted with the node runs is twice core's own (fitted on core alone), and every core
    algorithm is over-predicted; node held out: its algorithms are under-predicted; socket's default over-predicted."""
    own = calibrate_groups([(_runs("core"), _inputs()["core"].placement)], orfeo.EPYC_TABLE, quantity="rank_mean")
    h = {c.name: c.value for c in _lomo_calibration("core").parameters}["level_us"]
    assert h >= 2 * {c.name: c.value for c in own.parameters}["level_us"]
    for alg in ALGORITHMS:
        assert _medians(_lomo("core").filter(pl.col("algorithm") == alg))[2] > 0.25
        assert _medians(_lomo("node").filter(pl.col("algorithm") == alg))[2] < -0.15
    assert _medians(_lomo("socket").filter(pl.col("algorithm") == "default"))[2] > 0.25


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


def test_calibrated_o_and_g_against_the_loggp_kernels() -> None:
    """The calibrated o and g against the loggp kernel's own (tests/data/kernels: Intel MPI shm on this machine's
    same_l3 pair, 4 B), each as a fraction of its machine's same_l3 λ (the EPYC table's 0.15 µs; the kernel's
    rtt/2): the kernel's o = (o_s + o_r)/2 is 0.65 λ, its g 0.49 λ. Calibration split, fixed before looking at
    any prediction: every algorithm's unperturbed core-mapped runs at every 16th P (the module's split; core is
    the mapping none of whose launches is perturbed).

    * o is not determined by the Bcast times: its 95 % CI reaches from 0 past 5x the kernel's o scaled to EPYC
      (0.098 µs), and pricing the same runs with that o instead of the fitted 0 moves the median prediction by
      under 2 % (measured 1.1 %): a single send costs λ whatever o is (L = λ − 2o), o only shifts when a
      sender is done. The fitted 0 is the interval's end, not a contradiction of the kernel.
    * g is determined, and 2.5 to 4x the kernel's g scaled to EPYC (measured 0.239 against 0.074 µs, 3.2x), the
      scaled kernel g below the calibrated g's CI. Pinned, not explained away: the two are not the same machine
      or library (Open MPI on the EPYC 7H12 against Intel MPI's shm on this VM), and the calibrated scalar g
      covers a root's sends into every region (under core, P = 256 sends to the other socket and node too),
      where the kernel's is the nearest pair's."""
    from test_loggp import _kernel_at

    kernel = _kernel_at(4)
    lam = kernel["rtt_usec"] / 2
    o_ratio, g_ratio = (kernel["o_s_usec"] + kernel["o_r_usec"]) / 2 / lam, kernel["g_usec"] / lam
    assert 0.55 <= o_ratio <= 0.75 and 0.40 <= g_ratio <= 0.60, (o_ratio, g_ratio)
    epyc_l3 = orfeo.EPYC_TABLE.latency_us["same_l3"]
    o_x, g_x = o_ratio * epyc_l3, g_ratio * epyc_l3

    groups = [(_runs("core"), _inputs()["core"].placement)]
    cal = calibrate_groups(groups, orfeo.EPYC_TABLE, quantity="rank_mean")
    fitted = {p.name: p for p in cal.parameters}
    o, g = fitted["overhead_us"], fitted["gap_us"]
    assert o.fitted and g.fitted
    assert o.ci_low <= min(o.value, o_x) and o.ci_high >= 5 * o_x, o
    base = predicted(cal, groups, orfeo.EPYC_TABLE, quantity="rank_mean")
    with_kernel_o = dataclasses.replace(cal, params=dataclasses.replace(cal.params, overhead_us=o_x))
    moved = [abs(a - b) / b for a, b in zip(predicted(with_kernel_o, groups, orfeo.EPYC_TABLE, quantity="rank_mean"), base)]
    assert statistics.median(moved) < 0.02 and max(moved) < 0.10, (statistics.median(moved), max(moved))
    assert g_x < g.ci_low and 2.5 <= g.value / g_x <= 4.0, (g, g_x)
