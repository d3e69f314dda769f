"""End to end: a tiny campaign really launches Intel MPI + IMB with 2 ranks and builds the report.

The campaign is the session's shared ``tiny_campaign`` (tests/campaign_fixtures.py): config/test/tiny.yaml,
run once for every module that needs it.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import Campaign
from conftest import run_campaign

pytestmark = pytest.mark.infra

# Everything of tiny.yaml's campaign (name: tiny) lives here, relative to its work dir.
RESULTS = "results/tiny"


@pytest.fixture(scope="module")
def campaign(tiny_campaign: Campaign) -> Path:
    """The shared tiny campaign's results/tiny, once the campaign announced its report there."""
    assert tiny_campaign.report == tiny_campaign.work / RESULTS / "report.html", tiny_campaign.result.stdout[-3000:]
    return tiny_campaign.work / RESULTS


def test_every_cell_ran_ok_with_the_requested_transport_and_binding(campaign: Path) -> None:
    cells = pl.read_parquet(campaign / "tidy/cells.parquet")
    # tiny.yaml's kernel cells are checked in test_kernel_cells.py
    assert cells.filter(pl.col("kind") == "kernel").height == 24  # ring, matsum, jacobi, pingpong, coll
    cells = cells.filter(pl.col("kind") == "imb")
    assert cells.height == 2 * 3 * 3  # transports x benchmarks x reps
    assert cells["status"].to_list() == ["ok"] * cells.height, cells.filter(pl.col("status") != "ok")
    assert cells["transport_ok"].all() and cells["binding_ok"].all()
    assert set(cells["obtained_transport"]) == {"shm", "tcp"}
    assert set(cells["obtained_binding"]) == {json.dumps({"0": [0], "1": [1]})}
    # The library the ranks ran is the stack's: Intel MPI's I_MPI_DEBUG banner, its own libmpi.
    assert set(cells["mpi_library"]) == {"intelmpi 2021.16"}
    assert {Path(p).name for p in cells["libmpi_path"]} == {"libmpi.so.12"}
    assert all(p.startswith(str((Path(__file__).parents[1] / ".stacks/intelmpi/lib").resolve()))
               for p in cells["libmpi_path"])


def test_raw_outputs_are_kept_read_only_with_provenance(campaign: Path) -> None:
    cell = campaign / "raw/imb/intelmpi/ofi-tcp/core/np2/PingPong/default/rep1"
    for name in ("stdout.txt", "stderr.txt", "provenance.json", "status.json"):
        mode = (cell / name).stat().st_mode
        assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), name
    prov = json.loads((cell / "provenance.json").read_text())
    assert prov["argv"][1:3] == ["-n", "2"] and "IMB-MPI1" in prov["argv"][3]
    assert prov["env"]["I_MPI_FABRICS"] == "ofi" and prov["env"]["FI_PROVIDER"] == "tcp"
    assert "2021.16" in prov["stack_version"]
    library = prov["mpi_library"]
    assert library["banner"].startswith("Intel(R) MPI Library, Version 2021.16") and library["version"] == "2021.16"
    assert library["banner_source"] == "I_MPI_DEBUG" and library["libmpi_soname"] == "libmpi.so.12"
    # Resolved under the launch's own LD_LIBRARY_PATH, which provenance keeps: the stack's lib first.
    assert prov["env"]["LD_LIBRARY_PATH"].split(":")[0] == str(Path(library["libmpi_path"]).parent)
    assert library["ld_library_path"] == prov["env"]["LD_LIBRARY_PATH"]
    assert prov["topology"]["cores"] >= 2


def test_fits_are_physical_and_over_the_trusted_launches(campaign: Path) -> None:
    """Each transport's PingPong fit is physical (λ > 0 in its own interval, 0 < asymptotic B ≤ peak B)
    and made of its trusted launches only; a transport whose every launch was judged perturbed (a busy
    machine) has no fit. Which transport is faster is the machine's business (issue #33), not asserted."""
    fits = json.loads((campaign / "fits/hockney.json").read_text())
    pingpong = {f["transport"]: f for f in fits if f["benchmark"] == "PingPong"}
    cells = pl.read_parquet(campaign / "tidy/cells.parquet").filter(pl.col("benchmark") == "PingPong")
    for transport in ("shm", "ofi-tcp"):
        ok = cells.filter((pl.col("transport") == transport) & (pl.col("quality") == "ok")).height
        if ok == 0:
            assert transport not in pingpong, (transport, pingpong.get(transport))
            continue
        fit = pingpong[transport]
        assert fit["n_launches"] == ok
        assert fit["latency_us"] > 0 and 0 < fit["asymptotic_bandwidth_MBps"] <= fit["peak_bandwidth_MBps"]
        lo, hi = fit["latency_ci_us"]
        assert lo <= fit["latency_us"] <= hi


def test_summary_has_three_repetitions_and_a_ci(campaign: Path) -> None:
    """Three launches per size: the trusted ones in the median (n_reps) and the perturbed ones counted
    beside it (n_perturbed); the median within its CI wherever it has one."""
    summary = pl.read_parquet(campaign / "tidy/imb_summary.parquet")
    pp = summary.filter((pl.col("benchmark") == "PingPong") & (pl.col("bytes") == 1024))
    assert pp.height <= 2
    assert ((pp["n_reps"] + pp["n_perturbed"]) == 3).all(), pp
    ci = pp.filter(pl.col("n_reps") >= 2)
    assert (ci["t_ci_low_usec"] <= ci["t_median_usec"]).all()
    assert (ci["t_median_usec"] <= ci["t_ci_high_usec"]).all()
    assert (pp["t_min_usec"] <= pp["t_median_usec"]).all()


def test_report_is_offline_and_shows_the_cells(campaign: Path) -> None:
    html = (campaign / "report.html").read_text()
    assert "<script src=\"http" not in html and "<script src='http" not in html
    assert "intelmpi/shm/core" in html and "intelmpi/ofi-tcp/core" in html


def test_rerun_redoes_nothing(tiny_campaign: Campaign) -> None:
    result = run_campaign(tiny_campaign.work, "--", "-n", timeout=900)
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr
