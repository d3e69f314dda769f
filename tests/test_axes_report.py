"""The report's knob-set and off-cache sections: what they compute from a summary (pure logic)."""

from __future__ import annotations

from datetime import datetime, UTC
from typing import Any

import polars as pl
import pytest

from mpiatlas.spine.series import SeriesKey
from mpiatlas.stats.aggregate import summarize
from mpiatlas.report.blocks import ChartBlock, Details, Table
from mpiatlas.report.data import ReportData
from mpiatlas.report.sections.knobs import baseline_of, best_knob_sets, knob_rows, relative, section_knobs
from mpiatlas.report.sections.off_cache import (
    cache_rows,
    cache_sizes,
    cache_state,
    nearest_size,
    ratios,
    repetition_times,
    section_off_cache,
)

BASE = "intelmpi/shm/core"


def samples(rows: list[tuple[str, str, str, int, list[float]]], nodes: int = 1, placement: str = "") -> pl.DataFrame:
    """IMB-like samples: (benchmark, options, knobs, bytes, times of the repetitions); labels as tidy
    renders them (SeriesKey.label), on ``nodes`` nodes placed ``placement`` ("" cyclic)."""
    out = []
    for bench, options, knobs, size, times in rows:
        label = SeriesKey(stack="intelmpi", transport="shm", mapping="core", nodes=nodes, placement=placement,
                          options=options, knobs=knobs).label
        for rep, t in enumerate(times):
            out.append({"label": label, "stack": "intelmpi", "transport": "shm", "mapping": "core", "np": 2,
                        "algorithm": "default", "options": options, "knobs": knobs, "benchmark": bench,
                        "processes": 2, "bytes": size, "rep": rep, "t_usec": t, "status": "ok", "cell_status": "ok",
                        "bandwidth_MBps": size / t if bench == "PingPong" else None})
    return pl.DataFrame(out, schema_overrides={"np": pl.Int32, "processes": pl.Int32, "bandwidth_MBps": pl.Float64})


def data_of(summary: pl.DataFrame, provenance: list[dict[str, Any]] | None = None) -> ReportData:
    return ReportData(title="t", generated=datetime(2026, 1, 1, tzinfo=UTC), summary=summary,
                      provenance=provenance)


def test_summary_keeps_options_and_knob_sets_apart() -> None:
    s = summarize(samples([("PingPong", "", "", 8, [1.0, 1.1, 1.2]), ("PingPong", "", "fast", 8, [0.5, 0.6, 0.7]),
                           ("PingPong", "off_cache=-1", "", 8, [2.0, 2.1, 2.2])]))
    assert s.height == 3 and sorted(s["t_median_usec"].to_list()) == [0.6, 1.1, 2.1]


def test_knob_sets_are_compared_like_algorithms() -> None:
    summary = summarize(samples([
        ("PingPong", "", "", 8, [1.0, 1.1, 1.2]), ("PingPong", "", "fast", 8, [0.5, 0.6, 0.7]),
        ("PingPong", "", "slow", 8, [3.0, 3.1, 3.2]),
        ("PingPong", "", "", 1024, [2.0, 2.0, 2.0]), ("PingPong", "", "fast", 1024, [2.0, 2.0, 2.0]),
        ("PingPong", "", "slow", 1024, [2.5, 2.6, 2.7]),
    ]))
    df = knob_rows(data_of(summary))
    assert df is not None and set(df["series"]) == {f"{BASE} · default · np=2"}
    assert baseline_of(df) == "none"
    rel = relative(df, "none").sort("bytes", "knob_set")
    assert rel.filter(pl.col("knob_set") == "fast")["relative"].to_list() == pytest.approx([0.6 / 1.1, 1.0])
    best = best_knob_sets(df, "none").sort("bytes")
    assert best["best"].to_list() == ["fast", "none"]  # a tie goes to the baseline
    first = best.row(0, named=True)
    assert first["t_best"] == pytest.approx(0.6) and first["t_default"] == pytest.approx(1.1)
    assert first["speedup"] == pytest.approx(1.1 / 0.6) and first["separated"] is True
    assert first["best_ci_low"] <= 0.6 <= first["best_ci_high"] < 1.0
    section = section_knobs(data_of(summary))
    assert section is not None and any(isinstance(b, ChartBlock) for b in section.blocks)
    table = next(b for b in section.blocks if isinstance(b, Details)).blocks[0]
    assert isinstance(table, Table) and [r[2].text for r in table.rows] == ["fast", "none"]


def test_a_knob_series_over_nodes_placed_block_meets_its_baseline() -> None:
    """The label renders the placement after the knob set (``core-n2 [knobs=fast] [placement=block]``):
    the series is the label without exactly its knob part, so the knob set and its baseline are one series."""
    summary = summarize(samples([("PingPong", "", "", 8, [1.0, 1.1, 1.2]), ("PingPong", "", "fast", 8, [0.5, 0.6, 0.7])],
                                nodes=2, placement="block"))
    assert set(summary["label"]) == {"intelmpi/shm/core-n2 [placement=block]",
                                     "intelmpi/shm/core-n2 [knobs=fast] [placement=block]"}
    df = knob_rows(data_of(summary))
    assert df is not None and set(df["series"]) == {"intelmpi/shm/core-n2 [placement=block] · default · np=2"}
    best = best_knob_sets(df, baseline_of(df))
    assert best["best"].to_list() == ["fast"] and best["speedup"].to_list() == pytest.approx([1.1 / 0.6])


