"""Real data: LogGP calibrated on some ORFEO Bcast runs predicts the held-out ones (OSU 7.3, 4 B).

Same datasets, topologies, region tables and placements as tests/test_predict_orfeo.py (read its
docstring): EPYC (valentinis, Open MPI 4.1.5, 2 nodes, P = 2..256, basic_linear / chain / binary_tree /
default under ``--map-by core|socket|node``) and THIN (zampar, Xeon Gold 6126, P <= 24 under core and
socket: the one node its own latency table covers; its node mapping has no measured inter-node latency,
PROVENANCE E, so it is not predicted). The region tables carry λ only; o, g and the per-level term h are
fitted (:func:`mpiatlas.models.loggp_fit.calibrate_groups`: robust fit of log ratios). OSU's Avg Latency
is the mean over ranks of each rank's time in the call, so fit and comparison use ``rank_mean_us``.

The model (models/loggp.py): a rank's k back-to-back sends cost ``o + (k-1)·g``; a rank that sends one
message pays o, not g; a forwarder adds h after its data arrived; a message arrives λ after its send began
(L = λ − 2o). The loggp kernel's own recorded o, g and round trips check those rules on single sends
(tests/test_loggp.py::test_single_sends_match_the_loggp_kernels_round_trips).

**The split, fixed before any prediction was looked at** (nothing is chosen by its error):

* leave one algorithm out (LOAO): per (dataset, mapping, algorithm), calibrate on every *other* algorithm's
  runs under that mapping; the default Bcast's runs at the P where Open MPI's decision
  (models.ompi_decision) calls the held-out algorithm are removed from the calibration too (else "default",
  mostly binary_tree at P 128..255, would hand the held-out runs back in-sample);
* leave one mapping out (LOMO): per (dataset, mapping), calibrate on every algorithm's runs under the
  *other* mappings (each with its own placement), predict every algorithm under the held-out one.

Calibration uses every CALIBRATION_STRIDE-th P of its series (for time); the error is the median
|relative error| over *every* P of the held-out series. Goal: <= 25 % in every cell. Cells that miss are
marked xfail (strict: a cell that starts meeting the goal fails the mark) with the reason measured below.

Median |relative error| per held-out cell (``*``: misses the 25 % goal; THIN node: not predicted):

| split | dataset | algorithm | core | socket | node |
|---|---|---|---|---|---|
| LOAO | EPYC | basic_linear | 20.2% | 80.1%* | 43.7%* |
| LOAO | EPYC | chain | 19.9% | 45.6%* | 10.6% |
| LOAO | EPYC | binary_tree | 19.2% | 32.6%* | 14.5% |
| LOAO | EPYC | default | 19.4% | 36.4%* | 17.9% |
| LOAO | THIN | chain | 30.1%* | 11.4% | — |
| LOAO | THIN | binary_tree | 24.7% | 11.9% | — |
| LOAO | THIN | binomial | 28.4%* | 9.3% | — |
| LOAO | THIN | pipeline | 73.1%* | 10.2% | — |
| LOAO | THIN | default | 28.8%* | 18.6% | — |
| LOMO | EPYC | basic_linear | 66.5%* | 10.1% | 33.6%* |
| LOMO | EPYC | chain | 104.3%* | 22.7% | 19.3% |
| LOMO | EPYC | binary_tree | 84.0%* | 38.8%* | 36.4%* |
| LOMO | EPYC | default | 56.3%* | 35.7%* | 40.7%* |
| LOMO | THIN | chain | 30.2%* | 15.2% | — |
| LOMO | THIN | binary_tree | 29.7%* | 8.1% | — |
| LOMO | THIN | binomial | 30.6%* | 8.4% | — |
| LOMO | THIN | pipeline | 17.6% | 6.8% | — |
| LOMO | THIN | default | 34.6%* | 13.3% | — |

22 of 44 cells miss. Where: EPYC socket above P = 128 (perturbed runs), EPYC node mapping (a cost in no
edge), EPYC core predicted from socket + node, a linear root's gap predicted from algorithms that send few
messages back to back, THIN core (one region below P = 13). Each has its reason in MISSES.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache

import numpy as np
import polars as pl
import pytest
import test_predict_orfeo as orfeo
from conftest import require_datasets

from mpiatlas.models import collective_trees as trees
from mpiatlas.models.loggp_fit import Calibration, Measured, calibrate_groups, predicted
from mpiatlas.models.ompi_decision import bcast_default_algorithm, scatter_default_algorithm
from mpiatlas.models.region_latency import Placement, RegionTable, place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.parsers.osu_csv import parse_osu_csv_file

GOAL = 0.25
CALIBRATION_STRIDE = 4
EPYC_STEMS = {"basic_linear": "linear", "chain": "chain", "binary_tree": "bintree", "default": "def"}
EPYC_MAPPINGS = ("core", "socket", "node")
# zampar file stem per algorithm (bcast_linear.csv ran binomial, PROVENANCE A: not used for a linear Bcast).
THIN_STEMS = {"chain": "chain", "binary_tree": "binarytree", "binomial": "binomial", "pipeline": "pipeline",
              "default": "default"}  # fmt: skip
THIN_MAPPINGS = ("core", "socket")
THIN_MAX_NP = 24


@dataclass(frozen=True)
class Dataset:
    name: str
    series: dict[tuple[str, str], list[Measured]]  # (algorithm, mapping) -> runs, one per P
    places: dict[str, Placement]
    table: RegionTable

    def algorithms(self) -> list[str]:
        return sorted({a for a, _ in self.series})

    def mappings(self) -> list[str]:
        return sorted({m for _, m in self.series})


@cache
def _epyc() -> Dataset:
    series, places = {}, {}
    for m in EPYC_MAPPINGS:
        placement, order = orfeo.PLACEMENTS[m]
        places[m] = place(parse_synthetic(orfeo.EPYC_TOPOLOGY), 256, nodes=2, placement=placement, mapping=order)
        for alg, stem in EPYC_STEMS.items():
            runs = orfeo._measured(orfeo._epyc_file(stem, m), m)
            series[(alg, m)] = [Measured("bcast", alg, n, 4, t) for n, t in sorted(runs.items())]
    return Dataset("EPYC", series, places, orfeo.EPYC_TABLE)


@cache
def _thin() -> Dataset:
    root = require_datasets() / "zampar-orfeo-osu-bcast-barrier/Excercise_1/bcast/results"
    series, places = {}, {}
    for m in THIN_MAPPINGS:
        placement, order = orfeo.PLACEMENTS[m]
        places[m] = place(parse_synthetic(orfeo.THIN_TOPOLOGY), THIN_MAX_NP, nodes=1, placement=placement,
                          mapping=order)  # fmt: skip
        for alg, stem in THIN_STEMS.items():
            runs = orfeo._measured(root / f"bcast_{stem}.csv", m, max_np=THIN_MAX_NP)
            series[(alg, m)] = [Measured("bcast", alg, n, 4, t) for n, t in sorted(runs.items())]
    return Dataset("THIN", series, places, orfeo._thin_table())


DATASETS = {"EPYC": _epyc, "THIN": _thin}


def _runs_of(x: Measured) -> str:
    """The algorithm a run really used (the default resolved by Open MPI's decision)."""
    return bcast_default_algorithm(x.np, x.bytes) if x.algorithm == "default" else x.algorithm


def _calibration_runs(d: Dataset, mapping: str, *, without: str) -> list[Measured]:
    return [x for alg in d.algorithms() if alg != without
            for x in d.series[(alg, mapping)][::CALIBRATION_STRIDE] if _runs_of(x) != without]  # fmt: skip


@cache
def _loao(dataset: str, mapping: str, held: str) -> Calibration:
    d = DATASETS[dataset]()
    return calibrate_groups([(_calibration_runs(d, mapping, without=held), d.places[mapping])], d.table,
                            quantity="rank_mean")  # fmt: skip


@cache
def _lomo(dataset: str, held: str) -> Calibration:
    d = DATASETS[dataset]()
    groups = [([x for alg in d.algorithms() for x in d.series[(alg, m)][::CALIBRATION_STRIDE]], d.places[m])
              for m in d.mappings() if m != held]  # fmt: skip
    return calibrate_groups(groups, d.table, quantity="rank_mean")


def _errors(d: Dataset, cal: Calibration, algorithm: str, mapping: str) -> list[float]:
    runs = d.series[(algorithm, mapping)]
    pred = predicted(cal, [(runs, d.places[mapping])], d.table, quantity="rank_mean")
    return [(p - x.latency_us) / x.latency_us for x, p in zip(runs, pred)]


@cache
def _cell(split: str, dataset: str, algorithm: str, mapping: str) -> tuple[float, float]:
    """(median |relative error|, signed median) of one held-out cell."""
    d = DATASETS[dataset]()
    cal = _loao(dataset, mapping, algorithm) if split == "LOAO" else _lomo(dataset, mapping)
    rel = _errors(d, cal, algorithm, mapping)
    return statistics.median(abs(e) for e in rel), statistics.median(rel)


CELLS = [(split, ds, alg, m) for split in ("LOAO", "LOMO") for ds, algs, maps in
         (("EPYC", EPYC_STEMS, EPYC_MAPPINGS), ("THIN", THIN_STEMS, THIN_MAPPINGS)) for m in maps for alg in algs]
# Cells that miss the goal (the table of the first run with this split and model), each with its measured reason.
_PERTURBED = ("EPYC socket runs above P = 128 are perturbed run to run (p90/p10 over P > 128: chain 13.5x, "
              "binary_tree 34.5x, default 47.7x; core 2.2-4.2x): test_epyc_socket_runs_above_128_are_perturbed")
_NODE_EXCESS = ("EPYC node mapping costs ~2x what its edges explain (binary_tree: the same edge regions as socket "
                "but one, yet 1.8x socket's time at P 16..128): a cost in no edge, so not priced by region "
                "parameters; test_epyc_node_excess_is_in_no_edge")
_CORE_FROM_OTHERS = ("EPYC core held out: o, g, h fitted on socket + node (o 0.42, g 0.40, h 0.88 µs) carry the node "
                     "mapping's edge-less excess and socket's perturbed runs into core's cheapest hops (chain: 93 of "
                     "127 edges same_l3 at P = 128): over-predicted")
_LINEAR_GAP = ("the root's back-to-back gap depends on where the sends go (a variant with one gap per region, "
               "tried on these data, fitted 0.15-0.18 µs within a socket, 0.39-0.47 across sockets, 0.62-0.69 "
               "across nodes) and the other algorithms send few messages back to back (a chain root 4, a knomial "
               "root up to 12, against the linear root's P - 1): they do not determine the linear root's gap")
_THIN_CORE = ("THIN core: P <= 12 stays on one socket, one region (0.19 µs): o, g and h must explain every "
              "algorithm with one latency, and h fitted on trees over- or under-prices chains and pipelines "
              "(a forwarder with one send against a tree level)")
MISSES: dict[tuple[str, str, str, str], str] = {
    ("LOAO", "EPYC", "basic_linear", "socket"): _LINEAR_GAP,
    ("LOAO", "EPYC", "chain", "socket"): _PERTURBED,
    ("LOAO", "EPYC", "binary_tree", "socket"): _PERTURBED,
    ("LOAO", "EPYC", "default", "socket"): _PERTURBED,
    ("LOAO", "EPYC", "basic_linear", "node"): f"{_LINEAR_GAP}; and {_NODE_EXCESS}",
    ("LOAO", "THIN", "chain", "core"): _THIN_CORE,
    ("LOAO", "THIN", "binomial", "core"): _THIN_CORE,
    ("LOAO", "THIN", "pipeline", "core"): _THIN_CORE,
    ("LOAO", "THIN", "default", "core"): _THIN_CORE,
    **{("LOMO", "EPYC", alg, "core"): _CORE_FROM_OTHERS for alg in EPYC_STEMS},
    ("LOMO", "EPYC", "binary_tree", "socket"): _PERTURBED,
    ("LOMO", "EPYC", "default", "socket"): _PERTURBED,
    **{("LOMO", "EPYC", alg, "node"): _NODE_EXCESS for alg in ("basic_linear", "binary_tree", "default")},
    **{("LOMO", "THIN", alg, "core"): _THIN_CORE for alg in ("chain", "binary_tree", "binomial", "default")},
}


def _marked(cell: tuple[str, str, str, str]) -> object:
    reason = MISSES.get(cell)
    return pytest.param(*cell, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)) if reason else cell


