"""Model parameters of two campaigns compared: Hockney λ and B, α-β α and β, difference B − A with a CI.

Each fit file carries a 95 % CI per parameter (a bootstrap over repetitions or residuals, see
:mod:`mpiatlas.models`). The CI of the difference of two independent estimates is the MOVER
interval (Zou & Donner 2008): from estimates x_A, x_B with intervals [l_A, u_A], [l_B, u_B],

    low  = d − sqrt((x_B − l_B)² + (u_A − x_A)²)
    high = d + sqrt((u_B − x_B)² + (x_A − l_A)²),   d = x_B − x_A,

which keeps each interval's asymmetry (a bandwidth CI is rarely symmetric). An interval that does not contain its estimate gets the larger of its two distances on both
sides (see :func:`_half_widths`). The difference is significant when its CI excludes 0.

Several runs per side (:func:`fit_differences_over_runs`): each run has its own fit, so a
parameter has one estimate per run, and their spread is the run-to-run variation a single fit's
CI leaves out. A side's value is the mean over its runs with a t interval, and the difference of
the means gets Welch's t interval (scipy), judged with at least two runs on each side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats

from mpiatlas.models.alphabeta_records import AlphaBetaRecord
from mpiatlas.models.fit_records import HockneyRecord, Interval, Scalar

# One row of the differences table (COLUMNS): text, figures and the significance flag.
Row = dict[str, str | float | bool]

# (model parameter, its key in a ComparedFit, unit, slower when the parameter grows?)
Param = tuple[str, str, str, bool]
HOCKNEY_PARAMS: tuple[Param, ...] = (("latency λ", "latency_us", "µs", True),
                                     ("asymptotic bandwidth B", "asymptotic_bandwidth_MBps", "MB/s", False),
                                     ("peak bandwidth B", "peak_bandwidth_MBps", "MB/s", False))
ALPHABETA_PARAMS: tuple[Param, ...] = (("α", "alpha", "", True), ("β", "beta_us", "µs", True))
# Keys a fit entry may be identified by, besides the matching axes: α-β fits are per ranks per node.
# (Their IMB options, knob set and placement are matching axes: paired when both sides' entries carry them.)
EXTRA_FIT_KEYS = ("ppn",)
# The verdict of a parameter measured in fewer than two runs on a side (no spread to judge by).
TOO_FEW_RUNS = "too few runs"
COLUMNS = ["model", "series", "parameter", "unit", "a", "a_ci_low", "a_ci_high", "b", "b_ci_low", "b_ci_high",
           "diff", "diff_ci_low", "diff_ci_high", "rel_diff", "significant", "direction"]


@dataclass(frozen=True)
class ComparedFit:
    """One fit as two campaigns' fits are compared: the keys its entry carries (its cell or series,
    by key name as its fits file names them) and each parameter's estimate and 95 % interval
    (NaN: no finite estimate; a None bound: unbounded)."""

    keys: dict[str, Scalar]
    params: dict[str, tuple[float, Interval]]


def hockney_compared(fit: HockneyRecord) -> ComparedFit:
    """A Hockney fit's λ and its two bandwidths, identified by its cell key."""
    return ComparedFit(fit.cell_json(), {
        "latency_us": (_num(fit.latency_us), fit.latency_ci_us),
        "asymptotic_bandwidth_MBps": (_num(fit.asymptotic_bandwidth_MBps), fit.asymptotic_bandwidth_ci_MBps),
        "peak_bandwidth_MBps": (_num(fit.peak_bandwidth_MBps), fit.peak_bandwidth_ci_MBps)})


def alphabeta_compared(fit: AlphaBetaRecord) -> ComparedFit:
    """An α-β fit's α and β, identified by its series key, benchmark and k."""
    return ComparedFit(fit.series_keys, {"alpha": (_num(fit.alpha), fit.alpha_ci),
                                         "beta_us": (_num(fit.beta_us), fit.beta_ci_us)})


def _num(x: object) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else math.nan


