"""``mpiatlas compare``: matching, the bootstrap ratio, fit differences, exit status, the diff report.

Statistics are checked on synthetic samples with a known truth (B = 1.2 x A; identical
distributions; runs with a random offset each, one or several per side); the infra tests run
real campaigns: Intel MPI over shared memory against TCP (flagged as a regression), and three
identical runs per side (at most 5 % of sizes flagged).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from conftest import EVERY_LAUNCH_COUNTS, REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.commands import compare as command
from mpiatlas.compare.campaigns import ONE_RUN_NOTE, CompareError, Side, compare, load_runs, load_side, match_axes
from mpiatlas.stats.ratios import FASTER, MIN_REPS, SAME, SLOWER, TOO_FEW, TOO_FEW_RUNS, ratio_cis, regressions
from mpiatlas.stats.two_level import draw_counts, expansion, two_level_percentiles
from mpiatlas.compare.fits import TOO_FEW_RUNS as FIT_TOO_FEW_RUNS
from mpiatlas.models.alphabeta_records import AlphaBetaRecord
from mpiatlas.compare.fits import (ComparedFit, alphabeta_compared, fit_differences, fit_differences_over_runs,
                                   hockney_compared, mover_difference)
from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.compare.report import render
from mpiatlas.compare.summary import summary_lines

SIZES = [2**k for k in range(21)]
EVIL = "<script>alert(1)</script>"


def samples(*, factor: float = 1.0, reps: int = 6, sizes: list[int] = SIZES, sigma: float = 0.03,
            seed: int = 0, transport: str = "shm", benchmarks: tuple[str, ...] = ("PingPong", "Allreduce"),
            stack: str = "intelmpi", nps: tuple[int, ...] = (2,)) -> pl.DataFrame:
    """A campaign's samples table: t = factor * (1 + m / 1000) µs with lognormal noise per repetition."""
    rng = np.random.default_rng(seed)
    rows = []
    for bench in benchmarks:
        for np_ in nps:
            for rep in range(reps):
                cell = f"imb/{stack}/{transport}/core/np{np_}/{bench}/default/rep{rep}"
                for m in sizes:
                    rows.append({"cell_quality": "ok", "cell": cell, "label": f"{stack}/{transport}/core", "stack": stack,
                                 "transport": transport, "mapping": "core", "nodes": 1, "np": np_, "benchmark": bench,
                                 "algorithm": "default", "processes": np_, "bytes": m, "rep": rep,
                                 "t_usec": factor * (1 + m / 1000) * math.exp(rng.normal(0, sigma)),
                                 "status": "ok", "cell_status": "ok"})
    return pl.DataFrame(rows, schema_overrides={"np": pl.Int32, "nodes": pl.Int32, "processes": pl.Int32,
                                                "rep": pl.Int32})


def side(df: pl.DataFrame, name: str = "A") -> Side:
    return Side(name, Path(f"/campaigns/{name}"), df)


def write_results(root: Path, df: pl.DataFrame, hockney: list[dict] | None = None) -> Path:
    (root / "tidy").mkdir(parents=True)
    df.write_parquet(root / "tidy" / "imb_samples.parquet")
    if hockney is not None:
        (root / "fits").mkdir()
        (root / "fits" / "hockney.json").write_text(json.dumps(hockney))
    return root


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="mpiatlas")
    command.register(parser.add_subparsers())
    args = parser.parse_args(["compare", *argv])
    return args.func(args)


# -- statistics ----------------------------------------------------------------------------------


def test_known_slowdown_ratio_ci_contains_truth_and_excludes_one() -> None:
    cmp = compare(side(samples(reps=8, seed=1)), side(samples(factor=1.2, reps=8, seed=2), "B"))
    s = cmp.sizes
    assert s.height == 2 * len(SIZES)
    assert (s["verdict"] == SLOWER).all()  # every size: the CI excludes 1
    covered = ((s["ratio_ci_low"] <= 1.2) & (s["ratio_ci_high"] >= 1.2)).mean()
    assert covered >= 0.9, covered  # a 95 % interval, checked over 42 sizes
    assert abs(float(np.median(s["ratio"].to_numpy())) - 1.2) < 0.02
    assert regressions(s, 0.05).height > 0 and regressions(s, 0.5).height == 0


@pytest.mark.parametrize("reps", [MIN_REPS, 10])
def test_identical_distributions_flag_at_most_five_percent(reps: int) -> None:
    sizes = [2**k for k in range(30)] + [3 * 2**k for k in range(30)]
    a = samples(reps=reps, sizes=sizes, benchmarks=("PingPong", "Allreduce", "Bcast"), seed=11, sigma=0.1)
    b = samples(reps=reps, sizes=sizes, benchmarks=("PingPong", "Allreduce", "Bcast"), seed=12, sigma=0.1)
    s = compare(side(a), side(b, "B")).sizes
    assert s.height == 180
    flagged = s["significant"].mean()
    assert flagged <= 0.05, flagged
    assert set(s["verdict"].unique()) <= {SLOWER, FASTER, SAME}


def test_too_few_repetitions_are_not_judged_even_when_separated() -> None:
    # 3 vs 3 samples that do not overlap: the bootstrap CI excludes 1, but identical
    # distributions give that 10 % of the time, so no 95 % verdict is made.
    cmp = compare(side(samples(reps=3)), side(samples(factor=1.5, reps=3), "B"))
    assert (cmp.sizes["ratio_ci_low"] > 1).all()
    assert (cmp.sizes["verdict"] == TOO_FEW).all() and not cmp.sizes["significant"].any()
    assert any("fewer than 5 repetitions" in line for line in summary_lines(cmp))


