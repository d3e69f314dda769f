"""Open MPI's default Bcast algorithm: coll_tuned's fixed decision, as data cited to its source.

When no algorithm is forced, coll/tuned picks one from the communicator size P and the message size in
bytes (``ompi_coll_tuned_bcast_intra_dec_fixed``). The rules are the same in 4.1 and 5.0: the decision file
is byte-identical between the tags cited below, and the 5.0.x branch has not changed it since.
Each rule below is (P below, [(bytes below, algorithm id)]): the first P row and the first byte limit
that the call is under apply. ``line`` is where that P row starts in the source file, in both releases.

Which component decides: coll/tuned (priority 30, coll_tuned_component.c:52) unless a higher one takes the
communicator. In 4.1 coll/han is off (priority 0, coll_han_component.c:166 of v4.1.4). In 5.0 coll/han has
priority 35 (coll_han_component.c:94 of v5.0.10) but leaves a communicator whose ranks are all on one node
(coll_han_module.c:239-247): on one node 5.0 runs this table, over several nodes its default Bcast is HAN's
hierarchical one, which these rules do not describe (and which the probe, one node, cannot see).

The rules were checked against the libraries themselves, oversubscribed at P = 2..64 on a 2-core
machine, for Debian's 4.1.4 and PyPI's 5.0.11, and at P = 65..256 (rows 64..127, 128..255 and 256..1023
at their byte limits) for 4.1.4 (tests/data/ompi_bcast_decision.csv, how it was made in
tests/ompi_decision_probe.py): every probed (P, bytes) called the function this table names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "BCAST_ALGORITHM_IDS",
    "BCAST_RULES",
    "DECISION_FILE",
    "SCATTER_RULES",
    "SOURCES",
    "BcastChoice",
    "BcastRule",
    "bcast_default_algorithm",
    "bcast_default_choice",
    "scatter_default_algorithm",
]

DECISION_FILE = "ompi/mca/coll/tuned/coll_tuned_decision_fixed.c"
# Release series -> (tag, commit) of github.com/open-mpi/ompi the line numbers refer to. 5.0.11 (PyPI) has no
# tag in the mirror read; v5.0.10 and the v5.0.x branch at b962e8a (2026-08-17) have the same file.
SOURCES: dict[str, tuple[str, str]] = {
    "4.1": ("v4.1.4", "ffb0adcdd677a02ab396145c40352f8189132b86"),
    "5.0": ("v5.0.10", "0d48030d410ae8f56790933135b28be1b3920ba1"),
}

# coll_tuned's Bcast algorithm ids (coll_tuned_bcast_decision.c:37-48 in both tags). The decision calls
# each with fanout 0 and segment size 0 (decision file, line 649); id 2 (chain) with fanout 0 builds a
# chain of fanout 1, i.e. the pipeline (coll_base_topo.c raises a fanout below 1 to 1: line 546 of v4.1.4,
# 551 of v5.0.10), and that is what the models price for it.
BCAST_ALGORITHM_IDS: dict[int, str] = {
    1: "basic_linear", 2: "chain", 3: "pipeline", 4: "split_binary_tree", 5: "binary_tree",
    6: "binomial", 7: "knomial", 8: "scatter_allgather", 9: "scatter_allgather_ring",
}  # fmt: skip
_MODELLED_AS = {"chain": "pipeline"}  # fanout 0 -> 1, see above


@dataclass(frozen=True)
class BcastRule:
    p_below: float  # the row applies to communicators smaller than this (and not smaller than the row before)
    by_bytes: tuple[tuple[float, int], ...]  # (message bytes below, algorithm id); the last limit is inf
    line: int  # where the row starts in DECISION_FILE (same line in every tag of SOURCES)


# Written from coll_tuned_decision_fixed.c, lines 539-647 of both tags (the function starts at 512).
BCAST_RULES: tuple[BcastRule, ...] = (
    BcastRule(4, ((32, 3), (256, 5), (512, 3), (1024, 7), (32768, 1), (131072, 5), (262144, 2),
                  (524288, 1), (1048576, 6), (math.inf, 5)), 539),
    BcastRule(8, ((64, 5), (128, 6), (2048, 5), (8192, 6), (1048576, 1), (math.inf, 2)), 561),
    BcastRule(16, ((8, 7), (64, 5), (4096, 7), (16384, 5), (32768, 6), (math.inf, 1)), 575),
    BcastRule(32, ((4096, 7), (1048576, 6), (math.inf, 8)), 589),
    BcastRule(64, ((2048, 6), (math.inf, 7)), 597),
    BcastRule(128, ((math.inf, 7),), 603),
    BcastRule(256, ((2, 6), (16384, 5), (32768, 1), (65536, 5), (math.inf, 7)), 605),
    BcastRule(1024, ((16384, 7), (32768, 4), (math.inf, 7)), 617),
    BcastRule(2048, ((524288, 7), (math.inf, 8)), 625),
    BcastRule(4096, ((262144, 7), (math.inf, 8)), 631),
    BcastRule(math.inf, ((8192, 7), (16384, 5), (262144, 7), (math.inf, 8)), 637),
)


@dataclass(frozen=True)
class BcastChoice:
    algorithm_id: int
    function: str  # the coll_tuned name of the coll/base function called (what a probe sees)
    modelled: str  # the algorithm the models price (chain with fanout 0 is the pipeline)
    line: int  # the rule's row in DECISION_FILE

    def citation(self, series: str) -> str:
        tag, commit = SOURCES[series]
        return f"{DECISION_FILE}:{self.line} ({tag}, {commit[:10]})"


def bcast_default_choice(np: int, nbytes: int) -> BcastChoice:
    """What Open MPI 4.1 / 5.0's fixed decision calls for a Bcast of ``nbytes`` on ``np`` ranks."""
    if np < 1 or nbytes < 0:
        raise ValueError(f"a Bcast needs np >= 1 and bytes >= 0 (got np={np}, bytes={nbytes})")
    rule = next(r for r in BCAST_RULES if np < r.p_below)
    ident = next(alg for limit, alg in rule.by_bytes if nbytes < limit)
    function = BCAST_ALGORITHM_IDS[ident]
    return BcastChoice(ident, function, _MODELLED_AS.get(function, function), rule.line)


