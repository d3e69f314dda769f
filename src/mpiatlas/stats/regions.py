"""Point-to-point results by hardware region: cache sizes, per-region medians, intra/inter-node ratios.

Pure functions on the tidy tables and the provenance records (no report objects): the
report (:mod:`mpiatlas.report_regions`) draws and tabulates what they return.

* :func:`cache_lines` — the distinct cache sizes of the campaign's nodes (from each
  provenance record's ``topology.cache_sizes``), for reference lines on a size axis.
* :func:`region_medians` — median over repetitions (95 % bootstrap CI, the summary's own
  helper) of time and bandwidth per (benchmark, stack, transport, region, size).
* :func:`intra_inter` — per stack, the small-message latency and large-message bandwidth
  of an intra-node series against an inter-node (``other_node``) one, with their ratios.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from mpiatlas.stats.aggregate import median_ci, usable_samples
from mpiatlas.node.topology import REGIONS

__all__ = [
    "BW_BYTES",
    "INTER_REGION",
    "LAT_BYTES",
    "LOGGP_COLUMNS",
    "REGION_BENCHMARKS",
    "CacheLine",
    "cache_lines",
    "intra_inter",
    "pair_class_medians",
    "region_fits",
    "region_medians",
    "region_rank",
    "with_scope",
]

REGION_BENCHMARKS = ("PingPong", "PingPing")
INTER_REGION = "other_node"
UNKNOWN_REGION = "unknown"
LAT_BYTES = 4  # "small-message latency": the conventional 4-byte (one int) message
BW_BYTES = 4 << 20  # "large-message bandwidth": IMB's default largest size, 4 MiB
_LEVEL_ORDER = ("L1d", "L1i", "L1", "L2", "L3", "L4")


def region_rank(region: str | None) -> int:
    """Closest first (same_core … other_node), unknown regions last."""
    return REGIONS.index(region) if region in REGIONS else len(REGIONS)


# ---------------------------------------------------------------------------
# Cache sizes
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheLine:
    """One distinct cache size: ``level`` (``L1d``, ``L2``, ``L3``), size in bytes, nodes that have it.

    ``ambiguous``: the level has several distinct sizes in the campaign (heterogeneous
    nodes), so a label must say which nodes a line belongs to.
    """

    level: str
    bytes: int
    hosts: tuple[str, ...]
    ambiguous: bool = False


def _size(value: Any) -> int | None:
    # JSON may give 2097152.0; anything not a positive whole number is no cache size.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value or value <= 0 or value != int(value):  # NaN, <= 0, fractional
        return None
    return int(value)


def cache_lines(provenance: Iterable[Any] | None) -> list[CacheLine]:
    """Distinct (level, size) pairs over every record's ``topology.cache_sizes``.

    Records without a topology or cache sizes are skipped, so the result is empty when no
    node reported its caches. Sorted by level (L1d, L2, L3, …) then size.
    """
    hosts: dict[tuple[str, int], set[str]] = {}
    for rec in provenance or []:
        topo = rec.get("topology") if isinstance(rec, Mapping) else None
        if not isinstance(topo, Mapping):
            continue
        caches = topo.get("cache_sizes")
        if not isinstance(caches, Mapping):
            continue
        host = str(rec.get("host") or topo.get("hostname") or "unknown host")
        for level, value in caches.items():
            size = _size(value)
            if size is not None:
                hosts.setdefault((str(level), size), set()).add(host)
    sizes_per_level: dict[str, int] = {}
    for level, _ in hosts:
        sizes_per_level[level] = sizes_per_level.get(level, 0) + 1

    def key(item: tuple[tuple[str, int], set[str]]) -> tuple[int, str, int]:
        (level, size), _ = item
        rank = _LEVEL_ORDER.index(level) if level in _LEVEL_ORDER else len(_LEVEL_ORDER)
        return (rank, level, size)

    return [CacheLine(level, size, tuple(sorted(h)), sizes_per_level[level] > 1)
            for (level, size), h in sorted(hosts.items(), key=key)]


# ---------------------------------------------------------------------------
# Medians per region
# ---------------------------------------------------------------------------


def with_scope(df: pl.DataFrame) -> pl.DataFrame:
    """Add ``scope`` (``intra`` / ``inter`` / null) and fill a missing ``region`` with ``unknown``.

    The region of the measured rank pair decides: ``other_node`` is inter-node, any other
    known region intra-node. Without a region, a cell spanning one node (``nodes`` = 1;
    tables older than the ``nodes`` column count as 1) is still known to be intra-node.
    """
    region = pl.col("region") if "region" in df.columns else pl.lit(None, dtype=pl.String)
    nodes = pl.col("nodes").fill_null(1) if "nodes" in df.columns else pl.lit(1)
    scope = (pl.when(region == INTER_REGION).then(pl.lit("inter"))
             .when(region.is_not_null() | (nodes <= 1)).then(pl.lit("intra"))
             .otherwise(pl.lit(None, dtype=pl.String)))
    return df.with_columns(scope.alias("scope"), region.fill_null(UNKNOWN_REGION).alias("region"))


def _ci(values: list[Any]) -> tuple[float, float]:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return median_ci(arr)


def region_medians(samples: pl.DataFrame, benchmarks: Sequence[str] = REGION_BENCHMARKS,
                   by: str = "region") -> pl.DataFrame:
    """Median over repetitions of t (µs) and bandwidth (MB/s) per (benchmark, stack, transport, region, bytes)
    (``by``: another column of the samples in place of region, e.g. ``pair_class``).

    Columns: the keys, ``scope``, ``n_reps``, ``t_median_usec``, ``t_ci_low_usec``,
    ``t_ci_high_usec``, ``bw_median_MBps``, ``bw_ci_low_MBps``, ``bw_ci_high_MBps`` and
    ``mappings`` (the campaign mappings merged into the series). Cells of several mappings
    that put the pair in the same region are one series: the region is the experiment.
    """
    df = usable_samples(samples)
    df = with_scope(df.filter(pl.col("benchmark").is_in(list(benchmarks)) & pl.col("bytes").is_not_null()))
    if "bandwidth_MBps" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("bandwidth_MBps"))
    mapping = pl.col("mapping").cast(pl.String) if "mapping" in df.columns else pl.lit(None, dtype=pl.String)
    keys = ["benchmark", "stack", "transport", *dict.fromkeys(["region", by]), "scope", "bytes"]
    g = (df.with_columns(pl.col("stack").cast(pl.String), pl.col("transport").cast(pl.String), mapping.alias("mapping"))
         .group_by(keys, maintain_order=True)
         .agg(pl.len().cast(pl.Int32).alias("n_reps"),
              pl.col("t_usec").median().alias("t_median_usec"),
              pl.col("bandwidth_MBps").median().alias("bw_median_MBps"),
              pl.col("mapping").drop_nulls().unique().sort().str.join(",").alias("mappings"),
              pl.col("t_usec").alias("_t"), pl.col("bandwidth_MBps").alias("_bw")))
    t_ci = [_ci(v) for v in g.get_column("_t").to_list()]
    bw_ci = [_ci(v) for v in g.get_column("_bw").to_list()]
    out = g.drop("_t", "_bw").with_columns(
        pl.Series("t_ci_low_usec", [c[0] for c in t_ci], dtype=pl.Float64),
        pl.Series("t_ci_high_usec", [c[1] for c in t_ci], dtype=pl.Float64),
        pl.Series("bw_ci_low_MBps", [c[0] for c in bw_ci], dtype=pl.Float64),
        pl.Series("bw_ci_high_MBps", [c[1] for c in bw_ci], dtype=pl.Float64),
    ).with_columns(pl.col(c).fill_nan(None) for c in ("t_ci_low_usec", "t_ci_high_usec", "bw_ci_low_MBps",
                                                      "bw_ci_high_MBps"))
    rank = pl.col("region").map_elements(region_rank, return_dtype=pl.Int32)
    return out.sort("benchmark", "stack", "transport", rank, *([by] if by != "region" else []), "bytes")


def pair_class_medians(samples: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """PingPong medians per (stack, transport, pair class, placement, bytes): ranks 0 and 1 on one
    node or across nodes (the cells table's ``pair_class``, from the hosts they ran on), whatever
    their finer region (none is planned when ranks share cores). Empty without those columns."""
    if not {"pair_class", "placement", "cell"} <= set(cells.columns) or "cell" not in samples.columns:
        return pl.DataFrame()
    classes = cells.select("cell", "pair_class", pl.col("placement").fill_null("one node")).filter(
        pl.col("pair_class").is_not_null())
    joined = samples.join(classes, on="cell", how="inner")
    if joined.height == 0:
        return pl.DataFrame()
    out = [region_medians(part, ("PingPong",), by="pair_class").with_columns(pl.lit(placement).alias("placement"))
           for (placement,), part in joined.group_by(["placement"], maintain_order=True)]
    return pl.concat(out, how="diagonal_relaxed").sort("stack", "transport", "pair_class", "placement", "bytes")


# ---------------------------------------------------------------------------
# Intra- vs inter-node
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Series:
    transport: str
    region: str
    t: dict[int, tuple[float, float | None, float | None]]  # bytes -> (median, CI low, CI high)
    bw: dict[int, tuple[float, float | None, float | None]]

    def small_latency(self, lat_bytes: int) -> float:
        """Latency used to rank series: at ``lat_bytes``, else at the smallest positive size."""
        if lat_bytes in self.t:
            return self.t[lat_bytes][0]
        pos = [b for b in self.t if b > 0]
        return self.t[min(pos)][0] if pos else float("inf")


def _series(points: pl.DataFrame, scope: str) -> list[_Series]:
    out: list[_Series] = []
    part = points.filter(pl.col("scope") == scope)
    for (transport, region), g in part.group_by(["transport", "region"], maintain_order=True):
        t = {b: (m, lo, hi) for b, m, lo, hi in g.select("bytes", "t_median_usec", "t_ci_low_usec",
                                                          "t_ci_high_usec").iter_rows() if m is not None}
        bw = {b: (m, lo, hi) for b, m, lo, hi in g.select("bytes", "bw_median_MBps", "bw_ci_low_MBps",
                                                           "bw_ci_high_MBps").iter_rows() if m is not None}
        out.append(_Series(str(transport), str(region), t, bw))
    return out


_Triple = tuple[float | None, float | None, float | None]  # (median, CI low, CI high), all None when unknown
_NONE3: _Triple = (None, None, None)
_Measured = tuple[float, float | None, float | None]  # a measured median and its CI ends


def _ratio(num: tuple[float, float | None, float | None], den: tuple[float, float | None, float | None],
           ) -> _Triple:
    """num/den and a conservative range from the two CIs (num low / den high … num high / den low)."""
    ratio = num[0] / den[0] if den[0] else None
    lo = num[1] / den[2] if num[1] is not None and den[2] else None
    hi = num[2] / den[1] if num[2] is not None and den[1] else None
    return ratio, lo, hi


def _pair_columns(prefix: str, unit: str, pair: tuple[_Measured, _Measured] | None, *,
                  slower_is_larger: bool) -> dict[str, float | None]:
    """``<prefix>_intra_<unit>``, ``<prefix>_inter_<unit>`` and ``<prefix>_ratio`` with their CI ends
    (all None without a pair); the ratio is inter / intra where a larger value is slower (a time),
    intra / inter where it is faster (a bandwidth)."""
    a: _Triple = _NONE3
    b: _Triple = _NONE3
    r: _Triple = _NONE3
    if pair is not None:
        a, b = pair
        r = _ratio(pair[1], pair[0]) if slower_is_larger else _ratio(pair[0], pair[1])
    return {f"{prefix}_intra_{unit}": a[0], f"{prefix}_intra_ci_low": a[1], f"{prefix}_intra_ci_high": a[2],
            f"{prefix}_inter_{unit}": b[0], f"{prefix}_inter_ci_low": b[1], f"{prefix}_inter_ci_high": b[2],
            f"{prefix}_ratio": r[0], f"{prefix}_ratio_low": r[1], f"{prefix}_ratio_high": r[2]}


def _pair_row(stack: str, comparison: str, intra: _Series, inter: _Series, lat_bytes: int,
              bw_bytes: int) -> dict[str, str | int | float | None] | None:
    lat_sizes = sorted(b for b in intra.t.keys() & inter.t.keys() if b > 0)
    bw_sizes = sorted(b for b in intra.bw.keys() & inter.bw.keys() if b > 0)
    if not lat_sizes and not bw_sizes:
        return None
    row: dict[str, str | int | float | None] = {"stack": stack, "comparison": comparison,
                                                "intra_transport": intra.transport, "intra_region": intra.region,
                                                "inter_transport": inter.transport, "inter_region": inter.region}
    lat = (lat_bytes if lat_bytes in lat_sizes else lat_sizes[0]) if lat_sizes else None
    bw = (bw_bytes if bw_bytes in bw_sizes else bw_sizes[-1]) if bw_sizes else None
    lat_pair = (intra.t[lat], inter.t[lat]) if lat is not None else None
    bw_pair = (intra.bw[bw], inter.bw[bw]) if bw is not None else None
    # latency: inter / intra; bandwidth: intra / inter (either way, > 1: the network is slower)
    row.update(lat_bytes=lat, **_pair_columns("lat", "us", lat_pair, slower_is_larger=True))
    row.update(bw_bytes=bw, **_pair_columns("bw", "MBps", bw_pair, slower_is_larger=False))
    return row


INTRA_INTER_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "stack": pl.String, "comparison": pl.String, "intra_transport": pl.String, "intra_region": pl.String,
    "inter_transport": pl.String, "inter_region": pl.String,
    "lat_bytes": pl.Int64, **dict.fromkeys((
        "lat_intra_us", "lat_intra_ci_low", "lat_intra_ci_high", "lat_inter_us", "lat_inter_ci_low",
        "lat_inter_ci_high", "lat_ratio", "lat_ratio_low", "lat_ratio_high"), pl.Float64),
    "bw_bytes": pl.Int64, **dict.fromkeys((
        "bw_intra_MBps", "bw_intra_ci_low", "bw_intra_ci_high", "bw_inter_MBps", "bw_inter_ci_low",
        "bw_inter_ci_high", "bw_ratio", "bw_ratio_low", "bw_ratio_high"), pl.Float64),
}


def intra_inter(points: pl.DataFrame, benchmark: str = "PingPong", lat_bytes: int = LAT_BYTES,
                bw_bytes: int = BW_BYTES) -> pl.DataFrame:
    """Intra- vs inter-node latency and bandwidth per stack, from :func:`region_medians` output.

    For each stack and each of its inter-node (``other_node``) transports:

    * ``same transport``: the transport's fastest intra-node region against its inter-node run
      (what the transport itself costs across the network);
    * ``same stack``: the stack's fastest intra-node series, whatever its transport (typically
      shared memory), against the inter-node run — what a user of the stack sees when a pair
      of ranks moves from one node to two. When that series has the inter-node transport the
      two comparisons coincide and one row (``same transport = best intra``) is given.

    "Fastest" = lowest median latency at ``lat_bytes`` (else at the smallest size). Latency is
    compared at ``lat_bytes`` (else the smallest common size > 0), bandwidth at ``bw_bytes``
    (else the largest common size). ``lat_ratio`` = inter / intra, ``bw_ratio`` = intra / inter,
    so both read "how many times worse across nodes"; ``*_low``/``*_high`` bound each ratio by
    the medians' 95 % CIs (conservative: the two CIs' extreme ends).
    """
    rows: list[dict[str, str | int | float | None]] = []
    pts = points.filter(pl.col("benchmark") == benchmark) if "benchmark" in points.columns else points

    def fastest(cands: list[_Series]) -> _Series:
        return min(cands, key=lambda s: (s.small_latency(lat_bytes), region_rank(s.region), s.transport))

    for (stack,), g in pts.sort("stack").group_by(["stack"], maintain_order=True):
        intra, inter = _series(g, "intra"), _series(g, "inter")
        if not intra or not inter:
            continue
        best = fastest(intra)
        for net in sorted(inter, key=lambda s: s.transport):
            same = [s for s in intra if s.transport == net.transport]
            pairs: list[tuple[str, _Series]] = []
            if same:
                own = fastest(same)
                pairs.append(("same transport = best intra" if own is best else "same transport", own))
            if best.transport != net.transport:
                pairs.append(("same stack", best))
            for comparison, s in pairs:
                row = _pair_row(str(stack), comparison, s, net, lat_bytes, bw_bytes)
                if row is not None:
                    rows.append(row)
    return pl.DataFrame(rows, schema=INTRA_INTER_SCHEMA)


# ---------------------------------------------------------------------------
# Hockney λ and B per region
# ---------------------------------------------------------------------------


_REGION_FIT_SCHEMA = {**dict.fromkeys(("region", "stack", "transport", "label", "benchmark"), pl.String),
                      **dict.fromkeys(("latency_us", "latency_ci_low", "latency_ci_high", "bandwidth_MBps",
                                       "bandwidth_ci_low", "bandwidth_ci_high", "n_sizes"), pl.Float64)}


def region_fits(samples: pl.DataFrame, hockney: Sequence[Mapping[str, Any]] | None,
                loggp: pl.DataFrame | None = None) -> pl.DataFrame:
    """The per-region point-to-point table: each PingPong/PingPing Hockney fit (one per label, i.e.
    stack/transport/placement) with the region its ranks 0 and 1 sat in, closest region first.

    A label whose samples span several regions (ranks placed differently from cell to cell) is
    ``mixed``: its fit pools regions and says so instead of being filed under one of them.
    ``loggp``: :func:`mpiatlas.stats.region_loggp.region_loggp`'s rows; when it has any, the table
    gains LogGP's o and g of the fit's stack, transport, knob set and region (:data:`LOGGP_COLUMNS`,
    medians over trials with 95 % CIs; null where the loggp kernel did not measure the region)."""
    if not hockney or not {"label", "region"} <= set(samples.columns):
        return pl.DataFrame(schema=_REGION_FIT_SCHEMA)
    regions = (samples.filter(pl.col("benchmark").is_in(list(REGION_BENCHMARKS)))
               .group_by("label").agg(pl.col("region").fill_null(UNKNOWN_REGION).unique().sort().alias("regions"),
                                      pl.col("stack").first(), pl.col("transport").first(),
                                      # The knob set from the samples' own column, not taken out of the label.
                                      (pl.col("knobs").fill_null("") if "knobs" in samples.columns
                                       else pl.lit("")).first().alias("knobs")))
    by_label = {r["label"]: r for r in regions.iter_rows(named=True)}
    rows = []
    for fit in hockney:
        where = by_label.get(fit.get("label"))
        if where is None or fit.get("benchmark") not in REGION_BENCHMARKS or fit.get("error"):
            continue
        lat_ci = fit.get("latency_ci_us") or [None, None]
        bw_ci = fit.get("asymptotic_bandwidth_ci_MBps") or [None, None]
        rows.append({"region": where["regions"][0] if len(where["regions"]) == 1 else "mixed",
                     "stack": where["stack"], "transport": where["transport"], "knobs": where["knobs"],
                     "label": fit["label"],
                     "benchmark": fit["benchmark"], "latency_us": fit.get("latency_us"),
                     "latency_ci_low": lat_ci[0], "latency_ci_high": lat_ci[1],
                     "bandwidth_MBps": fit.get("asymptotic_bandwidth_MBps"), "bandwidth_ci_low": bw_ci[0],
                     "bandwidth_ci_high": bw_ci[1], "n_sizes": float(fit.get("n_sizes") or 0)})
    table = pl.DataFrame(rows, schema={**_REGION_FIT_SCHEMA, "knobs": pl.String})
    table = (table.with_columns(pl.col("region").map_elements(region_rank, return_dtype=pl.Int32).alias("_rank"))
             .sort("benchmark", "_rank", "stack", "transport", "label").drop("_rank"))
    return _with_loggp_columns(table, loggp)


LOGGP_COLUMNS = ("overhead_us", "overhead_ci_low", "overhead_ci_high", "gap_us", "gap_ci_low", "gap_ci_high")


def _with_loggp_columns(table: pl.DataFrame, loggp: pl.DataFrame | None) -> pl.DataFrame:
    """``table`` with :data:`LOGGP_COLUMNS` joined on stack, transport, knob set and region; unchanged
    (not even null columns) without LogGP rows, so a campaign without loggp cells keeps its table."""
    if loggp is None or loggp.height == 0:
        return table.drop("knobs")
    keys = ["stack", "transport", "knobs", "region"]
    measured = loggp.select(*keys, *LOGGP_COLUMNS)
    return table.join(measured, on=keys, how="left", nulls_equal=True, maintain_order="left").drop("knobs")