def mover_difference(a: float, a_ci: Sequence[float | None], b: float, b_ci: Sequence[float | None]
                     ) -> tuple[float, float, float]:
    """B − A and its MOVER CI from two estimates and their (independent) CIs.

    A missing CI end is unbounded (a fit reports none where the data cannot bound it, e.g. a
    bandwidth with no large sizes): the difference's interval is then unbounded on that side.
    """
    a_down, a_up = _half_widths(a, a_ci)
    b_down, b_up = _half_widths(b, b_ci)
    d = b - a
    return d, d - math.hypot(b_down, a_up), d + math.hypot(b_up, a_down)


def _half_widths(x: float, ci: Sequence[float | None]) -> tuple[float, float]:
    """(x − low, high − x); an interval that does not contain its own estimate (a degenerate
    bootstrap, e.g. [1e-06, 1e-06] around λ = 11 µs) is not trusted as to its shape: the larger
    distance is used on both sides, which keeps the verdict conservative."""
    low, high = _bound(ci[0], -math.inf), _bound(ci[1], math.inf)
    down, up = x - low, high - x
    if down < 0 or up < 0:
        down = up = max(abs(down), abs(up))
    return down, up


def _bound(x: float | None, missing: float) -> float:
    value = _num(x)
    return missing if math.isnan(value) else value


def _identity(fit: ComparedFit, keys: list[str]) -> tuple[str, ...]:
    return tuple(str(fit.keys.get(k)) for k in keys)


def _carried(fit_a: ComparedFit, fit_b: ComparedFit, axes: list[str]) -> list[str]:
    """The keys a fit is identified by: the matched axes (and EXTRA_FIT_KEYS) both sides' fits carry."""
    return [k for k in (*axes, *EXTRA_FIT_KEYS) if k in fit_a.keys and k in fit_b.keys]


def _series(fit: ComparedFit, carried: list[str]) -> str:
    return " · ".join(f"{k}={fit.keys.get(k)}" for k in carried if fit.keys.get(k) not in (None, ""))


def _pair_up(fits_a: Sequence[ComparedFit], fits_b: Sequence[ComparedFit],
             axes: list[str]) -> list[tuple[str, ComparedFit, ComparedFit]]:
    """Fits present on both sides with equal values on the axes both entries carry."""
    if not fits_a or not fits_b:
        return []
    carried = _carried(fits_a[0], fits_b[0], axes)
    by_key = {_identity(f, carried): f for f in fits_b}
    pairs = []
    for fa in fits_a:
        fb = by_key.get(_identity(fa, carried))
        if fb is not None:
            pairs.append((_series(fa, carried), fa, fb))
    return pairs


def _rows(model: str, pairs: list[tuple[str, ComparedFit, ComparedFit]], params: tuple[Param, ...]) -> list[Row]:
    rows: list[Row] = []
    for series, fa, fb in pairs:
        for name, key, unit, up_is_slower in params:
            (a, a_ci), (b, b_ci) = fa.params[key], fb.params[key]
            if not (math.isfinite(a) and math.isfinite(b)):
                continue
            d, low, high = mover_difference(a, a_ci, b, b_ci)
            significant = low > 0 or high < 0  # an unbounded end (±inf) can still exclude 0 on the other
            worse = (d > 0) == up_is_slower
            rows.append({"model": model, "series": series, "parameter": name, "unit": unit,
                         "a": a, "a_ci_low": _num(a_ci[0]), "a_ci_high": _num(a_ci[1]),
                         "b": b, "b_ci_low": _num(b_ci[0]), "b_ci_high": _num(b_ci[1]),
                         "diff": d, "diff_ci_low": low, "diff_ci_high": high,
                         "rel_diff": d / a if a else math.nan, "significant": significant,
                         "direction": ("slower" if worse else "faster") if significant else "no significant change"})
    return rows


def _frame(rows: list[Row]) -> pl.DataFrame:
    schema = {c: (pl.Boolean if c == "significant" else pl.String if c in ("model", "series", "parameter", "unit",
                                                                           "direction") else pl.Float64)
              for c in COLUMNS}
    return pl.DataFrame(rows, schema=schema)


Side = Sequence[ComparedFit]  # a side's fits of one model


