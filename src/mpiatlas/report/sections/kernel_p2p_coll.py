"""Section "mpiatlas pingpong / collectives": the own pingpong and coll kernels, kept apart from IMB."""

from __future__ import annotations


import altair as alt
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.spine.series import mapping_segment
from mpiatlas.stats.aggregate import scalar
from mpiatlas.models.kernel_p2p import BANDWIDTH_BYTES, LATENCY_BYTES, fit_coll, pingpong_medians
from mpiatlas.models.kernel_records import CollFit, PingpongFit
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Details, Heading, Notice, Section, Table, Text, cell, num_cell
from mpiatlas.report.charts import (
    CHART_H,
    CHART_W,
    chart_spec,
    color,
    hockney_curve,
    legend_pick,
    p2p_chart,
    picked,
    rounded,
    size_x,
    with_size,
)
from mpiatlas.report.data import ReportData
from mpiatlas.report.findings import DISAGREE, CrossCheck, figure_of, imb_vs_kernel
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci, fmt_num
from mpiatlas.report.kernel_blocks import over_cell, status_notice

TITLE = "mpiatlas pingpong / collectives (own kernels; Open MPI where IMB is unavailable)"
SECTION_ID = "kernel-p2p-coll"
INTRO = (
    "These are mpiatlas's own OSU-style micro-benchmark kernels (src/kernels/pingpong.c and coll.c), not the "
    "Intel MPI Benchmarks (IMB): they are named pingpong and coll, never PingPong, Bcast or Allreduce, and their "
    "numbers are kept apart from IMB's. Open MPI has no IMB here (IMB must be built from source, which is not "
    "reachable offline), so for Open MPI these kernels are its only point-to-point and collective data; for the "
    "stacks with IMB they are a cross-check, and IMB PingPong's λ and B are shown next to the kernel's. "
    "pingpong: rank 0 sends, rank 1 echoes the message; t = half a round trip (IMB PingPong's convention), mean "
    "over the timed iterations, rank 0's, median over repetitions; bandwidth = bytes / t (MB/s = 10⁶ B/s). "
    "λ and B: the piecewise Hockney fit of models/hockney.py (the same procedure as IMB PingPong's fit), 95 % CIs "
    "from a bootstrap over repetitions. coll: OSU's convention, time per call with a barrier after each call "
    "(untimed), averaged over ranks (MPI_Reduce to rank 0), median over repetitions; 'default' is the stack's own "
    "algorithm choice, the others are forced with the same knobs as IMB's algorithm cells.")


def _imb_labels(data: ReportData) -> set[str]:
    """Stack/transport/mapping labels with an IMB PingPong fit (results/fits/hockney.json)."""
    return {f.label for f in data.hockney or [] if f.label is not None and f.benchmark == "PingPong" and f.fitted}


def _bw(value: object) -> str:
    return fmt_num(value, 4) if value else "∞"


def _ratio_cell(pair: CrossCheck | None, name: str) -> Cell:
    """kernel / IMB of one parameter, marked when the two are more than DISAGREE apart."""
    if pair is None or pair.ratio.get(name) is None:
        return Cell(DASH, cls="num")
    bad = name in pair.disagree
    return Cell(fmt_num(pair.ratio[name]), cls="num bad" if bad else "num",
                title=f"more than {100 * DISAGREE:.0f} % apart: see Findings" if bad else None)


def _imb_cell(imb: HockneyRecord | None, figure: str, digits: int) -> Cell:
    if imb is None:
        return Cell("no IMB", cls="num")
    value, ci = figure_of(imb, figure)
    text = f"{fmt_num(value, digits)} {fmt_ci(ci, digits, unbounded='∞')}"
    return Cell(text, cls="num bad" if imb.ci_warning else "num", title=imb.ci_warning)


