"""The one definition of IMB output's shapes, shared by both IMB executors.

Two executors read IMB stdout with these rules and must give identical rows
(tests/test_imb_executors.py checks them on every capture of the shared datasets and on damaged
variants):

* :mod:`mpiatlas.parsers.imb_lines` walks the lines of ONE text in plain Python: the reference, a
  running campaign's check of one cell's output, and every file the C scanner bails on; it words
  every error;
* ``imbscan.c`` (loaded by :mod:`mpiatlas.parsers.imb_scan`) scans many files in C for
  ``mpiatlas import``, the happy path only: it implements these patterns on printable ASCII and
  bails on anything else (an error, a line or number shape it cannot prove it reads alike).

The C scanner takes its tables from here: imb_scan generates its header (the column tokens and
their fields, the failure words, the status codes, the MiB rule, the integer ranges, the order
of the t_usec fields) from this module when it builds the scanner, so a change to these tables is
made here alone. The line patterns' *grammar* is hand-written in C; the header carries their
fingerprint and ``imbscan.c`` refuses to compile against another, so a pattern changed here alone
sends every file through the Python executor (slower, never wrong) until the C matchers follow.

Here: the output schema, the line patterns (the state machine's events), the column-header
tokens and what they feed, the reading of one table row, the MiB rule and the error wording.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

# The output columns and their polars dtypes, by name: this module stays free of polars, so that
# checking one cell's output (imb_lines) does not pay for importing it.
COLUMN_TYPES: dict[str, str] = {
    "source": "String",
    "run": "Int32",
    "imb_version": "String",
    "benchmark": "String",
    "mode": "String",
    "processes": "Int32",
    "group": "Int32",
    "bytes": "Int64",
    "repetitions": "Int64",
    "t_usec": "Float64",
    "t_min_usec": "Float64",
    "t_max_usec": "Float64",
    "t_avg_usec": "Float64",
    "bandwidth_MBps": "Float64",
    "msg_per_sec": "Float64",
    "status": "String",
    "line": "Int32",
}
COLUMNS: list[str] = list(COLUMN_TYPES)

# IMB before 2018 divides by 2^20 for "Mbytes/sec"; 2018 and later by 10^6.
MIB_TO_MB = 1_048_576 / 1_000_000
METRIC_SINCE = 2018

# -- line patterns -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinePattern:
    """A line pattern in Python regex syntax, for the *unstripped* line (a leading ``\\s*`` stands
    for the line's str.strip(), so it matches a stripped line alike; unanchored ones are searches),
    and a literal every match contains: a cheap pre-test (most lines are rows or comments)."""

    regex: str
    literal: str


BANNER = LinePattern(r"Intel\s?\(R\)\s+MPI\s+Benchmarks\s+([^,]+?)\s*(?:,|$)", "Benchmarks")  # group 1: version
BENCHMARKING = LinePattern(r"^\s*#\s*Benchmarking\s+(\S+)", "Benchmarking")  # group 1: the benchmark
FINALIZE = LinePattern(r"^\s*#\s*All processes entering MPI_Finalize", "All processes entering MPI_Finalize")
GROUPS = LinePattern(r"\(\s*\d+\s+groups\s+of\s+(\d+)\s+processes", "groups")  # -multi: group 1 = group size
PROCESSES = LinePattern(r"#processes\s*=\s*(\d+)", "#processes")
MODE = LinePattern(r"^\s*#\s*MODE:\s*(\S+)", "MODE:")
HEADER = LinePattern(r"(?:^|\s)#repetitions(?:\s|$)", "#repetitions")  # a column header: the token "#repetitions"
# Case-insensitive: no literal pre-test (its case forms include the Kelvin sign and dotless i).
INVALID = r"(?i)Invalid benchmark name"

# The name in IMB's complaint, for the error message.
_INVALID_NAME = re.compile(r"Invalid benchmark name\s*(?P<name>.*)", re.IGNORECASE)
# IMB's own failure rows: "<size> out-of-mem.; needed X=...", "<size> time-out.; ...".
SPECIAL_WORDS = ("time-out", "out-of-mem", "int-overflow")
SPECIAL_TEMPLATE = r"\b(?P<status>{words})\."
SPECIAL = re.compile(SPECIAL_TEMPLATE.format(words="|".join(map(re.escape, SPECIAL_WORDS))))
# A row's status: "ok", else its failure word.
STATUSES = ("ok", *SPECIAL_WORDS)
# Every failure word holds it: a cheap pre-test, almost no row holds it.
SPECIAL_LITERAL = "-o"

# -- table columns -------------------------------------------------------------------------------

# Column-header token -> (field, kind).  Fields with a None name are read and dropped.
HEADER_TOKENS: dict[str, tuple[str | None, type]] = {
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
# The largest value of each integer field's column type (a wider number is an error, not a crash).
INT_MAX = {"group": 2**31 - 1, "bytes": 2**63 - 1, "repetitions": 2**63 - 1}
# t_usec is the first of these a table has (point-to-point t, collectives' average, overlap's pure).
T_USEC_FIELDS = ("t", "t_avg", "t_pure")


class ImbParseError(ValueError):
    """Raised when IMB output cannot be parsed; the message is ``<file>:<line>: <what>``."""

    def __init__(self, source: str, line: int, what: str) -> None:
        super().__init__(f"{source}:{line}: {what}")
        self.source = source
        self.line = line
        self.what = what


@dataclass(frozen=True)
class Layout:
    """A table's column header: its tokens, and those that are no known IMB column."""

    columns: tuple[str, ...]
    unknown: tuple[str, ...]

    @classmethod
    def of(cls, header: str) -> Layout:
        tokens = tuple(header.split())
        return cls(tokens, tuple(t for t in tokens if t not in HEADER_TOKENS))


def looks_like_row(stripped: str) -> bool:
    """A table row starts with a number (size, group or repetitions); str.isdigit(), as always."""
    return stripped[:1].isdigit()


def parse_row(source: str, lineno: int, line: str, columns: Sequence[str]) -> tuple[dict[str, float | int], str]:
    """One stripped table row: (values by field, status); raises ImbParseError naming the line."""
    special = SPECIAL.search(line) if SPECIAL_LITERAL in line else None
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
        fieldname, kind = HEADER_TOKENS[name]
        try:
            value = kind(token)  # int() or float(): Python's reading of a number is the reference
        except ValueError:
            raise ImbParseError(
                source, lineno, f"non-numeric value {token!r} in column {name} (expected {kind.__name__}): {line!r}"
            ) from None
        if fieldname is not None:
            if kind is int and not -INT_MAX[fieldname] - 1 <= value <= INT_MAX[fieldname]:
                what = f"value {token!r} in column {name} out of range (at most {INT_MAX[fieldname]}): {line!r}"
                raise ImbParseError(source, lineno, what)
            values[fieldname] = value
    return values, special["status"] if special else "ok"


def process_count(digits: str) -> int | None:
    """The count a ``#processes`` / ``-multi`` group line gives, None if too large for a count (the
    line then is no count line: a garbled number must not become the table's process count)."""
    value = int(digits)
    return value if value <= INT_MAX["group"] else None


def uses_mebibytes(version: str | None) -> bool:
    """IMB 3.x/4.x print Mbytes/sec as MiB/s; the year-numbered releases (2018+) use 10^6."""
    major = re.match(r"\d+", version or "")
    return major is not None and int(major.group()) < METRIC_SINCE


# -- errors --------------------------------------------------------------------------------------


class ErrorKind(IntEnum):
    """Errors found by the state machine (row errors come from :func:`parse_row`)."""

    INVALID = 1
    OUTSIDE_RUN = 2
    HEADER = 3
    ROW_IN_BLOCK = 4
    ROW_IN_RUN = 5


def message(kind: int, line: str, benchmark: str | None, layout: Layout | None) -> str:
    """What went wrong on ``line`` (of the given kind), for the ImbParseError."""
    stripped = line.strip()
    if kind == ErrorKind.INVALID:
        match = _INVALID_NAME.search(stripped)
        name = match["name"].strip() if match else ""
        # IMB prints this and exits 0 after running only the valid names: the run is not what was asked.
        return f"IMB reported 'Invalid benchmark name {name}': run rejected"
    if kind == ErrorKind.OUTSIDE_RUN:
        # Without the banner the IMB version, hence the Mbytes/sec unit, is unknown.
        return "'# Benchmarking' outside an IMB run (no 'Intel(R) MPI Benchmarks' banner before it)"
    if kind == ErrorKind.HEADER:
        assert layout is not None
        if layout.unknown:
            return f"unrecognised column(s) {list(layout.unknown)} in table header {stripped!r}"
        return f"expected '# #processes = N' for {benchmark} before its table header"
    if kind == ErrorKind.ROW_IN_BLOCK:
        return f"expected a column header ('#bytes #repetitions ...') before data row {stripped!r}"
    return f"data row outside a table (no column header before it): {stripped!r}"


def end_of_file_message(had_tables: bool) -> str:
    what = "no IMB result rows found" if had_tables else "no IMB result tables found"
    return f"end of file: {what} (expected '# Benchmarking <name>' followed by a table)"
