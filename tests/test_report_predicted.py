"""The report's "Collectives: measured against predicted" section, built from a campaign's tidy tables.

The campaign is assembled from recorded data: the ORFEO EPYC OSU Bcast medians (4 B, map-by core,
basic_linear / chain / binary_tree / default at P = 2, 4, .., 256, through the OSU importer) as the summary
of an Open MPI series, its cells pinned as Open MPI's --map-by core placed them on two 2 × EPYC 7H12 nodes,
and the region PingPong fits carrying the published EPYC per-region latencies
(tests/test_predict_orfeo.py). The report gets the node's topology as `mpiatlas report --topology` does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import test_predict_orfeo as orfeo
from test_measured_vs_predicted import _measured
from test_report import NOW, _rows, _section, _specs

from mpiatlas.models.region_latency import place
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.report.build import build_report

LABEL = "ompi/ucx/core"
NPS = [2, 4, 8, 16, 32, 64, 128, 256]
ALGORITHMS = ["basic_linear", "binary_tree", "chain", "default"]


def _campaign(root: Path) -> tuple[Path, Path]:
    tidy, fits = root / "tidy", root / "fits"
    tidy.mkdir(parents=True)
    fits.mkdir()
    measured = _measured().filter((pl.col("group") == "core") & pl.col("np").is_in(NPS))
    summary = measured.select(
        pl.lit(LABEL).alias("label"), pl.lit("ompi").alias("stack"), pl.lit("ucx").alias("transport"),
        pl.lit("core").alias("mapping"), pl.lit("Bcast").alias("benchmark"), "algorithm", pl.col("np").cast(pl.Int32),
        pl.col("np").alias("processes"), "bytes", pl.col("measured_us").alias("t_median_usec"),
        pl.lit(1, dtype=pl.Int32).alias("n_reps"), pl.lit(False).alias("oversubscribed"),
    )  # fmt: skip
    summary.write_parquet(tidy / "imb_summary.parquet")
    topo = parse_synthetic(orfeo.EPYC_TOPOLOGY)
    cells: list[dict[str, Any]] = []
    for np_ in NPS:
        placed = place(topo, np_, nodes=2, placement="block", mapping="core")
        for alg in ALGORITHMS:
            cells.append({"cell": f"bcast/{alg}/np{np_}", "stack": "ompi", "stack_kind": "openmpi", "transport": "ucx",
                          "mapping": "core", "np": np_, "benchmark": "Bcast", "algorithm": alg, "status": "ok",
                          "region": None, "requested_pins": json.dumps(list(placed.cpu_of)), "nodes": 1,
                          "hosts": json.dumps([f"epyc{n}" for n in placed.node_of])})  # fmt: skip
    fitted = []
    for region, latency in orfeo.EPYC_TABLE.latency_us.items():
        label = f"ompi/ucx/{region}"
        cells.append({"cell": f"pingpong/{region}", "stack": "ompi", "stack_kind": "openmpi", "transport": "ucx",
                      "mapping": region, "np": 2, "benchmark": "PingPong", "algorithm": "default", "status": "ok",
                      "region": region, "requested_pins": "[0, 1]", "nodes": 1, "hosts": None})  # fmt: skip
        fitted.append({"label": label, "stack": "ompi", "transport": "ucx", "mapping": region, "np": 2,
                       "algorithm": "default", "benchmark": "PingPong", "latency_us": latency})  # fmt: skip
    pl.DataFrame(cells).write_parquet(tidy / "cells.parquet")
    summary_of_node = {"hostname": "epyc0", "packages": 2, "cores": 128}
    (tidy / "provenance.json").write_text(json.dumps([{"cell": c["cell"], "topology": summary_of_node} for c in cells]))
    (fits / "hockney.json").write_text(json.dumps(fitted))
    return tidy, fits


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("predicted")
    tidy, fits = _campaign(root)
    out = build_report(tidy, fits, root / "report.html", title="EPYC <Bcast>", now=NOW, topology=orfeo.EPYC_TOPOLOGY)
    return out.read_text(encoding="utf-8")


def test_section_shows_chart_and_table(page: str) -> None:
    section = _section(page, "predicted")
    assert f"{LABEL} · bcast" in section
    table = re.search(r"<table.*?</table>", section, re.S)
    assert table, "no median |error| table"
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(0), re.S)[1:]
    assert [re.search(r"<td[^>]*>(.*?)</td>", r).group(1) for r in rows] == ALGORITHMS  # type: ignore[union-attr]
    # basic_linear under the region model: a full latency per send, far over (test_predict_orfeo: +210..+370 %).
    linear = re.findall(r"<td[^>]*>(.*?)</td>", rows[0])
    assert float(linear[3].split("%")[0]) > 150 and "(+" in linear[3] and linear[5] != "—"
    assert "Nothing is predicted" not in section


def test_chart_has_measured_and_both_predictions_per_p(page: str) -> None:
    specs = [s for s in _specs(page).values() if "hconcat" in s and "latency vs P" in json.dumps(s)]
    assert len(specs) == 1
    latency = specs[0]["hconcat"][0]
    rows = _rows(specs[0], latency)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"measured", "region model", "LogGP, calibrated on the others"}
    measured = {(r["algorithm"], r["np"]): r["t_us"] for r in rows if r["kind"] == "measured"}
    assert sorted({n for _, n in measured}) == NPS and {a for a, _ in measured} == set(ALGORITHMS)
    expected = _measured().filter((pl.col("group") == "core") & (pl.col("np") == 64) & (pl.col("algorithm") == "chain"))
    assert measured[("chain", 64)] == pytest.approx(expected.get_column("measured_us").item(), rel=1e-4)
    for r in rows:
        if r["kind"] != "measured":
            assert r["error"] == pytest.approx((r["t_us"] - r["measured_us"]) / r["measured_us"], rel=1e-3, abs=1e-4)


def test_without_region_table_the_section_says_why_once(synthetic_report: tuple[str, Any, Path]) -> None:
    html, _, _ = synthetic_report
    section = _section(html, "predicted")
    assert section.count("Nothing is predicted") == 1
    assert "no region table" in section and "cells table lacks region" in section
    assert "<table" not in section


def test_chart_is_valid_vega_lite(page: str) -> None:
    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema.core import load_schema

    specs = [s for s in _specs(page).values() if "hconcat" in s and "latency vs P" in json.dumps(s)]
    assert specs and validate_jsonschema(specs[0], load_schema(), raise_error=False) is None


def test_cells_of_another_node_are_not_placed(tmp_path: Path) -> None:
    """A topology unlike the cells' node (1 package, the provenance says 2): nothing is placed, said once."""
    tidy, fits = _campaign(tmp_path)
    out = build_report(tidy, fits, tmp_path / "report.html", now=NOW, topology="pack:1 core:4 pu:1")
    section = _section(out.read_text(encoding="utf-8"), "predicted")
    assert section.count("Nothing is predicted") == 1
    assert section.count("the cells&#39; node has 2 package(s), this topology 1") == 1
