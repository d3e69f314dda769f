"""Parse raw Intel MPI Benchmarks (IMB-MPI1, IMB-EXT, IMB-P2P) stdout into one tidy table.

IMB output is read as a state machine over lines:

``OUTSIDE``  before the first IMB banner or after ``# All processes entering MPI_Finalize``;
             anything goes (``Nodes:``, ``Results:``, ``[0] MPI startup(): ...``).
``RUN``      inside a run, between tables: IMB's ``#`` comment lines.
``BLOCK``    after ``# Benchmarking <Name>``: collects ``#processes``, ``MODE`` and the
             ``-multi`` group line until the column-header line.
``TABLE``    reading data rows until the next ``#`` line.

For many files (:func:`parse_imb_texts`, ``mpiatlas import``) the machine is evaluated with
polars over the lines of all of them at once; one text (:func:`parse_imb_text`, a cell's output)
is walked line by line in Python by :mod:`mpiatlas.parsers.imb_lines`. Both executors take the
patterns, columns, row reading and error wording from :mod:`mpiatlas.parsers.imb_shapes`.

Here the states follow from a few events: the *global* lines (banner, ``# Benchmarking``,
finalize) start a segment whose kind is the state after them; inside a
``# Benchmarking`` segment the first column header ends BLOCK and the first ``#`` line after it
ends TABLE. Cumulative sums and forward fills give every line its state; the table rows are then
read by :mod:`mpiatlas.parsers.imb_rows`, one header layout at a time, with the shared per-row
logic (imb_shapes.parse_row) for the rare rows the vectorised reading cannot take as they stand.

Every table is read by its column header, so all IMB layouts map onto the same columns. One
output row per table row; ``line`` keeps the 1-based line in the file for traceability. Errors
name ``file:line``; the first error of a file wins, as in a line-by-line read, and in a batch
each file fails or parses on its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np
import polars as pl

from mpiatlas.parsers import imb_shapes as shapes
from mpiatlas.parsers.imb_lines import parse_lines
from mpiatlas.parsers.imb_rows import FIELDS, read_rows
from mpiatlas.parsers.imb_shapes import COLUMN_TYPES, COLUMNS, MIB_TO_MB, ErrorKind, ImbParseError, Layout

SCHEMA: dict[str, pl.DataType] = {name: getattr(pl, dtype)() for name, dtype in COLUMN_TYPES.items()}

__all__ = ["COLUMNS", "MIB_TO_MB", "SCHEMA", "ImbBatch", "ImbParseError", "parse_imb_file", "parse_imb_text",
           "parse_imb_texts", "read_imb_file"]


def _rx(pattern: str) -> str:
    """A line pattern for polars (Rust regex) with Python's meaning of whitespace.

    Python's ``\\s`` and str.strip() take every str.isspace() character, Rust's ``\\s`` all of them
    but ``\\x1f``: add it, so both engines cut tokens and lines alike.
    """
    return re.sub(r"\\[sS]", lambda m: r"[\s\x1f]" if m.group() == r"\s" else r"[^\s\x1f]", pattern)


# The shared line patterns (imb_shapes), for the Rust engine.
_RX_BANNER = _rx(shapes.BANNER.regex)
_RX_INVALID = shapes.INVALID
_RX_BENCHMARKING = _rx(shapes.BENCHMARKING.regex)
_RX_FINALIZE = _rx(shapes.FINALIZE.regex)
_RX_GROUPS = _rx(shapes.GROUPS.regex)
_RX_PROCESSES = _rx(shapes.PROCESSES.regex)
_RX_MODE = _rx(shapes.MODE.regex)
_RX_HEADER = _rx(shapes.HEADER.regex)
# A cheap superset of the lines the patterns above match, as literals (a regex engine finds these
# fast; (?i) would not be): "benchmark" in the case forms (?i) allows (with the Kelvin sign) for
# INVALID, then the literal each other pattern requires. Only these lines get the patterns themselves.
_RX_MARK = "|".join(
    ["[Bb][Ee][Nn][Cc][Hh][Mm][Aa][Rr][Kk\u212a]"]
    + [re.escape(p.literal) for p in (shapes.BANNER, shapes.BENCHMARKING, shapes.FINALIZE, shapes.GROUPS,
                                      shapes.PROCESSES, shapes.MODE, shapes.HEADER)]
)  # fmt: skip
# Line breaks of str.splitlines() other than "\n": such texts are split by Python first.
_RX_OTHER_BREAKS = "[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"


class _Kind(IntEnum):
    """What a line is, by priority (a line matching several is the first); also segment kinds."""

    OTHER = 0  # a segment of this kind is OUTSIDE: the start of a file
    BANNER = 1
    INVALID = 2
    BENCHMARKING = 3
    FINALIZE = 4
    GROUPS = 5
    PROCESSES = 6
    MODE = 7
    HEADER = 8


_GLOBAL_KINDS = [_Kind.BANNER, _Kind.BENCHMARKING, _Kind.FINALIZE]
# Lines handled before anything else, whatever the state (a row matching one is not a row).
_FIRST_KINDS = [*_GLOBAL_KINDS, _Kind.INVALID]


@dataclass
class ImbBatch:
    """Several IMB outputs parsed at once.

    ``samples`` has the :data:`SCHEMA` columns plus ``file`` (the index of the input) for the
    inputs that parsed; ``errors`` maps the index of every other input to its error.
    """

    samples: pl.DataFrame
    errors: dict[int, ImbParseError]


# -- lines ---------------------------------------------------------------------------------------


def _split_lines(texts: Sequence[str]) -> tuple[pl.DataFrame, pl.Series]:
    """One row per line (``file``, ``lineno``, ``line``) as str.splitlines() cuts them; lines per file."""
    raw = pl.Series("line", texts, dtype=pl.String)
    other_breaks = raw.str.contains(_RX_OTHER_BREAKS)
    if other_breaks.any():  # "\r\n" and rarer breaks: rare enough to leave to Python
        raw = pl.Series("line", [("\n".join(t.splitlines()) + "\n") if o else t for t, o in zip(texts, other_breaks)])
    # splitlines() yields no empty last line after a final "\n"; an empty text is one empty line.
    per_file = raw.str.strip_suffix("\n").str.split("\n")
    n_lines = per_file.list.len().cast(pl.Int32)
    lines = pl.DataFrame({"file": pl.int_range(len(texts), dtype=pl.Int32, eager=True), "line": per_file})
    lines = lines.with_columns(pl.int_ranges(1, n_lines + 1, dtype=pl.Int32).alias("lineno")).explode("line", "lineno")
    return lines.with_row_index("idx"), n_lines


def _to_int(digits: pl.Series) -> pl.Series:
    """Process counts as Int32, by :func:`imb_shapes.process_count` where polars does not read them
    (non-ASCII digits, a count too large: null, the line is no count)."""
    value = digits.cast(pl.Int32, strict=False)
    unread = value.is_null() & digits.is_not_null()
    if unread.any():
        counts = [shapes.process_count(d) if d is not None else None for d in digits.to_list()]
        value = pl.Series(digits.name, counts, dtype=pl.Int32)
    return value


def _marks(lines: pl.DataFrame) -> pl.DataFrame:
    """The lines that are more than a row or a ``#`` line, with what they say and their kind."""
    line = pl.col("line")
    marks = lines.filter(line.str.contains(_RX_MARK)).select(
        "idx", "file", "lineno", "line",
        line.str.extract(_RX_BANNER, 1).alias("version"),
        line.str.contains(_RX_INVALID).alias("invalid"),
        line.str.extract(_RX_BENCHMARKING, 1).alias("benchmark"),
        line.str.contains(_RX_FINALIZE).alias("finalize"),
        line.str.extract(_RX_GROUPS, 1).alias("group_size"),
        line.str.extract(_RX_PROCESSES, 1).alias("nprocs"),
        line.str.extract(_RX_MODE, 1).alias("mode"),
        line.str.contains(_RX_HEADER).alias("header"),
    )  # fmt: skip
    marks = marks.with_columns(_to_int(marks["group_size"]), _to_int(marks["nprocs"]))
    kind = (
        pl.when(pl.col("version").is_not_null()).then(_Kind.BANNER)
        .when("invalid").then(_Kind.INVALID)
        .when(pl.col("benchmark").is_not_null()).then(_Kind.BENCHMARKING)
        .when("finalize").then(_Kind.FINALIZE)
        .when(pl.col("group_size").is_not_null()).then(_Kind.GROUPS)
        .when(pl.col("nprocs").is_not_null()).then(_Kind.PROCESSES)
        .when(pl.col("mode").is_not_null()).then(_Kind.MODE)
        .when("header").then(_Kind.HEADER)
        .otherwise(_Kind.OTHER)
    )  # fmt: skip
    marks = marks.with_columns(kind.cast(pl.Int8).alias("kind")).filter(pl.col("kind") != _Kind.OTHER)
    banners = (pl.col("kind") == _Kind.BANNER).cast(pl.Int32).cum_sum()
    file_start = pl.col("file") != pl.col("file").shift(1, fill_value=-1)
    resets = pl.col("kind").is_in(_GLOBAL_KINDS)
    return marks.with_columns(
        # Banners so far in the file (marks are in file order: a running count less the count
        # before the file's first mark, cheaper than a window over the files).
        (banners - pl.when(file_start).then(banners.shift(1, fill_value=0)).forward_fill() - 1).alias("run"),
        # Within a file a valid '# Benchmarking' always has its banner before it, so the fill
        # cannot borrow a previous file's version for a block that parses.
        pl.col("version").forward_fill(),
        # The last '#processes' / '-multi' group size and MODE since the segment began.
        pl.when(resets).then(-1)
        .when(pl.col("kind") == _Kind.GROUPS).then(pl.col("group_size"))
        .when(pl.col("kind") == _Kind.PROCESSES).then(pl.col("nprocs"))
        .forward_fill().alias("block_processes"),
        pl.when(resets).then(pl.lit("")).when(pl.col("kind") == _Kind.MODE).then(pl.col("mode"))
        .forward_fill().alias("block_mode"),
    )  # fmt: skip


