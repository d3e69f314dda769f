"""Region models wherever the fit runs, on a real campaign (config/test/ring_regions.yaml: Intel MPI
from PyPI, IMB PingPong per region, the ring kernel at P = 2; ~1 min here).

Each cell records the topology its runner pinned the ranks on (raw ``topology.json``), and the tidy
step keeps one per host (``tidy/topologies.json``). The tidy tables are then rewritten as a compute
node ``cn042`` would have written them (its hostname in the provenance and topologies): a fit run
here, on another host, still applies the region-aware ring model, priced from the campaign's own
same_l3 PingPong fit. ``mpiatlas regions --csv`` exports that table in predict's format, and
``mpiatlas fit --regions`` and ``mpiatlas predict`` read it back.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import announced_report
from conftest import EVERY_LAUNCH_COUNTS, PYPI_STACKS, campaign_workdir, require_infra, run_campaign
from mpiatlas.models.fits import FitOptions, fit_all
from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.region_latency import read_region_table
from mpiatlas.node.topology import Topology
from mpiatlas.node.topology_record import read_topologies, topology_from_record

CONFIG = "config/test/ring_regions.yaml"
OTHER_HOST = "cn042"


def _as_other_host(tidy: Path, dest: Path, host: str) -> Path:
    """``tidy`` copied with ``host`` in place of the host that ran the cells, as that host's tidy step
    would have written it (provenance hostname and rank hosts, the topologies table's key)."""
    shutil.copytree(tidy, dest)
    here = platform.node()
    records = json.loads((dest / "provenance.json").read_text())
    for record in records:
        record["hostname"] = host
        record["topology"]["hostname"] = host
        if record.get("rank_hosts"):
            record["rank_hosts"] = dict.fromkeys(record["rank_hosts"], host)
    (dest / "provenance.json").write_text(json.dumps(records))
    (record,) = json.loads((dest / "topologies.json").read_text()).values()  # one host ran the cells
    (dest / "topologies.json").write_text(json.dumps({host: {**record, "hostname": host}}))
    cells = pl.read_parquet(dest / "cells.parquet")
    cells.with_columns(pl.col("hosts").str.replace_all(here, host, literal=True)).write_parquet(dest / "cells.parquet")
    return dest


def _mpiatlas(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mpiatlas.cli", *argv], capture_output=True, text=True, check=False)


@pytest.mark.infra
def test_a_fit_under_another_host_name_applies_the_region_model(tmp_path: Path) -> None:
    from mpiatlas.stacks import get_stack

    require_infra(get_stack("intelmpi", PYPI_STACKS["intelmpi"]).is_installed(), "the PyPI Intel MPI stack")
    (tmp_path / "work").mkdir()
    work = campaign_workdir(tmp_path / "work", CONFIG, perturbation=EVERY_LAUNCH_COUNTS)  # fits need every size
    result = run_campaign(work, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = announced_report(result.stdout, work).parent

    # Every cell that ran recorded its node's topology; the tidy step kept one per host.
    ring_dirs = sorted((results / "raw/kernel/intelmpi/shm/same_l3/np2/ring/nonblocking").iterdir())
    assert len(ring_dirs) == 2
    recorded = [topology_from_record(json.loads((d / "topology.json").read_text())) for d in ring_dirs]
    topologies = read_topologies(results / "tidy/topologies.json")
    assert list(topologies) == [recorded[0].hostname] and recorded[0] == recorded[1]
    node = topologies[recorded[0].hostname or ""]
    assert isinstance(node, Topology) and node.n_cores == 2 and node.l3_domains == 1

    # The campaign's own fits: the PingPong same_l3 Hockney fit prices the ring's two same_l3 hops.
    hockney = json.loads((results / "fits/hockney.json").read_text())
    pps = [f for f in hockney if f["label"] == "intelmpi/shm/same_l3" and f["benchmark"] == "PingPong"]
    assert len(pps) == 1, [(f["label"], f["benchmark"]) for f in hockney]
    pp = pps[0]
    lam, bw = pp["latency_us"], HockneyRecord.from_json(pp).model_bandwidth_MBps  # the region table's B: the model's (its last segment's)

    def expected_us(nbytes: int) -> float:  # P · m · φ · (λ + s/B), P = 2, m = 2 streams, φ = 1 (nonblocking)
        return 2 * 2 * 1 * (lam + nbytes / bw)

    # Written as cn042 would have written them, fitted here (another host): the model applies.
    other = _as_other_host(results / "tidy", tmp_path / "cn042_tidy", OTHER_HOST)
    assert platform.node() != OTHER_HOST
    fits = fit_all(other, FitOptions(models=("hockney", "kernels")))
    (ring,) = fits.kernel("ring")
    assert ring["region_model"] is not None and ring["region_model"]["latency_us"] == {"same_l3": pytest.approx(lam)}
    points = {p["bytes"]: p for p in ring["points"]}
    assert sorted(points) == [4, 4096]
    for nbytes, p in points.items():
        assert p["slowest_region"] == "same_l3" and p["boundary_hops"] == 0
        assert p["region_predicted_us"] == pytest.approx(expected_us(nbytes), rel=1e-9)
    assert not [n for n in fits.problems if "region-aware" in n]

    # Without the recorded topologies (a campaign tidied before they were recorded), this host
    # cannot place cn042's ranks: the model is left out and says why.
    (other / "topologies.json").unlink()
    (ring,) = fit_all(other, FitOptions(models=("hockney", "kernels"))).kernel("ring")
    assert ring["region_model"] is None and all(p["region_predicted_us"] is None for p in ring["points"])

    # mpiatlas regions --csv: the campaign's region table in predict's format, read back by its reader.
    csv = tmp_path / "regions.csv"
    out = _mpiatlas("regions", str(results), "--csv", str(csv))
    assert out.returncode == 0, out.stderr
    table = read_region_table(csv)
    assert table.latency_us == {"same_l3": pytest.approx(lam, rel=1e-9)}
    assert table.bandwidth_MBps == {"same_l3": pytest.approx(bw, rel=1e-9)}
    text = csv.read_text()
    assert "95 % CI" in text and "intelmpi/shm/same_l3" in text

    # ... priced by mpiatlas fit --regions (on the cn042 tables, with their topologies) ...
    _as_other_host(results / "tidy", tmp_path / "cn042_again", OTHER_HOST)
    out = _mpiatlas("fit", str(tmp_path / "cn042_again"), "--model", "kernels", "--regions", str(csv), "--json")
    assert out.returncode == 0, out.stderr
    (ring,) = json.loads(out.stdout)["ring"]
    assert ring["region_model"]["source"] == str(csv)
    for p in ring["points"]:
        assert p["region_predicted_us"] == pytest.approx(expected_us(p["bytes"]), rel=1e-8)

    # ... and by mpiatlas predict on this node's shape (one L3 of two cores): a 2-rank Bcast is one
    # same_l3 message, λ + s/B.
    out = _mpiatlas("predict", str(csv), "--topology", "pack:1 l3:1 core:2 pu:1", "--collective", "bcast",
                    "--algorithm", "basic_linear", "--np", "2", "--bytes", "4096", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["predicted_us"] == pytest.approx(lam + 4096 / bw, abs=1e-6)  # printed to 6 decimals
