"""Piecewise Hockney fit: exact solver, synthetic truth, and the shared InfiniBand/RoCE data."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy.optimize import lsq_linear

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.models.hockney import HockneyFit, _fit_line, fit_hockney, fit_hockney_table
from mpiatlas.models.hockney_trust import CI_REL_TOL, LATENCY_FLOOR_US, latency_on_floor, relative_ci_spread, trust_warnings
from mpiatlas.parsers.imb import parse_imb_file
from mpiatlas.stats.agreement import agreement

SIZES = 2.0 ** np.arange(0, 23)  # IMB default 1 B … 4 MiB (0 B handled separately)
NOISE = 0.03  # multiplicative, 1 sigma


def _noisy(t: np.ndarray, seed: int) -> np.ndarray:
    return t * (1.0 + NOISE * np.random.default_rng(seed).standard_normal(t.shape))


# -- the bounded relative-error line -------------------------------------------------------------


@pytest.mark.parametrize("case", range(30))
def test_fit_line_matches_scipy_lsq_linear(case: int) -> None:
    """The closed-form bounded solve equals scipy's bounded linear least squares, bounds active or not."""
    rng = np.random.default_rng(case)
    s = np.sort(rng.choice(SIZES, size=rng.integers(3, 10), replace=False))
    lam, inv_b = rng.uniform(-5.0, 5.0), rng.uniform(-1e-3, 1e-3)  # negative truths force the bounds
    t = np.abs(lam + inv_b * s) + rng.uniform(0.1, 3.0, size=s.size)
    got_lam, got_g, _ = _fit_line(s, t)
    scale = s.max()
    ref = lsq_linear(
        np.column_stack([1.0 / t, s / scale / t]), np.ones_like(t),
        bounds=([LATENCY_FLOOR_US, 0.0], [np.inf, np.inf]), method="bvls", tol=1e-14,
    )  # fmt: skip
    assert got_lam == pytest.approx(ref.x[0], rel=1e-7, abs=1e-9)
    assert got_g * scale == pytest.approx(ref.x[1], rel=1e-7, abs=1e-9)


# -- synthetic truth -----------------------------------------------------------------------------

# Tolerances (3 % multiplicative noise, 23 sizes 1 B … 4 MiB), checked over 20 seeds each:
LAT_TOL_1REP = 0.05  # λ within 5 % with one sample per size
BW_TOL_1REP = 0.05  # B within 5 %
LAT_TOL_5REP = 0.03  # λ within 3 % with 5 repetitions per size (median + repetition bootstrap)
BW_TOL_5REP = 0.03  # B within 3 %


def _model_b(fit: HockneyFit) -> float:
    """The model's B: its last (asymptotic) segment's fitted 1/slope."""
    return float(fit.segments[-1].bandwidth_MBps or 0.0)


def _asymptotic_truth(t_true: np.ndarray, sizes: np.ndarray = SIZES) -> float:
    """The asymptotic-bandwidth estimand of a noiseless curve: s/t at the largest size."""
    return float(sizes[-1] / t_true[-1])


ASYM_TOL_1REP = 0.10  # one sample at the largest size with 3 % noise: within 3.3 σ
ASYM_TOL_5REP = 0.06  # the median of 5 such samples (σ ≈ 1.6 %): within 3.7 σ


def test_single_regime_recovered() -> None:
    lam, bw = 1.5, 10_000.0
    spurious = 0
    for seed in range(20):
        fit = fit_hockney(SIZES, _noisy(lam + SIZES / bw, seed), seed=seed)
        assert fit.latency_us == pytest.approx(lam, rel=LAT_TOL_1REP), seed
        assert _model_b(fit) == pytest.approx(bw, rel=BW_TOL_1REP), seed
        assert fit.asymptotic_bandwidth_MBps == pytest.approx(_asymptotic_truth(lam + SIZES / bw), rel=ASYM_TOL_1REP)
        assert fit.n_sizes == 23 and fit.ci_method == "residuals"
        assert fit.latency_ci_us[0] <= fit.latency_us <= fit.latency_ci_us[1]
        lo, hi = fit.asymptotic_bandwidth_ci_MBps
        assert lo <= fit.asymptotic_bandwidth_MBps <= hi
        spurious += fit.breakpoints_bytes != []
    # Pure noise rarely looks like a regime change (observed: 1 of these 20, at 128 B).
    assert spurious <= 2


