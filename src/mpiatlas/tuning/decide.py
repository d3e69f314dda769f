"""The tuning decision: per stack x transport x collective, which algorithm for which sizes and P.

One criterion names the candidate, the project's: :func:`mpiatlas.models.best_algorithm.best_algorithms`
(the lowest median per point). Tune adds a gate, not a second ranking: the candidate replaces the
stack's default only where the 95 % bootstrap CI of t_candidate / t_default
(:func:`mpiatlas.stats.ratios.size_table`, the same ratio CI ``mpiatlas compare`` reports) lies below 1,
with at least :data:`mpiatlas.stats.ratios.MIN_REPS` repetitions per side, and the median gain
1 - t_candidate / t_default is at least ``min_gain``. Everywhere else the default stays.

Ranges. A measured message size ``b_k`` stands for ``[b_k, b_{k+1} - 1]`` (up to the next measured
size; the last one only for itself), a measured process count likewise: that is how Open MPI's rule
tables read (a rule holds from its size up to the next rule). Adjacent sizes with the same choice
merge into one range; adjacent process counts whose size ranges are the same merge likewise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from mpiatlas.stats.aggregate import summarize
from mpiatlas.stats.ratios import FASTER, MIN_REPS, RatioRow, grouped_times, ratio_rows, size_table
from mpiatlas.models.best_algorithm import DEFAULT, best_algorithms
from mpiatlas.tuning import samples

# ``source``: the program measured (tuning.samples: IMB, or the coll kernel where a stack has no IMB).
SERIES: tuple[str, ...] = ("stack", "stack_kind", "stack_version", "transport", "benchmark", "source")
POINT: tuple[str, ...] = (*SERIES, "np", "bytes")
# The point as aggregate.summarize keeps it (stack_kind/stack_version follow from the stack).
BEST_KEYS: tuple[str, ...] = ("stack", "transport", "benchmark", "np", "bytes")
# Axes that must take one value per series: two mappings (or knob sets) of one stack are two
# different decisions, which one tuning file cannot hold.
SINGLE: tuple[str, ...] = ("mapping", "nodes", "options", "knobs")
DEFAULT_MIN_GAIN = 0.05


class TuneError(ValueError):
    """Bad input: the message names the file and the key, and what was expected."""


@dataclass(frozen=True)
class Point:
    """One measured (P, size): the choice, the candidate it weighed and why."""

    np: int
    bytes: int
    algorithm: str  # the choice: the candidate or DEFAULT
    candidate: str  # the fastest by median (best_algorithms); DEFAULT when the default is
    ratio: float | None  # median t_candidate / t_default
    ci_low: float | None
    ci_high: float | None
    n_default: int
    n_candidate: int
    reason: str

    @property
    def gain(self) -> float | None:
        return None if self.ratio is None else 1.0 - self.ratio


@dataclass(frozen=True)
class SizeRange:
    lo: int
    hi: int
    algorithm: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Block:
    """Process counts [p_lo, p_hi] sharing one list of size ranges."""

    p_lo: int
    p_hi: int
    nps: tuple[int, ...]  # the measured process counts merged here
    ranges: tuple[SizeRange, ...]


@dataclass
class SeriesDecision:
    stack: str
    kind: str
    version: str  # numeric, e.g. "4.1.4" (from stack_version)
    transport: str
    collective: str  # lower case: "bcast"
    benchmark: str  # as IMB names it: "Bcast"
    points: list[Point]
    blocks: list[Block] = field(default_factory=list)
    source: str = samples.IMB  # which program measured it (the validation campaign runs the same)

    @property
    def tuned(self) -> bool:
        return any(r.algorithm != DEFAULT for b in self.blocks for r in b.ranges)


@dataclass
class Decision:
    source: Path
    min_gain: float
    series: list[SeriesDecision]


_VERSION = re.compile(r"\d+(?:\.\d+)+")


def numeric_version(text: str | None) -> str:
    """``4.1.4``, ``5.0.11`` or ``2021.16`` out of whatever the stack reported."""
    match = _VERSION.search(text or "")
    return match.group(0) if match else ""


def load_samples(path: Path) -> tuple[Path, pl.DataFrame]:
    """Usable samples of a results directory (or its tidy dir): IMB's, else the coll kernel's."""
    try:
        return path, samples.load(path)
    except samples.SamplesError as exc:
        raise TuneError(str(exc)) from exc


def collective_series(samples: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Rows of series that forced at least one algorithm; each must have default cells."""
    forced = samples.filter(pl.col("algorithm") != DEFAULT).select(SERIES).unique()
    if forced.height == 0:
        raise TuneError(f"{path}: no forced collective algorithm in the samples (column 'algorithm' is "
                        "'default' everywhere): nothing to tune")
    rows = samples.join(forced, on=list(SERIES), how="semi", nulls_equal=True)
    with_default = rows.filter(pl.col("algorithm") == DEFAULT).select(SERIES).unique()
    lacking = forced.join(with_default, on=list(SERIES), how="anti", nulls_equal=True)
    if lacking.height:
        names = ", ".join(f"{r['stack']}/{r['transport']}/{r['benchmark']}" for r in lacking.to_dicts())
        raise TuneError(f"{path}: no cells with algorithm 'default' for {names}: the default is the "
                        "baseline every gain is measured against; measure it in the same campaign")
    for axis in SINGLE:
        if axis in rows.columns:
            many = rows.group_by(SERIES).agg(pl.col(axis).n_unique().alias("n")).filter(pl.col("n") > 1)
            if many.height:
                r = many.row(0, named=True)
                raise TuneError(f"{path}: {r['stack']}/{r['transport']}/{r['benchmark']} has several values of "
                                f"{axis!r}; one tuning file holds one {axis}: tune each separately")
    return rows