def test_vectorised_bootstrap_equals_a_plain_loop() -> None:
    rng = np.random.default_rng(5)
    a = [np.sort(rng.lognormal(0, 0.2, n)) for n in (5, 5, 7, 4)]
    b = [np.sort(rng.lognormal(0.1, 0.2, n)) for n in (5, 6, 7, 4)]
    low, high = ratio_cis(a, b, seed=3)
    for i, (x, y) in enumerate(zip(a, b)):
        draw = np.random.default_rng([3, x.size, y.size])
        ia, ib = draw.integers(0, x.size, (999, x.size)), draw.integers(0, y.size, (999, y.size))
        ratios = np.median(y[ib], axis=1) / np.median(x[ia], axis=1)
        assert np.allclose([low[i], high[i]], np.quantile(ratios, [0.025, 0.975]), rtol=1e-12)


def test_bootstrap_is_seeded_and_independent_of_other_groups() -> None:
    rng = np.random.default_rng(1)
    a = [np.sort(rng.lognormal(0, 0.2, 6)) for _ in range(3)]
    b = [np.sort(rng.lognormal(0, 0.2, 6)) for _ in range(3)]
    first = ratio_cis(a, b)
    assert np.array_equal(first[0], ratio_cis(a, b)[0])
    alone = ratio_cis(a[1:2], b[1:2])
    assert alone[0][0] == first[0][1] and alone[1][0] == first[1][1]


# -- matching ------------------------------------------------------------------------------------


def test_a_setting_constant_on_each_side_is_compared_not_matched() -> None:
    cmp = compare(side(samples()), side(samples(factor=3, transport="ofi-tcp"), "B"))
    assert cmp.matching.settings == {"transport": ("shm", "ofi-tcp")}
    assert "transport" not in cmp.matching.keys and "label" not in cmp.matching.keys
    assert cmp.sizes.height == 2 * len(SIZES) and cmp.only_a.height == 0 and cmp.only_b.height == 0
    assert (cmp.sizes["verdict"] == SLOWER).all()
    assert any(line == "compared setting: transport shm (A) → ofi-tcp (B)" for line in summary_lines(cmp))


def test_cells_on_one_side_only_are_listed_not_dropped() -> None:
    a = pl.concat([samples(nps=(2, 4)), samples(benchmarks=("Bcast",), sizes=SIZES[:5])])
    b = samples(nps=(2, 8), sizes=SIZES[:-1])  # a size fewer in every cell, np 8 instead of 4, no Bcast
    cmp = compare(side(a), side(b, "B"))
    assert sorted(cmp.only_a.select("benchmark", "np").rows()) == [("Allreduce", 4), ("Bcast", 2), ("PingPong", 4)]
    assert sorted(cmp.only_b.select("benchmark", "np").rows()) == [("Allreduce", 8), ("PingPong", 8)]
    assert cmp.only_a.filter(pl.col("benchmark") == "Bcast")["sizes"].to_list() == [5]
    assert cmp.sizes.height == 2 * (len(SIZES) - 1)  # np 2, both benchmarks, the sizes both have
    lines = summary_lines(cmp)
    only_a = next(line for line in lines if line.startswith("3 series only in A: "))
    assert "Bcast · intelmpi · shm · core · nodes=1 · np=2" in only_a
    assert any(line.startswith("2 series only in B: ") for line in lines)
    # The largest size of the series both have was measured in A only: listed as well.
    assert cmp.lone_a.select("benchmark", "np", "bytes").sort("benchmark").rows() == [
        ("Allreduce", 2, SIZES[-1]), ("PingPong", 2, SIZES[-1])]
    assert cmp.lone_b.height == 0
    assert any(line.startswith("2 sizes of matched series only in A: ") and "1 MiB" in line for line in lines)


def test_a_cell_that_failed_on_one_side_says_so() -> None:
    a = samples(nps=(2, 4))
    b = samples(nps=(2,))
    cells_b = pl.DataFrame({"cell": ["imb/intelmpi/shm/core/np4/PingPong/default/rep0",
                                     "imb/intelmpi/shm/core/np4/PingPong/default/rep1"],
                            "stack": ["intelmpi"] * 2, "transport": ["shm"] * 2, "mapping": ["core"] * 2,
                            "nodes": [1, 1], "np": [4, 4], "benchmark": ["PingPong"] * 2,
                            "algorithm": ["default"] * 2, "status": ["failed", "timeout"]},
                           schema_overrides={"np": pl.Int32, "nodes": pl.Int32})
    cmp = compare(side(a), Side("B", Path("/campaigns/B"), b, cells_b))
    statuses = dict(cmp.only_a.select("benchmark", "other_status").rows())
    assert statuses == {"PingPong": "failed, timeout", "Allreduce": None}
    line = next(x for x in summary_lines(cmp) if x.startswith("2 series only in A"))
    assert "PingPong · intelmpi · shm · core · nodes=1 · np=4 · default · processes=4 (in B: failed, timeout)" in line


def test_label_is_the_identity_of_imported_data() -> None:
    imported = samples().with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in
                                      ("stack", "transport", "mapping", "algorithm", "cell"))
    m = match_axes(imported, imported)
    assert m.keys[0] == "label" and "stack" not in m.keys and m.settings == {}
    other = imported.with_columns(pl.lit("other-system").alias("label"))
    m = match_axes(imported, other)
    assert m.settings == {"label": ("intelmpi/shm/core", "other-system")}


