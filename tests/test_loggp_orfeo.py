"""Real data: LogGP calibrated on ONE measured Bcast algorithm predicts the others (ORFEO, OSU 7.3, 4 B).

Same datasets, topologies, region tables and placements as tests/test_predict_orfeo.py (read its
docstring). The region tables carry latency only, so :func:`mpiatlas.models.loggp_fit.calibrate`
fits g, o and the per-level term h where the data determine them. OSU's Avg Latency is the mean
over ranks of each rank's time in the call, so the fit and the comparison use ``rank_mean_us``
(``quantity="rank_mean"``).

**EPYC**, calibrated on ``basic_linear`` (255 process counts per mapping): it determines g tightly
and o loosely (fitted 0-0.08 µs, CI from 0 to 0.12-0.67 µs: LogGP's L is the wire latency λ − 2o, so
a hop costs λ whatever o and only when the root is done shows o); a linear Bcast has no level, so h
is not fitted. The figures below are the same with L = λ − 2o as with the earlier λ-as-L model
(o ≈ 0 here) to within 0.5 %.
Median |error| (uncalibrated = latency only, completion, as in test_predict_orfeo → calibrated):

| algorithm | core | socket | node |
|---|---|---|---|
| basic_linear (fitted on) | 344 % → 18 % | 210 % → 10 % | 370 % → 8 % |
| chain | 26 % → 20 % | 24 % → 13 % | 31 % → 20 % |
| binary_tree | 42 % → 18 % | 51 % → 29 % | 56 % → 34 % |
| default | 47 % → 25 % | 37 % → 29 % | 53 % → 36 % |

g = 0.221 [0.212, 0.230] µs (core), 0.341 [0.326, 0.356] (socket), 0.429 [0.417, 0.441] (node).
The misses (> 25 %) are the trees under socket and node placement, all under-predictions. Under
socket (and core) placement the error sits at P > 128, where node 1 joins: up to P = 128 binary_tree
is within 10 % (socket) / 13 % (core), beyond it the measurement jumps 10x (3.3 → 35.6 µs median)
and the prediction is 85 % short. Under node placement the trees are 27-30 % low at every P: the
per-level cost h that trees pay and a linear Bcast cannot show (calibrated on linear + binary_tree,
h = 0.30 µs, CI [0, 0.80]). test_epyc_tree_misses_come_from_the_second_node pins both.
Why each miss, with numbers (fitted parameters physical and with CIs; none per algorithm):

* **socket** (29 %, 29 %): the socket runs at P > 128 are perturbed, not slow: their 10th-90th percentile
  spread is 34-48x (core, same crossing edges: 2.8-4.1x); the quiet runs sit 1.4-1.5x above the
  prediction like core's (test_epyc_socket_tree_miss_is_run_to_run_perturbation). Without those P the
  socket trees are within 10-15 %.
* **node** (34 %, 36 %): measured/predicted is 1.36 (binary_tree) / 1.43 (default) at P <= 128 and 1.7 /
  1.8 above. Each tree parent sends one child across the nodes at every level, so a level pays an
  inter-node crossing per parent at once. A per-level term h (calibrated on linear + binary_tree: 0.30 µs,
  CI [0, 0.80]) or a NIC gap shared by a node's ranks (estimated from these ratios at 0.06-0.1 µs per
  message, not fitted) would cover it, but neither moves a linear Bcast, whose root's own gap (0.43 µs)
  paces its sends more slowly than the NIC: calibrated on basic_linear ALONE, as the goal asks, the data
  cannot determine it, and a value set by hand would be a per-algorithm fudge.
* **core** default (25 %) sits at the goal: its P > 128 part is the same 1.7-2.0x inter-node
  under-prediction.

Which one algorithm to calibrate on matters (every choice, median |error| of the worst algorithm):
core is best on basic_linear (24.6 %, above); node is best on the default Bcast (24.8 %: linear 24.8,
chain 8.6, binary_tree 18.2, default 16.8 %), whose mix of trees and the root's sends determines
both g and h (test_epyc_node_calibrated_on_default_predicts_every_algorithm). Socket has no choice
within 25 %: linear 29.4 %, binary_tree 31.5 %, chain 44.2 %, default 53.6 %, from the perturbed
runs above P = 128 (test_epyc_socket_tree_miss_is_run_to_run_perturbation). Calibrated on a tree
alone, g falls to 0 (two sends per parent cannot separate g from h) and linear is 75-97 % off.
Tolerances: the figure rounded up to the next 5 %.

**THIN** (P ≤ 24, one node), calibrated on ``binomial`` (23 process counts; bcast_linear.csv is
binomial too, so THIN has no linear Bcast): the trees alone leave o, g and h loosely determined
(CIs from 0). chain 32 → 34 % core, 10 → 13 % socket; binary_tree 29 → 25 %, 30 → 19 %; binomial
(fitted on) 21 → 28 %, 26 → 9 %; pipeline 12 → 16 %, 36 → 5 %; default 49 → 28 %, 18 → 8 %.
"""