def _reason(cand: str, figures: RatioRow | None, min_gain: float) -> tuple[str, str]:
    """(choice, why) for one point: its candidate and the size table's figures of it against the default."""
    if cand == DEFAULT:
        return DEFAULT, "the default is the fastest by median"
    n_a, n_b = (figures.n_a, figures.n_b) if figures is not None else (0, 0)
    if figures is None or min(n_a, n_b) < MIN_REPS:
        return DEFAULT, f"too few repetitions ({n_a} default, {n_b} {cand}; need {MIN_REPS})"
    lo, hi = figures.ratio_ci_low, figures.ratio_ci_high
    if figures.verdict != FASTER:
        return DEFAULT, f"{cand}: CI of t/t_default [{lo:.3f}, {hi:.3f}] does not lie below 1"
    gain = 1.0 - figures.ratio
    if gain < min_gain:
        return DEFAULT, f"{cand}: gain {gain:.1%} below the minimum {min_gain:.0%}"
    return cand, f"{cand}: {gain:.1%} faster, CI of t/t_default [{lo:.3f}, {hi:.3f}]"


def point_table(rows: pl.DataFrame, min_gain: float) -> pl.DataFrame:
    """Per point: candidate (best by median), ratio to default with its CI, choice and reason."""
    keys = list(POINT)
    best = best_algorithms(summarize(rows), BEST_KEYS)
    times = rows.select(*keys, "algorithm", "t_usec", "run").filter(pl.col("t_usec").is_finite())
    ga = grouped_times(times.filter(pl.col("algorithm") == DEFAULT), keys)
    cand_rows = times.join(best.select(*BEST_KEYS, "best"), on=list(BEST_KEYS), nulls_equal=True).filter(
        pl.col("algorithm") == pl.col("best"))
    gb = grouped_times(cand_rows, keys)
    sizes = size_table(ga, gb, keys)
    points = times.select(keys).unique().join(best.select(*BEST_KEYS, "best"), on=list(BEST_KEYS), nulls_equal=True)
    table = points.join(sizes, on=keys, how="left", nulls_equal=True)
    # Points without a default measurement cannot be judged: they keep the default.
    table = table.filter(pl.col("n_a").is_not_null() | (pl.col("best") == DEFAULT))
    choices = [_reason(str(cand), figures, min_gain) for cand, figures in zip(table["best"], ratio_rows(table))]
    return table.with_columns(pl.Series("choice", [c for c, _ in choices], dtype=pl.String),
                              pl.Series("reason", [w for _, w in choices], dtype=pl.String)).sort(keys)


