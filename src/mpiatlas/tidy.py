"""Raw cell directories -> tidy polars tables (samples, cells, provenance).

The samples table keeps every IMB row of every launch (no averaging here):
aggregation and fits read it, and so can a user in a notebook.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from mpiatlas.matrix import mapping_segment, parse_mapping_segment
from mpiatlas.kernel_tidy import is_kernel_row, kernel_frames, write_kernel_tables
from mpiatlas.parsers.imb import ImbParseError, parse_imb_text
from mpiatlas.layout import PROVENANCE, STATUS, STDOUT

CELL_SCHEMA: dict[str, pl.DataType] = {
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
}

MISSING_REASON = ("no raw output: the cell never ran, or its batch job was killed before the cell finished "
                  "(re-run the same command to run it)")


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def cell_row(cell_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """One cells-table row and the cell's provenance record."""
    status = _read_json(cell_dir / STATUS)
    prov = _read_json(cell_dir / PROVENANCE)
    coords = prov["coords"]
    requested, obtained = status.get("requested_transport"), status.get("obtained_transport")
    binding = status.get("obtained_binding")
    pins = prov.get("requested_pins")
    row = {
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
        "nodes": coords.get("nodes", 1), "ppn": coords["np"] // coords.get("nodes", 1),
        "hosts": json.dumps(prov["rank_hosts"]) if prov.get("rank_hosts") else None,
        "colocated": prov.get("colocated"),
    }
    return row, prov


def cell_samples(cell_dir: Path, row: dict[str, Any]) -> pl.DataFrame | None:
    """The IMB rows of a cell that produced output, tagged with the cell's coordinates."""
    if row["status"] not in ("ok", "invalid") or is_kernel_row(row):
        return None
    try:
        samples = parse_imb_text((cell_dir / STDOUT).read_text(errors="replace"), str(cell_dir / STDOUT))
    except ImbParseError:
        return None
    tags = {
        "cell": row["cell"], "label": f"{row['stack']}/{row['transport']}/{mapping_segment(row['mapping'], row['nodes'])}",
        "stack": row["stack"], "stack_kind": row["stack_kind"], "stack_version": row["stack_version"],
        "transport": row["transport"], "mapping": row["mapping"], "np": row["np"],
        "algorithm": row["algorithm"], "rep": row["rep"], "oversubscribed": row["oversubscribed"],
        "containerized": row["containerized"], "image_digest": row["image_digest"],
        "region": row["region"], "cell_status": row["status"], "nodes": row["nodes"], "ppn": row["ppn"],
    }
    return samples.with_columns(
        pl.lit(v, dtype=CELL_SCHEMA.get(k, pl.String) if k != "label" and k != "cell_status" else pl.String).alias(k)
        for k, v in tags.items()
    )


def missing_row(cell_id: str) -> dict[str, Any]:
    """A cells-table row for a campaign cell that has no raw directory (status ``missing``)."""
    kind, stack, transport, placement, np, benchmark, algorithm, rep = cell_id.split("/")
    mapping, nodes = parse_mapping_segment(placement)
    row: dict[str, Any] = dict.fromkeys(CELL_SCHEMA)
    row.update(cell=cell_id, stack=stack, transport=transport, mapping=mapping, np=int(np.removeprefix("np")),
               benchmark=benchmark, algorithm=algorithm, rep=int(rep.removeprefix("rep")), status="missing",
               reason=MISSING_REASON, kind=kind, nodes=nodes)
    row["ppn"] = row["np"] // nodes
    return row


def tidy(cell_dirs: list[Path], out_dir: Path, expected: list[str] | None = None) -> dict[str, int]:
    """Tables from ``cell_dirs``; every id in ``expected`` (the campaign's cells) that has no
    directory among them gets a ``missing`` row, so a report of a partial campaign lists it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, provs, frames = [], [], []
    kernel_parts: dict[str, list[pl.DataFrame]] = {}
    for cell_dir in sorted(Path(d) for d in cell_dirs):
        row, prov = cell_row(cell_dir)
        rows.append(row)
        provs.append(prov)
        if is_kernel_row(row):
            for name, frame in kernel_frames(cell_dir, row, prov).items():
                kernel_parts.setdefault(name, []).append(frame)
            continue
        samples = cell_samples(cell_dir, row)
        if samples is not None:
            frames.append(samples)
    seen = {row["cell"] for row in rows}
    rows += [missing_row(cell_id) for cell_id in sorted(set(expected or ())) if cell_id not in seen]
    cells = pl.DataFrame(rows, schema=CELL_SCHEMA)
    cells.write_parquet(out_dir / "cells.parquet")
    samples = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    samples.write_parquet(out_dir / "imb_samples.parquet")
    (out_dir / "provenance.json").write_text(json.dumps(provs, indent=1, default=str) + "\n")
    kernel_rows = write_kernel_tables(kernel_parts, out_dir)
    return {"cells": cells.height, "samples": samples.height, "kernel_rows": sum(kernel_rows.values()),
            "missing": cells.filter(pl.col("status") == "missing").height}
