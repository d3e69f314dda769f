"""Per cell and message size: median, min, 95 % CI of the median, CV over repetitions, and whether
the repetitions agree (``quality``: ok | noisy, mpiatlas.stats.quality). Repetitions from perturbed
launches (``cell_quality``) are left out of all of it (:func:`usable_samples`); ``n_perturbed`` counts them.

The CI is a percentile bootstrap of the median (999 resamples, seeded), computed for all groups
at once with numpy instead of one ``scipy.stats.bootstrap`` call per group:

* A resample of ``n`` values is a row of ``n`` indices. Groups with the same number ``n`` of
  finite values share one seeded ``(999, n)`` index matrix, drawn as ``scipy.stats.bootstrap``
  draws it (``default_rng(seed).integers(0, n, (999, n))``).
* Indices are applied to each group's values *sorted*, and each index row's middle order
  statistics are found once for all groups (from its histogram: indices are 0..n-1): the median
  of a resample is then the value (odd ``n``) or the mean of the two values (even ``n``) at
  fixed positions of the sorted group, a gather instead of a sort.
* For odd ``n`` the order of the 999 bootstrap medians is the order of those positions, the same
  for every group, so the percentile interval is read off two pairs of order statistics.
  Even ``n`` builds the (groups x 999) bootstrap medians in chunks of bounded memory.

Bootstrapping the sorted values makes the interval independent of the order of the rows; it
agrees with a per-group ``scipy.stats.bootstrap(..., method="percentile")`` within bootstrap
noise (tests/test_aggregate.py compares them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from mpiatlas.stats.quality import PERTURBED, QUALITY_COLUMN, repetition_quality, trusted

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

# options and knobs: the IMB options and knob set of a series (also in its label), kept as columns
# so the knob and off-cache sections can compare them.
SUMMARY_KEYS = ["label", "stack", "transport", "mapping", "np", "algorithm", "options", "knobs", "benchmark",
                "processes", "bytes"]
# Every column summarize() reads (besides SUMMARY_KEYS): a reader of a samples file loads only these
# (an import's ``source`` and ``line`` per row are most of its bytes).
VALUE_COLUMNS = ["t_usec", "bandwidth_MBps", "status", "cell_status", "oversubscribed", QUALITY_COLUMN]
CONFIDENCE = 0.95
N_RESAMPLES = 999
SEED = 0


def scalar(value: object) -> float:
    """A polars reduction (``Series.min()``, ``.mean()``...) of a numeric column as a float. Its declared
    type is any Python literal or None; anything but a number (an empty or all-null column) is an error."""
    if isinstance(value, (int, float)):
        return float(value)
    raise TypeError(f"expected a number from a numeric column, got {value!r}")


def median_ci(values: np.ndarray, *, seed: int = SEED) -> tuple[float, float]:
    """95 % CI of the median by percentile bootstrap (NaN for a single sample: no spread to resample)."""
    values = np.asarray(values, dtype=float)
    low, high = median_cis([values], seed=seed)
    return float(low[0]), float(high[0])


def median_cis(groups: Sequence[npt.ArrayLike], *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """:func:`median_ci` of many groups at once: arrays of lower and upper ends."""
    finite = [np.sort(np.asarray(g, dtype=float)[np.isfinite(g)]) for g in groups]
    lengths = np.array([g.size for g in finite], dtype=np.int64)
    flat = np.concatenate(finite) if finite else np.empty(0)
    return median_cis_sorted(flat, lengths, seed=seed)


def median_cis_sorted(flat: np.ndarray, lengths: np.ndarray, *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """CI ends for groups given as consecutive ascending runs of finite ``flat`` of ``lengths``."""
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    low = np.full(lengths.size, np.nan)
    high = np.full(lengths.size, np.nan)
    for n in np.unique(lengths):
        if n < 2:
            continue  # no spread to resample
        members = np.flatnonzero(lengths == n)
        values = flat[offsets[members, None] + np.arange(n)]  # (groups, n), each row ascending
        low[members], high[members] = _bootstrap_ci(values, int(n), seed)
    return low, high


def _resample_middle(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per resample, the positions of its two middle draws once sorted (one position twice for odd n).

    The draws are ``scipy.stats.bootstrap``'s; their k-th smallest is read off each resample's
    histogram of positions (the first position whose running count exceeds k), not by sorting
    999 rows: positions are only 0..n-1.
    """
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, (N_RESAMPLES, n))
    rows = np.arange(N_RESAMPLES)[:, None] * n
    running = np.bincount((draws + rows).ravel(), minlength=N_RESAMPLES * n).reshape(N_RESAMPLES, n).cumsum(axis=1)
    return (running <= (n - 1) // 2).sum(axis=1), (running <= n // 2).sum(axis=1)


def _bootstrap_ci(values: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CI of the median for groups of ``n`` sorted values (one row per group)."""
    # The median of a resample: the mean of the values at its middle pair of positions (one
    # position for odd n, where (v + v) / 2 == v exactly, as np.median returns it).
    middle = _resample_middle(n, seed)
    alpha = (1 - CONFIDENCE) / 2
    low, high = (_bootstrap_quantile(values, *middle, q) for q in (alpha, 1 - alpha))
    # All repetitions equal: the bootstrap cannot vary (scipy would warn of a degenerate distribution).
    flat = values[:, 0] == values[:, -1]
    low[flat], high[flat] = values[flat, 0], values[flat, 0]
    return low, high


def _bootstrap_quantile(values: np.ndarray, lower: np.ndarray, upper: np.ndarray, q: float) -> np.ndarray:
    """np.quantile(bootstrap medians, q) per group, from the few resamples that can reach that rank.

    numpy's default ('linear', Hyndman & Fan type 7) quantile interpolates between the order
    statistics ``below`` and ``below + 1`` of the N medians; computed here as numpy does.
    """
    count = len(lower)
    virtual = (count - 1) * q  # numpy's virtual index for 'linear'
    below = int(np.floor(virtual))
    above = min(below + 1, count - 1)
    gamma = virtual - below
    from_top = below > (count - 1) / 2
    if from_top:  # rank counted from the largest median
        chosen = _rank_candidates(-lower, -upper, count - 1 - below)
    else:
        chosen = _rank_candidates(lower, upper, above)
    medians = (np.take(values, lower[chosen], axis=1) + np.take(values, upper[chosen], axis=1)) / 2
    medians.sort(axis=1)
    last = len(chosen) - 1
    a = medians[:, last - (count - 1 - below)] if from_top else medians[:, below]
    b = medians[:, last - (count - 1 - above)] if from_top else medians[:, above]
    diff = b - a
    interpolated: np.ndarray = b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma
    return interpolated


def _rank_candidates(lower: np.ndarray, upper: np.ndarray, rank: int) -> np.ndarray:
    """Resamples that may hold rank 0..``rank`` among the ascending medians, for *any* sorted group.

    A resample whose middle positions are both <= another's has a median <= the other's whatever
    the (ascending) values: it comes first. A resample that at least ``rank + 1`` others come
    before cannot sit at rank <= ``rank``; the rest (of equal pairs, the first copies) contain
    ranks 0..``rank`` exactly, so only these ~30 of 999 are evaluated for each group.
    """
    # Pairs are small integers: shifted to 0.., one integer each (np.unique on rows is slow).
    lower, upper = lower - lower.min(), upper - upper.min()
    rows, cols = int(lower.max()) + 1, int(upper.max()) + 1
    _, first, counts = np.unique(lower * cols + upper, return_index=True, return_counts=True)
    a, b = lower[first], upper[first]
    # The resamples whose pair is <= (a, b) in both: a 2-D running sum of the pairs' histogram,
    # less the pair's own copies (O(n^2), not a pairs x pairs comparison).
    grid = np.zeros((rows, cols), dtype=np.int64)
    grid[a, b] = counts
    before = grid.cumsum(axis=0).cumsum(axis=1)[a, b] - counts
    return np.repeat(first, np.clip(rank + 1 - before, 0, counts))


def usable_samples(samples: FrameT) -> FrameT:
    """Rows that may enter statistics: valid cells whose launch was not perturbed (quality.trusted),
    real timings (IMB's time-out rows carry none)."""
    names = samples.collect_schema().names()
    missing = [c for c in ("status", "t_usec") if c not in names]
    if missing:
        # A table that cannot say which rows timed out is an error, not a pass (issue #33).
        raise ValueError(f"a samples table without column(s) {missing} (IMB's per-row status and time): "
                         "its usable rows cannot be told apart")
    df = trusted(samples)
    if "cell_status" in names:
        df = df.filter(pl.col("cell_status") == "ok")
    return df.filter((pl.col("status") == "ok") & pl.col("t_usec").is_not_null())


def summarize(samples: pl.DataFrame) -> pl.DataFrame:
    """Per cell and size: n_reps, median, min, CV, bandwidth median and the CI of the median."""
    if samples.height == 0:
        return pl.DataFrame()  # no IMB cell produced output: an empty summary, not an error
    keys = [k for k in SUMMARY_KEYS if k in samples.columns]
    # Keys null in every row (the cell columns of imported data) split nothing: group without them.
    null_keys = [k for k in keys if samples[k].null_count() == samples.height]
    t = pl.col("t_usec")
    # Timings all finite (as parsed ones are): the median and the minimum are read off each group's
    # sorted timings, which the CI needs anyway, instead of polars sorting every group twice more.
    finite = samples.schema["t_usec"] == pl.Float64 and not samples.select((t.is_nan() | t.is_infinite()).any()).item()
    stats = {"t_median_usec": t.median(), "t_min_usec": t.min()}
    grouped = (
        usable_samples(samples.lazy())  # lazy: the filtered rows are never materialised
        .group_by([k for k in keys if k not in null_keys], maintain_order=True)
        .agg(
            pl.len().cast(pl.Int32).alias("n_reps"),
            *([] if finite else [expr.alias(name) for name, expr in stats.items()]),
            (t.std() / t.mean()).alias("t_cv"),
            pl.col("bandwidth_MBps").median().alias("bw_median_MBps"),
            t.filter(t.is_finite()).sort().alias("_t"),
            *([pl.col("oversubscribed").any().alias("oversubscribed")] if "oversubscribed" in samples.columns else []),
        )
        .collect()
    )
    group_keys = [k for k in keys if k not in null_keys]
    left_out = _perturbed_counts(samples, group_keys)
    if left_out is not None:
        grouped = grouped.join(left_out, on=group_keys, how="left", nulls_equal=True, maintain_order="left")
        grouped = grouped.with_columns(pl.col("n_perturbed").fill_null(0))
    else:  # unknown (no launch quality recorded): null, not 0
        grouped = grouped.with_columns(pl.lit(None, dtype=pl.Int32).alias("n_perturbed"))
    lengths = grouped["_t"].list.len().to_numpy().astype(np.int64)
    flat = grouped["_t"].explode().drop_nulls().to_numpy().astype(float)
    low, high = median_cis_sorted(flat, lengths)
    if finite and lengths.size:
        grouped = grouped.with_columns(*_sorted_stats(flat, lengths))
    elif finite:  # no usable row at all (every cell invalid): the columns, with no rows
        grouped = grouped.with_columns(pl.col("_t").list.median().alias("t_median_usec"),
                                       pl.col("_t").list.min().cast(pl.Float64).alias("t_min_usec"))
    values = [c for c in grouped.columns if c not in keys and c != "_t"]
    order = ["n_reps", *stats, *(c for c in values if c not in ("n_reps", *stats))]
    median = grouped["t_median_usec"].to_numpy()
    series = [k for k in group_keys if k != "bytes"]
    typical = series_typical_halfwidth(grouped.select(series), median, low, high) if series else None
    series_ids = series_index(grouped.select(series)) if series else None
    quality, reasons = repetition_quality(flat, lengths, median, low, high, typical, series_ids)
    return (
        grouped.drop("_t")
        .with_columns(
            *(pl.lit(None, dtype=samples.schema[k]).alias(k) for k in null_keys),
            pl.Series("t_ci_low_usec", low, dtype=pl.Float64),
            pl.Series("t_ci_high_usec", high, dtype=pl.Float64),
            pl.Series("quality", quality, dtype=pl.String),
            pl.Series("quality_reason", reasons, dtype=pl.String),
        )
        .select(*keys, *order, "t_ci_low_usec", "t_ci_high_usec", "quality", "quality_reason")
        .sort(keys)
    )


def series_typical_halfwidth(series: pl.DataFrame, median: np.ndarray, low: np.ndarray,
                             high: np.ndarray) -> np.ndarray:
    """Per row, the median relative half-width of its series' CIs (rows of ``series`` with equal
    values are one series): the variation its repetitions show everywhere, which a point shares and
    which therefore does not make that point noisy (mpiatlas.stats.quality.ci_reason)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        half = np.maximum(median - low, high - median) / median
    rel = pl.Series("_half", np.where(np.isfinite(half), half, np.nan), dtype=pl.Float64).fill_nan(None)
    return (series.with_columns(rel).with_columns(pl.col("_half").median().over(series.columns).alias("_typ"))
            ["_typ"].fill_null(float("nan")).to_numpy())


def series_index(series: pl.DataFrame) -> np.ndarray:
    """Per row, an integer naming its series (rows of ``series`` with equal values, nulls equal)."""
    return series.select(pl.struct(series.columns).rank("dense").alias("_sid"))["_sid"].to_numpy()


def _perturbed_counts(samples: pl.DataFrame, keys: list[str]) -> pl.DataFrame | None:
    """Per group, the repetitions left out as perturbed (``n_perturbed``); None for tables without
    launch quality (imported samples, tables from before it was recorded)."""
    if QUALITY_COLUMN not in samples.columns:
        return None
    rows = samples.lazy()
    if "cell_status" in samples.columns:
        rows = rows.filter(pl.col("cell_status") == "ok")
    return (rows.filter((pl.col("status") == "ok") & pl.col("t_usec").is_not_null()
                        & (pl.col(QUALITY_COLUMN) == PERTURBED))
            .group_by(keys).agg(pl.len().cast(pl.Int32).alias("n_perturbed")).collect())


def _sorted_stats(flat: np.ndarray, lengths: np.ndarray) -> tuple[pl.Series, pl.Series]:
    """Median and minimum of groups given as consecutive ascending runs of ``flat`` (none empty).

    The median as polars computes it (linear interpolation at 0.5: ``lo + (hi - lo) * 0.5``, not
    ``(lo + hi) / 2``, which differs in the last bit), so both ways give identical tables.
    """
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    lo, hi = flat[offsets + (lengths - 1) // 2], flat[offsets + lengths // 2]
    return (pl.Series("t_median_usec", lo + (hi - lo) * 0.5, dtype=pl.Float64),
            pl.Series("t_min_usec", flat[offsets], dtype=pl.Float64))  # fmt: skip
