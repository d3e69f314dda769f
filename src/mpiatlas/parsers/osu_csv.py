"""Read CSV exports of OSU Micro-Benchmarks runs (the ORFEO Bcast/Barrier/Scatter/latency sets).

People who sweep OSU over process counts, mappings and forced algorithms often keep only a CSV
that a shell loop built from OSU's rows (``... | awk '{printf "<alg>,<map>,%s,%s,%s\\n", np, $1, $2}'``).
Two layouts occur in ``shared/datasets``:

* collectives: ``Algorithm,Allocation,Processes[,MessageSize],<latency>[,MinLatency,MaxLatency]``
  where ``<latency>`` is ``Avg Latency(us)`` or ``Latency`` (OSU's average over ranks, µs). The
  collective is not in the rows: it is the first collective name in the file name or, failing
  that, in a parent directory's name (``bcast_chain.csv``, ``barrier/results/x.csv``).
* core-to-core ``osu_latency``: ``Core 1,Core 2,Message Size,Latency``, one 2-rank PingPong per
  pair of CPUs (``mpirun --cpu-list i,j``).

Rows map onto :data:`mpiatlas.parsers.osu.OSU_SCHEMA` like OSU's own text output, with the axes
filled: ``Allocation`` (Open MPI ``--map-by core|socket|node``) -> ``mapping``, ``Algorithm`` ->
``algorithm`` under Open MPI's ``coll_tuned`` name (``bin_tree`` -> ``binary_tree``, ``Default``
-> ``default``, the pipeline's word for the stack's own choice), ``Processes`` -> ``processes``;
a CPU pair -> ``mapping`` ``cpu-list i,j``. ``line`` is the row's line in the file.

Column names are matched case-insensitively with spaces removed, since the exports differ in
spacing (``Latency, MinLatency`` vs ``Latency,MinLatency``). One known export quirk is accepted:
a Barrier file whose header names a ``MessageSize`` column that none of its rows has (OSU's
barrier has no size). Anything else malformed raises :class:`OsuParseError` naming file:line.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import polars as pl

from mpiatlas.parsers.imb import read_imb_file
from mpiatlas.parsers.osu import OSU_SCHEMA, OsuParseError

__all__ = ["is_osu_csv", "parse_osu_csv_file", "parse_osu_csv_text"]

# File-name word -> IMB benchmark name, longest first so "allgather" is not read as "gather".
_COLLECTIVES: dict[str, str] = {
    "reduce_scatter": "Reduce_scatter", "allgather": "Allgather", "allreduce": "Allreduce",
    "alltoall": "Alltoall", "barrier": "Barrier", "scatter": "Scatter", "gather": "Gather",
    "reduce": "Reduce", "bcast": "Bcast",
}  # fmt: skip
_COLLECTIVE_WORD = re.compile(r"(?<![a-z])(" + "|".join(_COLLECTIVES) + r")(?![a-z])")

# Export column (lowercase, no spaces) -> field.
_AXES = {"algorithm": "algorithm", "allocation": "mapping", "processes": "processes"}
_SIZE = {"messagesize"}
_AVG = {"avglatency(us)", "latency", "avglatency"}
_MIN = {"minlatency", "minlatency(us)"}
_MAX = {"maxlatency", "maxlatency(us)"}
_PAIR = ("core1", "core2", "messagesize", "latency")

# Author labels (lowercase, "_"/"-" removed) -> Open MPI coll_tuned algorithm names, per
# collective; a label not listed is kept lowercased.
_DEFAULT = {"default": "default", "def": "default", "ignore": "default"}
_ALGORITHMS: dict[str, dict[str, str]] = {
    "Bcast": {**_DEFAULT, "linear": "basic_linear", "basiclinear": "basic_linear", "chain": "chain",
              "pipeline": "pipeline", "splitbinarytree": "split_binary_tree", "bintree": "binary_tree",
              "binarytree": "binary_tree", "binomial": "binomial", "knomial": "knomial"},
    "Barrier": {**_DEFAULT, "linear": "linear", "ring": "double_ring", "doublering": "double_ring",
                "recursivedoubling": "recursive_doubling", "bruck": "bruck", "twoproc": "two_proc", "tree": "tree"},
    "Scatter": {**_DEFAULT, "basiclinear": "basic_linear", "linear": "basic_linear", "binomial": "binomial",
                "linearnb": "linear_nb"},
}  # fmt: skip


def _key(name: str) -> str:
    return re.sub(r"\s+", "", name).lower()


def is_osu_csv(path: str | Path, first_line: str) -> bool:
    """True for a ``.csv`` whose header is one of the two OSU export layouts above."""
    if Path(path).suffix.lower() != ".csv":
        return False
    keys = [_key(c) for c in first_line.strip().split(",")]
    return tuple(keys) == _PAIR or (
        {"algorithm", "allocation", "processes"} <= set(keys) and any(k in _AVG for k in keys)
    )


def _collective_of(path: Path) -> str | None:
    """The collective named by the file name, else by the nearest parent directory."""
    for part in [path.stem, *(p.name for p in path.parents)]:
        match = _COLLECTIVE_WORD.search(part.lower())
        if match:
            return _COLLECTIVES[match.group(1)]
    return None


def _algorithm(label: str, benchmark: str) -> str:
    plain = re.sub(r"[\s_\-]+", "", label).lower()
    return _ALGORITHMS.get(benchmark, _DEFAULT).get(plain, label.strip().lower())


def _collective_columns(header: list[str], benchmark: str | None, source: str) -> dict[str, int]:
    """Field -> column index of a collectives export; raises on an unknown layout."""
    if benchmark is None:
        raise OsuParseError(source, 1, "cannot tell which collective this OSU export holds: no collective name "
                            f"({', '.join(_COLLECTIVES)}) in the file name or its directories")  # fmt: skip
    fields: dict[str, int] = {}
    for i, key in enumerate(_key(c) for c in header):
        field = (_AXES.get(key) or ("bytes" if key in _SIZE else None) or ("t_avg" if key in _AVG else None)
                 or ("t_min" if key in _MIN else None) or ("t_max" if key in _MAX else None))  # fmt: skip
        if field is None:
            what = f"unrecognised column {header[i].strip()!r} in OSU export header {','.join(header)!r}"
            raise OsuParseError(source, 1, what)
        fields[field] = i
    missing = [f for f in ("algorithm", "mapping", "processes", "t_avg") if f not in fields]
    if missing:
        raise OsuParseError(source, 1, f"OSU export header {','.join(header)!r} lacks {missing}")
    if "bytes" not in fields and benchmark != "Barrier":
        raise OsuParseError(source, 1, f"OSU {benchmark} export header {','.join(header)!r} has no MessageSize column")
    return fields


def _without_size(fields: dict[str, int]) -> dict[str, int]:
    """The Barrier quirk: the header's MessageSize names no value, the columns after it shift left."""
    size = fields["bytes"]
    return {f: (i - 1 if i > size else i) for f, i in fields.items() if f != "bytes"}


