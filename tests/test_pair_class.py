"""Pair class and placement: the cells table says where ranks 0 and 1 ran (on one node or across
nodes, from their hosts) and how ranks were placed over nodes; the report's regions section shows
PingPong by pair class."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from mpiatlas.stats.regions import pair_class_medians
from mpiatlas.report.build import build_report
from mpiatlas.spine.cell_row import CellRow
from mpiatlas.tables.tidy import CELL_SCHEMA, missing_row, pair_class, placement_of

LABEL = "intelmpi/shm+ofi-tcp/node2"


def test_pair_class_from_hosts_else_from_the_plan() -> None:
    assert pair_class({"0": "node1", "1": "node1", "2": "node2"}, 4, 2, "block") == "on_node"
    assert pair_class({"0": "node1", "1": "node2"}, 4, 2, "block") == "cross_node"  # hosts win over the plan
    assert pair_class(None, 2, 1, None) == "on_node"
    assert pair_class(None, 4, 2, "cyclic") == "cross_node"
    assert pair_class(None, 4, 2, "block") is None  # rank 1's node depends on ranks per node
    assert pair_class({"0": "node1"}, 1, 1, None) is None  # no pair
    assert (placement_of("", 2), placement_of("block", 2), placement_of("", 1)) == ("cyclic", "block", None)
    row = missing_row("imb/intelmpi/shm+ofi-tcp/node2/np4/PingPong/default/placement=block/rep0")
    assert (row["placement"], row["pair_class"]) == ("block", None)
    assert set(row) == set(CELL_SCHEMA)
    # The typed row (spine.cell_row.CellRow) has exactly the cells table's columns.
    assert CellRow.__required_keys__ == set(CELL_SCHEMA) and not CellRow.__optional_keys__


def _tables(tmp_path: Path) -> Path:
    """Two placements of one transport over 2 nodes, 3 repetitions each, 4 B and 4 MiB."""
    cells, samples = [], []
    # (placement, pair class, t at 4 B, t at 4 MiB) per repetition
    series = {"block": ("on_node", [6.0, 7.0, 6.5], [900.0, 950.0, 925.0]),
              "cyclic": ("cross_node", [23.0, 25.0, 24.0], [4200.0, 4000.0, 4100.0])}
    for placement, (pair, small, large) in series.items():
        for rep in range(3):
            seg = "placement=block/" if placement == "block" else ""
            cell_id = f"imb/intelmpi/shm+ofi-tcp/node2/np4/PingPong/default/{seg}rep{rep}"
            row = dict.fromkeys(CELL_SCHEMA)
            row.update(cell=cell_id, stack="intelmpi", transport="shm+ofi-tcp", mapping="node", np=4,
                       benchmark="PingPong", algorithm="default", rep=rep, status="ok", kind="imb", nodes=2, ppn=2,
                       placement=placement, pair_class=pair)
            cells.append(row)
            for size, t in ((4, small[rep]), (4 << 20, large[rep])):
                samples.append({"cell_quality": "ok", "cell": cell_id, "label": LABEL + (" [placement=block]" if seg else ""),
                                "stack": "intelmpi", "transport": "shm+ofi-tcp", "mapping": "node", "np": 4,
                                "benchmark": "PingPong", "algorithm": "default", "rep": rep, "bytes": size,
                                "t_usec": t, "bandwidth_MBps": size / t, "nodes": 2, "ppn": 2, "region": None, "status": "ok"})
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    pl.DataFrame(cells, schema=CELL_SCHEMA).write_parquet(tidy / "cells.parquet")
    pl.DataFrame(samples).write_parquet(tidy / "imb_samples.parquet")
    return tidy


def test_pingpong_medians_by_pair_class_and_placement(tmp_path: Path) -> None:
    tidy = _tables(tmp_path)
    points = pair_class_medians(pl.read_parquet(tidy / "imb_samples.parquet"), pl.read_parquet(tidy / "cells.parquet"))
    small = {(r["pair_class"], r["placement"]): r["t_median_usec"]
             for r in points.filter(pl.col("bytes") == 4).iter_rows(named=True)}
    assert small == {("cross_node", "cyclic"): pytest.approx(24.0), ("on_node", "block"): pytest.approx(6.5)}
    large = points.filter((pl.col("bytes") == 4 << 20) & (pl.col("pair_class") == "cross_node"))
    assert large["bw_median_MBps"][0] == pytest.approx((4 << 20) / 4100.0)
    assert set(points["n_reps"]) == {3}


def test_the_report_shows_pingpong_by_pair_class(tmp_path: Path) -> None:
    html = build_report(_tables(tmp_path), None, tmp_path / "report.html").read_text()
    section = html[html.index("PingPong by pair class"):]
    section = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section[:section.index("</table>")]))
    assert "intelmpi/shm+ofi-tcp on-node block 4 B 6.5" in section, section
    assert "intelmpi/shm+ofi-tcp cross-node cyclic 4 B 24" in section, section
