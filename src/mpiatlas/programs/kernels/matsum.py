"""matsum: C = A + B over a process grid; rank 0 scatters A and B and gathers C.

Variant group: ``t<topos>-<dists>`` (every topo x dist combination in one launch, e.g. ``t1-slab``);
an explicit process grid of ``procdims`` adds ``-g<grid>`` (``t2-slab-g2x1``, run at P = 2 with
``--procdims 2,1``), several ``dims`` add ``-d<X>x<Y>x<Z>`` (mpiatlas.matrix.kernel_sweeps).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import polars as pl

from mpiatlas.matrix.cells import Cell
from mpiatlas.matrix.config import ConfigError
from mpiatlas.matrix.kernel_sweeps import MatsumVariant, matsum_problems, matsum_variants
from mpiatlas.programs.base import Reduction
from mpiatlas.matrix.kernel_blocks import MatsumBlock
from mpiatlas.programs.kernels import BANDWIDTH_BPS, DOUBLE, MSG_LATENCY_S, KernelProgram, Shape, with_grid_columns

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign



def matsum_group(matsum: MatsumBlock) -> str:
    """The group of a block without sweeps (one dims triple, no explicit grid)."""
    return matsum_variants(matsum)[0].group


def with_topo_dist(df: pl.DataFrame) -> pl.DataFrame:
    """matsum's topo x dist as one comparison axis (``topo<t>-<d>``)."""
    if {"topo", "dist"} <= set(df.columns):
        df = df.with_columns(pl.format("topo{}-{}", pl.col("topo"), pl.col("dist")).alias("topo_dist"))
    return df


class Matsum(KernelProgram):
    name = "matsum"
    report_sections = ("mpiatlas.report.sections.kernel_matsum:section_kernel_matsum",)
    # scatter + compute + gather, the slowest rank's.
    reduction = Reduction({"dims": "problem", "topo_dist": "variant"}, "total_us", True, with_topo_dist)
    modelled = True

    def block(self, config: Campaign) -> MatsumBlock:
        return cast(MatsumBlock, super().block(config))

    def problems(self, config: Campaign) -> list[str]:
        return matsum_problems(self.block(config))

    def variant(self, config: Campaign, cell: Cell) -> MatsumVariant:
        for variant in matsum_variants(self.block(config)):
            if variant.group == cell.variant:
                return variant
        raise ConfigError(f"{cell.id}: kernels.matsum has no variant group {cell.variant!r}")

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(v.group, list(v.counts), 1) for v in matsum_variants(self.block(config))]

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        v = self.variant(config, cell)
        args = ["--dims", ",".join(map(str, v.dims)), "--topo", ",".join(map(str, v.topos)),
                "--dist", ",".join(v.dists)]
        return args + (["--procdims", ",".join(map(str, v.grid))] if v.grid else [])

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        # Rank 0 scatters A and B and gathers C whole, once per iteration and topo x dist.
        block = self.block(config)
        v = self.variant(config, cell)
        rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
        moved_s = 3 * DOUBLE * math.prod(v.dims) / BANDWIDTH_BPS + cell.np * MSG_LATENCY_S
        return len(v.topos) * len(v.dists) * rounds * moved_s

    def buffers(self, config: Campaign, cell: Cell) -> tuple[float, float]:
        whole = DOUBLE * math.prod(self.variant(config, cell).dims)
        return 3.0 * whole / cell.np, 3.0 * whole

    def finish_rows(self, frame: pl.DataFrame) -> pl.DataFrame:
        return with_grid_columns(frame)
