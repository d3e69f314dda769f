"""How sure a Hockney fit is, in words (:mod:`mpiatlas.models.hockney`'s ``ci_warning``): λ on its lower bound,
an interval wider than :data:`CI_REL_TOL` of its estimate, an estimate outside its own interval.

Plain arithmetic on a fit's figures, apart from the fitting (numpy, scipy), so that what prints a fit's
figures (the campaign's closing lines, the report's glossary and trust paragraph) reads them from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpiatlas.models.hockney import HockneyFit

LATENCY_FLOOR_US = 1e-6  # λ > 0, strictly: the fit's lower bound
# λ or B whose 95 % interval reaches further than this fraction of the estimate (either side) is
# not a figure to quote without its warning (issue #23: B = 2,396 MB/s in [2,334, 25,618]).
CI_REL_TOL = 0.25


def relative_ci_spread(estimate: float | None, ci: Sequence[float | None] | None) -> float | None:
    """How far the 95 % interval reaches from its estimate, as a fraction of it: max(est − lo, hi − est)
    / est (inf for an unbounded side); None without a finite positive estimate or any interval."""
    if estimate is None or not math.isfinite(estimate) or estimate <= 0 or ci is None or len(ci) != 2:
        return None
    lo, hi = (math.nan if v is None else float(v) for v in ci)
    if math.isnan(lo) and math.isnan(hi):
        return None
    below = 0.0 if math.isnan(lo) else estimate - lo
    above = 0.0 if math.isnan(hi) else hi - estimate
    return max(below, above, 0.0) / estimate


def latency_on_floor(latency_us: float | None) -> bool:
    """λ pinned on the fit's lower bound: no resolvable small-message latency (not a result)."""
    return latency_us is not None and latency_us <= LATENCY_FLOOR_US * (1.0 + 1e-9)


def _num(x: float) -> str:
    """A figure in a warning: 4 significant digits, thousands grouped (the report's style)."""
    if not math.isfinite(x):
        return "∞"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _width_warning(name: str, unit: str, estimate: float, ci: tuple[float, float]) -> str | None:
    spread = relative_ci_spread(estimate, ci)
    if spread is None or spread <= CI_REL_TOL:
        return None
    lo, hi = ci
    return (f"{name} = {_num(estimate)} {unit} has a wide 95 % interval [{_num(lo)}, {_num(hi)}], "
            f"{_pct(lo / estimate - 1.0)} to {_pct(hi / estimate - 1.0)} of the estimate "
            f"(wider than ±{100 * CI_REL_TOL:.0f} %)")


def _pct(x: float) -> str:
    return "+∞ %" if not math.isfinite(x) else f"{x:+.0%}".replace("%", " %").replace("-", "−")


def trust_warnings(fit: HockneyFit) -> list[str]:
    """Why λ or a bandwidth of ``fit`` cannot be taken at face value, one phrase each (empty: none).

    In this order: λ on its lower bound; λ or a bandwidth with a 95 % interval beyond ±CI_REL_TOL of the estimate;
    an estimate outside its own interval.
    """
    out = []
    if latency_on_floor(fit.latency_us):
        out.append(f"λ is pinned on its lower bound ({LATENCY_FLOOR_US:g} µs): the small sizes show no "
                   "latency the fit can resolve, so λ is not a result")
    elif latency_on_floor(fit.latency_ci_us[0]):
        out.append(f"λ's 95 % interval reaches the fit's lower bound ({LATENCY_FLOOR_US:g} µs): replicates "
                   "of the data find no latency, so λ is not resolved")
    figures = (("λ", "µs", fit.latency_us, fit.latency_ci_us),
               ("peak B", "MB/s", fit.peak_bandwidth_MBps, fit.peak_bandwidth_ci_MBps),
               ("asymptotic B", "MB/s", fit.asymptotic_bandwidth_MBps, fit.asymptotic_bandwidth_ci_MBps))
    for name, unit, est, ci in figures:
        if not (name == "λ" and latency_on_floor(est)):
            text = _width_warning(name, unit, est, ci)
            if text is not None:
                out.append(text)
    outside = [name for name, _, value, (lo, hi) in figures
               if not (math.isnan(lo) or math.isnan(hi) or lo <= value <= hi)]
    if outside:
        out.append(f"{' and '.join(outside)} outside {'its' if len(outside) == 1 else 'their'} own "
                   "interval (bimodal or too few repetitions): the interval does not measure the estimate's "
                   "precision")
    return out
