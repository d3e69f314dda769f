"""What the kernel models share: the p2p time t(s) = λ + s/B, rows of ok cells, JSON-safe numbers,
bootstrap confidence intervals and the one-line statement of where a model fails.

Used by :mod:`mpiatlas.models.kernels` (ring, matsum), :mod:`mpiatlas.models.kernel_jacobi` and
:mod:`mpiatlas.models.kernel_grids`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord, HockneySegment

CONFIDENCE = 0.95
LABEL_COLUMNS = ("label", "stack", "transport", "mapping")


def usable(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rows of ``ok`` cells only (a failed or invalid cell's numbers are not evidence)."""
    if df is None or df.height == 0:
        return None
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    if "label" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("label"))
    return df if df.height else None


@dataclass
class P2P:
    """One-way message time t(s) = λ + s/B (piecewise when fitted to PingPong)."""

    latency_us: float
    bandwidth_MBps: float | None  # None: no per-byte cost known
    source: str  # "PingPong" | "ring"
    segments: tuple[HockneySegment, ...] = ()

    def time(self, size: float) -> float:
        if self.segments:
            seg = self.segments[0]
            for candidate in self.segments:
                if (candidate.from_bytes or 0) <= size:
                    seg = candidate
            bw = seg.bandwidth_MBps
            return seg.latency_us + (size / bw if bw else 0.0)
        return self.latency_us + (size / self.bandwidth_MBps if self.bandwidth_MBps else 0.0)

    def per_byte(self) -> float:
        return 1.0 / self.bandwidth_MBps if self.bandwidth_MBps else 0.0


def imb_pingpong_fit(hockney: Sequence[HockneyRecord] | None, label: str | None) -> HockneyRecord | None:
    """The first fitted IMB PingPong Hockney fit of ``label`` (stack/transport/mapping), if there is one."""
    for fit in hockney or []:
        if fit.benchmark == "PingPong" and fit.label == label and fit.fitted and fit.latency_us is not None:
            return fit
    return None


def pingpong_params(hockney: Sequence[HockneyRecord] | None, label: str) -> P2P | None:
    """t(s) of the PingPong Hockney fit of ``label`` (stack/transport/mapping), if there is one."""
    fit = imb_pingpong_fit(hockney, label)
    if fit is None or fit.latency_us is None:
        return None
    return P2P(fit.latency_us, fit.model_bandwidth_MBps, "PingPong", fit.segments)


# --------------------------------------------------------------------------------------- helpers


def json_num(x: Any, digits: int | None = None) -> float | None:
    """JSON-safe float (None for missing / non-finite)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return round(v, digits) if digits is not None else v


def relative_error(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return json_num(pred / meas - 1.0)


def _ratio_text(rel: float | None) -> str:
    if rel is None:
        return "n/a"
    ratio = 1.0 / (1.0 + rel) if rel > -1 else math.inf  # measured / predicted
    return f"{ratio:.2g}× the model"


class Scored(Protocol):
    """A point of a model against a measurement: its error, model / measured − 1 (None: untested)."""

    @property
    def rel_err(self) -> float | None: ...


ScoredPoint = TypeVar("ScoredPoint", bound=Scored)


def failure_statement(points: Sequence[ScoredPoint], describe: Callable[[ScoredPoint], str], *,
                      tolerance: float = 0.25, what: str = "the model") -> str:
    """One line: where the model misses most (|rel_err| largest), and how good it is elsewhere."""
    scored = [(p, p.rel_err) for p in points if p.rel_err is not None]
    if not scored:
        return f"{what}: no measured point to test it against"
    worst, worst_err = max(scored, key=lambda pe: abs(pe[1]))
    good = [p for p, e in scored if abs(e) <= tolerance]
    measured_vs = _ratio_text(worst_err)
    if abs(worst_err) <= tolerance:
        return (f"holds within {tolerance:.0%} at every point ({len(scored)}); worst {describe(worst)}: "
                f"measured {measured_vs}")
    return (f"fails worst at {describe(worst)}: measured {measured_vs}; within {tolerance:.0%} at "
            f"{len(good)} of {len(scored)} points")


def bootstrap_medians(reps: list[list[float]], rng: np.random.Generator, n: int) -> Iterable[np.ndarray]:
    """Per bootstrap replicate: each point's median over repetitions resampled with replacement."""
    for _ in range(n):
        yield np.array([np.median(rng.choice(np.asarray(r, dtype=float), size=len(r))) for r in reps])


def percentile_ci(values: np.ndarray) -> list[float | None]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [None, None]
    lo, hi = np.percentile(values, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return [json_num(lo), json_num(hi)]


def fit_latency_bandwidth(x_bytes: np.ndarray, y_us: np.ndarray) -> tuple[float, float]:
    """Bounded min Σ((λ + g·s − y)/y)² over λ, g ≥ 0: (λ µs, g µs/byte); g = 0 with one size."""
    y = np.asarray(y_us, dtype=float)
    s = np.asarray(x_bytes, dtype=float)
    if np.unique(s).size < 2:
        return float(np.median(y)), 0.0
    scale = float(s.max()) or 1.0
    design = np.column_stack([1.0 / y, (s / scale) / y])
    # The unconstrained least squares is the bounded optimum whenever it is feasible (the usual
    # case), and is ~50x cheaper than lsq_linear, which this fit runs once per bootstrap replicate.
    x, *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    if x[0] >= 0.0 and x[1] >= 0.0:
        return float(x[0]), float(x[1] / scale)

    from scipy import optimize  # ~0.5 s to import: only for the rare infeasible fit (as mpiatlas.models.kernels)

    res = optimize.lsq_linear(design, np.ones_like(y), bounds=([0.0, 0.0], [np.inf, np.inf]))
    return float(res.x[0]), float(res.x[1] / scale)



def size_text(value: object, *, cube: bool = False) -> str | None:
    """A kernel size as the tables read it: ``"96,40,40"`` (a header value) or [96, 40, 40] ->
    ``96×40×40``; with ``cube``, ``16,16,16`` -> ``16`` (jacobi's L and N, as in its group names)."""
    if value is None:
        return None
    parts = [p.strip() for p in str(value).split(",")] if not isinstance(value, list) else [str(v) for v in value]
    if cube and len(set(parts)) == 1:
        return parts[0]
    return "×".join(parts)
