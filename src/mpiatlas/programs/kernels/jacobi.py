"""jacobi: a 3-D Jacobi sweep with halo exchange, pure MPI or MPI + OpenMP (hybrid).

Variant group: ``<mode>-L<L>-t<threads>`` (or ``-N<N>-``): ``processes`` gives the pure MPI cells
(t1), ``hybrid.processes`` x ``hybrid.threads`` the MPI + OpenMP ones.
"""

from __future__ import annotations

import math
from typing import Any

from mpiatlas.cells import Cell
from mpiatlas.programs.kernels import DOUBLE, MSG_LATENCY_S, POINT_UPDATE_S, KernelProgram, Shape, size_name, triplet


def jacobi_group(jacobi: dict[str, Any], threads: int) -> str:
    size = "L" if jacobi["mode"] == "weak" else "N"
    return f"{jacobi['mode']}-{size}{size_name(jacobi[size])}-t{threads}"


def grid_points(jacobi: dict[str, Any], np: int) -> tuple[float, float]:
    """(points per rank, global points) of a Jacobi launch."""
    if jacobi["mode"] == "weak":
        per_rank = float(math.prod(triplet(jacobi["L"])))
        return per_rank, per_rank * np
    total = float(math.prod(triplet(jacobi["N"])))
    return total / np, total


class Jacobi(KernelProgram):
    name = "jacobi"

    def shapes(self, config: dict[str, Any], stack: str) -> list[Shape]:
        block = self.block(config)
        out = [(jacobi_group(block, 1), list(block["processes"]), 1)]
        hybrid = block.get("hybrid")
        if hybrid:
            out += [(jacobi_group(block, t), list(hybrid["processes"]), t) for t in hybrid["threads"]]
        return out

    def options(self, config: dict[str, Any], cell: Cell) -> list[str]:
        jacobi = self.block(config)
        size = "L" if jacobi["mode"] == "weak" else "N"
        args = ["--mode", jacobi["mode"], f"--{size}", ",".join(map(str, triplet(jacobi[size]))),
                "--threads", str(cell.threads)]
        if jacobi.get("check", True):
            args.append("--check")
        return args

    def work_s(self, config: dict[str, Any], cell: Cell) -> float | None:
        # Timed and warm-up sweeps, plus the serial re-run of the check on rank 0.
        block = self.block(config)
        rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
        per_rank, total = grid_points(block, cell.np)
        sweep_s = per_rank * POINT_UPDATE_S / cell.threads + 6 * MSG_LATENCY_S
        check_s = total * POINT_UPDATE_S * rounds if block.get("check", True) else 0.0
        return rounds * sweep_s + check_s

    def buffers(self, config: dict[str, Any], cell: Cell) -> tuple[float, float]:
        block = self.block(config)
        per_rank, total = grid_points(block, cell.np)
        root_b = 2.0 * DOUBLE * total if block.get("check", True) else 0.0
        return 2.0 * DOUBLE * per_rank * 1.2, root_b  # two grids, plus halo layers
