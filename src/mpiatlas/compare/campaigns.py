"""Two campaigns compared: per matched cell and size, the ratio B/A of medians with a bootstrap CI.

Matching. Cells of A and B are matched on every axis both sides carry (a column present and not
all-null on both: the cell id's coordinates minus the repetition, plus the IMB ``processes``/
``group``/``mode``, the cell's IMB options, knob set and placement over nodes, and the message size). An axis that takes one value on each side, different
values on the two sides (``transport`` shm in A, ofi-tcp in B) is the *compared setting*: it is
reported, not matched on, so "the same cells over another transport" line up. ``ignore`` drops
further axes from the key; a key that then names several cells on one side is refused (pooling
different cells silently would fake repetitions). ``label`` is only an axis for data without
``stack`` (imported logs), where it is the only identity there is.

Statistics: :mod:`mpiatlas.stats.ratios` (per size, the ratio of medians with a bootstrap CI;
several runs per side: the two-level bootstrap of :mod:`mpiatlas.stats.two_level`).

Kernel tables (ring, matsum, Jacobi, pingpong, coll): each reduced to one time per launch and point
(:mod:`mpiatlas.compare.kernels`), then matched and judged per kernel by the same rules and statistics
(``Comparison.kernels``). A side may hold IMB samples, kernel tables or both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.stats.aggregate import CONFIDENCE, N_RESAMPLES, SEED, usable_samples
from mpiatlas.compare.fits import (ComparedFit, alphabeta_compared, fit_differences, fit_differences_over_runs,
                                   hockney_compared)
from mpiatlas.models.alphabeta_records import AlphaBetaFits
from mpiatlas.models.fit_records import FitRecordError, JsonValue, hockney_records
from mpiatlas.compare.kernels import KERNEL_AXES, load_kernel_samples, stacked_runs
from mpiatlas.tables.samples import SERIES_AXES, with_series_axes
from mpiatlas.stats.ratios import MIN_REPS, MIN_RUNS, TIME, grouped_times, size_table
from mpiatlas.models.fits_files import FitsFileError, read

# Candidate matching axes, in display order (``bytes`` last: a cell's sizes).
AXES: tuple[str, ...] = ("label", "stack", "transport", "mapping", "nodes", "np", "benchmark", "algorithm",
                         *SERIES_AXES, "processes", "group", "mode", "bytes")
ONE_RUN_NOTE = ("one run per side: run-to-run variation is not in the CI (two identical campaigns can differ "
                "\"significantly\"); repeat each campaign and pass the runs, --a A1 A2 A3 --b B1 B2 B3, to include it")


# An IMB samples table without rows: a kernel-only campaign's IMB side.
_NO_SAMPLES = pl.DataFrame(schema={"benchmark": pl.String, "bytes": pl.Int64, TIME: pl.Float64, "status": pl.String})


class CompareError(ValueError):
    """Bad input: the message names the directory or file and what was expected."""


@dataclass
class Side:
    """One campaign (or imported data set), possibly several runs of it: usable samples (with a
    ``run`` column when there are several), cell statuses and fits (of its one run; per run in
    ``*_runs`` when there are several)."""

    name: str
    path: Path
    samples: pl.DataFrame
    cells: pl.DataFrame | None = None
    hockney: list[ComparedFit] = field(default_factory=list)  # its fitted Hockney fits, as compared
    alphabeta: list[ComparedFit] = field(default_factory=list)  # its fitted α-β fits, as compared
    paths: list[Path] = field(default_factory=list)  # every run's directory; [path] when empty
    # Each run's fits (several runs: hockney and alphabeta above stay empty, since no run's fits
    # stand for the side).
    hockney_runs: list[list[ComparedFit]] = field(default_factory=list)
    alphabeta_runs: list[list[ComparedFit]] = field(default_factory=list)
    # Each kernel's samples, one time per launch and point (mpiatlas.compare.kernels; ``run`` with several runs).
    kernels: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return max(1, len(self.paths))


@dataclass
class Matching:
    keys: list[str]  # the axes matched on, ``bytes`` included
    settings: dict[str, tuple[Any, Any]]  # compared setting: axis -> (value in A, value in B)
    ignored: list[str]  # axes dropped on request


@dataclass
class KernelComparison:
    """One kernel's tables of A and B compared: as :class:`Comparison` for IMB, without fits."""

    kernel: str
    matching: Matching
    sizes: pl.DataFrame
    only_a: pl.DataFrame
    only_b: pl.DataFrame
    lone_a: pl.DataFrame
    lone_b: pl.DataFrame

    @property
    def series_keys(self) -> list[str]:
        return [k for k in self.matching.keys if k != "bytes"]


