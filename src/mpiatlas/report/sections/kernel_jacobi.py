"""Section "Kernel: 3-D Jacobi halo exchange": halo time vs c/B + k·λ, MLUP/s, scaling, hybrid vs pure MPI."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from mpiatlas.matrix.layout import KERNELS_FIT
from mpiatlas.models.fit_records import FitRecordError
from mpiatlas.models.kernel_records import GridComparison, grid_comparisons
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Heading, Section, Table, cell
from mpiatlas.report.charts import FITTED, OVER, chart_spec, measured_vs_model
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_num, fmt_pct
from mpiatlas.report.kernel_blocks import KERNEL_TITLES, err_cell, failure_notice, grid_blocks, kernel_opening
from mpiatlas.report.kernel_blocks import over_cell, raw_table


def _grid(dims: list[int] | None) -> str:
    return "×".join(map(str, dims)) if dims else DASH


def _ratio_cell(h: dict[str, Any]) -> Cell:
    """The hybrid / pure iteration ratio, or why there is none (unequal work is not compared)."""
    if h.get("iteration_ratio") is not None:
        return Cell(fmt_num(h["iteration_ratio"]), cls="num")
    why = "no pure MPI cell" if not h.get("pure") else (
        "unequal work: the global grids differ" if not h.get("equal_work") else "no iteration time")
    return Cell(f"{DASH} ({why})")


def _share_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    """The communication share per configuration (ranks × threads, grid): halo, Allreduce and sweep as
    shares of the iteration, so hybrid and pure MPI on the same cores are read side by side."""
    shown = sorted((r for r in rows if r.get("iteration_us")),
                   key=lambda r: (r["label"], r.get("problem") or "", r["cores"], r["np"], r["threads"]))
    if not shown:
        return []
    return [Heading("Communication share per configuration"), Table(
        ["Stack / transport / mapping", "Problem", "cores", "ranks × threads", "grid", "iteration (µs)",
         "halo share", "Allreduce share", "communication share", "sweep share"],
        [[cell(r["label"]), cell(r.get("problem")), cell(r["cores"]), cell(f"{r['np']} × {r['threads']}"),
          cell("×".join(map(str, r.get("procdims") or [])) or DASH), Cell(fmt_num(r["iteration_us"]), cls="num"),
          _share(r.get("halo_share")), _share(r.get("allreduce_share")),
          _share(_sum(r.get("halo_share"), r.get("allreduce_share"))), _share(r.get("compute_share"))]
         for r in shown],
        filterable=True, scroll=len(shown) > 25,
        caption="Shares of the slowest rank's iteration: halo exchange and residual Allreduce (means over "
                "ranks), their sum (communication) and the sweep; medians over repetitions, so the shares need "
                "not add to exactly 100 %.")]


def _share(value: float | None) -> Cell:
    return Cell(fmt_pct(value) if value is not None else DASH, cls="num")


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def section_kernel_jacobi(data: ReportData) -> Section | None:
    opening = kernel_opening(data, "jacobi", (
        "3-D 7-point Jacobi on a Cartesian process grid, 6-face halo exchange per iteration (non-blocking, one "
        "Waitall), residual by Allreduce; MPI + OpenMP cells run `threads` threads per rank on the rank's own "
        "cores. Halo model: T_c = c/B + k·λ, c = bytes a rank sends per iteration, k = decomposed directions "
        "(process-grid axes with more than one rank), λ and B from the point-to-point fits. The measured halo time "
        "compared with the model is the least-waiting rank's (a rank's halo time also holds its wait for a late "
        "neighbour); the mean over ranks is shown beside it. Medians over repetitions. Each problem (mode and "
        "size: weak L per rank, strong N in total) scales on its own; grids asked for (procdims) are compared "
        "at their P."))
    if opening is None:
        return None
    df, good, blocks = opening.df, opening.good, opening.blocks
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "λ (µs)", "B (MB/s)", "source", "summary"],
            [[cell(f["label"]), Cell(fmt_num(f.get("latency_us")), cls="num"),
              Cell(fmt_num(f.get("bandwidth_MBps"), 0) if f.get("bandwidth_MBps") else DASH, cls="num"),
              Cell(f.get("lambda_source") or DASH, title=f.get("lambda_note")), cell(f.get("headline"))]
             for f in good]))
        notice = failure_notice(good)
        if notice:
            blocks.append(notice)
        rows = [{**p, "label": f["label"]} for f in good for p in f.get("points", [])]
        blocks.append(Heading("Halo time: model vs measured, MLUP/s and scaling"))
        blocks.append(Table(
            ["Stack / transport / mapping", "Problem", "Group", "P", "threads", "cores", "grid", "k", "bytes/rank",
             "msgs/rank",
             "Oversub.", "halo mean over ranks (µs)", "halo measured (µs)", "halo model (µs)", "Error",
             "iteration (µs)", "MLUP/s",
             "scaling efficiency"],
            [[cell(r["label"]), cell(r.get("problem")), cell(r["variant_group"]), cell(r["np"]), cell(r["threads"]),
              cell(r["cores"]),
              cell("×".join(map(str, r.get("procdims") or [])) or DASH), cell(r["k"]),
              Cell(fmt_num(r["bytes_per_rank"], 0), cls="num"), Cell(fmt_num(r["messages_per_rank"]), cls="num"),
              over_cell(r["oversubscribed"]), Cell(fmt_num(r.get("halo_mean_us")), cls="num"),
              Cell(fmt_num(r["halo_measured_us"]), cls="num"),
              Cell(fmt_num(r["halo_predicted_us"]), cls="num"), err_cell(r.get("rel_err")),
              Cell(fmt_num(r["iteration_us"]), cls="num"), Cell(fmt_num(r["mlups_total"]), cls="num"),
              Cell(fmt_num(r.get("efficiency")), cls="num",
                   title=f"relative to P={r.get('efficiency_base_np')}" if r.get("efficiency") is not None else None)]
             for r in rows],
            filterable=True, scroll=len(rows) > 25,
            caption="Scaling efficiency of the pure MPI cells: weak T(1)/T(P), strong T(1)/(P·T(P)) "
                    "(relative to the smallest P). k = 0 cells have no halo to model.",
        ))
        modelled = [r for r in rows if r.get("halo_predicted_us") is not None and r["k"]]
        if modelled:
            pts = pl.DataFrame([{
                "label": r["label"], "series": f"{r['label']} · {r['variant_group']}", "np": r["np"],
                "halo_measured_us": r["halo_measured_us"], "halo_predicted_us": r["halo_predicted_us"],
                "rel_err": r.get("rel_err"), "bytes_per_rank": r["bytes_per_rank"], "k": r["k"],
                "placement": OVER if r["oversubscribed"] else FITTED} for r in modelled])
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "halo_measured_us", "halo_predicted_us", "halo time per iteration (µs)",
                "Jacobi halo: measured (marks) and c/B + k·λ (dashed)"))))
        eff = [r for r in rows if r.get("efficiency") is not None]
        if eff:
            pts = pl.DataFrame([{"label": r["label"], "series": f"{r['label']} · {r.get('problem')}",
                                 "np": r["np"], "efficiency": r["efficiency"], "mlups_total": r["mlups_total"],
                                 "placement": OVER if r["oversubscribed"] else FITTED} for r in eff])
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "efficiency", None, "scaling efficiency",
                "Jacobi: scaling efficiency of the pure MPI cells", log_y=False))))
        hybrid = [(f, h) for f in good for h in f.get("hybrid_vs_pure", [])]
        if hybrid:
            blocks.append(Heading("Pure MPI vs hybrid MPI + OpenMP at equal cores"))
            blocks.append(Table(
                ["Stack / transport / mapping", "Problem", "cores", "hybrid ranks × threads", "pure ranks × threads",
                 "global grid hybrid", "global grid pure", "iteration hybrid / pure",
                 "bytes/rank hybrid", "bytes/rank pure", "msgs/rank hybrid", "msgs/rank pure", "halo µs hybrid",
                 "halo µs pure", "MLUP/s hybrid", "MLUP/s pure"],
                [[cell(f["label"]), cell(h.get("problem")), cell(h["cores"]), cell(h["hybrid"]), cell(h["pure"]),
                  cell(_grid(h.get("hybrid_global_dims"))), cell(_grid(h.get("pure_global_dims"))),
                  _ratio_cell(h),
                  Cell(fmt_num(h["hybrid_bytes_per_rank"], 0), cls="num"),
                  Cell(fmt_num(h["pure_bytes_per_rank"], 0), cls="num"),
                  Cell(fmt_num(h["hybrid_messages_per_rank"]), cls="num"),
                  Cell(fmt_num(h["pure_messages_per_rank"]), cls="num"),
                  Cell(fmt_num(h["hybrid_halo_us"]), cls="num"), Cell(fmt_num(h["pure_halo_us"]), cls="num"),
                  Cell(fmt_num(h["hybrid_mlups"]), cls="num"), Cell(fmt_num(h["pure_mlups"]), cls="num")]
                 for f, h in hybrid],
                caption="Equal work: in weak mode every core owns L³ points, so a hybrid rank of t threads owns "
                        "t·L³ and hybrid and pure MPI on the same cores solve the same global grid (printed beside "
                        "the ratio; a ratio is only formed where the two grids agree). Fewer ranks per node send "
                        "fewer halo bytes and messages per core.",
            ))
        blocks += _share_blocks(rows)
        blocks += grid_blocks(
            _grid_comparisons(good),
            [("label", "Stack / transport / mapping", ""), ("problem", "Problem", ""),
             ("threads", "threads", "threads "), ("np", "P", "P=")], "iteration (µs)",
            [("halo_us", "halo mean (µs)"), ("bytes_per_rank", "bytes/rank"), ("mlups_total", "MLUP/s")],
            "Process grids at equal P: the cost of the decomposition")
    elif df is not None:
        blocks.append(raw_table(df, ["label", "variant_group", "np", "cell_threads", "oversubscribed"], "halo_us"))
    return Section(KERNEL_TITLES["jacobi"], blocks, id="kernel-jacobi")




def _grid_comparisons(good: list[dict[str, Any]]) -> list[GridComparison]:
    """Every fit's grid comparisons, each keyed by its label too (a comparison names only its
    problem, threads and P); a fit whose grids are not of that shape shows none (the schema check
    on load names it)."""
    out = []
    for f in good:
        try:
            found = grid_comparisons(f.get("grids", []), f"fits/{KERNELS_FIT}", f"$.jacobi[label={f['label']}].grids")
        except FitRecordError:
            continue
        out += [replace(g, key={"label": f["label"], **g.key}) for g in found]
    return out
