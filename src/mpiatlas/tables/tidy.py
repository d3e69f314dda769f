"""Raw cell directories -> tidy polars tables (cells, provenance, the hosts' topologies, and every program's own tables).

One loop over the sealed cells: each gives a cells-table row, its provenance record, and its
program's rows (mpiatlas.programs: IMB's ``imb_samples``, a kernel's ``kernel_<name>``). The tables
keep every row of every launch (no averaging here): aggregation and fits read them, and so can a
user in a notebook.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import polars as pl

from mpiatlas.matrix.layout import (
    CELLS_TABLE,
    IMB_SAMPLES,
    PROVENANCE,
    PROVENANCE_TABLE,
    QUIET_WAIT,
    REMEASURED,
    STATUS,
    TOPOLOGIES_TABLE,
    TOPOLOGY,
)
from mpiatlas.node.topology_record import collect_topologies
from mpiatlas.matrix.cells import fills_nodes, parse_id
from mpiatlas.stacks.base import CROSS_NODE, ON_NODE
from mpiatlas.programs import REGISTRY, program_named
from mpiatlas.spine.cell_row import CellRow, MachineFigures, QuietWaitColumns, RemeasuredColumns

# The pinner of a cell whose coordinates name none (cells.DEFAULT_PINNER; cells is not imported at
# module level, see below).
DEFAULT_PINNER = "stack"

# The program registry (and with it the parsers and the config validator) is imported by the
# functions that read cells: the report imports this module for the cells table's schema only.

CELL_SCHEMA: dict[str, type[pl.DataType]] = {
    "cell": pl.String, "stack": pl.String, "stack_kind": pl.String, "stack_version": pl.String,
    "transport": pl.String, "mapping": pl.String, "np": pl.Int32, "benchmark": pl.String,
    "algorithm": pl.String, "rep": pl.Int32, "status": pl.String, "reason": pl.String,
    "requested_transport": pl.String, "obtained_transport": pl.String, "transport_ok": pl.Boolean,
    "requested_pins": pl.String, "obtained_binding": pl.String, "binding_ok": pl.Boolean,
    "region": pl.String, "oversubscribed": pl.Boolean, "wall_s": pl.Float64,
    "containerized": pl.Boolean, "image_digest": pl.String,
    "launcher": pl.String, "slurm_job_id": pl.String,
    # imb | kernel; threads per rank of kernel cells (benchmark = kernel, algorithm = variant group).
    "kind": pl.String, "threads": pl.Int32,
    # Nodes the cell spans and ranks per node (the `node` mapping spreads ranks over nodes).
    "nodes": pl.Int32, "ppn": pl.Int32,
    # Hosts the ranks ran on, and whether they shared one machine (emulated nodes).
    "hosts": pl.String, "colocated": pl.Boolean,
    # IMB options (id segment, "" = IMB's defaults) and knob set ("" = none) of the cell.
    "options": pl.String, "knobs": pl.String,
    # Who pinned the ranks: stack (the MPI stack's binding) or likwid (likwid-pin around each rank).
    "pinner": pl.String,
    # Ranks over nodes (block | cyclic; null on one node), and where ranks 0 and 1 (the pair a
    # PingPong times) ran: on_node or cross_node, from the hosts they reported (else the plan).
    "placement": pl.String, "pair_class": pl.String,
    # The MPI library the ranks ran, as their banner names it ("mpich 5.0.2"), and the real path of
    # the libmpi the loader resolved for the program (mpiatlas.evidence.mpi_library; null where not seen).
    "mpi_library": pl.String, "libmpi_path": pl.String,
    # Was the launch disturbed (mpiatlas.stats.quality: ok | perturbed, why), and the figures it was judged
    # on (provenance.json's machine block, runner.machine_state): the largest share of its time a rank
    # waited for a cpu, the largest stolen share of a rank's cpu, others' share of the ranks' cpus, and
    # the node's 1-minute load average before the launch. Null for cells that never launched.
    "quality": pl.String, "quality_reason": pl.String, "wait_share": pl.Float64, "steal_share": pl.Float64,
    "other_cpu_share": pl.Float64, "load1": pl.Float64,
    # Launches of the cell set aside as perturbed and measured again (runner.run; 0: none), and why
    # each was judged perturbed (JSON list of their quality_reason, in the order they ran).
    "remeasured": pl.Int32, "remeasured_reasons": pl.String,
    # The later re-measure round (campaign.remeasure_later): how long the cell's last launch waited for a
    # quiet machine before it ran, and that wait in words (runner.quiet); null for a launch that did not wait.
    "quiet_wait_s": pl.Float64, "quiet_wait": pl.String,
}

MISSING_REASON = ("no raw output: the cell never ran, or its batch job was killed before the cell finished "
                  "(re-run the same command to run it)")


def _read_json(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def cell_row(cell_dir: Path) -> tuple[CellRow, dict[str, Any]]:
    """One cells-table row and the cell's provenance record."""
    status = _read_json(cell_dir / STATUS)
    prov = _read_json(cell_dir / PROVENANCE)
    coords = prov["coords"]
    requested, obtained = status.get("requested_transport"), status.get("obtained_transport")
    binding = status.get("obtained_binding")
    pins = prov.get("requested_pins")
    row: CellRow = {
        "cell": prov["cell"], "stack": coords["stack"], "stack_kind": prov.get("stack_kind"),
        "stack_version": prov.get("stack_version"), "transport": coords["transport"],
        "mapping": coords["mapping"], "np": coords["np"], "benchmark": coords["benchmark"],
        "algorithm": coords["algorithm"], "rep": coords["rep"], "status": status["status"],
        "reason": status.get("reason"), "requested_transport": requested, "obtained_transport": obtained,
        "transport_ok": status.get("transport_ok"),
        "requested_pins": json.dumps(pins) if pins is not None else None,
        "obtained_binding": json.dumps(binding) if binding is not None else None,
        "binding_ok": status.get("binding_ok"),
        "region": prov.get("region"), "oversubscribed": prov.get("oversubscribed"),
        "wall_s": prov.get("wall_s"), "containerized": prov.get("containerized", False),
        "image_digest": prov.get("image_digest"),
        "launcher": prov.get("launcher"), "slurm_job_id": prov.get("slurm_job_id"),
        "kind": coords.get("kind", "imb"), "threads": coords.get("threads"),
        "nodes": coords.get("nodes", 1), "ppn": ranks_per_node(coords["mapping"], coords["np"], coords.get("nodes", 1)),
        "hosts": json.dumps(prov["rank_hosts"]) if prov.get("rank_hosts") else None,
        "colocated": prov.get("colocated"),
        "options": coords.get("options", ""), "knobs": coords.get("knobs", ""),
        "pinner": coords.get("pinner") or DEFAULT_PINNER,
        "placement": placement_of(coords.get("distribution"), coords.get("nodes", 1)),
        "pair_class": pair_class(prov.get("rank_hosts"), coords["np"], coords.get("nodes", 1),
                                 placement_of(coords.get("distribution"), coords.get("nodes", 1))),
        "mpi_library": status.get("mpi_library"), "libmpi_path": status.get("libmpi_path"),
        "quality": status.get("quality"), "quality_reason": status.get("quality_reason"),
        **machine_figures(prov.get("machine")),
        **remeasured_columns(status.get(REMEASURED)),
        **quiet_wait_columns(status.get(QUIET_WAIT)),
    }
    return row, prov


