"""A containerised campaign (hybrid model) end to end: the DAG builds the images, preflights
them against the host MPI, runs IMB inside them and names the image digest of every cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO, campaign_workdir, require_infra, run_campaign

pytestmark = pytest.mark.infra

# Where containers.yaml's campaign (name: containers) writes its cells, tables and report; the
# images are shared by every campaign (results/images, here the repo's: campaign_workdir).
RESULTS = "results/containers"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_infra(shutil.which("apptainer") is not None, "apptainer")
    require_infra(shutil.which("mpirun.openmpi") is not None, "Debian Open MPI (host launcher of the openmpi image)")
    work = campaign_workdir(tmp_path_factory.mktemp("containers"), "config/test/containers.yaml")
    result = run_campaign(work)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work


def test_containerised_cells_ran_in_the_image_with_its_digest(campaign: Path) -> None:
    cells = pl.read_parquet(campaign / RESULTS / "tidy/cells.parquet")
    impi = cells.filter(pl.col("stack") == "intelmpi")
    assert impi["status"].to_list() == ["ok", "ok"]
    assert impi["containerized"].all() and impi["transport_ok"].all() and impi["binding_ok"].all()
    record = json.loads((REPO / "results/images/intelmpi.inspect.json").read_text())
    assert set(impi["image_digest"]) == {f"sha256:{record['sha256']}"}
    prov = json.loads((campaign / RESULTS / "raw/imb/intelmpi/shm/core/np2/PingPong/default/rep0/provenance.json")
                      .read_text())
    argv = prov["argv"]
    # Hybrid: host mpirun first, then apptainer exec IMAGE IMB-MPI1 for each rank.
    assert argv[:3] == [str(REPO / ".stacks/intelmpi/bin/mpirun"), "-n", "2"]
    assert argv[3:7] == ["apptainer", "exec", str(REPO / "results/images/intelmpi.sif"), "IMB-MPI1"]


def test_open_mpi_imb_is_not_planned_with_the_reason_not_faked(campaign: Path) -> None:
    # Its image has no IMB (imb: skip): its 2 IMB cells (formerly run as `unavailable`) are not
    # planned at all, and the campaign's notes say which and why.
    cells = pl.read_parquet(campaign / RESULTS / "tidy/cells.parquet")
    assert cells.filter((pl.col("stack") == "openmpi") & (pl.col("kind") == "imb")).height == 0
    notes = json.loads((campaign / RESULTS / "tidy/notes.json").read_text())
    assert [(n["what"], n["cells"]) for n in notes] == [("IMB cells of stack 'openmpi'", 2)]  # 2 repetitions
    assert "Open MPI needs IMB built from source" in notes[0]["why"]


def test_open_mpi_ring_cells_ran_in_its_image(campaign: Path) -> None:
    cells = pl.read_parquet(campaign / RESULTS / "tidy/cells.parquet").filter(pl.col("kind") == "kernel")
    assert cells.height == 2 and cells["status"].to_list() == ["ok", "ok"], cells
    assert set(cells["stack"]) == {"openmpi"} and cells["containerized"].all()
    prov = json.loads((campaign / RESULTS / "raw" / cells["cell"][0] / "provenance.json").read_text())
    image = prov["argv"].index("apptainer")
    assert prov["argv"][image:image + 4] == ["apptainer", "exec", str(REPO / "results/images/openmpi.sif"), "ring"]


def test_preflight_passed_for_both_images(campaign: Path) -> None:
    for kind in ("intelmpi", "openmpi"):
        text = (REPO / f"results/images/{kind}.preflight.txt").read_text()
        assert text.startswith("preflight ok") and "rank 1 of 2" in text


def test_report_names_the_image_digest(campaign: Path) -> None:
    html = (campaign / RESULTS / "report.html").read_text()
    digest = json.loads((REPO / "results/images/intelmpi.inspect.json").read_text())["sha256"]
    assert digest[:12] in html
