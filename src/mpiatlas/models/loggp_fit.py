"""LogGP calibrated on measured collectives: what the region table lacks, fitted with scipy.

Input: measurements ``collective,algorithm,np,bytes,latency_us`` (:func:`read_measured`) of one or
more algorithms, all run with one placement (the ``place`` given: its prefixes are the smaller
runs). :func:`calibrate` fits the :class:`.loggp.LogGP` scalars the table does not carry:
``overhead_us`` (o) unless the table has an ``overhead_us`` column, ``gap_us`` (g) likewise, and
``level_us`` (h, the per-level term of trees, chains and steps) always — each only if the
measurements can tell it apart (see :func:`_identifiable`): a linear Bcast has no level, so it
cannot fix h, which then stays 0.

The fit: :func:`scipy.optimize.least_squares` (trust region reflective) on the relative errors
``(predicted − measured) / measured`` (so that P = 2 and P = 256 weigh alike), bounded at 0 (no
negative o, g or h). The 95 % intervals come from the Jacobian covariance at the optimum
(``s² (JᵀJ)⁻¹``, ``s²`` the residual variance with n − p degrees of freedom, Student t), the
linearised least-squares interval; the lower end is clipped at the bound 0.

:func:`predict_held_out` is the leave-one-algorithm-out use: calibrate on every other algorithm
measured in a campaign, then predict the held-out one.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mpiatlas.models.loggp import LogGP, predict
from mpiatlas.models.region_latency import Placement, RegionTable

__all__ = [
    "CI_METHOD",
    "Calibration",
    "Measured",
    "MeasuredError",
    "Parameter",
    "calibrate",
    "predict_held_out",
    "read_measured",
]

MEASURED_COLUMNS = ("collective", "algorithm", "np", "bytes", "latency_us")
CANDIDATES = ("gap_us", "overhead_us", "level_us")  # tried in this order when identifiability is in doubt
CI_METHOD = "95 % CI from the Jacobian covariance at the optimum (linearised, Student t, n - p dof)"
QUANTITIES = ("completion", "rank_mean")


class MeasuredError(ValueError):
    """A measurements file that cannot be used."""


@dataclass(frozen=True)
class Measured:
    collective: str
    algorithm: str
    np: int
    bytes: int
    latency_us: float


@dataclass(frozen=True)
class Parameter:
    name: str
    value: float
    ci_low: float
    ci_high: float
    fitted: bool  # False: not identifiable from these measurements (value is the default or the table's)

    def line(self) -> str:
        if not self.fitted:
            return f"{self.name} = {self.value:.4g} µs (not fitted: the measurements do not determine it)"
        value = 0.0 if self.value < 1e-9 else self.value  # the optimiser stops a hair above the bound
        bound = " (at the bound 0)" if value == 0 else ""
        return f"{self.name} = {value:.4g} µs{bound}, 95 % CI [{self.ci_low:.4g}, {self.ci_high:.4g}]"


@dataclass(frozen=True)
class Calibration:
    params: LogGP
    parameters: tuple[Parameter, ...]
    points: int
    median_abs_error: float  # in-sample median |relative error|
    quantity: str

    def lines(self) -> list[str]:
        head = (f"LogGP calibrated on {self.points} measurements ({self.quantity} time), in-sample median "
                f"|error| {self.median_abs_error:.1%}; {CI_METHOD}")  # fmt: skip
        return [head, *(f"  {p.line()}" for p in self.parameters)]


def read_measured(path: str | Path) -> list[Measured]:
    """``collective,algorithm,np,bytes,latency_us`` rows; errors name the file, line and column."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise MeasuredError(f"cannot read measurements {source}: {exc.strerror or exc}") from exc
    numbered = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip() and not line.startswith("#")]
    if not numbered:
        raise MeasuredError(f"{source}: empty; expected a header {','.join(MEASURED_COLUMNS)}")
    rows = list(csv.reader(line for _, line in numbered))
    header = [h.strip() for h in rows[0]]
    missing = [c for c in MEASURED_COLUMNS if c not in header]
    if missing:
        raise MeasuredError(f"{source}:{numbered[0][0]}: header lacks {', '.join(missing)}; expected {','.join(MEASURED_COLUMNS)}")
    col = {c: header.index(c) for c in MEASURED_COLUMNS}
    out = []
    for (line, _), row in zip(numbered[1:], rows[1:]):
        if len(row) != len(header):
            raise MeasuredError(f"{source}:{line}: expected {len(header)} values, got {len(row)}")
        try:
            m = Measured(row[col["collective"]].strip().lower(), row[col["algorithm"]].strip(),
                         int(row[col["np"]]), int(row[col["bytes"]]), float(row[col["latency_us"]]))  # fmt: skip
        except ValueError:
            raise MeasuredError(f"{source}:{line}: np and bytes must be integers, latency_us a number: {row}") from None
        if m.np < 2 or m.bytes < 0 or not (math.isfinite(m.latency_us) and m.latency_us > 0):
            raise MeasuredError(f"{source}:{line}: need np >= 2, bytes >= 0 and latency_us > 0, got {row}")
        out.append(m)
    if not out:
        raise MeasuredError(f"{source}: no measurements after the header")
    return out


