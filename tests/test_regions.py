"""Point-to-point by region: cache-size reference lines and the intra- vs inter-node ratios."""

from __future__ import annotations

import json
from datetime import datetime, UTC
from typing import Any

import polars as pl

from mpiatlas.stats import regions
from mpiatlas.report.blocks import ChartBlock
from mpiatlas.report.charts import chart_spec
from mpiatlas.report.data import ReportData, load_data
from mpiatlas.report.render import build_sections, render_html
from mpiatlas.report.sections.regions import cache_label, region_chart, section_p2p_regions

EVIL = "<script>alert(1)</script>"
MiB4 = 4 << 20
NOW = datetime(2025, 1, 2, tzinfo=UTC)


def _samples(series: dict[tuple[str, str, str | None], dict[int, tuple[list[float], list[float]]]],
             **extra: Any) -> pl.DataFrame:
    """PingPong samples: (stack, transport, region) -> bytes -> (t per rep, bandwidth per rep)."""
    rows: list[dict[str, Any]] = []
    for (stack, transport, region), sizes in series.items():
        for m, (ts, bws) in sizes.items():
            for rep, (t, bw) in enumerate(zip(ts, bws)):
                rows.append({"benchmark": "PingPong", "stack": stack, "transport": transport, "region": region,
                             "mapping": "node" if region == "other_node" else "core", "bytes": m, "rep": rep,
                             "t_usec": t, "bandwidth_MBps": bw, "status": "ok", **extra})
    return pl.DataFrame(rows, schema_overrides={"region": pl.String, "bytes": pl.Int64})


def _pp(t4: list[float], bw4m: list[float]) -> dict[int, tuple[list[float], list[float]]]:
    # Times and bandwidths consistent with each other (PingPong: bw = m / t).
    return {4: (t4, [4 / t for t in t4]), MiB4: ([MiB4 / b for b in bw4m], bw4m)}


# Medians chosen so every ratio is an exact binary fraction.
HAND = {
    ("A", "shm", "same_l3"): _pp([1.0, 1.1, 0.9], [10000.0, 9000.0, 11000.0]),  # t 1.0, bw 10000
    ("A", "tcp", "same_l3"): _pp([3.0, 3.3, 2.7], [5000.0, 4000.0, 6000.0]),  # t 3.0, bw 5000
    ("A", "tcp", "other_socket"): _pp([3.5, 3.6, 3.4], [4800.0, 4700.0, 4900.0]),  # slower than same_l3
    ("A", "tcp", "other_node"): _pp([6.0, 6.6, 5.4], [2500.0, 2000.0, 3000.0]),  # t 6.0, bw 2500
    ("B", "shm", "same_l3"): _pp([0.5, 0.5, 0.6], [9000.0, 9000.0, 9100.0]),  # intra only: no row
}


def test_intra_inter_ratios_are_exact() -> None:
    table = regions.intra_inter(regions.region_medians(_samples(HAND)))
    rows = {r["comparison"]: r for r in table.iter_rows(named=True)}
    assert table.get_column("stack").to_list() == ["A", "A"]
    same_t, same_s = rows["same transport"], rows["same stack"]
    # Same transport: tcp's fastest intra region (same_l3, not other_socket) vs tcp across nodes.
    assert (same_t["intra_transport"], same_t["intra_region"]) == ("tcp", "same_l3")
    assert (same_t["inter_transport"], same_t["inter_region"]) == ("tcp", "other_node")
    assert (same_t["lat_bytes"], same_t["bw_bytes"]) == (4, MiB4)
    assert (same_t["lat_intra_us"], same_t["lat_inter_us"], same_t["lat_ratio"]) == (3.0, 6.0, 2.0)
    assert (same_t["bw_intra_MBps"], same_t["bw_inter_MBps"], same_t["bw_ratio"]) == (5000.0, 2500.0, 2.0)
    # Same stack: the stack's fastest intra-node series is shared memory.
    assert (same_s["intra_transport"], same_s["intra_region"], same_s["inter_transport"]) == ("shm", "same_l3", "tcp")
    assert same_s["lat_ratio"] == 6.0 and same_s["bw_ratio"] == 4.0
    # The ratio ranges come from the medians' bootstrap CIs and contain the ratio.
    for r in (same_t, same_s):
        assert r["lat_ratio_low"] <= r["lat_ratio"] <= r["lat_ratio_high"]
        assert r["bw_ratio_low"] <= r["bw_ratio"] <= r["bw_ratio_high"]
        assert r["lat_intra_ci_low"] <= r["lat_intra_us"] <= r["lat_intra_ci_high"]


