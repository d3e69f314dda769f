"""What a benchmark program is to mpiatlas: the one place that knows its axes, argv, output and rows.

A program (IMB, or one C kernel) expands its own config block into cells, writes its block of
the cell spec, builds the argv of one rank (from the host, or through the image), checks its
output, turns a sealed cell into tidy rows, and models its work and memory for the scheduler.
Everything else (placement, launch, exit status, transport and binding evidence, sealing,
packing cells into jobs) is the same for every program and lives in mpiatlas.runner and
mpiatlas.campaign.resources.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from mpiatlas.matrix.cells import Cell, distribution_of_id
from mpiatlas.spine.series import SeriesKey
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.stacks import Stack

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec, ImageFacts, ProgramBlock, StackExtras
    from mpiatlas.spine.cell_row import CellRow
    from mpiatlas.spine.campaign import Campaign


@dataclass
class Checked:
    """A program's verdict on output it could read: facts for status.json, and what it found wrong.

    ``failure`` makes the cell ``failed`` (the program's own check: missing ranks, ``valid:
    false``); ``binding_problems`` make it ``invalid`` like a wrong rank binding does."""

    details: dict[str, Any]
    failure: str | None = None
    binding_problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LaunchExtras:
    """What a program adds to its launch: a forced collective algorithm, environment for the ranks."""

    collective: str | None = None
    algorithm: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def container_binds(spec: CellSpec) -> list[str]:
    """The extra --bind specs of a containerised cell's ``apptainer exec`` ([] without)."""
    container = spec["container"]
    return list(container.get("binds", [])) if container else []


@dataclass(frozen=True)
class Reduction:
    """How ``mpiatlas compare`` turns a program's tidy rows into one time per launch
    (:mod:`mpiatlas.compare.kernels`): the record's own axes (renamed to the comparison's), the time
    column, whether the slowest rank's (max) or rank 0's counts, and what to derive first."""

    axes: dict[str, str]  # record column -> comparison axis
    time: str
    slowest: bool
    # Record columns the axes need that the table spells otherwise (e.g. matsum's topo x dist as one).
    prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None


@dataclass(frozen=True)
class Measure:
    """How a program's tidy rows give one time per size of a cell, for adaptive repetitions
    (:mod:`mpiatlas.campaign.adaptive_rounds`): its rows where ``filters`` hold (column -> required
    value), grouped by the ``keys`` present, time in ``value``."""

    keys: tuple[str, ...]
    value: str
    filters: tuple[tuple[str, Any], ...] = ()


class Program(ABC):
    """A benchmark program and its whole slice: cells, spec, argv, check, tidy rows and tables, cost
    model, and what the models, ``mpiatlas compare`` and the report read of it (the attributes below)."""

    name: str
    kind: str  # the first part of its cells' ids: imb | kernel
    tables: tuple[str, ...]  # the tidy tables (layout names) its rows go to
    # Ranks may own several cores (OpenMP threads): the runner records the cores asked for.
    threaded: bool = False
    # The report sections that show it, as "module:function" (a ``section_<name>(data)`` function),
    # placed by mpiatlas.report.sections in registry order at the programs' slot; a section two
    # programs share is named by the first of them only.
    report_sections: tuple[str, ...] = ()
    # How ``mpiatlas compare`` reduces its rows (None: not compared).
    reduction: Reduction | None = None
    # What adaptive repetitions read of its rows (None: its series are not judged per size).
    measure: Measure | None = None
    # Its tidy table feeds the kernel models (mpiatlas.models.kernels: loaded, printed by `mpiatlas fit`).
    modelled: bool = False

    @abstractmethod
    def cells(self, config: Campaign) -> list[Cell]:
        """Every cell of this program in the campaign ([] without its config block)."""

    def measures_a_pair(self, cell: Cell) -> bool:
        """Whether ``cell`` times one pair of ranks (what a region mapping is for: with
        ``region_pairs_only`` these are a region mapping's only cells)."""
        return False

    def forces_an_algorithm(self, cell: Cell) -> bool:
        """Whether ``cell`` forces a collective algorithm (capped by ``forced_algorithms_max_np``)."""
        return False

    def stack_extras(self, config: Campaign, cell: Cell) -> StackExtras:
        """Entries of the spec's ``stack`` block beyond label, kind, source and prefix."""
        return {}

    @abstractmethod
    def spec_block(self, config: Campaign, cell: Cell) -> ProgramBlock:
        """The program's top-level entries of the cell spec (JSON-ready)."""

    @abstractmethod
    def host_argv(self, spec: CellSpec, stack: Stack) -> list[str]:
        """argv of one rank, run from the host."""

    @abstractmethod
    def image_argv(self, spec: CellSpec, facts: ImageFacts) -> list[str]:
        """argv of one rank inside the cell's image (``facts``: runner.lifecycle.image_facts)."""

    def launch_extras(self, spec: CellSpec, oversubscribed: bool) -> LaunchExtras:
        return LaunchExtras()

    @abstractmethod
    def check(self, spec: CellSpec, stdout: str, pins: list[int] | None,
              sets: list[tuple[int, ...]] | None) -> Outcome | Checked:
        """The program's reading of a launch that exited 0: an Outcome when its output is unusable."""

    @abstractmethod
    def single_rank_transport(self, transport: dict[str, Any]) -> dict[str, Any]:
        """The transport evidence of a one-rank cell (no peer, so nothing was opened)."""

    @abstractmethod
    def rows(self, cell_dir: Path, row: CellRow, prov: dict[str, Any]) -> dict[str, pl.DataFrame]:
        """Tidy table name -> the sealed cell's rows ({} when it has none)."""

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        """Pessimistic seconds of one launch's own work; None: not modelled (the timeout is asked)."""
        return None

    def expected_work_s(self, config: Campaign, cell: Cell) -> float | None:
        """Seconds one launch's own work is expected to take, for the campaign's time estimate
        (:func:`mpiatlas.campaign.resources.estimate`); the bound :meth:`work_s` unless the program
        models its work more closely."""
        return self.work_s(config, cell)

    @abstractmethod
    def mem_mb(self, config: Campaign, cell: Cell) -> int:
        """Memory to request for the cell: the MPI library and the program's buffers, every rank."""


