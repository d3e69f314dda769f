"""Measured vs predicted over two nodes from the cells' own placement (issue #34, part 2), on the tidy
tables of a recorded two-node campaign (config/test/two_node_placement.yaml on the namespace cluster,
tests/data/two_node_placement): every P is placed from its own cell, each rank on the host it
reported and its recorded cpus, on the topology its node recorded (not this machine's), so named
rank pairs land in the right regions, and every measured P is priced."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from mpiatlas.models.measured_vs_predicted import campaign_comparison, series_placements
from mpiatlas.node.topology_record import read_topologies
from mpiatlas.report.data import load_data
from mpiatlas.report.imb import family_summary

DATA = Path(__file__).parent / "data" / "two_node_placement"
CYCLIC = "mpich/ofi-tcp/node2"  # --map-by node: rank i on node i mod 2
BLOCK = "mpich/ofi-tcp/core-n2 [placement=block]"  # node1's 2 cores first, then node2


def recorded():
    data = load_data(DATA / "tidy", DATA / "fits")
    return data, read_topologies(DATA / "tidy" / "topologies.json")


def test_named_pairs_land_in_their_regions() -> None:
    data, topologies = recorded()
    assert data.cells is not None
    notes: dict[str, list[str]] = {}
    # topo None: this machine's topology is never consulted; the cells' nodes recorded theirs.
    places, _, why = series_placements(data.cells, topologies, None, notes, data.provenance or [])
    assert why is None and not notes
    cyclic3 = places[CYCLIC].prefix(3)
    # P = 3 round-robin over 2 nodes is 2 + 1: ranks 0 and 2 share node1, rank 1 is on node2. (Read as
    # {rank: host} keys, every rank had a node of its own and 0-2 was other_node too.)
    assert cyclic3.node_of == (0, 1, 0)
    assert cyclic3.region(0, 1) == "other_node" and cyclic3.region(1, 2) == "other_node"
    # Ranks 0 and 2 share node1's two cpus: priced on cpus 0 and 1, which share the VM's one L3 (node1's
    # recorded topology), the region the on-node PingPong measured.
    assert cyclic3.cpu_of == (0, 0, 1) and cyclic3.region(0, 2) == "same_l3"
    assert cyclic3.topology.hostname in topologies
    # Block fills node1 first: at P = 3 ranks 0 and 1 share it, rank 2 is alone on node2.
    block3 = places[BLOCK].prefix(3)
    assert block3.node_of == (0, 0, 1)
    assert block3.region(0, 2) == block3.region(1, 2) == "other_node"
    # Ranks 0 and 1 were both given node1's two cpus (3 ranks, 2 shared cores): priced on one cpu each, as
    # the PingPong that measured the on-node region ran (cpus 0 and 1), not stacked on the first.
    assert block3.cpu_of[:2] == (0, 1) and block3.region(0, 1) == places[BLOCK].prefix(2).region(0, 1)
    # P = 4 is its own cell too: round-robin pairs 0-2 and 1-3 on one node each, block 0-1 and 2-3.
    pairs4 = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    on_node = {CYCLIC: {(0, 2), (1, 3)}, BLOCK: {(0, 1), (2, 3)}}
    for label, same in on_node.items():
        four = places[label].prefix(4)
        assert {pair: four.region(*pair) for pair in pairs4} == {
            pair: "same_l3" if pair in same else "other_node" for pair in pairs4}, label
    # P = 2 of each is its own cell: round-robin crosses the nodes, block stays on node1.
    assert places[CYCLIC].prefix(2).region(0, 1) == "other_node"
    assert places[BLOCK].prefix(2).region(0, 1) != "other_node"


def test_every_measured_p_over_two_nodes_is_priced() -> None:
    data, topologies = recorded()
    summary = family_summary(data, "collective")
    assert summary is not None
    comparison = campaign_comparison(summary, data.cells, data.provenance or [], data.hockney, None,
                                     topologies=topologies, calibrate=False)
    points = comparison.points
    for group in (CYCLIC, BLOCK):
        g = points.filter(pl.col("group") == group)
        assert set(g["np"].to_list()) == {2, 3, 4}, (group, comparison.note_lines())
        assert all(isinstance(p, float) and math.isfinite(p) and p > 0 for p in g["predicted_us"].to_list())
    # The scatter + recursive-doubling Bcast at P = 3 is priced on each placement's own pairs: round-robin
    # and block cross the nodes between different ranks, and the region model charges them differently.
    at3 = {(r["group"], r["algorithm"]): r["predicted_us"]
           for r in points.filter(pl.col("np") == 3).iter_rows(named=True)}
    algorithm = "scatter_recursive_doubling_allgather"
    assert at3[(CYCLIC, algorithm)] != pytest.approx(at3[(BLOCK, algorithm)], rel=0.01)