from __future__ import annotations

import statistics
from functools import cache

import numpy as np
import pytest
import test_predict_orfeo as orfeo
from conftest import require_datasets

from mpiatlas.models.loggp_fit import Calibration, Measured, calibrate, predict_held_out
from mpiatlas.models.region_latency import Placement, RegionTable, place
from mpiatlas.node.topology_synthetic import parse_synthetic

EPYC_STEMS = {"basic_linear": "linear", "chain": "chain", "binary_tree": "bintree", "default": "def"}
# (algorithm, mapping) -> max median |error| of the prediction calibrated on basic_linear.
EPYC_TOLERANCE = {
    ("basic_linear", "core"): 0.20, ("chain", "core"): 0.25, ("binary_tree", "core"): 0.20,
    ("default", "core"): 0.30,
    ("basic_linear", "socket"): 0.15, ("chain", "socket"): 0.15, ("binary_tree", "socket"): 0.35,
    ("default", "socket"): 0.35,
    ("basic_linear", "node"): 0.10, ("chain", "node"): 0.25, ("binary_tree", "node"): 0.40,
    ("default", "node"): 0.40,
}  # fmt: skip
THIN_FILES = {"chain": ("chain", None), "binary_tree": ("binarytree", None), "binomial": ("binomial", None),
              "pipeline": ("pipeline", None), "default": ("default", None)}  # fmt: skip
THIN_TOLERANCE = {
    ("chain", "core"): 0.35, ("binary_tree", "core"): 0.30, ("binomial", "core"): 0.30,
    ("pipeline", "core"): 0.25, ("default", "core"): 0.30,
    ("chain", "socket"): 0.15, ("binary_tree", "socket"): 0.20, ("binomial", "socket"): 0.10,
    ("pipeline", "socket"): 0.25, ("default", "socket"): 0.10,
}  # fmt: skip


@cache
def _epyc(mapping: str) -> tuple[dict[str, list[Measured]], Placement]:
    data = {
        alg: [Measured("bcast", alg, n, 4, t) for n, t in sorted(orfeo._measured(orfeo._epyc_file(stem, mapping), mapping).items())]
        for alg, stem in EPYC_STEMS.items()
    }  # fmt: skip
    placement, order = orfeo.PLACEMENTS[mapping]
    return data, place(parse_synthetic(orfeo.EPYC_TOPOLOGY), 256, nodes=2, placement=placement, mapping=order)


@cache
def _epyc_calibration(mapping: str) -> Calibration:
    data, full = _epyc(mapping)
    return calibrate(data["basic_linear"], full, orfeo.EPYC_TABLE, quantity="rank_mean")


def _errors(measured: list[Measured], predicted: list[float]) -> tuple[float, float]:
    rel = [(p - m.latency_us) / m.latency_us for m, p in zip(measured, predicted)]
    return statistics.median(abs(e) for e in rel), statistics.median(rel)


def _predict(measured: list[Measured], full: Placement, table: RegionTable, cal: Calibration) -> list[float]:
    from mpiatlas.models.loggp import predict

    return [predict("bcast", m.algorithm, full.prefix(m.np), table, 4, params=cal.params).rank_mean_us for m in measured]


@pytest.mark.parametrize("mapping", ["core", "socket", "node"])
def test_epyc_linear_calibration_fits_the_gap(mapping: str) -> None:
    cal = _epyc_calibration(mapping)
    fitted = {p.name: p for p in cal.parameters}
    gap, overhead = fitted["gap_us"], fitted["overhead_us"]
    # The root's injection gap: 0.22 / 0.34 / 0.43 µs per send (±4-5 %); the 0.14 µs slope the latency-only
    # test quotes (P = 64..128, core) is one stretch of the same line.
    expected = {"core": 0.221, "socket": 0.341, "node": 0.429}[mapping]
    assert gap.fitted and gap.value == pytest.approx(expected, rel=0.02), gap.line()
    assert 0 < gap.ci_low < gap.value < gap.ci_high < 1.1 * gap.value, gap.line()
    # o ≈ 0, loosely: with L = λ - 2o a hop costs λ whatever o, only the root's finish (1/P of the mean) shows it.
    assert overhead.fitted and overhead.value < 0.1 and overhead.ci_low == 0, overhead.line()
    assert not fitted["level_us"].fitted and cal.params.level_us == 0.0  # a linear Bcast has no level


