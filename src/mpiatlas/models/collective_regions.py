"""Collective time predicted from per-region point-to-point costs and the ranks' actual placement.

The studies this follows (2 × 64-core EPYC nodes, OSU Bcast by forced algorithm, P = 2..256)
priced a collective from a per-region latency table, edge by edge, on the tree the MPI library
builds. Here the trees are Open MPI 4.1 ``coll_tuned``'s own (:mod:`.collective_trees`), an edge
between ranks ``a`` and ``b`` carrying ``m`` bytes costs ``T(a, b, m) = λ_region + m / B_region``
(:class:`.region_latency.RegionTable`), and the region comes from the placement.

Cost rules, per algorithm shape:

* **linear** (``basic_linear``; Scatter/Gather linear): the root posts P-1 sends and its
  injection serialises them: rank k (the k-th destination) has its data after
  ``Σ_{j≤k} T(root, j)``; the whole operation takes the sum of all of them.
* **chain** (``chain``, fanout 4; ``pipeline``, fanout 1): every chain is a path; a rank has its
  data after ``T(root, head) + Σ T(i, i+1)`` along its chain; the slowest chain ends it.
* **tree** (``binary_tree``, ``binomial``, ``knomial``, MPICH's ``tree`` and ``pipelined_tree``
  — its heap-ordered binary tree, the latter in 8192-byte chunks —, Scatter/Gather ``binomial``): level by
  level, each level costs its slowest edge times the **overlap factor** ``f``; a rank at depth d
  has its data after the first d levels. ``f = 1`` (default) is the studies' model: a parent's
  sends to its children overlap completely (eager isends posted together). ``f = 2`` would charge a
  binary tree's two sends one after the other; ``f < 1`` says that consecutive levels overlap.
* **steps** (Allreduce ``recursive_doubling``, ``ring``, ``rabenseifner``; Reduce
  ``rabenseifner``): a sequence of exchange steps, each as slow as its slowest pair.
* **scatter-allgather** (MPICH's Bcast ``scatter_recursive_doubling_allgather``,
  ``scatter_ring_allgather``): MPICH's binomial scatter of ``ceil(m/P)``-byte chunks as a tree, then
  the allgather's steps (recursive doubling with Open MPI's fold for P not a power of two, an
  approximation of MPICH's; or the P − 1 ring steps), one phase after the other. The other names
  are Open MPI's (an MPICH ``binomial`` is priced on Open MPI's binomial tree: the same shape,
  other rank labels).

Segmentation (``segsize`` > 0 and a message longer than one segment, chain/pipeline/trees): the
first segment crosses the structure as above, each further segment adds the slowest stage
(edge or level) at segment size. Open MPI's forced-algorithm default is ``segsize = 0`` (none).

Two figures per prediction: ``completion_us`` (the last rank has its data: the studies' quantity)
and ``rank_mean_us``, the mean over ranks of when each is done (a rank with children is done
after its own level / its forward). OSU's "Avg Latency" averages each rank's own time in the
call, so ``rank_mean_us`` is its counterpart. Reduction arithmetic is not charged (4 B: nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from mpiatlas.models import collective_trees as trees
from mpiatlas.models.ompi_decision import bcast_default_algorithm
from mpiatlas.models.region_latency import Placement, RegionTable

__all__ = [
    "ALGORITHMS",
    "BCAST_CHAIN_FANOUT",
    "BCAST_KNOMIAL_RADIX",
    "MPICH_SCATTER_ALLGATHER",
    "STEP_SCHEDULES",
    "ModelError",
    "Prediction",
    "algorithms_for",
    "bcast_default_algorithm",
    "mpich_scatter_tree",
    "predict",
    "scatter_chunk",
    "segments",
]

# Open MPI 4.1 coll_tuned defaults for a forced algorithm (ompi_info --all --level 9 of 4.1.4:
# coll_tuned_bcast_algorithm_chain_fanout 4, _knomial_radix 4, _segmentsize 0).
BCAST_CHAIN_FANOUT = 4
BCAST_KNOMIAL_RADIX = 4
DEFAULT_SEGSIZE = 0


class ModelError(ValueError):
    """A collective/algorithm the models do not cover, or unusable parameters."""


@dataclass(frozen=True)
class Prediction:
    collective: str
    algorithm: str  # the algorithm actually modelled ("default" resolved to Open MPI's choice)
    np: int
    bytes: int
    completion_us: float
    rank_mean_us: float
    shape: str  # linear / chain / tree / steps: which cost rule applied


@dataclass(frozen=True)
class _Costs:
    """Edge costs for one placement and table: the region of the pair, then λ + m/B."""

    place: Placement
    table: RegionTable

    def edge(self, a: int, b: int, nbytes: float) -> float:
        return self.table.cost(self.place.region(a, b), nbytes)


def _segments(nbytes: int, segsize: int) -> tuple[int, float]:
    """(number of segments, bytes per segment) as Open MPI cuts a ``nbytes`` message."""
    if segsize <= 0 or nbytes <= segsize:
        return 1, float(nbytes)
    return math.ceil(nbytes / segsize), float(segsize)


# -- cost rules ------------------------------------------------------------------------------


def _linear(
    costs: _Costs, children: list[list[int]], root: int, per_edge: Callable[[int], float]
) -> tuple[float, float]:
    done = [0.0] * len(children)
    clock = 0.0
    for child in children[root]:
        clock += costs.edge(root, child, per_edge(child))
        done[child] = clock
    done[root] = clock
    return clock, sum(done) / len(done)


def _chain(costs: _Costs, children: list[list[int]], root: int, nbytes: int, segsize: int) -> tuple[float, float]:
    nseg, seg = _segments(nbytes, segsize)
    arrive = [0.0] * len(children)
    done = [0.0] * len(children)
    slowest_stage = 0.0
    frontier = [root]
    while frontier:
        nxt = []
        for parent in frontier:
            outgoing = [costs.edge(parent, k, seg) for k in children[parent]]
            for k, c in zip(children[parent], outgoing):
                arrive[k] = arrive[parent] + c
                nxt.append(k)
            if outgoing:
                done[parent] = arrive[parent] + max(outgoing)
                slowest_stage = max(slowest_stage, *outgoing)
            else:
                done[parent] = arrive[parent]
        frontier = nxt
    extra = (nseg - 1) * slowest_stage
    return max(arrive) + extra, sum(done) / len(done) + extra


def _tree(
    costs: _Costs,
    children: list[list[int]],
    root: int,
    edge_bytes: Callable[[int], float],
    overlap: float,
    nseg: int = 1,
) -> tuple[float, float]:
    depth = trees.depths(children, root)
    levels = max(depth)
    level_cost = [0.0] * levels
    for parent, kids in enumerate(children):
        for k in kids:
            d = depth[parent]
            level_cost[d] = max(level_cost[d], costs.edge(parent, k, edge_bytes(k)))
    level_cost = [overlap * c for c in level_cost]
    start = [0.0]
    for c in level_cost:
        start.append(start[-1] + c)
    extra = (nseg - 1) * max(level_cost, default=0.0)
    done = [start[depth[r]] + (level_cost[depth[r]] if children[r] else 0.0) for r in range(len(children))]
    return start[-1] + extra, sum(done) / len(done) + extra


def _steps(costs: _Costs, steps: list[list[tuple[int, int, float]]]) -> tuple[float, float]:
    total = sum(max((costs.edge(a, b, m) for a, b, m in step), default=0.0) for step in steps)
    return total, total  # every rank takes part to the end: no rank is done much earlier


# -- step schedules (Open MPI coll_base_allreduce.c / coll_base_reduce.c) ---------------------


def _pof2_fold(size: int) -> tuple[int, int, Callable[[int], int]]:
    """(largest power of two ≤ size, ranks folded away, real rank of a virtual rank).

    Open MPI folds the first ``2 * rem`` ranks in pairs (even rank gives its data to the odd
    one), so virtual rank v is real rank ``2v+1`` for ``v < rem``, else ``v + rem``.
    """
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    return pof2, rem, (lambda v: 2 * v + 1 if v < rem else v + rem)


def _fold_step(rem: int, nbytes: float) -> list[tuple[int, int, float]]:
    return [(2 * i, 2 * i + 1, nbytes) for i in range(rem)]


def _recursive_doubling(size: int, nbytes: int) -> list[list[tuple[int, int, float]]]:
    pof2, rem, real = _pof2_fold(size)
    steps = [_fold_step(rem, nbytes)] if rem else []
    mask = 1
    while mask < pof2:
        steps.append([(real(v), real(v ^ mask), nbytes) for v in range(pof2) if v < v ^ mask])
        mask <<= 1
    if rem:
        steps.append(_fold_step(rem, nbytes))
    return steps


def _ring(size: int, nbytes: int) -> list[list[tuple[int, int, float]]]:
    # Reduce-scatter then allgather, P-1 steps each, a block of ~m/P bytes to the right neighbour.
    block = nbytes / size
    step = [(r, (r + 1) % size, block) for r in range(size)]
    return [step] * (2 * (size - 1))


def _rabenseifner(size: int, nbytes: int, root: int | None) -> list[list[tuple[int, int, float]]]:
    """Reduce-scatter by recursive halving (distance doubling), then allgather (Allreduce,
    ``root`` None) or a binomial gather to the root (Reduce), distance halving."""
    pof2, rem, real = _pof2_fold(size)
    steps = [_fold_step(rem, nbytes)] if rem else []
    mask, chunk = 1, nbytes / 2
    while mask < pof2:
        steps.append([(real(v), real(v ^ mask), chunk) for v in range(pof2) if v < v ^ mask])
        mask, chunk = mask << 1, chunk / 2
    mask, chunk = pof2 >> 1, nbytes / pof2
    vroot = 0 if root is None else _virtual(root, rem)
    while mask >= 1:
        if root is None:
            pairs = [(real(v), real(v ^ mask), chunk) for v in range(pof2) if v < v ^ mask]
        else:  # ranks whose offset from the root has this bit (and none above) send it down
            senders = [v for v in range(pof2) if (v ^ vroot) & mask and (v ^ vroot) < 2 * mask]
            pairs = [(real(v), real(v ^ mask), chunk) for v in senders]
        steps.append(pairs)
        mask, chunk = mask >> 1, chunk * 2
    if rem and (root is None or (root < 2 * rem and root % 2 == 0)):
        steps.append(_fold_step(rem, nbytes) if root is None else [(root + 1, root, nbytes)])
    return steps


def _virtual(rank: int, rem: int) -> int:
    if rank < 2 * rem:
        return rank // 2  # an even folded rank is represented by its odd partner
    return rank - rem


# -- registry --------------------------------------------------------------------------------

ModelResult = tuple[float, float, str]  # (completion µs, rank mean µs, cost rule)
Model = Callable[[_Costs, int, int, int, float], ModelResult]  # (costs, P, bytes, segsize, overlap)
Schedule = Callable[[int, int], list[list[tuple[int, int, float]]]]


def _tree_model(build: Callable[[int, int], list[list[int]]],
                costs: _Costs, size: int, nbytes: int, segsize: int, overlap: float) -> ModelResult:  # fmt: skip
    nseg, seg = _segments(nbytes, segsize)
    return (*_tree(costs, build(size, 0), 0, lambda _k: seg, overlap, nseg), "tree")


def _mpich_pipelined_model(chunk: int, costs: _Costs, size: int, nbytes: int, segsize: int,
                           overlap: float) -> ModelResult:  # fmt: skip
    # MPICH's own chunk size, whatever Open MPI segment size the caller passed.
    build = partial(trees.mpich_kary_tree, fanout=MPICH_BCAST_TREE_KVAL)
    return _tree_model(build, costs, size, nbytes, chunk, overlap)


def _chain_model(fanout: int, costs: _Costs, size: int, nbytes: int, segsize: int, overlap: float) -> ModelResult:
    return (*_chain(costs, trees.chain_tree(size, 0, fanout), 0, nbytes, segsize), "chain")


def _linear_model(costs: _Costs, size: int, nbytes: int, segsize: int, overlap: float) -> ModelResult:
    # Bcast: every rank gets the whole buffer; Scatter/Gather: its own block of nbytes.
    return (*_linear(costs, trees.linear_tree(size, 0), 0, lambda _k: nbytes), "linear")


def _scatter_binomial(costs: _Costs, size: int, nbytes: int, segsize: int, overlap: float) -> ModelResult:
    # Each child receives the blocks of its whole subtree: nbytes (per rank) x subtree size.
    children = trees.in_order_binomial_tree(size, 0)
    sub = trees.subtree_sizes(children, 0)
    return (*_tree(costs, children, 0, lambda k: nbytes * sub[k], overlap), "tree")


def _step_model(schedule: Schedule, costs: _Costs, size: int, nbytes: int, segsize: int, overlap: float) -> ModelResult:
    return (*_steps(costs, schedule(size, nbytes)), "steps")


def _allgather_ring(size: int, block: int) -> list[list[tuple[int, int, float]]]:
    # P-1 steps, each rank passing one block to its right neighbour.
    return [[(r, (r + 1) % size, float(block)) for r in range(size)]] * (size - 1)


def mpich_scatter_tree(size: int) -> list[list[int]]:
    """MPICH's binomial scatter for Bcast (bcast_utils.c): relative rank r receives from r − (its
    lowest set bit) and sends to r + mask for mask halving from there, farthest child first."""
    return [list(reversed(kids)) for kids in trees.in_order_binomial_tree(size, 0)]


def scatter_chunk(size: int, nbytes: int) -> int:
    """Bytes per rank of MPICH's scatter for Bcast: ceil(nbytes / P)."""
    return -(-nbytes // size)


def _scatter_allgather(allgather: Schedule, costs: _Costs, size: int, nbytes: int, segsize: int,
                       overlap: float) -> ModelResult:  # fmt: skip
    # MPICH's Bcast scatter_*_allgather: a binomial scatter of ceil(m/P)-byte chunks (an edge carries
    # its child's subtree's chunks), then the allgather's steps; the phases are not overlapped.
    chunk = scatter_chunk(size, nbytes)
    children = mpich_scatter_tree(size)
    sub = trees.subtree_sizes(children, 0)
    scatter, _ = _tree(costs, children, 0, lambda k: chunk * sub[k], overlap)
    gather, _ = _steps(costs, allgather(size, chunk))
    return scatter + gather, scatter + gather, "scatter-allgather"


# The exchange-step schedules by (collective, algorithm): also priced with LogGP by models/loggp.py.
# The allgather ones are the second phase of MPICH's scatter-allgather Bcast (their block: one chunk).
STEP_SCHEDULES: dict[tuple[str, str], Schedule] = {
    ("allreduce", "recursive_doubling"): _recursive_doubling,
    ("allreduce", "ring"): _ring,
    ("allreduce", "rabenseifner"): lambda p, m: _rabenseifner(p, m, None),
    ("reduce", "rabenseifner"): lambda p, m: _rabenseifner(p, m, 0),
    ("allgather", "recursive_doubling"): _recursive_doubling,
    ("allgather", "ring"): _allgather_ring,
}
# MPICH's Bcast algorithm -> its allgather phase (MPIR_CVAR_BCAST_INTRA_ALGORITHM names).
MPICH_SCATTER_ALLGATHER = {"scatter_recursive_doubling_allgather": "recursive_doubling",
                           "scatter_ring_allgather": "ring"}
# MPICH 4.x/5.x ``tree`` and ``pipelined_tree`` Bcast (MPIR_CVAR_BCAST_INTRA_ALGORITHM): its default
# MPIR_CVAR_BCAST_TREE_TYPE kary, MPIR_CVAR_BCAST_TREE_KVAL 2, non-blocking sends to every child
# (MPIR_CVAR_BCAST_IS_NON_BLOCKING); pipelined_tree cuts MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE (8192 B) chunks.
MPICH_BCAST_TREE_KVAL = 2
MPICH_BCAST_CHUNK = 8192
segments = _segments  # (number of segments, bytes per segment): Open MPI's cut, shared with models/loggp.py

ALGORITHMS: dict[str, dict[str, Model]] = {
    "bcast": {
        "basic_linear": _linear_model,
        "chain": partial(_chain_model, BCAST_CHAIN_FANOUT),
        "pipeline": partial(_chain_model, 1),
        "binary_tree": partial(_tree_model, lambda p, r: trees.kary_tree(p, r, 2)),
        "binomial": partial(_tree_model, trees.binomial_tree),
        "knomial": partial(_tree_model, lambda p, r: trees.knomial_tree(p, r, BCAST_KNOMIAL_RADIX)),
        "tree": partial(_tree_model, lambda p, r: trees.mpich_kary_tree(p, r, MPICH_BCAST_TREE_KVAL)),
        "pipelined_tree": partial(_mpich_pipelined_model, MPICH_BCAST_CHUNK),
        **{name: partial(_scatter_allgather, STEP_SCHEDULES[("allgather", ag)])
           for name, ag in MPICH_SCATTER_ALLGATHER.items()},
    },
    # Gather moves the same blocks over the same in-order binomial tree, towards the root.
    "scatter": {"basic_linear": _linear_model, "binomial": _scatter_binomial},
    "gather": {"basic_linear": _linear_model, "binomial": _scatter_binomial},
    "allreduce": {name: partial(_step_model, STEP_SCHEDULES[("allreduce", name)])
                  for name in ("recursive_doubling", "ring", "rabenseifner")},
    "reduce": {"rabenseifner": partial(_step_model, STEP_SCHEDULES[("reduce", "rabenseifner")])},
}


def algorithms_for(collective: str) -> list[str]:
    """Modelled algorithm names of ``collective`` (Open MPI coll_tuned names), plus ``default``
    where Open MPI's fixed decision is reproduced (Bcast)."""
    names = list(ALGORITHMS.get(collective.lower(), {}))
    return [*names, "default"] if collective.lower() == "bcast" else names


def predict(
    collective: str,
    algorithm: str,
    place: Placement,
    table: RegionTable,
    nbytes: int,
    *,
    segsize: int = DEFAULT_SEGSIZE,
    overlap: float = 1.0,
) -> Prediction:
    """Predicted time of ``collective`` by ``algorithm`` over the ranks of ``place`` (root 0)."""
    coll = collective.lower()
    if coll not in ALGORITHMS:
        raise ModelError(f"collective {collective!r} is not modelled; modelled: {', '.join(ALGORITHMS)}")
    if nbytes < 0 or segsize < 0:
        raise ModelError(f"bytes and segment size must be >= 0 (got {nbytes}, {segsize})")
    if not (math.isfinite(overlap) and overlap > 0):
        raise ModelError(f"overlap factor must be > 0, got {overlap}")
    if place.size < 2:
        raise ModelError(f"a collective needs at least 2 ranks, got {place.size}")
    name = bcast_default_algorithm(place.size, nbytes) if coll == "bcast" and algorithm == "default" else algorithm
    model = ALGORITHMS[coll].get(name)
    if model is None:
        why = f" (Open MPI's default choice at np={place.size}, {nbytes} B)" if name != algorithm else ""
        raise ModelError(
            f"{coll} algorithm {name!r}{why} is not modelled; modelled: {', '.join(algorithms_for(coll))}"
        )
    completion, mean, shape = model(_Costs(place, table), place.size, nbytes, segsize, overlap)
    return Prediction(coll, name, place.size, nbytes, completion, mean, shape)
