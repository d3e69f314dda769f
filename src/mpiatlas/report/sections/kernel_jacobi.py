"""Section "Kernel: 3-D Jacobi halo exchange": halo time vs c/B + k·λ, MLUP/s, scaling, hybrid vs pure MPI."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from mpiatlas.models.grid_records import GridComparison
from mpiatlas.models.jacobi_records import HybridVsPure, JacobiFit, JacobiPoint, Scaling
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Heading, Notice, Section, Table, cell
from mpiatlas.report.charts import FITTED, OVER, chart_spec, measured_vs_model
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, fmt_num, fmt_pct
from mpiatlas.report.kernel_blocks import KERNEL_TITLES, err_cell, grid_blocks, kernel_opening
from mpiatlas.report.kernel_blocks import over_cell, raw_table


def _grid(dims: tuple[int, ...]) -> str:
    return "×".join(map(str, dims)) if dims else DASH


def _ratio_cell(h: HybridVsPure) -> Cell:
    """The hybrid / pure iteration ratio, or why there is none (unequal work is not compared)."""
    if h.iteration_ratio is not None:
        return Cell(fmt_num(h.iteration_ratio), cls="num")
    why = "no pure MPI cell" if not h.pure else (
        "unequal work: the global grids differ" if not h.equal_work else "no iteration time")
    return Cell(f"{DASH} ({why})")


def _share_blocks(rows: list[tuple[str | None, JacobiPoint]]) -> list[Block]:
    """The communication share per configuration (ranks × threads, grid): halo, Allreduce and sweep as
    shares of the iteration, so hybrid and pure MPI on the same cores are read side by side."""
    shown = sorted(((label, r) for label, r in rows if r.iteration_us),
                   key=lambda lr: (lr[0], lr[1].problem or "", lr[1].cores, lr[1].np, lr[1].threads))
    if not shown:
        return []
    return [Heading("Communication share per configuration"), Table(
        ["Stack / transport / mapping", "Problem", "cores", "ranks × threads", "grid", "iteration (µs)",
         "halo share", "Allreduce share", "communication share", "sweep share"],
        [[cell(label), cell(r.problem), cell(r.cores), cell(f"{r.np} × {r.threads}"),
          cell(_grid(r.procdims)), Cell(fmt_num(r.iteration_us), cls="num"),
          _share(r.halo_share), _share(r.allreduce_share),
          _share(_sum(r.halo_share, r.allreduce_share)), _share(r.compute_share)]
         for label, r in shown],
        filterable=True, scroll=len(shown) > 25,
        caption="Shares of the slowest rank's iteration: halo exchange and residual Allreduce (means over "
                "ranks), their sum (communication) and the sweep; medians over repetitions, so the shares need "
                "not add to exactly 100 %.")]


def _efficiency_cell(scaling: Scaling | None) -> Cell:
    efficiency = None if scaling is None else scaling.efficiency
    return Cell(fmt_num(efficiency), cls="num",
                title=f"relative to P={scaling.base_np}" if scaling is not None and efficiency is not None else None)


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
    df, blocks = opening.df, opening.blocks
    good = data.jacobi_fits() or []
    if good:
        blocks.append(Table(
            ["Stack / transport / mapping", "λ (µs)", "B (MB/s)", "source", "summary"],
            [[cell(f.label), Cell(fmt_num(f.latency_us), cls="num"),
              Cell(fmt_num(f.bandwidth_MBps, 0) if f.bandwidth_MBps else DASH, cls="num"),
              Cell(f.lambda_source or DASH, title=f.lambda_note), cell(f.headline)]
             for f in good]))
        failing = [f"{f.label}: {f.fails_where}" for f in good if f.fails_where]
        if failing:
            blocks.append(Notice("Where the model fails:", "info", failing))
        rows = [(f.label, p) for f in good for p in f.points]
        blocks.append(Heading("Halo time: model vs measured, MLUP/s and scaling"))
        blocks.append(Table(
            ["Stack / transport / mapping", "Problem", "Group", "P", "threads", "cores", "grid", "k", "bytes/rank",
             "msgs/rank",
             "Oversub.", "halo mean over ranks (µs)", "halo measured (µs)", "halo model (µs)", "Error",
             "iteration (µs)", "MLUP/s",
             "scaling efficiency"],
            [[cell(label), cell(r.problem), cell(r.variant_group), cell(r.np), cell(r.threads), cell(r.cores),
              cell(_grid(r.procdims)), cell(r.k),
              Cell(fmt_num(r.bytes_per_rank, 0), cls="num"), Cell(fmt_num(r.messages_per_rank), cls="num"),
              over_cell(r.oversubscribed), Cell(fmt_num(r.halo_mean_us), cls="num"),
              Cell(fmt_num(r.halo_measured_us), cls="num"),
              Cell(fmt_num(r.halo_predicted_us), cls="num"), err_cell(r.rel_err),
              Cell(fmt_num(r.iteration_us), cls="num"), Cell(fmt_num(r.mlups_total), cls="num"),
              _efficiency_cell(r.scaling)]
             for label, r in rows],
            filterable=True, scroll=len(rows) > 25,
            caption="Scaling efficiency of the pure MPI cells: weak T(1)/T(P), strong T(1)/(P·T(P)) "
                    "(relative to the smallest P). k = 0 cells have no halo to model.",
        ))
        modelled = [(label, r) for label, r in rows if r.halo_predicted_us is not None and r.k]
        if modelled:
            pts = pl.DataFrame([{
                "label": label, "series": f"{label} · {r.variant_group}", "np": r.np,
                "halo_measured_us": r.halo_measured_us, "halo_predicted_us": r.halo_predicted_us,
                "rel_err": r.rel_err, "bytes_per_rank": r.bytes_per_rank, "k": r.k,
                "placement": OVER if r.oversubscribed else FITTED} for label, r in modelled])
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "halo_measured_us", "halo_predicted_us", "halo time per iteration (µs)",
                "Jacobi halo: measured (marks) and c/B + k·λ (dashed)"))))
        eff = [(label, r, r.scaling.efficiency) for label, r in rows
               if r.scaling is not None and r.scaling.efficiency is not None]
        if eff:
            pts = pl.DataFrame([{"label": label, "series": f"{label} · {r.problem}",
                                 "np": r.np, "efficiency": efficiency, "mlups_total": r.mlups_total,
                                 "placement": OVER if r.oversubscribed else FITTED} for label, r, efficiency in eff])
            blocks.append(ChartBlock(chart_spec(measured_vs_model(
                pts, "np", "processes P", "efficiency", None, "scaling efficiency",
                "Jacobi: scaling efficiency of the pure MPI cells", log_y=False))))
        hybrid = [(f, h) for f in good for h in f.hybrid_vs_pure]
        if hybrid:
            blocks.append(Heading("Pure MPI vs hybrid MPI + OpenMP at equal cores"))
            blocks.append(Table(
                ["Stack / transport / mapping", "Problem", "cores", "hybrid ranks × threads", "pure ranks × threads",
                 "global grid hybrid", "global grid pure", "iteration hybrid / pure",
                 "bytes/rank hybrid", "bytes/rank pure", "msgs/rank hybrid", "msgs/rank pure", "halo µs hybrid",
                 "halo µs pure", "MLUP/s hybrid", "MLUP/s pure"],
                [[cell(f.label), cell(h.problem), cell(h.cores), cell(h.hybrid), cell(h.pure),
                  cell(_grid(h.hybrid_global_dims)), cell(_grid(h.pure_global_dims)),
                  _ratio_cell(h),
                  Cell(fmt_num(h.hybrid_bytes_per_rank, 0), cls="num"),
                  Cell(fmt_num(h.pure_bytes_per_rank, 0), cls="num"),
                  Cell(fmt_num(h.hybrid_messages_per_rank), cls="num"),
                  Cell(fmt_num(h.pure_messages_per_rank), cls="num"),
                  Cell(fmt_num(h.hybrid_halo_us), cls="num"), Cell(fmt_num(h.pure_halo_us), cls="num"),
                  Cell(fmt_num(h.hybrid_mlups), cls="num"), Cell(fmt_num(h.pure_mlups), cls="num")]
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




def _grid_comparisons(good: list[JacobiFit]) -> list[GridComparison]:
    """Every fit's grid comparisons, each keyed by its label too (a comparison names only its
    problem, threads and P)."""
    return [replace(g, key={"label": f.label, **g.key}) for f in good for g in f.grids]
