"""The timings tune decides on: IMB samples, and mpiatlas's coll kernel where a stack has no IMB.

Both become one table of the IMB samples' shape (one row per cell = repetition per size, ``t_usec``,
``benchmark`` as IMB names it, ``algorithm``), with a ``source`` column. The coll kernel's number is
rank 0's ``t_avg_usec`` (OSU's Avg Latency: the time per call averaged over ranks), the same one
its own report quotes (:mod:`mpiatlas.models.kernel_p2p`). Open MPI has no IMB on this machine, so
its forced algorithms are measured by the kernel only.

A series (stack x transport x collective) measured by both programs is decided on IMB's timings:
two programs' times of one algorithm differ (timing loops, barriers), and one decision needs one.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.stats.aggregate import usable_samples
from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.stats.quality import QUALITY_COLUMN, trusted

IMB, KERNEL = "imb", "coll kernel"
# coll kernel collective -> IMB benchmark name (the name campaigns force algorithms under).
KERNEL_BENCHMARKS: dict[str, str] = {"bcast": "Bcast", "allreduce": "Allreduce", "alltoall": "Alltoall"}
COLUMNS: tuple[str, ...] = ("stack", "stack_kind", "stack_version", "transport", "mapping", "nodes", "np",
                            "benchmark", "algorithm", "bytes", "t_usec", "bandwidth_MBps", "status", "knobs", "options", "cell",
                            "run", "source", QUALITY_COLUMN)


class SamplesError(ValueError):
    """Bad input: names the file and what was expected."""


def tidy_dir(path: Path) -> Path:
    """``results/<name>`` -> its ``tidy/``; a tidy dir as it is."""
    return path / "tidy" if (path / "tidy").is_dir() else path


def _shaped(df: pl.DataFrame, source: str) -> pl.DataFrame:
    # run: the adaptive round a repetition belongs to (compare.grouped_times keeps runs apart).
    typed = {"nodes": pl.Int64, "bandwidth_MBps": pl.Float64, "run": pl.Int32}
    df = df.with_columns(*(pl.lit(None, dtype=typed.get(c, pl.String)).alias(c) for c in COLUMNS if c not in df.columns))
    # Only usable rows get here (usable_samples, or the kernel's ok cells' valid records).
    return df.with_columns(pl.lit(source).alias("source"), pl.lit("ok").alias("status"),
                           pl.col("algorithm").fill_null(DEFAULT), pl.col("bandwidth_MBps").cast(pl.Float64),
                           pl.col("run").cast(pl.Int32).fill_null(0),
                           pl.col("np").cast(pl.Int64), pl.col("bytes").cast(pl.Int64),
                           pl.col("nodes").cast(pl.Int64), pl.col("knobs").cast(pl.String),
                           pl.col("options").cast(pl.String)).select(COLUMNS)


def imb_samples(tidy: Path) -> pl.DataFrame | None:
    path = tidy / layout.IMB_SAMPLES
    if not path.is_file():
        return None
    df = pl.read_parquet(path)
    if df.height == 0:
        return None  # a campaign without IMB cells writes an empty table
    needed = ("benchmark", "bytes", "t_usec", "status", "np", "stack", "transport")
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise SamplesError(f"{path}: not an IMB samples table (missing columns: {', '.join(missing)})")
    if "algorithm" not in df.columns:
        df = df.with_columns(pl.lit(DEFAULT).alias("algorithm"))
    return _shaped(usable_samples(df), IMB)


def kernel_samples(tidy: Path) -> pl.DataFrame | None:
    """Rank 0's rows of the ok cells' valid coll records, as IMB-shaped samples."""
    path = tidy / layout.kernel_table("coll")
    if not path.is_file():
        return None
    df = pl.read_parquet(path)
    if df.height == 0:
        return None
    needed = ("collective", "bytes", "t_avg_usec", "rank", "np", "stack", "transport")
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise SamplesError(f"{path}: not a coll kernel table (missing columns: {', '.join(missing)})")
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    df = trusted(df)  # a perturbed launch decides nothing (as in every median and fit)
    if "valid" in df.columns:
        df = df.filter(pl.col("valid").fill_null(False))
    if "algorithm" not in df.columns:
        df = df.with_columns(pl.lit(DEFAULT).alias("algorithm"))
    df = df.filter((pl.col("rank") == 0) & pl.col("t_avg_usec").is_not_null()
                   & pl.col("collective").is_in(list(KERNEL_BENCHMARKS)))
    if df.height == 0:
        return None
    df = df.with_columns(pl.col("collective").replace_strict(KERNEL_BENCHMARKS).alias("benchmark"),
                         pl.col("t_avg_usec").cast(pl.Float64).alias("t_usec"))
    return _shaped(df, KERNEL)


def load(path: Path) -> pl.DataFrame:
    """Every usable sample under ``path``; series of both programs keep IMB's rows."""
    tidy = tidy_dir(path)
    if not tidy.is_dir():
        raise SamplesError(f"{path}: not a directory (expected results/<campaign> or its tidy/)")
    parts = [p for p in (imb_samples(tidy), kernel_samples(tidy)) if p is not None]
    if not parts:
        raise SamplesError(f"{tidy}: neither {layout.IMB_SAMPLES} nor {layout.kernel_table('coll')} with usable "
                           "rows (expected a campaign's tidy dir)")
    df = pl.concat(parts, how="vertical_relaxed")
    series = ["stack", "transport", "benchmark"]

    def forced(source: str) -> pl.DataFrame:
        return df.filter((pl.col("source") == source) & (pl.col("algorithm") != DEFAULT)).select(series).unique()

    # A series is decided on the program that forced its algorithms, IMB first.
    by_kernel = forced(KERNEL).join(forced(IMB), on=series, how="anti", nulls_equal=True)
    return pl.concat([df.filter(pl.col("source") == IMB).join(by_kernel, on=series, how="anti", nulls_equal=True),
                      df.filter(pl.col("source") == KERNEL).join(by_kernel, on=series, how="semi", nulls_equal=True)])
