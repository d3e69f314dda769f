"""Parse OSU Micro-Benchmarks (OMB 5.x-7.x) text output into the IMB samples schema.

OSU programs print one run as a banner line, a few ``#`` comment lines and one table::

    # OSU MPI Latency Test v5.6.2                 <- banner: benchmark title and OMB version
    # Size          Latency (us)                  <- column header
    0                       1.00                  <- rows
    1                       1.02

Collectives print ``# Size  Avg Latency(us)``, and with ``-f`` also ``Min Latency(us)``,
``Max Latency(us)`` and ``Iterations``; ``osu_barrier`` prints no size column; ``osu_mbw_mr``
adds ``# [ pairs: N ] [ window size: W ]``; OMB 7 adds ``# Datatype: MPI_CHAR.`` and optional
``Validation`` / ``Pxx Tail Lat(us)`` columns. A file may hold several runs (a script that loops
over benchmarks or process counts): each banner starts a new ``run``.

Rows come out in :data:`mpiatlas.parsers.imb.SCHEMA` (plus the cell columns ``mapping`` and
``algorithm``, null here), under the IMB name of the equivalent measurement, so the Hockney,
alpha-beta, region and report code reads OSU and IMB data alike:

* ``osu_latency`` -> ``PingPong``: OSU's latency is half the round trip, as IMB PingPong's t.
  ``bandwidth_MBps`` is bytes / t, the figure IMB prints for PingPong (MB = 10^6 B).
* ``osu_bw`` / ``osu_mbw_mr`` -> ``Uniband``, ``osu_bibw`` -> ``Biband``: bandwidth rows (no
  time), like IMB's Uniband/Biband tables; mbw_mr's message rate goes to ``msg_per_sec``.
* collectives -> ``Bcast``, ``Allreduce``, ... with Avg/Min/Max latency as t_avg/t_min/t_max
  (t_usec = t_avg, as for IMB collectives) and ``Iterations`` as ``repetitions``;
  non-blocking ones -> ``Ibcast``, ... with ``Pure Comm.(us)`` as t_pure (IMB-NBC's t_pure).

OSU prints no process count: pt2pt runs have 2 ranks, ``osu_mbw_mr``/``osu_multi_lat`` 2 x pairs;
for collectives the caller passes ``processes`` (else null). Errors are :class:`OsuParseError`
(an :class:`ImbParseError`, so an importer's handling covers both) named ``file:line``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

# imb's public names only (its __all__), not the modules behind them.
from mpiatlas.parsers.imb import SCHEMA, ImbParseError, read_imb_file

__all__ = ["OSU_COLUMNS", "OSU_SCHEMA", "OsuParseError", "is_osu_text", "parse_osu_file", "parse_osu_text"]

# The IMB samples schema plus the cell columns an OSU export can fill (the CSV exports do).
OSU_SCHEMA: dict[str, pl.DataType] = {**SCHEMA, "mapping": pl.String(), "algorithm": pl.String()}
OSU_COLUMNS: list[str] = list(OSU_SCHEMA)

# "# OSU MPI Latency Test v5.6.2", "# OSU MPI-CUDA Bandwidth Test v7.4" (the accelerator suffix
# is printed into the banner), "# OSU MPI Multiple Bandwidth / Message Rate Test v5.6.3".
_BANNER = re.compile(r"^#\s*OSU\s+MPI(?:-[\w ]+?)?\s+(?P<title>.+?)\s+Test\s+v?(?P<version>\d[\w.\-]*)\s*$")
_BANNER_ANYWHERE = re.compile(r"^[ \t]*#[ \t]*OSU[ \t]+MPI\S*[ \t].*\bTest[ \t]+v?\d", re.MULTILINE)
_IMB_BANNER = re.compile(r"Intel\s?\(R\)\s+MPI\s+Benchmarks")  # as parsers.imb reads it, "Intel (R)" in 2018
_PAIRS = re.compile(r"^#.*\bpairs:\s*(?P<pairs>\d+)")
# A data row starts with a number (OSU prints sizes left-aligned, barrier latencies right-aligned).
_ROW = re.compile(r"^\s*[-+]?(?:\d|\.\d)")
_TAIL = re.compile(r"^P\d+ Tail (?:Lat\(us\)|BW\(MB/s\))$")
# A header label is separated from the next by 2+ spaces (OSU right-aligns them in 18 columns).
_LABEL_GAP = re.compile(r"\s{2,}")


@dataclass(frozen=True)
class _Benchmark:
    """The IMB-equivalent name of an OSU test and what its table means."""

    name: str
    latency_is_one_message: bool = False  # pt2pt latency: t is one message's time (IMB's t)
    fixed_processes: int | None = None  # pt2pt: always 2 ranks


_PINGPONG = _Benchmark("PingPong", latency_is_one_message=True, fixed_processes=2)
# Banner title (without "Test") -> benchmark. Titles as OMB 5.x-7.x print them.
_TITLES: dict[str, _Benchmark] = {
    "Latency": _PINGPONG,
    "Multi Latency": _Benchmark("Multi-PingPong", latency_is_one_message=True),
    "Bandwidth": _Benchmark("Uniband", fixed_processes=2),
    "Bi-Directional Bandwidth": _Benchmark("Biband", fixed_processes=2),
    "Multiple Bandwidth / Message Rate": _Benchmark("Uniband"),
    "Barrier Latency": _Benchmark("Barrier"),
    "Broadcast Latency": _Benchmark("Bcast"),
    "Reduce Latency": _Benchmark("Reduce"),
    "Allreduce Latency": _Benchmark("Allreduce"),
    "Reduce Scatter Latency": _Benchmark("Reduce_scatter"),
    "Reduce_scatter Latency": _Benchmark("Reduce_scatter"),
    "Reduce Scatter Block Latency": _Benchmark("Reduce_scatter_block"),
    "Gather Latency": _Benchmark("Gather"),
    "Gatherv Latency": _Benchmark("Gatherv"),
    "Scatter Latency": _Benchmark("Scatter"),
    "Scatterv Latency": _Benchmark("Scatterv"),
    "Allgather Latency": _Benchmark("Allgather"),
    "Allgatherv Latency": _Benchmark("Allgatherv"),
    "All-to-All Personalized Exchange Latency": _Benchmark("Alltoall"),
    "All-to-Allv Personalized Exchange Latency": _Benchmark("Alltoallv"),
}
# Non-blocking collectives: "Non-blocking Broadcast Latency" -> "Ibcast" (IMB-NBC's names).
_NBC_PREFIX = re.compile(r"^Non[- ]?[Bb]locking\s+")

# Column label -> (field, parse). Fields: the IMB row fields (imb_shapes.HEADER_TOKENS' values), "validation",
# or None (read and dropped). "Avg Latency(us)"/"Latency (us)" are resolved per benchmark.
_LATENCY = "latency"
_COLUMNS: dict[str, tuple[str | None, Callable[[str], object]]] = {
    "Size": ("bytes", int),
    "Latency (us)": (_LATENCY, float),
    "Avg Latency(us)": (_LATENCY, float),
    "Min Latency(us)": ("t_min", float),
    "Max Latency(us)": ("t_max", float),
    "Iterations": ("repetitions", int),
    "Bandwidth (MB/s)": ("mbytes", float),
    "MB/s": ("mbytes", float),
    "Messages/s": ("msg_per_sec", float),
    "Validation": ("validation", str),
    "Transmit Size": (None, int),
    # Non-blocking collectives: Pure Comm. is the blocking-equivalent time (IMB-NBC t_pure);
    # the overlapped time and its parts are not a model input.
    "Overall(us)": (None, float),
    "Compute(us)": (None, float),
    "Coll. Init(us)": (None, float),
    "MPI_Test(us)": (None, float),
    "MPI_Wait(us)": (None, float),
    "Pure Comm.(us)": ("t_pure", float),
    "Min Comm.(us)": ("t_min", float),
    "Max Comm.(us)": ("t_max", float),
    "Overlap(%)": (None, float),
}


class OsuParseError(ImbParseError):
    """OSU output that cannot be parsed; the message is ``<file>:<line>: <what>``."""


@dataclass
class _Run:
    """One banner's run while it is read."""

    index: int
    title: str  # the banner's, e.g. "Latency" (osu_latency): what error messages name
    benchmark: _Benchmark
    version: str
    banner_line: int
    pairs: int | None = None
    columns: list[str] | None = None
    header_line: int | None = None
    rows: list[dict[str, object]] = field(default_factory=list)


