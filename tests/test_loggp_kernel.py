"""The loggp kernel's cells, parser and region table on recorded data (no MPI needed).

Recorded: tests/data/kernels/loggp_intelmpi_np2.txt is the stdout of one real loggp cell (Intel MPI
2021.16 shm, ranks 0 and 1 on the two cores of this project's VM: region same_l3, sizes 0 and
1 B .. 4 KiB, 10 trials each), and tests/data/loggp/raw holds the two loggp cells of that campaign
(config/test/loggp.yaml) as the runner wrote them. With tests/data/adaptive's Intel MPI shm PingPong
cells of the same VM and region, they make a campaign whose region table gains o and g.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_measured_vs_predicted import _inputs, _measured

from conftest import REPO
from mpiatlas.cli import main
from mpiatlas.matrix.config import load
from mpiatlas.models import loggp
from mpiatlas.models.fits import FitOptions, fit_all
from mpiatlas.models.measured_vs_predicted import SeriesInputs, compare
from mpiatlas.models.region_latency import read_region_table
from mpiatlas.node.topology import REGION_MAPPINGS
from mpiatlas.parsers.kernels import parse_kernel_output
from mpiatlas.parsers.loggp import PARAMETERS, LoggpParseError, loggp_trials, parse_loggp_output
from mpiatlas.programs import cell_spec, cells_of_kind
from mpiatlas.models.region_latency import with_loggp
from mpiatlas.stats.region_loggp import LOGGP_SCHEMA, LoggpRegion, loggp_by_series, region_loggp
from mpiatlas.stats.regions import LOGGP_COLUMNS, region_fits
from mpiatlas.tables.tidy import tidy

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "kernels" / "loggp_intelmpi_np2.txt"
LOGGP_RAW = DATA / "loggp" / "raw"
ADAPTIVE = DATA / "adaptive" / "raw"
SIZES = [0] + [2**k for k in range(13)]
TRIALS = 10


def test_loggp_cells_are_planned_per_region() -> None:
    config = load(REPO / "config/test/loggp.yaml")
    cells = [c for c in cells_of_kind(config, "kernel") if c.kernel == "loggp"]
    assert sorted({c.mapping for c in cells}) == sorted(REGION_MAPPINGS) and {c.np for c in cells} == {2}
    assert len(cells) == len(REGION_MAPPINGS) * 2  # a cell per region pair and repetition
    assert "kernel/intelmpi/shm/same_l3/np2/loggp/m0-12/rep1" in {c.id for c in cells}
    args = cell_spec(config, cells[0])["kernel"]["args"]
    assert args[:4] == ["--trials", "10", "--burst", "32"] and args[args.index("--msglog") + 1] == "0:12"


def test_parse_recorded_loggp_output() -> None:
    trials = parse_loggp_output(RECORDED.read_text(), RECORDED)
    assert trials.height == len(SIZES) * TRIALS and trials["valid"].all()
    assert sorted(set(trials["bytes"])) == SIZES
    assert trials.group_by("bytes").agg(pl.col("trial").sort())["trial"].to_list() == [list(range(TRIALS))] * 14
    rtt, burst, n = (trials[c].to_numpy() for c in ("rtt_usec", "prtt_burst_usec", "burst"))
    o_s, o_r = trials["o_s_usec"].to_numpy(), trials["o_r_usec"].to_numpy()
    # PRTT: g is the burst's excess over one round trip per extra message; L is what the round trip leaves
    assert np.allclose(trials["g_usec"].to_numpy(), (burst - rtt) / (n - 1), rtol=1e-12)
    assert np.allclose(trials["L_usec"].to_numpy(), rtt / 2 - o_s - o_r, rtol=1e-9, atol=1e-12)
    assert np.allclose(trials["delay_usec"].to_numpy(), 2 * rtt + 2, rtol=1e-12)  # o_r waits past the arrival
    assert (rtt > 0).all() and (o_s > 0).all() and (o_r > 0).all()
    assert set(trials["burst"]) == {32} and set(trials.filter(pl.col("bytes") <= 8192)["iterations"]) == {200}
    frame = parse_kernel_output(RECORDED.read_text(), RECORDED)["loggp"]
    assert frame["method"][0].startswith("Kielmann PRTT(n,d,s)")
    rank1 = frame.filter(pl.col("rank") == 1)
    assert rank1.height == len(SIZES) and all(rank1[p].null_count() == rank1.height for p in PARAMETERS)


def test_loggp_trials_names_what_is_wrong() -> None:
    frame = parse_kernel_output(RECORDED.read_text(), RECORDED)["loggp"]
    with pytest.raises(LoggpParseError, match=r"^kernel_loggp: lacks column\(s\) g_usec; expected"):
        loggp_trials(frame.drop("g_usec"))
    cut = frame.with_columns(pl.col("o_r_usec").list.head(3))
    with pytest.raises(LoggpParseError, match=r"x\.txt: the record of 0 B has o_r_usec without one value per "
                                              r"trial \(10 trials expected\)"):
        loggp_trials(cut, "x.txt")
    pingpong = DATA / "kernels" / "pingpong_openmpi_np2.txt"
    with pytest.raises(LoggpParseError, match="no loggp records \\(kernels in it: pingpong\\)"):
        parse_loggp_output(pingpong.read_text(), pingpong)


def _campaign(root: Path, *raws: Path) -> Path:
    """A results directory of recorded cells: raw/ copied, tidy/ written by the tidy step."""
    for raw in raws:
        shutil.copytree(raw, root / "raw", dirs_exist_ok=True)
    tidy(sorted(p.parent for p in (root / "raw").rglob("status.json")), root / "tidy")
    return root


def test_region_table_gains_o_and_g_from_recorded_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_og = _campaign(tmp_path / "with", ADAPTIVE, LOGGP_RAW)
    without = _campaign(tmp_path / "without", ADAPTIVE)
    og = region_loggp(pl.read_parquet(with_og / "tidy/kernel_loggp.parquet"))
    (row,) = og.iter_rows(named=True)
    assert (row["stack"], row["transport"], row["knobs"], row["region"]) == ("intelmpi", "shm", "", "same_l3")
    assert row["bytes"] == 4 and row["n_cells"] == 2 and row["n_trials"] == 2 * TRIALS
    trials = loggp_trials(pl.read_parquet(with_og / "tidy/kernel_loggp.parquet")).filter(pl.col("bytes") == 4)
    assert row["gap_us"] == pytest.approx(float(np.median(trials["g_usec"].to_numpy())), rel=1e-12)
    assert row["overhead_us"] == pytest.approx(
        float(np.median(((trials["o_s_usec"] + trials["o_r_usec"]) / 2).to_numpy())), rel=1e-12)
    for name in ("overhead", "gap", "o_s", "o_r"):
        assert row[f"{name}_ci_low"] <= row[f"{name}_us"] <= row[f"{name}_ci_high"]

    out_with, out_without = tmp_path / "with.csv", tmp_path / "without.csv"
    assert main(["regions", str(with_og), "--csv", str(out_with), "--series", "intelmpi/shm"]) == 0
    assert main(["regions", str(without), "--csv", str(out_without), "--series", "intelmpi/shm"]) == 0
    plain = out_without.read_text()
    assert "region,latency_us,bandwidth_MBps" in plain.splitlines() and "overhead" not in plain
    measured, base = read_region_table(out_with), read_region_table(out_without)
    assert (measured.latency_us, measured.bandwidth_MBps) == (base.latency_us, base.bandwidth_MBps)
    assert measured.overhead_us == {"same_l3": pytest.approx(row["overhead_us"], rel=1e-9)}
    assert measured.gap_us == {"same_l3": pytest.approx(row["gap_us"], rel=1e-9)}
    assert (f"same_l3: o {row['overhead_us']:.3f} µs (95 % CI {row['overhead_ci_low']:.3f}–"
            f"{row['overhead_ci_high']:.3f} µs), g {row['gap_us']:.3f} µs") in out_with.read_text()
    # The λ/B lines of the CSV are the same with or without the loggp cells.
    assert [ln for ln in plain.splitlines() if not ln.startswith("#")][1].split(",") == \
        [ln for ln in out_with.read_text().splitlines() if not ln.startswith("#")][1].split(",")[:3]

    # The printed tables: λ/B as before, then o and g per region with their CIs.
    capsys.readouterr()
    assert main(["regions", str(with_og)]) == 0
    printed = capsys.readouterr().out
    assert "o µs (CI)" in printed
    assert f"{row['gap_us']:.3f} ({row['gap_ci_low']:.3f}–{row['gap_ci_high']:.3f})" in printed
    assert main(["regions", str(without)]) == 0
    assert "LogGP" not in capsys.readouterr().out

    # stats.regions.region_fits: the same λ/B rows, plus o and g only when LogGP rows are given.
    samples = pl.read_parquet(with_og / "tidy/imb_samples.parquet")
    hockney = [f.to_json() for f in fit_all(with_og / "tidy", FitOptions(models=("hockney",),
                                                                        hockney_benchmarks=("PingPong",))).hockney or []]
    plain_fits = region_fits(samples, hockney)
    assert region_fits(samples, hockney, pl.DataFrame(schema=LOGGP_SCHEMA)).equals(plain_fits)
    gained = region_fits(samples, hockney, og)
    assert gained.columns == [*plain_fits.columns, *LOGGP_COLUMNS]
    assert gained.select(plain_fits.columns).equals(plain_fits)
    shm = gained.filter(pl.col("label") == "intelmpi/shm/core").row(0, named=True)
    assert shm["overhead_us"] == row["overhead_us"] and shm["gap_us"] == row["gap_us"]
    assert gained.filter(pl.col("transport") == "ofi-tcp")["gap_us"].null_count() == 1  # no loggp cells of tcp


def test_measured_o_and_g_price_the_collectives_without_fitting(tmp_path: Path) -> None:
    """compare() on the ORFEO EPYC Bcast (test_measured_vs_predicted's inputs) with the group's table
    carrying the recorded o and g of same_l3: every point gets LogGP's mean over ranks with those o and g
    (the number loggp.predict gives; nothing fitted), the summary its error figures, and the region
    model's predictions stay what they were. The mechanism only: this VM's o and g are not EPYC's."""
    og = region_loggp(pl.read_parquet(_campaign(tmp_path, LOGGP_RAW) / "tidy/kernel_loggp.parquet"))
    regions = loggp_by_series(og)[("intelmpi", "shm", "")]
    inputs = _inputs()["core"]
    measured_table = with_loggp(inputs.table, regions)
    assert measured_table.overhead_us == {"same_l3": regions["same_l3"]["overhead_us"]}
    assert measured_table.gap_us == {"same_l3": regions["same_l3"]["gap_us"]}
    bcast = _measured().filter((pl.col("group") == "core") & pl.col("np").is_in([2, 4, 8, 16]))
    priced = compare(bcast, {"core": SeriesInputs(inputs.table, inputs.placement, measured_table)}, calibrate=False)
    assert priced.points.height == bcast.height
    for r in priced.points.iter_rows(named=True):
        want = loggp.predict("bcast", r["algorithm"], inputs.placement.prefix(r["np"]), measured_table,
                             4).rank_mean_us
        assert r["loggp_us"] == pytest.approx(want, rel=1e-12) and r["loggp_us"] > 0
        assert r["loggp_error"] == pytest.approx((want - r["measured_us"]) / r["measured_us"], rel=1e-12)
    assert priced.summary["loggp_median_abs"].null_count() == 0
    plain = compare(bcast, {"core": inputs}, calibrate=False)
    assert plain.points["loggp_us"].null_count() == bcast.height and plain.summary["loggp_median_abs"].null_count() == 4
    assert plain.points["predicted_us"].to_list() == priced.points["predicted_us"].to_list()


def test_report_region_table_shows_o_and_g(tmp_path: Path) -> None:
    """The report of the recorded campaign: its λ/B-per-region table gains o and g [95 % CI] for the
    series and region the loggp cells measured, and a dash where they measured nothing (ofi-tcp)."""
    from test_report import NOW, _section

    from mpiatlas.models.fits import write_fits
    from mpiatlas.report.build import build_report
    from mpiatlas.report.formatting import fmt_ci, fmt_num

    root = _campaign(tmp_path, ADAPTIVE, LOGGP_RAW)
    write_fits(fit_all(root / "tidy", FitOptions(models=("hockney",))), root / "fits")
    html = build_report(root / "tidy", root / "fits", root / "report.html", title="loggp", now=NOW).read_text()
    section = _section(html, "p2p-regions")
    assert "λ and B per region, LogGP o and g" in section and "o (µs) [95 % CI]" in section
    row = region_loggp(pl.read_parquet(root / "tidy/kernel_loggp.parquet")).row(0, named=True)
    for name in ("overhead", "gap"):
        shown = f"{fmt_num(row[f'{name}_us'])} {fmt_ci([row[f'{name}_ci_low'], row[f'{name}_ci_high']])}"
        assert shown in section, shown


def test_region_loggp_needs_the_tidy_table() -> None:
    bare = parse_kernel_output(RECORDED.read_text(), RECORDED)["loggp"]
    with pytest.raises(LoggpParseError, match=r"lacks column\(s\) stack, transport, region: region_loggp needs"):
        region_loggp(bare)
    assert region_loggp(None).columns == list(LOGGP_SCHEMA) and region_loggp(bare.clear()).height == 0
    # The typed row (LoggpRegion) names exactly the table's columns, in its order.
    assert list(LoggpRegion.__annotations__) == list(LOGGP_SCHEMA)
