"""Hybrid MPI + OpenMP over nodes on the namespace cluster (issue 24, item 2): config/test/two_node_hybrid.yaml
through profiles/slurm into the report.

The Jacobi kernel, pure and hybrid at equal cores, with the `core` mapping filling two nodes (core-n2,
block): on one node (2 x 1 vs 1 x 2) and over two (2 ranks per node x 1 vs 1 rank per node x 2 threads). Every cell must end ``ok``; every hybrid
rank ran on its planned node, bound to its planned cpu set, and every OpenMP thread's cpu
(``sched_getcpu`` on its host) is the one its plan gives it (the i-th cpu of its rank's set). The report
shows the hybrid-vs-pure section over 1 and 2 nodes. The cluster fixture and campaign helpers are
tests/test_two_node.py's; planning and the thread check are unit-tested in tests/test_hybrid_nodes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from conftest import campaign_workdir, run_campaign
from mpiatlas.models.jacobi_nodes import hybrid_over_nodes
from test_two_node import ONE_JOB_AT_A_TIME, PROFILE, netns_cluster  # noqa: F401 (netns_cluster: a fixture)

HYBRID = "config/test/two_node_hybrid.yaml"
RESULTS = "results/two-node-hybrid"


@pytest.mark.infra
def test_hybrid_cells_over_two_nodes_end_ok_with_every_thread_checked(netns_cluster: Path,  # noqa: F811
                                                                      tmp_path: Path) -> None:
    work = campaign_workdir(tmp_path, HYBRID)
    done = run_campaign(work, *PROFILE, *ONE_JOB_AT_A_TIME, timeout=1500, path_prefix=netns_cluster / "bin")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = work / RESULTS
    cells = pl.read_parquet(results / "tidy" / "cells.parquet")
    jacobi = cells.filter(pl.col("benchmark") == "jacobi")
    assert set(jacobi["status"]) == {"ok"}, jacobi.select("cell", "status", "reason").rows()
    assert set(jacobi["nodes"]) == {2}
    hybrid = jacobi.filter(pl.col("cell").str.contains("-t2/") & (pl.col("np") == 2))
    assert hybrid.height == 2
    table = pl.read_parquet(results / "tidy" / "kernel_jacobi.parquet")
    for row in hybrid.iter_rows(named=True):
        raw = results / "raw" / row["cell"]
        prov = json.loads((raw / "provenance.json").read_text())
        status = json.loads((raw / "status.json").read_text())
        details = status
        # The plan: a node of 2 cores holds one rank of 2 threads, so rank r on node r, owning both cpus.
        assert prov["planned_nodes"] == [0, 1] and all(len(s) == 2 for s in prov["requested_pins"]), prov
        hosts = json.loads(row["hosts"])
        assert hosts["0"] != hosts["1"], hosts
        # Every thread's cpu was checked: 2 ranks x 2 threads, each where its plan puts it.
        assert details["threads_checked"] == 4 and details["binding_ok"] is True, details
        records = table.filter(pl.col("cell") == row["cell"]).sort("rank")
        for rec in records.iter_rows(named=True):
            planned = sorted(prov["requested_pins"][rec["rank"]])
            assert rec["thread_cpus"] == planned, (row["cell"], rec["rank"], rec["thread_cpus"], planned)
            assert rec["host"] == hosts[str(rec["rank"])]
        print("hybrid over 2 nodes:", row["cell"], hosts,
              {r["rank"]: (r["host"], r["thread_cpus"], r["halo_us"], r["allreduce_us"])
               for r in records.iter_rows(named=True)})
    html = (results / "report.html").read_text()
    assert "Hybrid vs pure MPI over nodes at equal cores" in html
    study = hybrid_over_nodes(table)
    rows = {(r["nodes"], r["cores"]): r for r in study}
    # Over 1 node at 2 cores and over 2 nodes at 4: a hybrid and a pure point each, and their ratio.
    assert {(1, 2), (2, 4)} <= set(rows), sorted(rows)
    two = rows[(2, 4)]
    assert (two["hybrid"], two["pure"]) == ("1 × 2", "2 × 1"), two
    # Every hybrid cell ended ok with each of its threads checked (1 x 2 on node1 too).
    for row in jacobi.filter(pl.col("cell").str.contains("-t2/")).iter_rows(named=True):
        status = json.loads((results / "raw" / row["cell"] / "status.json").read_text())
        assert status["threads_checked"] == 2 * int(row["np"]), status
    # Weak L=16 with equal work (issue #34): 4 cores solve 2·16 × 2·16 × 16 (MPI_Dims_create(4) = 2x2x1); the
    # hybrid ranks (1 per node, rank grid 2x1x1) own 16 × 32 × 16 each and send one 32 × 16 face.
    assert two["hybrid_bytes_per_rank"] == 32 * 16 * 8
    assert two["bytes_ratio"] == pytest.approx(two["hybrid_bytes_total"] / two["pure_bytes_total"])
    print("hybrid vs pure over nodes:", json.dumps(study, indent=1))