def is_osu_text(text: str) -> bool:
    """True for OSU output: an OSU banner (``# OSU MPI ... Test vX``) and no IMB banner.

    The import dispatch rule. IMB output always has an ``Intel(R) MPI Benchmarks`` banner and
    OSU output never has; a log holding both suites' output is left to the IMB parser, which
    names the first line it cannot read, rather than silently losing the IMB part.
    """
    # "OSU" as a plain substring first: importing 10^4 IMB files must not pay a multi-line regex
    # search through each (a third of the import's time when it did).
    return "OSU" in text and _BANNER_ANYWHERE.search(text) is not None and _IMB_BANNER.search(text) is None


def _benchmark_of(title: str) -> _Benchmark | None:
    title = re.sub(r"\s+", " ", title.strip())
    if title in _TITLES:
        return _TITLES[title]
    blocking = _NBC_PREFIX.sub("", title)
    if blocking != title and blocking in _TITLES and _TITLES[blocking].fixed_processes is None:
        return _Benchmark("I" + _TITLES[blocking].name.lower())
    return None


def _header_labels(line: str) -> list[str] | None:
    """The column labels of a ``#`` header line, or None when the line is another comment."""
    body = line.lstrip("#").strip()
    labels = [label for label in _LABEL_GAP.split(body) if label]
    if not labels or not (labels[0] in _COLUMNS or labels[0] == "Size"):
        return None
    return labels