@pytest.mark.parametrize(("split", "dataset", "algorithm", "mapping"), [_marked(c) for c in CELLS])
def test_held_out_cell_meets_the_goal(split: str, dataset: str, algorithm: str, mapping: str) -> None:
    median_abs, signed = _cell(split, dataset, algorithm, mapping)
    assert median_abs <= GOAL, f"{split} {dataset} {algorithm}/{mapping}: median |e| {median_abs:.1%} ({signed:+.1%})"


def test_print_the_leave_one_out_table() -> None:
    """The table the issue asks for (run with -s to see it); every cell has a finite error."""
    lines = ["| split | dataset | algorithm | mapping | median abs error | signed median |", "|---|---|---|---|---|---|"]
    for cell in CELLS:
        median_abs, signed = _cell(*cell)
        assert np.isfinite(median_abs) and np.isfinite(signed)
        mark = " (miss)" if median_abs > GOAL else ""
        lines.append(f"| {' | '.join(cell)} | {median_abs:.1%}{mark} | {signed:+.1%} |")
    for name, cal in [(f"LOMO {ds} held {m}", _lomo(ds, m)) for ds, maps in (("EPYC", EPYC_MAPPINGS),
                      ("THIN", THIN_MAPPINGS)) for m in maps]:  # fmt: skip
        lines.append(f"{name}: " + "; ".join(p.line() for p in cal.parameters))
    print("\n".join(lines))