def _split(text: str, source: str) -> tuple[list[str], pl.DataFrame]:
    """(header fields, the data rows: ``line`` (1-based), ``text``, ``fields`` list), blank lines dropped.

    Rows are split with polars, not row by row; quoted exports (none of the known ones) go
    through the csv module so a quoted comma stays inside its field.
    """
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise OsuParseError(source, 1, "empty file: expected an OSU CSV export header")
    if '"' in text:
        split = list(csv.reader(lines))
        header, fields = split[0], pl.Series("fields", split[1:], dtype=pl.List(pl.String))
    else:
        header, fields = lines[0].split(","), pl.Series("fields", lines[1:], dtype=pl.String).str.split(",")
    rows = pl.DataFrame({"line": pl.int_range(2, len(lines) + 1, eager=True, dtype=pl.Int32),
                         "text": pl.Series(lines[1:], dtype=pl.String), "fields": fields})  # fmt: skip
    return header, rows.filter(pl.col("text").str.strip_chars() != "")


def _check_width(rows: pl.DataFrame, width: int, header: list[str], source: str) -> None:
    bad = rows.filter(pl.col("fields").list.len() != width)
    if bad.height:
        line, text, fields = bad.row(0)
        raise OsuParseError(source, line, f"expected {width} values ({','.join(h.strip() for h in header)}) "
                            f"but found {len(fields)}: {text!r}")  # fmt: skip


def _numbers(rows: pl.DataFrame, columns: dict[str, tuple[int, pl.DataType, str]], source: str) -> pl.DataFrame:
    """The numeric fields cast by column; the first token that is not a number is an error."""
    tokens = {name: pl.col("fields").list.get(i).str.strip_chars() for name, (i, _, _) in columns.items()}
    out = rows.with_columns(*(tok.cast(columns[name][1], strict=False).alias(name) for name, tok in tokens.items()))
    for name, (i, dtype, label) in columns.items():
        bad = out.filter(pl.col(name).is_null())
        if bad.height:
            line, text, fields = bad.row(0)[:3]
            raise OsuParseError(source, line, f"non-numeric value {fields[i].strip()!r} in column {label!r} "
                                f"(expected {'int' if dtype == pl.Int64 else 'float'}): {text!r}")  # fmt: skip
    return out


