"""The samples tables a fit reads: every ``*samples.parquet`` under a directory, pooled."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mpiatlas.stats.quality import trusted
from mpiatlas.matrix.cells import DEFAULT_DISTRIBUTION
from mpiatlas.spine.series import PLACEMENT_SEGMENT_PREFIX

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


# The axes besides stack/transport/mapping/np/algorithm that tell two cells' series apart (matrix.cells.Cell:
# options, knobs, distribution): series pooled over them would mix different settings.
SERIES_AXES: tuple[str, ...] = ("options", "knobs", "placement")


def with_series_axes(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with :data:`SERIES_AXES` as columns: ``options`` and ``knobs`` ("" where a table has none:
    IMB's defaults, no knob set) and ``placement`` (block | cyclic over nodes, null on one node).

    The samples tables do not carry the placement: it is in the cell id only (``placement=block/``,
    none for cyclic; matrix.cells.axes_segments), so it is read from there, as tables.tidy does."""
    out = df.with_columns(pl.col(c).fill_null("") if c in df.columns else pl.lit("", dtype=pl.String).alias(c)
                          for c in ("options", "knobs"))
    if "placement" in out.columns:
        return out
    multi = (pl.col("nodes").fill_null(1) > 1) if "nodes" in out.columns else pl.lit(False)
    named = (pl.col("cell").cast(pl.String).str.extract(f"/{PLACEMENT_SEGMENT_PREFIX}([^/]+)/", 1)
             if "cell" in out.columns else pl.lit(None, dtype=pl.String))
    return out.with_columns(pl.when(multi).then(named.fill_null(DEFAULT_DISTRIBUTION))
                            .otherwise(pl.lit(None, dtype=pl.String)).alias("placement"))
