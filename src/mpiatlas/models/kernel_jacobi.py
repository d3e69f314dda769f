"""The Jacobi kernel's model, fitted to ``kernel_jacobi.parquet`` (see :mod:`mpiatlas.models.kernels`).

**jacobi** (halo exchange of the 6 faces per iteration, non-blocking, one Waitall)::

    T_c(L, N) = c(L, N) / B + k · λ

  c = bytes a rank sends per iteration (its faces, from the record), k = number of decomposed
  directions (process-grid axes with more than one rank), λ and B from the p2p fits. Predicted
  vs measured halo time of the rank that waited least (a rank's halo time also holds the wait for
  a late neighbour, i.e. skew and noise, which that rank shows least; the mean over ranks is
  reported beside it), MLUP/s, weak-scaling efficiency T(1)/T(P) (strong:
  T(1)/(P·T(P))) of the pure MPI cells, and pure MPI vs hybrid (MPI + OpenMP) bytes and messages
  per rank at equal cores. Weak mode gives every core L³ points (a rank of t threads owns t·L³),
  so hybrid and pure MPI on the same cores solve the same global grid; the hybrid / pure iteration
  ratio is only formed where the records' global grids agree.

Swept knobs (mpiatlas.matrix.kernel_sweeps) stay apart: each point is one variant group (mode, size,
threads, grid) at one P, scaling runs within one mode and size, and the hybrid comparison pairs
cells of the same mode and size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.jacobi_records import HybridVsPure, JacobiFit, JacobiPoint, Scaling
from mpiatlas.models.kernel_common import (
    LABEL_COLUMNS,
    P2P,
    failure_statement,
    json_num,
    pingpong_params,
    relative_error,
    size_text,
    usable,
)
from mpiatlas.stats.aggregate import scalar
from mpiatlas.models.kernel_grids import jacobi_grids

FIT = "fit_jacobi"  # where a row that is not of its record's shape comes from, in the error
JACOBI_FORMULA = "T_c = c/B + k·λ (c = bytes sent per rank per iteration, k = decomposed directions)"


def decomposed_directions(procdims: Sequence[int] | None) -> int:
    return sum(1 for d in (procdims or []) if d and d > 1)


def _least_waiting(cg: pl.DataFrame, pred_ranks: list[float | None]) -> float | None:
    """The model's halo time of the rank with the smallest measured halo time."""
    known = [p for p in pred_ranks if p is not None]
    if not pred_ranks or len(known) < len(pred_ranks):
        return None
    return float(known[int(np.argmin(cg["halo_us"].to_numpy()))])


def problem_of(row: dict[str, Any]) -> str:
    """The problem a record solved: ``weak L=16`` or ``strong N=96×96×48`` (its mode and size)."""
    mode = row.get("mode") or "?"
    key = "L" if mode == "weak" else "N"
    return f"{mode} {key}={size_text(row.get(key), cube=True) or '?'}"


def cell_row(cg: pl.DataFrame, p2p: P2P | None, threads_col: str) -> dict[str, Any]:
    """One cell's records (one per rank) as one row: the slowest rank's iteration, halo times over ranks."""
    r0 = cg.row(0, named=True)
    k = decomposed_directions(r0.get("procdims"))
    pred_ranks = [None if p2p is None else r["bytes_sent"] * p2p.per_byte() + k * p2p.latency_us
                  for r in cg.iter_rows(named=True)]
    return {
        "cell": r0["cell"], "variant_group": r0.get("variant_group"), "mode": r0.get("mode"),
        "problem": problem_of(r0), "explicit": bool(r0.get("grid_explicit") or False),
        "np": int(r0["np"]), "threads": int(r0.get(threads_col) or 1), "rep": r0.get("rep"),
        "oversubscribed": bool(cg["oversubscribed"].any()), "k": k,
        "procdims": list(r0.get("procdims") or []), "global_dims": list(r0.get("global_dims") or []),
        "bytes_per_rank": scalar(cg["bytes_sent"].mean()), "messages_per_rank": scalar(cg["messages"].mean()),
        "halo_us": scalar(cg["halo_us"].mean()), "halo_min_us": scalar(cg["halo_us"].min()),
        "halo_max_us": scalar(cg["halo_us"].max()),
        # The rank that waited least for its neighbours: its halo time is closest to the transfer.
        "halo_pred_us": _least_waiting(cg, pred_ranks),
        "iteration_us": scalar(cg["iteration_us"].max()), "compute_us": scalar(cg["compute_us"].mean()),
        "allreduce_us": scalar(cg["allreduce_us"].mean()), "mlups_total": scalar(cg["mlups_total"].max()),
        "local_points": scalar(cg["local_points"].mean()),
    }


