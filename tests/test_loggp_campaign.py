"""The loggp kernel run for real per region (config/test/loggp.yaml: Intel MPI shm from PyPI, IMB
PingPong and the loggp kernel under `mappings: [regions]`), then `mpiatlas regions --csv` and the
report: the region table gains o and g. Physical sanity only (positive, finite, spread, g no larger
than the round trip it is part of); never which of two live numbers is larger than the other's
counterpart elsewhere. ~1 min here."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from campaign_fixtures import announced_report
from conftest import PYPI_STACKS, campaign_workdir, require_infra, run_campaign
from mpiatlas.cli import main
from mpiatlas.models.region_latency import read_region_table
from mpiatlas.node import topology
from mpiatlas.parsers.kernels import parse_kernel_file
from mpiatlas.parsers.loggp import loggp_trials
from mpiatlas.stats.region_loggp import region_loggp

CONFIG = "config/test/loggp.yaml"


@pytest.fixture(scope="module")
def loggp_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mpiatlas.stacks import get_stack

    require_infra(get_stack("intelmpi", PYPI_STACKS["intelmpi"]).is_installed(), "the PyPI Intel MPI stack")
    work = campaign_workdir(tmp_path_factory.mktemp("loggp"), CONFIG)
    result = run_campaign(work, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return announced_report(result.stdout, work).parent


def _present_regions() -> set[str]:
    node = topology.Topology.from_sysfs()
    pairs = {topology.region(node, a.pu, b.pu) for i, a in enumerate(node.cores) for b in node.cores[i + 1:]}
    return pairs | {"same_core"}  # SMT siblings, else one cpu twice (oversubscription is on by default)


@pytest.mark.infra
def test_loggp_cells_run_per_region_with_physical_parameters(loggp_results: Path) -> None:
    cells = pl.read_parquet(loggp_results / "tidy/cells.parquet").filter(pl.col("benchmark") == "loggp")
    present = _present_regions() & set(topology.REGION_MAPPINGS)
    assert sorted(set(cells["mapping"])) == sorted(topology.REGION_MAPPINGS)
    ok = cells.filter(pl.col("status") == "ok")
    assert sorted(set(ok["mapping"])) == sorted(present) and ok.height == 2 * len(present)
    assert set(cells.filter(pl.col("status") != "ok")["status"]) <= {"unavailable"}
    assert (ok["region"] == ok["mapping"]).all()

    trials = loggp_trials(pl.read_parquet(loggp_results / "tidy/kernel_loggp.parquet"))
    assert trials.height == 2 * len(present) * 14 * 10  # cells x sizes (0, 1 .. 4 KiB) x trials
    assert trials["valid"].all()
    for name in ("rtt_usec", "prtt_burst_usec", "g_usec", "o_s_usec", "o_r_usec", "L_usec"):
        assert all(math.isfinite(v) for v in trials[name].to_list()), name
    small = trials.filter(pl.col("bytes") == 4)
    # time spent in calls: positive in every trial (one trial's g can be anything a preemption makes it)
    assert (small["o_s_usec"] > 0).all() and (small["o_r_usec"] > 0).all() and (small["rtt_usec"] > 0).all()
    # the kernel's own arithmetic, checked on what it printed
    assert ((small["g_usec"] - (small["prtt_burst_usec"] - small["rtt_usec"]) / (small["burst"] - 1)).abs()
            < 1e-9 * small["prtt_burst_usec"]).all()

    og = region_loggp(pl.read_parquet(loggp_results / "tidy/kernel_loggp.parquet"))
    # Regions with a trusted launch (a busy machine may leave a region with none: the machine's business).
    trusted_regions = set(ok.filter(pl.col("quality").fill_null("ok") == "ok")["region"])
    assert sorted(og["region"]) == sorted(trusted_regions) and set(og["bytes"]) <= {4}
    for r in og.iter_rows(named=True):
        assert r["n_cells"] in (1, 2) and r["n_trials"] == 10 * r["n_cells"]  # perturbed cells are left out
        # g is one message's share of a burst of back-to-back sends: no more than a whole round trip
        assert 0 < r["gap_us"] <= r["rtt_us"], r
        for name in ("overhead", "gap", "o_s", "o_r"):
            assert r[f"{name}_us"] > 0, (name, r)
            lo, hi = r[f"{name}_ci_low"], r[f"{name}_ci_high"]
            assert lo is not None and hi is not None and lo <= r[f"{name}_us"] <= hi, (name, r)  # a spread


@pytest.mark.infra
def test_region_table_and_report_gain_o_and_g(loggp_results: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "regions.csv"
    assert main(["regions", str(loggp_results), "--csv", str(out)]) == 0
    text = out.read_text()
    assert "region,latency_us,bandwidth_MBps,overhead_us,gap_us" in text.splitlines()
    table = read_region_table(out)
    og = {r["region"]: r for r in region_loggp(pl.read_parquet(loggp_results / "tidy/kernel_loggp.parquet"))
          .iter_rows(named=True)}
    assert set(table.overhead_us) == set(table.gap_us) == set(og) == set(table.latency_us)
    for region, r in og.items():
        assert table.overhead_us[region] == pytest.approx(r["overhead_us"], rel=1e-9)
        assert table.gap_us[region] == pytest.approx(r["gap_us"], rel=1e-9)
        assert f"{region}: o {r['overhead_us']:.3f} µs (95 % CI {r['overhead_ci_low']:.3f}–" in text
    capsys.readouterr()
    assert main(["regions", str(loggp_results)]) == 0
    printed = capsys.readouterr().out
    assert "o µs (CI)" in printed and "same_l3" in printed
    html = (loggp_results / "report.html").read_text()
    assert "λ and B per region, LogGP o and g" in html and "o (µs) [95 % CI]" in html


@pytest.mark.infra
def test_injected_fault_fails_the_loggp_cell(loggp_results: Path, tmp_path: Path) -> None:
    """--inject-fault: rank 1 corrupts one reply, rank 0's payload check must turn the cell failed."""
    from conftest import REPO
    from mpiatlas.matrix.cells import Cell
    from mpiatlas.matrix.config import load
    from mpiatlas.programs import cell_spec
    from mpiatlas.runner import run_cell

    work = loggp_results.parents[1]
    config = load(work / "config/campaign.yaml")
    present = sorted(_present_regions() & set(topology.REGION_MAPPINGS))
    spec = cell_spec(config, Cell("kernel", "intelmpi", "shm", present[0], 2, "loggp", "m0-12", 0))
    # later options win: a short run of sizes 0, 1, 2, 4 B, the fault in the first one with a payload
    spec["kernel"]["args"] = [*spec["kernel"]["args"], "--msglog", "0:2", "--trials", "2", "-i", "20",
                              "--inject-fault"]
    spec["kernel"]["build_dir"] = str(loggp_results / "kernels/intelmpi")
    spec["stack"]["prefix"] = str(REPO / ".stacks/intelmpi")
    outcome = run_cell(spec, tmp_path / "cell")
    assert outcome.status == "failed" and "report valid: false" in outcome.reason, outcome
    trials = loggp_trials(parse_kernel_file(tmp_path / "cell/stdout.txt")["loggp"])
    assert sorted(set(trials.filter(~pl.col("valid"))["bytes"])) == [1]