# -- the state machine, vectorised ----------------------------------------------------------------


def _states(lines: pl.DataFrame, marks: pl.DataFrame) -> pl.DataFrame:
    """Every row, ``#`` and marked line with its segment and what the state machine does with it."""
    kind = np.zeros(lines.height, dtype=np.int8)
    kind[marks["idx"].to_numpy()] = marks["kind"].to_numpy()
    # The first character after the leading spaces decides: a digit starts a table row (size,
    # group or repetitions), '#' a comment. Anything but printable ASCII there (a tab, other
    # whitespace, non-ASCII) is left to Python's str.strip() and str.isdigit() (which knows
    # digits beyond 0-9), as the line-by-line parser did.
    events = lines.select("idx", "file", "lineno", pl.col("line").str.strip_chars_start(" ").str.head(1).alias("first"))
    first = pl.col("first")
    events = events.select(
        "idx", "file", "lineno",
        first.is_in(list("0123456789")).alias("is_row"),
        (first == "#").alias("is_hash"),
        ((first != "") & ((first < "!") | (first > "~"))).alias("unusual"),
        pl.Series("kind", kind),
    )  # fmt: skip
    if events["unusual"].any():
        rare = events.filter("unusual")
        stripped = [text.strip() for text in lines["line"].gather(rare["idx"]).to_list()]
        events = events.update(
            rare.select(
                "idx",
                pl.Series("is_row", [t[:1].isdigit() for t in stripped], dtype=pl.Boolean),
                pl.Series("is_hash", [t.startswith("#") for t in stripped], dtype=pl.Boolean),
            ),
            on="idx",
        )
    # Only rows, '#' lines and marks drive the machine; of consecutive plain '#' lines only the first
    # can end a table, the others change nothing (IMB's preambles are dozens of them).
    plain_hash = pl.col("is_hash") & (pl.col("kind") == _Kind.OTHER)
    events = events.drop("unusual").filter(pl.col("is_row") | pl.col("is_hash") | (pl.col("kind") != _Kind.OTHER))
    events = events.filter(
        ~(plain_hash & plain_hash.shift(1, fill_value=False) & (pl.col("file") == pl.col("file").shift(1)))
    )

    k = pl.col("kind")
    file_start = pl.col("file") != pl.col("file").shift(1, fill_value=-1)
    is_global = k.is_in(_GLOBAL_KINDS)
    # One lazy query: polars plans the cumulative sums and fills of all the steps together.
    states = events.lazy().with_columns(
        file_start.alias("file_start"),
        (is_global | file_start).alias("seg_start"),
    ).with_columns(
        pl.col("seg_start").cum_sum().alias("seg"),
        pl.when(is_global).then(k).when("file_start").then(pl.lit(_Kind.OTHER, pl.Int8)).forward_fill().alias("seg_kind"),
    )
    # BLOCK until the segment's first column header, TABLE from there to the first '#' line.
    in_bench = pl.col("seg_kind") == _Kind.BENCHMARKING
    states = states.with_columns(
        (in_bench & (k == _Kind.HEADER)).cum_sum().alias("_headers"),
        pl.when("file_start").then(pl.lit(_Kind.OTHER, pl.Int8)).otherwise(pl.col("seg_kind").shift(1)).alias("state_before"),
    ).with_columns(
        (pl.col("_headers") - pl.when("seg_start").then(pl.col("_headers")).forward_fill()).alias("_headers_in_seg"),
    ).with_columns(
        (in_bench & (pl.col("_headers_in_seg") == 0)).alias("in_block"),
        (in_bench & (k == _Kind.HEADER) & (pl.col("_headers_in_seg") == 1)).alias("first_header"),
    ).with_columns(
        (in_bench & (pl.col("_headers_in_seg") >= 1) & ~pl.col("first_header")).alias("after_header"),
    ).with_columns(
        (pl.col("is_hash") & pl.col("after_header")).cum_sum().alias("_hashes"),
    ).with_columns(
        # no '#' line strictly between the header and this line
        (pl.col("after_header") & (
            pl.col("_hashes") - pl.col("is_hash").cast(pl.UInt32)
            == pl.when("first_header").then(pl.col("_hashes")).forward_fill()
        )).alias("in_table"),
    )  # fmt: skip
    return states.drop("_headers", "_headers_in_seg", "_hashes", "file_start").collect()