def point_rows(cells: pl.DataFrame) -> list[dict[str, Any]]:
    """Per variant group and P (one problem, threads and grid each): medians over repetitions."""
    pts = (cells.group_by(["variant_group", "mode", "problem", "explicit", "np", "threads"], maintain_order=True)
           .agg(pl.len().alias("n_reps"), pl.col("oversubscribed").any(), pl.col("k").first(),
                pl.col("procdims").first(), pl.col("global_dims").first(), pl.col("bytes_per_rank").median(), pl.col("messages_per_rank").median(),
                pl.col("halo_min_us").median().alias("halo_measured_us"),
                pl.col("halo_min_us").alias("halo_reps_us"), pl.col("halo_us").median().alias("halo_mean_us"),
                pl.col("halo_pred_us").median().alias("halo_predicted_us"),
                pl.col("iteration_us").median(), pl.col("compute_us").median(), pl.col("allreduce_us").median(),
                pl.col("mlups_total").median(), pl.col("local_points").median())
           .sort(["problem", "threads", "np", "variant_group"]))
    rows = []
    for r in pts.iter_rows(named=True):
        row = {k: (json_num(v) if isinstance(v, float) else v) for k, v in r.items()}
        row["halo_reps_us"] = [json_num(v) for v in r["halo_reps_us"]]
        row["cores"] = r["np"] * r["threads"]
        row["rel_err"] = relative_error(r["halo_predicted_us"], r["halo_measured_us"]) if r["k"] else None
        row.update(comm_shares(row))
        rows.append(row)
    return rows


def comm_shares(row: dict[str, Any]) -> dict[str, float | None]:
    """The shares of an iteration (medians over repetitions, mean over ranks) spent in the halo
    exchange, the residual Allreduce and the sweep: where a configuration's time goes."""
    total = row.get("iteration_us")
    parts = {"halo_share": row.get("halo_mean_us"), "allreduce_share": row.get("allreduce_us"),
             "compute_share": row.get("compute_us")}
    return {k: (json_num(v / total) if v is not None and total else None) for k, v in parts.items()}


def add_scaling(points: Sequence[JacobiPoint]) -> list[JacobiPoint]:
    """The points with the scaling efficiency of the pure MPI cells (one thread, the stack's own grid)
    of each problem: weak T(1)/T(P), strong T(1)·P(1)/(P·T(P)), relative to the smallest P."""
    out = list(points)
    for problem in {p.problem for p in points}:
        pure = sorted((i for i, p in enumerate(out) if p.threads == 1 and p.problem == problem and not p.explicit),
                      key=lambda i: out[i].np)
        if not pure:
            continue
        base = out[pure[0]]
        for i in pure:
            r = out[i]
            if not r.iteration_us or not base.iteration_us:
                continue
            if r.mode == "weak":
                efficiency = base.iteration_us / r.iteration_us
            else:
                efficiency = base.iteration_us * base.np / (r.np * r.iteration_us)
            out[i] = replace(r, scaling=Scaling(json_num(efficiency), base.np))
    return out


def _equal_work(h: JacobiPoint, pure: JacobiPoint) -> bool:
    """Both solved the same global grid (records before weak mode gave each core L³ points had a
    hybrid rank own only L³: half the work of 2 × 1 at 1 × 2)."""
    return bool(h.global_dims) and h.global_dims == pure.global_dims


def _iteration_ratio(h: JacobiPoint, pure: JacobiPoint | None) -> float | None:
    """hybrid / pure MPI iteration time, only where both solved the same global grid."""
    if pure is None or not _equal_work(h, pure) or not h.iteration_us or not pure.iteration_us:
        return None
    return json_num(h.iteration_us / pure.iteration_us)


