"""Collective schedules priced with LogGP per region: o, g and a per-level term, not latency alone.

The latency-only rules of :mod:`.collective_regions` charge a linear Bcast a full one-way latency
per destination and a tree level its slowest edge, whereas on the ORFEO EPYC nodes the root of a
linear Bcast pays ~0.14 µs per extra rank (its injection gap) and a binary-tree level costs about
twice its slowest latency. Here every message between ranks ``a`` and ``b`` (region ``r``) of ``m``
bytes is priced with LogGP (Alexandrov et al. 1995):

* the sender is busy ``o_r`` to post it; its next send leaves ``g_r + (m − 1)·G_r`` later
  (:meth:`_Edges.spacing`, the one place g is charged: only between a rank's back-to-back messages;
  g is a burst's measured spacing, so it holds the part of o that does not overlap, not ``max(g, o)``);
* it is on the wire ``L_r + m·G_r``, ``G = 1/B`` from the table's ``bandwidth_MBps`` (none: 0);
* the receiver is busy ``o_r`` to take it.

``L`` is the wire latency, not the table's ``latency_us``: that is λ, a PingPong's half round
trip, which already holds both overheads (λ = o + L + o, Kielmann's PRTT(1,0,s)/2, as the loggp
kernel computes its own L). So ``L_r = λ_r − 2·o_r``: a single message costs exactly λ end to
end, and only what g and h add beyond it (a root's later sends, a forwarder's level term)
separates LogGP from the latency-only rules. Charging λ as L counted o twice per hop (+150 % at
P = 2 on this machine's Bcast). L is not clipped at 0: where o_s + o_r exceed λ the overheads
overlap (the loggp kernel's own L is −0.06 µs at 4 B on shared memory here), and a message still
arrives λ after its send began, as the kernel's round trip shows (tests/test_loggp.py).

o and g come from the table's ``overhead_us``/``gap_us`` columns, else from :class:`LogGP`'s scalars
(what :mod:`.loggp_fit` calibrates). ``level_us`` (h) is what a forwarding rank spends between
having its data and posting its first send onward (the tree's per-level term; 0 by default).

Schedules (root 0, Open MPI 4.1 ``coll_tuned`` trees from :mod:`.collective_trees`):

* **down** (Bcast ``basic_linear``, ``chain``, ``pipeline``, ``binary_tree``, ``binomial``,
  ``knomial``; Scatter ``basic_linear``, ``binomial``): a rank that has its data at ``t`` posts its
  k sends in the tree's order; the i-th (0-based) leaves at ``t + h + o + Σ_{j=1..i} g_j`` (the
  root starts at 0, without h), ``g_j`` = ``g + (m − 1)·G`` (LogGP's spacing of back-to-back
  sends), i.e. its k sends of m bytes cost ``o + (k−1)·(g + (m − 1)·G)`` before the last leaves;
  the child has its data ``L + m·G + o`` later. g is charged only between a rank's back-to-back
  sends: a rank that sends a single message pays o, not g (charging a gap after every reception
  made a 3-rank pipeline cost rtt + g where the loggp kernel measures rtt). Scatter's edge carries
  the child's whole subtree's blocks (``m`` per rank: the blocks grow towards the root). Segments
  (``segsize``): the first crosses as above, each further one adds the slowest rank's cycle
  ``o_in + h + o + (k−1)·(g + (seg − 1)·G)`` (or its link's ``k·seg·G`` if that is longer).
* **up** (Gather ``basic_linear``, ``binomial``): a rank receives its children in the tree's order;
  a message sent at ``s`` is taken at ``max(previous + g + (m − 1)·G, s + L + m·G + o)`` (the receiver's gap
  serialises arrivals); a rank sends up ``h + o`` after its last child (leaves at ``o``).
* **steps** (Allreduce ``recursive_doubling``, ``ring``, ``rabenseifner``; Reduce
  ``rabenseifner``): each exchange step costs ``h + max over its pairs of (o + L + m·G + o)``.
* MPICH's Bcast ``tree`` and ``pipelined_tree``: **down** over MPICH's kary tree (k = 2, heap
  order: :func:`.collective_trees.mpich_kary_tree`), a parent's non-blocking sends to its children
  costing ``o + (k−1)·g``; ``pipelined_tree`` in 8192-byte chunks (MPICH's default chunk size).
* **scatter-allgather** (MPICH's Bcast ``scatter_*_allgather``): MPICH's binomial scatter of
  ``ceil(m/P)``-byte chunks priced **down**, then the allgather's **steps**, one after the other.

``completion_us`` is when the last rank has its data (Gather: when the root has every block);
``rank_mean_us`` averages when each rank is done (its last send left, or its data arrived).
Reduction arithmetic is not charged. Without o or g in the table and without :class:`LogGP`
scalars, :func:`predict` keeps the latency-only rules (today's behaviour).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from mpiatlas.models import collective_regions as latency_only
from mpiatlas.models import collective_trees as trees
from mpiatlas.models.collective_regions import ModelError, Prediction
from mpiatlas.models.region_latency import Placement, RegionTable

__all__ = ["LOGGP_ALGORITHMS", "LogGP", "predict", "uses_loggp"]


@dataclass(frozen=True)
class LogGP:
    """LogGP scalars used for every region the table gives no ``overhead_us``/``gap_us`` for (µs)."""

    overhead_us: float = 0.0
    gap_us: float = 0.0
    level_us: float = 0.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (math.isfinite(value) and value >= 0):
                raise ModelError(f"LogGP {name} must be a finite number >= 0, got {value!r}")


class _Edges:
    """o, g and wire time per rank pair, the pair's region looked up once (a fit prices each many times)."""

    def __init__(self, place: Placement, table: RegionTable, params: LogGP,
                 regions: dict[tuple[int, int], str] | None = None) -> None:  # fmt: skip
        self.place, self.table, self.params = place, table, params
        # A pair's region does not depend on how many ranks follow it (a prefix of one placement).
        self._region = {} if regions is None else regions

    def _r(self, a: int, b: int) -> str:
        key = (a, b) if a < b else (b, a)
        name = self._region.get(key)
        if name is None:
            name = self._region[key] = self.place.region(a, b)
        return name

    def o(self, a: int, b: int) -> float:
        return self.table.overhead_us.get(self._r(a, b), self.params.overhead_us)

    def g(self, a: int, b: int) -> float:
        return self.table.gap_us.get(self._r(a, b), self.params.gap_us)

    def wire(self, a: int, b: int, nbytes: float) -> float:
        # The wire latency L = λ − 2o (λ, the PingPong half round trip, holds both overheads). It may be
        # negative: where o_s + o_r exceed λ (shared memory: the loggp kernel's own L is −0.06 µs at 4 B
        # here) the overheads overlap, and a single message still arrives λ after its send began.
        return self.table.cost(self._r(a, b), nbytes) - 2 * self.o(a, b)

    def per_byte(self, a: int, b: int) -> float:
        bw = self.table.bandwidth_MBps.get(self._r(a, b))
        return 1.0 / bw if bw else 0.0

    def spacing(self, a: int, b: int, prev: int, prev_bytes: float) -> float:
        """LogGP's interval between rank ``a``'s back-to-back messages, the next one with ``b``, the previous
        one of ``prev_bytes`` with ``prev``: ``g + (m − 1)·G`` (the previous message's bytes after its first
        hold the link). The only place g is charged: a rank with one message pays none of it.

        g here is the gap as the loggp kernel measures it, a burst's spacing (Kielmann's
        ``(PRTT(n,0,s) − PRTT(1,0,s))/(n − 1)``): it already holds whatever of the sender's o does not
        overlap the previous send. Textbook LogGP's ``max(g, o)`` would count o twice: the kernel's
        back-to-back sends leave 0.102 µs apart at 4 B while one MPI_Send alone takes o_s = 0.125 µs,
        and ``max(g, o)`` over-prices its own 32-send burst by ~20 %
        (tests/test_loggp.py::test_back_to_back_sends_are_spaced_by_the_kernels_g_not_by_o)."""
        return self.g(a, b) + max(prev_bytes - 1.0, 0.0) * self.per_byte(a, prev)


