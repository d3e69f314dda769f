"""Two campaigns' kernel tables compared: ring, matsum and Jacobi time per P, pingpong and coll per size
(every program of the registry that declares a :class:`mpiatlas.programs.base.Reduction`).

Each tidy ``kernel_<name>.parquet`` (one row per rank per record, programs.kernels) is reduced to one
time per launch (repetition) and point, the unit IMB's samples already have, then matched and judged
exactly as IMB cells are (:mod:`mpiatlas.compare.campaigns`, :mod:`mpiatlas.stats.ratios`: the ratio
of medians B/A with a bootstrap CI, verdicts, the two-level bootstrap with several runs per side).

The time of a launch, per kernel (the one its model in :mod:`mpiatlas.models` reads; declared by its
program module, ``programs/kernels/<name>.py``):

* ring: the exchange time (``time_us``, P steps), the slowest rank's: the exchange ends with it;
  per variant, streams and message size;
* matsum: ``total_us`` (scatter + compute + gather), the slowest rank's; per dims, topo and dist;
* jacobi: ``iteration_us``, the slowest rank's; per variant group (mode, size, threads, grid);
* pingpong: rank 0's ``t_usec`` (half a round trip, as IMB PingPong) per size;
* coll: rank 0's ``t_avg_usec`` (the time per call averaged over ranks) per collective, algorithm, size.

Only ok cells of trusted launches count (:func:`mpiatlas.stats.quality.trusted`) and only valid
records. matsum and jacobi have no message size: their ``bytes`` is null, one point per P.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.matrix.cells import PINNER_SEGMENT_PREFIX
from mpiatlas.programs import REGISTRY
from mpiatlas.programs.base import Reduction
from mpiatlas.stats.quality import trusted
from mpiatlas.stats.ratios import TIME
from mpiatlas.tables.samples import with_series_axes

# Matching axes of the reduced kernel samples, in display order (``bytes`` last, as for IMB).
KERNEL_AXES: tuple[str, ...] = ("stack", "transport", "mapping", "nodes", "placement", "np", "threads", "knobs",
                                "pinner", "benchmark", "variant", "streams", "problem", "algorithm", "bytes")
# The cell coordinates every kernel row carries (programs.base.tag_columns), kept on the reduced rows.
CELL_AXES: tuple[str, ...] = ("stack", "transport", "mapping", "nodes", "np", "knobs")


def reductions() -> dict[str, Reduction]:
    """Each compared program's reduction (programs.base.Program.reduction), in registry order."""
    return {name: p.reduction for name, p in REGISTRY.items() if p.reduction is not None}


def _prepared(reduction: Reduction, df: pl.DataFrame) -> pl.DataFrame:
    """Record columns a reduction needs that the table spells otherwise (the program's ``prepare``:
    matsum's topo × dist as one axis), and list-valued ``dims`` as text."""
    if reduction.prepare is not None:
        df = reduction.prepare(df)
    if "dims" in df.columns and df.schema["dims"] != pl.String:
        df = df.with_columns(pl.col("dims").cast(pl.List(pl.String)).list.join("x").alias("dims"))
    return df


def _usable_rows(df: pl.DataFrame) -> pl.DataFrame:
    """Rows of ok cells, trusted launches and valid records."""
    df = trusted(df)
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    if "valid" in df.columns:
        df = df.filter(pl.col("valid").fill_null(True))
    return df


def kernel_samples(name: str, table: pl.DataFrame) -> pl.DataFrame:
    """One row per launch and point of kernel ``name``: the cell's axes, the kernel's own, ``bytes``
    (null for size-less kernels), ``t_usec``, ``cell`` and ``rep``; empty when nothing is usable."""
    spec = reductions()[name]
    df = _usable_rows(_prepared(spec, table))
    if not spec.slowest and "rank" in df.columns:
        df = df.filter(pl.col("rank") == 0)  # the OSU/IMB reporter
    own = {col: axis for col, axis in spec.axes.items() if col in df.columns}
    if df.height == 0 or spec.time not in df.columns:
        return pl.DataFrame()
    cell_axes = [c for c in CELL_AXES if c in df.columns]
    extra = [pl.col("cell_threads").alias("threads")] if "cell_threads" in df.columns else []
    keys = ["cell", "rep", *cell_axes, *own]
    time = pl.col(spec.time).max() if spec.slowest else pl.col(spec.time).first()
    per_launch = (df.filter(pl.col(spec.time).is_finite())
                  .group_by(keys, maintain_order=True)
                  .agg(time.cast(pl.Float64).alias(TIME), *(e.first() for e in extra)))
    # Who pinned the ranks is in the cell id only (``pinner=likwid/``; none: the stack, "" as in Cell.pinner):
    # a likwid-pinned cell is another measurement than the stack-pinned one of the same coordinates.
    per_launch = per_launch.with_columns(pl.col("cell").str.extract(f"/{PINNER_SEGMENT_PREFIX}([^/]+)/", 1)
                                         .fill_null("").alias("pinner"))
    out = per_launch.rename({col: axis for col, axis in own.items() if col != axis}).with_columns(
        pl.lit(name).alias("benchmark"))
    if "bytes" not in out.columns:
        out = out.with_columns(pl.lit(None, dtype=pl.Int64).alias("bytes"))
    return with_series_axes(out)


def load_kernel_samples(tidy: Path) -> dict[str, pl.DataFrame]:
    """The reduced samples of every kernel table in ``tidy`` (kernels without usable rows left out)."""
    found: dict[str, pl.DataFrame] = {}
    for name, reduction in reductions().items():
        path = tidy / layout.kernel_table(name)
        if not path.is_file():
            continue
        try:
            table = pl.read_parquet(path)
        except Exception as exc:
            raise ValueError(f"{path}: not a readable parquet table ({exc})") from exc
        missing = [c for c in ("cell", "rep", reduction.time) if c not in table.columns]
        if table.height and missing:
            raise ValueError(f"{path}: not a {name} kernel table (missing columns: {', '.join(missing)})")
        samples = kernel_samples(name, table) if table.height else pl.DataFrame()
        if samples.height:
            found[name] = samples
    return found


def stacked_runs(runs: list[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Several runs' kernel samples, per kernel, with a ``run`` column (0, 1, …) as IMB samples get."""
    def stacked(name: str) -> pl.DataFrame:
        return pl.concat([r[name].with_columns(pl.lit(i, dtype=pl.Int32).alias("run"))
                          for i, r in enumerate(runs) if name in r], how="diagonal_relaxed")

    return {name: stacked(name) for name in reductions() if any(name in r for r in runs)}
