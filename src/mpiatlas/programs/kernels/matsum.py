"""matsum: C = A + B over a process grid; rank 0 scatters A and B and gathers C.

Variant group: ``t<topos>-<dists>`` (every topo x dist combination in one launch, e.g. ``t1-slab``).
"""

from __future__ import annotations

import math
from typing import Any

from mpiatlas.cells import Cell
from mpiatlas.programs.kernels import BANDWIDTH_BPS, DOUBLE, MSG_LATENCY_S, KernelProgram, Shape, triplet


def matsum_group(matsum: dict[str, Any]) -> str:
    return f"t{''.join(str(t) for t in matsum['topo'])}-{'+'.join(matsum['dist'])}"


class Matsum(KernelProgram):
    name = "matsum"

    def shapes(self, config: dict[str, Any], stack: str) -> list[Shape]:
        block = self.block(config)
        return [(matsum_group(block), list(block["processes"]), 1)]

    def options(self, config: dict[str, Any], cell: Cell) -> list[str]:
        matsum = self.block(config)
        return ["--dims", ",".join(map(str, matsum["dims"])), "--topo", ",".join(map(str, matsum["topo"])),
                "--dist", ",".join(matsum["dist"])]

    def work_s(self, config: dict[str, Any], cell: Cell) -> float | None:
        # Rank 0 scatters A and B and gathers C whole, once per iteration and topo x dist.
        block = self.block(config)
        rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
        moved_s = 3 * DOUBLE * math.prod(triplet(block["dims"])) / BANDWIDTH_BPS + cell.np * MSG_LATENCY_S
        return len(block["topo"]) * len(block["dist"]) * rounds * moved_s

    def buffers(self, config: dict[str, Any], cell: Cell) -> tuple[float, float]:
        whole = DOUBLE * math.prod(triplet(self.block(config)["dims"]))
        return 3.0 * whole / cell.np, 3.0 * whole
