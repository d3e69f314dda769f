"""coll: mpiatlas's OSU-style collectives (bcast, allreduce, alltoall) over a size sweep.

Variant groups: ``default`` (every configured collective, the stack's own algorithms) and, for
the stacks of ``forced_algorithms``, ``<collective>-<algorithm>`` per non-default algorithm of
``stacks.<label>.algorithms`` (e.g. ``bcast-binomial``): that collective only, launched with
``LaunchSpec(collective=..., algorithm=...)`` like an IMB cell of that algorithm.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import polars as pl

from mpiatlas.matrix.cells import DEFAULT_ALGORITHM, Cell
from mpiatlas.programs.base import Measure, Reduction
from mpiatlas.matrix.kernel_blocks import CollBlock
from mpiatlas.programs.kernels import DEFAULT_GROUP, KernelProgram, Shape, sweep_args, sweep_work_s

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign


# The collectives of the coll kernel: config name (IMB's, as in stacks.<label>.algorithms) -> kernel name.
COLL_COLLECTIVES: dict[str, str] = {"Bcast": "bcast", "Allreduce": "allreduce", "Alltoall": "alltoall"}


def forces_algorithms(coll: CollBlock, stack: str) -> bool:
    forced = coll.get("forced_algorithms", True)
    return stack in forced if isinstance(forced, list) else bool(forced)


def coll_groups(config: Campaign, stack: str) -> list[str]:
    """``default``, then ``<collective>-<algorithm>`` for every forced algorithm of ``stack``."""
    coll = config.kernels["coll"]
    groups = [DEFAULT_GROUP]
    if forces_algorithms(coll, stack):
        algorithms = config.stacks[stack].algorithms
        groups += [f"{COLL_COLLECTIVES[name]}-{algo}" for name in coll["collectives"]
                   for algo in algorithms.get(name, []) if algo != DEFAULT_ALGORITHM]
    return groups


def coll_group_parts(group: str) -> tuple[str | None, str]:
    """``bcast-binomial`` -> (``bcast``, ``binomial``); ``default`` -> (None, ``default``).

    Collective names have no '-', algorithm names may: split at the first one."""
    if group == DEFAULT_GROUP:
        return None, DEFAULT_ALGORITHM
    collective, _, algorithm = group.partition("-")
    if collective not in COLL_COLLECTIVES.values() or not algorithm:
        raise ValueError(f"{group!r} is not a coll group (default or <collective>-<algorithm>)")
    return collective, algorithm


def with_coll_algorithm(frame: pl.DataFrame) -> pl.DataFrame:
    """``algorithm`` of every coll record: the one its cell forced for that collective, else ``default``."""
    try:
        forced, algorithm = coll_group_parts(str(frame["variant_group"][0]))
    except ValueError:
        forced, algorithm = None, DEFAULT_ALGORITHM
    return frame.with_columns(
        pl.when(pl.col("collective") == pl.lit(forced)).then(pl.lit(algorithm)).otherwise(pl.lit(DEFAULT_ALGORITHM))
        .alias("algorithm"))


class Coll(KernelProgram):
    name = "coll"
    report_sections = ("mpiatlas.report.sections.kernel_p2p_coll:section_kernel_p2p_coll",)  # shared with pingpong
    # Rank 0's time per call averaged over ranks, per collective, algorithm and size.
    reduction = Reduction({"collective": "variant", "algorithm": "algorithm", "bytes": "bytes"}, "t_avg_usec", False)
    # Adaptive repetitions: rank 0's per-call time averaged over ranks.
    measure = Measure(("collective", "algorithm", "bytes"), "t_avg_usec", (("rank", 0), ("valid", True)))
    modelled = True

    def block(self, config: Campaign) -> CollBlock:
        return cast(CollBlock, super().block(config))

    def forces_an_algorithm(self, cell: Cell) -> bool:
        return cell.algorithm != DEFAULT_ALGORITHM  # a group that forces one (its variant group otherwise)

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(group, list(self.block(config)["processes"]), 1) for group in coll_groups(config, stack)]

    def collectives(self, config: Campaign, cell: Cell) -> list[str]:
        """The kernel's names of the collectives a cell runs: its forced one, else every configured one."""
        forced, _ = coll_group_parts(cell.variant)
        return [forced] if forced else [COLL_COLLECTIVES[name] for name in self.block(config)["collectives"]]

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        return ["--collective", ",".join(self.collectives(config, cell)), *sweep_args(self.block(config))]

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        # A tree collective moves ~log2 P messages per call on its critical path, Alltoall P - 1.
        tree = max(1.0, math.ceil(math.log2(max(cell.np, 2))))
        return sum(sweep_work_s(self.block(config), float(cell.np - 1) if name == "alltoall" else tree)
                   for name in self.collectives(config, cell))

    def forced(self, cell: Cell) -> tuple[str | None, str | None]:
        collective, algorithm = coll_group_parts(cell.variant)
        return (collective, algorithm) if collective else (None, None)

    def finish_rows(self, frame: pl.DataFrame) -> pl.DataFrame:
        return with_coll_algorithm(frame)
