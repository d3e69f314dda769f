"""α-β models of Alltoall and Allgather over m nodes with k ranks per node.

With x the message size in bytes as IMB counts it (Alltoall: the block each rank sends to each
other rank; Allgather: each rank's contribution), b the network's nominal bandwidth in bytes/s
(the campaign's ``network.bandwidth_gbit_s``) and t the time:

* Alltoall:            t = α · x · (m − 1) · k² / b + β
  every node pushes k ranks × (m − 1)·k remote ranks × x bytes through its one link;
* Allgather (ring):    t = (m − 1) · (α · x · k / b + β)
  m − 1 ring steps, each moving a node's k blocks of x bytes over the link.

α ≥ 0 is dimensionless, the cost relative to the nominal link: α = 1 is the "speed of light"
(the link at its line rate, no latency), α > 1 slower. β ≥ 0 is a latency in µs: Alltoall's
fixed cost, Allgather's per ring step.

Fitting, per series (stack, transport, algorithm, IMB options, knob set, placement over nodes,
benchmark, k) over every node count m. Every axis that tells two cells apart is in the series key:
``-off_cache`` against IMB's defaults, two knob sets, block against cyclic placement are different
measurements, and one fit over them would describe none. The m = 1 baseline has no placement (one
node): it serves every placement of its series.

* both models are linear in (α, β), so the fit is one bounded linear least-squares problem
  (``scipy.optimize.lsq_linear``, α, β ≥ 0) — no starting values, no local minima;
* the residuals are *relative*, (model − t)/t, i.e. every row is weighted by 1/t: times span
  4–5 decades (µs-scale small messages to seconds at 4 MiB × many ranks), and an absolute
  least-squares fit would be decided by the few largest points alone, leaving β meaningless
  (the same reason as in :mod:`mpiatlas.models.hockney`);
* several samples per (m, x) are repetitions, reduced to their median; 95 % CIs come from a
  seeded bootstrap over the repetitions when every point has ≥ 2, else over the relative
  residuals;
* 0-byte rows are IMB no-op timings and are dropped. For Allgather the model is 0 at m = 1 (no
  ring step), so single-node points carry no information on α or β: they are left out of the fit
  (listed with ``used: false``) and the entry says so. For Alltoall the model's m = 1 value is β
  alone, but an on-node Alltoall is a size-dependent memory copy: with multi-node points present,
  m = 1 points are likewise shown and not fitted;
* the fit is refused, with the reason in the entry's ``error``, when fewer than 2 distinct
  (m, x) points remain or when the points cannot tell α from β (no multi-node point, or one
  value of the network term only).

Beside these two original models (whose α, β stay each entry's ``alpha``/``beta_us``),
:func:`fit_families` fits every algorithm family of :mod:`mpiatlas.models.alphabeta_models`
(Alltoall: linear, pairwise, Bruck; Allgather: ring, linear, recursive doubling, Bruck) to the
multi-node points, picks the best by AIC of the relative residuals (``best_model``,
``selection``) and fits the winner again per message size (``per_size``; the named, original model
likewise in ``per_size_named``, whichever family wins: α, β, 1/α per x, over
the node counts and k of that size). A size is fitted freely only where its points can separate α
from β (≥ 3 distinct (m, k); two would be interpolated exactly, noise and all); elsewhere β is held
at the all-size value and α alone is fitted, so α is still that size's fraction of the line rate.
Every size also gives the β it implies at the all-size α (``beta_at_alpha_us``, with a CI). ``fit_alphabeta_table`` adds these to every per-k entry and
lists one fit pooled over k per series measured at several k under ``pooled``.

Units: bytes, µs, b in bytes/µs internally (1 Gbit/s = 125 bytes/µs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import polars as pl

from mpiatlas.tables.samples import with_series_axes
from mpiatlas.models.alphabeta_records import (
    AlphaBetaFits,
    AlphaBetaPoint,
    AlphaBetaRecord,
    FamilyFit,
    Families,
    Network,
    PerSize,
    PerSizeRow,
    PooledRecord,
    SERIES_KEYS,
    SeriesFields,
)
from mpiatlas.models.alphabeta_models import (
    BENCHMARK_MODELS,
    MODELS,
    Ranked,
    aic,
    coefficients,
    not_applicable,
    select,
)

FloatArray = npt.NDArray[np.float64]

# IMB benchmark -> model name. Alltoallv/Allgatherv can have unequal blocks: not these models.
ALPHABETA_BENCHMARKS: dict[str, str] = {"Alltoall": "alltoall", "Allgather": "allgather_ring"}
FORMULAS: dict[str, str] = {
    "Alltoall": "t = α · x · (m − 1) · k² / b + β",
    "Allgather": "t = (m − 1) · (α · x · k / b + β)",
}
GROUP_KEYS: tuple[str, ...] = ("stack", "transport", "algorithm")
# The series key (alphabeta_records.SERIES_KEYS, which the records module spells out without polars):
# GROUP_KEYS and the axes that tell cells apart besides them (tables.samples.SERIES_AXES).
MIN_POINTS = 2
N_BOOT = 1000
# A collective ends when its slowest rank does: fit IMB's t_max; t_usec (= t_avg for IMB
# collectives) only where a table has no t_max.
TIME_COLUMNS: tuple[str, ...] = ("t_max_usec", "t_usec")
# The single-node baseline (m = 1) of a multi-node series: the `node` mapping packs each node's
# ranks on consecutive cores, which is what `core` does on one node.
BASELINE_MAPPING = "core"
ALLGATHER_M1_NOTE = ("m = 1 points excluded from the fit: the ring model predicts 0 on one node "
                     "(no ring step), so they carry no information on α or β")


ALLTOALL_M1_NOTE = ("m = 1 points shown but not fitted: on one node Alltoall is a memory copy that grows "
                    "with the message size, which the model's constant β (its m = 1 value) does not describe")


class AlphaBetaError(ValueError):
    """The points cannot determine α and β; the message says why."""


# -- the models --------------------------------------------------------------------------


def design(benchmark: str, nodes: npt.ArrayLike, x: npt.ArrayLike, k: int, b_bytes_per_us: float
           ) -> tuple[FloatArray, FloatArray]:
    """The coefficients of α and of β per point: t = α·a + β·c (µs)."""
    m = np.asarray(nodes, dtype=float)
    s = np.asarray(x, dtype=float)
    if benchmark == "Alltoall":
        return s * (m - 1.0) * k * k / b_bytes_per_us, np.ones_like(m)
    if benchmark == "Allgather":
        return (m - 1.0) * s * k / b_bytes_per_us, m - 1.0
    raise ValueError(f"no α-β model for {benchmark!r}; models: {', '.join(ALPHABETA_BENCHMARKS)}")


def predict(benchmark: str, alpha: float, beta_us: float, nodes: npt.ArrayLike, x: npt.ArrayLike, k: int,
            b_bytes_per_us: float) -> FloatArray:
    a, c = design(benchmark, nodes, x, k, b_bytes_per_us)
    return alpha * a + beta_us * c


def speed_of_light(benchmark: str, nodes: npt.ArrayLike, x: npt.ArrayLike, k: int, b_bytes_per_us: float
                   ) -> FloatArray:
    """The model at α = 1, β = 0: the link at its nominal rate, nothing else."""
    return predict(benchmark, 1.0, 0.0, nodes, x, k, b_bytes_per_us)


def _solve(a: FloatArray, c: FloatArray, t: FloatArray) -> tuple[float, float]:
    """min Σ((α·a + β·c − t)/t)² over α, β ≥ 0."""
    # Dividing each row by t turns the absolute residual into the relative one (see the module
    # docstring); the target becomes 1.
    rows = np.column_stack([a / t, c / t])
    # Column scaling for conditioning: α's column is x-proportional (up to ~1e5), β's ~1/t.
    scale = np.abs(rows).max(axis=0)
    scale[scale == 0] = 1.0
    # scipy is imported here: a one-node campaign fits nothing, and the report imports this module.
    from scipy.optimize import lsq_linear

    res = lsq_linear(rows / scale, np.ones_like(t), bounds=(0.0, np.inf), method="bvls")
    alpha, beta = res.x / scale
    return float(alpha), float(beta)


def _check_identifiable(a: FloatArray, c: FloatArray, t: FloatArray) -> None:
    if len(t) < MIN_POINTS:
        raise AlphaBetaError(f"need at least {MIN_POINTS} distinct (m, x) points, got {len(t)}")
    if not np.any(a > 0):
        raise AlphaBetaError("no multi-node (m ≥ 2) point with x > 0: the network term vanishes, α is undetermined")
    rows = np.column_stack([a / t, c / t])
    if np.linalg.matrix_rank(rows / np.abs(rows).max(axis=0)) < 2:
        raise AlphaBetaError("the points cannot tell α from β (the network term is proportional to the latency "
                             "term at every point: measure more message sizes)")


# -- one fit -----------------------------------------------------------------------------


@dataclass
class AlphaBetaFit:
    benchmark: str
    ppn: int
    network: Network
    alpha: float
    alpha_ci: tuple[float, float]
    beta_us: float
    beta_ci_us: tuple[float, float]
    n_points: int
    n_samples: int
    nodes: list[int]
    r2: float | None
    rel_rms: float
    points: tuple[AlphaBetaPoint, ...]
    ci_method: str
    notes: list[str] = field(default_factory=list)
    n_boot: int = N_BOOT

    def record(self, series: SeriesFields, *, oversubscribed: bool, notes: Sequence[str] = (),
               families: Families | None = None) -> AlphaBetaRecord:
        """The fit as an entry of alphabeta.json's ``fits``: ``series`` its key, ``notes`` added to the fit's."""
        return AlphaBetaRecord(
            benchmark=self.benchmark, stack=series.stack, transport=series.transport, algorithm=series.algorithm,
            options=series.options, knobs=series.knobs, placement=series.placement, cell_keys=series.keys,
            ppn=self.ppn, model=ALPHABETA_BENCHMARKS[self.benchmark], formula=FORMULAS[self.benchmark],
            bandwidth_gbit_s=self.network.bandwidth_gbit_s, network=self.network.name, alpha=self.alpha,
            alpha_ci=self.alpha_ci, beta_us=self.beta_us, beta_ci_us=self.beta_ci_us, n_points=self.n_points,
            n_samples=self.n_samples, nodes=tuple(self.nodes), r2=self.r2, rel_rms=self.rel_rms,
            ci_method=self.ci_method, n_boot=self.n_boot, notes=(*self.notes, *notes), points=self.points,
            oversubscribed=oversubscribed, families=families)


@dataclass
class _Points:
    """Samples grouped by distinct (m, x)."""

    nodes: FloatArray
    x: FloatArray
    samples: list[FloatArray]

    @property
    def median(self) -> FloatArray:
        return np.array([np.median(s) for s in self.samples])


def _group_points(nodes: FloatArray, x: FloatArray, t: FloatArray) -> _Points:
    keys = sorted(set(zip(nodes.tolist(), x.tolist())))
    samples = [t[(nodes == m) & (x == s)] for m, s in keys]
    return _Points(np.array([m for m, _ in keys], dtype=float), np.array([s for _, s in keys], dtype=float), samples)


def _bootstrap(a: FloatArray, c: FloatArray, t_med: FloatArray, samples: list[FloatArray], fitted: FloatArray,
               rng: np.random.Generator) -> tuple[FloatArray, FloatArray, str]:
    by_reps = all(len(s) >= 2 for s in samples)
    if by_reps:
        # Resample each point's repetitions and take the median, as the fit does.
        t_star = np.column_stack([np.median(rng.choice(s, size=(N_BOOT, len(s))), axis=1) for s in samples])
    else:
        rel = t_med / fitted - 1.0
        rel = (rel - rel.mean()) * math.sqrt(len(t_med) / max(len(t_med) - 2, 1))  # df-corrected
        t_star = np.maximum(fitted * (1.0 + rng.choice(rel, size=(N_BOOT, len(t_med)))), 1e-9)
    alphas, betas = solve_batch(a, c, t_star)
    return alphas, betas, "repetitions" if by_reps else "residuals"


def solve_batch(a: FloatArray, c: FloatArray, t: FloatArray) -> tuple[FloatArray, FloatArray]:
    """:func:`_solve` for many target rows at once (t: N × n): the exact bounded 2-parameter solution.

    With two parameters and α, β ≥ 0 the optimum is the unconstrained one when it is feasible,
    else the best of the faces α = 0 or β = 0 (the objective is convex): checking those
    candidates is exact, and vectorised it makes a 1000-resample bootstrap of every model and
    every message size cheap (lsq_linear takes ~0.2 ms a call).
    """
    t = np.atleast_2d(t)
    scale_a = float(np.abs(a / t[0]).max()) or 1.0
    scale_c = float(np.abs(c / t[0]).max()) or 1.0
    ra_, rc_ = a / scale_a / t, c / scale_c / t
    saa, scc, sac = (ra_ * ra_).sum(1), (rc_ * rc_).sum(1), (ra_ * rc_).sum(1)
    ya, yc = ra_.sum(1), rc_.sum(1)

    def obj(al: FloatArray, be: FloatArray) -> FloatArray:
        value: FloatArray = al * al * saa + 2 * al * be * sac + be * be * scc - 2 * al * ya - 2 * be * yc
        return value

    with np.errstate(divide="ignore", invalid="ignore"):
        det = saa * scc - sac * sac
        ai, bi = (ya * scc - yc * sac) / det, (yc * saa - ya * sac) / det
        a1 = np.where(saa > 0, np.maximum(ya / saa, 0.0), 0.0)
        b2 = np.where(scc > 0, np.maximum(yc / scc, 0.0), 0.0)
    inside = (det > 1e-12 * saa * scc) & (ai >= 0) & (bi >= 0)
    cands: list[tuple[FloatArray, FloatArray, FloatArray | float]] = [
        (np.where(inside, ai, 0.0), np.where(inside, bi, 0.0), np.where(inside, 0.0, np.inf)),
        (a1, np.zeros_like(a1), 0.0), (np.zeros_like(b2), b2, 0.0)]
    scores = np.column_stack([obj(al, be) + pen for al, be, pen in cands])
    pick = scores.argmin(axis=1)
    alphas = np.choose(pick, [cd[0] for cd in cands]) / scale_a
    betas = np.choose(pick, [cd[1] for cd in cands]) / scale_c
    return alphas, betas


def _r2(t: FloatArray, pred: FloatArray) -> float | None:
    ss_tot = float(((t - t.mean()) ** 2).sum())
    return None if ss_tot == 0 else 1.0 - float(((t - pred) ** 2).sum()) / ss_tot


def _ci(v: FloatArray) -> tuple[float, float]:
    return float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))


def fit_alphabeta(benchmark: str, nodes: Iterable[float], sizes: Iterable[float], times: Iterable[float], *,
                  ppn: int, network: Network, seed: int = 0) -> AlphaBetaFit:
    """Fit the ``benchmark`` model to samples (m, x bytes, t µs) of one ranks-per-node count ``ppn``.

    Several samples per (m, x) are repetitions. Raises AlphaBetaError when the points cannot
    determine α and β, ValueError on bad input.
    """
    if benchmark not in ALPHABETA_BENCHMARKS:
        raise ValueError(f"no α-β model for {benchmark!r}; models: {', '.join(ALPHABETA_BENCHMARKS)}")
    if ppn < 1:
        raise ValueError(f"ranks per node must be ≥ 1, got {ppn}")
    m_all, x_all, t_all = (np.asarray(list(v), dtype=float) for v in (nodes, sizes, times))
    if not (m_all.shape == x_all.shape == t_all.shape):
        raise ValueError(f"nodes, sizes and times differ in length ({m_all.size}, {x_all.size}, {t_all.size})")
    keep = x_all > 0  # 0-byte rows: IMB no-op timings
    m_all, x_all, t_all = m_all[keep], x_all[keep], t_all[keep]
    if not np.all(np.isfinite(t_all)) or np.any(t_all <= 0):
        raise ValueError("times must be finite and > 0 µs for non-zero sizes")
    if np.any(m_all < 1):
        raise ValueError("node counts must be ≥ 1")

    pts = _group_points(m_all, x_all, t_all)
    notes: list[str] = []
    used = np.ones(len(pts.nodes), dtype=bool)
    if benchmark == "Allgather" and np.any(pts.nodes == 1):
        used = pts.nodes > 1
        notes.append(ALLGATHER_M1_NOTE)
    elif benchmark == "Alltoall" and np.any(pts.nodes == 1) and np.any(pts.nodes > 1):
        # The model's m = 1 value is the constant β, but an on-node Alltoall is a memory copy that
        # grows with x (at k = 1 a self-copy of a few hundred ns): fitted, those points drag β
        # towards 0 and wreck the relative fit. Shown as the on-node reference, not fitted.
        used = pts.nodes > 1
        notes.append(ALLTOALL_M1_NOTE)
    b = network.bytes_per_us
    a, c = design(benchmark, pts.nodes[used], pts.x[used], ppn, b)
    t_med = pts.median[used]
    samples = [s for s, u in zip(pts.samples, used) if u]
    _check_identifiable(a, c, t_med)

    alpha, beta = _solve(a, c, t_med)
    fitted = alpha * a + beta * c
    alphas, betas, method = _bootstrap(a, c, t_med, samples, fitted, np.random.default_rng(seed))
    rel = fitted / t_med - 1.0
    return AlphaBetaFit(
        benchmark=benchmark, ppn=int(ppn), network=network,
        alpha=alpha, alpha_ci=_ci(alphas), beta_us=beta, beta_ci_us=_ci(betas),
        n_points=int(used.sum()), n_samples=int(sum(len(s) for s in samples)),
        nodes=sorted({int(m) for m in pts.nodes[used]}),
        r2=_r2(t_med, fitted), rel_rms=float(math.sqrt(float(rel @ rel) / len(rel))),
        points=_point_records(benchmark, pts, used, alpha, beta, ppn, b),
        ci_method=method, notes=notes,
    )


def _point_records(benchmark: str, pts: _Points, used: npt.NDArray[np.bool_], alpha: float, beta: float, ppn: int,
                   b: float) -> tuple[AlphaBetaPoint, ...]:
    """Every (m, x) point: measured median/min/max over repetitions, model, speed of light."""
    pred = predict(benchmark, alpha, beta, pts.nodes, pts.x, ppn, b)
    light = speed_of_light(benchmark, pts.nodes, pts.x, ppn, b)
    out = []
    for i, (m, x, s) in enumerate(zip(pts.nodes, pts.x, pts.samples)):
        med = float(np.median(s))
        out.append(AlphaBetaPoint(
            nodes=int(m), bytes=int(x), used=bool(used[i]), n_reps=len(s), measured_us=med, min_us=float(s.min()),
            max_us=float(s.max()), predicted_us=float(pred[i]),
            rel_err=float(pred[i] / med - 1.0) if used[i] else None, speed_of_light_us=float(light[i])))
    return tuple(out)


# -- every model family, per message size, pooled over k --------------------------------------


@dataclass
class _MKPoints:
    """Samples grouped by distinct (m, k, x); only multi-node points (m = 1 is not a network point)."""

    nodes: FloatArray
    ppn: FloatArray
    x: FloatArray
    samples: list[FloatArray]

    @property
    def median(self) -> FloatArray:
        return np.array([np.median(s) for s in self.samples])

    def subset(self, keep: npt.NDArray[np.bool_]) -> _MKPoints:
        return _MKPoints(self.nodes[keep], self.ppn[keep], self.x[keep], [s for s, k in zip(self.samples, keep) if k])


def _group_mkx(nodes: Iterable[float], ppns: Iterable[float], sizes: Iterable[float], times: Iterable[float]
               ) -> _MKPoints:
    m, k, x, t = (np.asarray(list(v), dtype=float) for v in (nodes, ppns, sizes, times))
    if not (m.shape == k.shape == x.shape == t.shape):
        raise ValueError(f"nodes, ppn, sizes and times differ in length ({m.size}, {k.size}, {x.size}, {t.size})")
    keep = (x > 0) & (m > 1) & np.isfinite(t) & (t > 0)
    m, k, x, t = m[keep], k[keep], x[keep], t[keep]
    keys = sorted(set(zip(m.tolist(), k.tolist(), x.tolist())))
    samples = [t[(m == a) & (k == b) & (x == c)] for a, b, c in keys]
    cols = [np.array([key[i] for key in keys], dtype=float) for i in range(3)]
    return _MKPoints(cols[0], cols[1], cols[2], samples)


def _boot_targets(samples: list[FloatArray], rng: np.random.Generator) -> FloatArray | None:
    """Bootstrap medians per point (N_BOOT × n), or None when a point has a single repetition."""
    if not samples or any(len(s) < 2 for s in samples):
        return None
    return np.column_stack([np.median(rng.choice(s, size=(N_BOOT, len(s))), axis=1) for s in samples])


def _identifiable(a: FloatArray, c: FloatArray, t: FloatArray) -> bool:
    if len(t) < MIN_POINTS or not np.any(a > 0):
        return False
    rows = np.column_stack([a / t, c / t])
    top = np.abs(rows).max(axis=0)
    return bool(np.all(top > 0) and np.linalg.matrix_rank(rows / top) == 2)


def _family_fit(model: str, pts: _MKPoints, b: float, rng: np.random.Generator) -> FamilyFit:
    """One model fitted to all (m, k, x) points: α, β, CIs, RSS of the relative residuals."""
    spec = MODELS[model]
    why = not_applicable(model, pts.nodes, pts.ppn)
    a, c = coefficients(model, pts.nodes, pts.ppn, pts.x, b)
    t = pts.median
    if why is None and not _identifiable(a, c, t):
        why = "the points cannot tell α from β for this model"
    if why is not None:
        return FamilyFit(model, spec.label, spec.formula, error=why)
    alpha, beta = _solve(a, c, t)
    rel = (alpha * a + beta * c) / t - 1.0
    boot = _boot_targets(pts.samples, rng)
    if boot is None:  # single repetitions: resample the relative residuals, as fit_alphabeta does
        fitted = alpha * a + beta * c
        r = (rel - rel.mean()) * math.sqrt(len(t) / max(len(t) - 2, 1))
        boot = np.maximum(fitted * (1.0 + rng.choice(r, size=(N_BOOT, len(t)))), 1e-9)
    alphas, betas = solve_batch(a, c, boot)
    return FamilyFit(model, spec.label, spec.formula, alpha=alpha, alpha_ci=_ci(alphas), beta_us=beta,
                     beta_ci_us=_ci(betas), n_points=len(t), rss=float(rel @ rel),
                     rel_rms=float(math.sqrt(float(rel @ rel) / len(t))), median_abs_rel=float(np.median(np.abs(rel))))


# A free (α, β) fit at one size needs more distinct (m, k) points than its two parameters: with two it
# interpolates them exactly, and the noise of two medians sets α and β (β swung from 44 to 4473 µs
# between neighbouring sizes of a 5 %-noise series at m = 2, 3).
MIN_LOCAL_POINTS = 3


def _held(free: FloatArray, held: FloatArray, held_value: float, t: FloatArray) -> FloatArray:
    """The relative least-squares value ≥ 0 of one parameter with the other held: min Σ((p·free + v·held − t)/t)²
    over p, for one target row t (a 0-d array: :func:`_held_one`) or many (N × n: one value a row)."""
    w = free / t
    num = (w * (1.0 - held_value * held / t)).sum(axis=-1)
    den = (w * w).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.maximum(np.where(den > 0, num / den, np.nan), 0.0)
    return np.asarray(value, dtype=float)


def _held_one(free: FloatArray, held: FloatArray, held_value: float, t: FloatArray) -> float:
    """:func:`_held` for one target row: the value as a float."""
    return float(_held(free, held, held_value, t))


def _per_size(model: str, pts: _MKPoints, b: float, alpha_all: float, beta_all: float, rng: np.random.Generator
              ) -> tuple[PerSizeRow, ...]:
    """α, β, 1/α per message size x for the chosen model, over the (m, k) points of that size.

    Where that size's points can separate α from β (at least :data:`MIN_LOCAL_POINTS` distinct (m, k), and
    not the ring at one k, whose network and latency terms both scale with m − 1) both are fitted there.
    Otherwise β is held at the all-size fit's value and only α is fitted (``beta_fixed``): 1/α is then
    that size's fraction of the line rate. Every row also gives ``beta_at_alpha_us``, the β that size
    implies with α held at the all-size value: where the all-size model holds, it stays near β; a
    drift over sizes names a per-message cost the model lacks (a protocol switch, a rendezvous).
    """
    rows = []
    for x in sorted(set(pts.x.tolist())):
        sub = pts.subset(pts.x == x)
        a, c = coefficients(model, sub.nodes, sub.ppn, sub.x, b)
        t = sub.median
        boot = _boot_targets(sub.samples, rng)
        fixed = len(t) < MIN_LOCAL_POINTS or not _identifiable(a, c, t)
        if fixed:
            alpha = _held_one(a, c, beta_all, t) if np.any(a > 0) else math.nan
            beta = beta_all
            alphas = None if boot is None else _held(a, c, beta_all, boot)
            betas = None
        else:
            alpha, beta = _solve(a, c, t)
            alphas, betas = solve_batch(a, c, boot) if boot is not None else (None, None)
        implied = _held_one(c, a, alpha_all, t)
        implied_boot = None if boot is None else _held(c, a, alpha_all, boot)
        rows.append(PerSizeRow(
            bytes=int(x), n_points=len(t), alpha=float(alpha), beta_us=float(beta), beta_fixed=bool(fixed),
            inv_alpha=1.0 / alpha if alpha > 0 else None, alpha_ci=_ci(alphas) if alphas is not None else None,
            beta_ci_us=_ci(betas) if betas is not None else None, beta_at_alpha_us=implied,
            beta_at_alpha_ci_us=_ci(implied_boot) if implied_boot is not None else None))
    return tuple(rows)


def fit_families(benchmark: str, nodes: Iterable[float], ppns: Iterable[float], sizes: Iterable[float],
                 times: Iterable[float], *, network: Network, seed: int = 0) -> Families:
    """Every model family of ``benchmark`` on the multi-node samples (m, k, x, t), the best by AIC, and
    the best model's α, β per message size. k may vary between samples (the pooled-over-k fit)."""
    if benchmark not in BENCHMARK_MODELS:
        raise ValueError(f"no α-β model for {benchmark!r}; models: {', '.join(BENCHMARK_MODELS)}")
    pts = _group_mkx(nodes, ppns, sizes, times)
    rng = np.random.default_rng(seed)
    b = network.bytes_per_us
    models = [_family_fit(name, pts, b, rng) for name in BENCHMARK_MODELS[benchmark]]
    distinct_mk = len(set(zip(pts.nodes.tolist(), pts.ppn.tolist())))
    models = _ranked(models)
    ok = [f for f in models if f.error is None]
    selection = select([Ranked(f.model, _fitted(f.rss), f.n_points, _fitted(f.alpha_ci[1])) for f in ok], distinct_mk)
    best = selection.best
    per_size = None if best is None else _per_size_of(next(f for f in ok if f.model == best), pts, b, rng)
    # The named (original) model's α, β per size too, whichever family wins: the studies quote its numbers.
    named_fit = next((f for f in ok if f.model == BENCHMARK_MODELS[benchmark][0]), None)
    per_size_named = None if named_fit is None else _per_size_of(named_fit, pts, b, rng)
    return Families(tuple(models), best, selection, distinct_mk, per_size, per_size_named)


