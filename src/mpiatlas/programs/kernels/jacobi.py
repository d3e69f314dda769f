"""jacobi: a 3-D Jacobi sweep with halo exchange, pure MPI or MPI + OpenMP (hybrid).

Variant group: ``<mode>-L<L>-t<threads>`` (or ``-N<N>-``), one per mode x size x threads:
``processes`` gives the pure MPI cells (t1), ``hybrid.processes`` x ``hybrid.threads`` and the
ranks x threads pairs of ``hybrid.cores`` the MPI + OpenMP ones; an explicit process grid of
``procdims`` adds ``-g<grid>`` (``weak-L16-t1-g2x1x1``, run with ``--procdims 2,1,1``;
mpiatlas.matrix.kernel_sweeps).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from mpiatlas.matrix.cells import Cell
from mpiatlas.matrix.config import ConfigError
from mpiatlas.matrix.kernel_sweeps import JacobiVariant, jacobi_problems, jacobi_variants
from mpiatlas.programs.base import Reduction
from mpiatlas.matrix.kernel_blocks import JacobiBlock
from mpiatlas.programs.kernels import DOUBLE, MSG_LATENCY_S, POINT_UPDATE_S, KernelProgram, Shape, with_grid_columns

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

if TYPE_CHECKING:  # imported where rows are built (see programs.kernels)
    import polars as pl


def jacobi_group(jacobi: JacobiBlock, threads: int) -> str:
    """The group of a block without sweeps (one mode, one size, no explicit grid) at ``threads``."""
    return next(v.group for v in jacobi_variants(jacobi) if v.threads == threads and v.grid is None)


def grid_points(variant: JacobiVariant, np: int) -> tuple[float, float]:
    """(points per rank, global points) of a Jacobi launch: weak mode gives each core L³ points."""
    total = float(math.prod(variant.global_dims(np)))
    return total / np, total


class Jacobi(KernelProgram):
    name = "jacobi"
    openmp = True  # hybrid MPI + OpenMP
    report_sections = ("mpiatlas.report.sections.kernel_jacobi:section_kernel_jacobi",
                       "mpiatlas.report.sections.kernel_jacobi_nodes:section_kernel_jacobi_nodes")
    # One iteration, the slowest rank's, per variant group (mode, size, threads, grid).
    reduction = Reduction({"variant_group": "variant"}, "iteration_us", True)
    modelled = True

    def block(self, config: Campaign) -> JacobiBlock:
        return cast(JacobiBlock, super().block(config))

    def problems(self, config: Campaign) -> list[str]:
        return jacobi_problems(self.block(config))

    def variant(self, config: Campaign, cell: Cell) -> JacobiVariant:
        for variant in jacobi_variants(self.block(config)):
            if variant.group == cell.variant:
                return variant
        raise ConfigError(f"{cell.id}: kernels.jacobi has no variant group {cell.variant!r}")

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(v.group, list(v.counts), v.threads) for v in jacobi_variants(self.block(config))]

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        v = self.variant(config, cell)
        args = ["--mode", v.mode, f"--{v.size_key}", ",".join(map(str, v.size)), "--threads", str(cell.threads)]
        if self.block(config)["check"]:
            args.append("--check")
        return args + (["--procdims", ",".join(map(str, v.grid))] if v.grid else [])

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        # Timed and warm-up sweeps, plus the serial re-run of the check on rank 0.
        block = self.block(config)
        rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
        per_rank, total = grid_points(self.variant(config, cell), cell.np)
        sweep_s = per_rank * POINT_UPDATE_S / cell.threads + 6 * MSG_LATENCY_S
        check_s = total * POINT_UPDATE_S * rounds if block.get("check", True) else 0.0
        return rounds * sweep_s + check_s

    def buffers(self, config: Campaign, cell: Cell) -> tuple[float, float]:
        block = self.block(config)
        per_rank, total = grid_points(self.variant(config, cell), cell.np)
        root_b = 2.0 * DOUBLE * total if block.get("check", True) else 0.0
        return 2.0 * DOUBLE * per_rank * 1.2, root_b  # two grids, plus halo layers

    def finish_rows(self, frame: pl.DataFrame) -> pl.DataFrame:
        return with_grid_columns(frame)
