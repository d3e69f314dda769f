"""Per cell and message size: median, min, 95 % CI of the median, CV over repetitions.

The CI is a percentile bootstrap of the median (999 resamples, seeded), computed for all groups
at once with numpy instead of one ``scipy.stats.bootstrap`` call per group:

* A resample of ``n`` values is a row of ``n`` indices. Groups with the same number ``n`` of
  finite values share one seeded ``(999, n)`` index matrix, drawn as ``scipy.stats.bootstrap``
  draws it (``default_rng(seed).integers(0, n, (999, n))``).
* Indices are applied to each group's values *sorted*, and each index row is sorted once for
  all groups: the median of a resample is then the value (odd ``n``) or the mean of the two
  values (even ``n``) at fixed positions of the sorted group, a gather instead of a sort.
* For odd ``n`` the order of the 999 bootstrap medians is the order of those positions, the same
  for every group, so the percentile interval is read off two pairs of order statistics.
  Even ``n`` builds the (groups x 999) bootstrap medians in chunks of bounded memory.

Bootstrapping the sorted values makes the interval independent of the order of the rows; it
agrees with a per-group ``scipy.stats.bootstrap(..., method="percentile")`` within bootstrap
noise (tests/test_aggregate.py compares them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

SUMMARY_KEYS = ["label", "stack", "transport", "mapping", "np", "algorithm", "benchmark", "processes", "bytes"]
CONFIDENCE = 0.95
N_RESAMPLES = 999
SEED = 0
# (groups x resamples) float64 bootstrap medians held at once for even n: 8 MB per 1000 groups.
_CHUNK_GROUPS = 4096


def median_ci(values: np.ndarray, *, seed: int = SEED) -> tuple[float, float]:
    """95 % CI of the median by percentile bootstrap (NaN for a single sample: no spread to resample)."""
    values = np.asarray(values, dtype=float)
    low, high = median_cis([values], seed=seed)
    return float(low[0]), float(high[0])


def median_cis(groups: Sequence[np.ndarray], *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
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


def _resample_positions(n: int, seed: int) -> np.ndarray:
    """Per resample, the sorted indices drawn: column k is the k-th smallest value's position."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.integers(0, n, (N_RESAMPLES, n)), axis=1)


def _bootstrap_ci(values: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CI of the median for groups of ``n`` sorted values (one row per group)."""
    positions = _resample_positions(n, seed)
    alpha = (1 - CONFIDENCE) / 2
    if n % 2:
        # median = values[:, m]; sorting m sorts every group's bootstrap medians alike.
        order = np.sort(positions[:, n // 2])
        low, high = (_quantile_of_sorted(values, order, q) for q in (alpha, 1 - alpha))
    else:
        below, above = positions[:, n // 2 - 1], positions[:, n // 2]
        low, high = np.empty(len(values)), np.empty(len(values))
        for start in range(0, len(values), _CHUNK_GROUPS):
            chunk = values[start : start + _CHUNK_GROUPS]
            medians = (chunk[:, below] + chunk[:, above]) / 2  # as np.median averages the middle pair
            low[start : start + len(chunk)], high[start : start + len(chunk)] = np.quantile(
                medians, [alpha, 1 - alpha], axis=1
            )
    # All repetitions equal: the bootstrap cannot vary (scipy would warn of a degenerate distribution).
    flat = values[:, 0] == values[:, -1]
    low[flat], high[flat] = values[flat, 0], values[flat, 0]
    return low, high


def _quantile_of_sorted(values: np.ndarray, order: np.ndarray, q: float) -> np.ndarray:
    """np.quantile(values[:, order], q, axis=1) for rows already ascending along ``order``.

    The default ('linear', Hyndman & Fan type 7) interpolation between the two order statistics
    around ``q * (N - 1)``, written as numpy's own lerp so the results are identical.
    """
    virtual = q * (len(order) - 1)
    below = int(np.floor(virtual))
    gamma = virtual - below
    a, b = values[:, order[below]], values[:, order[min(below + 1, len(order) - 1)]]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def usable_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """Rows that may enter statistics: valid cells, real timings (IMB's time-out rows carry none)."""
    df = samples
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    return df.filter((pl.col("status") == "ok") & pl.col("t_usec").is_not_null())


def summarize(samples: pl.DataFrame) -> pl.DataFrame:
    if samples.height == 0:
        return pl.DataFrame()  # no IMB cell produced output: an empty summary, not an error
    df = usable_samples(samples)
    keys = [k for k in SUMMARY_KEYS if k in df.columns]
    t = pl.col("t_usec")
    grouped = df.group_by(keys, maintain_order=True).agg(
        pl.len().cast(pl.Int32).alias("n_reps"),
        t.median().alias("t_median_usec"),
        t.min().alias("t_min_usec"),
        (t.std() / t.mean()).alias("t_cv"),
        pl.col("bandwidth_MBps").median().alias("bw_median_MBps"),
        t.filter(t.is_finite()).sort().alias("_t"),
        *([pl.col("oversubscribed").any().alias("oversubscribed")] if "oversubscribed" in df.columns else []),
    )
    lengths = grouped["_t"].list.len().to_numpy().astype(np.int64)
    flat = grouped["_t"].explode().drop_nulls().to_numpy().astype(float)
    low, high = median_cis_sorted(flat, lengths)
    return (
        grouped.drop("_t")
        .with_columns(
            pl.Series("t_ci_low_usec", low, dtype=pl.Float64),
            pl.Series("t_ci_high_usec", high, dtype=pl.Float64),
        )
        .sort(keys)
    )
