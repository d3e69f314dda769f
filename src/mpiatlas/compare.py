"""Two campaigns compared: per matched cell and size, the ratio B/A of medians with a bootstrap CI.

Matching. Cells of A and B are matched on every axis both sides carry (a column present and not
all-null on both: the cell id's coordinates minus the repetition, plus the IMB ``processes``/
``group``/``mode`` and the message size). An axis that takes one value on each side, different
values on the two sides (``transport`` shm in A, ofi-tcp in B) is the *compared setting*: it is
reported, not matched on, so "the same cells over another transport" line up. ``ignore`` drops
further axes from the key; a key that then names several cells on one side is refused (pooling
different cells silently would fake repetitions). ``label`` is only an axis for data without
``stack`` (imported logs), where it is the only identity there is.

Statistics. Per matched key the repetitions of each side are its samples (one row per repetition
in a campaign; one per run in imported logs). The ratio is median(B) / median(A); its 95 % CI is a
percentile bootstrap that resamples the repetitions of A and of B independently (999 resamples,
seeded), vectorised as :mod:`mpiatlas.aggregate` does it: groups with the same (n_A, n_B) share
one seeded set of index rows, and the median of a resample of sorted values is a gather at the
middle positions of the sorted index row.

A size is *significant* when the CI excludes 1, and only judged with at least
:data:`MIN_REPS` repetitions per side. Why: with n = 3 the percentile bootstrap cannot produce an
interval wider than [min B / max A, max B / min A], so it "excludes 1" whenever the samples do not
overlap, which happens 10 % of the time for identical distributions (2 / C(6, 3)); no
distribution-free 95 % statement exists for 3 vs 3. Simulated false-positive rates of this CI for
identical lognormal samples (4000 sizes): n = 3: 9.7 %, 4: 8.3 %, 5: 2.8 %, 6: 3.7 %, 10: 3.6 %.

Several runs per side. The repetitions of one run do not carry the run-to-run variation of a
shared machine (a whole campaign shifts by ~20 % at small sizes now and then), so with one run
per side two identical campaigns were flagged at 0-97 % of sizes on a 2-vCPU VM. A side may
therefore be several results directories of the same campaign (its *runs*); with at least two
runs on each side the CI is the two-level bootstrap of :mod:`mpiatlas.compare_stats` (runs, then
repetitions within each drawn run), widened for few runs, and judged with at least
:data:`MIN_RUNS` runs and :data:`MIN_REPS` repetitions in all per side. With one run on a side
the one-level CI above is used, and the summary says run-to-run variation is not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from mpiatlas import layout
from mpiatlas.aggregate import CONFIDENCE, N_RESAMPLES, SEED, usable_samples
from mpiatlas.compare_fits import fit_differences, fit_differences_over_runs
from mpiatlas.compare_stats import two_level_cis

# Candidate matching axes, in display order (``bytes`` last: a cell's sizes).
AXES: tuple[str, ...] = ("label", "stack", "transport", "mapping", "nodes", "np", "benchmark", "algorithm",
                         "processes", "group", "mode", "bytes")
MIN_REPS = 5
MIN_RUNS = 2
TIME = "t_usec"
# Groups per bootstrap chunk: bounds the (groups x resamples) float arrays to ~16 MB each.
CHUNK = 2048

SLOWER, FASTER, SAME, TOO_FEW = "slower", "faster", "no significant change", "too few repetitions"
TOO_FEW_RUNS = "too few runs"
NOT_JUDGED = (TOO_FEW, TOO_FEW_RUNS)
ONE_RUN_NOTE = ("one run per side: run-to-run variation is not in the CI (two identical campaigns can differ "
                "\"significantly\"); repeat each campaign and pass the runs, --a A1 A2 A3 --b B1 B2 B3, to include it")


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
    hockney: list[dict[str, Any]] = field(default_factory=list)
    alphabeta: list[dict[str, Any]] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)  # every run's directory; [path] when empty
    # Each run's fits (several runs: hockney and alphabeta above stay empty, since no run's fits
    # stand for the side).
    hockney_runs: list[list[dict[str, Any]]] = field(default_factory=list)
    alphabeta_runs: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return max(1, len(self.paths))


@dataclass
class Matching:
    keys: list[str]  # the axes matched on, ``bytes`` included
    settings: dict[str, tuple[Any, Any]]  # compared setting: axis -> (value in A, value in B)
    ignored: list[str]  # axes dropped on request


@dataclass
class Comparison:
    a: Side
    b: Side
    matching: Matching
    sizes: pl.DataFrame  # one row per matched key: medians, ratio, CI, verdict
    only_a: pl.DataFrame  # series (keys minus bytes) with data in A only; B's cell statuses there
    only_b: pl.DataFrame
    fits: pl.DataFrame  # model parameter differences (mpiatlas.compare_fits)
    lone_a: pl.DataFrame  # sizes of series both have, measured in A only (keys)
    lone_b: pl.DataFrame

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
        if samples.is_file():
            return samples, fits if fits.is_dir() else None
    raise CompareError(f"{path}: neither tidy/{layout.IMB_SAMPLES} nor {layout.IMB_SAMPLES} found "
                       "(expected a finished campaign's results directory or a tidy/imported directory)")


def _read_json_list(path: Path, key: str | None) -> list[dict[str, Any]]:
    import json

    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: not readable JSON ({exc})") from exc
    items = data.get(key, []) if key and isinstance(data, dict) else data
    if not isinstance(items, list):
        raise CompareError(f"{path}: expected a list of fits{f' under {key!r}' if key else ''}")
    return [f for f in items if isinstance(f, dict) and "error" not in f]


def load_side(path: str | Path, name: str) -> Side:
    """Read one side; raises :class:`CompareError` naming the file when it is missing or malformed."""
    path = Path(path)
    samples_path, fits = _locate(path)
    try:
        samples = pl.read_parquet(samples_path)
    except Exception as exc:  # polars raises several kinds for a broken file
        raise CompareError(f"{samples_path}: not a readable parquet table ({exc})") from exc
    missing = [c for c in ("benchmark", "bytes", TIME, "status") if c not in samples.columns]
    if missing:
        raise CompareError(f"{samples_path}: not an IMB samples table (missing columns: {', '.join(missing)})")
    cells_path = samples_path.parent / layout.CELLS_TABLE
    cells = pl.read_parquet(cells_path) if cells_path.is_file() else None
    side = Side(name, path, usable_samples(samples), cells)
    if fits is not None:
        side.hockney = _read_json_list(fits / layout.HOCKNEY_FIT, None)
        side.alphabeta = _read_json_list(fits / layout.ALPHABETA_FIT, "fits")
    return side


def load_runs(paths: Sequence[str | Path], name: str) -> Side:
    """One side made of several runs of a campaign (each a results directory or samples file).

    The runs' samples are stacked with a ``run`` column (0, 1, …); their cells are matched as one
    campaign's. Fits stay per run (``hockney_runs``, ``alphabeta_runs``) and are not pooled: each
    run has its own λ and B, and their spread over runs is compared
    (mpiatlas.compare_fits.fit_differences_over_runs).
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
                alphabeta_runs=[r.alphabeta for r in runs])


