"""Piecewise Hockney model ``T(s) = λ + s/B`` for point-to-point message times.

Why not one least-squares line: over log-spaced sizes (1 B … 4 MiB) the few large sizes carry
almost all the absolute error, so the intercept ends up fitted to them and can go negative
(a seed report got λ = −97.9 µs). Instead:

* every segment minimises the *relative* error Σ((λ + s/B − T)/T)², so a 1 µs point counts as
  much as a 300 µs one, with the bounds λ ≥ 1e-6 µs and 1/B ≥ 0 (exact bounded 2-parameter
  solve; the tests check it against ``scipy.optimize.lsq_linear``);
* real curves change regime (eager → rendezvous switch, inline/cache thresholds), so the sizes
  are cut into contiguous segments (≥ 3 sizes each, at most 5) by dynamic programming, and the
  number of segments is chosen by a penalised criterion on the relative residuals,
  n·ln(RSS/n) + 2·(3k − 1)·ln n: BIC with a doubled penalty, because the breakpoints are searched
  over every position (on 40 synthetic single-regime runs with 3 % noise, plain BIC put a
  spurious breakpoint in 7, the doubled penalty in 0). λ is the first (small-message) segment's,
  B the last (asymptotic) segment's;
* 0-byte rows are no-op timings: dropped from the fit, reported separately as ``zero_byte_us``;
* an isolated spike (a size whose median time is > 25 % above both neighbours, e.g. the 256 B
  row of the csd3 ib ompi3 PingPong: 2.46 µs between 1.16 and 1.47) is a transient, not a
  regime: it would dominate the relative RSS and hide real breakpoints, so it is excluded and
  listed in ``excluded_bytes``;
* several samples per size (repetitions, e.g. several IMB runs) are reduced to the per-size
  median. 95 % CIs come from a seeded bootstrap: over the repetitions when every size has ≥ 2,
  otherwise over the fit's relative residuals. The segmentation is kept fixed in the bootstrap,
  so the CIs are conditional on the detected regimes;
* two bandwidth figures, each with one fixed definition (:mod:`mpiatlas.models.asymptote`):
  ``peak_bandwidth_MBps``, the highest per-size median s/t, and ``asymptotic_bandwidth_MBps``, the
  s/t at the largest size. Neither changes meaning with the curve's shape. The *model*
  may: a curve that peaks in cache and falls to a 3-size memory-bound plateau gets its last segment
  from the plateau sizes (B of that segment = their median bandwidth, λ fitted with it fixed;
  ``plateau_from_bytes``), the sizes before it segmented as above;
* intervals over launches: the launch is the unit that varies (mapping, frequency, the hypervisor,
  the library's choices at init), so with ``launches`` naming each sample's launch and at least
  ``MIN_LAUNCHES`` of them, every figure is also computed per launch (λ of the first segment's sizes,
  s/t at the peak size and at the largest size) and its 95 % interval is Student's t
  over those per-launch values around the estimate (``ci_method`` "launches"; the bandwidths' on
  the log scale, :func:`_t_interval`). With fewer launches
  the intervals come from the bootstrap above and say that they leave the launches' variation out;
* how sure the fit is (``ci_warning``, in words, None when every check passes): λ or B with a
  95 % interval reaching beyond ±25 % of its estimate (``CI_REL_TOL``, :mod:`mpiatlas.models.hockney_trust`), an estimate outside its
  own interval, λ pinned on its lower bound (no resolvable latency: not a result). Intervals from
  fewer than ``MIN_LAUNCHES`` launches are no warning but say what they leave out
  (mpiatlas.report.formatting.interval_scope, shown beside every interval). A seed campaign printed B = 2,396 MB/s with the
  interval [2,334, 25,618] and no warning; each of these checks would have flagged it.

Units: sizes in bytes, times in µs, so 1/B in µs per byte and B in bytes/µs = MB/s (10^6 B).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from mpiatlas.models.fit_records import (CELL_KEYS, CellFields, Fit, HockneyRecord, HockneyResidual, HockneySegment,
                                         JsonValue)
from mpiatlas.models.asymptote import Asymptote, asymptotic_window, bandwidth_figures, find_asymptote
from mpiatlas.models.hockney_trust import LATENCY_FLOOR_US, trust_warnings

# Point-to-point benchmarks whose table has a one-message time. Uniband/Biband only print
# bandwidth and message rate (no time column), Multi-* tables time concurrent pairs, and the
# collectives/Sendrecv/Exchange are not a single message: none of them is a Hockney curve.
HOCKNEY_BENCHMARKS: tuple[str, ...] = ("PingPong", "PingPing")

# The two bandwidth estimands of every curve (JSON keys ``<figure>_MBps`` and ``<figure>_ci_MBps``)
# and their names in words; mpiatlas.models.asymptote defines them.
BANDWIDTH_FIGURES: tuple[str, ...] = ("asymptotic_bandwidth", "peak_bandwidth")
FIGURE_NAMES: dict[str, str] = {"asymptotic_bandwidth": "asymptotic B", "peak_bandwidth": "peak B"}

MIN_POINTS_PER_SEGMENT = 3
MAX_SEGMENTS = 5
N_BOOT = 1000
SPIKE_FACTOR = 1.25
# Intervals over launches need a spread between launches: from this many launches on (Student's t
# with 2 degrees of freedom at 3) the intervals are over launches, below it within one launch.
MIN_LAUNCHES = 3
BIC_PENALTY = 2.0  # multiplies BIC's ln(n) per parameter, see the module docstring
# The bootstrap resamples a size's repetitions only from 3 on: the median of 2 resampled values
# takes just 3 values, and its percentile interval often misses the fit's own estimate.
MIN_REPS_TO_RESAMPLE = 3
# Relative residuals below ~1e-4 are rounding (IMB prints 2 decimals); floor the RSS so BIC does
# not chase float noise on exact synthetic data.
_RSS_FLOOR_PER_POINT = 1e-8

FloatArray = npt.NDArray[np.float64]


@dataclass
class HockneyFit:
    latency_us: float
    latency_ci_us: tuple[float, float]
    # The two bandwidth estimands (mpiatlas.models.asymptote): s/t at the largest size
    # (``asymptotic_bytes``) and the highest per-size median s/t (at ``peak_bytes``).
    asymptotic_bandwidth_MBps: float
    asymptotic_bandwidth_ci_MBps: tuple[float, float]
    peak_bandwidth_MBps: float
    peak_bandwidth_ci_MBps: tuple[float, float]
    breakpoints_bytes: list[int]
    # The model's view: an unbounded (flat) segment's bandwidth is inf; to_dict writes it null.
    segments: tuple[HockneySegment, ...]
    n_sizes: int
    residuals: tuple[HockneyResidual, ...]
    peak_bytes: int | None = None
    asymptotic_bytes: int | None = None
    zero_byte_us: float | None = None
    excluded_bytes: list[int] = field(default_factory=list)
    # "launches" (Student's t over per-launch figures), else the bootstrap's "repetitions" or "residuals".
    ci_method: str = "residuals"
    n_launches: int = 0
    n_boot: int = N_BOOT
    # Why λ or a bandwidth cannot be taken at face value, in words (see :func:`trust_warnings`), or None.
    ci_warning: str | None = None
    # The model's last segment sits on the memory-bound plateau from this size (a curve that peaks in cache).
    plateau_from_bytes: int | None = None
    plateau_n_sizes: int | None = None

    def segment_of(self, sizes: npt.ArrayLike) -> npt.NDArray[np.intp]:
        """Index of the segment that models each size: the last one starting at or below it (the
        first segment also covers the sizes below its first fitted size)."""
        s = np.atleast_1d(np.asarray(sizes, dtype=float))
        starts = np.array([seg.from_bytes or 0 for seg in self.segments], dtype=float)
        return np.clip(np.searchsorted(starts, s, side="right") - 1, 0, len(starts) - 1)

    def predict(self, sizes: npt.ArrayLike, segment: int | None = None) -> FloatArray:
        """Model time (µs) per size: λ + s/B of the segment that models it (:meth:`segment_of`).

        ``segment``: evaluate that one segment's line instead (a chart draws each segment up to
        the next breakpoint). The one place the piecewise model is evaluated: the fit's
        residuals, the kernel models and the report's model curves all come through here.
        """
        s = np.atleast_1d(np.asarray(sizes, dtype=float))
        lam = np.array([seg.latency_us for seg in self.segments], dtype=float)
        bw = np.array([math.inf if seg.bandwidth_MBps is None else seg.bandwidth_MBps for seg in self.segments],
                      dtype=float)
        inv_b = 1.0 / bw  # 1/inf = 0: a flat (pure latency) segment
        idx = self.segment_of(s) if segment is None else np.full(s.shape, segment, dtype=np.intp)
        return lam[idx] + s * inv_b[idx]

    @classmethod
    def from_dict(cls, d: JsonValue) -> HockneyFit:
        """The fit back from its JSON view (:meth:`to_dict`, or an entry of hockney.json): read as a
        :class:`HockneyRecord` (errors name the key), then :meth:`from_record`. A file written before
        the two bandwidth estimands is refused by name, not guessed at."""
        if not isinstance(d, dict):
            raise ValueError(f"a Hockney fit must be a JSON object, got {type(d).__name__}")
        if d.get("error") is None and "asymptotic_bandwidth_MBps" not in d:
            old = " (it has 'bandwidth_MBps': written before the two fixed estimands; fit again)" \
                if "bandwidth_MBps" in d else ""
            raise ValueError(f"a Hockney fit needs 'asymptotic_bandwidth_MBps'{old}")
        # to_dict's view names no cell: the benchmark is not the model's business here.
        return cls.from_record(HockneyRecord.from_json({"benchmark": "", **d}, "Hockney fit"))

    @classmethod
    def from_record(cls, r: HockneyRecord) -> HockneyFit:
        """The model of a fits record (:func:`record_of`'s inverse): a null bandwidth is an unbounded
        one; a record without segments is one regime (its λ and asymptotic bandwidth). Raises
        ValueError naming the segment when the model itself is unusable."""
        if r.error is not None:
            raise ValueError(f"not fitted: {r.error}")
        raw = r.segments or (HockneySegment(latency_us=r.latency_us if r.latency_us is not None else math.nan,
                                            bandwidth_MBps=r.asymptotic_bandwidth_MBps, from_bytes=0,
                                            n_sizes=r.n_sizes),)
        segments = sorted((_usable_segment(i, g) for i, g in enumerate(raw)), key=lambda g: g.from_bytes or 0)

        def pair(v: tuple[float | None, float | None], null: float) -> tuple[float, float]:
            return (null if v[0] is None else v[0], null if v[1] is None else v[1])

        return cls(
            latency_us=segments[0].latency_us, latency_ci_us=pair(r.latency_ci_us, math.nan),
            asymptotic_bandwidth_MBps=math.inf if r.asymptotic_bandwidth_MBps is None else r.asymptotic_bandwidth_MBps,
            asymptotic_bandwidth_ci_MBps=pair(r.asymptotic_bandwidth_ci_MBps, math.inf),
            peak_bandwidth_MBps=math.inf if r.peak_bandwidth_MBps is None else r.peak_bandwidth_MBps,
            peak_bandwidth_ci_MBps=pair(r.peak_bandwidth_ci_MBps, math.inf),
            breakpoints_bytes=[g.from_bytes or 0 for g in segments[1:]], segments=tuple(segments), n_sizes=r.n_sizes,
            residuals=tuple(replace(x, rel_err=math.nan if x.rel_err is None else x.rel_err) for x in r.residuals),
            peak_bytes=r.peak_bytes, asymptotic_bytes=r.asymptotic_bytes, zero_byte_us=r.zero_byte_us,
            excluded_bytes=list(r.excluded_bytes), ci_method=r.ci_method or "residuals", n_launches=r.n_launches or 0,
            ci_warning=r.ci_warning, plateau_from_bytes=r.plateau_from_bytes, plateau_n_sizes=r.plateau_n_sizes)

    def to_dict(self) -> dict[str, JsonValue]:
        """JSON-ready view (no NaN/inf: an unbounded bandwidth becomes None)."""
        return {
            "latency_us": _json_float(self.latency_us),
            "latency_ci_us": [_json_float(v) for v in self.latency_ci_us],
            "peak_bandwidth_MBps": _json_float(self.peak_bandwidth_MBps),
            "peak_bandwidth_ci_MBps": [_json_float(v) for v in self.peak_bandwidth_ci_MBps],
            "peak_bytes": self.peak_bytes,
            "asymptotic_bandwidth_MBps": _json_float(self.asymptotic_bandwidth_MBps),
            "asymptotic_bandwidth_ci_MBps": [_json_float(v) for v in self.asymptotic_bandwidth_ci_MBps],
            "asymptotic_bytes": self.asymptotic_bytes,
            "breakpoints_bytes": list(self.breakpoints_bytes),
            "segments": [seg.to_json() for seg in self.segments],
            "n_sizes": self.n_sizes,
            "zero_byte_us": _json_float(self.zero_byte_us),
            "excluded_bytes": list(self.excluded_bytes),
            "ci_method": self.ci_method,
            "n_launches": self.n_launches,
            "ci_warning": self.ci_warning,
            "plateau_from_bytes": self.plateau_from_bytes,
            "plateau_n_sizes": self.plateau_n_sizes,
            "residuals": [{"bytes": r.bytes, "measured_us": r.measured_us, "predicted_us": r.predicted_us,
                           "rel_err": r.rel_err} for r in self.residuals],
        }


# -- one segment ---------------------------------------------------------------------------


def _fit_line(s: FloatArray, t: FloatArray) -> tuple[float, float, float]:
    """Bounded min of Σ((λ + g·s)/t − 1)² over λ ≥ floor, g ≥ 0; returns (λ, g, rss).

    A convex 2-parameter problem: the optimum is the unconstrained one if feasible, else the
    better of the two boundary rays (λ = floor, or g = 0), each a clipped 1-D solve.
    """
    a, b = 1.0 / t, s / t
    scale = float(b.max()) or 1.0  # conditioning: g is ~1e-4 µs/B against λ ~ 1 µs
    design = np.column_stack([a, b / scale])
    (lam, g_scaled), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    g = g_scaled / scale
    if lam < LATENCY_FLOOR_US or g < 0.0:
        on_floor = (LATENCY_FLOOR_US, max(0.0, float(b @ (1.0 - LATENCY_FLOOR_US * a) / (b @ b))))
        flat = (max(LATENCY_FLOOR_US, float(a.sum() / (a @ a))), 0.0)
        lam, g = min(on_floor, flat, key=lambda p: _rss(s, t, *p))
    return float(lam), float(g), _rss(s, t, lam, g)


def _fit_latency(s: FloatArray, t: FloatArray, g: float) -> float:
    """λ minimising Σ((λ + g·s)/t − 1)² with the slope g fixed (the plateau's 1/B), λ ≥ floor."""
    w = 1.0 / (t * t)
    return max(LATENCY_FLOOR_US, float(((t - g * s) * w).sum() / w.sum()))


def _stacked_lstsq() -> Any:
    """The gufunc behind ``np.linalg.lstsq`` (LAPACK gelsd), which solves a stack of systems in
    one call, or None on a NumPy without it. The public wrapper refuses stacks; the gufunc solves
    each system of the stack exactly as the wrapper solves it alone (tests/test_hockney.py)."""
    # A private module, which numpy.linalg imports for itself: every NumPy 1.x/2.x has it.
    return getattr(getattr(np.linalg, "_umath_linalg", None), "lstsq", None)


def _raise_lstsq_error(err: str, flag: int) -> None:
    raise np.linalg.LinAlgError("SVD did not converge in Linear Least Squares")


def _fit_lines(s: FloatArray, t: FloatArray) -> tuple[FloatArray, FloatArray]:
    """:func:`_fit_line`'s (λ, g) for every row of ``t`` (one bootstrap replicate per row), the
    same numbers: the same element-wise steps on all rows, one stacked call of the same LAPACK
    solve, and :func:`_fit_line` itself for the rows whose optimum lies on a bound. One call
    instead of a thousand keeps the bootstrap from being most of a fit's time."""
    solve = _stacked_lstsq()
    if solve is None:
        rows = [_fit_line(s, row) for row in t]
        return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    a, b = 1.0 / t, s / t
    scale = b.max(axis=1)
    scale[scale == 0.0] = 1.0  # as ``float(b.max()) or 1.0``
    design = np.stack([a, b / scale[:, None]], axis=-1)
    rcond = np.finfo(np.float64).eps * max(design.shape[-2:])  # np.linalg.lstsq's rcond=None
    with np.errstate(call=_raise_lstsq_error, invalid="call", over="ignore", divide="ignore", under="ignore"):
        x, *_ = solve(design, np.ones_like(t)[..., None], rcond, signature="ddd->ddid")
    lam, g = x[:, 0, 0].copy(), x[:, 1, 0] / scale
    for i in np.flatnonzero((lam < LATENCY_FLOOR_US) | (g < 0.0)):
        lam[i], g[i], _ = _fit_line(s, t[i])
    return lam, g


def _rss(s: FloatArray, t: FloatArray, lam: float, g: float) -> float:
    rel = (lam + g * s - t) / t
    return float(rel @ rel)


def _isolated_spikes(t: FloatArray) -> npt.NDArray[np.bool_]:
    """Sizes whose time exceeds SPIKE_FACTOR × both neighbours (the first size: its one neighbour).

    The last size is never a spike: T doubling at the top of the range is the bandwidth regime.
    """
    spike = np.zeros(len(t), dtype=bool)
    if len(t) < 2:
        return spike
    spike[0] = t[0] > SPIKE_FACTOR * t[1]
    spike[1:-1] = t[1:-1] > SPIKE_FACTOR * np.maximum(t[:-2], t[2:])
    return spike


# -- segmentation ------------------------------------------------------------------------


def _segment_costs(s: FloatArray, t: FloatArray) -> dict[tuple[int, int], float]:
    """RSS of the best line over every admissible run of sizes [i, j)."""
    n, m = len(s), MIN_POINTS_PER_SEGMENT
    costs = {}
    for i in range(n):
        for j in range(i + m, n + 1):
            _, g, rss = _fit_line(s[i:j], t[i:j])
            # Only the first regime may be flat (pure latency): a later segment with no per-byte
            # cost would claim infinite bandwidth, which noise can fake but physics cannot.
            if i == 0 or g > 0.0:
                costs[(i, j)] = rss
    return costs


def _best_partitions(n: int, costs: dict[tuple[int, int], float], max_k: int) -> dict[int, tuple[float, list[int]]]:
    """For each segment count k: (total RSS, segment start indices) by dynamic programming."""
    inf = math.inf
    # best[k][j]: min RSS covering sizes [0, j) with k segments; back[k][j]: start of the last one.
    best = [[inf] * (n + 1) for _ in range(max_k + 1)]
    back = [[-1] * (n + 1) for _ in range(max_k + 1)]
    best[0][0] = 0.0
    for k in range(1, max_k + 1):
        for j in range(1, n + 1):
            for i in range(j):
                cost = costs.get((i, j))
                if cost is not None and best[k - 1][i] + cost < best[k][j]:
                    best[k][j], back[k][j] = best[k - 1][i] + cost, i
    out: dict[int, tuple[float, list[int]]] = {}
    for k in range(1, max_k + 1):
        if best[k][n] < inf:
            starts, j = [], n
            for kk in range(k, 0, -1):
                j = back[kk][j]
                starts.append(j)
            out[k] = (best[k][n], starts[::-1])
    return out


def _choose_segments(s: FloatArray, t: FloatArray) -> list[int]:
    """Segment start indices minimising n·ln(RSS/n) + BIC_PENALTY·(3k − 1)·ln n (k segments)."""
    n = len(s)
    max_k = max(1, min(MAX_SEGMENTS, n // MIN_POINTS_PER_SEGMENT))
    partitions = _best_partitions(n, _segment_costs(s, t), max_k)

    def bic(k: int) -> float:
        rss = max(partitions[k][0], n * _RSS_FLOOR_PER_POINT)
        return n * math.log(rss / n) + BIC_PENALTY * (3 * k - 1) * math.log(n)

    return partitions[min(partitions, key=bic)][1]


def _fit_segments(s: FloatArray, t: FloatArray, starts: Sequence[int]) -> list[tuple[float, float]]:
    ends = [*starts[1:], len(s)]
    return [_fit_line(s[i:j], t[i:j])[:2] for i, j in zip(starts, ends)]


# -- bootstrap ---------------------------------------------------------------------------


def _bootstrap_times(
    s: FloatArray,
    t_med: FloatArray,
    samples: list[FloatArray],
    starts: list[int],
    params: list[tuple[float, float]],
    rng: np.random.Generator,
) -> tuple[FloatArray, str]:
    """N_BOOT replicates of the per-size times (rows), and how they were drawn."""
    if all(len(x) >= MIN_REPS_TO_RESAMPLE for x in samples):
        # Resample each size's repetitions, then take the median as the fit does.
        t_star = np.column_stack([np.median(rng.choice(x, size=(N_BOOT, len(x))), axis=1) for x in samples])
        return t_star, "repetitions"
    fitted = _piecewise(s, starts, params)
    rel = t_med / fitted - 1.0
    n_par = 2 * len(starts)
    rel = (rel - rel.mean()) * math.sqrt(len(s) / max(len(s) - n_par, 1))  # df-corrected
    return np.maximum(fitted * (1.0 + rng.choice(rel, size=(N_BOOT, len(s)))), 1e-9), "residuals"


def _replicate_params(s: FloatArray, t_star: FloatArray, starts: list[int]) -> FloatArray:
    """λ of the first segment of every replicate (a segment's fit depends on its own sizes only)."""
    first = slice(starts[0], starts[1] if len(starts) > 1 else len(s))
    lams, _ = _fit_lines(s[first], t_star[:, first])
    return lams


def _percentile_ci(values: FloatArray) -> tuple[float, float]:
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def _replicate_figures(s: FloatArray, t_star: FloatArray, peak: int) -> tuple[FloatArray, FloatArray]:
    """(peak, asymptotic) bandwidth of every replicate row of times, by the fixed definitions: s/t at
    the curve's peak size and at its largest size (a median when ASYMPTOTE_SIZES > 1)."""
    window = asymptotic_window(len(s))
    return s[peak] / t_star[:, peak], np.median(s[window] / t_star[:, window], axis=1)


def _piecewise(s: FloatArray, starts: Sequence[int], params: Sequence[tuple[float, float]]) -> FloatArray:
    """The model *while it is being fitted* (segments as index runs of the sorted sizes, 1/B as
    g): the bootstrap's baseline. A finished fit is evaluated by :meth:`HockneyFit.predict`."""
    out = np.empty_like(s)
    ends = [*starts[1:], len(s)]
    for (i, j), (lam, g) in zip(zip(starts, ends), params):
        out[i:j] = lam + g * s[i:j]
    return out


# -- public API --------------------------------------------------------------------------


def fit_hockney(sizes: Iterable[float], times: Iterable[float], *, launches: Iterable[Hashable] | None = None,
                seed: int = 0) -> HockneyFit:
    """Fit a piecewise Hockney model to (size in bytes, time in µs) samples.

    Several samples per size are repetitions. ``launches`` names the launch each sample came from
    (a raw file, a cell's repetition): from MIN_LAUNCHES launches on the intervals are over launches
    (see the module docstring). Raises ValueError with fewer than 3 distinct non-zero sizes, a
    non-positive / non-finite time, or ``launches`` of another length than the samples.
    """
    s_all = np.asarray(list(sizes), dtype=float)
    t_all = np.asarray(list(times), dtype=float)
    if s_all.shape != t_all.shape:
        raise ValueError(f"sizes and times differ in length ({s_all.size} vs {t_all.size})")
    launch_all = None if launches is None else np.asarray([str(x) for x in launches], dtype=object)
    if launch_all is not None and launch_all.shape != s_all.shape:
        raise ValueError(f"launches and sizes differ in length ({launch_all.size} vs {s_all.size})")
    zero = t_all[s_all == 0]
    keep = s_all > 0
    s_all, t_all = s_all[keep], t_all[keep]
    launch_all = None if launch_all is None else launch_all[keep]
    if not np.all(np.isfinite(t_all)) or np.any(t_all <= 0):
        raise ValueError("times must be finite and > 0 µs for non-zero sizes")
    s = np.unique(s_all)
    samples = [t_all[s_all == v] for v in s]
    t_med = np.array([np.median(x) for x in samples])
    spikes = _isolated_spikes(t_med)
    excluded = [int(v) for v in s[spikes]]
    s, t_med = s[~spikes], t_med[~spikes]
    samples = [x for x, bad in zip(samples, spikes) if not bad]
    if len(s) < MIN_POINTS_PER_SEGMENT:
        raise ValueError(f"need at least {MIN_POINTS_PER_SEGMENT} distinct non-zero sizes, got {len(s)}")

    asym = find_asymptote(s, t_med)
    starts, params, plateau = _segments_and_asymptote(s, t_med, asym)
    figures = bandwidth_figures(s, t_med)
    peak = figures.peak_index
    per_launch = None if launch_all is None else _launch_curves(s, s_all, t_all, launch_all)
    n_launches = 0 if per_launch is None else per_launch.shape[0]
    if per_launch is not None and n_launches >= MIN_LAUNCHES:
        lam_k = _launch_latencies(s, per_launch, starts)
        peak_k, asym_k = _replicate_figures(s, per_launch, peak)
        lam_ci = _t_interval(params[0][0], lam_k)
        peak_ci = _t_interval(figures.peak_MBps, peak_k, log=True)
        asym_ci = _t_interval(figures.asymptotic_MBps, asym_k, log=True)
        method = "launches"
    else:  # the bootstrap within the launches: only where there are too few launches to go over
        t_star, method = _bootstrap_times(s, t_med, samples, starts, params, np.random.default_rng(seed))
        lam_ci = _percentile_ci(_replicate_params(s, t_star, starts))
        # The figures are measured s/t, not the model's: residual replicates (model × resampled relative
        # residuals) are moved onto the measured medians, so an interval is around its own estimate.
        t_fig = t_star if method == "repetitions" else t_med * (t_star / _piecewise(s, starts, params))
        peak_star, asym_star = _replicate_figures(s, t_fig, peak)
        peak_ci, asym_ci = _percentile_ci(peak_star), _percentile_ci(asym_star)

    ends = [*starts[1:], len(s)]
    fit = HockneyFit(
        latency_us=params[0][0],
        latency_ci_us=lam_ci,
        asymptotic_bandwidth_MBps=figures.asymptotic_MBps,
        asymptotic_bandwidth_ci_MBps=asym_ci,
        peak_bandwidth_MBps=figures.peak_MBps,
        peak_bandwidth_ci_MBps=peak_ci,
        breakpoints_bytes=[int(s[i]) for i in starts[1:]],
        segments=tuple(
            HockneySegment(from_bytes=int(s[i]), to_bytes=int(s[j - 1]), latency_us=lam, bandwidth_MBps=_inverse(g),
                           n_sizes=j - i)
            for (i, j), (lam, g) in zip(zip(starts, ends), params)
        ),
        n_sizes=len(s),
        residuals=(),
        peak_bytes=int(s[peak]),
        asymptotic_bytes=int(s[figures.asymptotic_index]),
        zero_byte_us=float(np.median(zero)) if zero.size else None,
        excluded_bytes=excluded,
        ci_method=method,
        n_launches=n_launches,
        plateau_from_bytes=int(s[asym.plateau_start]) if plateau is not None else None,
        plateau_n_sizes=asym.plateau_n_sizes if plateau is not None else None,
    )
    fit.residuals = tuple(HockneyResidual(bytes=int(v), measured_us=float(m), predicted_us=float(p),
                                          rel_err=float(p / m - 1.0))
                          for v, m, p in zip(s, t_med, fit.predict(s)))
    fit.ci_warning = "; ".join(trust_warnings(fit)) or None
    return fit


def _launch_curves(s: FloatArray, s_all: FloatArray, t_all: FloatArray, launch_all: npt.NDArray[Any]) -> FloatArray:
    """One row per launch: its median time at each size of ``s`` (NaN where it has none)."""
    names = list(dict.fromkeys(launch_all.tolist()))
    out = np.full((len(names), len(s)), np.nan)
    col = {float(v): j for j, v in enumerate(s)}
    for i, name in enumerate(names):
        mine = launch_all == name
        for v in np.unique(s_all[mine]):
            j = col.get(float(v))
            if j is not None:
                out[i, j] = float(np.median(t_all[mine & (s_all == v)]))
    return out


def _launch_latencies(s: FloatArray, curves: FloatArray, starts: list[int]) -> FloatArray:
    """λ of each launch's own first-segment sizes (NaN for a launch with fewer than 2 of them)."""
    first = slice(starts[0], starts[1] if len(starts) > 1 else len(s))
    out = np.full(curves.shape[0], np.nan)
    for i, row in enumerate(curves[:, first]):
        ok = np.isfinite(row)
        if ok.sum() >= 2:
            out[i] = _fit_line(s[first][ok], row[ok])[0]
    return out


def _t_interval(estimate: float, per_launch: FloatArray, *, log: bool = False) -> tuple[float, float]:
    """estimate ± t(0.975, n − 1) · sd / √n over the launches' own values (NaN ignored); NaN bounds
    when fewer than MIN_LAUNCHES launches have a value.

    ``log``: on the log scale, estimate ×/÷ exp(t · sd(log) / √n), for a bandwidth: positive, and its
    launches differ by factors (a launch whose ranks landed on other cores runs 3× faster in cache),
    so a linear interval would reach below zero. λ's interval is linear, its lower bound held at the
    fit's floor (so that λ's interval reaching the floor is said)."""
    values = per_launch[np.isfinite(per_launch) & (per_launch > 0 if log else True)]
    n = values.size
    if n < MIN_LAUNCHES:
        return (math.nan, math.nan)
    # scipy (~0.5 s to import) only where launches give an interval: reading or printing a fit (the
    # campaign's closing lines, the report) needs none of it.
    from scipy import stats

    t_crit = float(stats.t.ppf(0.975, n - 1))
    if log:
        factor = math.exp(t_crit * float(np.std(np.log(values), ddof=1)) / math.sqrt(n))
        return (estimate / factor, estimate * factor)
    half = t_crit * float(np.std(values, ddof=1)) / math.sqrt(n)
    return (max(estimate - half, LATENCY_FLOOR_US), estimate + half)


def _segments_and_asymptote(
    s: FloatArray, t: FloatArray, asym: Asymptote
) -> tuple[list[int], list[tuple[float, float]], int | None]:
    """Segment starts, their (λ, 1/B), and the plateau's first index when B is the plateau's.

    A curve that peaks in cache: the sizes before the plateau are segmented as any curve, then the
    plateau is the last segment with B fixed to its median bandwidth. Other curves (or too few
    sizes before the plateau to segment): the segmentation alone decides, as before.
    """
    q = asym.plateau_start
    if not asym.has_plateau or q < MIN_POINTS_PER_SEGMENT:
        starts = _choose_segments(s, t)
        return starts, _fit_segments(s, t, starts), None
    head = _choose_segments(s[:q], t[:q])
    g = 1.0 / asym.plateau_MBps
    params = [*_fit_segments(s[:q], t[:q], head), (_fit_latency(s[q:], t[q:], g), g)]
    return [*head, q], params, q


def fit_hockney_table(
    df: pl.DataFrame,
    keys: list[str],
    *,
    benchmarks: Sequence[str] = HOCKNEY_BENCHMARKS,
    seed: int = 0,
) -> list[HockneyRecord]:
    """Fit every (keys…, benchmark) group of a samples table (columns bytes, t_usec, benchmark).

    Rows with a non-"ok" status or no time are ignored; benchmarks outside ``benchmarks`` are
    skipped (see HOCKNEY_BENCHMARKS). Groups too small to fit are returned with an ``error``
    (typed records: :class:`mpiatlas.models.fit_records.HockneyRecord`).
    """
    usable = df.filter(
        pl.col("benchmark").is_in(list(benchmarks)) & pl.col("t_usec").is_not_null() & pl.col("bytes").is_not_null()
    )
    if "status" in usable.columns:
        usable = usable.filter(pl.col("status") == "ok")
    if "cell_status" in usable.columns:
        # Raw rows of invalid cells (wrong transport, mis-pinned ranks) are kept, never fitted.
        usable = usable.filter(pl.col("cell_status") == "ok")
    out: list[HockneyRecord] = []
    for key, group in usable.group_by([*keys, "benchmark"], maintain_order=True):
        cell = _cell(keys, key)
        try:
            fit = fit_hockney(group["bytes"].to_list(), group["t_usec"].to_list(), launches=launch_ids(group),
                              seed=seed)
        except ValueError as exc:
            out.append(replace(HockneyRecord(**cell), error=str(exc)))
            continue
        out.append(record_of(fit, cell))
    return out


def _cell(keys: Sequence[str], values: Sequence[object]) -> CellFields:
    """The :class:`Fit` cell fields of a group key (the cell key columns, then the benchmark)."""
    unknown = [k for k in keys if k not in CELL_KEYS]
    if unknown:
        raise ValueError(f"not cell key columns: {', '.join(unknown)}; expected some of {', '.join(CELL_KEYS)}")
    found: dict[str, JsonValue] = {k: v if v is None or isinstance(v, (str, int, float)) else str(v)
                                   for k, v in zip([*keys, "benchmark"], values)}
    return Fit.cell_fields(found, "samples table", "$." + "/".join(map(str, values)))


def record_of(fit: HockneyFit, cell: CellFields) -> HockneyRecord:
    """The fits file's record of ``fit`` for ``cell`` (:func:`_cell`): NaN and infinite figures are
    None, as the file holds them (JSON has neither)."""
    def pair(v: tuple[float, float]) -> tuple[float | None, float | None]:
        return (_json_float(v[0]), _json_float(v[1]))

    return HockneyRecord(
        **cell,
        latency_us=_json_float(fit.latency_us), latency_ci_us=pair(fit.latency_ci_us),
        peak_bandwidth_MBps=_json_float(fit.peak_bandwidth_MBps), peak_bandwidth_ci_MBps=pair(fit.peak_bandwidth_ci_MBps),
        peak_bytes=fit.peak_bytes, asymptotic_bandwidth_MBps=_json_float(fit.asymptotic_bandwidth_MBps),
        asymptotic_bandwidth_ci_MBps=pair(fit.asymptotic_bandwidth_ci_MBps), asymptotic_bytes=fit.asymptotic_bytes,
        breakpoints_bytes=tuple(fit.breakpoints_bytes),
        segments=tuple(replace(g, bandwidth_MBps=_json_float(g.bandwidth_MBps)) for g in fit.segments),
        n_sizes=fit.n_sizes, zero_byte_us=_json_float(fit.zero_byte_us), excluded_bytes=tuple(fit.excluded_bytes),
        ci_method=fit.ci_method, n_launches=fit.n_launches, ci_warning=fit.ci_warning,
        plateau_from_bytes=fit.plateau_from_bytes, plateau_n_sizes=fit.plateau_n_sizes,
        residuals=tuple(replace(r, rel_err=_json_float(r.rel_err)) for r in fit.residuals))


# The column that names a sample's launch, most specific first: the raw file (a cell's repetition, or
# an imported log), else the cell's repetition number.
LAUNCH_COLUMNS: tuple[str, ...] = ("source", "rep")


def launch_ids(group: pl.DataFrame) -> list[str] | None:
    """Each row's launch (LAUNCH_COLUMNS), or None when the table does not say."""
    for column in LAUNCH_COLUMNS:
        if column in group.columns and group[column].null_count() == 0:
            return group[column].cast(pl.String).to_list()
    return None


def _usable_segment(i: int, seg: HockneySegment) -> HockneySegment:
    """A record's segment as the model evaluates it (an unbounded bandwidth is inf)."""
    if not (math.isfinite(seg.latency_us) and seg.latency_us > 0):
        raise ValueError(f"segment {i}: 'latency_us' must be a finite number > 0, got {seg.latency_us!r}")
    bw = seg.bandwidth_MBps
    if bw is not None and not (math.isfinite(bw) and bw > 0):
        raise ValueError(f"segment {i}: 'bandwidth_MBps' must be > 0 or null (unbounded), got {bw!r}")
    return replace(seg, from_bytes=seg.from_bytes or 0, bandwidth_MBps=math.inf if bw is None else bw)


def _inverse(g: float) -> float:
    return math.inf if g <= 0.0 else 1.0 / g


def _json_float(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)