@dataclass
class Comparison:
    a: Side
    b: Side
    matching: Matching
    sizes: pl.DataFrame  # one row per matched key: medians, ratio, CI, verdict
    only_a: pl.DataFrame  # series (keys minus bytes) with data in A only; B's cell statuses there
    only_b: pl.DataFrame
    fits: pl.DataFrame  # model parameter differences (mpiatlas.compare.fits)
    lone_a: pl.DataFrame  # sizes of series both have, measured in A only (keys)
    lone_b: pl.DataFrame
    kernels: list[KernelComparison] = field(default_factory=list)  # kernels both sides measured

    def all_sizes(self) -> pl.DataFrame:
        """Every judged point, IMB's and the kernels' (verdict, ratio and its CI): what a gate reads."""
        cols = ["verdict", "ratio", "ratio_ci_low", "ratio_ci_high"]
        return pl.concat([f.select(cols) for f in (self.sizes, *(k.sizes for k in self.kernels)) if f.height],
                         how="vertical_relaxed") if self.sizes.height or self.kernels else self.sizes.select(cols)

    @property
    def series_keys(self) -> list[str]:
        return [k for k in self.matching.keys if k != "bytes"]

    @property
    def two_level(self) -> bool:
        """Several runs on each side: run-to-run variation is in the CI."""
        return self.a.runs >= 2 and self.b.runs >= 2


# -- loading -------------------------------------------------------------------------------------


def _locate(path: Path) -> tuple[Path, Path | None]:
    """The samples file and the fits directory of a results dir, a tidy dir or a samples file."""
    if path.is_file():
        if path.suffix != ".parquet":
            raise CompareError(f"{path}: expected a results directory or an {layout.IMB_SAMPLES} file")
        return path, None
    if not path.is_dir():
        raise CompareError(f"{path}: no such directory or file (expected a results directory, e.g. results/<name>)")
    for samples, fits in ((path / "tidy" / layout.IMB_SAMPLES, path / "fits"),
                          (path / layout.IMB_SAMPLES, path.parent / "fits")):
        # A kernel-only campaign may have no IMB samples: its kernel tables are next to where they would be.
        if samples.is_file() or any(samples.parent.glob(layout.kernel_table("*"))):
            return samples, fits if fits.is_dir() else None
    raise CompareError(f"{path}: neither tidy/{layout.IMB_SAMPLES} nor {layout.IMB_SAMPLES} found "
                       "(expected a finished campaign's results directory or a tidy/imported directory)")


def _read_fits_file(path: Path) -> JsonValue:
    """A fits file's document, checked against its schema (a bad one is named with its key); None
    when there is no such file."""
    if not path.is_file():
        return None
    try:
        document: JsonValue = read(path)
    except FitsFileError as exc:
        raise CompareError(str(exc)) from exc
    return document


def _hockney_fits(path: Path) -> list[ComparedFit]:
    """The fitted entries of a hockney.json, as compared."""
    document = _read_fits_file(path)
    try:
        records = hockney_records(document, str(path)) if document is not None else []
    except FitRecordError as exc:
        raise CompareError(str(exc)) from exc
    return [hockney_compared(r) for r in records if r.fitted]


