"""Parse raw Intel MPI Benchmarks (IMB-MPI1, IMB-EXT, IMB-P2P) stdout into one tidy table.

IMB output is read as a state machine over lines:

``OUTSIDE``  before the first IMB banner or after ``# All processes entering MPI_Finalize``;
             anything goes (``Nodes:``, ``Results:``, ``[0] MPI startup(): ...``).
``RUN``      inside a run, between tables: IMB's ``#`` comment lines.
``BLOCK``    after ``# Benchmarking <Name>``: collects ``#processes``, ``MODE`` and the
             ``-multi`` group line until the column-header line.
``TABLE``    reading data rows until the next ``#`` line.

The machine is evaluated with polars over the lines of many files at once instead of a Python
loop per line (a million rows import in about a second). The states follow from a few events:
the *global* lines (banner, ``# Benchmarking``, finalize) start a segment whose kind is the
state after them; inside a ``# Benchmarking`` segment the first column header ends BLOCK and
the first ``#`` line after it ends TABLE. Cumulative sums and forward fills give every line its
state, then all table rows are split and converted column by column, one header layout at a time.

Only rows the vectorised path cannot take as they stand (IMB's ``time-out.``/``out-of-mem.``
rows, a wrong column count, a token polars does not read as the column's number, unusual
whitespace) go through :func:`_parse_row`, the per-row logic of the former line parser, so they
get exactly its values or its error. Every table is read by its column header, so all IMB
layouts map onto the same columns. One output row per table row; ``line`` keeps the 1-based
line in the file for traceability. The first error of a file wins, as in a line-by-line read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np
import polars as pl

SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "run": pl.Int32(),
    "imb_version": pl.String(),
    "benchmark": pl.String(),
    "mode": pl.String(),
    "processes": pl.Int32(),
    "group": pl.Int32(),
    "bytes": pl.Int64(),
    "repetitions": pl.Int64(),
    "t_usec": pl.Float64(),
    "t_min_usec": pl.Float64(),
    "t_max_usec": pl.Float64(),
    "t_avg_usec": pl.Float64(),
    "bandwidth_MBps": pl.Float64(),
    "msg_per_sec": pl.Float64(),
    "status": pl.String(),
    "line": pl.Int32(),
}
COLUMNS: list[str] = list(SCHEMA)

# IMB before 2018 divides by 2^20 for "Mbytes/sec"; 2018 and later by 10^6.
MIB_TO_MB = 1_048_576 / 1_000_000

# Column-header token -> (field, kind).  Fields with a None name are read and dropped.
_HEADER_TOKENS: dict[str, tuple[str | None, type]] = {
    "Group": ("group", int),
    "#bytes": ("bytes", int),
    "#repetitions": ("repetitions", int),
    "t[usec]": ("t", float),
    "t_min[usec]": ("t_min", float),
    "t_max[usec]": ("t_max", float),
    "t_avg[usec]": ("t_avg", float),
    "Mbytes/sec": ("mbytes", float),
    "Msg/sec": ("msg_per_sec", float),
    # IMB-NBC / IMB-RMA overlap tables: t_pure is the blocking-equivalent time.
    "t_pure[usec]": ("t_pure", float),
    "t_ovrl[usec]": (None, float),
    "t_CPU[usec]": (None, float),
    "overlap[%]": (None, float),
    # IMB built with -DCHECK adds a defects column.
    "defects": (None, float),
}
# The values a row yields, in the order of the output columns they feed.
_FIELDS: dict[str, pl.DataType] = {
    "group": pl.Int32(), "bytes": pl.Int64(), "repetitions": pl.Int64(), "t": pl.Float64(),
    "t_min": pl.Float64(), "t_max": pl.Float64(), "t_avg": pl.Float64(), "t_pure": pl.Float64(),
    "mbytes": pl.Float64(), "msg_per_sec": pl.Float64(),
}  # fmt: skip


def _rx(pattern: str) -> str:
    """A line pattern for polars (Rust regex) with Python's meaning of whitespace.

    Python's ``\\s`` and str.strip() take every str.isspace() character, Rust's ``\\s`` all of them
    but ``\\x1f``: add it, so both engines cut tokens and lines alike.
    """
    return re.sub(r"\\[sS]", lambda m: r"[\s\x1f]" if m.group() == r"\s" else r"[^\s\x1f]", pattern)


# The line patterns, run on the unstripped line: a leading ``\s*`` stands for the str.strip()
# of a line-by-line reader; unanchored patterns are searches.
_RX_BANNER = _rx(r"Intel\s?\(R\)\s+MPI\s+Benchmarks\s+([^,]+?)\s*(?:,|$)")
_RX_INVALID = r"(?i)Invalid benchmark name"
_RX_BENCHMARKING = _rx(r"^\s*#\s*Benchmarking\s+(\S+)")
_RX_FINALIZE = _rx(r"^\s*#\s*All processes entering MPI_Finalize")
_RX_GROUPS = _rx(r"\(\s*\d+\s+groups\s+of\s+(\d+)\s+processes")
_RX_PROCESSES = _rx(r"#processes\s*=\s*(\d+)")
_RX_MODE = _rx(r"^\s*#\s*MODE:\s*(\S+)")
_RX_HEADER = _rx(r"(?:^|\s)#repetitions(?:\s|$)")
# Any line one of the above may match: the few lines whose details are worth extracting.
_RX_MARK = _rx(
    r"Intel\s?\(R\)\s+MPI\s+Benchmarks|(?i:Invalid benchmark name)|^\s*#\s*(?:Benchmarking|All processes|MODE:)"
    r"|groups\s+of|#processes|#repetitions"
)
# A table row starts with a digit (size, group or repetitions): str.isdigit(), which is 0-9 in
# ASCII; a line starting with another character is checked by Python.
_RX_ROW = _rx(r"^\s*[0-9]")
_RX_NON_ASCII_START = _rx(r"^\s*[^\x00-\x7f]")
_RX_HASH = _rx(r"^\s*#")
# Line breaks of str.splitlines() other than "\n": such texts are split by Python first.
_RX_OTHER_BREAKS = "[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"

# Python patterns for the error messages and the per-row fallback.
_INVALID = re.compile(r"Invalid benchmark name\s*(?P<name>.*)", re.IGNORECASE)
# IMB's own failure rows: "<size> out-of-mem.; needed X=...", "<size> time-out.; ...".
_SPECIAL = re.compile(r"\b(?P<status>time-out|out-of-mem|int-overflow)\.")


class ImbParseError(ValueError):
    """Raised when IMB output cannot be parsed; the message is ``<file>:<line>: <what>``."""

    def __init__(self, source: str, line: int, what: str) -> None:
        super().__init__(f"{source}:{line}: {what}")
        self.source = source
        self.line = line
        self.what = what


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


class _Error(IntEnum):
    """Error kinds, formatted by :func:`_message` for the first one of each file."""

    INVALID = 1
    OUTSIDE_RUN = 2
    HEADER = 3
    ROW_IN_BLOCK = 4
    ROW_IN_RUN = 5


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
    """Digit strings as Int32; Python's int() for what polars does not read (non-ASCII digits)."""
    value = digits.cast(pl.Int32, strict=False)
    unread = value.is_null() & digits.is_not_null()
    if unread.any():
        value = pl.Series(digits.name, [int(d) if d is not None else None for d in digits.to_list()], dtype=pl.Int32)
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
    is_banner = pl.col("kind") == _Kind.BANNER
    resets = pl.col("kind").is_in(_GLOBAL_KINDS)
    return marks.with_columns(
        (is_banner.cast(pl.Int32).cum_sum().over("file") - 1).alias("run"),
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
    line = pl.col("line")
    events = lines.select(
        "idx", "file", "lineno",
        line.str.contains(_RX_ROW).alias("is_row"),
        line.str.contains(_RX_HASH).alias("is_hash"),
        line.str.contains(_RX_NON_ASCII_START).alias("non_ascii"),
        pl.Series("kind", kind),
    )  # fmt: skip
    if events["non_ascii"].any():
        # str.isdigit() knows digits beyond 0-9 (Arabic-Indic, superscripts): ask it.
        rare = events.filter("non_ascii")
        digit = [text.strip()[:1].isdigit() for text in lines["line"].gather(rare["idx"]).to_list()]
        events = events.update(rare.select("idx", pl.Series("is_row", digit, dtype=pl.Boolean)), on="idx")
    events = events.drop("non_ascii").filter(pl.col("is_row") | pl.col("is_hash") | (pl.col("kind") != _Kind.OTHER))

    k = pl.col("kind")
    file_start = pl.col("file") != pl.col("file").shift(1, fill_value=-1)
    is_global = k.is_in(_GLOBAL_KINDS)
    events = events.with_columns(
        file_start.alias("file_start"),
        (is_global | file_start).alias("seg_start"),
    ).with_columns(
        pl.col("seg_start").cum_sum().alias("seg"),
        pl.when(is_global).then(k).when("file_start").then(pl.lit(_Kind.OTHER, pl.Int8)).forward_fill().alias("seg_kind"),
    )
    # BLOCK until the segment's first column header, TABLE from there to the first '#' line.
    in_bench = pl.col("seg_kind") == _Kind.BENCHMARKING
    events = events.with_columns(
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
    return events.drop("_headers", "_headers_in_seg", "_hashes", "file_start")


def _errors_of_states(events: pl.DataFrame) -> pl.DataFrame:
    """Line-level errors the states alone reveal: ``file``, ``lineno``, ``idx``, ``seg``, ``error``."""
    k = pl.col("kind")
    plain_row = pl.col("is_row") & (k == _Kind.OTHER)
    error = (
        pl.when(k == _Kind.INVALID).then(_Error.INVALID)
        .when((k == _Kind.BENCHMARKING) & pl.col("state_before").is_in([_Kind.OTHER, _Kind.FINALIZE])).then(_Error.OUTSIDE_RUN)
        .when(plain_row & pl.col("in_block")).then(_Error.ROW_IN_BLOCK)
        .when(pl.col("is_row") & ~k.is_in(_FIRST_KINDS)
              & ((pl.col("seg_kind") == _Kind.BANNER) | (pl.col("after_header") & ~pl.col("in_table")))).then(_Error.ROW_IN_RUN)
    )  # fmt: skip
    return events.select("file", "lineno", "idx", "seg", error.alias("error")).filter(pl.col("error").is_not_null())


# -- tables --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    columns: tuple[str, ...]
    unknown: tuple[str, ...]


def _blocks(events: pl.DataFrame, marks: pl.DataFrame) -> tuple[pl.DataFrame, list[_Layout]]:
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
    layouts = [_Layout(tuple(t.split()), tuple(tok for tok in t.split() if tok not in _HEADER_TOKENS)) for t in texts]
    ids = pl.DataFrame({"header_text": pl.Series(texts, dtype=pl.String), "layout": pl.int_range(len(texts), dtype=pl.Int32, eager=True)})
    blocks = headers.join(ids, on="header_text").join(bench.drop("idx"), on="seg")
    return blocks, layouts


def _squeeze_spaces(text: pl.Expr) -> pl.Expr:
    """Runs of spaces to one space by literal replaces (much faster than a regex); a longer run
    than this folds leaves "" tokens, which fail the numeric check and take the exact fallback."""
    for run in ("        ", "    ", "  ", "  "):
        text = text.str.replace_all(run, " ", literal=True)
    return text


def _read_layout(rows: pl.DataFrame, layout: _Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows of one layout -> (rows read as numbers, rows left to :func:`_parse_row`)."""
    columns = rows.columns
    # Split once: eager with_columns would not share a sub-expression between columns.
    rows = rows.with_columns(_squeeze_spaces(pl.col("text").str.strip_chars()).str.split(" ").alias("_tokens"))
    tokens = pl.col("_tokens")
    values: dict[str, pl.Expr] = {}
    read = tokens.list.len() == len(layout.columns)
    for position, name in enumerate(layout.columns):
        field, kind = _HEADER_TOKENS[name]
        dtype = pl.Int64 if kind is int else pl.Float64
        value = tokens.list.get(position, null_on_oob=True).cast(dtype, strict=False)
        read = read & value.is_not_null()
        if field is not None:
            values[field] = value.cast(_FIELDS[field]).alias(field)  # a repeated column: the last one
    out = rows.with_columns(*values.values(), read.alias("_read")).drop("_tokens")
    return out.filter("_read").drop("_read", "text"), out.filter(~pl.col("_read")).select(columns)


def _parse_row(source: str, lineno: int, line: str, columns: Sequence[str]) -> tuple[dict[str, float | int], str]:
    """One stripped table row the way the line-by-line parser read it: (values, status)."""
    special = _SPECIAL.search(line)
    tokens = line[: special.start()].split() if special else line.split()
    if special:
        # Failure rows carry only the leading integer columns ([Group] #bytes).
        if not tokens or len(tokens) > len(columns):
            raise ImbParseError(source, lineno, f"malformed {special['status']} row {line!r}")
    elif len(tokens) != len(columns):
        raise ImbParseError(
            source, lineno, f"expected {len(columns)} columns ({' '.join(columns)}) but found {len(tokens)}: {line!r}"
        )
    values: dict[str, float | int] = {}
    for name, token in zip(columns, tokens):
        fieldname, kind = _HEADER_TOKENS[name]
        value = _number(token, kind)
        if value is None:
            raise ImbParseError(
                source, lineno, f"non-numeric value {token!r} in column {name} (expected {kind.__name__}): {line!r}"
            )
        if fieldname is not None:
            values[fieldname] = value
    return values, special["status"] if special else "ok"


def _number(token: str, kind: type) -> float | int | None:
    try:
        return int(token) if kind is int else float(token)
    except ValueError:
        return None


def _read_rows(
    rows: pl.DataFrame, layouts: list[_Layout], sources: Sequence[str]
) -> tuple[pl.DataFrame, list[tuple[int, ImbParseError]]]:
    """Values of every table row (``idx`` + fields + ``status``) and the (file, error) of broken rows."""
    frames: list[pl.DataFrame] = []
    errors: list[tuple[int, ImbParseError]] = []
    for (layout_id,), part in rows.partition_by("layout", as_dict=True, include_key=False).items():
        layout = layouts[layout_id]
        if layout.unknown:
            continue  # the header itself is the (earlier) error
        read, rest = _read_layout(part, layout)
        frames.append(read.with_columns(pl.lit("ok").alias("status")))
        slow: list[dict[str, object]] = []
        for idx, file, lineno, text in rest.select("idx", "file", "lineno", "text").iter_rows():
            try:
                values, status = _parse_row(sources[file], lineno, text.strip(), layout.columns)
            except ImbParseError as exc:
                errors.append((file, exc))
                continue
            slow.append({"idx": idx, **values, "status": status})
        if slow:
            schema = {"idx": pl.UInt32, **_FIELDS, "status": pl.String}
            frames.append(rest.drop("text").join(pl.DataFrame(slow, schema=schema, orient="row"), on="idx"))
    if not frames:
        return pl.DataFrame(), errors
    return pl.concat(frames, how="diagonal_relaxed").sort("idx"), errors


def _tidy(values: pl.DataFrame, sources: Sequence[str]) -> pl.DataFrame:
    """Rows in the output :data:`SCHEMA` (plus ``file``)."""
    for field, dtype in _FIELDS.items():
        if field not in values.columns:
            values = values.with_columns(pl.lit(None, dtype=dtype).alias(field))
    # IMB 3.x/4.x print Mbytes/sec as MiB/s; the year-numbered releases (2018+) use 10^6.
    mebibytes = pl.col("version").str.extract(r"^(\d+)", 1).cast(pl.Int64, strict=False) < 2018
    return values.select(
        pl.Series("source", sources, dtype=pl.String).gather(values["file"]),
        pl.col("run"),
        pl.col("version").alias("imb_version"),
        "benchmark", "mode", "processes", "group", "bytes", "repetitions",
        pl.coalesce("t", "t_avg", "t_pure").alias("t_usec"),
        pl.col("t_min").alias("t_min_usec"),
        pl.col("t_max").alias("t_max_usec"),
        pl.col("t_avg").alias("t_avg_usec"),
        pl.when(mebibytes.fill_null(False)).then(pl.col("mbytes") * MIB_TO_MB).otherwise("mbytes").alias("bandwidth_MBps"),
        "msg_per_sec", "status",
        pl.col("lineno").alias("line"),
        "file",
    ).cast({k: v for k, v in SCHEMA.items()})  # fmt: skip


# -- errors --------------------------------------------------------------------------------------


def _message(code: int, line: str, benchmark: str | None, layout: _Layout | None) -> str:
    stripped = line.strip()
    if code == _Error.INVALID:
        match = _INVALID.search(stripped)
        name = match["name"].strip() if match else ""
        # IMB prints this and exits 0 after running only the valid names: the run is not what was asked.
        return f"IMB reported 'Invalid benchmark name {name}': run rejected"
    if code == _Error.OUTSIDE_RUN:
        # Without the banner the IMB version, hence the Mbytes/sec unit, is unknown.
        return "'# Benchmarking' outside an IMB run (no 'Intel(R) MPI Benchmarks' banner before it)"
    if code == _Error.HEADER:
        assert layout is not None
        if layout.unknown:
            return f"unrecognised column(s) {list(layout.unknown)} in table header {stripped!r}"
        return f"expected '# #processes = N' for {benchmark} before its table header"
    if code == _Error.ROW_IN_BLOCK:
        return f"expected a column header ('#bytes #repetitions ...') before data row {stripped!r}"
    return f"data row outside a table (no column header before it): {stripped!r}"


def _first_errors(
    candidates: pl.DataFrame, row_errors: list[tuple[int, ImbParseError]], lines: pl.DataFrame, sources: Sequence[str],
    blocks: pl.DataFrame, layouts: list[_Layout],
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
    for (file, lineno, _idx, _seg, code, benchmark, layout_id), text in zip(earliest.iter_rows(), texts):
        if file in first and first[file].line < lineno:
            continue
        layout = layouts[layout_id] if layout_id is not None else None
        first[file] = ImbParseError(sources[file], lineno, _message(code, text, benchmark, layout))
    return first


def _end_of_file_errors(
    samples: pl.DataFrame, events: pl.DataFrame, n_lines: pl.Series, sources: Sequence[str], failed: set[int]
) -> dict[int, ImbParseError]:
    with_rows = set(samples["file"].unique().to_list()) if samples.height else set()
    tables = dict(events.filter(pl.col("kind") == _Kind.BENCHMARKING).group_by("file").len().iter_rows())
    errors: dict[int, ImbParseError] = {}
    for file, source in enumerate(sources):
        if file in with_rows or file in failed:
            continue
        what = "no IMB result rows found" if tables.get(file) else "no IMB result tables found"
        errors[file] = ImbParseError(
            source, max(int(n_lines[file]), 1), f"end of file: {what} (expected '# Benchmarking <name>' followed by a table)"
        )
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
             pl.lit(_Error.HEADER, pl.Int32).alias("error"))  # fmt: skip
    candidates = pl.concat([_errors_of_states(events).cast({"error": pl.Int32}), header_errors], how="vertical_relaxed")

    table_rows = events.filter(
        pl.col("is_row") & pl.col("in_table") & ~pl.col("kind").is_in(_FIRST_KINDS)
    ).select("idx", "file", "lineno", "seg")
    table_rows = table_rows.join(blocks.drop("file"), on="seg")
    table_rows = table_rows.with_columns(lines["line"].gather(table_rows["idx"]).alias("text"))
    values, row_errors = _read_rows(table_rows, layouts, sources)

    errors = _first_errors(candidates, row_errors, lines, sources, blocks, layouts)
    samples = _tidy(values, sources).filter(~pl.col("file").is_in(list(errors))) if values.height else values
    if not values.height:
        samples = pl.DataFrame(schema={**SCHEMA, "file": pl.Int32})
    errors.update(_end_of_file_errors(samples, events, n_lines, sources, set(errors)))
    return ImbBatch(samples=samples, errors=errors)


def parse_imb_text(text: str, source: str) -> pl.DataFrame:
    """Parse the stdout of one or more IMB runs; raise ImbParseError on anything malformed."""
    batch = parse_imb_texts([(source, text)])
    if batch.errors:
        raise batch.errors[0]
    return batch.samples.drop("file")


def read_imb_file(path: str | Path) -> str:
    """An IMB output file as text: undecodable bytes replaced, newlines as Python's text mode reads them."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def parse_imb_file(path: str | Path) -> pl.DataFrame:
    """Parse one IMB output file; ``source`` is the path as given."""
    return parse_imb_text(read_imb_file(path), source=str(Path(path)))