def _points(df: pl.DataFrame) -> list[Point]:
    out = []
    for r in df.to_dicts():
        same = r["best"] == DEFAULT
        out.append(Point(np=int(r["np"]), bytes=int(r["bytes"]), algorithm=r["choice"], candidate=r["best"],
                         ratio=None if same else r["ratio"], ci_low=None if same else r["ratio_ci_low"],
                         ci_high=None if same else r["ratio_ci_high"], n_default=int(r["n_a"] or 0),
                         n_candidate=int(r["n_b"] or 0), reason=r["reason"]))
    return out


def size_ranges(points: list[Point]) -> tuple[SizeRange, ...]:
    """Adjacent sizes (of one P) with the same choice, as ranges up to the next measured size."""
    pts = sorted(points, key=lambda p: p.bytes)
    ranges: list[SizeRange] = []
    start = 0
    for i in range(1, len(pts) + 1):
        if i == len(pts) or pts[i].algorithm != pts[start].algorithm:
            hi = pts[i].bytes - 1 if i < len(pts) else pts[i - 1].bytes
            ranges.append(SizeRange(pts[start].bytes, hi, pts[start].algorithm, tuple(pts[start:i])))
            start = i
    return tuple(ranges)


def blocks(points: list[Point]) -> list[Block]:
    """Adjacent process counts whose size ranges (bounds and choices) are the same, merged."""
    by_np: dict[int, list[Point]] = {}
    for p in points:
        by_np.setdefault(p.np, []).append(p)
    nps = sorted(by_np)
    shapes = [size_ranges(by_np[n]) for n in nps]

    def shape(ranges: tuple[SizeRange, ...]) -> list[tuple[int, int, str]]:
        return [(r.lo, r.hi, r.algorithm) for r in ranges]

    out: list[Block] = []
    start = 0
    for i in range(1, len(nps) + 1):
        if i == len(nps) or shape(shapes[i]) != shape(shapes[start]):
            p_hi = nps[i] - 1 if i < len(nps) else nps[i - 1]
            merged = tuple(SizeRange(r.lo, r.hi, r.algorithm,
                                     tuple(pt for s in shapes[start:i] for pt in s[k].points))
                           for k, r in enumerate(shapes[start]))
            out.append(Block(nps[start], p_hi, tuple(nps[start:i]), merged))
            start = i
    return out


def decide(path: str | Path, min_gain: float = DEFAULT_MIN_GAIN) -> Decision:
    """The decision for every series of the results at ``path`` that forced an algorithm."""
    if not 0 <= min_gain < 1:
        raise TuneError(f"min_gain: expected a fraction in [0, 1) such as 0.05, got {min_gain}")
    path = Path(path)
    _, samples = load_samples(path)
    rows = collective_series(samples, path)
    table = point_table(rows, min_gain)
    series: list[SeriesDecision] = []
    for key, part in table.group_by(list(SERIES), maintain_order=True):
        stack, kind, version, transport, benchmark, source = key
        pts = _points(part)
        series.append(SeriesDecision(str(stack), str(kind), numeric_version(str(version)), str(transport),
                                     str(benchmark).lower(), str(benchmark), pts, blocks(pts), str(source)))
    series.sort(key=lambda s: (s.stack, s.transport, s.collective))
    return Decision(path, min_gain, series)
