"""Import raw IMB and OSU Micro-Benchmarks output files into a samples table shaped like the
pipeline's own samples.

OSU text output and the OSU CSV exports are recognised per file (:mod:`mpiatlas.parsers.osu_input`
holds that rule) and read into the same columns, with their mapping and algorithm where the file
names them; everything else is IMB output.

Each file's rows get the file's label (:mod:`mpiatlas.tables.import_labels`: by default the shortest
distinguishing path, so files that share a name on different systems stay apart; ``pool``, one
``label`` or a labels CSV pool files on purpose), decided once for all files before any is read.
The pipeline's cell columns (``stack``, ``transport``, ``mapping``, ``algorithm``) are null for
imported data and ``np`` is IMB's ``#processes``, so ``mpiatlas fit`` and the report read both
kinds of data alike.

IMB output has two executors (:mod:`mpiatlas.parsers.imb`): files are read and parsed in chunks by
the C batch scanner (:mod:`mpiatlas.parsers.imb_scan`), which takes the happy path only and bails
on anything else; a bailed file, a ``.csv`` and an OSU text go through the Python readers one by
one (the IMB lines executor words every error), exactly as a single file would. The chunks run on a
pool of threads: the scanner runs without the GIL, so they use every core without the start-up
and pickling costs of worker processes. A file that fails is reported on its own and the others
are kept. Rows come by file, then line.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from mpiatlas.tables.import_labels import file_labels, pooled_labels
from mpiatlas.parsers.imb import COLUMNS, ImbParseError, parse_imb_text, read_imb_file
from mpiatlas.parsers.imb_scan import scan_imb_files, scanner_available
from mpiatlas.parsers.osu_input import osu_kind, parse_osu_input

SAMPLES_FILE = "imb_samples.parquet"
NULL_CELL_COLUMNS: tuple[str, ...] = ("stack", "transport", "mapping", "algorithm")
# Files per scanner call: big enough that the per-call conversion to polars vanishes, small
# enough that the chunks spread over the threads.
CHUNK_FILES = 2048


@dataclass
class FileResult:
    # The name as import_files was given it (a Path for the files read in Python): making 25 k Path
    # objects of the names a shell glob gives costs a tenth of a second.
    path: str | Path
    label: str
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

    def pooled_labels(self) -> dict[str, int]:
        """Labels of several different imported files (their rows are pooled as repetitions), with the counts."""
        imported = [f for f in self.files if f.error is None]
        return pooled_labels([f.path for f in imported], [f.label for f in imported])


def label_samples(df: pl.DataFrame, label: str | pl.Expr | pl.Series) -> pl.DataFrame:
    """Add ``label`` and the pipeline's cell columns to parsed rows (a literal label or an expression)."""
    label_expr = pl.lit(label, dtype=pl.String) if isinstance(label, str) else label
    # OSU CSV exports name a mapping and an algorithm per row: those are kept, the rest are null.
    return df.with_columns(
        label_expr.cast(pl.String).alias("label"),
        *((pl.col(c) if c in df.columns else pl.lit(None, dtype=pl.String)).alias(c) for c in NULL_CELL_COLUMNS),
        pl.col("processes").alias("np"),
    )


def _import_osu(path: Path, label: str, text: str, processes: int | None) -> tuple[pl.DataFrame | None, FileResult]:
    try:
        rows = parse_osu_input(path, text, processes=processes)
    except ImbParseError as exc:  # OsuParseError is one: the message names the file and line
        return None, FileResult(path=path, label=label, error=str(exc))
    benchmarks = rows["benchmark"].unique(maintain_order=True).to_list()
    return label_samples(rows, label), FileResult(path=path, label=label, rows=rows.height, benchmarks=benchmarks)


def _import_in_python(given: str | Path, label: str, osu_processes: int | None) -> tuple[pl.DataFrame | None,
                                                                                       FileResult]:
    """One file the C scanner did not take: OSU text or CSV, or IMB output for the lines executor
    (which words the file's error, if it has one)."""
    path = Path(given)
    try:
        text = read_imb_file(path)
    except OSError as exc:  # unreadable or missing file: same treatment as a parse failure
        return None, FileResult(path=path, label=label, error=f"{path}: cannot read: {exc.strerror or exc}")
    # The OSU readers only for the files the scanner left: an IMB import never loads them.

    if osu_kind(path, text) is not None:
        return _import_osu(path, label, text, osu_processes)
    try:
        rows = parse_imb_text(text, str(path))
    except ImbParseError as exc:
        return None, FileResult(path=path, label=label, error=str(exc))
    benchmarks = rows["benchmark"].unique(maintain_order=True).to_list()
    return label_samples(rows, label), FileResult(path=path, label=label, rows=rows.height, benchmarks=benchmarks)


