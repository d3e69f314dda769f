"""LogGP calibrated on measured collectives: what the region table lacks, fitted with scipy.

Input: measurements ``collective,algorithm,np,bytes,latency_us`` (:func:`read_measured`) of one or
more algorithms, all run with one placement (the ``place`` given: its prefixes are the smaller
runs). :func:`calibrate` fits the :class:`.loggp.LogGP` scalars the table does not carry:
``overhead_us`` (o) unless the table has an ``overhead_us`` column, ``gap_us`` (g) likewise, and
``level_us`` (h, the per-level term of trees, chains and steps) always — each only if the
measurements can tell it apart (see :func:`_identifiable`): a linear Bcast has no level, so it
cannot fix h, which then stays 0. ``gap_regions`` adds one gap per named region, ``gap_us[region]``
(a send's gap depends on where it goes: a copy to the other socket, a NIC's injection), for
regions the table has no gap for; the scalar g then covers the others. A fitted per-region gap is
a region table column, so it transfers to any placement whose pairs fall in those regions.

The fit: :func:`scipy.optimize.least_squares` (trust region reflective) on the log ratios
``ln(predicted / measured)`` (so that P = 2 and P = 256 weigh alike, and over- and under-prediction
by the same factor alike) with the robust ``soft_l1`` loss (scale 0.1: a run perturbed tenfold
weighs like a ~10 % miss, not like a hundred of them), bounded at 0 (no negative o, g or h). The
95 % intervals come from the Jacobian covariance at the optimum (``s² (JᵀJ)⁻¹``, ``s²`` the residual
variance with n − p degrees of freedom, Student t), the linearised least-squares interval (under
the robust loss an approximation); the lower end is clipped at the bound 0.

:func:`predict_held_out` is the leave-one-algorithm-out use: calibrate on every other algorithm
measured in a campaign, then predict the held-out one. :func:`calibrate_groups` calibrates on
measurements of several placements at once (leave one mapping out: every other mapping's runs).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import t as student_t

from mpiatlas.models.loggp import LogGP, predict
from mpiatlas.models.ompi_decision import bcast_default_algorithm
from mpiatlas.models.region_latency import Placement, RegionTable

__all__ = [
    "CI_METHOD",
    "Calibration",
    "Groups",
    "Measured",
    "MeasuredError",
    "Parameter",
    "calibrate",
    "calibrate_groups",
    "predict_held_out",
    "predicted",
    "read_measured",
]

MEASURED_COLUMNS = ("collective", "algorithm", "np", "bytes", "latency_us")
CANDIDATES = ("gap_us", "overhead_us", "level_us")  # tried in this order when identifiability is in doubt
CI_METHOD = "95 % CI from the Jacobian covariance at the optimum (linearised, Student t, n - p dof)"
QUANTITIES = ("completion", "rank_mean")
# Robust loss on log ratios: a run perturbed 10-50x (ORFEO socket, P > 128) weighs about like a 10 % miss
# instead of deciding the fit (soft_l1 is ~quadratic below LOSS_SCALE, ~linear above).
LOSS: Literal["soft_l1"] = "soft_l1"
LOSS_SCALE = 0.1


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
        unit = " µs"
        if not self.fitted:
            return f"{self.name} = {self.value:.4g}{unit} (not fitted: the measurements do not determine it)"
        value = 0.0 if self.value < 1e-9 else self.value  # the optimiser stops a hair above the bound
        bound = " (at the bound 0)" if value == 0 else ""
        return f"{self.name} = {value:.4g}{unit}{bound}, 95 % CI [{self.ci_low:.4g}, {self.ci_high:.4g}]"


@dataclass(frozen=True)
class Calibration:
    params: LogGP
    parameters: tuple[Parameter, ...]
    points: int
    median_abs_error: float  # in-sample median |relative error|
    quantity: str
    gap_by_region: dict[str, float] = field(default_factory=dict)  # fitted gap_us[region] values

    def priced_table(self, table: RegionTable) -> RegionTable:
        """``table`` with the fitted per-region gaps as its ``gap_us`` column (what predictions use)."""
        return _with_gaps(table, self.gap_by_region)

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


def _region_of(name: str) -> str | None:
    """``gap_us[other_node]`` -> ``other_node``; a scalar parameter -> None."""
    return name[len("gap_us["):-1] if name.startswith("gap_us[") else None


def _with_gaps(table: RegionTable, gaps: dict[str, float]) -> RegionTable:
    return dataclasses.replace(table, gap_us={**table.gap_us, **gaps}) if gaps else table


# Measurements and the placement they ran with (its prefixes are the smaller runs): one per mapping.
Groups = Sequence[tuple[Sequence[Measured], Placement]]


class _Model:
    """Predictions for groups of measurements (each with its placement) as a function of the free parameters."""

    def __init__(self, groups: Groups, table: RegionTable, free: Sequence[str], *, segsize: int, quantity: str) -> None:
        if quantity not in QUANTITIES:
            raise ValueError(f"quantity {quantity!r}: choose from {', '.join(QUANTITIES)}")
        self.cases: list[tuple[Measured, Placement, dict[tuple[int, int], str]]] = []
        for measured, place in groups:
            too_big = [m.np for m in measured if m.np > place.size]
            if too_big:
                raise ValueError(f"measurements at np={max(too_big)} do not fit the placement of {place.size} ranks")
            regions: dict[tuple[int, int], str] = {}  # one pair -> region cache per placement
            prefixes = {n: place.prefix(n) for n in {m.np for m in measured}}
            self.cases += [(m, prefixes[m.np], regions) for m in measured]
        self.table = table
        self.free, self.segsize, self.quantity = list(free), segsize, quantity
        self.y = np.array([m.latency_us for m, _, _ in self.cases])

    def params(self, x: Sequence[float] | np.ndarray) -> LogGP:
        return LogGP(**{name: max(0.0, float(v)) for name, v in zip(self.free, x) if _region_of(name) is None})

    def gaps(self, x: Sequence[float] | np.ndarray) -> dict[str, float]:
        return {r: max(0.0, float(v)) for name, v in zip(self.free, x) if (r := _region_of(name)) is not None}

    def predicted(self, params: LogGP, gaps: dict[str, float] | None = None) -> np.ndarray:
        table = _with_gaps(self.table, gaps or {})
        out = []
        for m, prefix, regions in self.cases:
            p = predict(m.collective, m.algorithm, prefix, table, m.bytes, params=params,
                        segsize=self.segsize, regions=regions)  # fmt: skip
            out.append(p.completion_us if self.quantity == "completion" else p.rank_mean_us)
        return np.array(out)

    def residuals(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.asarray(np.log(self.predicted(self.params(x), self.gaps(x)) / self.y), dtype=float)


def _identifiable(groups: Groups, table: RegionTable, candidates: Sequence[str],
                  *, segsize: int, quantity: str) -> list[str]:  # fmt: skip
    """The candidates whose effect on the residuals is neither nil nor a combination of the others'.

    Finite-difference Jacobian at a nominal point (every candidate = half the table's smallest
    latency), columns scaled to unit length; a candidate joins if it leaves the smallest singular
    value of the chosen columns above 0.02 (beyond that the fit trades one for the other freely).
    """
    model = _Model(groups, table, candidates, segsize=segsize, quantity=quantity)
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
    gap_regions: Sequence[str] = (),
) -> Calibration:
    """Fit the LogGP scalars ``table`` lacks to ``measured`` (module docstring: method and CIs);
    ``gap_regions``: regions given a gap of their own (``gap_us[region]``)."""
    return calibrate_groups([(measured, place)], table, segsize=segsize, quantity=quantity,
                            gap_regions=gap_regions)


def calibrate_groups(
    groups: Groups,
    table: RegionTable,
    *,
    segsize: int = 0,
    quantity: str = "completion",
    gap_regions: Sequence[str] = (),
) -> Calibration:
    """:func:`calibrate` on measurements taken with several placements (e.g. every mapping but one)."""
    measured = [m for series, _ in groups for m in series]
    if not measured:
        raise ValueError("no measurements to calibrate on")
    unknown = [r for r in gap_regions if r not in table.latency_us]
    if unknown:
        raise ValueError(f"gap_regions {', '.join(unknown)} are not regions of {table.source}")
    candidates = [c for c in CANDIDATES if not ((c == "overhead_us" and table.overhead_us) or (c == "gap_us" and table.gap_us))]
    candidates += [f"gap_us[{r}]" for r in gap_regions if r not in table.gap_us]
    free = _identifiable(groups, table, candidates, segsize=segsize, quantity=quantity)
    model = _Model(groups, table, free, segsize=segsize, quantity=quantity)
    cis: dict[str, tuple[float, float]] = {}
    if free:
        x0 = np.full(len(free), 0.5 * min(table.latency_us.values()))
        fit = least_squares(model.residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale=x0, loss=LOSS,
                            f_scale=LOSS_SCALE)
        params, gaps = model.params(fit.x), model.gaps(fit.x)
        values = dict(zip(free, (max(0.0, float(v)) for v in fit.x)))
        dof = len(measured) - len(free)
        jac = np.asarray(fit.jac, dtype=float)  # dense: least_squares' default jac is a finite-difference array
        jtj = jac.T @ jac
        if dof > 0 and np.linalg.matrix_rank(jtj) == len(free):
            cov = np.linalg.inv(jtj) * (2 * fit.cost / dof)
            half = student_t.ppf(0.975, dof) * np.sqrt(np.diag(cov))
        else:
            half = np.full(len(free), math.inf)
        cis = {n: (max(0.0, values[n] - hw), values[n] + hw) for n, hw in zip(free, half)}
    else:
        params, gaps, values = LogGP(), {}, {}
    errors = np.abs(np.expm1(model.residuals([values[n] for n in free])))  # relative errors
    parameters = tuple(
        Parameter(name, values.get(name, getattr(params, name, 0.0)), *cis.get(name, (math.nan, math.nan)),
                  fitted=name in cis)
        for name in candidates
    )
    return Calibration(params, parameters, len(measured), float(statistics.median(errors)), quantity, gaps)


def predict_held_out(
    measured: Sequence[Measured],
    place: Placement,
    table: RegionTable,
    held_out: tuple[str, str],
    *,
    segsize: int = 0,
    quantity: str = "completion",
    gap_regions: Sequence[str] = (),
    perturbed: Collection[Measured] = (),
) -> tuple[Calibration, list[tuple[Measured, float]]]:
    """Leave one algorithm out: calibrate on every measurement but ``held_out`` = (collective,
    algorithm) — and but the default Bcast's runs where Open MPI's decision calls that algorithm —,
    then predict the held-out measurements; returns the calibration and (measurement, predicted µs)
    pairs. ``perturbed``: runs not calibrated on (:func:`.perturbed_runs.perturbed_launches`; a held-out one
    is still predicted)."""
    coll, alg = held_out[0].lower(), held_out[1]
    # A default Bcast's run at a P where Open MPI's decision calls the held-out algorithm IS a run of it:
    # calibrating on it would hand the held-out data back in-sample.
    train = [m for m in measured if (m.collective, m.algorithm) != (coll, alg) and _ran(m) != (coll, alg)
             and m not in perturbed]
    test = [m for m in measured if (m.collective, m.algorithm) == (coll, alg)]
    if not test:
        raise ValueError(f"no measurements of {coll} {alg} to hold out")
    if not train:
        raise ValueError(f"nothing left to calibrate on once {coll} {alg} is held out")
    cal = calibrate(train, place, table, segsize=segsize, quantity=quantity,
                    gap_regions=gap_regions)
    return cal, list(zip(test, predicted(cal, [(test, place)], table, segsize=segsize, quantity=quantity)))


def _ran(m: Measured) -> tuple[str, str]:
    """(collective, algorithm) a measurement really ran: the default Bcast resolved by Open MPI's decision."""
    if m.collective == "bcast" and m.algorithm == "default":
        return m.collective, bcast_default_algorithm(m.np, m.bytes)
    return m.collective, m.algorithm


def predicted(cal: Calibration, groups: Groups, table: RegionTable, *, segsize: int = 0,
              quantity: str = "completion") -> list[float]:  # fmt: skip
    """What ``cal`` predicts (µs, ``quantity``) for every measurement of ``groups``, in order."""
    model = _Model(groups, table, [], segsize=segsize, quantity=quantity)
    return [float(v) for v in model.predicted(cal.params, cal.gap_by_region)]
