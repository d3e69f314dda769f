"""`mappings: [regions]` run for real (config/test/regions.yaml, Intel MPI from PyPI, IMB PingPong):
the pair lands on cpus of the planned region, and regions this node lacks end `unavailable` with
the reason, not `failed`. ~30 s here."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import announced_report
from conftest import PYPI_STACKS, campaign_workdir, require_infra, run_campaign
from mpiatlas.node import topology

CONFIG = "config/test/regions.yaml"


@pytest.mark.infra
def test_each_region_pair_runs_where_the_node_has_it_and_is_unavailable_elsewhere(tmp_path: Path) -> None:
    from mpiatlas.stacks import get_stack

    require_infra(get_stack("intelmpi", PYPI_STACKS["intelmpi"]).is_installed(), "the PyPI Intel MPI stack")
    work = campaign_workdir(tmp_path, CONFIG)
    result = run_campaign(work, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = announced_report(result.stdout, work)
    results = report.parent
    node = topology.Topology.from_sysfs()
    # same_core: SMT siblings, else one cpu twice (oversubscription is on by default)
    present = {topology.region(node, a.pu, b.pu) for i, a in enumerate(node.cores) for b in node.cores[i + 1:]} | {
        "same_core"}

    cells = pl.read_parquet(results / "tidy/cells.parquet")
    assert sorted(set(cells["mapping"])) == sorted(topology.REGION_MAPPINGS)
    for row in cells.iter_rows(named=True):
        if row["mapping"] in present:
            assert row["status"] == "ok", row
            pins = json.loads(row["requested_pins"])
            assert topology.region(node, pins[0], pins[1]) == row["mapping"]
            assert row["region"] == row["mapping"]
        else:
            assert row["status"] == "unavailable", row
            assert f"closest shared level is {row['mapping']}" in row["reason"]
    assert cells.filter(pl.col("status") == "ok").height == 2 * len(present & set(topology.REGION_MAPPINGS))
    html = report.read_text()
    for region in topology.REGION_MAPPINGS:
        assert region in html