def hybrid_vs_pure(points: Sequence[JacobiPoint]) -> list[HybridVsPure]:
    """Every hybrid point beside the pure MPI point of the same problem at its core count (one of
    the same global grid first, then the stack's own grid, then the fastest explicit one); the
    iteration ratio hybrid / pure only where both solved the same global grid."""
    out = []
    for h in (r for r in points if r.threads > 1):
        candidates = sorted((r for r in points if r.threads == 1 and r.np == h.cores and r.problem == h.problem),
                            key=lambda r: (not _equal_work(h, r), r.explicit, r.iteration_us or float("inf")))
        pure = candidates[0] if candidates else None
        grid = "×".join(map(str, pure.procdims)) if pure else ""
        out.append(HybridVsPure(
            problem=h.problem, cores=h.cores, hybrid=f"{h.np} × {h.threads}",
            pure=(f"{h.cores} × 1" + (f" (grid {grid})" if pure.explicit else "")) if pure else None,
            hybrid_global_dims=h.global_dims, pure_global_dims=pure.global_dims if pure else (),
            equal_work=pure is not None and _equal_work(h, pure), iteration_ratio=_iteration_ratio(h, pure),
            hybrid_bytes_per_rank=h.bytes_per_rank, pure_bytes_per_rank=pure.bytes_per_rank if pure else None,
            hybrid_messages_per_rank=h.messages_per_rank,
            pure_messages_per_rank=pure.messages_per_rank if pure else None,
            hybrid_halo_us=h.halo_measured_us, pure_halo_us=pure.halo_measured_us if pure else None,
            hybrid_mlups=h.mlups_total, pure_mlups=pure.mlups_total if pure else None,
            hybrid_iteration_us=h.iteration_us, pure_iteration_us=pure.iteration_us if pure else None))
    return out


def headline(points: Sequence[JacobiPoint]) -> str:
    text = f"MLUP/s {max((r.mlups_total or 0) for r in points):.0f} (best)"
    scaled = [(r, r.scaling.efficiency) for r in points if r.scaling is not None
              and r.scaling.efficiency is not None and r.np > r.scaling.base_np]
    if scaled:
        last, efficiency = max(scaled, key=lambda re: re[0].np)
        text += f"; efficiency {efficiency:.2f} at P={last.np}"
        if len({r.problem for r in points}) > 1:
            text += f" ({last.problem})"
    return text


def fit_jacobi(df: pl.DataFrame | None, hockney: Sequence[HockneyRecord] | None,
               ring_p2p: dict[str | None, P2P] | None = None, *, seed: int = 0) -> list[JacobiFit]:
    df = usable(df)
    if df is None:
        return []
    out = []
    keys = list(LABEL_COLUMNS)
    threads_col = "threads" if "threads" in df.columns else "cell_threads"
    for key, grp in df.group_by(keys, maintain_order=True):
        head = dict(zip(keys, key))
        label = head["label"]
        p2p = pingpong_params(hockney, label) or (ring_p2p or {}).get(label)
        note = ("λ, B from the IMB PingPong Hockney fit" if p2p is not None and p2p.source == "PingPong" else
                "no PingPong fit: λ, B from the ring model's own fit" if p2p is not None else
                "no λ, B (neither a PingPong fit nor ring data): the halo model is not evaluated")
        cells = pl.DataFrame([cell_row(cg, p2p, threads_col) for _, cg in grp.group_by(["cell"], maintain_order=True)])
        rows = point_rows(cells)

        # The rows polars aggregated become records here, read as the file's entries would be.
        points = tuple(add_scaling([JacobiPoint.from_json(r, FIT, f"$.points[{i}]") for i, r in enumerate(rows)]))

        def describe(p: JacobiPoint) -> str:
            over = ", oversubscribed" if p.oversubscribed else ""
            return f"P={p.np}×{p.threads} (k={p.k}, {p.bytes_per_rank:.0f} B/rank{over})"

        fails = failure_statement(points, describe) if p2p is not None else note
        out.append(JacobiFit(
            label=head["label"], stack=head["stack"], transport=head["transport"], mapping=head["mapping"],
            model=JACOBI_FORMULA, lambda_source=p2p.source if p2p else None, lambda_note=note,
            latency_us=json_num(p2p.latency_us) if p2p else None,
            bandwidth_MBps=json_num(p2p.bandwidth_MBps) if p2p else None,
            problems=tuple(sorted({p.problem for p in points})),
            points=points,
            hybrid_vs_pure=tuple(hybrid_vs_pure(points)),
            grids=tuple(jacobi_grids(cells, seed=seed)), headline=headline(points), fails_where=fails))
    return out
