"""Any P over nodes on the namespace cluster (issue 24, item 1): config/test/two_node_fill.yaml through
profiles/slurm into the report.

The ring kernel with the `core` mapping over two nodes, placement block, at P = 1 .. 2 x (cores per
node), odd P included: every rank must have run on the node the plan gave it (node1 filled first),
each bound as asked, and the ring chart must draw the node boundary at P = cores + 1. The cluster
fixture and campaign helpers are tests/test_two_node.py's; the planning itself is unit-tested in
tests/test_over_nodes.py.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import EVERY_LAUNCH_COUNTS, campaign_workdir, run_campaign
from test_two_node import ONE_JOB_AT_A_TIME, PROFILE, netns_cluster  # noqa: F401 (netns_cluster: a fixture)

FILL = "config/test/two_node_fill.yaml"
RESULTS = "results/two-node-fill"
RING = "intelmpi/ofi-tcp/core-n2 [placement=block]"


@pytest.mark.infra
def test_block_ring_over_two_nodes_places_every_rank_as_planned(netns_cluster: Path, tmp_path: Path) -> None:  # noqa: F811
    # The namespace nodes share this machine's cores, so a launch's ranks compete with the other
    # node's: which launches a busy host lets through is its business, and this test checks
    # placement and plumbing over nodes with every launch counted (tests/test_two_node_mixed.py
    # keeps the trust rules, and so the later re-measure round, under SLURM).
    work = campaign_workdir(tmp_path, FILL, perturbation=EVERY_LAUNCH_COUNTS)
    done = run_campaign(work, *PROFILE, *ONE_JOB_AT_A_TIME, timeout=1500, path_prefix=netns_cluster / "bin")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = work / RESULTS
    cells = pl.read_parquet(results / "tidy" / "cells.parquet")
    ring = cells.filter((pl.col("benchmark") == "ring") & (pl.col("mapping") == "core")).sort("np", "rep")
    assert sorted(set(ring["np"])) == [1, 2, 3, 4] and set(ring["nodes"]) == {2}
    assert set(ring["status"]) == {"ok"}, ring.select("cell", "status", "reason").rows()
    assert ring["binding_ok"].to_list() == [True] * ring.height
    for row in ring.iter_rows(named=True):
        prov = json.loads((results / "raw" / row["cell"] / "provenance.json").read_text())
        cores = int(prov["topology"]["cores"])  # what each namespace node sees: the machine's cores
        np_ = int(row["np"])
        # The plan: block fills node 0's cores before node 1 ...
        assert prov["planned_nodes"] == [r // cores for r in range(np_)], row["cell"]
        # ... and every rank ran there: ranks sharing a planned node share a host, the others do not.
        hosts = json.loads(row["hosts"])
        assert sorted(hosts, key=int) == [str(r) for r in range(np_)]
        for r in range(np_):
            assert (hosts[str(r)] == hosts["0"]) == (r < cores), (row["cell"], hosts)
        assert len(set(hosts.values())) == -(-np_ // cores)
    print("ring hosts per P:", {int(r["np"]): r["hosts"] for r in ring.filter(pl.col("rep") == 0).iter_rows(named=True)})

    fits = json.loads((results / "fits" / "kernels.json").read_text())
    fit = next(f for f in fits["ring"] if f.get("label") == RING)
    cores = int(json.loads((results / "raw" / ring["cell"][0] / "provenance.json").read_text())["topology"]["cores"])
    # The placement's boundary: rank `cores` is the first on node 2.
    assert {"np": cores + 1, "region": "other_node"} in fit["boundaries"], fit["boundaries"]
    # The region-aware ring model priced the rings that cross the node, the crossing and the wrap-around.
    crossing = [p for p in fit["points"] if p["np"] == cores + 1]
    assert crossing and all((p.get("hop_regions") or {}).get("other_node") == 2 for p in crossing), crossing
    print("ring over nodes:", [(p["np"], p["bytes"], p["measured_us"], p.get("region_predicted_us"),
                                p.get("hop_regions")) for p in fit["points"]])
    _check_region_model_from_recorded_topology(results, ring, fits, fit, cores)
    html = (results / "report.html").read_text()
    # The rule's label, in the chart's embedded JSON (which escapes ≥).
    assert f"node boundary (P \\u2265 {cores + 1})" in html or f"node boundary (P ≥ {cores + 1})" in html


def _check_region_model_from_recorded_topology(results: Path, ring: pl.DataFrame, fits: dict[str, Any],
                                               fit: dict[str, Any], cores: int) -> None:
    """The fits ran here, on a host that is neither node: the region model must have been applied all
    the same, from the topology each cell's node recorded (tidy/topologies.json), not this host's."""
    here = socket.gethostname()
    hosts = {json.loads((results / "raw" / c / "provenance.json").read_text())["topology"]["hostname"]
             for c in ring["cell"]}
    assert hosts <= {"node1", "node2"} and here not in hosts, (hosts, here)
    recorded = json.loads((results / "tidy" / "topologies.json").read_text())
    assert hosts <= set(recorded), (hosts, sorted(recorded))
    assert all(recorded[h]["hostname"] == h and recorded[h]["cores"] for h in hosts)
    # Applied: a region table priced the rings (no "not applied" note, which a host mismatch would give) ...
    assert fit["region_model"] is not None and fit["region_note"] is None, fit.get("region_note")
    assert not [n for n in fits["notes"] if "region-aware ring model not applied" in n], fits["notes"]
    # ... and every ring that crosses the node has a finite region-aware prediction.
    crossing = [p for p in fit["points"] if p["np"] > cores]
    assert crossing and all(isinstance(p["region_predicted_us"], float) and math.isfinite(p["region_predicted_us"])
                            and p["region_predicted_us"] > 0 for p in crossing), crossing