def _import_scanned(
    paths: Sequence[str | Path], labels: Sequence[str], picked: list[int]
) -> tuple[pl.DataFrame | None, dict[int, FileResult], list[int]]:
    """The files ``picked`` (indices into ``paths``) through the C scanner: their labelled rows
    with ``file`` (the index into ``paths``), a result per file it read, and the files it bailed."""
    scan = scan_imb_files([paths[i] for i in picked])
    bailed = [picked[j] for j in scan.bailed]
    samples = scan.samples
    if samples.height == 0:
        return None, {}, bailed
    counts = np.bincount(samples["file"].to_numpy(), minlength=len(picked))
    results = {picked[j]: FileResult(path=paths[picked[j]], label=labels[picked[j]], rows=int(counts[j]),
                                     benchmarks=benchmarks)
               for j, benchmarks in scan.benchmarks.items()}  # fmt: skip
    if picked != list(range(len(paths))):
        samples = samples.with_columns(pl.Series(picked, dtype=pl.Int32).gather(samples["file"]).alias("file"))
    # One gather of the per-file labels by each row's file index: no per-file frame, no join.
    per_file = pl.Series(labels, dtype=pl.String)
    return label_samples(samples, per_file.gather(samples["file"])), results, bailed


def _import_chunk(
    paths: Sequence[str | Path], labels: Sequence[str], osu_processes: int | None = None
) -> tuple[pl.DataFrame | None, list[FileResult]]:
    """Read and parse some files: their labelled rows (by file, then line) and a result per file, in order."""
    # A .csv is an OSU export (osu_input's rule): the scanner reads IMB text only.
    picked = [i for i, path in enumerate(paths) if os.fspath(path)[-4:].lower() != ".csv"]
    scanned, results, bailed = _import_scanned(paths, labels, picked)
    frames = [scanned] if scanned is not None else []
    for i in sorted([*bailed, *(set(range(len(paths))) - set(picked))]):
        frame, results[i] = _import_in_python(paths[i], labels[i], osu_processes)
        if frame is not None:
            frames.append(frame.with_columns(pl.lit(i, dtype=pl.Int32).alias("file")))
    if not frames:
        return None, [results[i] for i in range(len(paths))]
    columns = [*COLUMNS, "label", *NULL_CELL_COLUMNS, "np"]
    samples = pl.concat([f.select(*columns, "file") for f in frames], how="vertical")
    if len(frames) > 1:  # the scanner's rows are in file order; the others go where their file is
        samples = samples.sort("file", maintain_order=True)
    return samples.drop("file"), [results[i] for i in range(len(paths))]


def _import_reported(
    chunk: tuple[Sequence[str | Path], Sequence[str]], osu_processes: int | None, progress: Callable[[int], None] | None
) -> tuple[pl.DataFrame | None, list[FileResult]]:
    """:func:`_import_chunk`, then its files counted on ``progress``."""
    part = _import_chunk(*chunk, osu_processes)
    if progress is not None:
        progress(len(chunk[0]))
    return part


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off meanwhile: a file's result makes a few objects,
    none cyclic, and tens of thousands of files would run the collector over the whole heap
    (polars, numpy) again and again. Restored as it was, also on error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def import_files(paths: Iterable[str | Path], *, label: str | None = None, labels_csv: str | Path | None = None,
                 pool: bool = False, threads: int | None = None, osu_processes: int | None = None,
                 progress: Callable[[int], None] | None = None) -> ImportResult:
    """Parse every file; a file that fails is recorded with its parse error's message, not raised.

    Labels (:mod:`mpiatlas.tables.import_labels`): ``label`` for every file, else the ``labels_csv``
    mapping (``path,label``) for the files it lists and, for the others, the file stem if ``pool``
    or the shortest distinguishing path. A label that cannot be given raises
    :class:`~mpiatlas.tables.import_labels.LabelError` before any file is read.
    ``osu_processes``: the rank count of OSU collective text output, which OSU does not print.
    ``progress(n)`` is called as each chunk of ``n`` files is done, from the worker threads."""
    with _collector_paused():
        all_paths = list(paths)
        labels = file_labels(all_paths, label=label, labels_csv=labels_csv, pool=pool)
        spans = [(i, i + CHUNK_FILES) for i in range(0, len(all_paths), CHUNK_FILES)]
        chunks = [(all_paths[a:b], labels[a:b]) for a, b in spans]
        workers = threads or min(len(chunks), os.cpu_count() or 1) or 1
        if chunks:
            scanner_available()  # build or load it once, before the threads ask for it
        with ThreadPoolExecutor(max_workers=workers) as executor:
            parts = list(executor.map(lambda chunk: _import_reported(chunk, osu_processes, progress), chunks))
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
    # costs about a third of writing 1 M imported rows, for a file ~1.6x smaller. No column
    # statistics: every reader here loads the whole table (read_parquet, no pushed-down filter),
    # and computing them costs ~10 % of the write.
    samples.write_parquet(path, compression="lz4", statistics=False)
    return path
