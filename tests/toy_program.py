"""A test-only kernel program, ``toy``, with its whole slice in this one module (plus its C file,
tests/data/toy.c): axes and cells, argv, cost model, config block schema, tidy table (through the
shared kernel parser), adaptive repetitions' measure, ``mpiatlas compare`` reduction and report section. It is not part of the
package: tests/test_registry.py adds it with :func:`mpiatlas.programs.registered` and shows that
the matrix, the resources, tidy, compare, the build and the report take it up unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from mpiatlas.matrix.cells import Cell
from mpiatlas.programs.base import Measure, Reduction
from mpiatlas.programs.kernels import DEFAULT_GROUP, MSG_LATENCY_S, KernelProgram, Shape
from mpiatlas.report.blocks import Section, Table, cell
from mpiatlas.report.data import ReportData

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

TOY_TITLE = "Kernel: toy barrier"
TOY_BUFFER_B = 4096.0


class Toy(KernelProgram):
    """One MPI_Barrier per iteration (tests/data/toy.c), at each of ``kernels.toy.processes``."""

    name = "toy"
    config_schema: Mapping[str, Any] | None = {
        "type": "object", "additionalProperties": False, "required": ["processes"],
        "properties": {
            "processes": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}},
            "iterations": {"type": "integer", "minimum": 1, "default": 100},
            "warmup": {"type": "integer", "minimum": 0, "default": 10},
        },
    }
    report_sections = ("toy_program:section_toy",)
    reduction = Reduction({}, "t_usec", True)  # the slowest rank's barrier time, one point per P
    measure = Measure(("variant_group",), "t_usec", (("rank", 0),))  # adaptive repetitions: rank 0's

    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        return [(DEFAULT_GROUP, list(self.block(config)["processes"]), 1)]

    def options(self, config: Campaign, cell: Cell) -> list[str]:
        return []

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        block = self.block(config)
        rounds = int(block["iterations"]) + int(block["warmup"])
        return rounds * MSG_LATENCY_S * max(1, math.ceil(math.log2(cell.np)))  # a tree barrier

    def buffers(self, config: Campaign, cell: Cell) -> tuple[float, float]:
        return TOY_BUFFER_B, 0.0


def section_toy(data: ReportData) -> Section | None:
    """The toy kernel's section: the slowest rank's barrier time per series and P."""
    df = data.kernel_table("toy")
    if df is None:
        return None
    medians = (df.group_by("label", "np", "rep").agg(pl.col("t_usec").max())
               .group_by("label", "np").agg(pl.col("t_usec").median()).sort("label", "np"))
    rows = [[cell(r["label"]), cell(r["np"]), cell(r["t_usec"])] for r in medians.iter_rows(named=True)]
    return Section(TOY_TITLE, [Table(["series", "P", "barrier t (µs)"], rows)], id="kernel-toy")