def _fit_table(good: list[HockneyRecord], hockney: list[HockneyRecord] | None,
               reps: dict[str | None, int | None] | None = None) -> Table:
    """The pingpong kernel's Hockney fits (``reps``: label -> repetitions) beside IMB PingPong's."""
    pairs = {p.label: p for p in imb_vs_kernel(hockney, good)}
    rows = []
    for f in good:
        pair = pairs.get(f.label)
        imb = pair.imb if pair else None
        rows.append([
            cell(f.label),
            Cell(f"{fmt_num(f.latency_us)} {fmt_ci(f.latency_ci_us)}",
                 cls="num bad" if f.ci_warning else "num", title=f.ci_warning),
            *(cells for figure in ("asymptotic", "peak") for cells in (
                Cell(f"{_bw(f.bandwidth(f'{figure}_bandwidth')[0])} "
                     f"{fmt_ci(f.bandwidth(f'{figure}_bandwidth')[1], 4, unbounded='∞')}",
                     cls="num bad" if f.ci_warning else "num", title=f.ci_warning),
                _imb_cell(imb, f"{figure}_bandwidth", 4),
                _ratio_cell(pair, f"{figure} B"))),
            cell(", ".join(fmt_bytes(b) for b in f.breakpoints_bytes) or DASH),
            _imb_cell(imb, "latency", 3), _ratio_cell(pair, "λ"),
            cell((reps or {}).get(f.label))])
    return Table(
        ["Stack / transport / mapping", "kernel λ (µs) [95 % CI]",
         "kernel asymptotic B (MB/s) [95 % CI]", "IMB asymptotic B (MB/s) [95 % CI]", "kernel / IMB asymptotic B",
         "kernel peak B (MB/s) [95 % CI]", "IMB peak B (MB/s) [95 % CI]", "kernel / IMB peak B", "breakpoints",
         "IMB PingPong λ (µs) [95 % CI]", "kernel λ / IMB λ", "reps"], rows,
        caption="λ = the first (small-message) segment's latency of the piecewise Hockney fit t(m) = λ + m/B to "
                "the kernel's samples; asymptotic B = size/time at the largest size, peak B = the "
                "highest size/time, each set against the same figure of IMB PingPong (fits/hockney.json) where "
                "that stack/transport/mapping has "
                f"IMB (a cross-check of two programs measuring the same thing: a ratio more than "
                f"{100 * DISAGREE:.0f} % off 1 is marked and named in Findings; a marked figure has a fit warning, "
                "on hover).",
    )


def _placements(df: pl.DataFrame | None) -> dict[str, str]:
    """label -> its placement (``node2``: the mapping over its nodes), from the table's own columns."""
    if df is None or not {"label", "mapping", "nodes"} <= set(df.columns):
        return {}
    pairs = df.select("label", "mapping", "nodes").unique().drop_nulls(["label", "mapping"])
    return {r["label"]: mapping_segment(r["mapping"], r["nodes"] or 1) for r in pairs.iter_rows(named=True)}


# stack, transport, placement, 4 B latency (µs), 4 MiB bandwidth (MB/s), repetitions
HeadlineRow = tuple[str | None, str | None, str | None, float | None, float | None, int | None]


def _headline_rows(good: list[PingpongFit], med: pl.DataFrame | None,
                   placements: dict[str, str]) -> list[HeadlineRow]:
    """(stack, transport, placement, 4 B latency, 4 MiB bandwidth, reps) per series: the fits' or the medians'."""
    rows: list[HeadlineRow] = []
    for f in good:
        # The label's placement (node2), not the bare mapping: one row per node count.
        rows.append((f.stack, f.transport, placements.get(f.label or "", f.mapping), f.latency_4B_us,
                     f.bandwidth_4MiB_MBps, f.n_reps))
    if rows or med is None:
        return rows
    for lab in med["label"].unique().sort().to_list():
        part = med.filter(pl.col("label") == lab)
        at4, at4m = part.filter(pl.col("bytes") == LATENCY_BYTES), part.filter(pl.col("bytes") == BANDWIDTH_BYTES)
        first = part.row(0, named=True)
        n_reps = part["n_reps"].max()
        rows.append((first["stack"], first["transport"], placements.get(lab, first["mapping"]),
                     at4["t_usec"][0] if at4.height else None, at4m["MBps"][0] if at4m.height else None,
                     int(scalar(n_reps)) if n_reps is not None else None))
    return rows


