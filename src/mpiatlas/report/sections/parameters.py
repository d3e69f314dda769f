"""Section "Model parameters": the Hockney fits (fits/hockney.json) as a table, segment by segment.

It shows both bandwidth estimands (:mod:`mpiatlas.models.asymptote`): the asymptotic B, the
s/t at the largest size, and the peak B, the highest s/t, and, when the campaign measured its
nodes' copy bandwidth (R/limits/limits.json, given as ``mpiatlas report --limits``, see
:mod:`mpiatlas.node.limits`), each intra-node B and peak as a % of it; each inter-node B is set against
the link rate the nodes' records name (:mod:`mpiatlas.node.link_rate`: sysfs, InfiniBand, or the config
value), with its source in the cell.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from mpiatlas.models.alphabeta_records import document_network
from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.hockney_trust import latency_on_floor
from mpiatlas.report.blocks import Block, Cell, Details, Notice, Section, Table, Text, cell, num_cell
from mpiatlas.report.cells import has_columns
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, finite, fmt_bytes, fmt_ci, fmt_num, fmt_pct, interval_scope
from mpiatlas.report.imb import bench_sort_key
from mpiatlas.report.physical_limits import (RDMA_CLASS, LinkLimit, PhysicalLimits, is_inter_node, is_intra_node,
                                             limit_cells, link_limit, transport_class)

TITLE = "Model parameters"
SECTION_ID = "parameters"
SHOWN_ELSEWHERE = ("hockney", "kernels", "alphabeta")  # fits files other sections draw
OVER_LINK = 1.05  # B / link rate above this is flagged (a few % for rounding and timer error)
# A limits record's ``tool`` as the report names it (mpiatlas.node.limits, mpiatlas.node.copy_kernel).
TOOL_NAMES = {"likwid-bench": "likwid-bench", "copy-kernel": "mpiatlas copy kernel (src/kernels/stream.c; no likwid-bench)"}
NO_LIMITS = "no limits file given: campaign.limits is off, or mpiatlas report ran without --limits"


def _zero_byte_medians(data: ReportData) -> dict[tuple[Any, Any, Any], float]:
    """(label, np, benchmark) -> the 0-byte median of the summary (also under np None)."""
    zero: dict[tuple[Any, Any, Any], float] = {}
    s = data.summary
    if has_columns(s, "label", "benchmark", "bytes", "t_median_usec"):
        assert s is not None
        z = s.filter(pl.col("bytes") == 0)
        npc = pl.col("np") if "np" in z.columns else pl.lit(None)
        for lab, np_, b, t in z.select("label", npc.alias("np"), "benchmark", "t_median_usec").iter_rows():
            zero[(lab, np_, b)] = t
            zero.setdefault((lab, None, b), t)
    return zero


def _bw_text(f: HockneyRecord, v: float | None) -> str:
    # The fit stores an unbounded (flat) bandwidth as null.
    return "∞" if v is None and f.fitted and f.segments else fmt_num(v)


def _sort_key(f: HockneyRecord) -> tuple[Any, ...]:
    return (bench_sort_key(f.benchmark), str(f.label), f.np or 0, str(f.algorithm))


def _bandwidth_cells(f: HockneyRecord) -> list[Cell]:
    """Asymptotic B, its CI and its size; peak B, its CI and its size; the model's plateau."""
    plateau, n = f.plateau_from_bytes, f.plateau_n_sizes
    return [Cell(_bw_text(f, f.asymptotic_bandwidth_MBps), cls="num"),
            _ci_cell(f, fmt_ci(list(f.asymptotic_bandwidth_ci_MBps), unbounded="∞")),
            Cell(fmt_bytes(f.asymptotic_bytes)),
            Cell(_bw_text(f, f.peak_bandwidth_MBps), cls="num"),
            _ci_cell(f, fmt_ci(list(f.peak_bandwidth_ci_MBps), unbounded="∞")),
            Cell(fmt_bytes(f.peak_bytes)),
            Cell(f"from {fmt_bytes(plateau)} ({n} sizes)" if finite(plateau) and finite(n) else
                 f"from {fmt_bytes(plateau)}" if finite(plateau) else DASH)]


def _latency_cell(f: HockneyRecord) -> Cell:
    """λ, or why it is not a result (pinned on the fit's lower bound)."""
    if f.latency_us is not None and finite(f.latency_us) and latency_on_floor(f.latency_us):
        return Cell("not resolved", cls="num bad", title=f"λ pinned on its lower bound ({f.latency_us:g} µs)")
    return num_cell(f.latency_us)