def test_ignore_refuses_to_pool_different_cells() -> None:
    both = pl.concat([samples(), samples(transport="ofi-tcp", factor=5)])
    with pytest.raises(CompareError, match="stand for several cells"):
        compare(side(both), side(both, "B"), ignore=["transport"])
    with pytest.raises(CompareError, match="not an axis"):
        compare(side(both), side(both, "B"), ignore=["colour"])
    # Ignoring an axis that does not pool anything is fine (one transport per side here).
    cmp = compare(side(samples()), side(samples(transport="ofi-tcp"), "B"), ignore=["mapping"])
    assert "mapping" not in cmp.matching.keys and cmp.matching.ignored == ["mapping"]


# -- fits ----------------------------------------------------------------------------------------


def test_mover_difference_keeps_asymmetry() -> None:
    d, low, high = mover_difference(10.0, [9.0, 11.0], 12.0, [11.0, 14.0])
    assert d == 2.0
    assert low == pytest.approx(2 - math.sqrt(1 + 1)) and high == pytest.approx(2 + math.sqrt(4 + 1))


PEAK_OVER_ASYMPTOTE = 1.25  # the fixtures' peak B: an in-cache top this much above the asymptotic B


def hockney_fit(transport: str, latency: float, ci: list[float], bw: float, bw_ci: list[float | None]) -> dict:
    """A fit record with asymptotic B = ``bw`` and a peak B PEAK_OVER_ASYMPTOTE times it (its interval too)."""
    peak_ci = [None if v is None else v * PEAK_OVER_ASYMPTOTE for v in bw_ci]
    return {"label": f"intelmpi/{transport}/core", "stack": "intelmpi", "transport": transport, "mapping": "core",
            "np": 2, "algorithm": "default", "benchmark": "PingPong", "latency_us": latency, "latency_ci_us": ci,
            "asymptotic_bandwidth_MBps": bw, "asymptotic_bandwidth_ci_MBps": bw_ci, "asymptotic_bytes": 4 << 20,
            "peak_bandwidth_MBps": bw * PEAK_OVER_ASYMPTOTE, "peak_bandwidth_ci_MBps": peak_ci, "peak_bytes": 1 << 20}


def _h(entries: list[dict]) -> list[ComparedFit]:
    """hockney.json entries as compare reads them."""
    return [hockney_compared(HockneyRecord.from_json(e)) for e in entries]


def _ab(entries: list[dict]) -> list[ComparedFit]:
    """alphabeta.json ``fits`` entries as compare reads them."""
    return [alphabeta_compared(AlphaBetaRecord.from_json(e)) for e in entries]


def test_alphabeta_fits_pair_by_knob_set_options_and_placement() -> None:
    """α-β fits of one stack/transport at two knob sets (and another placement) pair with their own partner."""
    def fit(knobs: str, placement: str, alpha: float) -> dict:
        return {"stack": "intelmpi", "transport": "ofi-tcp", "algorithm": "default", "options": "", "knobs": knobs,
                "placement": placement, "benchmark": "Alltoall", "ppn": 2, "alpha": alpha,
                "alpha_ci": [alpha * 0.98, alpha * 1.02], "beta_us": 20.0, "beta_ci_us": [19.0, 21.0]}

    fa = [fit("", "cyclic", 1.2), fit("eager", "cyclic", 3.0), fit("", "block", 1.5)]
    fb = [fit("", "block", 1.5), fit("eager", "cyclic", 3.3), fit("", "cyclic", 1.2)]
    axes = ["stack", "transport", "algorithm", "options", "knobs", "placement", "benchmark"]
    alpha = fit_differences(([], []), (_ab(fa), _ab(fb)), axes).filter(pl.col("parameter") == "α")
    assert alpha.height == 3
    by_series = {r["series"]: r for r in alpha.to_dicts()}
    eager = by_series["stack=intelmpi · transport=ofi-tcp · algorithm=default · knobs=eager · placement=cyclic · "
                      "benchmark=Alltoall · ppn=2"]
    assert eager["diff"] == pytest.approx(0.3) and eager["direction"] == "slower"
    assert sum(r["significant"] for r in alpha.to_dicts()) == 1  # the other two are their own partner, unchanged


def test_hockney_differences_across_the_compared_setting() -> None:
    fa = [hockney_fit("shm", 0.5, [0.45, 0.55], 6000.0, [5000.0, None])]
    fb = [hockney_fit("ofi-tcp", 11.0, [10.5, 12.0], 1200.0, [1100.0, 1300.0])]
    fits = fit_differences((_h(fa), _h(fb)), ([], []), ["stack", "mapping", "np", "benchmark", "algorithm"])
    lat = fits.filter(pl.col("parameter") == "latency λ").row(0, named=True)
    assert lat["diff"] == pytest.approx(10.5) and lat["significant"] and lat["direction"] == "slower"
    assert lat["diff_ci_low"] == pytest.approx(10.5 - math.hypot(0.5, 0.05))
    bw = fits.filter(pl.col("parameter") == "asymptotic bandwidth B").row(0, named=True)
    assert bw["direction"] == "slower" and bw["rel_diff"] == pytest.approx(-0.8)
    # A's bandwidth CI has no upper end: the difference is unbounded below, still excludes 0.
    assert bw["diff_ci_low"] == -math.inf and bw["diff_ci_high"] == pytest.approx(-4800 + math.hypot(100, 1000))
    # The peak B is compared on its own row, peak against peak (7,500 → 1,500 MB/s).
    peak = fits.filter(pl.col("parameter") == "peak bandwidth B").row(0, named=True)
    assert peak["diff"] == pytest.approx(-6000) and peak["direction"] == "slower" and peak["significant"]
    assert peak["diff_ci_low"] == -math.inf and peak["diff_ci_high"] == pytest.approx(-6000 + math.hypot(125, 1250))
    # A fit of another np is not paired.
    other = [dict(fb[0], np=4)]
    assert fit_differences((_h(fa), _h(other)), ([], []), ["stack", "np"]).height == 0