def _pingpong_chart(med: pl.DataFrame, fits: list[HockneyRecord]) -> ChartBlock:
    """Latency and bandwidth vs size per stack/transport/mapping, the Hockney model dashed."""
    pos = med.filter(pl.col("bytes") > 0)
    meas = rounded(with_size(pos.select(pl.col("label").alias("series"), "bytes",
                                        pl.col("t_usec").alias("t_median_usec"),
                                        pl.col("MBps").alias("bw_median_MBps"), "n_reps")))
    lo, hi = scalar(pos["bytes"].min()), scalar(pos["bytes"].max())
    model = []
    for f in fits:
        try:
            curve = hockney_curve(f, lo, hi)
        except ValueError:
            continue  # segments unusable: the fit table above shows what the fit holds
        model += [{**p, "series": f.label, "bw_model_MBps": p["bytes"] / p["t_model_usec"]
                   if p["t_model_usec"] > 0 else None} for p in curve]
    chart = p2p_chart(meas, "pingpong", latency_title="half round trip t (µs)",
                      model=with_size(rounded(pl.DataFrame(model, infer_schema_length=None))) if model else None)
    return ChartBlock(chart_spec(chart), "Medians over repetitions (lines with points) and the fitted Hockney model "
                                         "(dashed) per stack/transport/mapping; 0 bytes is left out of the log axis.")


def _pingpong_blocks(data: ReportData, df: pl.DataFrame | None, fits: list[PingpongFit] | None) -> list[Block]:
    blocks: list[Block] = [Heading("pingpong (2 ranks, half round trip)")]
    if df is not None:
        blocks += status_notice(df, "pingpong")
    if fits is None:
        blocks.append(Notice("No pingpong fit (fits/kernels.json missing or without 'pingpong'): medians only.",
                             "warn"))
    good = [f for f in fits or [] if f.fitted]
    errors = [f"{f.label}: {f.error}" for f in fits or [] if not f.fitted]
    if errors:
        blocks.append(Notice("The Hockney fit failed for these pingpong series:", "warn", errors))
    imb = _imb_labels(data)
    labels = sorted({f.label for f in fits or [] if f.label is not None} |
                    (set(df["label"].unique().to_list()) if df is not None else set()))
    # Without hockney.json nothing is known about IMB: say nothing rather than "no IMB".
    without = [lab for lab in labels if lab not in imb] if data.hockney is not None else []
    if without:
        blocks.append(Notice("No IMB PingPong for these stack/transport/mapping series: the pingpong kernel is "
                             "their only point-to-point measurement.", "info", without))
    records = [f.hockney for f in good if f.hockney is not None]
    if good:
        reps: dict[str | None, int | None] = {f.label: f.n_reps for f in good}
        blocks.append(_fit_table(records, data.hockney, reps))
    med = pingpong_medians(df)
    rows = _headline_rows(good, med, _placements(df))
    if rows:
        blocks.append(Table(
            ["Stack", "Transport", "Mapping", "4 B latency (µs)", "4 MiB bandwidth (MB/s)", "reps"],
            [[cell(s), cell(t), cell(m), num_cell(lat), num_cell(bw, 4), cell(n)] for s, t, m, lat, bw, n in rows],
            caption="Medians over repetitions of rank 0's half round trip at 4 bytes and of the bandwidth at "
                    "4 MiB (a dash: that size was not in the sweep).",
        ))
    if med is not None:
        blocks.append(_pingpong_chart(med, records))
    return blocks