def fit_differences(hockney: tuple[Side, Side], alphabeta: tuple[Side, Side], axes: list[str]) -> pl.DataFrame:
    """One row per parameter of every Hockney and α-β fit both sides have (matched on ``axes``)."""
    return _frame([*_rows("Hockney", _pair_up(*hockney, axes), HOCKNEY_PARAMS),
                   *_rows("α-β", _pair_up(*alphabeta, axes), ALPHABETA_PARAMS)])


# -- several runs per side -------------------------------------------------------------------------

Runs = Sequence[Side]  # a side's fits of one model, one list per run


def fit_differences_over_runs(hockney: tuple[Runs, Runs], alphabeta: tuple[Runs, Runs], axes: list[str],
                              confidence: float = 0.95) -> pl.DataFrame:
    """One row per parameter of every fit both sides have, from its estimates in every run (module
    docstring): means, their t intervals, and Welch's interval of the difference of the means."""
    return _frame([*_run_rows("Hockney", _group_runs(*hockney, axes), HOCKNEY_PARAMS, confidence),
                   *_run_rows("α-β", _group_runs(*alphabeta, axes), ALPHABETA_PARAMS, confidence)])


def _group_runs(runs_a: Runs, runs_b: Runs, axes: list[str]) -> list[tuple[str, list[ComparedFit], list[ComparedFit]]]:
    """(series, its fit in each run of A, in each run of B) for the series both sides have."""
    first_a = next((f for run in runs_a for f in run), None)
    first_b = next((f for run in runs_b for f in run), None)
    if first_a is None or first_b is None:
        return []
    carried = _carried(first_a, first_b, axes)

    def by_series(runs: Runs) -> dict[tuple[str, ...], list[ComparedFit]]:
        found: dict[tuple[str, ...], list[ComparedFit]] = {}
        for run in runs:
            for fit in run:
                found.setdefault(_identity(fit, carried), []).append(fit)
        return found

    a, b = by_series(runs_a), by_series(runs_b)
    return [(_series(fits[0], carried), fits, b[key]) for key, fits in a.items() if key in b]


def _mean_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(mean, t interval of the mean); nan ends with fewer than two values."""
    mean = float(np.mean(x))
    if x.size < 2:
        return mean, math.nan, math.nan
    sem = float(stats.sem(x))
    if sem == 0.0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    return mean, float(low), float(high)


def _welch_interval(xa: np.ndarray, xb: np.ndarray, confidence: float) -> tuple[float, float]:
    """Welch's interval of mean(B) − mean(A); exact when neither side varies."""
    if np.var(xa) == 0.0 and np.var(xb) == 0.0:
        d = float(np.mean(xb) - np.mean(xa))
        return d, d
    ci = stats.ttest_ind(xb, xa, equal_var=False).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def _run_rows(model: str, groups: list[tuple[str, list[ComparedFit], list[ComparedFit]]],
              params: tuple[Param, ...], confidence: float) -> list[Row]:
    rows: list[Row] = []
    for series, fits_a, fits_b in groups:
        for name, key, unit, up_is_slower in params:
            xa, xb = (np.array([v for v in (f.params[key][0] for f in fits) if math.isfinite(v)])
                      for fits in (fits_a, fits_b))
            if not (xa.size and xb.size):
                continue
            (a, a_low, a_high), (b, b_low, b_high) = _mean_interval(xa, confidence), _mean_interval(xb, confidence)
            d = b - a
            judged = xa.size >= 2 and xb.size >= 2
            low, high = _welch_interval(xa, xb, confidence) if judged else (math.nan, math.nan)
            significant = judged and (low > 0 or high < 0)
            worse = (d > 0) == up_is_slower
            direction = (TOO_FEW_RUNS if not judged else ("slower" if worse else "faster") if significant
                         else "no significant change")
            rows.append({"model": model, "series": f"{series} ({xa.size} vs {xb.size} runs)", "parameter": name,
                         "unit": unit, "a": a, "a_ci_low": a_low, "a_ci_high": a_high, "b": b, "b_ci_low": b_low,
                         "b_ci_high": b_high, "diff": d, "diff_ci_low": low, "diff_ci_high": high,
                         "rel_diff": d / a if a else math.nan, "significant": significant, "direction": direction})
    return rows