def _ranked(models: list[FamilyFit]) -> list[FamilyFit]:
    """The fitted families with their AIC, ΔAIC to the lowest (the same points, the same loss, 2
    parameters each) and plausibility; the refused ones as they are."""
    scores = {f.model: aic(_fitted(f.rss), f.n_points) for f in models if f.error is None}
    best_aic = min(scores.values(), default=math.nan)
    return [f if f.error is not None else replace(
        f, aic=scores[f.model], delta_aic=scores[f.model] - best_aic,
        plausible=Ranked(f.model, _fitted(f.rss), f.n_points, _fitted(f.alpha_ci[1])).plausible) for f in models]


def _fitted(v: float | None) -> float:
    """A figure a fitted family always has (None only in a refused or read-back entry)."""
    return math.nan if v is None else v


def _per_size_of(fit: FamilyFit, pts: _MKPoints, b: float, rng: np.random.Generator) -> PerSize:
    return PerSize(fit.model, _per_size(fit.model, pts, b, _fitted(fit.alpha), _fitted(fit.beta_us), rng))


# -- a samples table -----------------------------------------------------------------------


def prepare_samples(df: pl.DataFrame) -> pl.DataFrame:
    """The usable Alltoall/Allgather rows with ``nodes`` (m), ``ppn`` (k) and ``t_fit_usec``.

    Old tables without ``nodes`` (or null) are single-node (m = 1); without ``ppn``, k = np / nodes.
    """
    if "benchmark" not in df.columns or "bytes" not in df.columns:
        return pl.DataFrame()
    d = df.filter(pl.col("benchmark").is_in(list(ALPHABETA_BENCHMARKS)) & pl.col("bytes").is_not_null())
    if "status" in d.columns:
        d = d.filter(pl.col("status") == "ok")
    if "cell_status" in d.columns:
        # An invalid cell ran, but not as asked (wrong transport, co-located ranks stacked on one core).
        d = d.filter(pl.col("cell_status").is_null() | (pl.col("cell_status") == "ok"))
    if "np" not in d.columns:
        d = d.with_columns(pl.col("processes").alias("np")) if "processes" in d.columns else d.with_columns(
            pl.lit(None, dtype=pl.Int32).alias("np"))
    if "processes" in d.columns:
        # IMB -npmin tables at fewer processes than launched: not the cell's k × m ranks.
        d = d.filter(pl.col("processes").is_null() | (pl.col("processes") == pl.col("np")))
    # Tables from before multi-node cells (or concatenated with them) lack nodes: single-node.
    nodes = pl.col("nodes").fill_null(1) if "nodes" in d.columns else pl.lit(1, dtype=pl.Int32)
    d = d.with_columns(nodes.cast(pl.Int32).alias("nodes"))
    if "mapping" in d.columns:
        # A spread mapping over nodes (core-n2) fills them: no k ranks on each of m nodes to model.
        d = d.filter((pl.col("nodes") == 1) | pl.col("mapping").is_null() | (pl.col("mapping") == "node"))
    ppn = (pl.col("np") // pl.col("nodes")).cast(pl.Int32)
    d = d.with_columns(pl.col("ppn").fill_null(ppn) if "ppn" in d.columns else ppn.alias("ppn"))
    t = pl.coalesce([pl.col(c) for c in TIME_COLUMNS if c in d.columns]) if any(
        c in d.columns for c in TIME_COLUMNS) else pl.lit(None, dtype=pl.Float64)
    for key in (*GROUP_KEYS, "mapping"):
        if key not in d.columns:
            d = d.with_columns(pl.lit(None, dtype=pl.String).alias(key))
    d = with_series_axes(d)
    return d.with_columns(t.alias("t_fit_usec"), pl.col("algorithm").fill_null("default")).filter(
        pl.col("t_fit_usec").is_not_null() & pl.col("nodes").is_not_null() & pl.col("ppn").is_not_null())


def _baseline(single: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """The m = 1 rows of one series: the `core` mapping, else the only mapping there is."""
    named = sorted({v for v in single.get_column("mapping").to_list() if v is not None})
    if not named:
        return single, None  # imported or unlabelled rows: no mapping to choose from
    pick = BASELINE_MAPPING if BASELINE_MAPPING in named else (named[0] if len(named) == 1 else None)
    if pick is None:
        return single.clear(), (f"m = 1 not used: several single-node mappings ({', '.join(named)}) and no "
                                f"'{BASELINE_MAPPING}' to pair with the multi-node cells")
    return single.filter(pl.col("mapping") == pick), None


def fit_alphabeta_table(df: pl.DataFrame, network: Network, *, benchmarks: Sequence[str] = tuple(ALPHABETA_BENCHMARKS),
                        seed: int = 0) -> AlphaBetaFits:
    """Fit every series (:data:`SERIES_KEYS`, benchmark, ppn) that has multi-node samples.

    A series that cannot be fitted is an entry with an ``error``. Series measured on one node only are
    not network series: they are counted in ``notes``, not fitted.
    """
    d = prepare_samples(df)
    d = d.filter(pl.col("benchmark").is_in(list(benchmarks))) if d.height else d
    notes: list[str] = []
    fits: list[AlphaBetaRecord] = []
    keys = [*SERIES_KEYS, "benchmark", "ppn"]
    # The m = 1 rows have no placement: they are matched to a series on the key without it.
    base_keys = [k for k in keys if k != "placement"]
    multi_all = d.filter(pl.col("nodes") > 1) if d.height else d
    single_all = d.filter(pl.col("nodes") == 1) if d.height else d
    for key, multi in _groups(multi_all, keys):
        series, benchmark, ppn = _series(key), str(key[-2]), int(str(key[-1]))
        single = single_all.filter(*(pl.col(k).eq_missing(v) for k, v in zip(keys, key) if k in base_keys)) \
            if single_all.height else single_all
        base, why = _baseline(single)
        extra = [why] if why else []
        group = pl.concat([single, multi], how="diagonal_relaxed")
        over = bool(group.get_column("oversubscribed").any()) if "oversubscribed" in group.columns else False
        rows = pl.concat([base, multi], how="diagonal_relaxed")
        try:
            fit = fit_alphabeta(benchmark, rows.get_column("nodes").to_list(), rows.get_column("bytes").to_list(),
                                rows.get_column("t_fit_usec").to_list(), ppn=ppn, network=network, seed=seed)
        except ValueError as exc:  # AlphaBetaError included: a refusal, not a crash
            fits.append(AlphaBetaRecord(
                benchmark=benchmark, stack=series.stack, transport=series.transport, algorithm=series.algorithm,
                options=series.options, knobs=series.knobs, placement=series.placement, cell_keys=series.keys,
                ppn=ppn, model=ALPHABETA_BENCHMARKS[benchmark], error=str(exc), notes=tuple(extra)))
            continue
        fits.append(fit.record(series, oversubscribed=over, notes=extra,
                               families=_families_of(benchmark, multi, network, seed)))
    single_only = (single_all.select(base_keys).unique()
                   .join(multi_all.select(base_keys).unique(), on=base_keys, how="anti", nulls_equal=True).height
                   if single_all.height else 0)
    if single_only:
        notes.append(f"{single_only} Alltoall/Allgather series measured on one node only: not fitted "
                     "(the α-β models describe the network between nodes)")
    pooled = _pooled_over_k(d, network, seed) if d.height else []
    return AlphaBetaFits(network, " else ".join(TIME_COLUMNS), tuple(fits), tuple(pooled), tuple(notes))


# A samples frame's group key: the values of the key columns (str, int or null), in their order.
GroupKey = tuple[str | int | None, ...]


def _groups(frame: pl.DataFrame, keys: list[str]) -> list[tuple[GroupKey, pl.DataFrame]]:
    """``frame``'s groups by ``keys``, in the order of their keys' text (stable between runs)."""
    if not frame.height:
        return []
    groups = [(tuple(key), g) for key, g in frame.group_by(keys, maintain_order=True)]
    return sorted(groups, key=lambda kg: tuple(str(v) for v in kg[0]))


def _series(key: GroupKey) -> SeriesFields:
    """The series of a group key that starts with :data:`SERIES_KEYS`' values."""
    stack, transport, algorithm, options, knobs, placement = (None if v is None else str(v)
                                                              for v in key[:len(SERIES_KEYS)])
    return SeriesFields(stack, transport, algorithm, options, knobs, placement, keys=SERIES_KEYS)


def _families_of(benchmark: str, rows: pl.DataFrame, network: Network, seed: int) -> Families:
    """:func:`fit_families` on a samples frame's multi-node rows."""
    return fit_families(benchmark, rows.get_column("nodes").to_list(), rows.get_column("ppn").to_list(),
                        rows.get_column("bytes").to_list(), rows.get_column("t_fit_usec").to_list(),
                        network=network, seed=seed)


def _pooled_over_k(d: pl.DataFrame, network: Network, seed: int) -> list[PooledRecord]:
    """One α, β per series (:data:`SERIES_KEYS`, benchmark) over every k with multi-node samples.

    Listed apart from ``fits`` (whose entries are per k): consumers that pair fits by k keep working.
    Only series measured at ≥ 2 values of k are pooled; one k is its per-k fit already.
    """
    out: list[PooledRecord] = []
    for key, group in _groups(d.filter(pl.col("nodes") > 1), [*SERIES_KEYS, "benchmark"]):
        ks = tuple(sorted({int(v) for v in group.get_column("ppn").to_list()}))
        if len(ks) < 2:
            continue
        series, benchmark = _series(key), str(key[-1])
        out.append(PooledRecord(
            benchmark=benchmark, stack=series.stack, transport=series.transport, algorithm=series.algorithm,
            options=series.options, knobs=series.knobs, placement=series.placement, cell_keys=series.keys,
            ppns=ks, bandwidth_gbit_s=network.bandwidth_gbit_s, network=network.name,
            nodes=tuple(sorted({int(v) for v in group.get_column("nodes").to_list()})),
            families=_families_of(benchmark, group, network, seed)))
    return out