def _welch_by_hand(xa: list[float], xb: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Welch's interval of mean(B) - mean(A) from its formula (Welch-Satterthwaite degrees of freedom)."""
    from scipy.stats import t

    va, vb = np.var(xa, ddof=1) / len(xa), np.var(xb, ddof=1) / len(xb)
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    half = t.ppf(0.5 + confidence / 2, df) * math.sqrt(va + vb)
    d = float(np.mean(xb) - np.mean(xa))
    return d - half, d + half


def test_fits_over_runs_compare_each_sides_spread_of_estimates() -> None:
    """Several runs per side: a parameter's estimate per run; the mean per side, and Welch's interval
    of the difference, equal to the formula's; a series fitted in one run of a side is not judged."""
    lat_a, lat_b = [0.50, 0.55, 0.45], [0.80, 0.90, 0.85]
    bw_a, bw_b = [6000.0, 5800.0, 6200.0], [6100.0, 5900.0, 5900.0]
    runs_a = [[hockney_fit("shm", la, [la - 0.01, la + 0.01], ba, [ba - 50, ba + 50])] for la, ba in zip(lat_a, bw_a)]
    runs_b = [[hockney_fit("shm", lb, [lb - 0.01, lb + 0.01], bb, [bb - 50, bb + 50])] for lb, bb in zip(lat_b, bw_b)]
    runs_b[0].append(hockney_fit("ofi-tcp", 11.0, [10.0, 12.0], 1200.0, [1100.0, 1300.0]))  # one run only
    runs_a[1].append(hockney_fit("ofi-tcp", 10.0, [9.0, 11.0], 1300.0, [1200.0, 1400.0]))
    fits = fit_differences_over_runs(([_h(r) for r in runs_a], [_h(r) for r in runs_b]), ([], []),
                                     ["stack", "transport", "mapping", "np", "benchmark"])
    lat = fits.filter(pl.col("parameter") == "latency λ", pl.col("series").str.contains("shm")).row(0, named=True)
    assert lat["a"] == pytest.approx(0.5) and lat["b"] == pytest.approx(0.85) and lat["diff"] == pytest.approx(0.35)
    assert (lat["diff_ci_low"], lat["diff_ci_high"]) == pytest.approx(_welch_by_hand(lat_a, lat_b), rel=1e-9)
    assert lat["significant"] and lat["direction"] == "slower" and "(3 vs 3 runs)" in lat["series"]
    # Each side's t interval of its mean: 0.5 ± t(0.975, 2) x 0.05 / sqrt(3).
    assert lat["a_ci_high"] - 0.5 == pytest.approx(4.302653 * 0.05 / math.sqrt(3), rel=1e-5)
    for parameter in ("asymptotic bandwidth B", "peak bandwidth B"):
        bw = fits.filter(pl.col("parameter") == parameter, pl.col("series").str.contains("shm")).row(0, named=True)
        assert not bw["significant"] and bw["direction"] == "no significant change"
        assert bw["diff_ci_low"] < 0 < bw["diff_ci_high"]
    tcp = fits.filter(pl.col("series").str.contains("ofi-tcp"))
    assert tcp.height == 3 and (tcp["direction"] == FIT_TOO_FEW_RUNS).all() and not tcp["significant"].any()
    assert tcp["diff_ci_low"].is_nan().all()


def test_several_runs_compare_their_fits_on_the_command_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`compare --a ... --b ...` with each run's hockney.json: the report and the summary compare the
    runs' fits (they used to drop every fit when a side had several runs)."""
    lat_a, lat_b = [0.50, 0.52, 0.48], [0.70, 0.74, 0.72]
    dirs_a = [write_results(tmp_path / f"a{i}", d, [hockney_fit("shm", la, [la - 0.01, la + 0.01], 6000.0,
                                                                [5900.0, 6100.0])])
              for i, (d, la) in enumerate(zip(run_samples(3, seed=61), lat_a))]
    dirs_b = [write_results(tmp_path / f"b{i}", d, [hockney_fit("shm", lb, [lb - 0.01, lb + 0.01], 6000.0,
                                                                [5900.0, 6100.0])])
              for i, (d, lb) in enumerate(zip(run_samples(3, seed=62), lat_b))]
    js, html = tmp_path / "runs.json", tmp_path / "runs.html"
    run_cli("--a", *map(str, dirs_a), "--b", *map(str, dirs_b), "--plain", "--json", str(js), "--out", str(html))
    printed = capsys.readouterr().out
    assert "mean over its runs' fits" in printed and "latency λ" in printed
    fits = json.loads(js.read_text())["fits"]
    lat = next(f for f in fits if f["parameter"] == "latency λ")
    assert lat["diff"] == pytest.approx(0.22) and lat["significant"] and lat["direction"] == "slower"
    assert (lat["diff_ci_low"], lat["diff_ci_high"]) == pytest.approx(_welch_by_hand(lat_a, lat_b), rel=1e-9)
    assert "95 % CI (Welch)" in html.read_text()


# -- the command ---------------------------------------------------------------------------------


def test_exit_status_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_results(tmp_path / "a", samples(reps=6, seed=1),
                      [hockney_fit("shm", 0.5, [0.45, 0.55], 6000.0, [5000.0, 7000.0])])
    b = write_results(tmp_path / "b", samples(factor=1.3, reps=6, seed=2, stack=EVIL),
                      [hockney_fit("shm", 0.6, [0.55, 0.65], 5000.0, [4500.0, 5500.0])])
    same = write_results(tmp_path / "same", samples(reps=6, seed=3))
    assert run_cli(str(a), str(same), "--fail-on-regression", "5%", "--plain") == 0
    # Another stack on the B side is the compared setting: matched and flagged.
    assert run_cli(str(a), str(b), "--fail-on-regression", "5%") == 1
    assert "compared setting: stack intelmpi (A) → <script>" in capsys.readouterr().out
    # Three repetitions cannot support a verdict: a gate cannot decide.
    few = write_results(tmp_path / "few", samples(factor=2, reps=3))
    assert run_cli(str(a), str(few), "--fail-on-regression", "5%") == 2
    assert "no size could be judged" in capsys.readouterr().err
    assert run_cli(str(a), str(few)) == 0  # without a gate: the summary says why nothing was judged
    b2 = write_results(tmp_path / "b2", samples(factor=1.3, reps=6, seed=2),
                       [hockney_fit("shm", 0.65, [0.6, 0.7], 4600.0, [4500.0, 4700.0])])
    out, js = tmp_path / "diff.html", tmp_path / "diff.json"
    assert run_cli(str(a), str(b2), "--fail-on-regression", "5%", "--plain", "--out", str(out), "--json", str(js)) == 1
    printed = capsys.readouterr().out
    assert "42 sizes significantly slower in B" in printed
    assert run_cli(str(a), str(b2), "--fail-on-regression", "50%") == 0
    assert run_cli(str(a), str(b2)) == 0  # no gate asked for
    record = json.loads(js.read_text())
    assert len(record["sizes"]) == 42 and record["matched_on"][-1] == "bytes"
    assert pl.read_parquet(js.with_suffix(".parquet")).height == 42
    html = out.read_text()
    assert "Ratio heatmaps" in html and "Model parameters" in html
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"""<(link|img|iframe|embed|object)\b[^>]*(href|src|data)\s*=\s*["']?https?:""", html, re.I)


