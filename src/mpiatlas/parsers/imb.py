"""Parse raw Intel MPI Benchmarks (IMB-MPI1, IMB-EXT, IMB-P2P) stdout into one tidy table.

The parser is a small line-driven state machine:

``OUTSIDE``  before the first IMB banner or after ``# All processes entering MPI_Finalize``;
             anything goes (``Nodes:``, ``Results:``, ``[0] MPI startup(): ...``).
``RUN``      inside a run, between tables: IMB's ``#`` comment lines.
``BLOCK``    after ``# Benchmarking <Name>``: collects ``#processes``, ``MODE`` and the
             ``-multi`` group line until the column-header line.
``TABLE``    reading data rows until the next ``#`` line.

Every table is read by its column header, so all IMB layouts map onto the same columns.
One output row per table row; ``line`` keeps the 1-based line in the file for traceability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum, auto
from pathlib import Path

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

_BANNER = re.compile(r"Intel\s?\(R\)\s+MPI\s+Benchmarks\s+(?P<version>[^,]+?)\s*(?:,|$)")
_BENCHMARKING = re.compile(r"^#\s*Benchmarking\s+(?P<name>\S+)")
_PROCESSES = re.compile(r"#processes\s*=\s*(?P<n>\d+)")
_GROUPS = re.compile(r"\(\s*(?P<groups>\d+)\s+groups\s+of\s+(?P<n>\d+)\s+processes")
_MODE = re.compile(r"^#\s*MODE:\s*(?P<mode>\S+)")
_FINALIZE = re.compile(r"^#\s*All processes entering MPI_Finalize")
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


class _State(Enum):
    OUTSIDE = auto()
    RUN = auto()
    BLOCK = auto()
    TABLE = auto()


@dataclass
class _Block:
    """What is known about the table being read."""

    benchmark: str
    processes: int | None = None
    mode: str | None = None
    columns: list[str] = field(default_factory=list)


@dataclass
class _Parser:
    source: str
    state: _State = _State.OUTSIDE
    run: int = -1
    version: str | None = None
    block: _Block | None = None
    rows: list[tuple[object, ...]] = field(default_factory=list)
    tables: int = 0

    # -- driver -----------------------------------------------------------------
    def feed(self, lineno: int, raw: str) -> None:
        line = raw.strip()
        if self._global_line(lineno, line):
            return
        if self.state is _State.BLOCK:
            self._block_line(lineno, line)
        elif self.state is _State.TABLE:
            self._table_line(lineno, line)
        elif self.state is _State.RUN and _looks_like_row(line):
            raise ImbParseError(self.source, lineno, f"data row outside a table (no column header before it): {line!r}")

    def finish(self, last_line: int) -> pl.DataFrame:
        if not self.rows:
            what = "no IMB result rows found" if self.tables else "no IMB result tables found"
            raise ImbParseError(
                self.source, last_line, f"end of file: {what} (expected '# Benchmarking <name>' followed by a table)"
            )
        return pl.DataFrame(self.rows, schema=SCHEMA, orient="row")

    # -- lines meaningful in any state -------------------------------------------
    def _global_line(self, lineno: int, line: str) -> bool:
        if banner := _BANNER.search(line):
            self.run += 1
            self.version = banner["version"]
            self.block = None
            self.state = _State.RUN
            return True
        if invalid := _INVALID.search(line):
            # IMB prints this and exits 0 after running only the valid names: the run is not what was asked.
            raise ImbParseError(
                self.source, lineno, f"IMB reported 'Invalid benchmark name {invalid['name'].strip()}': run rejected"
            )
        if bench := _BENCHMARKING.match(line):
            if self.state is _State.OUTSIDE:
                # Without the banner the IMB version, hence the Mbytes/sec unit, is unknown.
                raise ImbParseError(
                    self.source, lineno, "'# Benchmarking' outside an IMB run (no 'Intel(R) MPI Benchmarks' banner before it)"
                )
            self.block = _Block(benchmark=bench["name"])
            self.tables += 1
            self.state = _State.BLOCK
            return True
        if _FINALIZE.match(line):
            self.state = _State.OUTSIDE
            return True
        return False

    # -- BLOCK: between '# Benchmarking' and the column header -------------------
    def _block_line(self, lineno: int, line: str) -> None:
        assert self.block is not None
        if groups := _GROUPS.search(line):
            # -multi: "( G groups of N processes each ...)"; N is the size of each timed communicator.
            self.block.processes = int(groups["n"])
        elif procs := _PROCESSES.search(line):
            self.block.processes = int(procs["n"])
        elif mode := _MODE.match(line):
            self.block.mode = mode["mode"]
        elif "#repetitions" in line.split():
            self._start_table(lineno, line)
        elif _looks_like_row(line):
            raise ImbParseError(
                self.source, lineno, f"expected a column header ('#bytes #repetitions ...') before data row {line!r}"
            )

    def _start_table(self, lineno: int, line: str) -> None:
        assert self.block is not None
        tokens = line.split()
        unknown = [t for t in tokens if t not in _HEADER_TOKENS]
        if unknown:
            raise ImbParseError(self.source, lineno, f"unrecognised column(s) {unknown} in table header {line!r}")
        if self.block.processes is None:
            raise ImbParseError(
                self.source, lineno, f"expected '# #processes = N' for {self.block.benchmark} before its table header"
            )
        self.block.columns = tokens
        self.state = _State.TABLE

    # -- TABLE: data rows ----------------------------------------------------------
    def _table_line(self, lineno: int, line: str) -> None:
        if not line:
            return  # -multi tables separate sizes with blank lines
        if line.startswith("#"):
            self.state = _State.RUN  # the '#---' rule of the next block (or a new banner)
            return
        if not _looks_like_row(line):
            return  # foreign line interleaved in stdout, e.g. "[0] MPI startup(): ..."
        self.rows.append(self._parse_row(lineno, line))

    def _parse_row(self, lineno: int, line: str) -> tuple[object, ...]:
        assert self.block is not None and self.version is not None
        columns = self.block.columns
        special = _SPECIAL.search(line)
        tokens = line[: special.start()].split() if special else line.split()
        if special:
            # Failure rows carry only the leading integer columns ([Group] #bytes).
            if not tokens or len(tokens) > len(columns):
                raise ImbParseError(self.source, lineno, f"malformed {special['status']} row {line!r}")
        elif len(tokens) != len(columns):
            raise ImbParseError(
                self.source,
                lineno,
                f"expected {len(columns)} columns ({' '.join(columns)}) but found {len(tokens)}: {line!r}",
            )
        values: dict[str, float | int] = {}
        for name, token in zip(columns, tokens):
            fieldname, kind = _HEADER_TOKENS[name]
            value = _number(token, kind)
            if value is None:
                raise ImbParseError(
                    self.source, lineno, f"non-numeric value {token!r} in column {name} (expected {kind.__name__}): {line!r}"
                )
            if fieldname is not None:
                values[fieldname] = value
        return self._row(lineno, values, special["status"] if special else "ok")

    def _row(self, lineno: int, v: dict[str, float | int], status: str) -> tuple[object, ...]:
        assert self.block is not None and self.version is not None
        bandwidth = v.get("mbytes")
        if bandwidth is not None and _uses_mebibytes(self.version):
            bandwidth *= MIB_TO_MB
        t_usec = v.get("t", v.get("t_avg", v.get("t_pure")))
        return (
            self.source,
            self.run,
            self.version,
            self.block.benchmark,
            self.block.mode,
            self.block.processes,
            v.get("group"),
            v.get("bytes"),
            v.get("repetitions"),
            t_usec,
            v.get("t_min"),
            v.get("t_max"),
            v.get("t_avg"),
            bandwidth,
            v.get("msg_per_sec"),
            status,
            lineno,
        )


def _looks_like_row(line: str) -> bool:
    """A table row starts with a number (size, group or repetitions)."""
    return bool(line) and line[0].isdigit()


def _number(token: str, kind: type) -> float | int | None:
    try:
        return int(token) if kind is int else float(token)
    except ValueError:
        return None


def _uses_mebibytes(version: str) -> bool:
    """IMB 3.x/4.x print Mbytes/sec as MiB/s; the year-numbered releases (2018+) use 10^6."""
    major = re.match(r"\d+", version)
    return major is not None and int(major.group()) < 2018


def parse_imb_text(text: str, source: str) -> pl.DataFrame:
    """Parse the stdout of one or more IMB runs; raise ImbParseError on anything malformed."""
    parser = _Parser(source=source)
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        parser.feed(lineno, raw)
    return parser.finish(max(len(lines), 1))


def parse_imb_file(path: str | Path) -> pl.DataFrame:
    """Parse one IMB output file; ``source`` is the path as given."""
    path = Path(path)
    return parse_imb_text(path.read_text(encoding="utf-8", errors="replace"), source=str(path))