# What the cells table reads of status.json's and provenance.json's blocks (the runner writes more).
class MachineRecord(TypedDict, total=False):
    """provenance.json ``machine`` (runner.machine_state)."""

    wait_share: float | None
    steal_share: float | None
    other_cpu_share: float | None
    loadavg_before: list[float] | None


class PerturbedAttempt(TypedDict, total=False):
    """One entry of status.json's re-measured launches (runner.run)."""

    quality_reason: str | None


class QuietWaitRecord(TypedDict, total=False):
    """status.json's wait for a quiet machine before a later re-measure (runner.quiet.QuietWait.record)."""

    waited_s: float
    reason: str


def machine_figures(machine: MachineRecord | None) -> MachineFigures:
    """The cells table's figures of a launch's machine record (None where not recorded)."""
    machine = machine or {}
    load = machine.get("loadavg_before")
    return {"wait_share": machine.get("wait_share"), "steal_share": machine.get("steal_share"),
            "other_cpu_share": machine.get("other_cpu_share"), "load1": load[0] if load else None}


def remeasured_columns(attempts: list[PerturbedAttempt] | None) -> RemeasuredColumns:
    """``remeasured`` (how many perturbed attempts were set aside) and their reasons, from status.json."""
    attempts = attempts or []
    return {"remeasured": len(attempts),
            "remeasured_reasons": json.dumps([a.get("quality_reason") for a in attempts]) if attempts else None}


def quiet_wait_columns(waited: QuietWaitRecord | None) -> QuietWaitColumns:
    """``quiet_wait_s`` and ``quiet_wait`` (why it stopped waiting) of a later re-measure, from status.json."""
    return {"quiet_wait_s": waited.get("waited_s"), "quiet_wait": waited.get("reason")} if waited else \
        {"quiet_wait_s": None, "quiet_wait": None}


