"""The α-β model families of Alltoall and Allgather, and how the best one is chosen.

Every model has the form

    t = α · B(m, k) · x / b + β · S(m, k)

with m nodes, k ranks per node (P = m·k ranks, placed in blocks: ranks r·k … r·k + k − 1 on node r,
the `node` mapping), x the message size as IMB/OSU count it (Alltoall: the block one rank sends to
one other rank; Allgather: each rank's contribution), b the nominal link bandwidth.

* B(m, k) is the number of x-byte blocks that **cross one node's link** (one direction; by the
  block placement's symmetry every node sends what it receives) over the whole collective, summed
  over the algorithm's steps. Copies between ranks of the same node are not counted: the model
  charges the network only, so α = 1 is the link at its line rate (the "speed of light").
* S(m, k) is the number of steps in which at least one message crosses a link: the latency β is
  paid once per such step. Steps that stay inside every node cost no β.

Both are counted exactly, step by step, from the algorithm's partner rule (:func:`_tally`), so a
non-power-of-two P or k is handled without approximations. Derivations, with d the step's distance
and n_cross(d) the number of a node's k ranks whose partner sits on another node:

* ``alltoall`` (linear, all messages posted at once — the original model): every rank sends one
  block to each of the (m − 1)·k remote ranks, k ranks per node → B = (m − 1)·k², S = 1.
* ``alltoall_pairwise``: P − 1 steps, at step s rank r sends its block for rank r + s (mod P):
  the same blocks as linear cross the link, B = (m − 1)·k², but in P − 1 latency steps (every step
  has a crossing rank when m ≥ 2) → S = P − 1.
* ``alltoall_bruck``: ⌈log2 P⌉ steps; at step j rank r sends to r + 2^j the blocks whose index has
  bit j set (≈ P/2 blocks) → B = Σ_j n_cross(2^j) · #{i < P : bit j of i}, S = #steps with a crossing.
* ``allgather_ring`` (the original model, node-level ring): m − 1 steps, each moving a node's k
  blocks over its link → B = (m − 1)·k, S = m − 1.
* ``allgather_ring_ranks`` (the rank-level ring MPI runs: Open MPI's ``ring``, MPICH's): P − 1
  steps, at each every rank sends one block to rank r + 1; of a node's k ranks only the last one's
  partner is on the next node, so one block crosses each link per step → B = P − 1, S = P − 1.
  Against the node-level ring (m − 1 steps) it has (P − 1)/(m − 1) times the latency steps (63× at
  m = 2, k = 32). At one (m, k) both are α′·x + β′ and fit identically; their α and β differ by
  those factors, so only the physics (α ≥ 1; β ≥ a network latency) or several m can separate them.
* ``allgather_linear``: every rank sends its block to every other rank → B = (m − 1)·k², S = 1.
* ``allgather_naive`` (the textbook per-rank model, no placement): each rank takes in the other P − 1
  blocks over a link of its own after one latency → B = P − 1, S = 1. It ignores that a node's k
  ranks share one link and that on-node blocks never cross it, so its α is not a fraction of the line
  rate of a real link: set beside the node-aware families, it shows what the placement explains.
* ``allgather_recursive_doubling`` (P a power of two): log2 P steps, at step j rank r exchanges the
  2^j blocks it holds with r XOR 2^j → B = Σ_j n_cross(2^j)·2^j, S = #steps with a crossing
  (for k a power of two: B = (m − 1)·k², S = log2 m).
* ``allgather_bruck``: ⌈log2 P⌉ steps, at step j rank r sends min(2^j, P − 2^j) blocks to r − 2^j
  → B = Σ_j n_cross(2^j)·min(2^j, P − 2^j), S = #steps with a crossing.

All are linear in (α, β): the bounded linear least squares of :mod:`mpiatlas.models.alphabeta`
fits each of them. At one (m, k) every model reduces to α′·x + β′, so they all fit equally well:
only several node counts (or several k) can tell the families apart.

Choosing the best model. Every family has two parameters and is fitted to the same points by the
same loss (the relative residuals (model − t)/t, see :mod:`mpiatlas.models.alphabeta`), so Akaike's
criterion under Gaussian relative errors reduces to AIC = n·ln(RSS/n) + 2·2 and its difference to
ΔAIC = n·ln(RSS_i / RSS_best). The criterion is the same loss the fit minimises, so the ranking
cannot disagree with the fits; relative (≈ log) residuals keep the decades of µs-to-seconds times
on an equal footing, which absolute residuals would not. ΔAIC < 2 is "indistinguishable"
(Burnham & Anderson's rule of thumb). A model whose whole α 95 % CI lies below 1 is implausible:
it would move its bytes faster than the link's line rate, so it cannot be what ran; it is ranked
but not chosen while a plausible model exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from mpiatlas.models.alphabeta_records import Selection

FloatArray = npt.NDArray[np.float64]

DELTA_AIC_CLEAR = 2.0  # below: the two models are indistinguishable on these points
N_PARAMS = 2


@dataclass(frozen=True)
class ModelSpec:
    name: str
    benchmark: str
    label: str
    formula: str


MODELS: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("alltoall", "Alltoall", "linear",
              "t = α · x · (m − 1) · k² / b + β"),
    ModelSpec("alltoall_pairwise", "Alltoall", "pairwise",
              "t = α · x · (m − 1) · k² / b + β · (P − 1)"),
    ModelSpec("alltoall_bruck", "Alltoall", "Bruck",
              "t = α · x · Σ_j n_cross(2^j)·#{i < P: bit j of i} / b + β · ⌈log2 P⌉"),
    ModelSpec("allgather_ring", "Allgather", "node ring",
              "t = (m − 1) · (α · x · k / b + β)"),
    ModelSpec("allgather_ring_ranks", "Allgather", "rank ring",
              "t = (P − 1) · (α · x / b + β)"),
    ModelSpec("allgather_linear", "Allgather", "linear",
              "t = α · x · (m − 1) · k² / b + β"),
    ModelSpec("allgather_naive", "Allgather", "naive (per rank)",
              "t = α · x · (P − 1) / b + β"),
    ModelSpec("allgather_recursive_doubling", "Allgather", "recursive doubling",
              "t = α · x · Σ_j n_cross(2^j)·2^j / b + β · #inter-node steps  (k, m powers of 2: "
              "α · x · (m − 1) · k² / b + β · log2 m)"),
    ModelSpec("allgather_bruck", "Allgather", "Bruck",
              "t = α · x · Σ_j n_cross(2^j)·min(2^j, P − 2^j) / b + β · #inter-node steps"),
)}
# The first model of each benchmark is the original one: its α, β stay the entry's own fields.
BENCHMARK_MODELS: dict[str, tuple[str, ...]] = {
    bench: tuple(n for n, s in MODELS.items() if s.benchmark == bench) for bench in ("Alltoall", "Allgather")}


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _steps(n: int) -> int:
    """⌈log2 n⌉ for n ≥ 1."""
    return max(n - 1, 0).bit_length()


def _n_cross(partners: npt.NDArray[np.int64], k: int) -> int:
    """How many of node 0's ranks 0 … k − 1 have their partner on another node."""
    return int(np.count_nonzero(partners // k != 0))


@lru_cache(maxsize=4096)
def _tally(model: str, m: int, k: int) -> tuple[float, float]:
    """(B, S) of ``model`` at m nodes × k ranks: blocks crossing one node's link, latency steps."""
    p = m * k
    if m <= 1:
        return 0.0, 0.0  # nothing crosses a link on one node
    ranks = np.arange(k, dtype=np.int64)
    if model in ("alltoall", "allgather_linear"):
        return float((m - 1) * k * k), 1.0
    if model == "alltoall_pairwise":
        return float((m - 1) * k * k), float(p - 1)
    if model == "allgather_ring":
        return float((m - 1) * k), float(m - 1)
    if model == "allgather_ring_ranks":
        return float(p - 1), float(p - 1)
    if model == "allgather_naive":
        return float(p - 1), 1.0  # per rank, not per link: see the module docstring
    blocks = steps = 0
    index = np.arange(p, dtype=np.int64)
    for j in range(_steps(p)):
        d = 1 << j
        if model == "alltoall_bruck":
            n, per_rank = _n_cross((ranks + d) % p, k), int(np.count_nonzero(index & d))
        elif model == "allgather_recursive_doubling":
            n, per_rank = _n_cross(ranks ^ d, k), d
        elif model == "allgather_bruck":
            n, per_rank = _n_cross((ranks - d) % p, k), min(d, p - d)
        else:
            raise ValueError(f"unknown α-β model {model!r}; models: {', '.join(MODELS)}")
        blocks += n * per_rank
        steps += n > 0
    return float(blocks), float(steps)


def not_applicable(model: str, nodes: npt.ArrayLike, ppn: npt.ArrayLike) -> str | None:
    """Why ``model`` cannot describe these (m, k) points, or None when it can."""
    if model not in MODELS:
        raise ValueError(f"unknown α-β model {model!r}; models: {', '.join(MODELS)}")
    if model == "allgather_recursive_doubling":
        odd = sorted({int(m * k) for m, k in zip(np.atleast_1d(nodes), np.atleast_1d(ppn)) if not _pow2(int(m * k))})
        if odd:
            return f"recursive doubling needs P = m·k a power of two, not {', '.join(map(str, odd))}"
    return None


def coefficients(model: str, nodes: npt.ArrayLike, ppn: npt.ArrayLike, x: npt.ArrayLike,
                 b_bytes_per_us: float) -> tuple[FloatArray, FloatArray]:
    """The coefficients of α and of β per point: t = α·a + β·c (µs); m, k, x broadcast."""
    m, k, s = np.broadcast_arrays(np.asarray(nodes, dtype=float), np.asarray(ppn, dtype=float),
                                  np.asarray(x, dtype=float))
    if model not in MODELS:
        raise ValueError(f"unknown α-β model {model!r}; models: {', '.join(MODELS)}")
    pairs = [_tally(model, int(mi), int(ki)) for mi, ki in zip(m.ravel(), k.ravel())]
    blocks = np.array([p[0] for p in pairs], dtype=float).reshape(m.shape)
    steps = np.array([p[1] for p in pairs], dtype=float).reshape(m.shape)
    return blocks * s / b_bytes_per_us, steps


# -- selection -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranked:
    model: str
    rss: float
    n: int
    alpha_ci_high: float

    @property
    def plausible(self) -> bool:
        return not (math.isfinite(self.alpha_ci_high) and self.alpha_ci_high < 1.0)


def aic(rss: float, n: int) -> float:
    """AIC of a 2-parameter fit with Gaussian relative residuals (constants dropped)."""
    return n * math.log(max(rss, 1e-300) / n) + 2 * N_PARAMS


def select(ranked: list[Ranked], distinct_mk: int) -> Selection:
    """The best model by AIC among the plausible ones, the margin to the runner-up, and a sentence."""
    if not ranked:
        return Selection(best=None, criterion=CRITERION, verdict="none", text="no model could be fitted")
    scores = {r.model: aic(r.rss, r.n) for r in ranked}
    plausible = [r for r in ranked if r.plausible]
    pool = plausible or ranked
    order = sorted(pool, key=lambda r: scores[r.model])
    best = order[0]
    runner = order[1] if len(order) > 1 else None
    delta = scores[runner.model] - scores[best.model] if runner else None
    rms = {r.model: math.sqrt(r.rss / r.n) for r in ranked}
    if runner is None:
        verdict = "only plausible" if len(ranked) > 1 else "only"
    elif distinct_mk < 2 or (delta is not None and delta < DELTA_AIC_CLEAR):
        verdict = "indistinguishable"
    else:
        verdict = "clear"
    text = _sentence(best.model, runner.model if runner else None, delta, rms, verdict, distinct_mk,
                     [r.model for r in ranked if not r.plausible], plausible_pool=bool(plausible))
    return Selection(best=best.model, runner_up=runner.model if runner else None, delta_aic=delta,
                     criterion=CRITERION, verdict=verdict,
                     tied=tuple(r.model for r in order if scores[r.model] - scores[best.model] < DELTA_AIC_CLEAR),
                     implausible=tuple(r.model for r in ranked if not r.plausible), text=text)


CRITERION = ("lowest AIC of the relative residuals (= the fit's own loss; ΔAIC = n·ln(RSS ratio)); "
             "models whose α 95 % CI lies wholly below 1 (faster than the link) are not chosen")


def _sentence(best: str, runner: str | None, delta: float | None, rms: dict[str, float], verdict: str,
              distinct_mk: int, implausible: list[str], *, plausible_pool: bool) -> str:
    name = MODELS[best].label
    out = f"{name} fits best (rel. RMS {rms[best]:.1%})"
    if runner is not None and delta is not None:
        out += f"; next: {MODELS[runner].label} (rel. RMS {rms[runner]:.1%}, ΔAIC {delta:.1f})"
    if verdict == "indistinguishable":
        out += (": indistinguishable — at one (m, k) every model is α′·x + β′; measure more node counts"
                if distinct_mk < 2 else ": indistinguishable (ΔAIC < 2)")
    if implausible:
        out += "; excluded as faster than the link (α CI < 1): " + ", ".join(MODELS[m].label for m in implausible)
        if not plausible_pool:
            out += " — every model was, so the choice is among all (check b and k)"
    return out
