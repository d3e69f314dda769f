"""ring: every rank passes a message around the ring, P steps per exchange.

Variant groups: each entry of ``ring.variants`` (``nonblocking``, or ``nonblocking+blocking+ssend``
to run several in one launch); every ``streams`` x ``bytes`` combination runs in that launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from mpiatlas.matrix.cells import Cell
from mpiatlas.programs.base import Reduction
from mpiatlas.matrix.kernel_blocks import RingBlock
from mpiatlas.programs.kernels import BANDWIDTH_BPS, MSG_LATENCY_S, KernelProgram, Shape

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign


class Ring(KernelProgram):
    name = "ring"
    report_sections = ("mpiatlas.report.sections.kernel_ring:section_kernel_ring",)
    # The exchange time (P steps), the slowest rank's: the exchange ends with it.
    reduction = Reduction({"variant": "variant", "streams": "streams", "bytes": "bytes"}, "time_us", True)
    modelled = True

    def block(self, config: Campaign) -> RingBlock:
        return cast(RingBlock, super().block(config))

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        block = self.block(config)
        return [(group, list(block["processes"]), 1) for group in block["variants"]]

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        ring = self.block(config)
        return ["--variant", ",".join(cell.variant.split("+")), "--streams", ",".join(map(str, ring["streams"])),
                "--bytes", ",".join(map(str, ring["bytes"]))]

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        # One exchange = P steps; each step moves `streams` messages of `bytes` per rank.
        block = self.block(config)
        rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
        step_s: float = sum(MSG_LATENCY_S + s * b / BANDWIDTH_BPS for s in block["streams"] for b in block["bytes"])
        return len(cell.variant.split("+")) * rounds * cell.np * step_s

    def buffers(self, config: Campaign, cell: Cell) -> tuple[float, float]:
        return 4.0 * max(self.block(config)["bytes"]), 0.0  # send + receive buffer, both directions