def _errors_of_states(events: pl.DataFrame) -> pl.DataFrame:
    """Line-level errors the states alone reveal: ``file``, ``lineno``, ``idx``, ``seg``, ``error``."""
    k = pl.col("kind")
    plain_row = pl.col("is_row") & (k == _Kind.OTHER)
    error = (
        pl.when(k == _Kind.INVALID).then(ErrorKind.INVALID)
        .when((k == _Kind.BENCHMARKING) & pl.col("state_before").is_in([_Kind.OTHER, _Kind.FINALIZE])).then(ErrorKind.OUTSIDE_RUN)
        .when(plain_row & pl.col("in_block")).then(ErrorKind.ROW_IN_BLOCK)
        .when(pl.col("is_row") & ~k.is_in(_FIRST_KINDS)
              & ((pl.col("seg_kind") == _Kind.BANNER) | (pl.col("after_header") & ~pl.col("in_table")))).then(ErrorKind.ROW_IN_RUN)
    )  # fmt: skip
    return events.select("file", "lineno", "idx", "seg", error.alias("error")).filter(pl.col("error").is_not_null())


# -- tables --------------------------------------------------------------------------------------


def _blocks(events: pl.DataFrame, marks: pl.DataFrame) -> tuple[pl.DataFrame, list[Layout]]:
    """One row per table: its segment, benchmark, run, IMB version, processes, mode and layout."""
    bench = events.filter(pl.col("kind") == _Kind.BENCHMARKING).select("seg", "idx").join(
        marks.select("idx", "benchmark", "run", "version"), on="idx"
    )
    headers = events.filter("first_header").select(
        "seg", "file", pl.col("idx").alias("header_idx"), pl.col("lineno").alias("header_line")
    )
    headers = headers.join(
        marks.select(
            pl.col("idx").alias("header_idx"),
            pl.col("line").str.strip_chars().alias("header_text"),
            pl.when(pl.col("block_processes") >= 0).then(pl.col("block_processes")).alias("processes"),
            pl.when(pl.col("block_mode") != "").then(pl.col("block_mode")).alias("mode"),
        ),
        on="header_idx",
    )
    texts = headers["header_text"].unique(maintain_order=True).to_list()
    layouts = [Layout.of(t) for t in texts]
    ids = pl.DataFrame(
        {"header_text": pl.Series(texts, dtype=pl.String), "layout": pl.Series(range(len(texts)), dtype=pl.Int32)}
    )
    blocks = headers.join(ids, on="header_text").join(bench.drop("idx"), on="seg")
    return blocks, layouts


