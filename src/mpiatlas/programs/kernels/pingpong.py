"""pingpong: mpiatlas's OSU-style point-to-point sweep between two ranks.

Variant group: ``m<lo>-<hi>`` (the whole size sweep in one launch); always 2 ranks. It may choose
its own ``stacks`` (else ``kernels.stacks``): Open MPI, which has no IMB here, is measured too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mpiatlas.matrix.cells import Cell
from mpiatlas.programs.base import Measure, Reduction
from mpiatlas.matrix.kernel_blocks import PingpongBlock
from mpiatlas.programs.kernels import KernelProgram, Shape, sweep_args, sweep_work_s

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign


def pingpong_group(pingpong: PingpongBlock) -> str:
    lo, hi = pingpong["msglog"]
    return f"m{lo}-{hi}"


class Pingpong(KernelProgram):
    name = "pingpong"
    pair = True  # one pair of ranks: region mappings keep it under region_pairs_only
    headline = True  # with IMB PingPong, the point-to-point curves the report opens with
    # The own pingpong and coll kernels share a section (Open MPI's only p2p/collective data).
    report_sections = ("mpiatlas.report.sections.kernel_p2p_coll:section_kernel_p2p_coll",)
    # Rank 0's half round trip (as IMB PingPong) per size.
    reduction = Reduction({"bytes": "bytes"}, "t_usec", False)
    # Adaptive repetitions: rank 0's half round trip, as the OSU/IMB reporter (models.kernel_p2p).
    measure = Measure(("variant", "bytes"), "t_usec", (("rank", 0), ("valid", True)))
    modelled = True

    def block(self, config: Campaign) -> PingpongBlock:
        return cast(PingpongBlock, super().block(config))

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(pingpong_group(self.block(config)), [2], 1)]  # a ping-pong has exactly two ranks

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        return sweep_args(self.block(config))

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        return sweep_work_s(self.block(config), steps=2.0)  # a round trip per call
