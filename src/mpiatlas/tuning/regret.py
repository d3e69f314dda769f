"""Held-out evaluation of tuning rules: regret against the best measured algorithm.

Regret of a rule at a point (collective, np, bytes) = measured time of the algorithm it chose /
the lowest measured time of any algorithm there - 1 (0 when it chose the fastest). Only points
where every algorithm was measured count, so every rule is judged on the same points.

Rules (each sees the training measurements only):

* ``model``: :class:`.extrapolate.Predictor` with the MPI features and :func:`.extrapolate.choose`;
* ``black box``: the same forest and decision rule without the MPI features;
* ``winner at P=max``: the fastest measured algorithm at the largest training P, same size;
* ``log-log``: per algorithm and size, a line through (log P, log t) of the training points,
  extrapolated; the lowest wins;
* ``default``: always the library's decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning.extrapolate import Predictor, Structure, choose

POINT = ("collective", "np", "bytes")
# A measurement 5x the median of its neighbours (2 measured P either side, same algorithm and size) is a
# perturbed single run.
PERTURBED_FACTOR = 5.0
PERTURBED_WINDOW = 2
Rule = Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame]  # (train, test points) -> POINT + algorithm


@dataclass(frozen=True)
class Regret:
    rule: str
    points: int
    mean: float
    worst: float
    median: float
    left_default: int  # points where the rule chose something else than the default

    def row(self) -> str:
        return (f"| {self.rule} | {self.points} | {self.mean:.1%} | {self.worst:.1%} | {self.median:.1%} | "
                f"{self.left_default} |")


def complete_points(test: pl.DataFrame) -> pl.DataFrame:
    """Test points where every algorithm of the collective was measured: (POINT, algorithm, latency_us)."""
    n_algs = test.group_by("collective").agg(pl.col("algorithm").n_unique().alias("n_algs"))
    counts = test.group_by(list(POINT)).agg(pl.col("algorithm").n_unique().alias("n")).join(n_algs, on="collective")
    keep = counts.filter(pl.col("n") == pl.col("n_algs")).select(POINT)
    return test.join(keep, on=list(POINT))


def regret(rule: str, chosen: pl.DataFrame, test: pl.DataFrame) -> Regret:
    """``chosen`` (POINT, algorithm) judged on ``test`` measurements (complete points only)."""
    full = complete_points(test)
    best = full.group_by(list(POINT)).agg(pl.col("latency_us").min().alias("best_us"))
    got = chosen.select(*POINT, "algorithm").join(full, on=[*POINT, "algorithm"]).join(best, on=list(POINT))
    r = (got["latency_us"] / got["best_us"] - 1).to_numpy()
    if r.size == 0:
        return Regret(rule, 0, float("nan"), float("nan"), float("nan"), 0)
    return Regret(rule, int(r.size), float(r.mean()), float(r.max()), float(np.median(r)),
                  int((got["algorithm"] != DEFAULT).sum()))


def candidates(train: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    """Every (POINT, algorithm) to predict: the test points times the algorithms trained on."""
    algs = train.select("collective", "algorithm").unique()
    return points.select(POINT).unique().join(algs, on="collective").sort([*POINT, "algorithm"])


def model_rule(structure: Structure | None, mpi: bool) -> Rule:
    def rule(train: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
        predictor = Predictor(mpi=mpi, structure=structure).fit(train)
        return choose(predictor.predict(candidates(train, points)))
    return rule


def winner_at_largest(train: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    top = train.group_by("collective").agg(pl.col("np").max().alias("top"))
    at_top = train.join(top, on="collective").filter(pl.col("np") == pl.col("top"))
    win = at_top.sort("latency_us").group_by("collective", "bytes").first().select("collective", "bytes", "algorithm")
    return points.select(POINT).unique().join(win, on=["collective", "bytes"], how="left").with_columns(
        pl.col("algorithm").fill_null(DEFAULT))


def loglog(train: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    lines = {}
    for (coll, alg, b), part in train.group_by(["collective", "algorithm", "bytes"]):
        if part["np"].n_unique() >= 2:
            lines[(coll, alg, b)] = np.polyfit(np.log(part["np"].to_numpy()), np.log(part["latency_us"].to_numpy()), 1)
    out = []
    for r in points.select(POINT).unique().iter_rows(named=True):
        preds = {a: float(np.polyval(c, np.log(r["np"]))) for (coll, a, b), c in lines.items()
                 if coll == r["collective"] and b == r["bytes"]}
        out.append({**r, "algorithm": min(preds, key=lambda a: preds[a]) if preds else DEFAULT})
    return pl.DataFrame(out)


def always_default(train: pl.DataFrame, points: pl.DataFrame) -> pl.DataFrame:
    return points.select(POINT).unique().with_columns(pl.lit(DEFAULT).alias("algorithm"))


def perturbed(test: pl.DataFrame, factor: float = PERTURBED_FACTOR, window: int = PERTURBED_WINDOW) -> pl.DataFrame:
    """Points (POINT) where some algorithm's time is over ``factor`` x the median of its own times at the
    measured process counts around it (``window`` either side, itself included; same size): a single run hit by the machine, which no rule
    can foresee. Judged on the measurements alone, the same points for every rule."""
    rows = test.sort("collective", "algorithm", "bytes", "np")
    med = rows.with_columns(pl.col("latency_us").rolling_median(window_size=2 * window + 1, center=True, min_samples=1)
                            .over("collective", "algorithm", "bytes").alias("_neighbours"))
    return med.filter(pl.col("latency_us") > factor * pl.col("_neighbours")).select(POINT).unique()


def evaluate(train: pl.DataFrame, test: pl.DataFrame, structure: Structure | None) -> dict[str, pl.DataFrame]:
    """Every rule's choice (POINT, algorithm) at the complete test points."""
    points = complete_points(test)
    rules: dict[str, Rule] = {
        "model (MPI features)": model_rule(structure, mpi=True),
        "black box (no MPI features)": model_rule(None, mpi=False),
        "winner at largest trained P": winner_at_largest,
        "log-log per algorithm": loglog,
        "always default": always_default,
    }
    return {name: rule(train, points) for name, rule in rules.items()}