def test_intra_inter_one_row_when_the_best_intra_series_is_the_network_transport() -> None:
    hand = {("C", "ucx", "same_l3"): _pp([0.8, 0.8, 0.9], [8000.0] * 3),
            ("C", "ucx", "other_node"): _pp([2.0, 2.0, 2.1], [4000.0] * 3),
            ("C", "ob1", "same_l3"): _pp([1.6, 1.6, 1.7], [6000.0] * 3)}
    table = regions.intra_inter(regions.region_medians(_samples(hand)))
    assert table.select("comparison", "intra_transport", "lat_ratio", "bw_ratio").rows() == [
        ("same transport = best intra", "ucx", 2.5, 2.0)]


def test_intra_inter_falls_back_to_common_sizes() -> None:
    hand = {("D", "shm", "same_numa"): {8: ([1.0] * 3, [8.0] * 3), 1024: ([4.0] * 3, [256.0] * 3)},
            ("D", "tcp", "other_node"): {8: ([4.0] * 3, [2.0] * 3), 1024: ([16.0] * 3, [64.0] * 3),
                                        2048: ([20.0] * 3, [102.4] * 3)}}
    row = regions.intra_inter(regions.region_medians(_samples(hand))).row(0, named=True)
    # No 4 B and no 4 MiB in common: smallest and largest common sizes.
    assert (row["lat_bytes"], row["lat_ratio"], row["bw_bytes"], row["bw_ratio"]) == (8, 4.0, 1024, 4.0)
    # Identical repetitions: the CI is the value itself.
    assert row["lat_intra_ci_low"] == row["lat_intra_ci_high"] == 1.0


def test_scope_uses_region_then_nodes() -> None:
    df = pl.DataFrame({"region": ["same_l3", "other_node", None, None, None],
                       "nodes": [2, 2, 1, 2, None]}, schema_overrides={"nodes": pl.Int32})
    out = regions.with_scope(df)
    # A known single-node region is intra even in a multi-node cell (ranks 0 and 1 share a node);
    # without a region, only a one-node cell is known to be intra-node; a null nodes counts as 1.
    assert out.get_column("scope").to_list() == ["intra", "inter", "intra", None, "intra"]
    assert out.get_column("region").to_list() == ["same_l3", "other_node", "unknown", "unknown", "unknown"]
    # Tables older than the nodes column: treated as single-node.
    old = regions.with_scope(pl.DataFrame({"region": [None, "other_node"]}, schema={"region": pl.String}))
    assert old.get_column("scope").to_list() == ["intra", "inter"]


def test_region_medians_skip_bad_samples_and_pool_mappings() -> None:
    df = _samples(HAND).vstack(_samples({("A", "shm", "same_l3"): {4: ([99.0], [0.04])}}, ).with_columns(
        pl.lit("failed").alias("status")))
    # A second mapping landing in the same region is the same experiment: pooled.
    df = df.vstack(_samples({("A", "shm", "same_l3"): {4: ([1.0], [4.0])}}).with_columns(pl.lit("l3").alias("mapping")))
    pts = regions.region_medians(df).filter((pl.col("stack") == "A") & (pl.col("transport") == "shm")
                                            & (pl.col("bytes") == 4))
    assert pts.select("n_reps", "t_median_usec", "mappings").row(0) == (4, 1.0, "core,l3")


