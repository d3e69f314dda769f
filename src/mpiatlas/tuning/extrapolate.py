"""Predict collective algorithms' times at process counts and sizes never measured, with an interval.

Two predictors share one interface (:class:`Predictor`): ``fit`` on measurements, ``predict`` a
point and a 90 % interval per (algorithm, np, bytes).

**MPI-aware** (``mpi=True``). The structure comes from the project's models: each algorithm's
time over the target placement (the node's regions, per-region latencies, LogGP scalars calibrated
on the training measurements: :func:`mpiatlas.models.loggp_fit.calibrate`), and for ``default``
the algorithm Open MPI's fixed decision runs at that (P, size) (:mod:`mpiatlas.models.ompi_decision`,
inside :func:`mpiatlas.models.loggp.predict`). The prediction is the structural time scaled by
the measured/structural ratio at the nearest measured P of the same algorithm and size,
times a learned correction: a random forest (scikit-learn) on log P, log size, the algorithm,
the algorithm the default resolves to, log structural time, that ratio and the log distance to
the nearest measured P, fitted to log(measured / scaled structural). Trees extrapolate flat, so
beyond the measured P the correction stays what it was at the edge: the structure carries the
growth. Where the default runs one of the forced algorithms (Open MPI's fixed decision), it is the same
code: its time is that algorithm's prediction times the default/forced offset measured where the
default ran it (:mod:`.same_code`), not a separate extrapolation that would invent a gap between them.

**Black box** (``mpi=False``): the same forest on log P, log size and the algorithm only, fitted
to log(measured).

Intervals: forward validation inside the training data, the way the model is used (to go up in
P): for each cut c (the largest measured P halved, again and again, down to the
second smallest measured P), fit on P <= c, predict the measured P above c; the 5th and 95th percentiles of the
log residuals, per algorithm, are added to the prediction. No test data are seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import polars as pl
from sklearn.ensemble import RandomForestRegressor

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.models.collective_regions import ModelError
from mpiatlas.models.loggp import LogGP, predict as loggp_predict
from mpiatlas.models.loggp_fit import Measured, calibrate
from mpiatlas.models.ompi_decision import bcast_default_algorithm
from mpiatlas.models.region_latency import Placement, RegionTable
from mpiatlas.tuning import same_code

# One measured point per (collective, algorithm, np, bytes): the median of its repetitions.
KEYS = ("collective", "algorithm", "np", "bytes")
POINT = ("collective", "np", "bytes")
LEVEL = 0.90  # two-sided interval
class ForestParams(TypedDict):
    """The random forest's settings (scikit-learn RandomForestRegressor keywords)."""

    n_estimators: int
    min_samples_leaf: int
    random_state: int


FOREST: ForestParams = {"n_estimators": 200, "min_samples_leaf": 3, "random_state": 0}  # fixed a priori, not tuned


class ExtrapolationError(ValueError):
    """Measurements that cannot train a model (the message says what is missing)."""


def measured_frame(rows: Sequence[Measured]) -> pl.DataFrame:
    """Measurements as a frame, one row per key (median of repeats)."""
    frame = pl.DataFrame([{"collective": m.collective, "algorithm": m.algorithm, "np": m.np, "bytes": m.bytes,
                           "latency_us": m.latency_us} for m in rows])
    return frame.group_by(list(KEYS)).agg(pl.col("latency_us").median()).sort(list(KEYS))


