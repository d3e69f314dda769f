"""Per cell and message size: median, min, 95 % CI of the median, CV over repetitions."""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

SUMMARY_KEYS = ["label", "stack", "transport", "mapping", "np", "algorithm", "benchmark", "processes", "bytes"]
CONFIDENCE = 0.95


def median_ci(values: np.ndarray, *, seed: int = 0) -> tuple[float, float]:
    """95 % CI of the median by percentile bootstrap (NaN for a single sample: no spread to resample)."""
    values = values[np.isfinite(values)]
    if values.size < 2 or np.ptp(values) == 0:
        v = float(values[0]) if values.size else float("nan")
        return (v, v) if values.size >= 2 else (float("nan"), float("nan"))
    res = stats.bootstrap((values,), np.median, confidence_level=CONFIDENCE, n_resamples=999,
                          method="percentile", random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


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
    grouped = (
        df.group_by(keys, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int32).alias("n_reps"),
            pl.col("t_usec").median().alias("t_median_usec"),
            pl.col("t_usec").min().alias("t_min_usec"),
            (pl.col("t_usec").std() / pl.col("t_usec").mean()).alias("t_cv"),
            pl.col("bandwidth_MBps").median().alias("bw_median_MBps"),
            pl.col("t_usec").alias("_t"),
            *([pl.col("oversubscribed").any().alias("oversubscribed")] if "oversubscribed" in df.columns else []),
        )
    )
    cis = [median_ci(np.asarray(t, dtype=float)) for t in grouped["_t"].to_list()]
    return grouped.drop("_t").with_columns(
        pl.Series("t_ci_low_usec", [c[0] for c in cis], dtype=pl.Float64),
        pl.Series("t_ci_high_usec", [c[1] for c in cis], dtype=pl.Float64),
    ).sort(keys)
