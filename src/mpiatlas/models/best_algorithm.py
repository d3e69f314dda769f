"""The fastest collective algorithm per measured point: one function, one criterion, for every user.

**Criterion: the lowest median time over repetitions, per point** (a point = one series, process
count and message size). Why the median: it is the statistic every table of this project reports
(IMB summary, kernel medians), it is robust to one repetition hit by OS noise (a mean lets one
outlier crown the wrong algorithm), and unlike the minimum it describes a typical call rather than
a lucky one. Confidence is reported *beside* the winner (``separated``: the best algorithm's CI
lies entirely below the default's; ``margin``: how far the runner-up is), never folded into the
criterion, so that every section names the same winner for the same point. A tie goes to
``default``: nothing is gained by forcing an algorithm that is not faster.

Used by the IMB collectives section and findings of the report, and by the coll kernel's fit
(:func:`mpiatlas.models.kernel_p2p.fit_coll`).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

DEFAULT = "default"
IMB_KEYS: tuple[str, ...] = ("label", "benchmark", "np", "bytes")

BEST_SCHEMA_EXTRA = ("best", "t_best", "runner_up", "t_runner_up", "margin", "t_default", "speedup",
                     "n_algorithms", "best_ci_high", "default_ci_low", "separated")


def best_algorithms(
    df: pl.DataFrame,
    keys: Sequence[str] = IMB_KEYS,
    *,
    time: str = "t_median_usec",
    ci_low: str | None = "t_ci_low_usec",
    ci_high: str | None = "t_ci_high_usec",
) -> pl.DataFrame:
    """Per point (``keys``): the fastest ``algorithm`` by median ``time`` and its gain over ``default``.

    ``df`` holds one row per (point, algorithm) with the median over repetitions in ``time`` (a
    null algorithm is ``default``; rows without a time are left out). Columns out: ``keys``,
    ``best``, ``t_best``, ``runner_up``/``t_runner_up`` (second fastest, null with one candidate),
    ``margin`` = t_runner_up / t_best − 1, ``t_default`` (null when default was not measured),
    ``speedup`` = t_default / t_best (≥ 1), ``n_algorithms``, ``best_ci_high``/``default_ci_low``
    and ``separated`` (null when the CI columns are absent). Sorted by ``keys``.
    """
    keys = list(keys)
    missing = [c for c in [*keys, "algorithm", time] if c not in df.columns]
    if missing:
        raise ValueError(f"best_algorithms: missing column(s) {', '.join(missing)}")
    d = df.with_columns(pl.col("algorithm").fill_null(DEFAULT)).filter(pl.col(time).is_not_null())
    lo = pl.col(ci_low) if ci_low and ci_low in d.columns else pl.lit(None, dtype=pl.Float64)
    hi = pl.col(ci_high) if ci_high and ci_high in d.columns else pl.lit(None, dtype=pl.Float64)
    d = d.select(*keys, "algorithm", pl.col(time).cast(pl.Float64).alias("_t"),
                 lo.cast(pl.Float64).alias("_lo"), hi.cast(pl.Float64).alias("_hi"))
    # Ranked fastest first; on equal time default first, then by name (deterministic).
    ranked = d.sort([*keys, "_t", (pl.col("algorithm") != DEFAULT), "algorithm"], nulls_last=False)
    best = ranked.group_by(keys, maintain_order=True).agg(
        pl.col("algorithm").first().alias("best"),
        pl.col("_t").first().alias("t_best"),
        pl.col("algorithm").get(1, null_on_oob=True).alias("runner_up"),
        pl.col("_t").get(1, null_on_oob=True).alias("t_runner_up"),
        pl.col("_hi").first().alias("best_ci_high"),
        pl.len().alias("n_algorithms"),
    )
    dflt = d.filter(pl.col("algorithm") == DEFAULT).group_by(keys).agg(
        pl.col("_t").first().alias("t_default"), pl.col("_lo").first().alias("default_ci_low"))
    out = best.join(dflt, on=keys, how="left", nulls_equal=True)
    return out.with_columns(
        (pl.col("t_runner_up") / pl.col("t_best") - 1.0).alias("margin"),
        (pl.col("t_default") / pl.col("t_best")).alias("speedup"),
        (pl.col("best_ci_high") < pl.col("default_ci_low")).alias("separated"),
    ).select(*keys, *BEST_SCHEMA_EXTRA).sort(keys, nulls_last=False)