def _alphabeta_fits(path: Path) -> list[ComparedFit]:
    """The fitted entries of an alphabeta.json's ``fits``, as compared."""
    document = _read_fits_file(path)
    try:
        fits = AlphaBetaFits.from_json(document, str(path)).fits if document is not None else ()
    except FitRecordError as exc:
        raise CompareError(str(exc)) from exc
    return [alphabeta_compared(f) for f in fits if f.fitted]


def load_side(path: str | Path, name: str) -> Side:
    """Read one side; raises :class:`CompareError` naming the file when it is missing or malformed."""
    path = Path(path)
    samples_path, fits = _locate(path)
    try:
        samples = pl.read_parquet(samples_path) if samples_path.is_file() else _NO_SAMPLES
    except Exception as exc:  # polars raises several kinds for a broken file
        raise CompareError(f"{samples_path}: not a readable parquet table ({exc})") from exc
    if samples.height == 0:  # tidy writes every program's table, a column-less one when it has no rows
        samples = _NO_SAMPLES
    missing = [c for c in ("benchmark", "bytes", TIME, "status") if c not in samples.columns]
    if missing:
        raise CompareError(f"{samples_path}: not an IMB samples table (missing columns: {', '.join(missing)})")
    cells_path = samples_path.parent / layout.CELLS_TABLE
    cells = pl.read_parquet(cells_path) if cells_path.is_file() else None
    # IMB options, knob set and placement over nodes tell cells apart: matched on like any axis.
    side = Side(name, path, with_series_axes(usable_samples(samples)), cells)
    try:
        side.kernels = load_kernel_samples(samples_path.parent)
    except ValueError as exc:
        raise CompareError(str(exc)) from exc
    if fits is not None:
        side.hockney = _hockney_fits(fits / layout.HOCKNEY_FIT)
        side.alphabeta = _alphabeta_fits(fits / layout.ALPHABETA_FIT)
    return side


def load_runs(paths: Sequence[str | Path], name: str) -> Side:
    """One side made of several runs of a campaign (each a results directory or samples file).

    The runs' samples are stacked with a ``run`` column (0, 1, …); their cells are matched as one
    campaign's. Fits stay per run (``hockney_runs``, ``alphabeta_runs``) and are not pooled: each
    run has its own λ and B, and their spread over runs is compared
    (mpiatlas.compare.fits.fit_differences_over_runs).
    """
    if not paths:
        raise CompareError(f"side {name}: no results directory given")
    runs = [load_side(p, name) for p in paths]
    if len(runs) == 1:
        return runs[0]
    seen: dict[Path, Path] = {}
    for r in runs:
        key = r.path.resolve()
        if key in seen:
            raise CompareError(f"{r.path}: given twice on side {name} (a run counted twice fakes replication)")
        seen[key] = r.path
    samples = pl.concat([r.samples.with_columns(pl.lit(i, dtype=pl.Int32).alias("run")) for i, r in enumerate(runs)],
                        how="diagonal_relaxed")
    cells = [r.cells for r in runs if r.cells is not None]
    return Side(name, runs[0].path, samples, pl.concat(cells, how="diagonal_relaxed") if cells else None,
                paths=[r.path for r in runs], hockney_runs=[r.hockney for r in runs],
                alphabeta_runs=[r.alphabeta for r in runs], kernels=stacked_runs([r.kernels for r in runs]))


# -- matching ------------------------------------------------------------------------------------


def _carried(df: pl.DataFrame, candidates: tuple[str, ...] = AXES) -> list[str]:
    axes = [a for a in candidates if a in df.columns and df.get_column(a).null_count() < df.height]
    if "stack" in axes and "label" in axes:
        axes.remove("label")  # derived from stack/transport/mapping: matching on it adds nothing
    return axes


