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
the same ratio). Figures (mean / worst / median regret), all complete points:

| rule | core | socket | node |
|---|---|---|---|
| model (MPI features) | 2.9 % / 59.8 % / 0 | 366.7 % / 61995 % / 0 | 38.5 % / 17529 % / 0 |
| black box (no MPI features) | 10.1 % / 79.7 % / 0 | 558.4 % / 168927 % / 0 | 33.0 % / 17529 % / 0 |
| winner at P = 16, same size | 80.0 % / 650 % / 70.9 % | 468.0 % / 161228 % / 1.6 % | 39.9 % / 18302 % / 0 |
| log-log per algorithm | 37.9 % / 642 % / 2.9 % | 440.6 % / 168927 % / 0 | 33.0 % / 17529 % / 0 |
| always default | 10.1 % / 79.7 % / 0 | 558.4 % / 168927 % / 0 | 33.0 % / 17529 % / 0 |

The issue's goal (mean <= 3 % and worst <= 50 % per mapping) is met on core for the mean only
(2.9 %). It cannot be met on socket and node with this data whatever the rule: single runs there
are perturbed by up to 1700x (e.g. node binary_tree at P = 235, 512 B: 3353 µs between 14 and
22 µs), so the best measured time at a point can be an unrepeatable low and the chosen one an
unrepeatable high. Even choosing, with the held-out data in hand, the algorithm with the lowest
median over P +- 2 leaves socket at 2.0 % mean / 1435x worst and node at 0.6 % ... 0.5 % / 215x.
The mean is therefore also reported over the points where no algorithm's measurement is 5x the
median of its neighbours (regret.perturbed; the same points for every rule), mean / worst:

| rule | core (2880, none removed) | socket (2387) | node (2685) |
|---|---|---|---|
| model (MPI features) | 2.9 % / 59.8 % | 118.5 % / 30649 % | 2.6 % / 77.8 % |
| black box | 10.1 % / 79.7 % | 140.9 % / 78585 % | 2.7 % / 77.8 % |
| winner at P = 16 | 80.0 % / 650 % | 120.9 % / 78585 % | 2.8 % / 77.8 % |
| log-log | 37.9 % / 642 % | 103.1 % / 59109 % | 2.7 % / 77.8 % |
| always default | 10.1 % / 79.7 % | 140.9 % / 78585 % | 2.7 % / 77.8 % |

Node: the model's loss to the default on all points (38.5 % against 33.0 %) is that single perturbed
binary_tree run (152x alone, 5.5 points of the mean). Socket above P = 128 is perturbed throughout
(a run's neighbours too), which the 5x rule does not remove. The black box never leaves the
default: without the structure its forward-validated ratio intervals are too wide.
"""

from __future__ import annotations

from functools import cache

import polars as pl
import pytest
import test_predict_orfeo as orfeo

from mpiatlas.models.region_latency import place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.parsers.osu_csv import parse_osu_csv_file
from mpiatlas.tuning.extrapolate import Structure
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


# After issue #34's LogGP change (a rank pays g only between its own back-to-back sends; L no longer clipped)
# the predictor's structure moved, and with it these figures (all points; before it: core 2.9 % / 59.8 %,
# socket 366.7 %, node 38.5 %). Now core 7.5 % / 76.3 %, socket 546.6 %, node 33.0 % (the default kept
# everywhere). The goal (mean <= 3 %, worst <= 50 % per mapping) is not met; re-tuning the
# predictor on the new structure is open. What still holds is asserted.


def test_core_model_beats_every_baseline() -> None:
    every, _ = scored("core")
    model = every[MODEL]
    assert model.points == 2880
    assert model.mean == pytest.approx(0.075, abs=0.01), model.row()
    assert all(model.mean < b.mean for b in _baselines(every)), "\n".join(r.row() for r in every.values())
    assert model.worst == pytest.approx(0.763, abs=0.02) and all(model.worst < b.worst for b in _baselines(every))


def test_socket_model_beats_the_default_and_the_black_box() -> None:
    every, _ = scored("socket")
    model = every[MODEL]
    assert model.mean == pytest.approx(5.466, abs=0.1), model.row()  # far from 3 %: perturbed single runs
    assert model.mean < every[DEFAULT_RULE].mean and model.mean < every[BLACK_BOX].mean
    # log-log (440.6 %) and the winner at P = 16 (468.0 %) do better here since the LogGP change.
    assert model.mean > every["log-log per algorithm"].mean


def test_node_model_keeps_the_default() -> None:
    every, _ = scored("node")
    model = every[MODEL]
    # No forced algorithm's ratio interval lies below 1 anywhere: the default everywhere, its regret.
    assert model.mean == pytest.approx(every[DEFAULT_RULE].mean, abs=1e-9), model.row()
