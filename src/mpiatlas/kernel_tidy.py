"""Kernel cells' raw output -> ``kernel_<name>.parquet`` rows (used by :mod:`mpiatlas.tidy`).

One row per rank per record (``parsers.kernels.parse_kernel_output``), with the cell's
coordinates. Column names a kernel record already uses keep the record's meaning: ``variant``
(ring: the record's own variant) and ``threads`` (jacobi) are the record's; the cell's are
``variant_group`` and ``cell_threads``. ``cell_status`` is the cell's status: models use the
``ok`` rows only, but the rows of a cell that failed its own check (``valid: false``) or its
binding check are kept, so a reader can see what it measured. ``kernel_coll`` rows also get
``algorithm``: the algorithm the cell forced for the row's collective, else ``default``.
``nodes`` / ``ppn`` are the nodes the cell spanned and its ranks per node; ``region`` is
``other_node`` for a cell over several nodes, and ``label`` names the placement (``node2``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from mpiatlas.kernel_matrix import KERNEL_NAMES, coll_group_parts
from mpiatlas.matrix import mapping_segment
from mpiatlas.parsers.kernels import KernelParseError, parse_kernel_file
from mpiatlas.runner import STDOUT

KERNEL_TABLE = "kernel_{name}.parquet"
# Statuses whose launch ended with output worth keeping (timeouts and launch failures have none).
PARSED_STATUSES = ("ok", "invalid", "failed")

_TAG_TYPES: dict[str, pl.DataType] = {
    "cell": pl.String(), "label": pl.String(), "stack": pl.String(), "stack_kind": pl.String(),
    "stack_version": pl.String(), "transport": pl.String(), "mapping": pl.String(), "np": pl.Int32(),
    "variant_group": pl.String(), "cell_threads": pl.Int32(), "rep": pl.Int32(), "oversubscribed": pl.Boolean(),
    "containerized": pl.Boolean(), "image_digest": pl.String(), "region": pl.String(), "cell_status": pl.String(),
    "node_cores": pl.Int32(), "nodes": pl.Int32(), "ppn": pl.Int32(),
}


def is_kernel_row(row: dict[str, Any]) -> bool:
    return row.get("kind") == "kernel" or str(row.get("cell", "")).startswith("kernel/")


def kernel_frames(cell_dir: Path, row: dict[str, Any], prov: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """The records of one kernel cell, tagged with its coordinates ({} when it has none)."""
    if row["status"] not in PARSED_STATUSES:
        return {}
    try:
        frames = parse_kernel_file(Path(cell_dir) / STDOUT)
    except (KernelParseError, OSError):
        return {}
    coords = prov.get("coords", {})
    tags = {
        # The label names the placement (node2), as IMB's does: series over nodes stay apart.
        "cell": row["cell"], "label": f"{row['stack']}/{row['transport']}/{mapping_segment(row['mapping'], row['nodes'])}",
        "stack": row["stack"], "stack_kind": row.get("stack_kind"), "stack_version": row.get("stack_version"),
        "transport": row["transport"], "mapping": row["mapping"], "np": row["np"],
        "variant_group": coords.get("variant", row.get("algorithm")), "cell_threads": coords.get("threads", 1),
        "rep": row["rep"], "oversubscribed": row.get("oversubscribed"), "containerized": row.get("containerized"),
        "image_digest": row.get("image_digest"), "region": row.get("region"), "cell_status": row["status"],
        # Cores of the node the cell ran on (models cap the parallel work at it).
        "node_cores": (prov.get("topology") or {}).get("cores"),
        "nodes": row["nodes"], "ppn": row["ppn"],
    }
    tagged = {
        name: frame.with_columns(pl.lit(v, dtype=_TAG_TYPES[k]).alias(k) for k, v in tags.items())
        for name, frame in frames.items() if name in KERNEL_NAMES and frame.height
    }
    if "coll" in tagged:
        tagged["coll"] = with_coll_algorithm(tagged["coll"])
    return tagged


def with_coll_algorithm(frame: pl.DataFrame) -> pl.DataFrame:
    """``algorithm`` of every coll record: the one its cell forced for that collective, else ``default``."""
    try:
        forced, algorithm = coll_group_parts(str(frame["variant_group"][0]))
    except ValueError:
        forced, algorithm = None, "default"
    return frame.with_columns(
        pl.when(pl.col("collective") == pl.lit(forced)).then(pl.lit(algorithm)).otherwise(pl.lit("default"))
        .alias("algorithm"))


def write_kernel_tables(parts: dict[str, list[pl.DataFrame]], out_dir: Path) -> dict[str, int]:
    """``kernel_<name>.parquet`` for every kernel (an empty table when a kernel has no rows)."""
    counts = {}
    for name in KERNEL_NAMES:
        frames = parts.get(name, [])
        table = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        table.write_parquet(Path(out_dir) / KERNEL_TABLE.format(name=name))
        counts[name] = table.height
    return counts