def _check_labels(labels: list[str], source: str, lineno: int, line: str) -> None:
    unknown = [label for label in labels if label not in _COLUMNS and not _TAIL.match(label)]
    if unknown:
        raise OsuParseError(source, lineno, f"unrecognised OSU column(s) {unknown} in table header {line.strip()!r}")


def _read_row(run: _Run, source: str, lineno: int, line: str) -> dict[str, object]:
    assert run.columns is not None
    tokens = line.split()
    if len(tokens) != len(run.columns):
        columns = " | ".join(run.columns)
        raise OsuParseError(
            source, lineno, f"expected {len(run.columns)} columns ({columns}) but found {len(tokens)}: {line.strip()!r}"
        )
    row: dict[str, object] = {}
    for label, token in zip(run.columns, tokens):
        field_name, parse = _COLUMNS.get(label, (None, float))  # tail percentiles: numbers, dropped
        try:
            value = parse(token)
        except ValueError:
            raise OsuParseError(
                source, lineno, f"non-numeric value {token!r} in column {label!r}: {line.strip()!r}"
            ) from None
        if field_name == _LATENCY:
            field_name = "t" if run.benchmark.latency_is_one_message else "t_avg"
        if field_name is not None:
            row[field_name] = value
    row["line"] = lineno
    return row


def _finish(run: _Run | None, source: str) -> None:
    """A run must have reached a table with at least one row (else: truncated output)."""
    if run is None:
        return
    if run.columns is None:
        raise OsuParseError(source, run.banner_line, f"OSU {run.title!r} run has no table header (truncated output?)")
    if not run.rows:
        assert run.header_line is not None
        raise OsuParseError(source, run.header_line, f"OSU {run.title!r} table has no rows (truncated output?)")