def _bfs(children: list[list[int]], root: int) -> list[int]:
    order, i = [root], 0
    while i < len(order):
        order.extend(children[order[i]])
        i += 1
    return order


def _down(e: _Edges, children: list[list[int]], root: int, edge_bytes: Callable[[int], float],
          nseg: int = 1, seg: float = 0.0) -> tuple[float, float]:  # fmt: skip
    h = e.params.level_us
    got = [0.0] * len(children)
    done = [0.0] * len(children)
    cycle = 0.0  # the slowest rank's time per segment (pipelining bound)
    parent_of = trees.parents(children)
    for p in _bfs(children, root):
        kids = children[p]
        if not kids:
            done[p] = got[p]
            continue
        up = parent_of[p]
        # g paces only a rank's back-to-back sends: a forwarder's first send leaves o after it has
        # its data, plus the per-level term h (a rank that sends one message pays o, not g).
        start = got[p] + (h if up is not None else 0.0)
        clock = start + e.o(p, kids[0])
        for i, k in enumerate(kids):
            if i:
                clock += e.spacing(p, k, kids[i - 1], edge_bytes(kids[i - 1]))
            wire = e.wire(p, k, edge_bytes(k))
            # A message never arrives before its sender started plus its own λ = L + 2o: the clock holds
            # the first kid's o, and a kid in a region of another o (a shared cpu's 7 µs beside a cache's
            # 0.3 µs) would otherwise arrive before it was sent (a negative Bcast time on this machine).
            got[k] = max(clock + wire + e.o(p, k), start + wire + 2 * e.o(p, k))
        done[p] = clock
        cpu = clock - got[p] + (e.o(up, p) if up is not None else 0.0)  # its receive, gap, h and sends
        cycle = max(cycle, cpu, sum(seg * e.per_byte(p, k) for k in kids))
    extra = (nseg - 1) * cycle
    return max(got) + extra, sum(done) / len(done) + extra