def test_single_regime_with_repetitions() -> None:
    lam, bw = 1.5, 10_000.0
    sizes = np.repeat(SIZES, 5)
    covered_lat = covered_bw = 0
    for seed in range(20):
        fit = fit_hockney(sizes, _noisy(lam + sizes / bw, seed), seed=seed)
        assert fit.ci_method == "repetitions" and fit.n_sizes == 23
        assert fit.latency_us == pytest.approx(lam, rel=LAT_TOL_5REP), seed
        assert _model_b(fit) == pytest.approx(bw, rel=BW_TOL_5REP), seed
        assert fit.breakpoints_bytes == [], seed
        covered_lat += fit.latency_ci_us[0] <= lam <= fit.latency_ci_us[1]
        lo, hi = fit.asymptotic_bandwidth_ci_MBps
        covered_bw += lo <= _asymptotic_truth(lam + SIZES / bw) <= hi
    assert covered_lat >= 17 and covered_bw >= 17  # nominal 95 % of 20 = 19; observed 19 and 20


def test_confidence_intervals_cover_truth_most_of_the_time() -> None:
    lam, bw = 1.5, 10_000.0
    hits_lat = hits_bw = 0
    for seed in range(20):
        fit = fit_hockney(SIZES, _noisy(lam + SIZES / bw, 100 + seed), seed=seed)
        hits_lat += fit.latency_ci_us[0] <= lam <= fit.latency_ci_us[1]
        lo, hi = fit.asymptotic_bandwidth_ci_MBps
        hits_bw += lo <= _asymptotic_truth(lam + SIZES / bw) <= hi
    assert hits_lat >= 16 and hits_bw >= 16  # nominal 95 %: at least 80 % of 20


def _eager_rendezvous(s: np.ndarray) -> np.ndarray:
    # Eager up to 32 KiB (λ 1.5 µs, 10 GB/s); rendezvous from 64 KiB: handshake λ 8 µs, 12 GB/s.
    return np.where(s < 65536, 1.5 + s / 10_000.0, 8.0 + s / 12_000.0)