def _runs(text: str, source: str) -> list[_Run]:
    runs: list[_Run] = []
    current: _Run | None = None
    lines = text.splitlines()
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        banner = _BANNER.match(stripped)
        if banner:
            _finish(current, source)
            benchmark = _benchmark_of(banner["title"])
            if benchmark is None:
                raise OsuParseError(source, lineno, f"unsupported OSU benchmark {banner['title']!r} in {stripped!r}")
            current = _Run(len(runs), banner["title"], benchmark, banner["version"], lineno)
            runs.append(current)
        elif stripped.startswith("#"):
            if current is None:
                continue  # a comment before any banner (launcher chatter)
            pairs = _PAIRS.match(stripped)
            labels = _header_labels(stripped)
            if pairs:
                current.pairs = int(pairs["pairs"])
            elif labels is not None:
                _check_labels(labels, source, lineno, line)
                if current.columns is not None:
                    raise OsuParseError(source, lineno, f"second table header in one OSU run: {stripped!r}")
                current.columns, current.header_line = labels, lineno
        elif _ROW.match(stripped):
            if current is None or current.columns is None:
                what = "data row outside an OSU table (no banner and column header before it)"
                raise OsuParseError(source, lineno, f"{what}: {stripped!r}")
            current.rows.append(_read_row(current, source, lineno, line))
        # Anything else is launcher/MPI chatter interleaved with stdout (warnings, module loads).
    _finish(current, source)
    if not runs:
        raise OsuParseError(source, max(len(lines), 1), "end of file: no OSU result tables found "
                            "(expected a '# OSU MPI ... Test vX' banner followed by a table)")
    return runs


def _processes(run: _Run, processes: int | None) -> int | None:
    if run.benchmark.fixed_processes is not None:
        return run.benchmark.fixed_processes
    if run.pairs is not None:
        return 2 * run.pairs
    return processes


def _frame(runs: list[_Run], source: str, processes: int | None) -> pl.DataFrame:
    records: list[dict[str, object]] = []
    for run in runs:
        common = {"source": source, "run": run.index, "imb_version": f"OMB {run.version}",
                  "benchmark": run.benchmark.name, "processes": _processes(run, processes)}  # fmt: skip
        for row in run.rows:
            validation = row.pop("validation", None)
            status = "ok" if validation in (None, "Pass") else f"validation {validation}"
            records.append({**common, **row, "status": status})
    raw = pl.DataFrame(records, infer_schema_length=None)
    for name in ("t", "t_min", "t_max", "t_avg", "t_pure", "mbytes", "msg_per_sec", "bytes", "repetitions"):
        if name not in raw.columns:
            raw = raw.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    one_message = pl.col("benchmark").is_in([b.name for b in _TITLES.values() if b.latency_is_one_message])
    # IMB prints PingPong's Mbytes/sec as bytes / t (0 at 0 bytes); OSU's latency table does not.
    timed = one_message & pl.col("t").is_not_null() & (pl.col("t") > 0)
    pingpong_bw = pl.when(timed).then(pl.col("bytes") / pl.col("t"))
    return raw.select(
        "source", "run", "imb_version", "benchmark",
        pl.lit(None, dtype=pl.String).alias("mode"),
        "processes",
        pl.lit(None, dtype=pl.Int32).alias("group"),
        "bytes", "repetitions",
        pl.coalesce("t", "t_avg", "t_pure").alias("t_usec"),
        pl.col("t_min").alias("t_min_usec"),
        pl.col("t_max").alias("t_max_usec"),
        pl.col("t_avg").alias("t_avg_usec"),
        pl.coalesce("mbytes", pingpong_bw).alias("bandwidth_MBps"),
        "msg_per_sec", "status", "line",
        pl.lit(None, dtype=pl.String).alias("mapping"),
        pl.lit(None, dtype=pl.String).alias("algorithm"),
    ).cast(pl.Schema(OSU_SCHEMA))  # fmt: skip


def parse_osu_text(text: str, source: str, *, processes: int | None = None) -> pl.DataFrame:
    """Parse the stdout of one or more OSU runs into :data:`OSU_SCHEMA` rows.

    ``processes`` is the rank count of collective runs (OSU does not print it); pt2pt runs
    get theirs from the benchmark. Raises :class:`OsuParseError` on anything malformed.
    """
    return _frame(_runs(text, source), source, processes)


def parse_osu_file(path: str | Path, *, processes: int | None = None) -> pl.DataFrame:
    """Parse one OSU output file; ``source`` is the path as given. Raises OSError or OsuParseError."""
    return parse_osu_text(read_imb_file(path), str(Path(path)), processes=processes)