def match_axes(a: pl.DataFrame, b: pl.DataFrame, ignore: list[str] | tuple[str, ...] = (), *,
               axes: tuple[str, ...] = AXES) -> Matching:
    """The axes to match on, the compared settings and the ignored axes (see the module doc).

    ``axes``: the candidates (IMB's, or the kernels' :data:`mpiatlas.compare.kernels.KERNEL_AXES`). A
    size-less kernel (matsum, Jacobi) has a null ``bytes`` throughout: it is still the last key."""
    unknown = [x for x in ignore if x not in (*AXES, *KERNEL_AXES) or x == "bytes"]
    if unknown:
        raise CompareError(f"--ignore {', '.join(unknown)}: not an axis; allowed: "
                           f"{', '.join(dict.fromkeys(x for x in (*AXES, *KERNEL_AXES) if x != 'bytes'))}")
    carried_b = set(_carried(b, axes))
    shared = [x for x in _carried(a, axes) if x in carried_b]
    if axes is not AXES and "bytes" not in shared and "bytes" in a.columns and "bytes" in b.columns:
        shared.append("bytes")
    settings: dict[str, tuple[Any, Any]] = {}
    for axis in shared:
        va, vb = a.get_column(axis).drop_nulls().unique(), b.get_column(axis).drop_nulls().unique()
        # Never the benchmark or the size: PingPong against Allreduce compares nothing.
        if axis not in ("benchmark", "bytes") and va.len() == 1 and vb.len() == 1 and va[0] != vb[0]:
            settings[axis] = (va[0], vb[0])
    keys = [x for x in shared if x not in settings and x not in ignore]
    if "benchmark" not in keys or "bytes" not in keys:
        raise CompareError("the two sides share no benchmark/size axes to match on")
    return Matching(keys, settings, [x for x in ignore if x in shared])


