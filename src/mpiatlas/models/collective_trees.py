"""The communication trees Open MPI 4.1 ``coll_tuned`` builds, as children lists per rank.

Each builder returns ``children[r]``: the ranks rank ``r`` sends to, in the order it posts the
sends. They follow ``ompi/mca/coll/base/coll_base_topo.c`` (read, not copied), so that a model
charges the edges the stack really uses:

* :func:`kary_tree` — ``ompi_coll_base_topo_build_tree``: level order on ranks shifted by the
  root, rank ``s`` at level ``L`` (``delta = fanout**L``) has children ``s + delta*(i+1)``. With
  fanout 2 this is Bcast's ``binary_tree`` (0 → 1, 2; 1 → 3, 5; 2 → 4, 6): the interleaved tree,
  not the in-order one (that one, ``build_in_order_bintree``, is only for non-commutative Reduce).
* :func:`binomial_tree` — ``build_bmtree`` (Bcast ``binomial``): a rank's parent clears its
  highest set bit; its children set each higher bit, smallest first (0 → 1, 2, 4, …).
* :func:`in_order_binomial_tree` — ``build_in_order_bmtree`` (Scatter/Gather ``binomial``): the
  parent clears the lowest set bit; the children set each lower bit (0 → 1, 2, 4; 4 → 5, 6).
* :func:`knomial_tree` — ``build_kmtree`` (Bcast ``knomial``, radix 4 by default): children
  ``v + mask*r`` for ``r`` in 1..radix-1, the largest ``mask`` first.
* :func:`chain_tree` — ``build_chain`` (Bcast ``chain`` with fanout 4 by default, ``pipeline``
  is fanout 1): ranks 1..P-1 (shifted) cut into ``fanout`` contiguous chains, the first
  ``(P-1) % fanout`` of them one rank longer; the root feeds every chain's head.
* :func:`linear_tree` — ``basic_linear``: the root sends to every other rank in rank order.
"""

from __future__ import annotations

import itertools

__all__ = [
    "binomial_tree",
    "chain_tree",
    "depths",
    "in_order_binomial_tree",
    "kary_tree",
    "knomial_tree",
    "linear_tree",
    "mpich_kary_tree",
    "parents",
    "subtree_sizes",
]

Children = list[list[int]]


def _check(size: int, root: int) -> None:
    if size < 1:
        raise ValueError(f"communicator size must be >= 1, got {size}")
    if not 0 <= root < size:
        raise ValueError(f"root {root} is not a rank of a {size}-rank communicator")


def _unshift(shifted: list[list[int]], size: int, root: int) -> Children:
    """Children by real rank, from children computed on ranks shifted so that the root is 0."""
    out: Children = [[] for _ in range(size)]
    for s, kids in enumerate(shifted):
        out[(s + root) % size] = [(k + root) % size for k in kids]
    return out


def linear_tree(size: int, root: int = 0) -> Children:
    _check(size, root)
    out: Children = [[] for _ in range(size)]
    out[root] = [r for r in range(size) if r != root]
    return out


def kary_tree(size: int, root: int = 0, fanout: int = 2) -> Children:
    _check(size, root)
    if fanout < 1:
        raise ValueError(f"tree fanout must be >= 1, got {fanout}")
    shifted: list[list[int]] = []
    for s in range(size):
        level, first = 0, 0  # first: shifted rank of the level's first node
        while first + fanout**level <= s:
            first += fanout**level
            level += 1
        delta = fanout**level
        shifted.append([c for i in range(fanout) if (c := s + delta * (i + 1)) < size])
    return _unshift(shifted, size, root)


def mpich_kary_tree(size: int, root: int = 0, fanout: int = 2) -> Children:
    """MPICH's ``kary`` tree (``MPII_Treeutil_tree_kary_init``, src/mpi/coll/algorithms/treealgo/treeutil.c):
    shifted rank ``s`` has children ``s·k + 1 .. s·k + k``, heap order, unlike Open MPI's level-numbered
    :func:`kary_tree` (binary: MPICH 1 -> 3, 4; Open MPI 1 -> 3, 5)."""
    _check(size, root)
    if fanout < 1:
        raise ValueError(f"tree fanout must be >= 1, got {fanout}")
    shifted = [[c for c in range(s * fanout + 1, s * fanout + fanout + 1) if c < size] for s in range(size)]
    return _unshift(shifted, size, root)


def binomial_tree(size: int, root: int = 0) -> Children:
    _check(size, root)
    shifted: list[list[int]] = []
    for s in range(size):
        mask = 1 << s.bit_length()  # the next power of two strictly above s (1 for the root)
        kids = []
        while mask < size and (s ^ mask) < size:
            kids.append(s ^ mask)
            mask <<= 1
        shifted.append(kids)
    return _unshift(shifted, size, root)


def in_order_binomial_tree(size: int, root: int = 0) -> Children:
    _check(size, root)
    shifted: list[list[int]] = []
    for v in range(size):
        kids, mask = [], 1
        while mask < size:
            remote = v ^ mask
            if remote < v:
                break  # that is the parent
            if remote < size:
                kids.append(remote)
            mask <<= 1
        shifted.append(kids)
    return _unshift(shifted, size, root)


def knomial_tree(size: int, root: int = 0, radix: int = 4) -> Children:
    _check(size, root)
    if radix < 2:
        raise ValueError(f"k-nomial radix must be >= 2, got {radix}")
    shifted: list[list[int]] = []
    for v in range(size):
        mask = 1
        while mask < size and v % (radix * mask) == 0:
            mask *= radix
        mask //= radix
        kids: list[int] = []
        while mask > 0:
            kids.extend(c for r in range(1, radix) if (c := v + mask * r) < size)
            mask //= radix
        shifted.append(kids)
    return _unshift(shifted, size, root)


def chain_tree(size: int, root: int = 0, fanout: int = 4) -> Children:
    _check(size, root)
    fanout = max(1, min(fanout, size - 1))  # Open MPI forces fanout < 1 to 1 and caps it at P-1
    shifted: list[list[int]] = [[] for _ in range(size)]
    if size == 1:
        return shifted
    long_len, rest = divmod(size - 1, fanout)
    long_chains = rest if rest else fanout  # chains of length long_len + 1 (or all, if even)
    long_len = long_len + 1 if rest else long_len
    start = 1
    for chain in range(fanout):
        length = long_len if chain < long_chains else long_len - 1
        members = list(range(start, start + length))
        if members:
            shifted[0].append(members[0])
            for a, b in itertools.pairwise(members):
                shifted[a].append(b)
        start += length
    return _unshift(shifted, size, root)


def parents(children: Children) -> list[int | None]:
    out: list[int | None] = [None] * len(children)
    for p, kids in enumerate(children):
        for k in kids:
            out[k] = p
    return out


def depths(children: Children, root: int) -> list[int]:
    """Hops from the root to every rank (breadth first)."""
    depth = [-1] * len(children)
    depth[root] = 0
    frontier = [root]
    while frontier:
        nxt = []
        for p in frontier:
            for k in children[p]:
                depth[k] = depth[p] + 1
                nxt.append(k)
        frontier = nxt
    if min(depth) < 0:
        raise ValueError("tree does not reach every rank")
    return depth


def subtree_sizes(children: Children, root: int) -> list[int]:
    """Ranks in the subtree under each rank, itself included (what Scatter hands a child)."""
    order = sorted(range(len(children)), key=depths(children, root).__getitem__, reverse=True)
    sizes = [1] * len(children)
    for r in order:
        sizes[r] += sum(sizes[k] for k in children[r])
    return sizes