def _up(e: _Edges, children: list[list[int]], root: int, edge_bytes: Callable[[int], float]) -> tuple[float, float]:
    h = e.params.level_us
    parent_of = trees.parents(children)
    ready = [0.0] * len(children)  # when a rank holds its whole subtree's blocks
    done = [0.0] * len(children)
    for p in reversed(_bfs(children, root)):
        clock = 0.0
        kids = children[p]
        for i, k in enumerate(kids):
            sent = done[k]  # when k's message left (set below, children come first in this order)
            taken = sent + e.wire(k, p, edge_bytes(k)) + e.o(k, p)
            # The receiver's back-to-back receptions are spaced like a sender's sends (LogGP: g at both ends).
            clock = max(clock + e.spacing(p, k, kids[i - 1], edge_bytes(kids[i - 1])), taken) if i else taken
        ready[p] = clock
        up = parent_of[p]
        if up is not None:
            # A rank that received from children sends up h + o after the last reception (as in _down).
            after = h if children[p] else 0.0
            done[p] = ready[p] + after + e.o(p, up)
    done[root] = ready[root]
    return ready[root], sum(done) / len(done)


def _steps(e: _Edges, steps: list[list[tuple[int, int, float]]]) -> tuple[float, float]:
    h = e.params.level_us
    total = sum(h + max((2 * e.o(a, b) + e.wire(a, b, m) for a, b, m in step), default=0.0) for step in steps if step)
    return total, total


# -- registry (names as collective_regions.ALGORITHMS) ---------------------------------------

Model = Callable[[_Edges, int, int, int], tuple[float, float, str]]  # (edges, P, bytes, segsize)


def _tree(build: Callable[[int], list[list[int]]], e: _Edges, size: int, nbytes: int, segsize: int) -> tuple[float, float, str]:
    nseg, seg = latency_only.segments(nbytes, segsize)
    children = build(size)
    shape = "linear" if len(children[0]) == size - 1 and size > 2 else "tree"
    return (*_down(e, children, 0, lambda _k: seg, nseg, seg), shape)


def _blocks(up: bool, build: Callable[[int], list[list[int]]],
            e: _Edges, size: int, nbytes: int, segsize: int) -> tuple[float, float, str]:  # fmt: skip
    children = build(size)
    sub = trees.subtree_sizes(children, 0)

    def per_edge(k: int) -> float:
        return float(nbytes * sub[k])  # the blocks of k's whole subtree

    return (*(_up if up else _down)(e, children, 0, per_edge), "up" if up else "tree")


def _step_model(schedule: Callable[[int, int], list[list[tuple[int, int, float]]]],
                e: _Edges, size: int, nbytes: int, segsize: int) -> tuple[float, float, str]:  # fmt: skip
    return (*_steps(e, schedule(size, nbytes)), "steps")


def _scatter_allgather(allgather: str, e: _Edges, size: int, nbytes: int, segsize: int) -> tuple[float, float, str]:
    chunk = latency_only.scatter_chunk(size, nbytes)
    children = latency_only.mpich_scatter_tree(size)
    sub = trees.subtree_sizes(children, 0)
    scatter, _ = _down(e, children, 0, lambda k: float(chunk * sub[k]))
    gather, _ = _steps(e, latency_only.STEP_SCHEDULES[("allgather", allgather)](size, chunk))
    return scatter + gather, scatter + gather, "scatter-allgather"  # every rank takes part to the end