def _collective_rows(rows: pl.DataFrame, header: list[str], path: Path, source: str) -> pl.DataFrame:
    benchmark = _collective_of(path)
    fields = _collective_columns(header, benchmark, source)
    assert benchmark is not None
    names = header
    if benchmark == "Barrier" and "bytes" in fields and (rows["fields"].list.len() == len(header) - 1).all():
        names = [name for i, name in enumerate(header) if i != fields["bytes"]]
        fields = _without_size(fields)
    _check_width(rows, max(fields.values()) + 1, names, source)
    kinds: dict[str, pl.DataType] = {"processes": pl.Int64(), "bytes": pl.Int64(),
             "t_avg": pl.Float64(), "t_min": pl.Float64(), "t_max": pl.Float64()}  # fmt: skip
    numeric = {f: (fields[f], kind, names[fields[f]].strip()) for f, kind in kinds.items() if f in fields}
    out = _numbers(rows, numeric, source)
    label = pl.col("fields").list.get(fields["algorithm"])
    # Few distinct labels per file: name them in Python once, replace them in polars.
    algorithms = {raw: _algorithm(raw, benchmark) for raw in out.select(label.unique()).to_series().to_list()}
    return out.with_columns(
        pl.lit(benchmark).alias("benchmark"),
        label.replace_strict(algorithms, return_dtype=pl.String).alias("algorithm"),
        pl.col("fields").list.get(fields["mapping"]).str.strip_chars().str.to_lowercase().alias("mapping"),
    )


def _pair_rows(rows: pl.DataFrame, header: list[str], source: str) -> pl.DataFrame:
    _check_width(rows, len(_PAIR), header, source)
    kinds = (pl.Int64(), pl.Int64(), pl.Int64(), pl.Float64())
    names = ("cpu_a", "cpu_b", "bytes", "t")
    out = _numbers(rows, {n: (i, k, header[i].strip()) for i, (n, k) in enumerate(zip(names, kinds))}, source)
    # One 2-rank osu_latency run pinned to CPUs a and b: the pair is the placement axis.
    return out.with_columns(
        pl.lit("PingPong").alias("benchmark"),
        pl.lit(2).alias("processes"),
        pl.format("cpu-list {},{}", "cpu_a", "cpu_b").alias("mapping"),
        pl.when(pl.col("t") > 0).then(pl.col("bytes") / pl.col("t")).alias("bandwidth"),
    )


def parse_osu_csv_text(text: str, path: str | Path, *, algorithm: str | None = None) -> pl.DataFrame:
    """Parse an OSU CSV export's ``text``; ``path`` names the source and tells the collective.

    ``algorithm`` replaces the export's own label, for exports known to mislabel it (the
    zampar ``bcast_linear.csv`` ran coll_tuned algorithm 6, binomial: see its PROVENANCE.md).
    """
    source = str(path)
    header, rows = _split(text, source)
    if rows.height == 0:
        raise OsuParseError(source, max(len(text.splitlines()), 1), "end of file: OSU export has a header but no rows")
    if tuple(_key(c) for c in header) == _PAIR:
        frame = _frame(_pair_rows(rows, header, source), source)
    else:
        frame = _frame(_collective_rows(rows, header, Path(path), source), source)
    return frame.with_columns(pl.lit(algorithm, dtype=pl.String).alias("algorithm")) if algorithm else frame


def _frame(raw: pl.DataFrame, source: str) -> pl.DataFrame:
    for name in ("t", "t_avg", "t_min", "t_max", "bytes", "bandwidth", "algorithm"):
        if name not in raw.columns:
            raw = raw.with_columns(pl.lit(None).alias(name))
    return raw.select(
        pl.lit(source, dtype=pl.String).alias("source"),
        pl.lit(0, dtype=pl.Int32).alias("run"),
        pl.lit(None, dtype=pl.String).alias("imb_version"),  # the exports do not record the OMB version
        "benchmark",
        pl.lit(None, dtype=pl.String).alias("mode"),
        "processes",
        pl.lit(None, dtype=pl.Int32).alias("group"),
        "bytes",
        pl.lit(None, dtype=pl.Int64).alias("repetitions"),
        pl.coalesce("t", "t_avg").alias("t_usec"),
        pl.col("t_min").alias("t_min_usec"),
        pl.col("t_max").alias("t_max_usec"),
        pl.col("t_avg").alias("t_avg_usec"),
        pl.col("bandwidth").alias("bandwidth_MBps"),
        pl.lit(None, dtype=pl.Float64).alias("msg_per_sec"),
        pl.lit("ok", dtype=pl.String).alias("status"),
        "line", "mapping", "algorithm",
    ).cast(pl.Schema(OSU_SCHEMA))  # fmt: skip


def parse_osu_csv_file(path: str | Path, *, algorithm: str | None = None) -> pl.DataFrame:
    """Parse one OSU CSV export. Raises OSError or OsuParseError."""
    return parse_osu_csv_text(read_imb_file(path), path, algorithm=algorithm)
