"""``mpiatlas regions`` and ``mpiatlas fit --regions`` on recorded data, and the node topology each
cell records (mpiatlas.node.topology_record) as the tidy step collects it.

The recorded data: tests/data/adaptive, 8 repetitions each of IMB PingPong over Intel MPI shm and
ofi-tcp, ranks 0 and 1 on the two cores of this project's VM (one L3: region ``same_l3``). Its
cells recorded no topology.json (they ran before topologies were recorded); the tidy tests add one
written as the runner writes it.
"""

from __future__ import annotations

import json
from typing import Any
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mpiatlas.cli import main
from mpiatlas.models.fits import FitOptions, fit_all
from mpiatlas.models.region_latency import RegionTable, format_region_table, read_region_table
from mpiatlas.node.topology import Topology, TopologyError
from mpiatlas.node.topology_record import read_topologies, topology_from_record, topology_record
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.tables.tidy import tidy

DATA = Path(__file__).parent / "data"
ADAPTIVE = DATA / "adaptive" / "raw"
XEON = DATA / "sysfs" / "xeon_2s_smt_interleaved.hwloc.xml"


def _cell_dirs(raw: Path) -> list[Path]:
    return sorted(p.parent for p in raw.rglob("status.json"))


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    """A results directory of the recorded campaign: raw/ copied, tidy/ written by the tidy step."""
    results = tmp_path / "results"
    shutil.copytree(ADAPTIVE, results / "raw")
    tidy(_cell_dirs(results / "raw"), results / "tidy")
    return results


def _pingpong_fit(results: Path, transport: str) -> dict[str, Any]:
    """The PingPong fit of a transport as hockney.json holds it."""
    hockney = fit_all(results / "tidy", FitOptions(models=("hockney",), hockney_benchmarks=("PingPong",))).hockney
    (fit,) = [f.to_json() for f in hockney or [] if f.label == f"intelmpi/{transport}/core"]
    return fit


def test_regions_csv_round_trips_through_predicts_reader(campaign: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "shm.csv"
    assert main(["regions", str(campaign), "--csv", str(out), "--series", "intelmpi/shm"]) == 0
    fit = _pingpong_fit(campaign, "shm")
    table = read_region_table(out)
    assert table.latency_us == {"same_l3": pytest.approx(fit["latency_us"], rel=1e-9)}
    # The region table's B is the fit's asymptotic B (s/t at the largest size).
    # The model's B (its last segment's 1/slope): what predict prices a message with, λ + m/B.
    assert table.bandwidth_MBps == {"same_l3": pytest.approx(fit["segments"][-1]["bandwidth_MBps"], rel=1e-9)}
    # A real shared-memory PingPong on this VM: sub-µs to a few µs, GB/s.
    assert 0.05 < table.latency_us["same_l3"] < 5 and table.bandwidth_MBps["same_l3"] > 1000
    lo, hi = fit["latency_ci_us"]
    assert f"λ {fit['latency_us']:.3f} µs (95 % CI {lo:.3f}–{hi:.3f} µs)" in out.read_text()
    # To stdout: the same table.
    capsys.readouterr()
    assert main(["regions", str(campaign), "--csv", "--series", "intelmpi/ofi-tcp"]) == 0
    (tmp_path / "tcp.csv").write_text(capsys.readouterr().out)
    tcp = read_region_table(tmp_path / "tcp.csv")
    assert tcp.latency_us["same_l3"] == pytest.approx(_pingpong_fit(campaign, "ofi-tcp")["latency_us"], rel=1e-9)


def test_regions_lists_the_series_and_asks_for_one(campaign: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["regions", str(campaign)]) == 0
    printed = capsys.readouterr().out
    assert "intelmpi/shm" in printed and "intelmpi/ofi-tcp" in printed and "same_l3" in printed
    fit = _pingpong_fit(campaign, "shm")
    lo, hi = fit["latency_ci_us"]
    assert f"{fit['latency_us']:.3f} ({lo:.3f}–{hi:.3f})" in printed
    assert main(["regions", str(campaign), "--csv"]) == 2
    assert ("2 series have region fits; choose one with --series: intelmpi/ofi-tcp, intelmpi/shm"
            in capsys.readouterr().err)
    assert main(["regions", str(campaign), "--csv", "--series", "mpich/shm"]) == 2
    assert "--series mpich/shm: no region fits" in capsys.readouterr().err


def test_regions_refuses_a_directory_without_tidy_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["regions", str(tmp_path)]) == 2
    assert f"{tmp_path}: no tidy/ (nor partial/tidy/): not a campaign's results directory" in capsys.readouterr().err


