"""The IMB state machine in plain Python, line by line, for ONE text: the reference executor.

Its states (``OUTSIDE``, ``RUN``, ``BLOCK``, ``TABLE``) are those :mod:`mpiatlas.parsers.imb` describes.

It parses a cell's output (a few hundred lines in about a millisecond) and, in ``mpiatlas import``,
every file the C batch scanner (:mod:`mpiatlas.parsers.imb_scan`) bails on, so every error message
comes from here. Both take their patterns, columns and row reading from
:mod:`mpiatlas.parsers.imb_shapes`; the error wording is this executor's alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import NoReturn

from mpiatlas.parsers import imb_shapes as shapes
from mpiatlas.parsers.imb_shapes import ErrorKind, ImbParseError, Layout

# Compiled from the shared patterns; each is tried only on lines holding its literal.
_BANNER = re.compile(shapes.BANNER.regex)
_INVALID = re.compile(shapes.INVALID)
_BENCHMARKING = re.compile(shapes.BENCHMARKING.regex)
_FINALIZE = re.compile(shapes.FINALIZE.regex)
_GROUPS = re.compile(shapes.GROUPS.regex)
_PROCESSES = re.compile(shapes.PROCESSES.regex)
_MODE = re.compile(shapes.MODE.regex)
_HEADER = re.compile(shapes.HEADER.regex)


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
    layout: Layout | None = None


@dataclass
class _Parser:
    source: str
    state: _State = _State.OUTSIDE
    run: int = -1
    version: str | None = None
    block: _Block | None = None
    rows: list[tuple[object, ...]] = field(default_factory=list)
    tables: int = 0
    any_invalid: bool = True  # False: no line can hold IMB's "Invalid benchmark name" (spares a search per line)

    def feed(self, lineno: int, raw: str) -> None:
        line = raw.strip()
        if self._global_line(lineno, line):
            return
        if self.state is _State.BLOCK:
            self._block_line(lineno, line)
        elif self.state is _State.TABLE:
            self._table_line(lineno, line)
        elif self.state is _State.RUN and shapes.looks_like_row(line):
            self._fail(lineno, ErrorKind.ROW_IN_RUN, line)

    def _fail(self, lineno: int, kind: ErrorKind, line: str) -> NoReturn:
        block = self.block
        message = shapes.message(kind, line, block.benchmark if block else None, block.layout if block else None)
        raise ImbParseError(self.source, lineno, message)

    # -- lines meaningful in any state ------------------------------------------------------------
    def _global_line(self, lineno: int, line: str) -> bool:
        if shapes.BANNER.literal in line and (banner := _BANNER.search(line)):
            self.run += 1
            self.version = banner[1]
            self.block = None
            self.state = _State.RUN
            return True
        if self.any_invalid and _INVALID.search(line):
            self._fail(lineno, ErrorKind.INVALID, line)
        if shapes.BENCHMARKING.literal in line and (bench := _BENCHMARKING.match(line)):
            if self.state is _State.OUTSIDE:
                self._fail(lineno, ErrorKind.OUTSIDE_RUN, line)
            self.block = _Block(benchmark=bench[1])
            self.tables += 1
            self.state = _State.BLOCK
            return True
        if shapes.FINALIZE.literal in line and _FINALIZE.match(line):
            self.state = _State.OUTSIDE
            return True
        return False

    # -- BLOCK: between '# Benchmarking' and the column header ------------------------------------
    def _block_line(self, lineno: int, line: str) -> None:
        assert self.block is not None
        if ((count := self._count(_GROUPS, shapes.GROUPS.literal, line)) is not None
                or (count := self._count(_PROCESSES, shapes.PROCESSES.literal, line)) is not None):
            self.block.processes = count
        elif shapes.MODE.literal in line and (mode := _MODE.match(line)):
            self.block.mode = mode[1]
        elif shapes.HEADER.literal in line and _HEADER.search(line):
            self._start_table(lineno, line)
        elif shapes.looks_like_row(line):
            self._fail(lineno, ErrorKind.ROW_IN_BLOCK, line)

    @staticmethod
    def _count(pattern: re.Pattern[str], literal: str, line: str) -> int | None:
        """The process count a '-multi' group line or '#processes' line gives, else None."""
        match = pattern.search(line) if literal in line else None
        return shapes.process_count(match[1]) if match else None

    def _start_table(self, lineno: int, line: str) -> None:
        assert self.block is not None
        self.block.layout = Layout.of(line)
        if self.block.layout.unknown or self.block.processes is None:
            self._fail(lineno, ErrorKind.HEADER, line)
        self.state = _State.TABLE

    # -- TABLE: data rows -------------------------------------------------------------------------
    def _table_line(self, lineno: int, line: str) -> None:
        if line.startswith("#"):
            self.state = _State.RUN  # the '#---' rule of the next block (or a new banner)
        elif shapes.looks_like_row(line):  # else: blank (-multi) or foreign ("[0] MPI startup(): ...")
            self.rows.append(self._row(lineno, line))

    def _row(self, lineno: int, line: str) -> tuple[object, ...]:
        block = self.block
        assert block is not None and block.layout is not None
        v, status = shapes.parse_row(self.source, lineno, line, block.layout.columns)
        bandwidth = v.get("mbytes")
        if bandwidth is not None and shapes.uses_mebibytes(self.version):
            bandwidth *= shapes.MIB_TO_MB
        t_usec = next((v[f] for f in shapes.T_USEC_FIELDS if f in v), None)
        return (
            self.source, self.run, self.version, block.benchmark, block.mode, block.processes,
            v.get("group"), v.get("bytes"), v.get("repetitions"), t_usec,
            v.get("t_min"), v.get("t_max"), v.get("t_avg"), bandwidth, v.get("msg_per_sec"),
            status, lineno,
        )  # fmt: skip


def parse_lines(text: str, source: str) -> list[tuple[object, ...]]:
    """The rows of one IMB text, as tuples in :data:`~mpiatlas.parsers.imb_shapes.COLUMNS` order;
    raises ImbParseError at the first malformed line (or at the end, if there is no row)."""
    parser = _Parser(source=source, any_invalid=_INVALID.search(text) is not None)
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        parser.feed(lineno, raw)
    if not parser.rows:
        raise ImbParseError(source, max(len(lines), 1), shapes.end_of_file_message(parser.tables > 0))
    return parser.rows
