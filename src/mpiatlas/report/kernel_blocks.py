"""What the kernel sections (ring, matsum, jacobi, pingpong/coll) share: titles, cells, notices, tables.

Each kernel section reads ``kernel_<name>.parquet`` (``data.kernel_table``) and ``fits/kernels.json``
(``data.kernel_fits``, :mod:`mpiatlas.models.kernels`, :mod:`mpiatlas.models.kernel_p2p`).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from mpiatlas.report.blocks import Cell, Notice, Table, cell
from mpiatlas.report.charts import OVER
from mpiatlas.report.formatting import DASH, fmt_bool, fmt_num

KERNEL_TITLES = {
    "ring": "Kernel: message ring",
    "matsum": "Kernel: distributed matrix sum",
    "jacobi": "Kernel: 3-D Jacobi halo exchange",
}


def over_cell(over: Any) -> Cell:
    return Cell(fmt_bool(over), cls="bad" if over else None, title=OVER if over else None)


def err_cell(rel: Any) -> Cell:
    if rel is None:
        return Cell(DASH)
    return Cell(f"{100 * rel:+.0f} %", cls="bad" if abs(rel) > 0.25 else "ok", title="model / measured − 1")


def status_notice(df: pl.DataFrame, name: str) -> list[Any]:
    if "cell_status" not in df.columns:
        return []
    bad = df.filter(pl.col("cell_status") != "ok").get_column("cell").unique().sort().to_list()
    if not bad:
        return []
    return [Notice(f"{len(bad)} {name} cell(s) produced records but are not ok (see Campaign): their rows are "
                   "kept in the table but left out of the models.", "warn", bad[:20])]


def no_fit_notice(name: str, fits: list[dict[str, Any]] | None) -> list[Any]:
    if fits is None:
        return [Notice(f"No {name} model (fits/kernels.json missing or without '{name}'): measurements only.", "warn")]
    errors = [f"{f.get('label')}: {f['error']}" for f in fits if "error" in f]
    return [Notice(f"Some {name} models could not be fitted.", "warn", errors)] if errors else []


def failure_notice(fits: list[dict[str, Any]], prefix: str = "") -> Notice | None:
    items = [f"{prefix}{f.get('label')}{fit_extra(f)}: {f['fails_where']}" for f in fits if f.get("fails_where")]
    if not items:
        return None
    return Notice("Where the model fails:", "info", items)


def fit_extra(f: dict[str, Any]) -> str:
    parts = [f"topo={''.join(map(str, f['topo']))}" if isinstance(f.get("topo"), list) else
             (f"topo={f['topo']}" if f.get("topo") is not None else None),
             f"dist={f['dist']}" if f.get("dist") is not None else None]
    parts = [p for p in parts if p]
    return f" ({', '.join(parts)})" if parts else ""


def raw_table(df: pl.DataFrame, keys: list[str], value: str) -> Table:
    keys = [k for k in keys if k in df.columns]
    ok = df.filter(pl.col("cell_status") == "ok") if "cell_status" in df.columns else df
    agg = (ok.group_by(keys).agg(pl.col(value).median().alias("median"), pl.col("cell").n_unique().alias("cells"))
           .sort(keys))
    return Table([*keys, f"median {value}", "cells"],
                 [[cell(r[k]) for k in keys] + [Cell(fmt_num(r["median"]), cls="num"), cell(r["cells"])]
                  for r in agg.iter_rows(named=True)], caption="Measurements (no model available).")


def topo_text(topo: Any) -> str:
    if isinstance(topo, list):
        return ",".join(map(str, topo))
    return DASH if topo is None else str(topo)