class _Model:
    """Predictions for a list of measurements as a function of the free parameters."""

    def __init__(self, measured: Sequence[Measured], place: Placement, table: RegionTable, free: Sequence[str],
                 *, segsize: int, quantity: str) -> None:  # fmt: skip
        if quantity not in QUANTITIES:
            raise ValueError(f"quantity {quantity!r}: choose from {', '.join(QUANTITIES)}")
        too_big = [m.np for m in measured if m.np > place.size]
        if too_big:
            raise ValueError(f"measurements at np={max(too_big)} do not fit the placement of {place.size} ranks")
        self.measured, self.place, self.table = list(measured), place, table
        self.free, self.segsize, self.quantity = list(free), segsize, quantity
        self.regions: dict[tuple[int, int], str] = {}
        self.prefixes = {n: place.prefix(n) for n in {m.np for m in measured}}
        self.y = np.array([m.latency_us for m in measured])

    def params(self, x: Sequence[float] | np.ndarray) -> LogGP:
        return LogGP(**{name: max(0.0, float(v)) for name, v in zip(self.free, x)})

    def predicted(self, params: LogGP) -> np.ndarray:
        out = []
        for m in self.measured:
            p = predict(m.collective, m.algorithm, self.prefixes[m.np], self.table, m.bytes, params=params,
                        segsize=self.segsize, regions=self.regions)  # fmt: skip
            out.append(p.completion_us if self.quantity == "completion" else p.rank_mean_us)
        return np.array(out)

    def residuals(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.asarray((self.predicted(self.params(x)) - self.y) / self.y, dtype=float)


def _identifiable(measured: Sequence[Measured], place: Placement, table: RegionTable, candidates: Sequence[str],
                  *, segsize: int, quantity: str) -> list[str]:  # fmt: skip
    """The candidates whose effect on the residuals is neither nil nor a combination of the others'.

    Finite-difference Jacobian at a nominal point (every candidate = half the table's smallest
    latency), columns scaled to unit length; a candidate joins if it leaves the smallest singular
    value of the chosen columns above 0.02 (beyond that the fit trades one for the other freely).
    """
    model = _Model(measured, place, table, candidates, segsize=segsize, quantity=quantity)
    x0 = np.full(len(candidates), 0.5 * min(table.latency_us.values()))
    base = model.residuals(x0)
    step = 0.05 * x0[0]
    columns = []
    for i in range(len(candidates)):
        x = x0.copy()
        x[i] += step
        columns.append((model.residuals(x) - base) / step)
    chosen: list[int] = []
    for i, col in enumerate(columns):
        norm = float(np.linalg.norm(col))
        if norm < 1e-9:
            continue
        trial = np.column_stack([columns[j] / np.linalg.norm(columns[j]) for j in [*chosen, i]])
        if np.linalg.svd(trial, compute_uv=False).min() > 0.02:
            chosen.append(i)
    return [candidates[i] for i in chosen]


def calibrate(
    measured: Sequence[Measured],
    place: Placement,
    table: RegionTable,
    *,
    segsize: int = 0,
    quantity: str = "completion",
) -> Calibration:
    """Fit the LogGP scalars ``table`` lacks to ``measured`` (module docstring: method and CIs)."""
    from scipy.optimize import least_squares
    from scipy.stats import t as student_t

    if not measured:
        raise ValueError("no measurements to calibrate on")
    candidates = [c for c in CANDIDATES if not ((c == "overhead_us" and table.overhead_us) or (c == "gap_us" and table.gap_us))]
    free = _identifiable(measured, place, table, candidates, segsize=segsize, quantity=quantity)
    model = _Model(measured, place, table, free, segsize=segsize, quantity=quantity)
    cis: dict[str, tuple[float, float]] = {}
    if free:
        x0 = np.full(len(free), 0.5 * min(table.latency_us.values()))
        fit = least_squares(model.residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale=x0)
        params = model.params(fit.x)
        dof = len(measured) - len(free)
        jac = np.asarray(fit.jac, dtype=float)  # dense: least_squares' default jac is a finite-difference array
        jtj = jac.T @ jac
        if dof > 0 and np.linalg.matrix_rank(jtj) == len(free):
            cov = np.linalg.inv(jtj) * (2 * fit.cost / dof)
            half = student_t.ppf(0.975, dof) * np.sqrt(np.diag(cov))
        else:
            half = np.full(len(free), math.inf)
        cis = {n: (max(0.0, v - hw), v + hw) for n, v, hw in zip(free, (getattr(params, n) for n in free), half)}
    else:
        params = LogGP()
    errors = np.abs(model.residuals([getattr(params, n) for n in free]))
    parameters = tuple(
        Parameter(name, getattr(params, name), *cis.get(name, (math.nan, math.nan)), fitted=name in cis)
        for name in candidates
    )
    return Calibration(params, parameters, len(measured), float(statistics.median(errors)), quantity)


def predict_held_out(
    measured: Sequence[Measured],
    place: Placement,
    table: RegionTable,
    held_out: tuple[str, str],
    *,
    segsize: int = 0,
    quantity: str = "completion",
) -> tuple[Calibration, list[tuple[Measured, float]]]:
    """Leave one algorithm out: calibrate on every measurement but ``held_out`` = (collective,
    algorithm), then predict the held-out measurements; returns the calibration and (measurement,
    predicted µs) pairs."""
    coll, alg = held_out[0].lower(), held_out[1]
    train = [m for m in measured if (m.collective, m.algorithm) != (coll, alg)]
    test = [m for m in measured if (m.collective, m.algorithm) == (coll, alg)]
    if not test:
        raise ValueError(f"no measurements of {coll} {alg} to hold out")
    if not train:
        raise ValueError(f"nothing left to calibrate on once {coll} {alg} is held out")
    cal = calibrate(train, place, table, segsize=segsize, quantity=quantity)
    model = _Model(test, place, table, [], segsize=segsize, quantity=quantity)
    return cal, list(zip(test, model.predicted(cal.params).tolist()))
