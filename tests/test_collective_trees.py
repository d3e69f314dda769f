"""Open MPI 4.1 coll_tuned trees: the examples drawn in coll_base_topo.c, and that every tree
reaches every rank exactly once."""

from __future__ import annotations

import pytest

from mpiatlas.models import collective_trees as trees


def _as_dict(children: list[list[int]]) -> dict[int, list[int]]:
    return {r: kids for r, kids in enumerate(children) if kids}


def test_binary_tree_is_the_interleaved_level_order_tree() -> None:
    # coll_base_topo.c, fanout 2, size 7: 0 -> 1 2; 1 -> 3 5; 2 -> 4 6.
    assert _as_dict(trees.kary_tree(7, 0, 2)) == {0: [1, 2], 1: [3, 5], 2: [4, 6]}
    # Level 2 starts at shifted rank 3 with delta 4: 3 -> 7, 11 for a big enough communicator.
    assert trees.kary_tree(12, 0, 2)[3] == [7, 11]


def test_binomial_children_set_higher_bits_smallest_first() -> None:
    # build_bmtree, size 8: 0 -> 1 2 4; 1 -> 3 5; 2 -> 6; 3 -> 7.
    assert _as_dict(trees.binomial_tree(8)) == {0: [1, 2, 4], 1: [3, 5], 2: [6], 3: [7]}


def test_in_order_binomial_children_set_lower_bits() -> None:
    # build_in_order_bmtree, size 8: 0 -> 1 2 4; 2 -> 3; 4 -> 5 6; 6 -> 7.
    assert _as_dict(trees.in_order_binomial_tree(8)) == {0: [1, 2, 4], 2: [3], 4: [5, 6], 6: [7]}


@pytest.mark.parametrize(
    ("radix", "expected"),
    [
        (2, {0: [8, 4, 2, 1], 8: [9], 4: [6, 5], 6: [7], 2: [3]}),
        (3, {0: [9, 3, 6, 1, 2], 3: [4, 5], 6: [7, 8]}),
        (4, {0: [4, 8, 1, 2, 3], 4: [5, 6, 7], 8: [9]}),
    ],
)
def test_knomial_matches_the_drawn_examples(radix: int, expected: dict[int, list[int]]) -> None:
    # build_kmtree, comm_size 10, radix 2/3/4 (the diagrams in coll_base_topo.c).
    assert _as_dict(trees.knomial_tree(10, 0, radix)) == expected


def test_chain_cuts_contiguous_chains_longest_first() -> None:
    # 10 ranks, fanout 4: 9 ranks -> chains of 3, 2, 2, 2 (the remainder 1 goes to the first).
    assert _as_dict(trees.chain_tree(10, 0, 4)) == {0: [1, 4, 6, 8], 1: [2], 2: [3], 4: [5], 6: [7], 8: [9]}
    # Even split: 9 ranks, fanout 4 -> 2 each.
    assert _as_dict(trees.chain_tree(9, 0, 4)) == {0: [1, 3, 5, 7], 1: [2], 3: [4], 5: [6], 7: [8]}
    # Fanout above P-1 is capped; fanout 1 is the pipeline.
    assert _as_dict(trees.chain_tree(3, 0, 4)) == {0: [1, 2]}
    assert _as_dict(trees.chain_tree(4, 0, 1)) == {0: [1], 1: [2], 2: [3]}


def test_root_shift() -> None:
    # Every builder works on ranks shifted by the root: root 2 of 4 in a chain feeds 3, then 0, 1.
    assert _as_dict(trees.chain_tree(4, 2, 1)) == {2: [3], 3: [0], 0: [1]}
    assert _as_dict(trees.binomial_tree(4, 3)) == {3: [0, 1], 0: [2]}


BUILDERS = {
    "linear": trees.linear_tree,
    "binary": lambda p, r: trees.kary_tree(p, r, 2),
    "ternary": lambda p, r: trees.kary_tree(p, r, 3),
    "binomial": trees.binomial_tree,
    "in_order_binomial": trees.in_order_binomial_tree,
    "knomial4": lambda p, r: trees.knomial_tree(p, r, 4),
    "chain4": lambda p, r: trees.chain_tree(p, r, 4),
    "pipeline": lambda p, r: trees.chain_tree(p, r, 1),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_rank_has_exactly_one_parent(name: str) -> None:
    for size in [*range(1, 70), 127, 128, 129, 256, 300]:
        for root in {0, size - 1, size // 2}:
            children = BUILDERS[name](size, root)
            received = sorted(k for kids in children for k in kids)
            assert received == sorted(set(range(size)) - {root}), (name, size, root)
            assert trees.depths(children, root)[root] == 0


def test_depth_and_subtree_sizes() -> None:
    children = trees.binomial_tree(16)
    assert max(trees.depths(children, 0)) == 4  # log2 16
    assert max(trees.depths(trees.kary_tree(256, 0, 2), 0)) == 8  # 2^8 - 1 < 256 <= 2^9 - 1
    assert max(trees.depths(trees.knomial_tree(256, 0, 4), 0)) == 4  # log4 256
    # Scatter hands child k the blocks of its whole subtree.
    sub = trees.subtree_sizes(trees.in_order_binomial_tree(8), 0)
    assert (sub[0], sub[1], sub[2], sub[4], sub[6]) == (8, 1, 2, 4, 2)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="root 4"):
        trees.binomial_tree(4, 4)
    with pytest.raises(ValueError, match="radix"):
        trees.knomial_tree(8, 0, 1)
