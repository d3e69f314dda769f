"""The IMB-options and knob-set axes run for real: config/test/off_cache.yaml and config/test/knobs.yaml
through ``mpiatlas campaign`` (Intel MPI from PyPI and its IMB, 2 ranks, shared memory, ~20-40 s
each), and their report sections hold the measured data."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from campaign_fixtures import announced_report
from conftest import campaign_workdir, require_infra, run_campaign
from mpiatlas.report.render import full_spec
from mpiatlas.stacks import get_stack

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.infra


def require_intel_imb() -> None:
    stack = get_stack("intelmpi", REPO / ".stacks" / "intelmpi")
    require_infra(stack.is_installed() and stack.imb_binary() is not None, "Intel MPI from PyPI with IMB-MPI1")


def run(tmp_path: Path, config: str) -> tuple[Path, str]:
    """The campaign's results directory and its report's HTML."""
    require_intel_imb()
    work = campaign_workdir(tmp_path, config)
    result = run_campaign(work, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    report = announced_report(result.stdout, work)
    return report.parent, report.read_text(encoding="utf-8")


def section_rows(html: str, sid: str) -> tuple[str, list[dict[str, Any]]]:
    """A section's HTML and every data row of its charts (datasets restored as the page does)."""
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"no section {sid!r} in the report"
    specs = json.loads(re.search(r'<script type="application/json" id="mpiatlas-specs">(.*?)</script>', html, re.S)[1])
    store = json.loads(re.search(r'<script type="application/json" id="mpiatlas-data">(.*?)</script>', html, re.S)[1])
    rows: list[dict[str, Any]] = []
    for chart_id in re.findall(r'<div id="(chart-\d+)" class="vega-target"', m.group(1)):
        for records in full_spec(specs[chart_id], store).get("datasets", {}).values():
            rows.extend(records)
    return m.group(1), rows


def test_off_cache_study_shows_both_curves_and_the_cache_sizes(tmp_path: Path) -> None:
    results, html = run(tmp_path, "config/test/off_cache.yaml")
    raw = results / "raw" / "imb" / "intelmpi" / "shm" / "core" / "np2"
    for bench in ("PingPong", "Alltoall"):
        prov = json.loads((raw / bench / "default" / "off_cache=-1" / "rep0" / "provenance.json").read_text())
        assert prov["argv"][-2:] == ["-off_cache", "-1"]
        assert "-off_cache" not in json.loads((raw / bench / "default" / "rep0" / "provenance.json").read_text())["argv"]
    text, rows = section_rows(html, "off-cache")
    curves = [r for r in rows if "cache" in r and "t_median_usec" in r]
    sizes = [2**k for k in range(23)]  # msglog 0:22, the 0-byte row is not on a log axis
    for bench_series in {r["series"] for r in curves}:
        assert bench_series == "intelmpi/shm/core · default · np=2"
    for state in ("in cache", "off cache (-1)"):
        points = [r for r in curves if r["cache"] == state]
        # Two charts (latency and bandwidth) per benchmark, each with every size.
        assert sorted({r["bytes"] for r in points}) == sizes
        assert all(r["t_median_usec"] > 0 and r["bw"] > 0 and r["n_reps"] == 2 for r in points)
    rules = {(r["level"], r["bytes"]) for r in rows if "level" in r}
    caches = json.loads((raw / "PingPong" / "default" / "rep0" / "provenance.json").read_text())["topology"]["cache_sizes"]
    expected = {(level, caches[level]) for level in ("L2", "L3") if level in caches}
    require_infra(bool(expected), "a machine reporting its L2/L3 cache sizes")
    assert rules == expected
    # The ratio tables name the cache levels and give a measured ratio where the size was measured.
    assert "off-cache / in-cache ratios at the cache sizes" in text
    l2 = caches.get("L2")
    if l2 and l2 <= 2**22:
        m = re.search(r"<td>L2 \([^)]*\)</td>\s*<td>[^<]+</td>\s*<td class=\"num\">([0-9.]+)</td>", text)
        assert m and math.isfinite(float(m.group(1))) and float(m.group(1)) > 0


def test_knob_comparison_runs_each_set_and_compares_them(tmp_path: Path) -> None:
    results, html = run(tmp_path, "config/test/knobs.yaml")
    raw = results / "raw" / "imb" / "intelmpi" / "shm" / "core" / "np2"
    for bench in ("PingPong", "Allreduce"):
        for name, value in (("tuning-auto", "auto"), ("tuning-none", "none")):
            cell = raw / bench / "default" / f"knobs={name}" / "rep0"
            prov = json.loads((cell / "provenance.json").read_text())
            assert prov["knobs"]["name"] == name and prov["knobs"]["env"] == {"I_MPI_TUNING_MODE": value}
            assert prov["env"]["I_MPI_TUNING_MODE"] == value
            # Intel MPI echoes the variables it read (I_MPI_DEBUG=5): the knob reached the ranks.
            assert f"I_MPI_TUNING_MODE={value}" in (cell / "stdout.txt").read_text() + (cell / "stderr.txt").read_text()
        baseline = raw / bench / "default" / "rep0"
        assert "knobs" not in json.loads((baseline / "provenance.json").read_text())
    text, rows = section_rows(html, "knobs")
    heat = [r for r in rows if "knob_set" in r]
    sets = {r["knob_set"] for r in heat}
    assert sets == {"none", "tuning-auto", "tuning-none"}
    for knob_set in sets:
        measured = [r for r in heat if r["knob_set"] == knob_set]
        assert {r["bytes"] for r in measured} >= {0, 4, 65536}
        assert all(r["t_median_usec"] > 0 and r["relative"] > 0 for r in measured)
    assert all(r["relative"] == 1 for r in heat if r["knob_set"] == "none")
    # The fastest set per size, with its CI, for both benchmarks.
    # msglog 0:16: 0 and 2^0..2^16 bytes; a reduction starts at one float (4 bytes).
    for bench, points in (("PingPong", 18), ("Allreduce", 16)):
        assert f"{bench}: fastest knob set per series and size ({points} rows)" in text
    cells = re.findall(r"<td>intelmpi/shm/core · default · np=2</td>\s*<td>[^<]+</td>\s*<td>([^<]+)</td>", text)
    assert cells and set(cells) <= sets
