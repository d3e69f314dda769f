"""The trust paragraph the Findings open with (issue #23): exact sentences from synthetic tables that
carry the quality columns, robustness to tables written before them, and the section's order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.hockney import fit_hockney
from mpiatlas.report.blocks import Bullets, Text
from mpiatlas.report.data import load_data
from mpiatlas.report.sections.findings import section_findings
from mpiatlas.report.trust import fit_intervals, launches, noisy_points, trust

SIZES = 2.0 ** np.arange(0, 23)


def cells(quality: list[str] | None = None, remeasured: list[int] | None = None) -> pl.DataFrame:
    n = len(quality or remeasured or [])
    d: dict[str, list] = {"cell": [f"imb-c{i}" for i in range(n)], "status": ["ok"] * n, "reason": [None] * n}
    if quality is not None:
        d["quality"] = quality
        d["quality_reason"] = [None if q == "ok" else f"load {i}.0 on the node during the run" for i, q in
                               enumerate(quality)]
    if remeasured is not None:
        d["remeasured"] = remeasured
    return pl.DataFrame(d, schema_overrides={"reason": pl.String, "quality_reason": pl.String})


def summary(quality: list[str] | None) -> pl.DataFrame:
    sizes = [4, 1024, 4 * 2**20]
    d: dict[str, list] = {"benchmark": ["PingPong"] * 3, "label": ["impi/shm/core"] * 3, "np": [2] * 3,
                          "algorithm": [None] * 3, "bytes": sizes, "t_median_usec": [0.3, 0.6, 200.0]}
    if quality is not None:
        d["quality"] = quality
        d["quality_reason"] = [None if q == "ok" else "CV 41 % after 2 re-measurements" for q in quality]
    return pl.DataFrame(d, schema_overrides={"algorithm": pl.String, "quality_reason": pl.String})


def test_perturbed_and_remeasured_launches_are_counted_and_named() -> None:
    """Each sentence counts one named thing, and the counts add up: 4 cells whose final launches are
    ok, perturbed, ok, perturbed, after 2 + 1 attempts set aside: 7 launches judged, 5 perturbed
    (3 set aside + 2 final), 2 cells re-measured, 2 final launches still perturbed."""
    c = cells(["ok", "perturbed", "ok", "perturbed"], [0, 2, 1, 0])
    assert launches(c) == [
        "Launches judged: 7 (4 final launches of 4 cells, and 3 set aside).",
        "Perturbed: 5 of the 7 launches judged (3 set aside, 2 final).",
        "Re-measured: 2 cells, whose 3 perturbed launches were set aside and launched again.",
        "Still perturbed: 2 of the 4 final launches, left out of every median, fit and finding: imb-c1 (load 1.0 "
        "on the node during the run); imb-c3 (load 3.0 on the node during the run).",
    ]


def test_issue_33_first_look_counts_do_not_contradict() -> None:
    """The first look that said "No launch was perturbed" and then "15 attempts set aside": 150 cells,
    every final launch ok, 15 of them re-measured once. Now: 165 judged, 15 perturbed (all set aside),
    15 cells re-measured, none still perturbed."""
    c = cells(["ok"] * 150, [1] * 15 + [0] * 135)
    assert launches(c) == [
        "Launches judged: 165 (150 final launches of 150 cells, and 15 set aside).",
        "Perturbed: 15 of the 165 launches judged (15 set aside, 0 final).",
        "Re-measured: 15 cells, whose 15 perturbed launches were set aside and launched again.",
        "Still perturbed: none of the final launches.",
    ]


def test_clean_launches_say_so_and_many_perturbed_are_counted() -> None:
    assert launches(cells(["ok"] * 3, [0, 0, 0])) == ["Launches judged: 3 (3 final launches of 3 cells, and 0 set aside).",
                                                     "Perturbed: 0 of the 3 launches judged.",
                                                     "Still perturbed: none of the final launches."]
    many = launches(cells(["perturbed"] * 5))
    assert many[-1].startswith("Still perturbed: 5 of the 5 final launches") and many[-1].endswith("; … and 2 more.")
    unknown = launches(cells(["ok", "unknown"], [0, 0]))
    assert unknown[-1] == "Unknown: 1 final launch judged without evidence (no machine record), left out like perturbed ones."


def test_tables_without_quality_columns_do_not_claim_clean() -> None:
    """Results written before the quality columns: the paragraph says the checks were not recorded."""
    old = pl.DataFrame({"cell": ["a", "b"], "status": ["ok", "failed"], "reason": [None, "x"]})
    assert launches(old) == ["Launch quality was not recorded for these 2 cells (results written before the "
                             "perturbation checks), so no launch is known to be clean."]
    assert noisy_points(summary(None)) == []
    assert launches(None) == [] and noisy_points(None) == []


def test_noisy_points_are_counted_with_their_reason() -> None:
    assert noisy_points(summary(["ok", "noisy", "noisy"])) == [
        "2 of 3 (series, size) points stayed noisy: PingPong impi/shm/core np=2 at 1 KiB (CV 41 % after 2 "
        "re-measurements); PingPong impi/shm/core np=2 at 4 MiB (CV 41 % after 2 re-measurements)."]
    assert noisy_points(summary(["ok"] * 3)) == ["Every one of the 3 (series, size) points is within its noise bound."]


def _fit(label: str, times: np.ndarray, benchmark: str = "PingPong") -> dict:
    return {"label": label, "benchmark": benchmark, "np": 2, **fit_hockney(SIZES, times, seed=1).to_dict()}


def test_fit_intervals_name_the_widest_first() -> None:
    """A clean fit (λ 1.5 µs, B 10 GB/s, 1 % noise) and one whose large sizes spread 50 %: the widest
    intervals sentence starts with the noisy fit's asymptotic B (s/t at the largest size, one of the
    spread sizes), its figures formatted as the report does."""
    rng = np.random.default_rng(5)
    clean = _fit("a/shm/core", (1.5 + SIZES / 10_000.0) * (1 + 0.01 * rng.standard_normal(SIZES.size)))
    noisy_t = (1.5 + SIZES / 10_000.0) * np.where(SIZES >= 2**16, rng.lognormal(0, 0.6, SIZES.size), 1.0)
    noisy = _fit("b/shm/core", noisy_t)
    assert clean["ci_warning"] is None and noisy["ci_warning"] is not None
    # fit_intervals reads typed records: the entries as fits/hockney.json holds them.
    warned, widest = fit_intervals([HockneyRecord.from_json(json.loads(json.dumps(f))) for f in (clean, noisy)])
    assert warned == "1 of 2 fits carry a warning (see Model parameters): IMB PingPong b/shm/core np=2."
    assert widest.startswith("Widest 95 % intervals (")
    first = widest.split(": ", 1)[1].split("; ")[0]
    # Both bandwidths of the noisy fit are intervals of their own, each named; the widest comes first.
    figure = "peak" if first.startswith("peak B") else "asymptotic"
    assert first.startswith(f"{figure} B of IMB PingPong b/shm/core np=2: ")
    _lo, hi = noisy[f"{figure}_bandwidth_ci_MBps"]
    assert f"{hi / noisy[f'{figure}_bandwidth_MBps'] - 1:+.0%}".replace("%", " %") in first.replace("−", "-")
    other = "asymptotic" if figure == "peak" else "peak"
    assert f"{other} B of IMB PingPong b/shm/core np=2: " in widest
    assert fit_intervals([]) == [] and fit_intervals(
        [HockneyRecord(benchmark="PingPong", label="x", error="too few sizes")]) == []


def test_findings_section_opens_with_trust(tmp_path: Path) -> None:
    """The section's first block is the trust paragraph, before the findings' bullets."""
    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    cells(["ok", "perturbed"], [1, 0]).write_parquet(tidy / "cells.parquet")
    summary(["ok", "ok", "noisy"]).with_columns(pl.lit("impi").alias("stack"), pl.lit("shm").alias("transport")) \
        .write_parquet(tidy / "imb_summary.parquet")
    rng = np.random.default_rng(2)
    (fits / "hockney.json").write_text(json.dumps(
        [{"stack": "impi", "transport": "shm", **_fit("impi/shm/core", (1.5 + SIZES / 9000.0)
                                                       * (1 + 0.01 * rng.standard_normal(SIZES.size)))}]))
    data = load_data(tidy, fits)
    assert data.cells is not None and data.summary is not None, "the report reads these tables"
    blocks = section_findings(data).blocks
    assert isinstance(blocks[0], Text) and blocks[0].text.startswith("Trust: Launches judged: 3 (")
    assert "Re-measured: 1 cell, whose 1 perturbed launch was set aside and launched again." in blocks[0].text
    assert "1 of 3 (series, size) points stayed noisy" in blocks[0].text
    assert "None of the 1 fit carries a warning." in blocks[0].text
    assert any(isinstance(b, Bullets) for b in blocks[1:])
    assert trust(None, None, None) == []
