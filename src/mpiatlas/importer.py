"""Import raw IMB and OSU Micro-Benchmarks output files into a samples table shaped like the
pipeline's own samples.

OSU text output and the OSU CSV exports are recognised per file (:mod:`mpiatlas.parsers.osu_input`
holds that rule) and read into the same columns, with their mapping and algorithm where the file
names them; everything else is IMB output.

Each file's rows are labelled with ``label`` = the file stem. The pipeline's cell columns
(``stack``, ``transport``, ``mapping``, ``algorithm``) are null for imported data and ``np`` is
IMB's ``#processes``, so ``mpiatlas fit`` and the report read both kinds of data alike.

Files are read and parsed in chunks, each chunk one vectorised :func:`parse_imb_texts` call, on
a pool of threads: polars and the file reads release the GIL, so the chunks use every core
without the start-up and pickling costs of worker processes (bench/parse_aggregate.py measured
both). A file that fails is reported on its own and the others are kept.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from mpiatlas.parsers.imb import COLUMNS, ImbParseError, parse_imb_texts, read_imb_file
from mpiatlas.parsers.osu_input import osu_kind, parse_osu_input

SAMPLES_FILE = "imb_samples.parquet"
NULL_CELL_COLUMNS: tuple[str, ...] = ("stack", "transport", "mapping", "algorithm")
# Files per parse call: big enough that polars' per-call overhead vanishes, small enough that
# the chunks spread over the threads and the lines of a chunk stay a few tens of MB.
CHUNK_FILES = 2048


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


def label_samples(df: pl.DataFrame, label: str | pl.Expr) -> pl.DataFrame:
    """Add ``label`` and the pipeline's cell columns to parsed rows (a literal label or an expression)."""
    label_expr = pl.lit(label, dtype=pl.String) if isinstance(label, str) else label
    # OSU CSV exports name a mapping and an algorithm per row: those are kept, the rest are null.
    return df.with_columns(
        label_expr.cast(pl.String).alias("label"),
        *((pl.col(c) if c in df.columns else pl.lit(None, dtype=pl.String)).alias(c) for c in NULL_CELL_COLUMNS),
        pl.col("processes").alias("np"),
    )


def _import_osu(path: Path, text: str, processes: int | None) -> tuple[pl.DataFrame | None, FileResult]:
    try:
        rows = parse_osu_input(path, text, processes=processes)
    except ImbParseError as exc:  # OsuParseError is one: the message names the file and line
        return None, FileResult(path=path, error=str(exc))
    benchmarks = rows["benchmark"].unique(maintain_order=True).to_list()
    return label_samples(rows, path.stem), FileResult(path=path, rows=rows.height, benchmarks=benchmarks)


def _import_chunk(paths: Sequence[Path], osu_processes: int | None = None) -> tuple[pl.DataFrame | None, list[FileResult]]:
    """Read and parse some files: their labelled rows and one result per file, in order."""
    results: dict[int, FileResult] = {}
    readable: list[int] = []
    texts: list[tuple[str, str]] = []
    osu_frames: list[pl.DataFrame] = []
    for i, path in enumerate(paths):
        try:
            text = read_imb_file(path)
        except OSError as exc:  # unreadable or missing file: same treatment as a parse failure
            results[i] = FileResult(path=path, error=f"{path}: cannot read: {exc.strerror or exc}")
            continue
        if osu_kind(path, text) is not None:
            frame, results[i] = _import_osu(path, text, osu_processes)
            osu_frames += [frame] if frame is not None else []
            continue
        texts.append((str(path), text))
        readable.append(i)
    imb, imb_results = _import_imb(paths, readable, texts)
    results |= imb_results
    frames = [f.select(*COLUMNS, "label", *NULL_CELL_COLUMNS, "np") for f in (imb, *osu_frames) if f is not None]
    samples = pl.concat(frames, how="vertical") if frames else None
    return samples, [results[i] for i in range(len(paths))]


def _import_imb(paths: Sequence[Path], readable: list[int], texts: list[tuple[str, str]]
                ) -> tuple[pl.DataFrame | None, dict[int, FileResult]]:
    """The IMB files of a chunk, parsed in one vectorised call."""
    results: dict[int, FileResult] = {}
    if not texts:
        return None, results
    batch = parse_imb_texts(texts)
    for j, exc in batch.errors.items():
        results[readable[j]] = FileResult(path=paths[readable[j]], error=str(exc))
    samples = batch.samples
    per_file = samples.group_by("file", maintain_order=True).agg(
        pl.len().alias("rows"), pl.col("benchmark").unique(maintain_order=True).alias("benchmarks")
    )
    for j, rows, benchmarks in per_file.iter_rows():
        results[readable[j]] = FileResult(path=paths[readable[j]], rows=rows, benchmarks=benchmarks)
    if samples.height == 0:
        return None, results
    stems = pl.Series([paths[i].stem for i in readable], dtype=pl.String)
    return label_samples(samples.drop("file"), pl.lit(stems).gather(samples["file"])), results


def import_files(paths: Iterable[str | Path], *, threads: int | None = None,
                 osu_processes: int | None = None) -> ImportResult:
    """Parse every file; a file that fails is recorded with its parse error's message, not raised.

    ``osu_processes``: the rank count of OSU collective text output, which OSU does not print."""
    all_paths = [p if isinstance(p, Path) else Path(p) for p in paths]
    chunks = [all_paths[i : i + CHUNK_FILES] for i in range(0, len(all_paths), CHUNK_FILES)]
    workers = threads or min(len(chunks), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda chunk: _import_chunk(chunk, osu_processes), chunks))
    frames = [frame for frame, _ in parts if frame is not None]
    results = [result for _, chunk_results in parts for result in chunk_results]
    samples = pl.concat(frames, how="vertical") if frames else None
    if samples is not None:
        samples = samples.select(*COLUMNS, "label", *NULL_CELL_COLUMNS, "np")
    return ImportResult(samples=samples, files=results)


def write_samples(samples: pl.DataFrame, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SAMPLES_FILE
    # lz4, not polars' default zstd: compressing the timing columns (random digits) with zstd
    # costs about a third of writing 1 M imported rows, for a file ~1.6x smaller.
    samples.write_parquet(path, compression="lz4")
    return path