def _coll_chart(fits: list[CollFit]) -> ChartBlock | None:
    rows = [{"series": p.algorithm, "facet": f"{f.label} · {f.collective} · P={f.np}",
             "bytes": p.bytes, "t_avg_usec": p.t_avg_usec, "t_min_usec": p.t_min_usec,
             "t_max_usec": p.t_max_usec, "n_reps": p.n_reps}
            for f in fits for p in f.points if p.bytes > 0 and p.t_avg_usec]
    if not rows:
        return None
    pts = rounded(with_size(pl.DataFrame(rows)))
    algos = sorted(pts["series"].unique().to_list(), key=lambda a: (a != "default", a))
    sel = legend_pick()
    chart = alt.Chart(pts).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=16)).encode(
        x=size_x(pts, max_ticks=6), y=alt.Y("t_avg_usec:Q", scale=alt.Scale(type="log"),
                                            title="time per call, avg over ranks (µs)"),
        color=color(algos, title="algorithm"), opacity=picked(sel, 1.0),
        tooltip=["facet:N", alt.Tooltip("series:N", title="algorithm"), "size:N",
                 alt.Tooltip("t_avg_usec:Q", format=".4~g"), alt.Tooltip("t_min_usec:Q", format=".4~g"),
                 alt.Tooltip("t_max_usec:Q", format=".4~g"), "n_reps:Q"],
    ).add_params(sel).properties(width=CHART_W - 40, height=CHART_H - 60).facet(
        facet=alt.Facet("facet:N", title=None), columns=3).resolve_scale(y="independent")
    return ChartBlock(chart_spec(chart), "Median over repetitions of the per-call time averaged over ranks, per "
                                         "algorithm; click a legend entry to highlight it.")


def _best_table(fits: list[CollFit]) -> Details | None:
    # Only where algorithms compete (a stack measured with its default alone has nothing to rank).
    best = [(f, b) for f in fits for b in f.best if b.candidates > 1]
    if not best:
        return None
    return Details("Best algorithm per (collective, P, size)", [Table(
        ["Stack / transport / mapping", "collective", "P", "size", "best algorithm", "time (µs)",
         "runner-up", "margin", "default (µs)", "default / best", "candidates"],
        [[cell(f.label), cell(f.collective), cell(f.np), Cell(fmt_bytes(b.bytes)),
          cell(b.algorithm), num_cell(b.t_avg_usec), cell(b.runner_up),
          Cell(f"{100 * b.margin:.0f} %" if b.margin is not None else DASH, cls="num",
               title="runner-up's median time / best's − 1"),
          num_cell(b.default_usec), num_cell(b.default_over_best), cell(b.candidates)]
         for f, b in best],
        filterable=True, scroll=len(best) > 30,
        caption="Best = smallest median (over repetitions) time per call averaged over ranks, among the "
                "algorithms measured (the same criterion as the IMB collectives'); a margin of a few percent is "
                "within run-to-run noise.")], open=True)


def _coll_blocks(df: pl.DataFrame | None, fits: list[CollFit] | None) -> list[Block]:
    blocks: list[Block] = [Heading("coll (Bcast, Allreduce, Alltoall per algorithm)")]
    if df is not None:
        blocks += status_notice(df, "coll")
    if fits is None and df is not None:
        fits = fit_coll(df)  # medians only: the same per-size medians fit_kernels writes
    if not fits:
        return blocks + [Notice("No coll measurements of ok cells.", "info")]
    blocks.append(Table(
        ["Stack / transport / mapping", "collective", "P", "oversubscribed", "algorithms measured", "summary"],
        [[cell(f.label), cell(f.collective), cell(f.np), over_cell(f.oversubscribed),
          cell(", ".join(f.algorithms)), cell(f.headline)] for f in fits],
        caption="One row per stack/transport/mapping, collective and process count P. Only the stacks listed in "
                "kernels.coll.forced_algorithms run forced algorithms; the others run their default only."))
    return blocks + [b for b in (_coll_chart(fits), _best_table(fits)) if b is not None]


def section_kernel_p2p_coll(data: ReportData) -> Section | None:
    pp, coll = data.kernel_table("pingpong"), data.kernel_table("coll")
    pp_fits, coll_fits = data.pingpong_fits(), data.coll_fits()
    if pp is None and coll is None and not pp_fits and not coll_fits:
        return None
    blocks: list[Block] = [Text(INTRO)]
    if pp is not None or pp_fits:
        blocks += _pingpong_blocks(data, pp, pp_fits)
    if coll is not None or coll_fits:
        blocks += _coll_blocks(coll, coll_fits)
    return Section(TITLE, blocks, id=SECTION_ID)
