"""Parse the stdout of the mpiatlas C kernels (``src/kernels``; which kernels there are is the program
registry's business, mpiatlas.programs: this parser reads any kernel that prints its ``# kernel:`` header).

A kernel's stdout is OSU-shaped:

* a ``#`` header printed by rank 0: ``# kernel: ring`` opens a run, then one
  ``# key: value`` line per parameter (``mpi_library``, ``nprocs``, ``iterations``...);
  other ``#`` lines (the title) are comments;
* JSON lines, one object per rank per record, printed by rank 0 in rank order. Each
  carries ``kernel``, ``rank``, ``size``, ``host``, ``cpu`` and the measurements.

Anything else (e.g. Intel MPI's ``[0] MPI startup(): ...`` lines under ``I_MPI_DEBUG``) is
launcher/library noise and is skipped. Several runs may be concatenated in one text.

``parse_kernel_output`` returns one tidy polars DataFrame per kernel: one row per rank per
record, with the run's header parameters as extra columns (a record's own key wins over a
header key of the same name, e.g. ``procdims`` as a list), plus ``source``, ``run`` (0-based
index of the run in the text), ``record`` (0-based index of the rank's record within the
run) and ``line`` (1-based line in the text). Rows with ``"valid": false`` are kept.

Header values are text: an all-digit value becomes an integer, ``true``/``false`` a
boolean, everything else (``"2,2,1"``, ``"4.1"``, library strings) stays a string.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
from polars.datatypes import DataTypeClass

REQUIRED_KEYS: dict[str, type] = {
    "kernel": str,
    "rank": int,
    "size": int,
    "host": str,
    "cpu": int,
}
META_COLUMNS = ("source", "run", "record", "line")

_HEADER = re.compile(r"^#\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*):\s?(?P<value>.*)$")
_INT = re.compile(r"^-?\d+$")


class KernelParseError(ValueError):
    """A kernel output line that cannot be what a kernel prints (names source and line)."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        super().__init__(f"{source}:{line}: {message}")


# A ``# key: value`` header's value: an integer, true/false, else the text.
HeaderValue = int | bool | str