def _tidy(values: pl.DataFrame, sources: Sequence[str]) -> pl.DataFrame:
    """Rows in the output :data:`SCHEMA` (plus ``file``)."""
    for field, dtype in FIELDS.items():
        if field not in values.columns:
            values = values.with_columns(pl.lit(None, dtype=dtype).alias(field))
    return values.select(
        pl.Series("source", sources, dtype=pl.String).gather(values["file"]),
        pl.col("run"),
        pl.col("version").alias("imb_version"),
        "benchmark", "mode", "processes", "group", "bytes", "repetitions",
        pl.coalesce("t", "t_avg", "t_pure").alias("t_usec"),
        pl.col("t_min").alias("t_min_usec"),
        pl.col("t_max").alias("t_max_usec"),
        pl.col("t_avg").alias("t_avg_usec"),
        pl.when("mebibytes").then(pl.col("mbytes") * MIB_TO_MB).otherwise("mbytes").alias("bandwidth_MBps"),
        "msg_per_sec", "status",
        pl.col("lineno").alias("line"),
        "file",
    ).cast({k: v for k, v in SCHEMA.items()})  # fmt: skip


# -- errors --------------------------------------------------------------------------------------


def _first_errors(
    candidates: pl.DataFrame, row_errors: list[tuple[int, ImbParseError]], lines: pl.DataFrame, sources: Sequence[str],
    blocks: pl.DataFrame, layouts: list[Layout],
) -> dict[int, ImbParseError]:  # fmt: skip
    """The first error (by line) of each file."""
    first: dict[int, ImbParseError] = {}
    for file, exc in row_errors:
        if file not in first or exc.line < first[file].line:
            first[file] = exc
    earliest = candidates.sort("lineno").unique("file", keep="first").join(
        blocks.select("seg", "benchmark", "layout"), on="seg", how="left"
    )
    texts = lines["line"].gather(earliest["idx"]).to_list()
    for error, text in zip(earliest.iter_rows(named=True), texts):
        file, lineno = error["file"], error["lineno"]
        if file in first and first[file].line < lineno:
            continue
        layout = layouts[error["layout"]] if error["layout"] is not None else None
        what = shapes.message(error["error"], text, error["benchmark"], layout)
        first[file] = ImbParseError(sources[file], lineno, what)
    return first


