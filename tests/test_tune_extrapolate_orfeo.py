"""Real data: tuning decisions for process counts never measured (issue 35), ORFEO EPYC Bcast.

Dataset: valentinis (tests/test_predict_orfeo.py docstring): Open MPI 4.1.5, OSU 7.3 osu_bcast with
coll_tuned's algorithm forced (default, basic_linear, chain, binary_tree), 12 sizes 1 B - 2 KiB,
P = 2..256 on 2 nodes of 2 × 64-core EPYC, --map-by core / socket / node, ONE run per point.

Split: the rules see P <= 16 only and choose for every P in 17..256 where all four algorithms were
measured (2880 core, 2760 socket, 2724 node points). Regret at a point = measured time of the chosen
algorithm / the lowest measured time there - 1 (the issue's definition). Nothing was tuned on P > 16:
the model's hyperparameters (forest size, leaf size, 90 % level, the forward-validation cuts) were
fixed before the split was scored; the one design change made after a first look at the held-out
numbers is disclosed: the gate compares the *paired* ratio t_a / t_default (its interval from the
forward validation of that ratio) instead of two separate time intervals, because the errors of two
algorithms' predictions at one point are strongly correlated (the gate of plain `mpiatlas tune` is
the same ratio). A second change came from reading where the held-out regret was (issue 35, regret35):
the default is predicted as the forced algorithm it runs where it runs one (tuning.same_code); it made
the held-out figures worse on core, and is kept because the gap it removed was between identical code.

Figures (mean / worst regret, all complete points), the model before -> after that change, and the
baselines (unchanged):

| rule | core | socket | node |
|---|---|---|---|
| model (MPI features), before | 6.7 % / 76.3 % | 546.6 % / 168927 % | 33.0 % / 17529 % |
| model (MPI features), now | 10.0 % / 79.7 % | 558.4 % / 168927 % | 33.0 % / 17529 % |
| black box (no MPI features) | 10.1 % / 79.7 % | 558.4 % / 168927 % | 33.0 % / 17529 % |
| winner at P = 16, same size | 80.0 % / 650 % | 468.0 % / 161228 % | 39.9 % / 18302 % |
| log-log per algorithm | 37.9 % / 642 % | 440.6 % / 168927 % | 33.0 % / 17529 % |
| always default | 10.1 % / 79.7 % | 558.4 % / 168927 % | 33.0 % / 17529 % |

Where the regret is. Open MPI 4.1's fixed decision runs binary_tree for 128 <= P < 256 and 2 B <= size
< 16 KiB: 1408 of the 2880 core points. There the default and the forced binary_tree are the same code,
but their two single-run sweeps drift apart with P (default / binary_tree 1.0 at P = 129, 1.4-1.6 at
P = 240-255; at P <= 16, on the 70 points where the default ran binary_tree, 1.014). Those points hold
9.5 of the default's 10.1 points of mean regret on core, 554 of its 558 on socket, 31 of its 33 on node.
Forcing binary_tree there would give core 1.7 % / 41 % (the goal) and node 83.5 % (worse than the
default): which of two runs of the same code is faster is not in the P <= 16 data, nor in any model.
The model before this change did force binary_tree at 129 <= P <= 192 (it scaled the default by its
measured/model ratio at P = 16, where the default runs knomial, and binary_tree by binary_tree's: a 20 %
gap between identical code), which the held-out drift rewarded. Outside the same-code points the default
is within 0.6 points of the best on core (binomial and knomial points). Node and socket beyond that are
perturbed single runs (up to 1700x, e.g. node binary_tree at P = 235, 512 B: 3353 µs between 14 and
22 µs): the mean is therefore also reported over the points where no algorithm's measurement is 5x the
median of its neighbours (regret.perturbed; the same points for every rule): now core 10.0 % (2880),
socket 140.9 % (2387; = the default), node 2.7 % (2685; = the default).

The issue's goal (mean <= 3 % and worst <= 50 % per mapping) is not met by any rule without leakage on
this data: the remaining regret is run-to-run variation between identical code (core) and perturbed
single runs (socket, node). Repeated runs per point (the project's own campaigns take several) would
make it measurable.
"""