def test_help_states_the_rules_the_code_applies() -> None:
    # The parser must not import the statistics (numpy, polars) to say this, so it repeats it.
    assert f"at least {MIN_REPS} repetitions per side" in command.DESCRIPTION
    assert command.threshold("5%") == pytest.approx(0.05) and command.threshold("0.1") == pytest.approx(0.1)


def test_bad_input_exits_2_naming_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_results(tmp_path / "good", samples())
    assert run_cli(str(tmp_path / "nowhere"), str(good)) == 2
    assert str(tmp_path / "nowhere") in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(str(good), str(empty)) == 2
    assert f"{empty}: neither tidy/imb_samples.parquet" in capsys.readouterr().err
    broken = tmp_path / "broken"
    write_results(broken, samples().drop("t_usec"))
    assert run_cli(str(good), str(broken)) == 2
    assert "missing columns: t_usec" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_cli(str(good), str(good), "--fail-on-regression", "five")


def barrier(df: pl.DataFrame) -> pl.DataFrame:
    """IMB Barrier rows (no message size) for the cells of ``df``."""
    return (df.filter(pl.col("bytes") == 1)
            .with_columns(pl.lit("Barrier").alias("benchmark"), pl.lit(None, dtype=pl.Int64).alias("bytes"),
                          pl.col("cell").str.replace("/PingPong/|/Allreduce/", "/Barrier/"))
            .unique(subset=["cell"]))


def test_size_less_barrier_is_compared_and_drawn() -> None:
    a, b = samples(), samples(factor=1.4, seed=8)
    a, b = pl.concat([a, barrier(a)]), pl.concat([b, barrier(b)])
    cmp = compare(side(a), side(b, "B"))
    row = cmp.sizes.filter(pl.col("benchmark") == "Barrier").row(0, named=True)
    assert row["bytes"] is None and row["n_a"] == 6 and row["verdict"] == SLOWER
    html = render(cmp)
    assert "Barrier: B / A" in html


def test_report_escapes_labels() -> None:
    a, b = samples(stack=EVIL), samples(stack=EVIL, factor=1.5, seed=4)
    html = render(compare(side(a), side(b, "B")), 0.05)
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# -- real campaigns ------------------------------------------------------------------------------


def _config(transport: str) -> dict:
    # Two repetitions to spare: on a shared machine a launch may fail its binding or transport
    # check (its cell is then not ok and gives no samples), and each side needs MIN_REPS.
    return {"campaign": {"name": "cmp", "repetitions": MIN_REPS + 2, "timeout_s": 120,
                         "perturbation": EVERY_LAUNCH_COUNTS},
            "stacks": {"intelmpi": {"kind": "intelmpi", "source": "pypi", "transports": [transport]}},
            "mappings": ["core"], "processes": [2],
            "imb": {"benchmarks": ["PingPong"], "msglog": [0, 16], "time_s": 0.2, "mem_gb": 0.5, "iterations": 100}}