def _topo(host: str, **caches: int) -> dict[str, Any]:
    return {"cell": f"c-{host}", "host": host, "topology": {"hostname": host, "cache_sizes": caches}}


def test_cache_lines_from_topology() -> None:
    prov = [_topo("n1", L1d=49152, L2=2097152, L3=33554432), _topo("n2", L1d=49152, L2=1048576, L3=33554432),
            _topo("n1", L1d=49152, L2=2097152, L3=33554432), {"cell": "no-topology"},
            {"cell": "x", "topology": {"cache_sizes": {"L2": "big", "L3": -1, "L1d": 32768.0}}}, "not a record"]
    lines = regions.cache_lines(prov)
    assert [(ln.level, ln.bytes, ln.hosts) for ln in lines] == [
        ("L1d", 32768, ("unknown host",)), ("L1d", 49152, ("n1", "n2")),
        ("L2", 1048576, ("n2",)), ("L2", 2097152, ("n1",)), ("L3", 33554432, ("n1", "n2"))]
    assert [cache_label(ln) for ln in lines] == [
        "L1d 32 KiB (unknown host)", "L1d 48 KiB (n1, n2)", "L2 1 MiB (n2)", "L2 2 MiB (n1)", "L3 32 MiB"]
    assert regions.cache_lines(None) == [] and regions.cache_lines([{"topology": None}]) == []


def _layers(spec: dict[str, Any], mark: str) -> list[list[dict[str, Any]]]:
    out = []
    for panel in spec.get("hconcat", [spec]):
        for lay in panel["layer"]:
            m = lay.get("mark")
            if (m.get("type") if isinstance(m, dict) else m) == mark:
                out.append(spec["datasets"][lay["data"]["name"]])
    return out


def test_region_chart_rules_at_cache_sizes() -> None:
    pts = regions.region_medians(_samples({("A", "shm", "same_l3"): {m: ([1.0 + m / 1e4] * 2, [m / (1.0 + m / 1e4)] * 2)
                                                                      for m in [2**k for k in range(23)]}}))
    prov = [_topo("n1", L1d=49152, L2=2097152, L3=335544320), _topo(f"n{EVIL}", L1d=32768, L2=2097152)]
    chart, caption = region_chart("PingPong", pts, regions.cache_lines(prov))
    spec = chart_spec(chart)
    # Rules in both panels at the sizes inside 1 B .. 4 MiB; the 320 MiB L3 is named in the caption only.
    for rules in _layers(spec, "rule"):
        assert sorted(r["bytes"] for r in rules) == [32768, 49152, 2097152]
    labels = sorted(r["label"] for rows in _layers(spec, "text") for r in rows)
    assert labels == sorted([f"L1d 32 KiB (n{EVIL})", "L1d 48 KiB (n1)", "L2 2 MiB"] * 2)
    assert "not drawn: L3 320 MiB" in caption and "L2 2 MiB" in caption


def _data(samples: pl.DataFrame | None, prov: list[dict[str, Any]] | None) -> ReportData:
    data = load_data(None, None, now=NOW)
    data.samples, data.provenance = samples, prov
    return data