def _linear(size: int) -> list[list[int]]:
    return trees.linear_tree(size, 0)


def _mpich_kary(size: int) -> list[list[int]]:
    return trees.mpich_kary_tree(size, 0, latency_only.MPICH_BCAST_TREE_KVAL)


def _mpich_pipelined(chunk: int, e: _Edges, size: int, nbytes: int, segsize: int) -> tuple[float, float, str]:
    return _tree(_mpich_kary, e, size, nbytes, chunk)  # MPICH's own chunk, not Open MPI's segment size


LOGGP_ALGORITHMS: dict[str, dict[str, Model]] = {
    "bcast": {
        "basic_linear": partial(_tree, _linear),
        "chain": partial(_tree, lambda p: trees.chain_tree(p, 0, latency_only.BCAST_CHAIN_FANOUT)),
        "pipeline": partial(_tree, lambda p: trees.chain_tree(p, 0, 1)),
        "binary_tree": partial(_tree, lambda p: trees.kary_tree(p, 0, 2)),
        "binomial": partial(_tree, trees.binomial_tree),
        "knomial": partial(_tree, lambda p: trees.knomial_tree(p, 0, latency_only.BCAST_KNOMIAL_RADIX)),
        "tree": partial(_tree, _mpich_kary),
        "pipelined_tree": partial(_mpich_pipelined, latency_only.MPICH_BCAST_CHUNK),
        **{name: partial(_scatter_allgather, ag) for name, ag in latency_only.MPICH_SCATTER_ALLGATHER.items()},
    },
    "scatter": {"basic_linear": partial(_blocks, False, _linear),
                "binomial": partial(_blocks, False, trees.in_order_binomial_tree)},
    "gather": {"basic_linear": partial(_blocks, True, _linear),
               "binomial": partial(_blocks, True, trees.in_order_binomial_tree)},
    "allreduce": {name: partial(_step_model, latency_only.STEP_SCHEDULES[("allreduce", name)])
                  for name in ("recursive_doubling", "ring", "rabenseifner")},
    "reduce": {"rabenseifner": partial(_step_model, latency_only.STEP_SCHEDULES[("reduce", "rabenseifner")])},
}  # fmt: skip


def uses_loggp(table: RegionTable, params: LogGP | None) -> bool:
    """LogGP pricing applies when the table carries o or g, or scalars were given (calibrated)."""
    return params is not None or bool(table.overhead_us or table.gap_us)


def predict(
    collective: str,
    algorithm: str,
    place: Placement,
    table: RegionTable,
    nbytes: int,
    *,
    params: LogGP | None = None,
    segsize: int = latency_only.DEFAULT_SEGSIZE,
    overlap: float = 1.0,
    regions: dict[tuple[int, int], str] | None = None,
) -> Prediction:
    """``collective`` by ``algorithm`` over ``place`` (root 0): LogGP-priced when :func:`uses_loggp`,
    else :func:`.collective_regions.predict` unchanged (``overlap`` only applies there).
    ``regions``: a cache of pair -> region shared by the prefixes of one placement (fits reuse it)."""
    if not uses_loggp(table, params):
        return latency_only.predict(collective, algorithm, place, table, nbytes, segsize=segsize, overlap=overlap)
    coll = collective.lower()
    if coll not in LOGGP_ALGORITHMS:
        raise ModelError(f"collective {collective!r} is not modelled; modelled: {', '.join(LOGGP_ALGORITHMS)}")
    if nbytes < 0 or segsize < 0:
        raise ModelError(f"bytes and segment size must be >= 0 (got {nbytes}, {segsize})")
    if place.size < 2:
        raise ModelError(f"a collective needs at least 2 ranks, got {place.size}")
    default = coll == "bcast" and algorithm == "default"
    name = latency_only.bcast_default_algorithm(place.size, nbytes) if default else algorithm
    model = LOGGP_ALGORITHMS[coll].get(name)
    if model is None:
        why = f" (Open MPI's default choice at np={place.size}, {nbytes} B)" if default else ""
        names = ", ".join(latency_only.algorithms_for(coll))
        raise ModelError(f"{coll} algorithm {name!r}{why} is not modelled; modelled: {names}")
    e = _Edges(place, table, params or LogGP(), regions)
    completion, mean, shape = model(e, place.size, nbytes, segsize)
    return Prediction(coll, name, place.size, nbytes, completion, mean, f"loggp-{shape}")