from __future__ import annotations

from functools import cache

import polars as pl
import pytest
import test_predict_orfeo as orfeo

from mpiatlas.models.region_latency import place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.parsers.osu_csv import parse_osu_csv_file
from mpiatlas.models.ompi_decision import bcast_default_algorithm
from mpiatlas.tuning.extrapolate import Structure
from mpiatlas.tuning.same_code import offsets
from mpiatlas.tuning.regret import Regret, evaluate, perturbed, regret

# The stack's own names (coll_tuned) for the files' algorithm labels.
STEMS = {"default": "def", "basic_linear": "linear", "chain": "chain", "binary_tree": "bintree"}
TRAIN_MAX_P = 16
MODEL, BLACK_BOX, DEFAULT_RULE = "model (MPI features)", "black box (no MPI features)", "always default"


def measurements(mapping: str) -> pl.DataFrame:
    """collective, algorithm, np, bytes, latency_us (a P measured twice: its median)."""
    frames = []
    for algorithm, stem in STEMS.items():
        rows = parse_osu_csv_file(orfeo._epyc_file(stem, mapping)).filter(pl.col("mapping") == mapping)
        frames.append(rows.select(pl.lit("bcast").alias("collective"), pl.lit(algorithm).alias("algorithm"),
                                  pl.col("processes").alias("np"), "bytes", pl.col("t_usec").alias("latency_us")))
    return pl.concat(frames).group_by("collective", "algorithm", "np", "bytes").agg(pl.col("latency_us").median())


@cache
def scored(mapping: str) -> tuple[dict[str, Regret], dict[str, Regret]]:
    """Per rule: regret on every complete held-out point, and on those without a perturbed run."""
    data = measurements(mapping)
    train, test = data.filter(pl.col("np") <= TRAIN_MAX_P), data.filter(pl.col("np") > TRAIN_MAX_P)
    placement, order = orfeo.PLACEMENTS[mapping]
    full = place(parse_synthetic(orfeo.EPYC_TOPOLOGY), 256, nodes=2, placement=placement, mapping=order)
    chosen = evaluate(train, test, Structure(full, orfeo.EPYC_TABLE))
    clean_test = test.join(perturbed(test), on=["collective", "np", "bytes"], how="anti")
    every = {rule: regret(rule, c, test) for rule, c in chosen.items()}
    clean = {rule: regret(rule, c, clean_test) for rule, c in chosen.items()}
    table = ["", f"{mapping}: rule | points | mean | worst | median | left the default",
             *(r.row() for r in every.values()), f"{mapping}, without perturbed points:",
             *(r.row() for r in clean.values())]
    print("\n".join(table))
    return every, clean


def _baselines(table: dict[str, Regret]) -> list[Regret]:
    return [r for name, r in table.items() if name != MODEL]


# Figures, all complete points (mean / worst), before -> after tuning.same_code (the default predicted as the
# forced algorithm it runs, where it runs one):
#   core   model 6.7 % / 76.3 % -> 10.0 % / 79.7 % (default 10.1 % / 79.7 %, black box 10.1 %, log-log 37.9 %,
#          winner at 16 80.0 %)
#   socket model 546.6 % -> 558.4 % (= the default; log-log 440.6 %, winner at 16 468.0 %)
#   node   model 33.0 % -> 33.0 % (the default everywhere, as before)
# The 6.7 % before came from predicting binary_tree ~20 % faster than the default at 129 <= P <= 255, where the
# default *runs* binary_tree: a gap between identical code, which the held-out runs happened to show (the
# default's sweep drifts to 1.5x the forced binary_tree's by P = 255) and P <= 16 does not. The goal
# (mean <= 3 %, worst <= 50 % per mapping) is not met; see test_regret_is_where_the_default_runs_binary_tree.


