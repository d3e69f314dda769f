"""The samples tables a fit reads: every ``*samples.parquet`` under a directory, pooled."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mpiatlas.stats.quality import trusted

# Pipeline samples identify a measurement cell by these; imported samples have them null.
CELL_COLUMNS: tuple[str, ...] = ("stack", "transport", "mapping", "np", "algorithm")
REQUIRED_COLUMNS: tuple[str, ...] = ("benchmark", "bytes", "t_usec")


def load_samples(directory: Path) -> tuple[pl.DataFrame | None, str]:
    """All ``*samples.parquet`` under ``directory`` concatenated, or (None, why not); the rows of
    perturbed launches are left out (mpiatlas.stats.quality.trusted): fits read these."""
    files = sorted(directory.rglob("*samples.parquet")) if directory.is_dir() else []
    if not files:
        return None, f"no *samples.parquet under {directory}"
    samples = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    if samples.height == 0:
        # A campaign whose IMB cells were all unavailable/failed: nothing to fit is a valid answer.
        return samples, f"the samples tables under {directory} are empty: {', '.join(map(str, files))}"
    missing = [c for c in REQUIRED_COLUMNS if c not in samples.columns]
    if missing:
        return None, f"samples under {directory} lack column(s) {missing}"
    samples = trusted(samples)
    if samples.height == 0:
        return samples, f"every sample under {directory} is from a perturbed launch (cells table: quality)"
    if "label" not in samples.columns:
        samples = samples.with_columns(pl.lit(None, dtype=pl.String).alias("label"))
    return samples, ""
