"""Campaign cells as the report judges them: status order, one-line descriptions, suspect results.

Pure functions over the cells table (``cells.parquet``) and the measurement tables, shared by the
Campaign, Cells, Provenance and Findings sections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import polars as pl

from mpiatlas.tables.tidy import is_kernel_row
from mpiatlas.report.formatting import fmt_binding, fmt_pins

STATUS_ORDER = ("failed", "timeout", "invalid", "unavailable", "ok")
KNOWN_STATUS = frozenset(STATUS_ORDER)


def has_columns(df: pl.DataFrame | None, *cols: str) -> TypeGuard[pl.DataFrame]:
    return df is not None and all(c in df.columns for c in cols)


def status_cls(status: object) -> str:
    """The CSS class of a status (``st-failed``; ``st-other`` for a status this report does not know)."""
    return f"st-{status}" if status in KNOWN_STATUS else "st-other"


def status_rank(status: object) -> int:
    """Problems first (failed, timeout, invalid, unavailable, unknown statuses), ok last."""
    if status == "ok":
        return len(STATUS_ORDER)
    return STATUS_ORDER.index(status) if status in KNOWN_STATUS else len(STATUS_ORDER) - 1


def cell_desc(row: Mapping[str, Any]) -> str:
    """``impi/shm/core np=2 PingPong alg=ring rep=1``: what a cell measured."""
    parts = [str(row.get(k)) for k in ("stack", "transport", "mapping") if row.get(k) is not None]
    extra = [f"np={row['np']}" if row.get("np") is not None else None,
             row.get("benchmark"),
             f"alg={row['algorithm']}" if row.get("algorithm") not in (None, "default") else None,
             f"rep={row['rep']}" if row.get("rep") is not None else None]
    return " ".join(["/".join(parts), *[str(e) for e in extra if e]])


def _cells_with_rows(df: pl.DataFrame | None) -> set[Any]:
    if not has_columns(df, "cell"):
        return set()
    assert df is not None
    return set(df.get_column("cell").unique().to_list())


def without_results(rows: Iterable[Mapping[str, Any]], samples: pl.DataFrame | None,
                    kernels: Mapping[str, pl.DataFrame]) -> list[Mapping[str, Any]]:
    """The ok cells that left no parsed rows where their results belong.

    An IMB cell's rows are in the samples (``imb_samples.parquet``); a kernel cell's are in its
    kernel's table (``kernel_<benchmark>.parquet``, or any kernel table when its benchmark names
    none). Without a samples table nothing is known about IMB cells: they are not suspected.
    """
    imb = _cells_with_rows(samples) if has_columns(samples, "cell") else None
    per_kernel = {name: _cells_with_rows(df) for name, df in kernels.items()}
    any_kernel = set().union(*per_kernel.values()) if per_kernel else set()
    out = []
    for r in rows:
        if r.get("status") != "ok":
            continue
        if is_kernel_row(dict(r)):
            have = per_kernel.get(str(r.get("benchmark")), any_kernel)
        elif imb is None:
            continue
        else:
            have = imb
        if r.get("cell") not in have:
            out.append(r)
    return out


def suspect_results(cells: pl.DataFrame, samples: pl.DataFrame | None,
                    kernels: Mapping[str, pl.DataFrame]) -> list[str]:
    """One line per ok cell whose result is suspect: transport or binding not as requested, or no rows."""
    rows = list(cells.iter_rows(named=True))
    warn: list[str] = []
    for r in rows:
        if r.get("status") != "ok":
            continue
        what = f"{r.get('cell')} ({cell_desc(r)})"
        if r.get("transport_ok") is False:
            warn.append(f"{what}: transport requested {r.get('requested_transport')!s}, "
                        f"obtained {r.get('obtained_transport')!s}")
        if r.get("binding_ok") is False:
            warn.append(f"{what}: binding requested {fmt_pins(r.get('requested_pins'))}, "
                        f"obtained {fmt_binding(r.get('obtained_binding'))}")
    if "cell" in cells.columns:
        for missing in without_results(rows, samples, kernels):
            where = "kernel table" if is_kernel_row(dict(missing)) else "IMB samples"
            warn.append(f"{missing.get('cell')} ({cell_desc(missing)}): status ok but no rows in its {where}")
    return warn