def bcast_default_algorithm(np: int, nbytes: int) -> str:
    """The algorithm the models price for Open MPI's default Bcast (chain with fanout 0 -> ``pipeline``)."""
    return bcast_default_choice(np, nbytes).modelled


# Scatter (``ompi_coll_tuned_scatter_intra_dec_fixed``, same file), read from the source, not probed:
# algorithm ids 1 basic_linear, 2 binomial, 3 linear_nb; the byte count is one rank's block (scount ×
# type size at the root). Each rule: (P below, [(bytes below, algorithm)]), as BCAST_RULES.
SCATTER_IDS = {1: "basic_linear", 2: "binomial", 3: "linear_nb"}
SCATTER_RULES: tuple[tuple[float, tuple[tuple[float, int], ...]], ...] = (
    (4, ((2, 3), (131072, 1), (262144, 3), (math.inf, 1))),
    (8, ((2048, 2), (4096, 1), (8192, 2), (32768, 1), (1048576, 3), (math.inf, 1))),
    (16, ((16384, 2), (1048576, 3), (math.inf, 1))),
    (32, ((16384, 2), (32768, 1), (math.inf, 3))),
    (64, ((512, 2), (8192, 3), (16384, 2), (math.inf, 3))),
    (math.inf, ((512, 2), (math.inf, 3))),
)


def scatter_default_algorithm(np: int, nbytes: int) -> str:
    """The algorithm Open MPI's fixed decision picks for a Scatter of ``nbytes`` per rank on ``np`` ranks."""
    if np < 1 or nbytes < 0:
        raise ValueError(f"a Scatter needs np >= 1 and bytes >= 0 (got np={np}, bytes={nbytes})")
    rules = next(r for p_below, r in SCATTER_RULES if np < p_below)
    return SCATTER_IDS[next(alg for limit, alg in rules if nbytes < limit)]