def _limit_cells(f: HockneyRecord, limits: PhysicalLimits | None, links: dict[str, LinkLimit | None]) -> list[Cell]:
    if limits is None and not any(links.values()):
        return []
    if is_inter_node(f):
        link = links.get(transport_class(f))
        frac = link.fraction(f.asymptotic_bandwidth_MBps) if link is not None else None
        if link is None or link.MBps is None:
            why = "; ".join(link.notes) if link is not None else "no link rate: no limits record or α-β fits name one"
            return [Cell("link rate unknown", title=why), Cell(DASH)]
        if frac is None:
            return [Cell(DASH, title="no finite B"), Cell(DASH)]
        title = f"asymptotic B / link rate {link.gbit_s:g} Gbit/s = {fmt_num(link.MBps)} MB/s ({link.detail})"
        if frac > OVER_LINK:
            # No transfer beats its link: the ranks shared a machine (namespace "nodes") or took another link.
            title += ". Above the link rate: this traffic did not cross that link, or the rate is not the link's"
        return [Cell(f"{fmt_pct(frac)} ({link.source})", cls="num bad" if frac > OVER_LINK else "num", title=title),
                Cell(DASH)]
    if not is_intra_node(f):
        return [Cell(DASH, title="no limit for this placement (no mapping)"), Cell(DASH)]
    if limits is None:
        return [Cell(DASH, title="no measured copy bandwidth: the report was given no usable limits file"), Cell(DASH)]
    b_frac, b_level, p_frac, p_level = limit_cells(f, limits)
    b_cell = Cell(f"{fmt_pct(b_frac)} ({b_level})" if b_frac is not None else DASH, cls="num",
                  title=f"asymptotic B / {b_level} copy rate: the level that holds the largest message")
    return [b_cell,
            Cell(f"{fmt_pct(p_frac)} ({p_level})" if p_frac is not None else DASH, cls="num",
                 title=f"peak / {p_level} copy rate: the smallest cache that holds the peak's message")]


def _fit_rows(fits: list[HockneyRecord], zero: dict[tuple[Any, Any, Any], float], show_alg: bool,
              show_method: bool, limits: PhysicalLimits | None = None,
              links: dict[str, LinkLimit | None] | None = None) -> tuple[list[list[Cell]], list[list[Cell]]]:
    links = links or {}
    rows: list[list[Cell]] = []
    seg_rows: list[list[Cell]] = []
    for f in sorted(fits, key=_sort_key):
        ident = [cell(f.benchmark), cell(f.label), cell(f.np)]
        if show_alg:
            ident.append(cell(f.algorithm))
        res = [abs(r.rel_err) for r in f.residuals if r.rel_err is not None and finite(r.rel_err)]
        bps, excl = f.breakpoints_bytes, f.excluded_bytes
        if finite(f.zero_byte_us):
            z = num_cell(f.zero_byte_us, title="zero_byte_us from the fit")
        else:
            zs = zero.get((f.label, f.np, f.benchmark))
            z = num_cell(zs, title="median of the 0-byte rows in the summary" if zs is not None else None)
        if f.error is not None:
            span = 14 + show_method + (2 if limits is not None or any(links.values()) else 0)
            rows.append([*ident, Cell(f"not fitted: {f.error}", cls="bad wrap", colspan=span), z])
            continue
        bp_text = ", ".join(fmt_bytes(b) for b in bps) or "none"
        if excl:
            bp_text += f" (spikes excluded: {', '.join(fmt_bytes(b) for b in excl)})"
        rows.append([
            *ident,
            _latency_cell(f), _ci_cell(f, fmt_ci(list(f.latency_ci_us))),
            *_bandwidth_cells(f), *_limit_cells(f, limits, links),
            Cell(bp_text, title=", ".join(f"{int(b)} B" for b in bps) or None),
            cell(len(f.segments) or 1), cell(f.n_sizes),
            Cell(fmt_pct(max(res)) if res else DASH, cls="num"),
            *([cell(interval_scope(f.ci_method, f.n_launches))] if show_method else []),
            z,
        ])
        for i, seg in enumerate(f.segments):
            seg_rows.append([*ident, cell(i), Cell(fmt_bytes(seg.from_bytes)), Cell(fmt_bytes(seg.to_bytes)),
                             cell(seg.n_sizes), num_cell(seg.latency_us), Cell(_bw_text(f, seg.bandwidth_MBps), cls="num")])
    return rows, seg_rows


def _ci_cell(fit: HockneyRecord, text: str) -> Cell:
    """A CI, marked when the fit found it untrustworthy (its ``ci_warning`` says why, on hover)."""
    warning = fit.ci_warning
    if not warning:
        return Cell(text, cls="num")
    return Cell(f"{text} unreliable", cls="num bad", title=str(warning))