def _epyc_runs(algorithm: str, mapping: str) -> dict[int, float]:
    return {x.np: x.latency_us for x in _epyc().series[(algorithm, mapping)]}


@pytest.mark.parametrize("algorithm", ["chain", "binary_tree", "default"])
def test_epyc_socket_runs_above_128_are_perturbed(algorithm: str) -> None:
    """One run per P: above P = 128 the socket runs scatter 13-48x between their 10th and 90th percentiles where
    core's, with the same node-crossing edges (ranks >= 128 on node 1), span 2-4x. No parameter of a model
    fitted across P follows that."""
    spread = {}
    for mapping in ("core", "socket"):
        p10, p90 = np.percentile([t for n, t in _epyc_runs(algorithm, mapping).items() if n > 128], [10, 90])
        spread[mapping] = p90 / p10
    assert spread["socket"] >= 10 and spread["core"] <= 5, spread


def test_epyc_node_excess_is_in_no_edge() -> None:
    """binary_tree at P <= 128: under socket and node mapping the tree's 127 edges fall in the same regions but
    one (0 -> 1: other_socket 0.65 µs, other_node 1.82 µs), which can add at most 1.17 µs to any rank; the node
    runs take 1.8x the socket runs' time (median over P = 16..128), far more than 1.17 µs."""
    d = _epyc()
    edges = {}
    for mapping in ("socket", "node"):
        tree = trees.kary_tree(128, 0, 2)
        prefix = d.places[mapping].prefix(128)
        edges[mapping] = [prefix.region(p, k) for p, kids in enumerate(tree) for k in kids]
    differ = [(a, b) for a, b in zip(edges["socket"], edges["node"]) if a != b]
    assert differ == [("other_socket", "other_node")]
    node, socket = _epyc_runs("binary_tree", "node"), _epyc_runs("binary_tree", "socket")
    common = [n for n in range(16, 129) if n in node and n in socket]
    assert statistics.median(node[n] / socket[n] for n in common) >= 1.5
    assert statistics.median(node[n] - socket[n] for n in common) > 1.17 + 0.5


