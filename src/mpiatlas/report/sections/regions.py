"""Section "Point-to-point by region": PingPong/PingPing per (stack/transport, region) with the
node's cache sizes as reference lines, and the intra- vs inter-node comparison table.

The numbers come from :mod:`mpiatlas.stats.regions`; this module only draws and formats them.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.stats.aggregate import scalar
from mpiatlas.stats.region_loggp import region_loggp
from mpiatlas.stats.regions import (
    BW_BYTES,
    INTER_REGION,
    LAT_BYTES,
    REGION_BENCHMARKS,
    CacheLine,
    cache_lines,
    intra_inter,
    pair_class_medians,
    region_fits,
    region_medians,
    region_rank,
)
from mpiatlas.report.blocks import Block, Cell, ChartBlock, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.cells import has_columns
from mpiatlas.report.charts import chart_spec, p2p_chart, rounded, size_tip, with_size
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import finite, fmt_bytes, fmt_ci, fmt_num

TITLE = "Point-to-point by region"
SECTION_ID = "p2p-regions"
NEEDED = ("benchmark", "bytes", "t_usec", "stack", "transport")
_HOSTS_SHOWN = 3


def cache_label(line: CacheLine) -> str:
    """``L2 2 MiB``; with the nodes that have it when the level differs between nodes."""
    text = f"{line.level} {fmt_bytes(line.bytes)}"
    if line.ambiguous:
        hosts = ", ".join(line.hosts[:_HOSTS_SHOWN])
        more = len(line.hosts) - _HOSTS_SHOWN
        text += f" ({hosts}{f' +{more} more' if more > 0 else ''})"
    return text


def cache_rule_layers(lines: list[CacheLine], lo: float, hi: float) -> list[alt.Chart]:
    """A dashed vertical rule per cache size and its label near the top of the plot.

    Labels are staggered over three rows so that close sizes (L1d/L1i, two nodes' L2) stay
    legible, and written leftwards in the right half of the [lo, hi] log axis so they stay inside.
    """
    if not lines:
        return []
    rules = pl.DataFrame({"bytes": [ln.bytes for ln in lines], "level": [ln.level for ln in lines],
                          "label": [cache_label(ln) for ln in lines],
                          "nodes": [", ".join(ln.hosts) for ln in lines]})
    tips = [alt.Tooltip("label:N", title="cache"), alt.Tooltip("nodes:N", title="nodes")]
    layers: list[alt.Chart] = [alt.Chart(rules).mark_rule(color="#6b7280", strokeDash=[6, 3], strokeWidth=1.1)
                               .encode(x="bytes:Q", tooltip=tips)]
    mid = (lo * hi) ** 0.5
    for i, row in enumerate(rules.iter_rows(named=True)):
        right = row["bytes"] > mid
        layers.append(alt.Chart(pl.DataFrame([row])).mark_text(
            align="right" if right else "left", dx=-3 if right else 3, baseline="top", fontSize=10,
            color="#374151").encode(
            x="bytes:Q", y=alt.value(3 + 12 * (i % 3)), text="label:N", tooltip=tips))
    return layers


def _series_names(points: pl.DataFrame) -> pl.DataFrame:
    return points.with_columns(pl.concat_str([pl.col("stack"), pl.lit("/"), pl.col("transport"), pl.lit(" · "),
                                              pl.col("region")]).alias("series"))


def region_chart(bench: str, pts: pl.DataFrame, lines: list[CacheLine]) -> tuple[alt.TopLevelMixin, str]:
    """Latency and bandwidth vs size, one line per (stack/transport, region), cache sizes as rules.

    Only cache sizes inside the measured size range are drawn (a rule far outside would
    stretch the log axis and squash the curves); the others are named in the caption.
    """
    pos = with_size(_series_names(pts.filter(pl.col("bytes") > 0)))
    order = (pos.select("series", "stack", "transport", "region").unique()
             .with_columns(pl.col("region").map_elements(region_rank, return_dtype=pl.Int32).alias("_r"))
             .sort("stack", "transport", "_r").get_column("series").to_list())
    lo, hi = scalar(pos.get_column("bytes").min()), scalar(pos.get_column("bytes").max())
    inside = [ln for ln in lines if lo <= ln.bytes <= hi]
    outside = [ln for ln in lines if not lo <= ln.bytes <= hi]

    data = rounded(pos.select("series", "stack", "transport", "region", "mappings", "bytes", "size", "n_reps",
                              "t_median_usec", "t_ci_low_usec", "t_ci_high_usec", "bw_median_MBps"))
    tips = [alt.Tooltip("series:N"), alt.Tooltip("mappings:N", title="mapping(s)"), size_tip(),
            alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
            alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
            alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"),
            alt.Tooltip("bw_median_MBps:Q", title="median bw (MB/s)", format=",.4~g"),
            alt.Tooltip("n_reps:Q", title="samples")]
    chart = p2p_chart(data, bench, overlays=cache_rule_layers(inside, lo, hi), domain=order,
                      color_title="stack/transport · region", tips=tips)

    caption = f"{bench}: {len(order)} series (stack/transport · region of ranks 0 and 1), median over repetitions."
    if inside:
        caption += " Dashed rules: cache sizes of the node(s), " + ", ".join(cache_label(ln) for ln in inside) + "."
    if outside:
        caption += (f" Outside the measured sizes ({fmt_bytes(lo)} – {fmt_bytes(hi)}), not drawn: "
                    + ", ".join(cache_label(ln) for ln in outside) + ".")
    return chart, caption


def _with_ci(m: object, lo: object, hi: object) -> str:
    return f"{fmt_num(m)} {fmt_ci([lo, hi])}" if finite(lo) and finite(hi) else fmt_num(m)


def _num(text: str) -> Cell:
    return Cell(text, cls="num")


def colocated_inter(cells: pl.DataFrame | None) -> list[str]:
    """stack/transport of inter-node PingPong cells whose "nodes" shared one machine (emulated nodes)."""
    if not has_columns(cells, "colocated", "stack", "transport", "region"):
        return []  # tables older than the colocated column: nothing known
    c = cells.filter(pl.col("colocated").fill_null(False) & (pl.col("region") == INTER_REGION))
    if "benchmark" in c.columns:
        c = c.filter(pl.col("benchmark") == "PingPong")
    return sorted({f"{s}/{t}" for s, t in c.select("stack", "transport").iter_rows()})


def intra_inter_blocks(points: pl.DataFrame, cells: pl.DataFrame | None = None) -> list[Block]:
    """Heading, table and pairing notes of the intra- vs inter-node comparison (PingPong)."""
    out: list[Block] = [Heading("Intra- vs inter-node (PingPong)")]
    pp = points.filter(pl.col("benchmark") == "PingPong")
    scopes = set(pp.get_column("scope").drop_nulls().to_list())
    if pp.height == 0:
        out.append(Text("No PingPong was measured: no intra- vs inter-node comparison.", cls="muted"))
        return out
    if "inter" not in scopes:
        out.append(Text(f"No inter-node PingPong (ranks 0 and 1 on different nodes, region {INTER_REGION}) was "
                        "measured: no intra- vs inter-node comparison.", cls="muted"))
        return out
    table = intra_inter(points)
    if table.height == 0:
        out.append(Text("No stack has PingPong both within a node and across nodes: no comparison.", cls="muted"))
        return out
    out.append(Text(
        f"Per stack: latency at {fmt_bytes(LAT_BYTES)} (ratio inter / intra) and bandwidth at "
        f"{fmt_bytes(BW_BYTES)} (ratio intra / inter) — or the smallest / largest size both series have — so a "
        "ratio above 1 is how many times worse the pair does across nodes. Medians over repetitions with their "
        "95 % bootstrap CIs; a ratio's range combines the two CIs' far ends (conservative). \"same stack\" pairs "
        "the stack's fastest intra-node series (lowest small-message latency, usually shared memory) with its "
        "inter-node one; \"same transport\" keeps the transport and changes only the placement."))
    rows: list[list[Cell]] = []
    for r in table.iter_rows(named=True):
        rows.append([
            cell(r["stack"]), cell(r["comparison"]),
            cell(f"{r['intra_transport']} · {r['intra_region']}"),
            cell(f"{r['inter_transport']} · {r['inter_region']}"),
            Cell(fmt_bytes(r["lat_bytes"])),
            _num(_with_ci(r["lat_intra_us"], r["lat_intra_ci_low"], r["lat_intra_ci_high"])),
            _num(_with_ci(r["lat_inter_us"], r["lat_inter_ci_low"], r["lat_inter_ci_high"])),
            _num(_with_ci(r["lat_ratio"], r["lat_ratio_low"], r["lat_ratio_high"])),
            Cell(fmt_bytes(r["bw_bytes"])),
            _num(_with_ci(r["bw_intra_MBps"], r["bw_intra_ci_low"], r["bw_intra_ci_high"])),
            _num(_with_ci(r["bw_inter_MBps"], r["bw_inter_ci_low"], r["bw_inter_ci_high"])),
            _num(_with_ci(r["bw_ratio"], r["bw_ratio_low"], r["bw_ratio_high"])),
        ])
    out.append(Table(["Stack", "Comparison", "Intra-node (transport · region)", "Inter-node (transport · region)",
                      "Latency at", "t intra (µs)", "t inter (µs)", "inter / intra", "Bandwidth at",
                      "bw intra (MB/s)", "bw inter (MB/s)", "intra / inter"], rows,
                     caption="PingPong within a node vs across nodes: median [95 % CI]"))
    paired = [f"{r['stack']}: {r['intra_transport']} ({r['intra_region']}) within a node, "
              f"{r['inter_transport']} across nodes"
              for r in table.filter(pl.col("comparison") == "same stack").iter_rows(named=True)]
    if paired:
        out.append(Notice("Same-stack comparisons pair different transports:", "info", paired))
    emulated = colocated_inter(cells)
    if emulated:
        out.append(Notice("These inter-node runs used nodes sharing one machine (emulated nodes): their "
                          "\"network\" is that machine's own, so the ratios describe the emulation, not a real "
                          "interconnect:", "warn", emulated))
    return out


def section_p2p_regions(data: ReportData) -> Section:
    smp = data.samples
    if smp is None:
        return Section(TITLE, [Notice(f"{layout.IMB_SAMPLES} is missing: no per-region view.", "warn")], id=SECTION_ID)
    lacking = [c for c in NEEDED if c not in smp.columns]
    if lacking:
        return Section(TITLE, [Notice(f"{layout.IMB_SAMPLES} lacks column(s) {', '.join(lacking)}: no per-region view.",
                                      "warn")], id=SECTION_ID)
    points = region_medians(smp)
    if points.height == 0:
        return Section(TITLE, [Notice("No PingPong or PingPing samples: no per-region view.", "info")], id=SECTION_ID)

    blocks: list[Block] = [Text(
        "PingPong and PingPing by where ranks 0 and 1 sit (same_core, same_l3, same_numa, same_socket, "
        "other_socket, other_node), one line per stack/transport and region, computed from the samples "
        "(cells of different mappings with the same region are pooled). Dashed vertical rules mark the node's "
        "L1d, L2 and L3 cache sizes: a latency step or bandwidth drop near one is a message that stops fitting "
        "in that cache.")]
    if "region" not in smp.columns:
        blocks.append(Notice("The samples carry no region column (tables written before regions were recorded): "
                             "every series is \"unknown\".", "warn"))
    regions = set(points.get_column("region").to_list())
    if len(regions) == 1:
        blocks.append(Text(f"Only region {next(iter(regions))} was measured: one line per stack/transport.",
                           cls="muted"))
    lines = cache_lines(data.provenance)
    if not lines:
        blocks.append(Notice("No cache sizes in the provenance topology: no cache reference lines.", "info"))
    for bench in REGION_BENCHMARKS:
        pts = points.filter(pl.col("benchmark") == bench)
        if pts.filter(pl.col("bytes") > 0).height == 0:
            continue
        chart, caption = region_chart(bench, pts, lines)
        blocks.append(Heading(bench))
        blocks.append(ChartBlock(chart_spec(chart), caption))
    # stats/ does not import models/: region_fits reads the fits file's JSON view of each record.
    hockney = [f.to_json() for f in data.hockney or []]
    blocks.extend(region_fit_blocks(region_fits(smp, hockney, region_loggp(data.kernel_table("loggp")))))
    blocks.extend(intra_inter_blocks(points, data.cells))
    if data.cells is not None:
        blocks.extend(pair_class_blocks(pair_class_medians(smp, data.cells)))
    return Section(TITLE, blocks, id=SECTION_ID)


def pair_class_blocks(points: pl.DataFrame) -> list[Block]:
    """PingPong by pair class (on one node / across nodes) and placement over nodes, for campaigns
    whose cells span nodes: latency at the smallest size near 4 B and bandwidth at the largest."""
    if points.height == 0 or "cross_node" not in set(points.get_column("pair_class").to_list()):
        return []
    rows: list[list[Cell]] = []
    for (stack, transport, pair, placement), g in points.group_by(["stack", "transport", "pair_class", "placement"],
                                                                  maintain_order=True):
        lat = _point_at(g, LAT_BYTES, smallest=True)
        bw = _point_at(g, BW_BYTES, smallest=False)
        rows.append([cell(f"{stack}/{transport}"), cell(pair.replace("_", "-")), cell(placement),
                     Cell(fmt_bytes(lat["bytes"])),
                     _num(_with_ci(lat["t_median_usec"], lat["t_ci_low_usec"], lat["t_ci_high_usec"])),
                     Cell(fmt_bytes(bw["bytes"])),
                     _num(_with_ci(bw["bw_median_MBps"], bw["bw_ci_low_MBps"], bw["bw_ci_high_MBps"])),
                     cell(lat["n_reps"])])
    return [Heading("PingPong by pair class"),
            Text("Where ranks 0 and 1 ran, from the hosts they reported: on one node (shared memory, or what the "
                 "transport uses there) or across nodes, per placement over nodes (block fills a node first, cyclic "
                 "deals ranks round-robin). Medians over repetitions [95 % CI]."),
            Table(["Stack/transport", "Pair", "Placement", "Latency at", "t (µs)", "Bandwidth at", "bw (MB/s)",
                   "Repetitions"], rows, caption="PingPong on one node vs across nodes, by placement")]


def _point_at(g: pl.DataFrame, wanted: int, smallest: bool) -> dict[str, Any]:
    """The row at ``wanted`` bytes, else the smallest positive (latency) or the largest (bandwidth) size."""
    exact = g.filter(pl.col("bytes") == wanted)
    if exact.height:
        return exact.row(0, named=True)
    sized = g.filter(pl.col("bytes") > 0).sort("bytes")
    return (sized if sized.height else g).row(0 if smallest else -1, named=True)


def region_fit_blocks(table: pl.DataFrame) -> list[Block]:
    """The per-region point-to-point table: Hockney λ and B with their 95 % CIs, closest region first."""
    if table.height == 0:
        return []
    loggp = "overhead_us" in table.columns

    def og(r: dict[str, Any]) -> list[Cell]:
        if not loggp:
            return []
        return [_num(_with_ci(r["overhead_us"], r["overhead_ci_low"], r["overhead_ci_high"])),
                _num(_with_ci(r["gap_us"], r["gap_ci_low"], r["gap_ci_high"]))]

    rows = [[cell(r["region"]), cell(f"{r['stack']}/{r['transport']}"), cell(r["label"]), cell(r["benchmark"]),
             _num(_with_ci(r["latency_us"], r["latency_ci_low"], r["latency_ci_high"])),
             _num(_with_ci(r["bandwidth_MBps"], r["bandwidth_ci_low"], r["bandwidth_ci_high"])), *og(r)]
            for r in table.iter_rows(named=True)]
    text = ("The Hockney fit of each series (parameters section) filed under the region of its ranks 0 and 1: "
            "the table a collective or ring model prices its hops with (mpiatlas predict reads the same "
            "region names). \"mixed\": the series' cells put ranks 0 and 1 in different regions.")
    if loggp:
        text += (" o and g: LogGP's overhead ((o_s + o_r) / 2) and gap at 4 B, measured by the loggp kernel's cells "
                 "of the same stack, transport and region (Kielmann's PRTT method), median over its trials.")
    og_heads = ["o (µs) [95 % CI]", "g (µs) [95 % CI]"] if loggp else []
    return [Heading("λ and B per region" + (", LogGP o and g" if loggp else "")), Text(text),
            Table(["Region", "Stack/transport", "Series", "Benchmark", "λ (µs) [95 % CI]", "B (MB/s) [95 % CI]",
                   *og_heads], rows, caption="Point-to-point latency and bandwidth per region")]