def section_parameters(data: ReportData) -> Section:
    fits = data.hockney
    if fits is None:
        why = "no fits directory" if data.fits_dir is None or not data.fits_dir.is_dir() else "hockney.json missing"
        return Section(TITLE, [Notice(f"No fits ({why}): the Hockney parameters are not available.", "warn")],
                       id=SECTION_ID)
    if not fits:
        return Section(TITLE, [Notice("fits/hockney.json holds no fits.", "warn")], id=SECTION_ID)
    show_alg = any(f.algorithm not in (None, "default") for f in fits)
    show_method = any(f.ci_method for f in fits)
    blocks: list[Block] = []
    limits = data.limits
    if data.limits_error is not None:
        blocks.append(Notice(f"Physical limits not shown: {data.limits_error}", "warn"))
    elif data.limits_path is None and any(is_intra_node(f) for f in fits):
        blocks.append(Text(f"Intra-node B is not set against a memory copy rate ({NO_LIMITS})."))
    # One link per class of the inter-node fits' transports: TCP ones are bounded by the TCP link,
    # RDMA ones (ucx-rc, ofi-verbs, ...) by the InfiniBand/RoCE port.
    classes = sorted({transport_class(f) for f in fits if is_inter_node(f)})
    links = {cls: link_limit(limits, document_network(data.fits.get("alphabeta")), cls) for cls in classes}
    rows, seg_rows = _fit_rows(fits, _zero_byte_medians(data), show_alg, show_method, limits, links)
    id_cols = ["Benchmark", "Label", "np", *(["Algorithm"] if show_alg else [])]
    blocks += [
        Text("Hockney model t(m) = λ + m/B per label and benchmark (λ in µs, bandwidths in MB/s = 10⁶ B/s) "
             "with 95 % intervals (over launches where the CI method says so; see the glossary). λ is the first "
             "(small-message) segment's; every segment is listed below. Two bandwidths, each with one fixed "
             "definition: the asymptotic B, size/time at the largest size (the size shown), "
             "and the peak B, the highest size/time (at the size shown). \"Model plateau\": where the model's "
             "last segment sits on a memory-bound plateau. An interval marked unreliable reaches beyond ±25 % "
             "of its estimate, misses it, or the fit has another warning (on hover); λ pinned on its lower "
             "bound is \"not resolved\". ∞ = unbounded bandwidth (flat segment). t(0 B) is the 0-byte time, "
             "not part of the fit."),
        *_limits_text(limits, links),
        Table([*id_cols, "λ (µs)", "λ 95 % CI", "Asymptotic B (MB/s)", "Asymptotic B 95 % CI", "Asymptotic at",
               "Peak B (MB/s)", "Peak B 95 % CI", "Peak at", "Model plateau",
               *(["Asymptotic B % of copy", "Peak B % of copy"] if limits is not None or any(links.values()) else []),
               "Breakpoints", "Segments", "Sizes",
               "max |rel err|", *(["Intervals"] if show_method else []), "t(0 B) (µs)"], rows,
              caption="Hockney parameters"),
    ]
    if seg_rows:
        blocks.append(Details(f"Piecewise segments ({len(seg_rows)})", [Table(
            [*id_cols, "#", "from", "to", "sizes", "λ (µs)", "B (MB/s)"], seg_rows)]))
    others = sorted(k for k in data.fits if k not in SHOWN_ELSEWHERE)
    if others:
        blocks.append(Notice("Other model files found but not yet shown by this report version:", "info",
                             [f"{k}.json" for k in others]))
    return Section(TITLE, blocks, id=SECTION_ID)


def _limits_text(limits: PhysicalLimits | None, links: dict[str, LinkLimit | None]) -> list[Block]:
    out: list[Block] = []
    for cls, link in links.items():
        whose = "of RDMA transports (InfiniBand/RoCE) " if cls == RDMA_CLASS else ""
        if link is not None and link.MBps is not None:
            out.append(Text(f"Inter-node B {whose}is set against the link rate, {link.gbit_s:g} Gbit/s of data = "
                            f"{fmt_num(link.MBps)} MB/s, from {link.source} ({link.detail}); sysfs:<interface> is "
                            "the NIC's speed, infiniband:<device>/<port> the port's rate after line coding, config "
                            "the campaign's network.bandwidth_gbit_s where a link's own rate is unknown."))
        elif link is not None:
            out.append(Text(f"Inter-node B {whose}is not set against a link rate: it is unknown."))
        if link is not None and link.notes:
            title = "RDMA link notes:" if cls == RDMA_CLASS else "Link rate notes:"
            out.append(Notice(title, "info", list(link.notes)))
    if limits is None:
        return out
    if limits.rates:
        rates = ", ".join(f"{level} {fmt_num(rate)}" + (f" ({limits.kernels[level]})" if level in limits.kernels else "")
                          for level, rate in limits.rates.items())
        tools = " and ".join(TOOL_NAMES.get(t, t) for t in limits.tools) or "likwid-bench"
        out.append(Text(f"Physical limits ({limits.source}, {tools} copy, one core, MB/s of bytes copied): "
                        f"{rates}. Each intra-node bandwidth is set against the copy rate of the "
                        "level that holds its messages: the asymptotic B the largest message's, the peak B the "
                        "peak size's."))
    if limits.unavailable:
        out.append(Notice("No copy bandwidth for some nodes:", "info", limits.unavailable))
    return out