# The zampar Feb 2024 osu_scatter files are four runs of Open MPI's DEFAULT Scatter (PROVENANCE F: the scripts set
# the Bcast parameter), so they are four repetitions of one series, not four algorithms.
SCATTER_FILES = ("default", "basic_linear", "binomial", "linear_nb")
SCATTER_MISS = ("the default Scatter predicted from the Bcast calibration misses: core 31.4 % (+17.0 %), socket "
                "45.1 % (+45.1 %), over-predicted from P = 6 on (e.g. socket P = 14: 0.99 µs measured, 1.63 "
                "predicted); the Bcast's h and o do not carry over to the binomial Scatter's forwarders, cause not "
                "pinned down")


@pytest.mark.parametrize("mapping", [pytest.param(m, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=SCATTER_MISS))
                                     for m in THIN_MAPPINGS])  # fmt: skip
def test_thin_scatter_held_out_from_the_bcast_calibration(mapping: str) -> None:
    """Leave one collective out: o, g, h calibrated on every THIN Bcast algorithm under ``mapping`` predict the
    default Scatter (4 B per rank, P 2..24, median of the 4 runs per P), its algorithm per P from Open MPI's
    decision (basic_linear below 4 ranks, binomial above at 4 B; models.ompi_decision, read, not probed)."""
    root = require_datasets() / "zampar-orfeo-osu-bcast-barrier/history_66c4420/Excercise_1/scatter/results"
    runs = pl.concat([parse_osu_csv_file(root / f"scatter_{name}.csv").select("mapping", "processes", "bytes", "t_usec")
                      for name in SCATTER_FILES])  # fmt: skip
    per_np = dict(runs.filter((pl.col("bytes") == 4) & (pl.col("mapping") == mapping) & (pl.col("processes") <= THIN_MAX_NP))
                  .group_by("processes").agg(pl.col("t_usec").median()).iter_rows())  # fmt: skip
    scatter = [Measured("scatter", scatter_default_algorithm(n, 4), n, 4, t) for n, t in sorted(per_np.items())]
    assert len(scatter) == THIN_MAX_NP - 1 and {x.algorithm for x in scatter} == {"basic_linear", "binomial"}
    d = _thin()
    groups = [([x for alg in d.algorithms() for x in d.series[(alg, mapping)][::CALIBRATION_STRIDE]], d.places[mapping])]
    cal = calibrate_groups(groups, d.table, quantity="rank_mean")
    pred = predicted(cal, [(scatter, d.places[mapping])], d.table, quantity="rank_mean")
    median_abs = statistics.median(abs(p - x.latency_us) / x.latency_us for x, p in zip(scatter, pred))
    assert median_abs <= GOAL, f"Scatter {mapping}: median |e| {median_abs:.1%}"