def _end_of_file_errors(
    samples: pl.DataFrame, events: pl.DataFrame, n_lines: pl.Series, sources: Sequence[str], failed: set[int]
) -> dict[int, ImbParseError]:
    """Files without an error so far and without a single row: the error names their last line."""
    with_rows = set(samples["file"].unique().to_list()) if samples.height else set()
    tables = dict(events.filter(pl.col("kind") == _Kind.BENCHMARKING).group_by("file").len().iter_rows())
    errors: dict[int, ImbParseError] = {}
    for file, source in enumerate(sources):
        if file in with_rows or file in failed:
            continue
        what = shapes.end_of_file_message(bool(tables.get(file)))
        errors[file] = ImbParseError(source, max(int(n_lines[file]), 1), what)
    return errors


# -- entry points --------------------------------------------------------------------------------


def parse_imb_texts(texts: Sequence[tuple[str, str]]) -> ImbBatch:
    """Parse many IMB outputs ``(source, text)`` in one vectorised pass; errors are per input."""
    sources = [source for source, _ in texts]
    if not texts:
        return ImbBatch(pl.DataFrame(schema={**SCHEMA, "file": pl.Int32}), {})
    lines, n_lines = _split_lines([text for _, text in texts])
    marks = _marks(lines)
    events = _states(lines, marks)
    blocks, layouts = _blocks(events, marks)

    header_errors = blocks.filter(
        pl.col("layout").is_in([i for i, lay in enumerate(layouts) if lay.unknown]) | pl.col("processes").is_null()
    ).select("file", pl.col("header_line").alias("lineno"), pl.col("header_idx").alias("idx"), "seg",
             pl.lit(ErrorKind.HEADER, pl.Int32).alias("error"))  # fmt: skip
    candidates = pl.concat([_errors_of_states(events).cast({"error": pl.Int32}), header_errors], how="vertical_relaxed")

    table_rows = events.filter(
        pl.col("is_row") & pl.col("in_table") & ~pl.col("kind").is_in(_FIRST_KINDS)
    ).select("idx", "file", "lineno", "seg")
    table_rows = table_rows.join(blocks.select("seg", "layout"), on="seg")
    table_rows = table_rows.with_columns(lines["line"].gather(table_rows["idx"]).alias("text"))
    values, row_errors = read_rows(table_rows, layouts, sources)
    if values.height:
        versions = blocks["version"].unique().to_list()
        mebibytes = pl.DataFrame(
            {"version": versions, "mebibytes": [shapes.uses_mebibytes(v) for v in versions]},
            schema={"version": pl.String, "mebibytes": pl.Boolean},
        )
        block_columns = blocks.select("seg", "benchmark", "processes", "mode", "run", "version").join(
            mebibytes, on="version", how="left"
        )
        values = values.join(block_columns, on="seg", how="left", maintain_order="left")

    errors = _first_errors(candidates, row_errors, lines, sources, blocks, layouts)
    if values.height:
        samples = _tidy(values, sources).filter(~pl.col("file").is_in(list(errors)))
    else:
        samples = pl.DataFrame(schema={**SCHEMA, "file": pl.Int32})
    errors.update(_end_of_file_errors(samples, events, n_lines, sources, set(errors)))
    return ImbBatch(samples=samples, errors=errors)


def parse_imb_text(text: str, source: str) -> pl.DataFrame:
    """Parse the stdout of one or more IMB runs; raise ImbParseError on anything malformed.

    One text is walked line by line in Python (imb_lines): a cell's output is a few hundred
    lines, for which planning the batch executor's polars queries would cost more than reading.
    """
    return pl.DataFrame(parse_lines(text, source), schema=SCHEMA, orient="row")


def read_imb_file(path: str | Path) -> str:
    """An IMB output file as text, undecodable bytes replaced; raises OSError.

    Plain os.read: Path.read_text's buffered text layer costs more than the read itself when
    importing thousands of small files. Its newline translation is not needed: the lines are
    cut as str.splitlines() cuts them, "\\r\\n" and "\\r" included.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def parse_imb_file(path: str | Path) -> pl.DataFrame:
    """Parse one IMB output file; ``source`` is the path as given."""
    return parse_imb_text(read_imb_file(path), source=str(Path(path)))
