"""loggp: LogGP parameters (L, o_s, o_r, g) between two ranks, by Kielmann's PRTT (src/kernels/loggp.c).

Variant group: ``m<lo>-<hi>`` (the size sweep in one launch); always 2 ranks, so a campaign with
region mappings (``mappings: [regions]``) plans one cell per region pair the node has, like the
region PingPong cells. The records are parsed into per-trial rows by :mod:`mpiatlas.parsers.loggp`;
:mod:`mpiatlas.stats.region_loggp` turns them into the region table's ``overhead_us,gap_us``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mpiatlas.matrix.cells import Cell
from mpiatlas.matrix.kernel_blocks import LoggpBlock
from mpiatlas.programs.kernels import KernelProgram, Shape, sweep_args

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign


def loggp_group(block: LoggpBlock) -> str:
    lo, hi = block["msglog"]
    return f"m{lo}-{hi}"


class Loggp(KernelProgram):
    name = "loggp"

    def block(self, config: Campaign) -> LoggpBlock:
        return cast(LoggpBlock, super().block(config))

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(loggp_group(self.block(config)), [2], 1)]  # the parameters of one pair of ranks

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        block = self.block(config)
        return ["--trials", str(block["trials"]), "--burst", str(block["burst"]), *sweep_args(block)]