@pytest.mark.parametrize(("algorithm", "mapping"), list(EPYC_TOLERANCE))
def test_epyc_calibrated_on_linear_predicts_every_algorithm(algorithm: str, mapping: str) -> None:
    data, full = _epyc(mapping)
    measured = data[algorithm]
    assert len(measured) >= 240
    median_abs, _ = _errors(measured, _predict(measured, full, orfeo.EPYC_TABLE, _epyc_calibration(mapping)))
    assert median_abs <= EPYC_TOLERANCE[(algorithm, mapping)], f"{algorithm}/{mapping}: median |e| {median_abs:.1%}"


# Node placement, calibrated on Open MPI's *default* Bcast instead (what a user measures first): the
# default switches algorithm with P (models.ompi_decision), so its 255 points hold trees, which pay the
# per-level term h, and the root's gap as well; it determines g AND h, which linear alone cannot.
# Figures: basic_linear 24.8 %, chain 8.6 %, binary_tree 18.2 %, default (fitted on) 16.8 %, with
# g = 0.570 [0.458, 0.683] µs, h = 0.513 [0.268, 0.757] µs, o = 0 [0, 0.62] µs.
NODE_ON_DEFAULT_TOLERANCE = {"basic_linear": 0.25, "chain": 0.10, "binary_tree": 0.20, "default": 0.20}


@cache
def _epyc_node_default_calibration() -> Calibration:
    data, full = _epyc("node")
    return calibrate(data["default"], full, orfeo.EPYC_TABLE, quantity="rank_mean")


def test_epyc_node_default_calibration_fits_gap_and_level() -> None:
    fitted = {p.name: p for p in _epyc_node_default_calibration().parameters}
    gap, level = fitted["gap_us"], fitted["level_us"]
    assert gap.fitted and gap.value == pytest.approx(0.570, rel=0.02) and 0 < gap.ci_low < gap.ci_high, gap.line()
    assert level.fitted and level.value == pytest.approx(0.513, rel=0.02) and level.ci_low > 0, level.line()


@pytest.mark.parametrize("algorithm", list(NODE_ON_DEFAULT_TOLERANCE))
def test_epyc_node_calibrated_on_default_predicts_every_algorithm(algorithm: str) -> None:
    data, full = _epyc("node")
    measured = data[algorithm]
    predicted = _predict(measured, full, orfeo.EPYC_TABLE, _epyc_node_default_calibration())
    median_abs, _ = _errors(measured, predicted)
    assert median_abs <= NODE_ON_DEFAULT_TOLERANCE[algorithm], f"{algorithm}/node: median |e| {median_abs:.1%}"


# (mapping, algorithm) -> (max median |e| at P <= 128, signed median range at P > 128)
EPYC_HALVES = {
    ("core", "binary_tree"): (0.15, (-0.50, -0.35)), ("core", "default"): (0.20, (-0.55, -0.45)),
    ("socket", "binary_tree"): (0.15, (-0.90, -0.80)), ("socket", "default"): (0.20, (-0.85, -0.75)),
    ("node", "binary_tree"): (0.30, (-0.45, -0.35)), ("node", "default"): (0.35, (-0.50, -0.40)),
}  # fmt: skip


@pytest.mark.parametrize(("mapping", "algorithm"), list(EPYC_HALVES))
def test_epyc_tree_misses_come_from_the_second_node(mapping: str, algorithm: str) -> None:
    """Where the calibrated trees miss. Under core/socket the first 128 ranks fill node 0: there the error is
    10-17 %; beyond, the measurement jumps (socket binary_tree: median 3.3 µs at P <= 128, 35.6 µs above, 10x)
    far past one extra inter-node hop (1.82 µs), and the prediction falls 40-85 % short. Under node mapping
    (ranks dealt over both nodes) the trees are 27-30 % low at every P: a level costs more than o + L + g,
    the per-level term a linear Bcast cannot show."""
    data, full = _epyc(mapping)
    measured = data[algorithm]
    predicted = _predict(measured, full, orfeo.EPYC_TABLE, _epyc_calibration(mapping))
    low = [(m, p) for m, p in zip(measured, predicted) if m.np <= 128]
    high = [(m, p) for m, p in zip(measured, predicted) if m.np > 128]
    max_low, (lo, hi) = EPYC_HALVES[(mapping, algorithm)]
    median_low, _ = _errors([m for m, _ in low], [p for _, p in low])
    _, signed_high = _errors([m for m, _ in high], [p for _, p in high])
    assert median_low <= max_low, f"P <= 128: median |e| {median_low:.1%}"
    assert lo <= signed_high <= hi, f"P > 128: signed median {signed_high:+.1%}"