@pytest.mark.parametrize("seed", range(20))
def test_two_regimes_eager_rendezvous(seed: int) -> None:
    fit = fit_hockney(SIZES, _noisy(_eager_rendezvous(SIZES), seed), seed=seed)
    assert len(fit.breakpoints_bytes) == 1
    assert fit.breakpoints_bytes[0] in (32768, 65536, 131072)  # within one size step of 64 KiB
    assert fit.latency_us == pytest.approx(1.5, rel=LAT_TOL_1REP)  # λ from the eager segment
    assert _model_b(fit) == pytest.approx(12_000.0, rel=0.06)  # B from the rendezvous segment: 6 %
    eager, rendezvous = fit.segments
    assert (eager.from_bytes, eager.to_bytes, rendezvous.to_bytes) == (1, fit.breakpoints_bytes[0] // 2, 4194304)
    assert rendezvous.latency_us > eager.latency_us


def test_two_regimes_exact_breakpoint_without_noise() -> None:
    fit = fit_hockney(SIZES, _eager_rendezvous(SIZES))
    assert fit.breakpoints_bytes == [65536]
    assert fit.latency_us == pytest.approx(1.5, rel=1e-9)
    assert _model_b(fit) == pytest.approx(12_000.0, rel=1e-9)
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(_asymptotic_truth(_eager_rendezvous(SIZES)), rel=1e-12)
    assert fit.segments[1].latency_us == pytest.approx(8.0, rel=1e-9)
    assert fit.latency_ci_us == pytest.approx((1.5, 1.5), rel=1e-6)
    np.testing.assert_allclose(fit.predict(SIZES), _eager_rendezvous(SIZES), rtol=1e-9)
    assert max(abs(r.rel_err or 0.0) for r in fit.residuals) < 1e-9


def test_zero_byte_rows_are_dropped_but_reported() -> None:
    t = 1.5 + SIZES / 10_000.0
    with_zero = fit_hockney(np.r_[0.0, SIZES], np.r_[0.3, t])
    without = fit_hockney(SIZES, t)
    assert with_zero.zero_byte_us == 0.3 and without.zero_byte_us is None
    assert with_zero.latency_us == without.latency_us and with_zero.n_sizes == 23


def test_isolated_spike_is_excluded() -> None:
    t = 1.0 + SIZES / 12_000.0
    t[8] *= 2.1  # 256 B, like the csd3 ib ompi3 PingPong row (2.46 µs between 1.16 and 1.47)
    fit = fit_hockney(SIZES, t)
    assert fit.excluded_bytes == [256] and fit.n_sizes == 22
    assert fit.latency_us == pytest.approx(1.0, rel=1e-9) and fit.breakpoints_bytes == []


def test_deterministic_with_seed() -> None:
    t = _noisy(1.5 + SIZES / 10_000.0, 7)
    a, b, c = fit_hockney(SIZES, t, seed=3), fit_hockney(SIZES, t, seed=3), fit_hockney(SIZES, t, seed=4)
    assert a == b
    assert a.latency_us == c.latency_us and a.latency_ci_us != c.latency_ci_us


def test_rejects_unfittable_input() -> None:
    with pytest.raises(ValueError, match="at least 3 distinct non-zero sizes"):
        fit_hockney([0, 1, 2], [0.2, 1.0, 1.1])
    with pytest.raises(ValueError, match="finite and > 0"):
        fit_hockney([1, 2, 4, 8], [1.0, 0.0, 1.1, 1.2])


def test_fit_table_groups_and_skips_bandwidth_only_benchmarks() -> None:
    rows = []
    for label, lam in (("a", 1.0), ("b", 2.0)):
        rows += [{"label": label, "benchmark": "PingPong", "bytes": int(s), "t_usec": lam + s / 5000.0, "status": "ok"} for s in SIZES]
        rows += [{"label": label, "benchmark": "Uniband", "bytes": int(s), "t_usec": None, "status": "ok"} for s in SIZES]
    rows.append({"label": "a", "benchmark": "PingPong", "bytes": 8388608, "t_usec": None, "status": "time-out"})
    rows += [{"label": "c", "benchmark": "PingPing", "bytes": s, "t_usec": 1.0, "status": "ok"} for s in (1, 2)]
    out = fit_hockney_table(pl.DataFrame(rows), ["label"])
    assert [(r.label, r.benchmark) for r in out] == [("a", "PingPong"), ("b", "PingPong"), ("c", "PingPing")]
    assert out[0].latency_us == pytest.approx(1.0) and out[1].latency_us == pytest.approx(2.0)
    assert out[0].segments[-1].bandwidth_MBps == pytest.approx(5000.0) and out[0].n_sizes == 23
    assert out[2].error is not None and "at least 3" in out[2].error and out[2].to_json() == {
        "label": "c", "benchmark": "PingPing", "error": out[2].error}
    json.dumps([r.to_json() for r in out], allow_nan=False)  # JSON-ready


# -- real data: import + fit through the CLI ----------------------------------------------------

STACKHPC = "stackhpc-alaska-csd3-imb-omb"

# Published figures. Latency: the perflog "IMB PingPong min t" (PROVENANCE.md table "Absolute
# last-run values from the perflogs") or the mpi-container-test README "latency at 0 B"; bandwidth:
# the matching "IMB PingPong max MB/s" / README "max bandwidth", i.e. the 4 MiB plateau, MB = 10^6 B.
EXPECTED: dict[str, tuple[str, float, float, str]] = {
    # label: (raw file, latency µs, max MB/s, source)
    "alaska_ib_impi": (f"{STACKHPC}/output/alaska/ib-gcc9-impi-verbs/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 1.12, 6241.24, "perflog alaska ib-gcc9-impi-verbs job 6573"),
    "alaska_ib_ompi4": (f"{STACKHPC}/output/alaska/ib-gcc9-openmpi4-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 1.03, 11892.6, "perflog alaska ib-gcc9-openmpi4-ucx job 6575"),
    "alaska_roce_impi": (f"{STACKHPC}/output/alaska/roce-gcc9-impi-verbs/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 2.33, 2502.87, "perflog alaska roce-gcc9-impi-verbs job 6574"),
    "alaska_roce_ompi4": (f"{STACKHPC}/output/alaska/roce-gcc9-openmpi4-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 2.06, 3043.13, "perflog alaska roce-gcc9-openmpi4-ucx job 6576"),
    "csd3_ib_ompi3": (f"{STACKHPC}/output/csd3/cclake-ib-gcc9-ompi3-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 0.98, 12047.46, "perflog csd3 cclake-ib-gcc9-ompi3-ucx job 29537140"),
    "csd3_ib_impi19": (f"{STACKHPC}/output/csd3/cclake-ib-icc19-impi19-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 1.06, 12069.36, "perflog csd3 cclake-ib-icc19-impi19-ucx job 29537138"),
    "csd3_roce_ompi3": (f"{STACKHPC}/output/csd3/cclake-roce-gcc9-ompi3-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 1.43, 5739.03, "perflog csd3 cclake-roce-gcc9-ompi3-ucx job 29537141"),
    "csd3_roce_impi19": (f"{STACKHPC}/output/csd3/cclake-roce-icc19-impi19-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", 1.48, 5738.79, "perflog csd3 cclake-roce-icc19-impi19-ucx job 29537139"),
    "container_ompi3_NA": (f"{STACKHPC}/mpi-container-test/ompi3-NA-ib-ping.sh.out", 1.1, 11942.17, "mpi-container-test README"),
    "container_ompi4_NA": (f"{STACKHPC}/mpi-container-test/ompi4-NA-ib-ping.sh.out", 0.84, 11943.91, "mpi-container-test README"),
    "container_ompi3_foss2019": (f"{STACKHPC}/mpi-container-test/ompi3-foss2019-ib-ping.sh.out", 1.1, 11942.59, "mpi-container-test README"),
    "container_ompi4_foss2019": (f"{STACKHPC}/mpi-container-test/ompi4-foss2019-ib-ping.sh.out", 1.1, 11940.07, "mpi-container-test README"),
}  # fmt: skip
LAT_TOL_REAL = 0.15  # fitted λ vs published small-message latency
BW_TOL_REAL = 0.03  # fitted asymptotic B vs published 4 MiB plateau
# alaska ib impi-verbs (flagged "anomalously low" in PROVENANCE.md) has a rendezvous regime with
# λ ≈ 36 µs: at 4 MiB it still delivers only 1/(1 + λB/s) ≈ 95.6 % of its asymptote, so the
# asymptotic B is 4.4 % above the published 4 MiB figure. Tolerance 5 % there; its model
# bandwidth *at 4 MiB* is checked against the published figure at 3 % like every other case.
BW_TOL_REAL_OVERRIDE = {"alaska_ib_impi": 0.05}


def _import_and_fit(tmp_path: Path, labelled_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> list[dict]:
    raw = tmp_path / "raw"
    raw.mkdir()
    copies = []
    for label, src in labelled_files.items():
        # The stackhpc files are all called rfm_IMB_PingPong_job.out: copy them so label = stem is unique.
        copies.append(raw / f"{label}{src.suffix}")
        shutil.copy(src, copies[-1])
    out = tmp_path / "samples"
    assert main(["import", *map(str, copies), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["fit", str(out), "--model", "hockney", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_published_figures_match_the_perflogs() -> None:
    """The EXPECTED stackhpc figures are the last perflog records for each partition."""
    root = require_datasets() / STACKHPC
    for label, (rel, lat, bw, source) in EXPECTED.items():
        if "perflog" not in source:
            continue
        system, partition = rel.split("/")[2:4]
        log = (root / "perflogs" / system / partition / "imb/IMB_PingPong/IMB_PingPong.log").read_text().splitlines()
        last = {f.split("=")[0]: float(f.split("=")[1]) for line in log[-2:] for f in line.split("|") if f.startswith(("max_bandwidth=", "min_latency="))}
        assert last == {"max_bandwidth": bw, "min_latency": lat}, label


def test_hockney_on_infiniband_and_roce_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = require_datasets()
    results = _import_and_fit(tmp_path, {label: root / spec[0] for label, spec in EXPECTED.items()}, capsys)
    by_label = {r["label"]: r for r in results}
    assert set(by_label) == set(EXPECTED)
    for label, (_, lat, bw, source) in EXPECTED.items():
        r = by_label[label]
        assert r["benchmark"] == "PingPong" and r["np"] == 2 and r["n_sizes"] >= 22
        for key in ("label", "latency_us", "latency_ci_us", "asymptotic_bandwidth_MBps", "asymptotic_bandwidth_ci_MBps",
                    "peak_bandwidth_MBps", "peak_bandwidth_ci_MBps", "breakpoints_bytes", "segments", "stack",
                    "transport", "mapping", "algorithm"):
            assert key in r
        assert r["latency_us"] > 0, label
        assert r["latency_us"] == pytest.approx(lat, rel=LAT_TOL_REAL), f"{label} λ vs {source}"
        # The published "max bandwidth" is the highest s/t: our peak B, to the printed digit.
        assert r["peak_bandwidth_MBps"] == pytest.approx(bw, rel=1e-4), f"{label} peak B vs {source}"
        assert r["asymptotic_bytes"] == 4194304 and r["asymptotic_bandwidth_MBps"] <= r["peak_bandwidth_MBps"]
        assert r["asymptotic_bandwidth_MBps"] == pytest.approx(bw, rel=BW_TOL_REAL), f"{label} asymptotic B vs {source}"
        assert _model_b(HockneyFit.from_dict(r)) == pytest.approx(bw, rel=BW_TOL_REAL_OVERRIDE.get(label, BW_TOL_REAL))
        last = r["segments"][-1]
        t_4mib = last["latency_us"] + 4194304 / last["bandwidth_MBps"]
        assert 4194304 / t_4mib == pytest.approx(bw, rel=BW_TOL_REAL), f"{label} model B(4 MiB) vs {source}"
        assert 0 < r["latency_ci_us"][0] <= r["latency_us"] <= r["latency_ci_us"][1]
        for figure in ("asymptotic", "peak"):
            lo, hi = r[f"{figure}_bandwidth_ci_MBps"]
            assert lo <= r[f"{figure}_bandwidth_MBps"] <= hi, (label, figure)
        assert r["breakpoints_bytes"] == [s["from_bytes"] for s in r["segments"][1:]]
        assert all(s["latency_us"] > 0 for s in r["segments"])
        # Narrow intervals on real, published-figure data: the trust checks raise no false alarm.
        assert r["ci_warning"] is None, f"{label}: {r['ci_warning']}"


BRANDINO = "brandino-juno-arm-imb41/data"


def test_hockney_on_brandino_arm_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Positive λ everywhere; readme: intranode "~2–4 µs", internode "~150 µs", "~100 MB/s" (≈108 MiB/s)."""
    root = require_datasets()
    names = ["IMB-MPI1_intranode", "IMB-MPI1_internode", "IMB-MPI1_internode_Socket"]
    results = _import_and_fit(tmp_path, {n: root / BRANDINO / f"{n}.txt" for n in names}, capsys)
    assert sorted((r["label"], r["benchmark"]) for r in results) == sorted((n, b) for n in names for b in ("PingPong", "PingPing"))
    for r in results:
        assert r["latency_us"] > 0 and all(s["latency_us"] > 0 for s in r["segments"]), r["label"]
    pingpong = {r["label"]: r for r in results if r["benchmark"] == "PingPong"}
    assert 2.0 <= pingpong["IMB-MPI1_intranode"]["latency_us"] <= 4.0
    for name in ("IMB-MPI1_internode", "IMB-MPI1_internode_Socket"):
        assert 140.0 <= pingpong[name]["latency_us"] <= 180.0
        # 108.3 MiB/s = 113.6 MB/s at 4 MiB (1 GbE); asymptote within 3 %.
        assert pingpong[name]["asymptotic_bandwidth_MBps"] == pytest.approx(108.3 * 1.048576, rel=BW_TOL_REAL)


def test_naive_least_squares_goes_negative_where_ours_does_not() -> None:
    """Why the relative-error piecewise fit: an unweighted line over 1 B … 4 MiB is fitted by the
    large sizes and puts λ below zero on the brandino intranode PingPong."""
    df = parse_imb_file(require_datasets() / BRANDINO / "IMB-MPI1_intranode.txt").filter(pl.col("benchmark") == "PingPong")
    _slope, intercept = np.polyfit(df["bytes"].to_numpy().astype(float), df["t_usec"].to_numpy(), 1)
    assert intercept < 0
    assert fit_hockney(df["bytes"], df["t_usec"]).latency_us == pytest.approx(3.85, abs=0.1)


# -- fit CLI on pipeline-shaped samples ---------------------------------------------------------


def _pipeline_samples(tmp_path: Path) -> Path:
    """A tidy-like samples table: label = stack/transport/mapping, cells by np/algorithm, 3 reps."""
    rows = []
    for rep in range(3):
        for np_, lam in ((2, 1.0), (4, 2.0)):
            for s in SIZES:
                t = (lam + s / 8000.0) * (1.0 + 0.01 * ((rep + int(np.log2(s))) % 3 - 1))
                rows.append({"label": "impi/shm/core", "stack": "impi", "transport": "shm", "mapping": "core", "np": np_,
                             "algorithm": None, "rep": rep, "benchmark": "PingPong", "bytes": int(s), "t_usec": t, "status": "ok"})
            rows.append({"label": "impi/shm/core", "stack": "impi", "transport": "shm", "mapping": "core", "np": np_,
                         "algorithm": None, "rep": rep, "benchmark": "Bcast", "bytes": 1024, "t_usec": 3.0, "status": "ok"})
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    pl.DataFrame(rows).write_parquet(tidy / "imb_samples.parquet")
    return tidy


def test_fit_cli_groups_pipeline_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # rich wraps the table to the terminal width
    tidy = _pipeline_samples(tmp_path)
    assert main(["fit", str(tidy), "--model", "hockney", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["label"], r["np"], r["benchmark"]) for r in out] == [("impi/shm/core", 2, "PingPong"), ("impi/shm/core", 4, "PingPong")]
    for r, lam in zip(out, (1.0, 2.0)):
        assert r["stack"] == "impi" and r["transport"] == "shm" and r["mapping"] == "core" and r["algorithm"] is None
        assert r["ci_method"] == "launches" and r["n_launches"] == 3 and r["n_sizes"] == 23  # the rep column
        assert r["latency_us"] == pytest.approx(lam, rel=0.02) and r["segments"][-1]["bandwidth_MBps"] == pytest.approx(8000.0, rel=0.02)
    assert main(["fit", str(tidy)]) == 0  # rich table
    table = capsys.readouterr().out
    assert "impi/shm/core np=2" in table and "impi/shm/core np=4" in table and "PingPong" in table


def test_fit_cli_nothing_to_fit_and_bad_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tidy = _pipeline_samples(tmp_path)
    assert main(["fit", str(tidy), "--json", "--benchmark", "PingPing"]) == 0  # samples, but no PingPing
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "nothing fitted" in captured.err
    assert main(["fit", str(tidy), "--json", "--benchmark", "Uniband", "Biband"]) == 2
    assert "skipping Uniband: a bandwidth-only table (no time column)" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    pl.DataFrame().write_parquet(empty / "imb_samples.parquet")
    # Every IMB cell unavailable (e.g. Open MPI without IMB): an empty, valid answer.
    assert main(["fit", str(empty), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == [] and "are empty" in out.err


# -- how sure the fit is: ci_warning (issue #23, #26) ---------------------------------------------


def test_clean_synthetic_fits_are_accurate_covered_and_unwarned() -> None:
    """Known λ = 1.5 µs, B = 10,000 MB/s, 3 % noise, 5 repetitions: each fit within 3 % of truth (the
    model's B) and the asymptotic B within 3 % of its own truth (s/t of the noiseless curve at 4 MiB),
    the intervals within ±25 % (so no warning), and covering the truth in at least 17 of 20."""
    lam, bw = 1.5, 10_000.0
    sizes = np.repeat(SIZES, 5)
    covered = 0
    for seed in range(20):
        fit = fit_hockney(sizes, _noisy(lam + sizes / bw, 200 + seed), seed=seed)
        assert fit.latency_us == pytest.approx(lam, rel=LAT_TOL_5REP), seed
        truth = _asymptotic_truth(lam + SIZES / bw)
        assert _model_b(fit) == pytest.approx(bw, rel=BW_TOL_5REP), seed
        assert fit.asymptotic_bandwidth_MBps == pytest.approx(truth, rel=ASYM_TOL_5REP), seed
        assert relative_ci_spread(fit.latency_us, fit.latency_ci_us) < CI_REL_TOL, seed
        assert relative_ci_spread(fit.asymptotic_bandwidth_MBps, fit.asymptotic_bandwidth_ci_MBps) < CI_REL_TOL, seed
        assert fit.ci_warning is None, seed
        lo, hi = fit.asymptotic_bandwidth_ci_MBps
        covered += fit.latency_ci_us[0] <= lam <= fit.latency_ci_us[1] and lo <= truth <= hi
    assert covered >= 17


def test_noisy_large_sizes_widen_b_and_say_so() -> None:
    """The same truth, but the sizes from 256 KiB on spread 50 % (lognormal σ 0.5, a perturbed
    node): λ stays within 3 % and unwarned; B's interval widens beyond ±25 % and the warning says
    B, its interval and how wide, whenever (and only when) the interval is that wide."""
    lam, bw = 1.5, 10_000.0
    sizes = np.repeat(SIZES, 5)
    wide = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        noise = np.where(sizes >= 2**18, rng.lognormal(0.0, 0.5, sizes.size), 1 + 0.02 * rng.standard_normal(sizes.size))
        fit = fit_hockney(sizes, (lam + sizes / bw) * noise, seed=seed)
        assert fit.latency_us == pytest.approx(lam, rel=0.03), seed
        assert "λ" not in (fit.ci_warning or ""), seed
        spread = relative_ci_spread(fit.asymptotic_bandwidth_MBps, fit.asymptotic_bandwidth_ci_MBps)
        is_wide = spread is not None and spread > CI_REL_TOL
        lo, hi = fit.asymptotic_bandwidth_ci_MBps
        says = (f"asymptotic B = {fit.asymptotic_bandwidth_MBps:,.0f} MB/s has a wide 95 % interval "
                f"[{lo:,.0f}, {hi:,.0f}]")
        assert (says in (fit.ci_warning or "")) == is_wide, (seed, fit.ci_warning)
        wide += is_wide
    assert wide >= 7  # observed 9 of 10 (the other's interval spans −17 % … +18 %)


def test_latency_on_its_floor_is_a_warning_not_a_result() -> None:
    """t = s/B (no latency) with 3 % noise: λ ends on (or its interval reaches) the 1e-6 µs bound,
    and the warning says λ is not a result; B is still recovered within 3 %. Where the replicates
    leave the bound (λ of a few 1e-6 µs), λ's interval is still far wider than ±25 %."""
    on_floor = 0
    for seed in range(5):
        t = SIZES / 10_000.0 * (1 + 0.03 * np.random.default_rng(seed).standard_normal(SIZES.size))
        fit = fit_hockney(SIZES, t, seed=seed)
        assert _model_b(fit) == pytest.approx(10_000.0, rel=0.03), seed
        assert fit.ci_warning is not None and "λ" in fit.ci_warning, seed
        floor = latency_on_floor(fit.latency_ci_us[0])
        assert ("lower bound (1e-06 µs)" in fit.ci_warning) == floor, seed
        on_floor += floor
    assert on_floor >= 4  # observed 4 of 5 (seed 2: λ 7e-6 µs in [2e-6, 1.3e-5], the width warning)


def test_bimodal_repetitions_are_flagged() -> None:
    """Two repetitions per size, each in one of two latency modes (1 or 20 µs): the bootstrap over
    residuals cannot measure that, so every one of these fits must carry a warning naming λ."""
    rng = np.random.default_rng(3)
    for seed in range(20):
        lams = np.where(rng.random(2 * len(SIZES)) < 0.5, 1.0, 20.0)
        sizes = np.repeat(SIZES, 2)
        fit = fit_hockney(sizes, (lams + sizes / 5000.0) * rng.lognormal(0.0, 0.05, sizes.size), seed=seed)
        assert fit.ci_method == "residuals", seed
        assert fit.ci_warning is not None and "λ" in fit.ci_warning, seed
        assert HockneyFit.from_dict(fit.to_dict()).ci_warning == fit.ci_warning


def _fit_with(lam_ci: tuple[float, float], bw_ci: tuple[float, float], **kw: object) -> HockneyFit:
    seg = {"from_bytes": 1, "to_bytes": 4194304, "latency_us": 2.0, "bandwidth_MBps": 10_000.0, "n_sizes": 23}
    return HockneyFit(latency_us=2.0, latency_ci_us=lam_ci, asymptotic_bandwidth_MBps=10_000.0,
                      asymptotic_bandwidth_ci_MBps=bw_ci, peak_bandwidth_MBps=12_000.0,
                      peak_bandwidth_ci_MBps=(11_500.0, 12_500.0), breakpoints_bytes=[], segments=[seg], n_sizes=23,
                      residuals=[], **kw)  # type: ignore[arg-type]


def test_trust_warnings_fire_exactly_beyond_25_percent() -> None:
    assert trust_warnings(_fit_with((1.52, 2.48), (7_600.0, 12_400.0))) == []  # ±24 %
    (lam_only,) = trust_warnings(_fit_with((1.48, 2.0), (7_600.0, 12_400.0)))  # λ −26 %
    assert lam_only == "λ = 2 µs has a wide 95 % interval [1.48, 2], −26 % to +0 % of the estimate (wider than ±25 %)"
    (b_only,) = trust_warnings(_fit_with((1.9, 2.1), (9_900.0, 12_600.0)))  # B +26 %
    assert b_only.startswith("asymptotic B = 10,000 MB/s has a wide 95 % interval [9,900, 12,600], −1 % to +26 %")
    # Issue #23's figures: B 2,396 in [2,334, 25,618]; both checks name it.
    fit = _fit_with((1.9, 2.1), (2_334.0, 25_618.0))
    fit.asymptotic_bandwidth_MBps = 2_396.0
    assert trust_warnings(fit) == [
        "asymptotic B = 2,396 MB/s has a wide 95 % interval [2,334, 25,618], −3 % to +969 % of the estimate (wider than ±25 %)"]
    outside = _fit_with((1.9, 2.1), (10_500.0, 11_000.0))  # B outside its own interval
    assert trust_warnings(outside)[-1].startswith("asymptotic B outside its own interval")
    no_interval = _fit_with((1.9, 2.1), (math.nan, math.nan))  # too few launches with a value: no interval
    assert trust_warnings(no_interval) == []
    unbounded = _fit_with((1.9, 2.1), (9_000.0, math.inf))
    assert "+∞ %" in trust_warnings(unbounded)[0]


# -- intervals over launches (issue #33) -----------------------------------------------------------

LAUNCH_SPREAD = 0.08  # each launch's λ and B off the truth by this much (1 σ, multiplicative)
WITHIN_NOISE = 0.01  # sizes inside one launch: 1 % (IMB's own averaging)


def _campaign(rng: np.random.Generator, n_launches: int = 3) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A campaign of ``n_launches`` launches of the curve λ = 1.5 µs, B = 10,000 MB/s, each launch
    with its own λ and B (its mapping, frequency, hypervisor): the unit that varies."""
    sizes, times, launches = [], [], []
    for k in range(n_launches):
        lam = 1.5 * rng.lognormal(0.0, LAUNCH_SPREAD)
        bw = 10_000.0 * rng.lognormal(0.0, LAUNCH_SPREAD)
        sizes.append(SIZES)
        times.append((lam + SIZES / bw) * (1 + WITHIN_NOISE * rng.standard_normal(SIZES.size)))
        launches += [f"rep{k}"] * SIZES.size
    return np.concatenate(sizes), np.concatenate(times), launches


def _coverage(fits: list[HockneyFit], figure: str) -> float:
    """Share of ordered pairs (i ≠ j) whose run i's interval holds run j's estimate (the bench's)."""
    value = {"λ": lambda f: (f.latency_us, f.latency_ci_us),
             "asymptotic B": lambda f: (f.asymptotic_bandwidth_MBps, f.asymptotic_bandwidth_ci_MBps),
             "peak B": lambda f: (f.peak_bandwidth_MBps, f.peak_bandwidth_ci_MBps)}[figure]
    return agreement([value(f)[0] for f in fits], [value(f)[1] for f in fits]).coverage


def test_intervals_over_launches_cover_the_next_campaign() -> None:
    """Twelve campaigns of 3 launches whose λ and B differ by 8 % from launch to launch: with the
    launches named, each campaign's interval holds another campaign's estimate in ≥ 80 % of the
    ordered pairs (the bench's target); the bootstrap over the 3 repetitions of each size holds it in
    far fewer. Observed (seed 33): λ 83 % against 22 %, asymptotic B 86 % against 58 %, peak B 88 %
    against 55 %."""
    rng = np.random.default_rng(33)
    campaigns = [_campaign(rng) for _ in range(12)]
    over = [fit_hockney(s, t, launches=ids, seed=i) for i, (s, t, ids) in enumerate(campaigns)]
    within = [fit_hockney(s, t, seed=i) for i, (s, t, _) in enumerate(campaigns)]
    assert all(f.ci_method == "launches" and f.n_launches == 3 for f in over)
    assert all(f.ci_method == "repetitions" for f in within)
    for figure in ("λ", "asymptotic B", "peak B"):
        covered, naive = _coverage(over, figure), _coverage(within, figure)
        assert covered >= 0.80, (figure, covered, naive)
        assert naive <= 0.6 and covered - naive >= 0.25, (figure, covered, naive)


def test_two_launches_are_too_few_and_say_so() -> None:
    """Two launches give no spread between launches worth a t interval (t(0.975, 1) = 12.7): the
    intervals stay the bootstrap's, ``ci_method`` says which, and the report's words say what they
    leave out (mpiatlas.report.formatting.interval_scope)."""
    from mpiatlas.report.formatting import interval_scope

    s, t, ids = _campaign(np.random.default_rng(2), n_launches=2)
    fit = fit_hockney(s, t, launches=ids)
    assert fit.ci_method == "residuals" and fit.n_launches == 2  # 2 samples per size: the residuals' bootstrap
    assert interval_scope(fit.ci_method, fit.n_launches) == (
        "within 2 launches (residuals): leaves out the variation between launches")
    s, t, ids = _campaign(np.random.default_rng(2), n_launches=3)
    assert interval_scope("launches", fit_hockney(s, t, launches=ids).n_launches) == "over 3 launches"


def test_agreement_counts_ordered_pairs() -> None:
    """Three runs: 1.0 [0.9, 1.1], 1.05 [1.0, 1.1], 1.3 [1.2, 1.4]: of the 6 ordered pairs, run 1's
    interval holds run 2's estimate and run 2's run 1's: coverage 2/6; max/min 1.3."""
    got = agreement([1.0, 1.05, 1.3], [(0.9, 1.1), (1.0, 1.1), (1.2, 1.4)])
    assert got.coverage == pytest.approx(2 / 6) and got.max_over_min == pytest.approx(1.3)
    assert got.cv == pytest.approx(np.std([1.0, 1.05, 1.3], ddof=1) / np.mean([1.0, 1.05, 1.3]))
    assert not got.meets_targets
    with pytest.raises(ValueError, match="at least 2 runs"):
        agreement([1.0], [(0.9, 1.1)])
    with pytest.raises(ValueError, match="finite and > 0"):
        agreement([1.0, math.nan], [(0.9, 1.1), (0.9, 1.1)])


def test_residual_intervals_of_the_bandwidths_are_around_the_measured_figures() -> None:
    """One launch whose two largest sizes ran slow (issue #23's curve): the model misses them, and
    intervals drawn around the model's s/t once missed the measured 2,400 MB/s. The bandwidths'
    replicates sit on the measured medians, so each interval holds its estimate."""
    bw = np.interp(np.log2(SIZES), [0, 16, 20, 22], [20.0, 27000.0, 22000.0, 22000.0])
    t = 0.3 + SIZES / bw
    t[-2:] = SIZES[-2:] / 2400.0
    fit = fit_hockney(SIZES, t * (1 + 0.01 * np.random.default_rng(4).standard_normal(SIZES.size)))
    assert fit.ci_method == "residuals"
    for figure in ("asymptotic", "peak"):
        lo, hi = getattr(fit, f"{figure}_bandwidth_ci_MBps")
        assert lo <= getattr(fit, f"{figure}_bandwidth_MBps") <= hi, figure