# Per rank: the MPI library and its shared-memory segments, besides the program's own buffers.
MEM_PER_RANK_MB = 256
# Per job: the mpiatlas process that runs the cells of a group.
MEM_PER_JOB_MB = 512


def per_cell_mem_mb(np: int, per_rank_mb: float, root_mb: float = 0.0) -> int:
    """The request of a cell whose ranks each hold ``per_rank_mb`` and rank 0 ``root_mb`` more."""
    return int(MEM_PER_JOB_MB + np * (MEM_PER_RANK_MB + per_rank_mb) + root_mb + 1)


# -- tidy rows: the cell's coordinates on every row of its output ---------------------------------

# Statuses whose launch ended with output worth keeping (timeouts and launch failures have none).
PARSED_STATUSES = ("ok", "invalid", "failed")


def tag_columns(frame: pl.DataFrame, row: CellRow, own: Mapping[str, tuple[Any, pl.DataType]],
                at_end: Mapping[str, tuple[Any, pl.DataType]] | None = None) -> pl.DataFrame:
    """``frame`` with the cell's coordinates as constant columns: the ones every program's rows
    carry, the program's ``own`` after ``np``, and ``at_end`` before ``nodes``."""
    # The label names the placement (node2), the IMB options and the knob set: series over nodes,
    # options or knob sets stay apart in every section that draws one series per label.
    knobs = row.get("knobs") or ""
    # The placement over nodes is in the id only (placement=block): block and cyclic series stay apart.
    label = SeriesKey(stack=row["stack"], transport=row["transport"], mapping=row["mapping"], nodes=row["nodes"],
                      placement=distribution_of_id(str(row["cell"])), options=row.get("options") or "",
                      knobs=knobs).label
    tags: dict[str, tuple[Any, pl.DataType]] = {
        "cell": (row["cell"], pl.String()), "label": (label, pl.String()), "stack": (row["stack"], pl.String()),
        "stack_kind": (row.get("stack_kind"), pl.String()), "stack_version": (row.get("stack_version"), pl.String()),
        "transport": (row["transport"], pl.String()), "mapping": (row["mapping"], pl.String()),
        "np": (row["np"], pl.Int32()), **own, "knobs": (knobs, pl.String()), "rep": (row["rep"], pl.Int32()),
        "oversubscribed": (row.get("oversubscribed"), pl.Boolean()),
        "containerized": (row.get("containerized"), pl.Boolean()),
        "image_digest": (row.get("image_digest"), pl.String()), "region": (row.get("region"), pl.String()),
        "cell_status": (row["status"], pl.String()),
        # ok | perturbed (mpiatlas.stats.quality): perturbed rows stay here, quality.trusted leaves them out.
        "cell_quality": (row.get("quality"), pl.String()), **(at_end or {}),
        "nodes": (row["nodes"], pl.Int32()), "ppn": (row["ppn"], pl.Int32()),
    }
    return frame.with_columns(pl.lit(value, dtype=dtype).alias(name) for name, (value, dtype) in tags.items())