@dataclass
class Structure:
    """The models' time per (collective, algorithm, np, bytes) over one placement (cached)."""

    placement: Placement
    table: RegionTable
    params: dict[str, LogGP] = field(default_factory=dict)  # per collective, calibrated
    _cache: dict[tuple[str, str, int, int], float] = field(default_factory=dict)
    _regions: dict[tuple[int, int], str] = field(default_factory=dict)

    def calibrate(self, train: pl.DataFrame) -> None:
        """LogGP scalars per collective from the training measurements the models cover."""
        for (coll,), part in train.group_by(["collective"]):
            rows = [Measured(str(coll), r["algorithm"], r["np"], r["bytes"], r["latency_us"])
                    for r in part.iter_rows(named=True) if self.time(str(coll), r["algorithm"], r["np"], r["bytes"]) > 0]
            if len(rows) < 3:
                continue
            try:
                cal = calibrate(rows, self.placement, self.table, quantity="rank_mean")
            except (ValueError, ModelError):
                continue  # the latency-only structure stays
            self.params[str(coll)] = cal.params
            self._cache.clear()

    def time(self, collective: str, algorithm: str, np_: int, nbytes: int) -> float:
        """Model µs (OSU's rank mean), or 0 where the models do not cover it."""
        key = (collective, algorithm, np_, nbytes)
        if key not in self._cache:
            try:
                pred = loggp_predict(collective, algorithm, self.placement.prefix(np_), self.table, nbytes,
                                     params=self.params.get(collective), regions=self._regions)
                self._cache[key] = pred.rank_mean_us if pred.rank_mean_us > 0 else 0.0
            except (ModelError, ValueError):
                self._cache[key] = 0.0
        return self._cache[key]

    def resolved(self, collective: str, algorithm: str, np_: int, nbytes: int) -> str:
        """What runs: the default Bcast resolved to Open MPI's fixed choice; anything else as named."""
        if collective == "bcast" and algorithm == DEFAULT:
            return bcast_default_algorithm(np_, nbytes)
        return algorithm


def _nearest(train_np: dict[tuple[str, str, int], list[tuple[int, float]]], key: tuple[str, str, int], np_: int,
             exclude_self: bool) -> tuple[int, float] | None:
    """(np, µs) of the nearest measured P at or below ``np_`` (else the smallest above)."""
    points = [p for p in train_np.get(key, []) if not (exclude_self and p[0] == np_)]
    below = [p for p in points if p[0] <= np_]
    if below:
        return max(below)
    return min(points) if points else None


