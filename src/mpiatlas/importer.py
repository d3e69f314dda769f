"""Import raw IMB output files into a samples table shaped like the pipeline's own samples.

Each file's rows are labelled with ``label`` = the file stem. The pipeline's cell columns
(``stack``, ``transport``, ``mapping``, ``algorithm``) are null for imported data and ``np`` is
IMB's ``#processes``, so ``mpiatlas fit`` and the report read both kinds of data alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from mpiatlas.parsers.imb import ImbParseError, parse_imb_file

SAMPLES_FILE = "imb_samples.parquet"
NULL_CELL_COLUMNS: tuple[str, ...] = ("stack", "transport", "mapping", "algorithm")


@dataclass
class FileResult:
    path: Path
    rows: int = 0
    benchmarks: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class ImportResult:
    samples: pl.DataFrame | None
    files: list[FileResult]

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.error is not None]

    def duplicate_labels(self) -> dict[str, int]:
        """Labels shared by several imported files (their rows are pooled as repetitions)."""
        counts = Counter(f.path.stem for f in self.files if f.error is None)
        return {label: n for label, n in counts.items() if n > 1}


def label_samples(df: pl.DataFrame, label: str) -> pl.DataFrame:
    """Add ``label`` and the pipeline's cell columns to one parsed file."""
    return df.with_columns(
        pl.lit(label, dtype=pl.String).alias("label"),
        *(pl.lit(None, dtype=pl.String).alias(c) for c in NULL_CELL_COLUMNS),
        pl.col("processes").alias("np"),
    )


def import_files(paths: Iterable[str | Path]) -> ImportResult:
    """Parse every file; a file that fails is recorded with its ImbParseError message, not raised."""
    frames: list[pl.DataFrame] = []
    results: list[FileResult] = []
    for raw in paths:
        path = Path(raw)
        try:
            df = parse_imb_file(path)
        except ImbParseError as exc:
            results.append(FileResult(path=path, error=str(exc)))
            continue
        except OSError as exc:  # unreadable or missing file: same treatment as a parse failure
            results.append(FileResult(path=path, error=f"{path}: cannot read: {exc.strerror or exc}"))
            continue
        frames.append(label_samples(df, path.stem))
        benchmarks = list(dict.fromkeys(df["benchmark"].to_list()))
        results.append(FileResult(path=path, rows=df.height, benchmarks=benchmarks))
    samples = pl.concat(frames, how="vertical") if frames else None
    return ImportResult(samples=samples, files=results)


def write_samples(samples: pl.DataFrame, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SAMPLES_FILE
    samples.write_parquet(path)
    return path