@pytest.mark.infra
def test_real_tcp_and_shared_memory_campaigns_are_matched_judged_and_gated(tmp_path: Path) -> None:
    """Two real campaigns that differ in transport only. Whether TCP comes out slower at each size is
    the machine's business (it usually is, by microseconds; on a loaded machine a size can come out
    either way): what is asserted is what compare does with whatever was measured."""
    require_infra(shutil.which("gcc") is not None, "a C toolchain")
    results = []
    for transport in ("shm", "ofi-tcp"):
        (tmp_path / transport).mkdir()
        work = campaign_workdir(tmp_path / transport, "config/test/tiny.yaml")  # then our own config
        data = _config(transport)
        data["campaign"]["stacks_dir"] = str(REPO / ".stacks")
        (work / "config" / "campaign.yaml").write_text(yaml.safe_dump(data))
        run = run_campaign(work, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        results.append(work / "results" / "cmp")
    shm, tcp = (load_side(p, n) for p, n in zip(results, "AB"))
    cmp = compare(shm, tcp)
    assert cmp.matching.settings == {"transport": ("shm", "ofi-tcp")}
    assert 12 <= cmp.sizes.height <= 18  # PingPong 0 B .. 64 KiB (IMB may time out the largest sizes)
    # Each judged size: the verdict its bootstrap CI of B/A implies.
    for row in cmp.sizes.iter_rows(named=True):
        if row["verdict"] == TOO_FEW:
            continue
        assert row["ratio"] > 0 and row["ratio_ci_low"] <= row["ratio_ci_high"], row
        implied = SLOWER if row["ratio_ci_low"] > 1 else FASTER if row["ratio_ci_high"] < 1 else SAME
        assert row["verdict"] == implied, row
    # The gate: exit 1 exactly when some size is significantly slower beyond 5 %.
    gated = regressions(cmp.sizes, 0.05).height > 0
    assert run_cli(str(results[0]), str(results[1]), "--fail-on-regression", "5%", "--plain") == (1 if gated else 0)


@pytest.mark.infra
def test_diff_report_draws_every_heatmap_offline(tmp_path: Path) -> None:
    """The diff report in headless Chromium with the network blocked (the main report's browser
    helpers): every heatmap drawn, no console error, no request besides the page itself."""
    require_infra(shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
                  "Debian chromium and chromium-driver")
    from selenium.webdriver.common.by import By
    from test_report_browser import (chromium_driver, network_events, requested_urls, severe_console_messages,
                                     wait_for_chart)

    a = samples(nps=(2, 4), stack=EVIL)
    b = samples(nps=(2, 4), stack=EVIL, factor=1.3, seed=9)
    out = tmp_path / "diff.html"
    out.write_text(render(compare(side(a), side(b, "B")), 0.05))
    driver = chromium_driver()
    try:
        driver.get(out.resolve().as_uri())
        charts = [wait_for_chart(driver, c) for c in driver.find_elements(By.CSS_SELECTOR, ".vega-target")]
        errors = severe_console_messages(driver)
        requests = requested_urls(network_events(driver))
        n_scripts = driver.execute_script("return document.querySelectorAll('script').length")
    finally:
        driver.quit()
    assert len(charts) == 2 and all(c.rendered for c in charts), charts  # PingPong, Allreduce
    assert errors == []
    assert requests == [out.resolve().as_uri()]
    assert n_scripts == 4  # the page's own scripts: the label's <script> is text


# -- several runs per side -----------------------------------------------------------------------


def run_samples(runs: int, *, factor: float = 1.0, reps: int = 5, sizes: list[int] = SIZES, run_sd: float = 0.10,
                rep_sd: float = 0.02, seed: int = 0, benchmarks: tuple[str, ...] = ("PingPong", "Allreduce"),
                ) -> list[pl.DataFrame]:
    """``runs`` campaigns of one config: each (run, size) has its own random offset (sd ``run_sd``,
    the run-to-run variation of a shared machine), each repetition a small noise (``rep_sd``)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(runs):
        df = samples(factor=factor, reps=reps, sizes=sizes, sigma=rep_sd, seed=int(rng.integers(1 << 30)),
                     benchmarks=benchmarks)
        offset = pl.Series(np.exp(rng.normal(0, run_sd, df.select("benchmark", "bytes").n_unique())))
        keys = df.select("benchmark", "bytes").unique(maintain_order=True).with_columns(offset.alias("offset"))
        out.append(df.join(keys, on=["benchmark", "bytes"]).with_columns(pl.col("t_usec") * pl.col("offset"))
                   .drop("offset"))
    return out


def runs_side(dfs: list[pl.DataFrame], name: str) -> Side:
    stacked = pl.concat([d.with_columns(pl.lit(i, dtype=pl.Int32).alias("run")) for i, d in enumerate(dfs)])
    paths = [Path(f"/campaigns/{name}{i}") for i in range(len(dfs))]
    return Side(name, paths[0], stacked, paths=paths)


MANY_SIZES = [2**k for k in range(30)] + [3 * 2**k for k in range(30)]  # 60 sizes x 2 benchmarks x 2 seeds


def test_run_to_run_variation_needs_several_runs_per_side() -> None:
    """Identical campaigns on a machine whose runs shift (sd 10 %): one run per side is flagged at
    most sizes (its CI knows only the repetitions' 2 % noise); three runs per side, resampled at
    the run level, at most 5 %."""
    flagged_one, flagged_three, n = 0, 0, 0
    for seed in (21, 22, 23, 24):
        a, b = run_samples(3, sizes=MANY_SIZES, seed=seed), run_samples(3, sizes=MANY_SIZES, seed=seed + 100)
        one = compare(side(a[0]), side(b[0], "B")).sizes
        three = compare(runs_side(a, "A"), runs_side(b, "B"))
        assert three.two_level and set(three.sizes["runs_a"].unique()) == {3}
        assert set(three.sizes["verdict"].unique()) <= {SLOWER, FASTER, SAME}
        flagged_one += int(one["significant"].sum())
        flagged_three += int(three.sizes["significant"].sum())
        n += three.sizes.height
    assert n == 480
    assert flagged_three / n <= 0.05, flagged_three / n
    assert flagged_one / n >= 0.5, flagged_one / n  # the reason for several runs
    # The price of 3 runs per side: the interval is widened for having so few (expansion x1.73).
    assert expansion(np.array([3]), np.array([3]))[0] == pytest.approx(1.7355, abs=1e-3)


def test_a_true_slowdown_is_flagged_with_three_runs_per_side() -> None:
    a = run_samples(3, sizes=MANY_SIZES, seed=31)
    b = run_samples(3, sizes=MANY_SIZES, seed=32, factor=1.3)
    s = compare(runs_side(a, "A"), runs_side(b, "B")).sizes
    # Run effect sd 10 %: 3 against 3 runs cannot flag every size at 95 % (a t-test of the run
    # means would flag ~65 %); most must be flagged, none faster, and the CIs cover the truth.
    assert (s["verdict"] == SLOWER).mean() >= 0.5, (s["verdict"] == SLOWER).mean()
    assert not (s["verdict"] == FASTER).any()
    assert ((s["ratio_ci_low"] <= 1.3) & (s["ratio_ci_high"] >= 1.3)).mean() >= 0.9  # 95 % CIs, 120 sizes
    assert abs(float(s["ratio"].median()) - 1.3) < 0.03
    # Quiet runs (no run effect): a 30 % slowdown is flagged at every size.
    quiet = compare(runs_side(run_samples(3, run_sd=0.0, seed=33), "A"),
                    runs_side(run_samples(3, run_sd=0.0, seed=34, factor=1.3), "B")).sizes
    assert (quiet["verdict"] == SLOWER).all()


def test_two_level_bootstrap_equals_a_plain_loop() -> None:
    """The vectorised medians (counts reordered by rank, cumsum, first past the middle) against
    rebuilding each resample from the drawn runs and repetitions and calling np.median."""
    rng = np.random.default_rng(7)
    groups_a = [[rng.lognormal(0, 0.2, n) for n in shape] for shape in [(5, 5, 4), (5, 5, 4), (3, 6)]]
    groups_b = [[rng.lognormal(0.1, 0.2, n) for n in shape] for shape in [(5, 5, 5), (5, 5, 5), (2, 2, 7, 1)]]
    low, high = two_level_percentiles(groups_a, groups_b, seed=4)
    for i, (ra, rb) in enumerate(zip(groups_a, groups_b)):
        runs_a, runs_b = (sorted(r, key=lambda x: -x.size) for r in (ra, rb))  # the canonical run order
        shape_a, shape_b = tuple(r.size for r in runs_a), tuple(r.size for r in runs_b)
        draw = np.random.default_rng([4, len(shape_a), *shape_a, len(shape_b), *shape_b])
        medians = []
        for runs, shape in ((runs_a, shape_a), (runs_b, shape_b)):
            drawn, picks, _ = draw_counts(shape, draw)
            flat = np.concatenate(runs)
            offsets = np.concatenate([[0], np.cumsum(shape)[:-1]])
            per = []
            for resample in range(drawn.shape[0]):
                pooled = []
                for slot, run in enumerate(drawn[resample]):
                    positions = picks[resample, slot][picks[resample, slot] >= 0]
                    assert positions.size == shape[run]  # n_j repetitions from the drawn run j
                    assert ((positions >= offsets[run]) & (positions < offsets[run] + shape[run])).all()
                    pooled.append(flat[positions])
                per.append(np.median(np.concatenate(pooled)))
            medians.append(np.array(per))
        expected = np.quantile(medians[1] / medians[0], [0.025, 0.975])
        assert np.allclose([low[i], high[i]], expected, rtol=1e-12), i


def test_two_level_chunks_and_other_groups_do_not_change_a_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunked (as for 10^4+ sizes: 10^4 sizes of 3 x 5 repetitions take ~2 s) or alone, a group's
    CI is the same: it depends on its own runs' sizes and the seed only."""
    import mpiatlas.stats.two_level as stats

    rng = np.random.default_rng(8)
    a = [[rng.lognormal(0, 0.1, 5) for _ in range(3)] for _ in range(40)]
    b = [[rng.lognormal(0, 0.1, n) for n in (5, 5, 4)] for _ in range(40)]
    whole = two_level_percentiles(a, b)
    monkeypatch.setattr(stats, "CHUNK_CELLS", 999 * 15 * 3)  # 3 groups per chunk
    chunked = two_level_percentiles(a, b)
    alone = two_level_percentiles(a[17:18], b[17:18])
    assert np.array_equal(whole[0], chunked[0]) and np.array_equal(whole[1], chunked[1])
    assert alone[0][0] == whole[0][17] and alone[1][0] == whole[1][17]
    assert np.isfinite(whole[0]).all() and (whole[0] < whole[1]).all()


def test_one_run_per_side_says_run_variation_is_not_in_the_ci(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    dirs_a = [write_results(tmp_path / f"a{i}", d) for i, d in enumerate(run_samples(3, seed=41))]
    dirs_b = [write_results(tmp_path / f"b{i}", d) for i, d in enumerate(run_samples(3, seed=42))]
    assert run_cli(str(dirs_a[0]), str(dirs_b[0]), "--plain", "--out", str(tmp_path / "one.html")) == 0
    printed = capsys.readouterr().out
    assert ONE_RUN_NOTE in printed and "--a A1 A2 A3 --b B1 B2 B3" in printed
    assert "run-to-run variation is not in the CI" in (tmp_path / "one.html").read_text()
    js = tmp_path / "three.json"
    argv = ["--a", *map(str, dirs_a), "--b", *map(str, dirs_b), "--plain", "--json", str(js), "--out",
            str(tmp_path / "three.html")]
    assert run_cli(*argv) == 0
    printed = capsys.readouterr().out
    assert "3 runs (A) and 3 runs (B): the CI resamples runs" in printed and ONE_RUN_NOTE not in printed
    record = json.loads(js.read_text())
    assert record["run_to_run_variation_in_ci"] and record["a_runs"] == list(map(str, dirs_a))
    assert {r["runs_a"] for r in record["sizes"]} == {3}
    html = (tmp_path / "three.html").read_text()
    assert "two-level percentile bootstrap" in html and "run-to-run variation is not in the CI" not in html
    # Bad argv: both forms at once, a side missing, a run given twice.
    assert run_cli(str(dirs_a[0]), "--a", str(dirs_a[1]), "--b", str(dirs_b[0])) == 2
    assert run_cli("--a", str(dirs_a[0])) == 2
    assert "--a and --b both need" in capsys.readouterr().err
    assert run_cli("--a", str(dirs_a[0]), str(dirs_a[0]), "--b", str(dirs_b[0]), str(dirs_b[1])) == 2
    assert "given twice on side A" in capsys.readouterr().err


def test_a_size_measured_in_one_run_only_is_not_judged() -> None:
    a, b = run_samples(3, seed=51), run_samples(3, seed=52)
    a = [a[0]] + [d.filter(pl.col("bytes") != SIZES[-1]) for d in a[1:]]  # the largest size timed out twice
    cmp = compare(runs_side(a, "A"), runs_side(b, "B"))
    last = cmp.sizes.filter(pl.col("bytes") == SIZES[-1])
    assert (last["verdict"] == TOO_FEW_RUNS).all() and (last["runs_a"] == 1).all()
    assert any(line.startswith("2 sizes not judged: measured in fewer than 2 runs") for line in summary_lines(cmp))


def _identical_config(name: str) -> dict:
    # MIN_REPS repetitions: a pair of single runs can be judged (the figure printed for the log);
    # three runs per side need only MIN_REPS in all and MIN_RUNS runs, so a failed launch is harmless.
    return {"campaign": {"name": name, "repetitions": MIN_REPS, "timeout_s": 120,
                         "stacks_dir": str(REPO / ".stacks")},
            "stacks": {"intelmpi": {"kind": "intelmpi", "source": "pypi", "transports": ["shm"]}},
            "mappings": ["core"], "processes": [2],
            "imb": {"benchmarks": ["PingPong", "Allreduce"], "msglog": [0, 16], "time_s": 0.1, "mem_gb": 0.5,
                    "iterations": 100}}


@pytest.mark.infra
def test_three_identical_real_runs_per_side_show_no_difference(tmp_path: Path) -> None:
    """Six runs of one tiny campaign on this machine, in the order A B B A A B (a load that
    drifts over the test's two minutes then hits both sides alike; plain alternation would make B
    the later one every time), compared three against three over runs. How many sizes come out
    different is the machine's business (a VM's vCPUs moved apart for a minute is a real difference):
    it is printed for the log, with the figures of one run per side, and each verdict must be the one
    its interval implies."""
    require_infra(shutil.which("gcc") is not None, "a C toolchain")
    dirs: dict[str, list[Path]] = {"a": [], "b": []}
    for name in "abbaab":
        tmp = tmp_path / f"{name}{len(dirs[name])}"
        tmp.mkdir()
        work = campaign_workdir(tmp, "config/test/tiny.yaml")
        (work / "config" / "campaign.yaml").write_text(yaml.safe_dump(_identical_config("ident")))
        run = run_campaign(work, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        dirs[name].append(work / "results" / "ident")
    three = compare(load_runs(dirs["a"], "A"), load_runs(dirs["b"], "B"))
    ones = [compare(load_side(a, "A"), load_side(b, "B")).sizes for a, b in zip(dirs["a"], dirs["b"])]
    n = three.sizes.height
    flagged = int(three.sizes["significant"].sum())
    pairs = [f"{int(s['significant'].sum())} of {int(s['verdict'].is_in([SLOWER, FASTER, SAME]).sum())} judged"
             for s in ones]
    print(f"\nidentical campaigns, {n} sizes: flagged with 1 run per side (A1-B1, A2-B2, A3-B3): {', '.join(pairs)}; "
          f"with 3 runs per side: {flagged}")
    assert 30 <= n <= 36  # PingPong and Allreduce, 0 B .. 64 KiB
    assert three.two_level and (three.sizes["verdict"] != TOO_FEW_RUNS).sum() >= 30
    for row in three.sizes.iter_rows(named=True):
        if row["verdict"] in (SLOWER, FASTER, SAME):
            implied = SLOWER if row["ratio_ci_low"] > 1 else FASTER if row["ratio_ci_high"] < 1 else SAME
            assert row["verdict"] == implied, row
    # The runs' own Hockney fits are compared too, each parameter over its 3 + 3 estimates.
    lam = three.fits.filter(pl.col("parameter") == "latency λ")
    assert lam.height >= 1 and lam["series"].str.contains("(3 vs 3 runs)", literal=True).all()
    print("λ over runs:", lam.select("series", "a", "b", "diff_ci_low", "diff_ci_high", "direction").to_dicts())