# -- matching ------------------------------------------------------------------------------------


def _carried(df: pl.DataFrame) -> list[str]:
    axes = [a for a in AXES if a in df.columns and df.get_column(a).null_count() < df.height]
    if "stack" in axes and "label" in axes:
        axes.remove("label")  # derived from stack/transport/mapping: matching on it adds nothing
    return axes


def match_axes(a: pl.DataFrame, b: pl.DataFrame, ignore: list[str] | tuple[str, ...] = ()) -> Matching:
    """The axes to match on, the compared settings and the ignored axes (see the module doc)."""
    unknown = [x for x in ignore if x not in AXES or x == "bytes"]
    if unknown:
        raise CompareError(f"--ignore {', '.join(unknown)}: not an axis; allowed: "
                           f"{', '.join(x for x in AXES if x != 'bytes')}")
    carried_b = set(_carried(b))
    shared = [x for x in _carried(a) if x in carried_b]
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


def grouped_times(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per key: the sorted finite times (``t``) of its repetitions (all runs pooled), their
    number and median, the number of runs with data and the times per run (``t_runs``)."""
    per_run = df.group_by([*keys, "run"]).agg(pl.col(TIME).sort().alias("t_run"))
    runs = per_run.group_by(keys).agg(pl.col("t_run").sort_by("run").alias("t_runs"),
                                      pl.len().cast(pl.Int32).alias("runs"))
    pooled = df.group_by(keys).agg(pl.col(TIME).sort().alias("t"), pl.len().cast(pl.Int32).alias("n"),
                                   pl.col(TIME).median().alias("median"))
    return pooled.join(runs, on=keys, how="left", nulls_equal=True)


# -- the bootstrap ratio -------------------------------------------------------------------------


def _middle_positions(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per resample of ``n`` values, the positions (in the sorted values) its median is the mean of."""
    drawn = np.sort(rng.integers(0, n, (N_RESAMPLES, n)), axis=1)
    return drawn[:, (n - 1) // 2], drawn[:, n // 2]


def ratio_cis(a: list[np.ndarray], b: list[np.ndarray], *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap CI of median(b_i) / median(a_i) for each pair of sorted sample arrays.

    The repetitions of each side are resampled independently. Pairs with the same sizes share one
    index draw seeded by (seed, n_a, n_b): results do not depend on which other pairs are present.
    NaN where a side has fewer than two samples (nothing to resample).
    """
    na = np.array([x.size for x in a], dtype=np.int64)
    nb = np.array([x.size for x in b], dtype=np.int64)
    low, high = np.full(na.size, np.nan), np.full(na.size, np.nan)
    alpha = (1 - CONFIDENCE) / 2
    for n_a, n_b in sorted(set(zip(na.tolist(), nb.tolist()))):
        if n_a < 2 or n_b < 2:
            continue
        rng = np.random.default_rng([seed, n_a, n_b])
        pa, pb = _middle_positions(n_a, rng), _middle_positions(n_b, rng)
        members = np.flatnonzero((na == n_a) & (nb == n_b))
        for start in range(0, members.size, CHUNK):
            idx = members[start:start + CHUNK]
            va = np.stack([a[i] for i in idx])  # (groups, n_a), rows ascending
            vb = np.stack([b[i] for i in idx])
            med_a = (va[:, pa[0]] + va[:, pa[1]]) / 2  # (groups, resamples)
            med_b = (vb[:, pb[0]] + vb[:, pb[1]]) / 2
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.quantile(med_b / med_a, [alpha, 1 - alpha], axis=1)
            low[idx], high[idx] = q[0], q[1]
    return low, high


def verdicts(n_a: np.ndarray, n_b: np.ndarray, low: np.ndarray, high: np.ndarray,
             runs: tuple[np.ndarray, np.ndarray] | None = None) -> list[str]:
    """Per size: slower/faster/no change, or why it is not judged. ``runs`` (runs with data per
    side) only in the several-runs comparison, where fewer than :data:`MIN_RUNS` is not judged."""
    out: list[str] = []
    ra, rb = runs if runs is not None else (np.full(len(n_a), MIN_RUNS), np.full(len(n_a), MIN_RUNS))
    for na, nb, lo, hi, r_a, r_b in zip(n_a, n_b, low, high, ra, rb):
        if min(r_a, r_b) < MIN_RUNS:
            out.append(TOO_FEW_RUNS)
        elif min(na, nb) < MIN_REPS or not (np.isfinite(lo) and np.isfinite(hi)):
            out.append(TOO_FEW)
        elif lo > 1:
            out.append(SLOWER)
        elif hi < 1:
            out.append(FASTER)
        else:
            out.append(SAME)
    return out


def _arrays(lists: pl.Series) -> list[np.ndarray]:
    """A list column as numpy arrays, split from one flat array (no per-row Python conversion)."""
    flat = lists.explode().to_numpy().astype(float)
    ends = np.cumsum(lists.list.len().to_numpy())
    return np.split(flat, ends[:-1]) if len(ends) else []


def _run_arrays(lists: pl.Series) -> list[list[np.ndarray]]:
    """A list-of-lists column (times per run) as lists of numpy arrays."""
    return [[np.asarray(r, dtype=float) for r in row] for row in lists.to_list()]


def size_table(ga: pl.DataFrame, gb: pl.DataFrame, keys: list[str], *, seed: int = SEED,
               two_level: bool = False) -> pl.DataFrame:
    """Matched keys of two :func:`grouped_times` frames: n, runs, medians, ratio B/A, its CI, verdict.

    ``two_level``: the sides are several runs each; the CI resamples runs, then repetitions."""
    joined = ga.join(gb, on=keys, how="inner", suffix="_b", nulls_equal=True).sort(keys)
    if two_level:
        ratio = (joined["median_b"] / joined["median"]).to_numpy()
        low, high = two_level_cis(_run_arrays(joined["t_runs"]), _run_arrays(joined["t_runs_b"]), ratio, seed=seed)
        runs = (joined["runs"].to_numpy(), joined["runs_b"].to_numpy())
    else:
        ta, tb = (_arrays(joined.get_column(c)) for c in ("t", "t_b"))
        low, high = ratio_cis(ta, tb, seed=seed)
        runs = None
    verdict = verdicts(joined["n"].to_numpy(), joined["n_b"].to_numpy(), low, high, runs)
    return joined.select(
        *keys, pl.col("n").alias("n_a"), "n_b", pl.col("runs").alias("runs_a"), "runs_b",
        pl.col("median").alias("median_a_usec"),
        pl.col("median_b").alias("median_b_usec"), (pl.col("median_b") / pl.col("median")).alias("ratio"),
    ).with_columns(
        pl.Series("ratio_ci_low", low), pl.Series("ratio_ci_high", high),
        pl.Series("verdict", verdict, dtype=pl.String),
        pl.Series("significant", [v in (SLOWER, FASTER) for v in verdict], dtype=pl.Boolean),
    )


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
        if side.samples.height == 0:
            raise CompareError(f"{side.path}: no usable IMB samples (no cell finished with status ok)")
    try:
        matching = match_axes(a.samples, b.samples, ignore)
    except CompareError as exc:
        raise CompareError(f"{a.path} vs {b.path}: {exc}") from exc
    frames = []
    for side in (a, b):
        df = _normalised(side.samples, matching.keys)
        _check_unambiguous(df, matching.keys, side, list(matching.ignored))
        frames.append(grouped_times(df, matching.keys))
    ga, gb = frames
    series = [k for k in matching.keys if k != "bytes"]
    only_a, only_b = one_side_only(ga, gb, series)
    only_a, only_b = with_other_status(only_a, b.cells, series), with_other_status(only_b, a.cells, series)
    if a.runs > 1 or b.runs > 1:  # each run's fits: their spread over the runs is compared
        fits = fit_differences_over_runs((_fit_runs(a, "hockney"), _fit_runs(b, "hockney")),
                                         (_fit_runs(a, "alphabeta"), _fit_runs(b, "alphabeta")), series)
    else:
        fits = fit_differences((a.hockney, b.hockney), (a.alphabeta, b.alphabeta), series)
    two_level = a.runs >= 2 and b.runs >= 2
    return Comparison(a, b, matching, size_table(ga, gb, matching.keys, seed=seed, two_level=two_level),
                      only_a, only_b, fits,
                      unmatched_sizes(ga, gb, matching.keys, only_a), unmatched_sizes(gb, ga, matching.keys, only_b))


def _fit_runs(side: Side, model: str) -> list[list[dict[str, Any]]]:
    """A side's fits of ``model`` per run (a one-run side: its one run)."""
    runs = side.hockney_runs if model == "hockney" else side.alphabeta_runs
    return runs or [side.hockney if model == "hockney" else side.alphabeta]


def regressions(sizes: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """Sizes significantly slower by more than ``threshold`` (0.05 = 5 %): the CI's lower end above 1 + threshold."""
    return sizes.filter((pl.col("verdict") == SLOWER) & (pl.col("ratio_ci_low") > 1 + threshold))


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
    }