def test_region_section_escapes_and_degrades() -> None:
    evil = {(EVIL, "shm", "same_l3"): _pp([1.0, 1.1, 0.9], [10000.0] * 3),
            (EVIL, f"tcp{EVIL}", "other_node"): _pp([6.0, 6.6, 5.4], [2500.0] * 3)}
    data = _data(_samples(evil), [_topo(f"h{EVIL}", L1d=32768), _topo("h2", L1d=49152)])
    html = render_html(data, build_sections(data, [section_p2p_regions]))
    assert EVIL not in html and "alert(1)</script>" not in html
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in html  # the stack in the table
    assert "tcp&lt;script&gt;alert(1)&lt;/script&gt; · other_node" in html
    assert "\\u003cscript\\u003e" in html  # series names and host labels in the chart data
    assert "could not be built" not in html
    assert "6.00 [" in html  # the latency ratio
    assert "emulated nodes" not in html

    # Inter-node cells on "nodes" sharing one machine: the ratio is flagged, not passed off as a network's.
    data.cells = pl.DataFrame({"stack": [EVIL, EVIL], "transport": ["shm", f"tcp{EVIL}"],
                               "benchmark": ["PingPong"] * 2, "region": ["same_l3", "other_node"],
                               "colocated": [None, True]})
    html = render_html(data, build_sections(data, [section_p2p_regions]))
    assert "emulated nodes" in html and EVIL not in html
    assert "<li>&lt;script&gt;alert(1)&lt;/script&gt;/tcp&lt;script&gt;alert(1)&lt;/script&gt;</li>" in html

    # No topology, no region column, no inter-node run: said, not fatal.
    plain = _samples({("A", "shm", None): _pp([1.0] * 3, [9000.0] * 3)}).drop("region")
    sec = section_p2p_regions(_data(plain, [{"cell": "c"}]))
    text = json.dumps([getattr(b, "text", "") for b in sec.blocks])
    assert "No cache sizes in the provenance topology" in text
    assert "no region column" in text and "Only region unknown was measured" in text
    assert "No inter-node PingPong" in text
    assert sum(isinstance(b, ChartBlock) for b in sec.blocks) == 1

    assert "imb_samples.parquet is missing" in section_p2p_regions(_data(None, None)).blocks[0].text
    other = _samples({("A", "shm", "same_l3"): _pp([1.0] * 3, [1.0] * 3)}).with_columns(
        pl.lit("Bcast").alias("benchmark"))
    assert "No PingPong or PingPing" in section_p2p_regions(_data(other, None)).blocks[0].text


def test_region_fits_file_each_hockney_fit_under_its_region() -> None:
    """Samples generated from a known λ and B per region, fitted by the real Hockney fit: the table
    lists them closest region first and recovers each region's λ and B; a series whose cells put
    ranks 0 and 1 in two regions is "mixed", not filed under either."""
    import numpy as np

    from mpiatlas.models.hockney import fit_hockney_table

    truth = {"same_l3": (0.3, 18000.0), "other_socket": (0.7, 9000.0), "other_node": (1.8, 12000.0)}
    sizes = [2**k for k in range(0, 23, 2)]
    rng = np.random.default_rng(1)
    rows = []
    for region, (lam, bw) in truth.items():
        for m in sizes:
            for rep in range(5):
                rows.append({"benchmark": "PingPong", "label": f"impi/shm/{region}", "stack": "impi", "transport": "shm",
                             "region": region, "bytes": m, "rep": rep, "status": "ok",
                             "t_usec": (lam + m / bw) * (1 + 0.01 * rng.standard_normal())})
    for rep, region in enumerate(["same_l3", "other_socket"]):
        rows += [{**r, "label": "impi/shm/mixed", "region": region, "rep": rep}
                 for r in rows if r["label"] == "impi/shm/same_l3" and r["rep"] == 0]
    samples = pl.DataFrame(rows)
    table = regions.region_fits(samples, [f.to_json() for f in fit_hockney_table(samples, ["label"])])
    assert table["region"].to_list() == ["same_l3", "other_socket", "other_node", "mixed"]
    for r in table.filter(pl.col("region") != "mixed").iter_rows(named=True):
        lam, bw = truth[r["region"]]
        assert abs(r["latency_us"] / lam - 1) < 0.05 and abs(r["bandwidth_MBps"] / bw - 1) < 0.05, r
        assert r["latency_ci_low"] <= r["latency_us"] <= r["latency_ci_high"]
    assert regions.region_fits(samples, None).height == 0