def test_leave_one_algorithm_out_on_epyc_core() -> None:
    """The campaign's use: each algorithm predicted from the others (every 4th P, to keep it quick)."""
    data, full = _epyc("core")
    pool = [m for series in data.values() for m in series[::4]]
    for held in ("binary_tree", "basic_linear"):
        cal, pairs = predict_held_out(pool, full, orfeo.EPYC_TABLE, ("bcast", held), quantity="rank_mean")
        assert cal.points == len(pool) - len(pairs) and {m.algorithm for m, _ in pairs} == {held}
        median_abs, _ = _errors([m for m, _ in pairs], [p for _, p in pairs])
        assert median_abs <= {"binary_tree": 0.25, "basic_linear": 0.55}[held], f"{held}: {median_abs:.1%}"


def _p_above_128(mapping: str, algorithm: str) -> tuple[list[float], list[float]]:
    """Measured and calibrated-predicted µs at P > 128 (node 1 in use under core and socket placement)."""
    data, full = _epyc(mapping)
    measured = [m for m in data[algorithm] if m.np > 128]
    return [m.latency_us for m in measured], _predict(measured, full, orfeo.EPYC_TABLE, _epyc_calibration(mapping))


@pytest.mark.parametrize("algorithm", ["binary_tree", "default"])
def test_epyc_socket_tree_miss_is_run_to_run_perturbation(algorithm: str) -> None:
    """Why socket binary_tree/default miss 25 % (29 %, 29 %) and no physical term can fix it: at P > 128 the
    socket runs (one run per P) scatter over 34-48x between their 10th and 90th percentiles (binary_tree
    7.7 .. 264 µs; neighbours 129 / 130: 3.8 / 302 µs), where core, with the very same node-crossing edges
    (ranks >= 128 on node 1, their parents on node 0), spans 2.8-4.1x. The quiet socket runs (10th
    percentile, 7.7 / 7.0 µs) sit 1.4-1.5x above the prediction, as core's median does (1.7-2.0x): that part
    is the real inter-node under-prediction of the trees (test_epyc_tree_misses_come_from_the_second_node)."""
    spread = {}
    for mapping in ("core", "socket"):
        measured, _ = _p_above_128(mapping, algorithm)
        p10, p90 = np.percentile(measured, [10, 90])
        spread[mapping] = p90 / p10
    assert spread["socket"] >= 20 and spread["core"] <= 5, spread
    measured, predicted = _p_above_128("socket", algorithm)
    quiet = float(np.percentile(measured, 10)) / statistics.median(predicted)
    assert 1.2 <= quiet <= 1.7, f"socket P > 128: quiet runs / prediction {quiet:.2f}"


@cache
def _thin(mapping: str) -> tuple[dict[str, list[Measured]], Placement, RegionTable, Calibration]:
    root = require_datasets() / "zampar-orfeo-osu-bcast-barrier/Excercise_1/bcast/results"
    data = {
        alg: [Measured("bcast", alg, n, 4, t) for n, t in
              sorted(orfeo._measured(root / f"bcast_{stem}.csv", mapping, algorithm=relabel, max_np=24).items())]
        for alg, (stem, relabel) in THIN_FILES.items()
    }  # fmt: skip
    placement, order = orfeo.PLACEMENTS[mapping]
    full = place(parse_synthetic(orfeo.THIN_TOPOLOGY), 24, nodes=1, placement=placement, mapping=order)
    table = orfeo._thin_table()
    return data, full, table, calibrate(data["binomial"], full, table, quantity="rank_mean")


@pytest.mark.parametrize(("algorithm", "mapping"), list(THIN_TOLERANCE))
def test_thin_calibrated_on_binomial_predicts_the_others(algorithm: str, mapping: str) -> None:
    data, full, table, cal = _thin(mapping)
    assert len(data[algorithm]) >= 12
    median_abs, _ = _errors(data[algorithm], _predict(data[algorithm], full, table, cal))
    assert median_abs <= THIN_TOLERANCE[(algorithm, mapping)], f"{algorithm}/{mapping}: median |e| {median_abs:.1%}"