def test_format_region_table_round_trips_every_column(tmp_path: Path) -> None:
    table = RegionTable({"same_l3": 0.15, "same_socket": 0.36, "other_node": 1.82}, {"same_l3": 21000.5, "other_node": 11800.0},
                        "t", {"same_l3": 0.05, "same_socket": 0.1, "other_node": 0.0}, {"same_l3": 0.01})
    path = tmp_path / "t.csv"
    path.write_text(format_region_table(table, ["a comment"]))
    assert path.read_text().splitlines()[:2] == ["# a comment", "region,latency_us,bandwidth_MBps,overhead_us,gap_us"]
    back = read_region_table(path)
    assert (back.latency_us, back.bandwidth_MBps, back.overhead_us, back.gap_us) == (
        table.latency_us, table.bandwidth_MBps, table.overhead_us, table.gap_us)


def test_fit_regions_needs_the_kernel_models_and_a_readable_table(campaign: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("region,latency_us\nsame_l4,1.0\n")
    assert main(["fit", str(campaign / "tidy"), "--regions", str(bad)]) == 2
    assert "--regions prices the ring kernel's hops: it needs --model kernels or --model all" in capsys.readouterr().err
    assert main(["fit", str(campaign / "tidy"), "--model", "kernels", "--regions", str(bad)]) == 2
    assert f"--regions: {bad}:2: unknown region 'same_l4'" in capsys.readouterr().err


# ------------------------------------------------------------------------ the recorded topology


@pytest.mark.parametrize("topo", [Topology.from_hwloc_xml(XEON), parse_synthetic("pack:2 numa:4 die:2 l3:2 core:4 pu:1")],
                         ids=["xeon-hwloc", "epyc-synthetic"])
def test_topology_record_round_trips(topo: Topology) -> None:
    back = topology_from_record(json.loads(json.dumps(topology_record(topo))))
    assert back == topo
    assert [back.core_of(c.pu).package for c in topo.cores] == [c.package for c in topo.cores]


def test_a_record_that_is_not_a_topology_names_its_source() -> None:
    with pytest.raises(TopologyError, match=r"x\.json \[cn1\]: not a topology record"):
        topology_from_record({"hostname": "cn1"}, "x.json [cn1]")


def test_tidy_keeps_one_topology_per_host(tmp_path: Path) -> None:
    """Cells of two hosts, each cell's raw directory holding its runner's topology.json: the tidy
    step writes one record per host, read back as the topologies they were."""
    raw = tmp_path / "raw"
    shutil.copytree(ADAPTIVE, raw)
    xeon = replace(Topology.from_hwloc_xml(XEON), hostname="cn001")
    epyc = replace(parse_synthetic("pack:2 numa:4 die:2 l3:2 core:4 pu:1"), hostname="cn002")
    dirs = _cell_dirs(raw)
    for i, cell in enumerate(dirs):
        cell.chmod(0o755)  # the recorded cells are sealed read-only; this copy is the test's
        (cell / "topology.json").write_text(json.dumps(topology_record(xeon if i % 2 else epyc)))
    tidy(dirs, tmp_path / "tidy")
    assert read_topologies(tmp_path / "tidy" / "topologies.json") == {"cn001": xeon, "cn002": epyc}
    # Under srun each batch job records the cores it was given: the host's record is their union.
    for i, cell in enumerate(dirs):
        given = xeon.restricted_to(c.pu for c in xeon.cores[:4]) if i % 2 else xeon.restricted_to(
            c.pu for c in xeon.cores[4:])
        (cell / "topology.json").write_text(json.dumps(topology_record(given)))
    tidy(dirs, tmp_path / "srun")
    assert read_topologies(tmp_path / "srun" / "topologies.json") == {"cn001": xeon}
    # Cells without one (recorded before topologies were): an empty table, and no topology to read.
    tidy(_cell_dirs(ADAPTIVE), tmp_path / "old")
    assert read_topologies(tmp_path / "old" / "topologies.json") == {}
    assert read_topologies(tmp_path / "nowhere.json") == {}