def _cast_keys(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Key columns with one type on both sides (Int32 vs Int64, categorical labels)."""
    return df.with_columns(pl.col(k).cast(pl.Int64) if df.schema[k].is_integer() else pl.col(k).cast(pl.String)
                           for k in keys)


def _normalised(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The key columns (one type on both sides), the time, the run and the cell without its repetition."""
    cols = [pl.col(k) for k in keys]
    df = _cast_keys(df, keys)
    # The cell without its repetition: the unit that must not be pooled with another.
    cell = pl.col("cell").str.replace(r"/rep\d+$", "") if "cell" in df.columns else pl.lit(None, dtype=pl.String)
    run = pl.col("run").cast(pl.Int32) if "run" in df.columns else pl.lit(0, dtype=pl.Int32)
    return df.select(*cols, pl.col(TIME).cast(pl.Float64), run.alias("run"), cell.alias("cell")).filter(
        pl.col(TIME).is_finite())


def _check_unambiguous(df: pl.DataFrame, keys: list[str], side: Side, dropped: list[str]) -> None:
    """Refuse keys that name several cells on one side (only possible after ``--ignore``)."""
    if not dropped or df.get_column("cell").null_count() == df.height:
        return
    series = [k for k in keys if k != "bytes"]
    many = df.group_by(series).agg(pl.col("cell").n_unique().alias("n")).filter(pl.col("n") > 1)
    if many.height:
        raise CompareError(f"{side.path}: ignoring {', '.join(dropped)} makes {many.height} series stand for "
                           "several cells each (their repetitions would be pooled); ignore fewer axes")



def one_side_only(ga: pl.DataFrame, gb: pl.DataFrame, series: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Series (keys minus the size) with data on one side only, with their number of sizes."""
    sa = ga.group_by(series).agg(pl.len().alias("sizes"))
    sb = gb.group_by(series).agg(pl.len().alias("sizes"))
    return (sa.join(sb, on=series, how="anti", nulls_equal=True).sort(series),
            sb.join(sa, on=series, how="anti", nulls_equal=True).sort(series))


def with_other_status(only: pl.DataFrame, other_cells: pl.DataFrame | None, series: list[str]) -> pl.DataFrame:
    """``only`` plus ``other_status``: how the other side's cells of the series ended when none
    gave samples (e.g. ``failed``, ``timeout``), so a regression that crashes is not just "missing"."""
    keys = [k for k in series if other_cells is not None and k in other_cells.columns]
    if other_cells is None or not keys or "status" not in other_cells.columns or only.height == 0:
        return only.with_columns(pl.lit(None, dtype=pl.String).alias("other_status"))
    failed = (_cast_keys(other_cells, keys).filter(pl.col("status") != "ok")
              .group_by(keys).agg(pl.col("status").unique().sort().str.join(", ").alias("other_status")))
    return only.join(failed, on=keys, how="left", nulls_equal=True)


def unmatched_sizes(ga: pl.DataFrame, gb: pl.DataFrame, keys: list[str], only: pl.DataFrame) -> pl.DataFrame:
    """Sizes of ``ga`` without a partner in ``gb``, in series both sides have (``only``: the series of one side)."""
    series = [k for k in keys if k != "bytes"]
    lone = ga.join(gb, on=keys, how="anti", nulls_equal=True)
    return lone.join(only, on=series, how="anti", nulls_equal=True).select(keys).sort(keys)


# -- the whole comparison ------------------------------------------------------------------------


def compare(a: Side, b: Side, *, ignore: list[str] | tuple[str, ...] = (), seed: int = SEED) -> Comparison:
    """Match ``a`` and ``b`` and compute every size's ratio and every shared fit's differences."""
    for side in (a, b):
        if side.samples.height == 0 and not side.kernels:
            raise CompareError(f"{side.path}: no usable IMB samples or kernel records (no cell finished with status ok)")
    kernels = [_compare_kernel(name, a, b, ignore, seed) for name in a.kernels if name in b.kernels]
    if a.samples.height == 0 or b.samples.height == 0:
        if not kernels:
            raise CompareError(f"{a.path} vs {b.path}: the two sides share neither IMB samples nor a kernel")
        return _kernels_only(a, b, kernels)
    matching, (ga, gb), (only_a, only_b) = _matched(a.samples, b.samples, a, b, ignore, AXES)
    series = [k for k in matching.keys if k != "bytes"]
    if a.runs > 1 or b.runs > 1:  # each run's fits: their spread over the runs is compared
        fits = fit_differences_over_runs((_fit_runs(a, "hockney"), _fit_runs(b, "hockney")),
                                         (_fit_runs(a, "alphabeta"), _fit_runs(b, "alphabeta")), series)
    else:
        fits = fit_differences((a.hockney, b.hockney), (a.alphabeta, b.alphabeta), series)
    two_level = a.runs >= 2 and b.runs >= 2
    return Comparison(a, b, matching, size_table(ga, gb, matching.keys, seed=seed, two_level=two_level),
                      only_a, only_b, fits,
                      unmatched_sizes(ga, gb, matching.keys, only_a), unmatched_sizes(gb, ga, matching.keys, only_b),
                      kernels)


Pair = tuple[pl.DataFrame, pl.DataFrame]


def _matched(df_a: pl.DataFrame, df_b: pl.DataFrame, a: Side, b: Side, ignore: list[str] | tuple[str, ...],
             axes: tuple[str, ...]) -> tuple[Matching, Pair, Pair]:
    """The matching of two sample frames, each side's grouped times and its series on one side only."""
    try:
        matching = match_axes(df_a, df_b, ignore, axes=axes)
    except CompareError as exc:
        raise CompareError(f"{a.path} vs {b.path}: {exc}") from exc
    frames = []
    for side, df in ((a, df_a), (b, df_b)):
        norm = _normalised(df, matching.keys)
        _check_unambiguous(norm, matching.keys, side, list(matching.ignored))
        frames.append(grouped_times(norm, matching.keys))
    ga, gb = frames
    series = [k for k in matching.keys if k != "bytes"]
    only_a, only_b = one_side_only(ga, gb, series)
    # The cells table names a kernel cell by the same stack/transport/mapping/nodes/np/benchmark.
    status = [k for k in series if k in AXES and k not in ("algorithm",)] if axes is not AXES else series
    only_a = with_other_status(only_a, b.cells, status)
    only_b = with_other_status(only_b, a.cells, status)
    return matching, (ga, gb), (only_a, only_b)


def _compare_kernel(name: str, a: Side, b: Side, ignore: list[str] | tuple[str, ...], seed: int) -> KernelComparison:
    """One kernel's samples of A and B matched and judged as IMB's are."""
    ignore = [x for x in ignore if x in KERNEL_AXES]
    matching, (ga, gb), (only_a, only_b) = _matched(a.kernels[name], b.kernels[name], a, b, ignore, KERNEL_AXES)
    two_level = a.runs >= 2 and b.runs >= 2
    return KernelComparison(name, matching, size_table(ga, gb, matching.keys, seed=seed, two_level=two_level),
                            only_a, only_b, unmatched_sizes(ga, gb, matching.keys, only_a),
                            unmatched_sizes(gb, ga, matching.keys, only_b))


def _kernels_only(a: Side, b: Side, kernels: list[KernelComparison]) -> Comparison:
    """A comparison without IMB samples on a side: empty IMB tables, the kernels' comparisons."""
    keys = ["benchmark", "bytes"]
    empty = grouped_times(_normalised(_NO_SAMPLES, keys), keys)
    sizes = size_table(empty, empty, keys)
    none = empty.select(keys)
    return Comparison(a, b, Matching(keys, {}, []), sizes, none.drop("bytes").with_columns(
        pl.lit(0, dtype=pl.UInt32).alias("sizes")), none.drop("bytes").with_columns(pl.lit(0, dtype=pl.UInt32).alias("sizes")),
        fit_differences(([], []), ([], []), []), none, none, kernels)


def _fit_runs(side: Side, model: str) -> list[list[ComparedFit]]:
    """A side's fits of ``model`` per run (a one-run side: its one run)."""
    runs = side.hockney_runs if model == "hockney" else side.alphabeta_runs
    return runs or [side.hockney if model == "hockney" else side.alphabeta]


def tidy_record(cmp: Comparison) -> dict[str, Any]:
    """The comparison as one JSON-ready object (inputs, matching, sizes, one-side-only, fits)."""
    def rows(df: pl.DataFrame) -> list[dict[str, Any]]:
        return [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
                for r in df.to_dicts()]

    return {
        "a": str(cmp.a.path), "b": str(cmp.b.path), "confidence": CONFIDENCE, "n_resamples": N_RESAMPLES,
        "a_runs": [str(p) for p in cmp.a.paths or [cmp.a.path]],
        "b_runs": [str(p) for p in cmp.b.paths or [cmp.b.path]],
        "method": "two-level bootstrap (runs, then repetitions)" if cmp.two_level else "bootstrap over repetitions",
        "run_to_run_variation_in_ci": cmp.two_level, "min_reps": MIN_REPS, "min_runs": MIN_RUNS,
        "matched_on": cmp.matching.keys,
        "compared_settings": {k: {"a": v[0], "b": v[1]} for k, v in cmp.matching.settings.items()},
        "ignored": cmp.matching.ignored, "sizes": rows(cmp.sizes), "only_a": rows(cmp.only_a),
        "only_b": rows(cmp.only_b), "sizes_only_a": rows(cmp.lone_a), "sizes_only_b": rows(cmp.lone_b),
        "fits": rows(cmp.fits),
        "kernels": {k.kernel: {"matched_on": k.matching.keys,
                               "compared_settings": {x: {"a": v[0], "b": v[1]} for x, v in k.matching.settings.items()},
                               "ignored": k.matching.ignored, "sizes": rows(k.sizes), "only_a": rows(k.only_a),
                               "only_b": rows(k.only_b), "sizes_only_a": rows(k.lone_a),
                               "sizes_only_b": rows(k.lone_b)} for k in cmp.kernels},
    }