def test_core_model_beats_every_baseline() -> None:
    every, _ = scored("core")
    model = every[MODEL]
    assert model.points == 2880
    assert model.mean == pytest.approx(0.100, abs=0.005), model.row()
    assert all(model.mean < b.mean for b in _baselines(every)), "\n".join(r.row() for r in every.values())
    # The worst point is one where the default runs binary_tree and the model keeps it: the default's own worst.
    assert model.worst == pytest.approx(every[DEFAULT_RULE].worst, abs=1e-9) == pytest.approx(0.797, abs=0.005)
    assert all(model.worst <= b.worst for b in _baselines(every))


def test_socket_model_keeps_the_default() -> None:
    every, _ = scored("socket")
    model = every[MODEL]
    assert model.mean == pytest.approx(5.584, abs=0.01), model.row()  # far from 3 %: perturbed single runs
    assert model.mean <= every[DEFAULT_RULE].mean + 1e-9 and model.mean <= every[BLACK_BOX].mean + 1e-9
    # log-log (440.6 %) and the winner at P = 16 (468.0 %) do better on socket: both leave the default at
    # points where its single run (P > 128, perturbed throughout) is the slow one.
    assert model.mean > every["log-log per algorithm"].mean


def _same_code_regret(mapping: str) -> tuple[float, float, float]:
    """(default's mean regret, its share from points where it runs binary_tree, the mean were forced
    binary_tree chosen there instead): the held-out points, all algorithms measured."""
    data = measurements(mapping).filter(pl.col("np") > TRAIN_MAX_P)
    wide = data.pivot(on="algorithm", index=["np", "bytes"], values="latency_us").drop_nulls()
    runs = [bcast_default_algorithm(n, b) for n, b in wide.select("np", "bytes").iter_rows()]
    wide = wide.with_columns(pl.Series("runs", runs), pl.min_horizontal(*STEMS).alias("best"))
    r_default = (wide["default"] / wide["best"] - 1).to_numpy()
    r_tree = (wide["binary_tree"] / wide["best"] - 1).to_numpy()
    same = (wide["runs"] == "binary_tree").to_numpy()
    n = wide.height
    return float(r_default.mean()), float(r_default[same].sum() / n), float((r_default[~same].sum() + r_tree[same].sum()) / n)


def test_regret_is_where_the_default_runs_binary_tree() -> None:
    """Where the regret comes from: Open MPI 4.1's fixed decision runs binary_tree for 128 <= P < 256 and
    2 B <= size < 16 KiB (1408 of the 2880 core points). There the default and the forced binary_tree are the
    same code, yet the two single-run sweeps drift apart with P (default / binary_tree 1.0 at P = 129, 1.4-1.6
    at P = 240-255). That is 9.5 of the default's 10.1 points of mean regret on core. Choosing forced
    binary_tree there would give 1.7 % on core (the goal) but 83.5 % on node (default 33.0 %): a coin, not a
    signal. In training (P <= 16) the same pair, at the 70 points where the default ran binary_tree, differs
    by a ratio of 0.986 (forced / default), under the 5 % minimum gain and within noise, so the default stays."""
    mean, share, forced = _same_code_regret("core")
    assert mean == pytest.approx(0.101, abs=0.002) and share == pytest.approx(0.095, abs=0.002)
    assert forced == pytest.approx(0.017, abs=0.002)
    node_mean, _, node_forced = _same_code_regret("node")
    assert node_forced == pytest.approx(0.835, abs=0.01) and node_forced > node_mean
    data = measurements("core")
    offset = offsets(data.filter(pl.col("np") <= TRAIN_MAX_P), lambda c, a, n, b: (
        bcast_default_algorithm(n, b) if a == "default" else a))["binary_tree"]
    assert offset.points == 70 and 1 / offset.ratio == pytest.approx(0.986, abs=0.002)


def test_node_model_keeps_the_default() -> None:
    every, _ = scored("node")
    model = every[MODEL]
    # No forced algorithm's ratio interval lies below 1 anywhere: the default everywhere, its regret.
    assert model.mean == pytest.approx(every[DEFAULT_RULE].mean, abs=1e-9), model.row()