def ranks_per_node(mapping: str, np: int, nodes: int) -> int | None:
    """Ranks per node of a cell: np / nodes rounded up (the most a node holds: 3 over 2 is 2 + 1), None
    for a cell filling nodes (core-n2: they vary)."""
    return None if fills_nodes(mapping, nodes) else -(-np // nodes)


def placement_of(distribution: str | None, nodes: int) -> str | None:
    """block | cyclic for a cell over several nodes (cyclic when its id names none), None on one node."""
    return (distribution or "cyclic") if nodes > 1 else None


def pair_class(rank_hosts: dict[str, str] | None, np: int, nodes: int, placement: str | None) -> str | None:
    """``on_node`` / ``cross_node`` for ranks 0 and 1: from the hosts they reported; without them,
    from the plan (one node; cyclic puts rank 1 on node 2); None for one rank or a block plan
    without hosts (rank 1's node then depends on ranks per node)."""
    if np < 2:
        return None
    hosts = rank_hosts or {}
    first, second = hosts.get("0"), hosts.get("1")
    if first and second:
        return ON_NODE if first == second else CROSS_NODE
    if nodes <= 1:
        return ON_NODE
    return CROSS_NODE if placement == "cyclic" else None


def is_kernel_row(row: dict[str, Any]) -> bool:
    return row.get("kind") == "kernel" or str(row.get("cell", "")).startswith("kernel/")


def missing_row(cell_id: str) -> CellRow:
    """A cells-table row for a campaign cell that has no raw directory (status ``missing``)."""
    coords = parse_id(cell_id)
    # Every column null but the cell's coordinates.
    return {
        "cell": cell_id, "stack": coords["stack"], "stack_kind": None, "stack_version": None,
        "transport": coords["transport"], "mapping": coords["mapping"], "np": coords["np"],
        "benchmark": coords["benchmark"], "algorithm": coords["algorithm"], "rep": coords["rep"],
        "status": "missing", "reason": MISSING_REASON, "requested_transport": None, "obtained_transport": None,
        "transport_ok": None, "requested_pins": None, "obtained_binding": None, "binding_ok": None, "region": None,
        "oversubscribed": None, "wall_s": None, "containerized": None, "image_digest": None, "launcher": None,
        "slurm_job_id": None, "kind": coords["kind"], "threads": None, "nodes": coords["nodes"],
        "ppn": ranks_per_node(coords["mapping"], coords["np"], coords["nodes"]), "hosts": None, "colocated": None,
        "options": coords["options"], "knobs": coords["knobs"], "pinner": coords["pinner"] or DEFAULT_PINNER,
        "placement": placement_of(coords["distribution"], coords["nodes"]), "pair_class": None,
        "mpi_library": None, "libmpi_path": None, "quality": None, "quality_reason": None,
        "wait_share": None, "steal_share": None, "other_cpu_share": None, "load1": None,
        "remeasured": None, "remeasured_reasons": None, "quiet_wait_s": None, "quiet_wait": None,
    }


def tidy(cell_dirs: list[Path], out_dir: Path, expected: list[str] | None = None,
         progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Tables from ``cell_dirs``; every id in ``expected`` (the campaign's cells) that has no
    directory among them gets a ``missing`` row, so a report of a partial campaign lists it.
    ``progress(1)`` is called as each cell is read (the command's bar)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, provs = [], []
    parts: dict[str, list[pl.DataFrame]] = {table: [] for program in REGISTRY.values() for table in program.tables}
    for cell_dir in sorted(Path(d) for d in cell_dirs):
        row, prov = cell_row(cell_dir)
        rows.append(row)
        provs.append(prov)
        program = program_named(row["kind"], row["benchmark"])
        for table, frame in (program.rows(cell_dir, row, prov) if program else {}).items():
            parts[table].append(frame)
        if progress is not None:
            progress(1)
    seen = {row["cell"] for row in rows}
    rows += [missing_row(cell_id) for cell_id in sorted(set(expected or ())) if cell_id not in seen]
    cells = pl.DataFrame(rows, schema=CELL_SCHEMA)
    cells.write_parquet(out_dir / CELLS_TABLE)
    counts = {}
    for table, frames in parts.items():
        # Every program's tables exist, empty when it has no rows.
        frame = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        frame.write_parquet(out_dir / table)
        counts[table] = frame.height
    (out_dir / PROVENANCE_TABLE).write_text(json.dumps(provs, indent=1, default=str) + "\n")
    # One topology per host (the cells of a host share it): the fits place ranks with it.
    topologies = collect_topologies(Path(d) / TOPOLOGY for d in sorted(cell_dirs))
    (out_dir / TOPOLOGIES_TABLE).write_text(json.dumps(topologies, separators=(",", ":")) + "\n")
    samples = sum(n for table, n in counts.items() if table == IMB_SAMPLES)
    return {"cells": cells.height, "samples": samples, "kernel_rows": sum(counts.values()) - samples,
            "missing": cells.filter(pl.col("status") == "missing").height}