def _header_value(text: str) -> HeaderValue:
    text = text.strip()
    if _INT.match(text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    return text


class _Run:
    def __init__(self, index: int, kernel: str, line: int) -> None:
        self.index = index
        self.kernel = kernel
        self.line = line
        self.header: dict[str, HeaderValue] = {"kernel": kernel}
        self.rows: list[dict[str, Any]] = []
        self.records_per_rank: dict[int, int] = {}
        self.size: int | None = None


def parse_kernel_output(
    text: str, source: str | Path = "<string>", *, require_complete: bool = True
) -> dict[str, pl.DataFrame]:
    """Parse kernel stdout into ``{kernel name: DataFrame}`` (one row per rank per record).

    Raises :class:`KernelParseError` (a ``ValueError``) naming ``source`` and the 1-based
    line for: a JSON line that does not parse or is not an object, a record missing
    ``kernel``/``rank``/``size``/``host``/``cpu`` or with wrong types, a record before any
    ``# kernel:`` header or of another kernel than its header, a rank outside
    ``[0, size)``, ``size`` different from the header's ``nprocs``, a header parameter
    before ``# kernel:``, a line that contains a record but does not start with it
    (interleaved output), and — with ``require_complete`` — a run whose ranks did not all
    print the same number of records (truncated output; reported at the run's header).
    """
    src = str(source)
    runs: list[_Run] = []
    run: _Run | None = None

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            match = _HEADER.match(line)
            if not match:
                continue  # title / comment line
            key, value = match.group("key"), _header_value(match.group("value"))
            if key == "kernel":
                if not isinstance(value, str) or not value:
                    raise KernelParseError(src, lineno, f"'# kernel:' needs a kernel name, got {value!r}")
                run = _Run(len(runs), value, lineno)
                runs.append(run)
                continue
            if run is None:
                raise KernelParseError(src, lineno, f"header parameter {key!r} before any '# kernel:' line")
            if key in run.header and run.rows:
                raise KernelParseError(src, lineno, f"header parameter {key!r} after the run's records")
            run.header[key] = value
            continue
        if not line.startswith("{"):
            if '{"kernel"' in line:
                raise KernelParseError(src, lineno, "record does not start the line (interleaved output?)")
            continue  # launcher / library noise
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KernelParseError(src, lineno, f"malformed JSON record: {exc.msg} at column {exc.colno}") from None
        if not isinstance(record, dict):
            raise KernelParseError(src, lineno, "JSON record is not an object")
        for key, kind in REQUIRED_KEYS.items():
            if key not in record:
                raise KernelParseError(src, lineno, f"record lacks {key!r}")
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise KernelParseError(src, lineno, f"record key {key!r} has {value!r}, expected {kind.__name__}")
        if "valid" in record and record["valid"] is not None and not isinstance(record["valid"], bool):
            raise KernelParseError(src, lineno, f"'valid' must be true, false or null, got {record['valid']!r}")
        if run is None:
            raise KernelParseError(src, lineno, "record before any '# kernel:' header")
        if record["kernel"] != run.kernel:
            raise KernelParseError(
                src, lineno, f"record of kernel {record['kernel']!r} in a run of {run.kernel!r} (line {run.line})"
            )
        rank, size = record["rank"], record["size"]
        if size < 1 or not 0 <= rank < size:
            raise KernelParseError(src, lineno, f"rank {rank} outside [0, size={size})")
        nprocs = run.header.get("nprocs")
        if isinstance(nprocs, int) and nprocs != size:
            raise KernelParseError(src, lineno, f"record size {size} != header nprocs {nprocs}")
        if run.size is None:
            run.size = size
        elif run.size != size:
            raise KernelParseError(src, lineno, f"record size {size} != {run.size} earlier in the run")
        index = run.records_per_rank.get(rank, 0)
        run.records_per_rank[rank] = index + 1
        row = dict(record)
        for key, value in run.header.items():
            row.setdefault(key, value)
        row.update({"source": src, "run": run.index, "record": index, "line": lineno})
        run.rows.append(row)

    if require_complete:
        for r in runs:
            if not r.rows:
                continue
            counts = [r.records_per_rank.get(k, 0) for k in range(r.size or 0)]
            if len(set(counts)) != 1:
                raise KernelParseError(
                    src, r.line, f"incomplete {r.kernel} run: records per rank {counts} (truncated output?)"
                )

    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_kernel.setdefault(r.kernel, []).extend(r.rows)
    return {kernel: _frame(rows) for kernel, rows in by_kernel.items() if rows}


def parse_kernel_file(path: str | Path, *, require_complete: bool = True) -> dict[str, pl.DataFrame]:
    path = Path(path)
    return parse_kernel_output(path.read_text(errors="replace"), str(path), require_complete=require_complete)


def parse_kernel_files(paths: list[str | Path], *, require_complete: bool = True) -> dict[str, pl.DataFrame]:
    """Parse several files and stack each kernel's rows (columns union, nulls where absent)."""
    parts: dict[str, list[pl.DataFrame]] = {}
    for path in paths:
        for kernel, frame in parse_kernel_file(path, require_complete=require_complete).items():
            parts.setdefault(kernel, []).append(frame)
    return {kernel: pl.concat(frames, how="diagonal_relaxed") for kernel, frames in parts.items()}


# --------------------------------------------------------------------------- typing
def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "other"


def _column_dtype(values: list[Any]) -> pl.DataType:
    kinds = {_kind(v) for v in values} - {"null"}
    if not kinds:
        return pl.Null()
    if kinds == {"bool"}:
        return pl.Boolean()
    if kinds == {"int"}:
        return pl.Int64()
    if kinds <= {"int", "float"}:
        return pl.Float64()
    if kinds == {"str"}:
        return pl.String()
    if kinds == {"list"}:
        inner = [item for v in values if isinstance(v, list) for item in v]
        inner_dtype = _column_dtype(inner)
        if isinstance(inner_dtype, pl.Null):
            inner_dtype = pl.Int64()
        return pl.List(inner_dtype)
    return pl.String()  # mixed scalar kinds: keep the text


def _coerce(value: Any, dtype: pl.DataType | DataTypeClass) -> Any:
    if value is None:
        return None
    if isinstance(dtype, pl.Float64):
        return float(value)
    if isinstance(dtype, pl.String) and not isinstance(value, str):
        return json.dumps(value)
    if isinstance(dtype, pl.List):
        return [_coerce(item, dtype.inner) for item in value]
    return value


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows -> DataFrame: record keys first (in the kernel's order), header keys, then meta."""
    order: list[str] = list(REQUIRED_KEYS)
    seen: set[str] = set(order) | set(META_COLUMNS)
    for row in rows:
        for key in row:
            if key not in seen:
                seen.add(key)
                order.append(key)
    order += list(META_COLUMNS)
    columns: dict[str, pl.Series] = {}
    for key in order:
        values = [row.get(key) for row in rows]
        dtype = _column_dtype(values)
        columns[key] = pl.Series(key, [_coerce(v, dtype) for v in values], dtype=dtype)
    return pl.DataFrame(columns)