def test_off_cache_series_keep_knob_sets_apart() -> None:
    """In and off cache is compared within one knob set: only the options part leaves the label."""
    in_cache = {"": 100.0, "fast": 50.0}  # µs by knob set; off cache takes twice as long
    rows = [("PingPong", options, knobs, 2**19, [t_in * factor] * 3)
            for knobs, t_in in in_cache.items() for options, factor in (("", 1), ("off_cache=-1", 2))]
    df = cache_rows(data_of(summarize(samples(rows))))
    assert df is not None
    medians = {(r["series"], r["cache"]): r["t_median_usec"] for r in df.iter_rows(named=True)}
    assert medians == {(f"{BASE} · default · np=2", "in cache"): 100.0,
                       (f"{BASE} · default · np=2", "off cache (-1)"): 200.0,
                       (f"{BASE} [knobs=fast] · default · np=2", "in cache"): 50.0,
                       (f"{BASE} [knobs=fast] · default · np=2", "off cache (-1)"): 100.0}


def test_without_none_the_first_set_is_the_baseline_and_no_knobs_no_section() -> None:
    summary = summarize(samples([("PingPong", "", "a", 8, [1.0, 1.0]), ("PingPong", "", "b", 8, [0.5, 0.5])]))
    df = knob_rows(data_of(summary))
    assert df is not None and baseline_of(df) == "a"
    assert best_knob_sets(df, "a")["best"].to_list() == ["b"]
    plain = summarize(samples([("PingPong", "", "", 8, [1.0, 1.0])]))
    assert knob_rows(data_of(plain)) is None and section_knobs(data_of(plain)) is None


def test_off_cache_rows_ratios_and_cache_sizes() -> None:
    rows = []
    for size in (2**18, 2**19, 2**20, 2**25):
        rows += [("PingPong", "", "", size, [size / 4000] * 3), ("PingPong", "off_cache=-1", "", size, [size / 2000] * 3),
                 ("Alltoall", "", "", size, [size / 1000] * 3), ("Alltoall", "off_cache=-1", "", size, [size / 500] * 3)]
    raw = samples(rows)
    summary = summarize(raw)
    prov = [{"topology": {"cache_sizes": {"L1d": 32768, "L2": 524288, "L3": 33554432}}},
            {"topology": {"cache_sizes": {"L2": 524288}}}, {"topology": None}]
    data = data_of(summary, prov)
    data.samples = raw
    assert cache_sizes(data) == {"L2": [524288], "L3": [33554432]}
    df = cache_rows(data)
    assert df is not None and set(df["cache"]) == {"in cache", "off cache (-1)"}
    assert set(df["series"]) == {f"{BASE} · default · np=2"}
    # Alltoall has no IMB bandwidth: message size / time (bytes per µs = MB/s).
    alltoall = df.filter((pl.col("benchmark") == "Alltoall") & (pl.col("cache") == "in cache"))
    assert alltoall["bw"].to_list() == pytest.approx([1000.0] * 4)
    found = {(r["level"], round(r["t_ratio"], 6), round(r["bw_ratio"], 6), r["bytes"])
             for r in ratios(df.filter(pl.col("benchmark") == "PingPong"), cache_sizes(data))}
    assert found == {("L2", 2.0, 0.5, 2**19), ("L3", 2.0, 0.5, 2**25)}
    # The latency ratio's CI resamples the repetitions of both sides (mpiatlas compare's bootstrap).
    spread = samples([("PingPong", "", "", 2**19, [100.0, 110.0, 120.0, 130.0]),
                      ("PingPong", "off_cache=-1", "", 2**19, [200.0, 230.0, 260.0, 290.0])])
    spread_data = data_of(summarize(spread), prov)
    spread_data.samples = spread
    times = repetition_times(spread_data, ["PingPong"])
    (l2,) = [r for r in ratios(cache_rows(spread_data), cache_sizes(spread_data), times) if r["level"] == "L2"]
    low, high = l2["t_ratio_ci"]
    assert l2["t_ratio"] == pytest.approx(245 / 115) and 200 / 130 <= low < l2["t_ratio"] < high <= 290 / 100
    section = section_off_cache(data)
    assert section is not None and sum(isinstance(b, Table) for b in section.blocks) == 2
    table = next(b for b in section.blocks if isinstance(b, Table))
    assert [c.text for c in table.rows[0]][3:6] == ["512 KiB", "2.00", "[2.00, 2.00]"]


def test_cache_state_and_nearest_size() -> None:
    assert cache_state("") == "in cache" and cache_state("off_cache=4,sync=off") == "off cache (4)"
    assert nearest_size([2**18, 2**20], 2**19) == 2**18  # equally far: the first
    assert nearest_size([2**10, 2**12], 2**25) is None  # more than a factor 2 away: not measured
    plain = summarize(samples([("PingPong", "", "", 8, [1.0, 1.0])]))
    assert cache_rows(data_of(plain)) is None and section_off_cache(data_of(plain)) is None
