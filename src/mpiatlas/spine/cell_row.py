"""A cells-table row as a typed record: what mpiatlas.tables.tidy reads from a sealed cell's status.json and
provenance.json, and what every program's ``rows`` tags its own rows with.

The keys are those of the cells table (tables.tidy.CELL_SCHEMA, whose comments say what each column means);
a test holds the two together. The cell's coordinates are the spine's (cell_coords.CellAxes); the table's
own columns for the optional axes differ from a Cell's fields (``pinner`` is ``stack`` when unset, the
``placement`` column replaces ``distribution``), so they are the row's. This module imports nothing of
mpiatlas outside the spine, so any module may name the type without a circle.
"""

from __future__ import annotations

from typing import TypedDict

from mpiatlas.spine.cell_coords import CellAxes


class MachineFigures(TypedDict):
    """The launch's machine record (provenance.json ``machine``) as the cells table keeps it."""

    wait_share: float | None
    steal_share: float | None
    other_cpu_share: float | None
    load1: float | None


class RemeasuredColumns(TypedDict):
    remeasured: int | None  # None: a missing cell (never ran)
    remeasured_reasons: str | None  # JSON list of the set-aside launches' quality_reason


class QuietWaitColumns(TypedDict):
    quiet_wait_s: float | None
    quiet_wait: str | None


class CellRow(CellAxes, MachineFigures, RemeasuredColumns, QuietWaitColumns):
    cell: str
    stack_kind: str | None
    stack_version: str | None
    status: str
    reason: str | None
    requested_transport: str | None
    obtained_transport: str | None
    transport_ok: bool | None
    requested_pins: str | None
    obtained_binding: str | None
    binding_ok: bool | None
    region: str | None
    oversubscribed: bool | None
    wall_s: float | None
    containerized: bool | None
    image_digest: str | None
    launcher: str | None
    slurm_job_id: str | None
    threads: int | None  # None: an IMB cell, or a missing one
    ppn: int | None
    hosts: str | None
    colocated: bool | None
    options: str
    knobs: str
    pinner: str
    placement: str | None
    pair_class: str | None
    mpi_library: str | None
    libmpi_path: str | None
    quality: str | None
    quality_reason: str | None
