"""Adaptive tuning: measure only the (algorithm, np, bytes) cells whose decision is uncertain.

A tuning grid is every algorithm at every target (np, bytes). Round 0 measures every algorithm at
the smallest process counts (``seed_nps``) and every size. Then, round after round: fit
:class:`.extrapolate.Predictor` on what is measured, decide every point (:func:`decisions`), and
measure, at the ``per_round`` most uncertain points not measured yet, the default, the
algorithm predicted fastest there and any other whose interval of t / t_default reaches below 1 -- until the budget of cells is spent or no decision is
uncertain.

A point's decision is *uncertain* when the interval of t_candidate / t_default (the candidate: the
fastest non-default algorithm by prediction) contains 1: the gate of :func:`.extrapolate.choose`
could go either way. Its uncertainty is how far the interval reaches past 1 on its shorter side,
``min(log hi, -log lo)``. A point where the default and its candidate are both measured is decided
on the measurements (:func:`measured_choice`), like the full sweep, and is no longer uncertain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning.extrapolate import KEYS, POINT, Predictor, Structure, choose

# A forced algorithm beats the default on measurements when it is this much faster (the CLI's --min-gain).
MIN_GAIN = 0.05
Measure = Callable[[pl.DataFrame], pl.DataFrame]  # cells (KEYS) -> the same with latency_us


@dataclass(frozen=True)
class Round:
    index: int
    new_cells: int
    measured: int  # cells measured so far
    uncertain: int  # points whose decision is uncertain after this round
    forced: int  # points deciding for a forced algorithm
    changed: int  # decisions that differ from the round before
    max_uncertainty: float  # the largest uncertainty left (0: none)

    def row(self) -> str:
        return (f"| {self.index} | {self.new_cells} | {self.measured} | {self.uncertain} | {self.forced} | "
                f"{self.changed} | {self.max_uncertainty:.3f} |")


def measured_choice(measured: pl.DataFrame, min_gain: float = MIN_GAIN) -> pl.DataFrame:
    """Per point where the default was measured: the fastest measured algorithm if it beats the default
    by ``min_gain``, else the default (the full sweep's decision, one measurement per cell)."""
    default = measured.filter(pl.col("algorithm") == DEFAULT).select(*POINT, pl.col("latency_us").alias("d"))
    best = measured.sort("latency_us").group_by(list(POINT)).first().select(*POINT, "algorithm", "latency_us")
    joined = best.join(default, on=list(POINT))
    return joined.select(*POINT, pl.when(pl.col("latency_us") < (1 - min_gain) * pl.col("d"))
                         .then(pl.col("algorithm")).otherwise(pl.lit(DEFAULT)).alias("algorithm"))


def decisions(predicted: pl.DataFrame, measured: pl.DataFrame) -> pl.DataFrame:
    """POINT, algorithm, uncertainty, decided_by ('measured' or 'model') for every point of ``predicted``."""
    model = choose(predicted)
    fastest = (predicted.filter(pl.col("algorithm") != DEFAULT).sort("predicted_us").group_by(list(POINT)).first()
               .select(*POINT, pl.min_horizontal(pl.col("ratio_hi").log(), -pl.col("ratio_lo").log())
                       .clip(lower_bound=0.0).alias("uncertainty"), pl.col("algorithm").alias("candidate_")))
    # Every forced algorithm that may beat the default there (its ratio interval reaches below 1): measured
    # with the candidate, so a point settled on measurements is not settled on the candidate alone.
    contenders = (predicted.filter((pl.col("algorithm") != DEFAULT) & (pl.col("ratio_lo") < 1.0))
                  .group_by(list(POINT)).agg(pl.col("algorithm").sort().alias("contenders_")))
    out = (model.select(*POINT, "algorithm").join(fastest, on=list(POINT), how="left")
           .join(contenders, on=list(POINT), how="left").with_columns(
        pl.col("uncertainty").fill_null(0.0), pl.col("contenders_").fill_null([]), pl.lit("model").alias("decided_by")))
    pairs = measured.join(fastest.select(*POINT, pl.col("candidate_").alias("algorithm")), on=[*POINT, "algorithm"])
    settled = measured.filter(pl.col("algorithm") == DEFAULT).select(POINT).join(pairs.select(POINT), on=list(POINT))
    by_measure = measured_choice(measured.join(settled, on=list(POINT)))
    out = out.join(by_measure.rename({"algorithm": "measured_algorithm"}), on=list(POINT), how="left")
    return out.with_columns(
        pl.coalesce("measured_algorithm", "algorithm").alias("algorithm"),
        pl.when(pl.col("measured_algorithm").is_not_null()).then(0.0).otherwise(pl.col("uncertainty")).alias("uncertainty"),
        pl.when(pl.col("measured_algorithm").is_not_null()).then(pl.lit("measured")).otherwise("decided_by").alias("decided_by"),
    ).drop("measured_algorithm").sort(list(POINT))


def next_cells(current: pl.DataFrame, measured: pl.DataFrame, points: int, max_cells: int | None = None) -> pl.DataFrame:
    """The cells (KEYS) to measure next: the default, the predicted candidate and the other contenders at
    the ``points`` most uncertain points of ``current`` (:func:`decisions`), less those measured already;
    at most ``max_cells``, the most uncertain points' first."""
    uncertain = current.filter(pl.col("uncertainty") > 0)
    picks = uncertain.sort("uncertainty", *POINT, descending=[True, False, False, False]).head(points)
    order = picks.select(*POINT).with_row_index("rank_")
    contenders = picks.select(*POINT, pl.col("contenders_").alias("algorithm")).explode("algorithm").drop_nulls("algorithm")
    wanted = pl.concat([picks.select(*POINT, pl.lit(DEFAULT).alias("algorithm")),
                        picks.select(*POINT, pl.col("candidate_").alias("algorithm")), contenders.select(*POINT, "algorithm")])
    fresh = wanted.join(measured.select(KEYS), on=list(KEYS), how="anti").unique().join(order, on=list(POINT))
    kept = fresh.sort("rank_", *KEYS).head(max_cells) if max_cells is not None else fresh
    return kept.select(KEYS).sort(list(KEYS))


def _grid(collective: str, algorithms: Sequence[str], nps: Sequence[int], sizes: Sequence[int]) -> pl.DataFrame:
    return (pl.DataFrame({"collective": [collective]}).join(pl.DataFrame({"algorithm": list(algorithms)}), how="cross")
            .join(pl.DataFrame({"np": list(nps)}), how="cross").join(pl.DataFrame({"bytes": list(sizes)}), how="cross")
            .select(KEYS).sort(list(KEYS)))


def tune(collective: str, algorithms: Sequence[str], nps: Sequence[int], sizes: Sequence[int], measure: Measure,
         structure: Structure, *, budget: int, per_round: int, seed_nps: int = 3,
         ) -> tuple[pl.DataFrame, list[Round], pl.DataFrame]:
    """(final decisions, rounds, every measurement) of an adaptive tuning run over the grid."""
    if DEFAULT not in algorithms:
        raise ValueError("the algorithms must include 'default': every decision is judged against it")
    grid = _grid(collective, algorithms, nps, sizes)
    seed = grid.filter(pl.col("np").is_in(sorted(nps)[:seed_nps]))
    if seed.height > budget:
        raise ValueError(f"budget {budget} cells is below the first round's {seed.height} (every algorithm at the "
                         f"{seed_nps} smallest P and every size)")
    measured = measure(seed)
    rounds: list[Round] = []
    previous: pl.DataFrame | None = None
    new = seed.height
    while True:
        predictor = Predictor(mpi=True, structure=structure).fit(measured)
        current = decisions(predictor.predict(grid), measured)
        changed = 0 if previous is None else int(current.join(previous, on=list(POINT)).filter(
            pl.col("algorithm") != pl.col("algorithm_right")).height)
        uncertain = current.filter(pl.col("uncertainty") > 0)
        rounds.append(Round(len(rounds), new, measured.height, uncertain.height,
                            int((current["algorithm"] != DEFAULT).sum()), changed,
                            max(uncertain["uncertainty"].to_list(), default=0.0)))
        left = budget - measured.height
        if uncertain.height == 0 or left < 2:
            return current, rounds, measured
        wanted = next_cells(current, measured, min(per_round, left // 2), max_cells=left)
        if wanted.height == 0:
            return current, rounds, measured
        measured = pl.concat([measured, measure(wanted).select(*KEYS, "latency_us")])
        previous, new = current, wanted.height


def markdown(rounds: Sequence[Round], full_sweep: int) -> str:
    """The round-by-round table of an adaptive tuning run."""
    lines = [f"Adaptive tuning: {rounds[-1].measured} cells measured of the full sweep's {full_sweep}.", "",
             "| round | new cells | measured | uncertain points | forced | changed | max uncertainty |",
             "|---|---|---|---|---|---|---|", *(r.row() for r in rounds)]
    return "\n".join(lines) + "\n"


def agreement(a: pl.DataFrame, b: pl.DataFrame) -> float:
    """Fraction of common points where two decision tables choose the same algorithm."""
    both = a.select(*POINT, "algorithm").join(b.select(*POINT, "algorithm"), on=list(POINT))
    same = int((both["algorithm"] == both["algorithm_right"]).sum())
    return same / both.height if both.height else math.nan