@dataclass
class Predictor:
    """Fit on measurements, predict (point, low, high) in µs; see the module docstring."""

    mpi: bool
    structure: Structure | None = None
    algorithms: list[str] = field(default_factory=list)
    resolved_names: list[str] = field(default_factory=list)
    _train: dict[tuple[str, str, int], list[tuple[int, float]]] = field(default_factory=dict)
    _forest: Any = None  # a fitted sklearn forest (untyped library)
    _bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    _ratio_bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    _same_offsets: dict[str, same_code.Offset] = field(default_factory=dict)

    def _index(self, train: pl.DataFrame) -> None:
        self._train = {}
        for r in train.iter_rows(named=True):
            self._train.setdefault((r["collective"], r["algorithm"], r["bytes"]), []).append((r["np"], r["latency_us"]))
        self.algorithms = sorted(set(train["algorithm"]))
        if self.structure is not None:
            names = {self.structure.resolved(r["collective"], r["algorithm"], n, r["bytes"])
                     for r in train.select("collective", "algorithm", "bytes").unique().iter_rows(named=True)
                     for n in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)}
            self.resolved_names = sorted(names)

    def _rows(self, frame: pl.DataFrame, training: bool) -> tuple[np.ndarray, np.ndarray]:
        """(features, base log µs) per row; base is what the forest corrects (0 for the black box)."""
        feats, base = [], []
        for r in frame.iter_rows(named=True):
            coll, alg, n, b = r["collective"], r["algorithm"], r["np"], r["bytes"]
            x = [math.log2(n), math.log2(b + 1)] + [float(alg == a) for a in self.algorithms]
            if not self.mpi or self.structure is None:
                feats.append(x)
                base.append(0.0)
                continue
            s = self.structure.time(coll, alg, n, b)
            near = _nearest(self._train, (coll, alg, b), n, exclude_self=training)
            log_s = math.log(s) if s > 0 else 0.0
            ratio, dist = 0.0, 0.0
            if near is not None:
                s_near = self.structure.time(coll, alg, near[0], b)
                ratio = math.log(near[1] / s_near) if s > 0 and s_near > 0 else math.log(near[1])
                dist = math.log2(n / near[0])
            what = self.structure.resolved(coll, alg, n, b)
            x += [float(what == a) for a in self.resolved_names] + [log_s, ratio, dist, float(s > 0)]
            feats.append(x)
            base.append(log_s + ratio)
        return np.asarray(feats, dtype=float), np.asarray(base, dtype=float)

    def _fit_forest(self, train: pl.DataFrame) -> None:
        self._index(train)
        self._same_offsets = same_code.offsets(train, self.structure.resolved) if self.structure is not None and self.mpi else {}
        x, base = self._rows(train, training=True)
        y = np.log(train["latency_us"].to_numpy()) - base
        forest = RandomForestRegressor(**FOREST)
        forest.fit(x, y)
        self._forest = forest

    def _point(self, frame: pl.DataFrame) -> np.ndarray:
        x, base = self._rows(frame, training=False)
        correction: np.ndarray = np.asarray(self._forest.predict(x), dtype=np.float64)
        total: np.ndarray = base + correction
        return self._same_code(frame, total)

    def _same_code(self, frame: pl.DataFrame, log_t: np.ndarray) -> np.ndarray:
        """The default's log time where it runs a forced algorithm of the frame (same code): that algorithm's
        prediction plus the default/forced offset measured where the default ran it (see :mod:`.same_code`)."""
        if self.structure is None or not self.mpi:
            return log_t
        at = {(r["collective"], r["algorithm"], r["np"], r["bytes"]): i for i, r in enumerate(frame.iter_rows(named=True))}
        out = log_t.copy()
        for (coll, alg, n, b), i in at.items():
            if alg != DEFAULT:
                continue
            runs = self.structure.resolved(coll, alg, n, b)
            j = at.get((coll, runs, n, b))
            if j is not None and runs in self._same_offsets:
                out[i] = log_t[j] + self._same_offsets[runs].log_offset
        return out

    def fit(self, train: pl.DataFrame) -> Predictor:
        if train.height == 0:
            raise ExtrapolationError("no measurements to learn from")
        train = train.sort(list(KEYS))  # the forest's bootstrap depends on row order: one input, one result
        if self.structure is not None and self.mpi:
            self.structure.calibrate(train)
        self._bounds, self._ratio_bounds = self._forward_bounds(train)
        self._fit_forest(train)
        return self

    def _forward_bounds(self, train: pl.DataFrame) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
        """Per algorithm, the 5th/95th percentiles of the log residuals going up in P inside the training
        data: of the time, and of the time relative to the default at the same point (paired)."""
        nps = sorted(set(train["np"]))
        cuts = _halvings(nps[-1], nps[min(1, len(nps) - 1)])
        errors: dict[str, list[float]] = {}
        ratio_errors: dict[str, list[float]] = {}
        for cut in cuts:
            low, high = train.filter(pl.col("np") <= cut), train.filter(pl.col("np") > cut)
            known = high.filter(pl.col("algorithm").is_in(sorted(set(low["algorithm"]))))
            if low.height == 0 or known.height == 0:
                continue
            self._fit_forest(low)
            err = np.log(known["latency_us"].to_numpy()) - self._point(known)
            frame = known.with_columns(pl.Series("err", err))
            for alg, e in zip(frame["algorithm"], err):
                errors.setdefault(alg, []).append(float(e))
            base = frame.filter(pl.col("algorithm") == DEFAULT).select(*POINT, pl.col("err").alias("err_default"))
            paired = frame.join(base, on=list(POINT)).filter(pl.col("algorithm") != DEFAULT)
            for alg, e in zip(paired["algorithm"], (paired["err"] - paired["err_default"]).to_list()):
                ratio_errors.setdefault(alg, []).append(float(e))
        algs = sorted(set(train["algorithm"]))
        return _quantiles(errors, algs), _quantiles(ratio_errors, algs)

    def predict(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (collective, algorithm, np, bytes) with predicted_us, predicted_lo_us, predicted_hi_us."""
        unknown = set(frame["algorithm"]) - set(self.algorithms)
        if unknown:
            raise ExtrapolationError(f"no measurements of algorithm(s) {', '.join(sorted(unknown))} to predict from")
        log_t = self._point(frame)
        lo = np.array([self._bounds[a][0] for a in frame["algorithm"]])
        hi = np.array([self._bounds[a][1] for a in frame["algorithm"]])
        out = frame.with_columns(pl.Series("predicted_us", np.exp(log_t)),
                                 pl.Series("predicted_lo_us", np.exp(log_t + lo)),
                                 pl.Series("predicted_hi_us", np.exp(log_t + hi)))
        default = out.filter(pl.col("algorithm") == DEFAULT).select(*POINT, pl.col("predicted_us").alias("default_us"))
        out = out.join(default, on=list(POINT), how="left").with_columns(
            (pl.col("predicted_us") / pl.col("default_us")).alias("ratio"))
        r_lo = pl.Series([self._ratio_bounds.get(a, (0.0, 0.0))[0] for a in out["algorithm"]])
        r_hi = pl.Series([self._ratio_bounds.get(a, (0.0, 0.0))[1] for a in out["algorithm"]])
        return out.with_columns((pl.col("ratio") * r_lo.exp()).alias("ratio_lo"),
                                (pl.col("ratio") * r_hi.exp()).alias("ratio_hi")).drop("default_us")


def _quantiles(errors: dict[str, list[float]], algorithms: Sequence[str]) -> dict[str, tuple[float, float]]:
    """(low, high) residual quantiles per algorithm; one without residuals takes the pooled ones; without
    any (too few measured P to validate on), the interval is unbounded: nothing is known of the error."""
    pooled = [e for v in errors.values() for e in v]
    if not pooled:
        return dict.fromkeys(algorithms, (-math.inf, math.inf))
    tail = (1 - LEVEL) / 2
    return {a: (float(np.quantile(errors.get(a) or pooled, tail)), float(np.quantile(errors.get(a) or pooled, 1 - tail)))
            for a in algorithms}


def _halvings(top: int, floor: int) -> list[int]:
    """top/2, top/4, ... down to floor: the cuts of the forward validation."""
    out, c = [], top // 2
    while c >= floor:
        out.append(c)
        c //= 2
    return out


def choose(predicted: pl.DataFrame) -> pl.DataFrame:
    """Per (collective, np, bytes): a forced algorithm only where the upper bound of its time relative
    to the default's (paired: both predicted at the same point, the interval from the forward
    validation of that ratio) lies below 1 -- the fastest such by point prediction; else the
    default, with the reason."""
    out = []
    for (coll, n, b), part in predicted.group_by(["collective", "np", "bytes"], maintain_order=True):
        rows = {r["algorithm"]: r for r in part.iter_rows(named=True)}
        if DEFAULT not in rows:
            raise ExtrapolationError(f"{coll}: no prediction for the default at np={n}, bytes={b}: the default "
                                     "must be measured (it is the baseline every choice is judged against)")
        d = rows[DEFAULT]
        sure = [r for a, r in rows.items() if a != DEFAULT and r["ratio_hi"] < 1.0]
        fastest = min(rows.values(), key=lambda r: r["predicted_us"])
        if sure:
            pick = min(sure, key=lambda r: r["predicted_us"])
            why = (f"{pick['algorithm']}: predicted {pick['predicted_us']:.3g} µs, {1 - pick['ratio']:.0%} faster than the "
                   f"default; its time / the default's at most {pick['ratio_hi']:.3f} ({LEVEL:.0%} interval)")
        elif fastest["algorithm"] == DEFAULT:
            pick, why = d, "the default is predicted fastest"
        else:
            pick = d
            why = (f"{fastest['algorithm']} predicted {fastest['predicted_us']:.3g} µs against the default's "
                   f"{d['predicted_us']:.3g}, but its time / the default's may reach {fastest['ratio_hi']:.3f} "
                   f"({LEVEL:.0%} interval [{fastest['ratio_lo']:.3f}, {fastest['ratio_hi']:.3f}]): not sure "
                   "enough to leave the default")
        out.append({"collective": coll, "np": n, "bytes": b, "algorithm": pick["algorithm"],
                    "predicted_us": pick["predicted_us"], "predicted_lo_us": pick["predicted_lo_us"],
                    "predicted_hi_us": pick["predicted_hi_us"], "default_us": d["predicted_us"],
                    "ratio": pick["ratio"], "ratio_hi": pick["ratio_hi"], "candidate": fastest["algorithm"],
                    "reason": why})
    return pl.DataFrame(out).sort("collective", "np", "bytes")
