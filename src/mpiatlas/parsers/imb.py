"""Parse raw Intel MPI Benchmarks (IMB-MPI1, IMB-EXT, IMB-P2P) stdout into one tidy table.

IMB output is read as a state machine over lines:

``OUTSIDE``  before the first IMB banner or after ``# All processes entering MPI_Finalize``;
             anything goes (``Nodes:``, ``Results:``, ``[0] MPI startup(): ...``).
``RUN``      inside a run, between tables: IMB's ``#`` comment lines.
``BLOCK``    after ``# Benchmarking <Name>``: collects ``#processes``, ``MODE`` and the
             ``-multi`` group line until the column-header line.
``TABLE``    reading data rows until the next ``#`` line.

Two executors run it, both with the patterns, columns, row reading and error wording of
:mod:`mpiatlas.parsers.imb_shapes`:

* the Python lines executor (:mod:`mpiatlas.parsers.imb_lines`) walks one text line by line: the
  reference, a campaign's check of one cell's output (:func:`parse_imb_text`), and every file the
  C scanner bails on;
* the C batch scanner (``imbscan.c`` via :mod:`mpiatlas.parsers.imb_scan`) reads many files at once
  for ``mpiatlas import``; it takes the happy path only (printable ASCII, no error, number shapes
  whose value it can prove equal) and bails on anything else, so every error still comes from
  the lines executor.

Every table is read by its column header, so all IMB layouts map onto the same columns. One
output row per table row; ``line`` keeps the 1-based line in the file for traceability. Errors
name ``file:line``; the first error of a file wins.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from mpiatlas.parsers.imb_lines import parse_lines
from mpiatlas.parsers.imb_shapes import COLUMN_TYPES, COLUMNS, MIB_TO_MB, ImbParseError

SCHEMA: dict[str, pl.DataType] = {name: getattr(pl, dtype)() for name, dtype in COLUMN_TYPES.items()}

__all__ = ["COLUMNS", "MIB_TO_MB", "SCHEMA", "ImbParseError", "parse_imb_file", "parse_imb_text", "read_imb_file"]


def parse_imb_text(text: str, source: str) -> pl.DataFrame:
    """Parse the stdout of one or more IMB runs; raise ImbParseError on anything malformed.

    One text is walked line by line in Python (imb_lines): a cell's output is a few hundred
    lines, read in about a millisecond.
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
