"""Kernel models (mpiatlas.models.kernels) on synthetic data with known parameters.

Each test builds a kernel table shaped like tidy's ``kernel_<name>.parquet`` from the model
itself (plus stated noise) and checks the fit gives the parameters back within a stated
tolerance, that residuals and the failure statement are there, and that the CLI writes them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.models.fit_records import hockney_records
from mpiatlas.cli import main
from mpiatlas.models import kernels as kernel_models
from mpiatlas.models.fits_files import problems
from mpiatlas.models.kernel_p2p import fit_coll, fit_pingpong
from mpiatlas.models.fit_records import FitRecordError
from mpiatlas.models.kernel_records import CollFit, KernelFits, PingpongFit
from mpiatlas.models.kernels import (
    P2P,
    binomial_subtree,
    failure_statement,
    fit_jacobi,
    fit_kernels,
    fit_matsum,
    fit_ring,
    matsum_model,
    ring_phases,
    ring_predict,
)

LABEL = "impi/shm/core"
HEAD = {"label": LABEL, "stack": "impi", "transport": "shm", "mapping": "core", "cell_status": "ok"}
LAMBDA, BW = 0.5, 5000.0  # µs, MB/s (bytes/µs)
# Bootstrap replicates for the tests that check no confidence interval: every replicate of the
# matsum model is a bounded least-squares fit (~20 ms), so the full 400 cost ~10 s per fit.
FEW_BOOTSTRAPS = 40


@pytest.fixture
def few_bootstraps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer (still real) bootstrap replicates where the test asserts no interval."""
    monkeypatch.setattr(kernel_models, "N_BOOT", FEW_BOOTSTRAPS)


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and ±Infinity (Python's json accepts them; JSON does not)."""
    def refuse(constant: str) -> object:
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def hockney_entry(lam: float = LAMBDA, bw: float = BW, label: str = LABEL) -> dict:
    """An IMB PingPong fit record of one segment λ + s/B; its asymptotic and peak B are both ``bw``."""
    return {"label": label, "benchmark": "PingPong", "latency_us": lam, "latency_ci_us": [lam, lam],
            "asymptotic_bandwidth_MBps": bw, "asymptotic_bandwidth_ci_MBps": [bw, bw], "asymptotic_bytes": 1 << 22,
            "peak_bandwidth_MBps": bw, "peak_bandwidth_ci_MBps": [bw, bw], "peak_bytes": 1 << 22,
            "segments": [{"from_bytes": 1, "to_bytes": 1 << 22, "latency_us": lam, "bandwidth_MBps": bw}]}


# ------------------------------------------------------------------------------------------- ring
def ring_table(p2p: P2P, nps=(2, 3, 4, 5, 6), sizes=(4, 65536), noise: float = 0.0, cores: int = 64,
               reps: int = 3, seed: int = 1) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for np_ in nps:
        for rep in range(reps):
            cell = f"kernel/impi/shm/core/np{np_}/ring/all/rep{rep}"
            for variant in ("nonblocking", "blocking", "ssend"):
                for size in sizes:
                    t = ring_predict(variant, np_, 2, size, p2p) * (1 + noise * rng.standard_normal())
                    for rank in range(np_):
                        rows.append({**HEAD, "cell_quality": "ok", "cell": cell, "rep": rep, "np": np_, "rank": rank, "size": np_,
                                     "variant": variant, "streams": 2, "bytes": size, "time_us": t,
                                     "oversubscribed": np_ > cores})
    return pl.DataFrame(rows)


def test_ring_phases_follow_the_odd_even_derivation() -> None:
    assert [ring_phases("nonblocking", p) for p in (1, 2, 3, 4)] == [1, 1, 1, 1]
    assert [ring_phases("blocking", p) for p in (1, 2, 3, 4, 5)] == [1, 2, 3, 2, 3]
    assert [ring_phases("ssend", p) for p in (2, 3)] == [2, 3]
    p2p = P2P(LAMBDA, BW, "PingPong")
    # 2 streams, 4 bytes, nonblocking: T = 2·P·t(4) ≈ 2·P·λ
    assert ring_predict("nonblocking", 4, 2, 4, p2p) == pytest.approx(2 * 4 * (LAMBDA + 4 / BW))
    # ssend: 2λ + s/B per message, 3 phases at odd P
    assert ring_predict("ssend", 3, 2, 1000, p2p) == pytest.approx(3 * 2 * 3 * (2 * LAMBDA + 1000 / BW))


def test_ring_fit_recovers_lambda_and_predicts_every_variant() -> None:
    df = ring_table(P2P(LAMBDA, BW, "PingPong"), noise=0.01)
    (fit,) = fit_ring(df, hockney_records([hockney_entry()]))
    assert fit.lambda_source == "PingPong" and fit.pingpong_latency_us == LAMBDA
    # ring-implied λ within 5 % of the true λ (1 % noise), its CI covers it
    assert fit.ring_latency_us == pytest.approx(LAMBDA, rel=0.05)
    lo, hi = fit.ring_latency_ci_us
    assert lo <= LAMBDA <= hi
    assert fit.ring_vs_pingpong_latency == pytest.approx(1.0, rel=0.05)
    assert fit.ring_bandwidth_MBps == pytest.approx(BW, rel=0.05)
    # the data follow the model: every residual within 4 % (1 % noise on the median of 3)
    assert len(fit.points) == 5 * 3 * 2
    assert all(abs(p.rel_err) < 0.04 for p in fit.points)
    blocking3 = next(p for p in fit.points if p.variant == "blocking" and p.np == 3 and p.bytes == 4)
    assert blocking3.phases_model == 3 and blocking3.phases_measured == pytest.approx(3, rel=0.04)
    assert fit.fails_where.startswith("holds within 25% at every point")


def test_ring_without_pingpong_fits_lambda_from_the_ring_and_says_so(few_bootstraps: None) -> None:
    df = ring_table(P2P(2.0, 1000.0, "x"))
    (fit,) = fit_ring(df, hockney_records([hockney_entry(label="other/label/core")]))
    assert fit.lambda_source == "ring" and "no IMB PingPong" in fit.lambda_note
    assert fit.pingpong_latency_us is None and fit.ring_vs_pingpong_latency is None
    assert fit.latency_us == pytest.approx(2.0, rel=1e-6)
    assert fit.bandwidth_MBps == pytest.approx(1000.0, rel=1e-6)
    result = fit_kernels({"ring": df}, [])
    assert any("no IMB PingPong" in n for n in result.notes)


def test_ring_failure_statement_names_the_worst_point() -> None:
    p2p = P2P(LAMBDA, BW, "PingPong")
    df = ring_table(p2p, nps=(2, 4), cores=2)
    # oversubscribed P=4 runs 10x slower than the model
    df = df.with_columns(pl.when(pl.col("np") == 4).then(pl.col("time_us") * 10).otherwise(pl.col("time_us"))
                         .alias("time_us"))
    (fit,) = fit_ring(df, hockney_records([hockney_entry()]))
    assert "P=4" in fit.fails_where and "oversubscribed" in fit.fails_where
    assert "10× the model" in fit.fails_where
    # the ring λ comes from P ≤ cores only, so it is not spoilt by the oversubscribed cells
    assert fit.ring_latency_us == pytest.approx(LAMBDA, rel=1e-6)
    assert failure_statement([], str).endswith("no measured point to test it against")


def test_a_matsum_fit_is_its_file_entry_and_a_wrong_one_is_named_by_file_and_key(few_bootstraps: None) -> None:
    fits = tuple(fit_matsum(matsum_table())) + tuple(fit_matsum(matsum_table(nps=(1, 2))))
    assert [f.fitted for f in fits] == [True, False]
    document = json.loads(json.dumps(KernelFits(matsum=fits).to_json()))
    assert KernelFits.from_json(document).matsum == fits
    fitted, failed = document["matsum"]
    # a failed series keeps its gather order and per-rank phases but has no figures
    assert "s_us" not in failed and failed["phases_by_rank"] and list(fitted)[:7] == [
        "label", "stack", "transport", "mapping", "dims", "topo", "dist"]
    fitted["gather_order"][0]["slowest_first"] = [0, "1"]
    with pytest.raises(FitRecordError, match=r"kernels\.json: \$\.matsum\[0\]\.gather_order\[0\]\.slowest_first\[1\]: "
                                             r"expected an integer, got '1'"):
        KernelFits.from_json(document)


def test_a_ring_fit_is_its_file_entry_and_a_wrong_one_is_named_by_file_and_key() -> None:
    (fit,) = fit_ring(ring_table(P2P(LAMBDA, BW, "PingPong"), nps=(2, 3)), hockney_records([hockney_entry()]))
    # to_json and back gives the same record, through the whole document as the fit rule writes it
    document = json.loads(json.dumps(KernelFits(ring=(fit,)).to_json()))
    assert KernelFits.from_json(document).ring == (fit,)
    entry = document["ring"][0]
    assert entry["ring_ranges"][0]["range"] == "< 1 KiB" and "region_fails_where" not in entry  # no region model
    entry["points"][2]["oversubscribed"] = "no"
    with pytest.raises(FitRecordError, match=r"fits/kernels\.json: \$\.ring\[0\]\.points\[2\]\.oversubscribed: "
                                             r"expected true, false or null, got 'no'"):
        KernelFits.from_json(document, "fits/kernels.json")


def test_failed_cells_do_not_enter_the_models() -> None:
    df = ring_table(P2P(LAMBDA, BW, "PingPong"), nps=(2,))
    bad = df.with_columns(pl.lit("failed").alias("cell_status"), pl.col("time_us") * 100)
    (fit,) = fit_ring(pl.concat([df, bad]), hockney_records([hockney_entry()]))
    assert all(abs(p.rel_err) < 1e-9 for p in fit.points)
    assert fit_ring(bad, hockney_records([hockney_entry()])) == []


# ----------------------------------------------------------------------------------------- matsum
S, PAR, C, CORES = 1000.0, 8000.0, 300.0, 4


def matsum_table(nps=(1, 2, 3, 4, 6, 8), noise: float = 0.005, reps: int = 5, gather: str = "binomial",
                 seed: int = 2) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for np_ in nps:
        for rep in range(reps):
            t = float(matsum_model((S, PAR, C), np.array([np_]), np.array([CORES]))[0])
            t *= 1 + noise * rng.standard_normal()
            for rank in range(np_):
                wait = binomial_subtree(rank, np_) if gather == "binomial" else (np_ if rank == 0 else rank)
                rows.append({**HEAD, "cell_quality": "ok", "cell": f"kernel/impi/shm/core/np{np_}/matsum/t1-slab/rep{rep}", "rep": rep,
                             "np": np_, "rank": rank, "topo": 1, "dist": "slab", "node_cores": CORES,
                             "oversubscribed": np_ > CORES, "total_us": t * (0.98 if rank else 1.0),
                             "gather_us": 10.0 * wait * (1 + 0.01 * rng.standard_normal())})
    return pl.DataFrame(rows)


def test_amdahl_fit_recovers_parameters_and_serial_fraction() -> None:
    (fit,) = fit_matsum(matsum_table())
    assert fit.cores == CORES
    # 0.5 % noise, 5 repetitions, 6 process counts: parameters within 10 %, serial fraction within 0.01
    # (over 20 seeds the worst errors were 7 % (s), 1 % (p), 6 % (c), 0.008 (fraction))
    assert fit.s_us == pytest.approx(S, rel=0.10)
    assert fit.p_us == pytest.approx(PAR, rel=0.10)
    assert fit.c_us == pytest.approx(C, rel=0.10)
    assert fit.serial_fraction == pytest.approx(S / (S + PAR), abs=0.01)
    for key, truth in (("s_ci_us", S), ("p_ci_us", PAR), ("c_ci_us", C), ("serial_fraction_ci", S / (S + PAR))):
        lo, hi = getattr(fit, key)
        assert lo <= truth <= hi, (key, lo, truth, hi)
    assert all(abs(p.rel_err) < 0.02 for p in fit.points)
    assert [p.p_eff for p in fit.points] == [1, 2, 3, 4, 4, 4]
    assert [p.oversubscribed for p in fit.points] == [False] * 4 + [True] * 2


def test_amdahl_parameters_stay_non_negative(few_bootstraps: None) -> None:
    df = matsum_table(noise=0.0).with_columns(
        (pl.col("total_us") * 0 + 5000.0 / pl.col("np")).alias("total_us"))  # pure p/P: s = c = 0
    (fit,) = fit_matsum(df.filter(pl.col("np") <= CORES))
    assert min(fit.s_us, fit.p_us, fit.c_us) >= 0
    assert fit.serial_fraction == pytest.approx(0.0, abs=1e-3)


def test_too_few_process_counts_is_an_error_not_a_fit() -> None:
    (fit,) = fit_matsum(matsum_table(nps=(1, 2)))
    assert fit.error is not None and "need 3 process counts" in fit.error


@pytest.mark.parametrize(("gather", "verdict"), [("binomial", "binomial-tree signature"),
                                                 ("linear", "no binomial-tree signature")])
def test_gather_ordering_tells_binomial_from_linear(gather: str, verdict: str, few_bootstraps: None) -> None:
    (fit,) = fit_matsum(matsum_table(gather=gather))
    order = {g.np: g for g in fit.gather_order}
    assert set(order) == {3, 4, 6, 8}
    assert order[8].verdict.startswith(verdict)
    if gather == "binomial":
        assert order[8].slowest_first[:2] == (0, 4) and order[8].spearman_binomial > 0.8  # ties: four leaves
    else:
        assert order[8].slowest_first[:2] == (0, 7) and order[8].spearman_linear > 0.9
    assert [binomial_subtree(r, 8) for r in range(8)] == [8, 1, 2, 1, 4, 1, 2, 1]
    assert binomial_subtree(2, 3) == 1  # capped by the ranks that exist


# ----------------------------------------------------------------------------------------- jacobi
def jacobi_table(lam: float = 1.0, bw: float = 1000.0, L: int = 20) -> pl.DataFrame:
    grids = {1: [1, 1, 1], 2: [2, 1, 1], 4: [2, 2, 1], 8: [2, 2, 2]}
    face = 8 * L * L
    rows = []
    for np_, threads in ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 4)):
        grid = grids[np_]
        k = sum(d > 1 for d in grid)
        for rep in range(3):
            for rank in range(np_):
                c = face * k  # one neighbour per split axis (2-way splits)
                rows.append({**HEAD, "cell_quality": "ok", "cell": f"kernel/impi/shm/core/np{np_}/jacobi/weak-L{L}-t{threads}/rep{rep}",
                             "rep": rep, "np": np_, "rank": rank, "threads": threads, "mode": "weak",
                             "variant_group": f"weak-L{L}-t{threads}", "procdims": grid, "bytes_sent": c,
                             "messages": k, "halo_us": c / bw + k * lam + (5.0 if rank else 0.0),
                             "iteration_us": 100.0 * (1 + 0.1 * k), "compute_us": 90.0, "allreduce_us": 5.0,
                             "mlups_total": np_ * L**3 / (100.0 * (1 + 0.1 * k)), "local_points": L**3,
                             "oversubscribed": np_ * threads > 4})
    return pl.DataFrame(rows)


def test_jacobi_halo_model_scaling_and_hybrid_comparison() -> None:
    (fit,) = [f.to_json() for f in fit_jacobi(jacobi_table(), hockney_records([hockney_entry(lam=1.0, bw=1000.0)]))]
    assert fit["lambda_source"] == "PingPong"
    pts = {(p["np"], p["threads"]): p for p in fit["points"]}
    # the least-waiting rank (rank 0 here; the others wait 5 µs more) matches c/B + k·λ exactly
    for (np_, threads), p in pts.items():
        if p["k"]:
            assert p["rel_err"] == pytest.approx(0.0, abs=1e-9), (np_, threads)
            assert p["halo_mean_us"] > p["halo_measured_us"]
        else:
            assert p["rel_err"] is None and p["halo_predicted_us"] == 0
    assert pts[(4, 1)]["k"] == 2 and pts[(8, 1)]["k"] == 3 and pts[(8, 1)]["bytes_per_rank"] == 3 * 8 * 400
    # weak scaling: T(1)/T(P)
    assert pts[(8, 1)]["efficiency"] == pytest.approx(1.0 / 1.3)
    assert pts[(8, 1)]["oversubscribed"] and not pts[(4, 1)]["oversubscribed"]
    hybrid = {h["hybrid"]: h for h in fit["hybrid_vs_pure"]}
    assert hybrid["1 × 2"]["pure"] == "2 × 1" and hybrid["1 × 2"]["hybrid_bytes_per_rank"] == 0
    assert hybrid["2 × 4"]["pure"] == "8 × 1"
    assert hybrid["2 × 4"]["hybrid_messages_per_rank"] < hybrid["2 × 4"]["pure_messages_per_rank"]
    assert "holds within 25%" in fit["fails_where"]


def test_jacobi_takes_lambda_from_the_ring_without_pingpong() -> None:
    result = fit_kernels({"ring": ring_table(P2P(1.0, 1000.0, "x")), "jacobi": jacobi_table()}, [])
    (fit,) = [f.to_json() for f in result.jacobi]
    assert fit["lambda_source"] == "ring" and fit["latency_us"] == pytest.approx(1.0, rel=1e-6)
    assert all(p["rel_err"] is None or abs(p["rel_err"]) < 1e-6 for p in fit["points"])


# -------------------------------------------------------------------------------- pingpong / coll
SIZES = [0] + [2**k for k in range(23)]


def pingpong_table(lam: float = 0.4, bw: float = 6000.0, label: str = LABEL, reps: int = 3, noise: float = 0.01,
                   seed: int = 3) -> pl.DataFrame:
    """Tidy kernel_pingpong rows: rank 0 follows t = λ + s/B (with noise), rank 1 is 5x off (the fit
    must use rank 0, the OSU/IMB reporter)."""
    rng = np.random.default_rng(seed)
    stack, transport, mapping = label.split("/")
    rows = []
    for rep in range(reps):
        for size in SIZES:
            t = (lam + size / bw) * (1 + noise * rng.standard_normal())
            for rank in (0, 1):
                tr = t if rank == 0 else 5 * t
                rows.append({"label": label, "stack": stack, "transport": transport, "mapping": mapping,
                             "cell_status": "ok", "cell_quality": "ok", "cell": f"kernel/{label}/np2/pingpong/m0-22/rep{rep}", "rep": rep,
                             "np": 2, "rank": rank, "bytes": size, "iterations": 100, "t_usec": tr,
                             "t_min_usec": 0.9 * tr, "MBps": size / tr if size else None, "valid": True,
                             "oversubscribed": False})
    return pl.DataFrame(rows)


def test_pingpong_fit_recovers_lambda_and_bandwidth_and_cross_checks_imb() -> None:
    df = pingpong_table()
    broken = pingpong_table(lam=50.0, seed=9).with_columns(pl.lit(False).alias("valid"))  # failed own check
    imb = {**hockney_entry(lam=0.5, bw=5000.0), "latency_ci_us": [0.45, 0.55],
           "asymptotic_bandwidth_ci_MBps": [4800, 5200]}
    (fit,) = fit_pingpong(pl.concat([df, broken]), hockney_records([imb, hockney_entry(label="other/x/core")]))
    assert fit.benchmark == "pingpong" and "not IMB" in fit.source and fit.n_reps == 3
    model = fit.hockney
    assert model is not None and model.label == fit.label
    # 1 % noise on 3 repetitions: λ within 5 %, the model's B within 5 %, the CIs cover the truth
    assert model.latency_us == pytest.approx(0.4, rel=0.05)
    assert model.segments[-1].bandwidth_MBps == pytest.approx(6000.0, rel=0.05)
    lo, hi = model.latency_ci_us
    # Each repetition is a launch of its own (a cell's rep): 3 launches, the intervals are over them.
    assert lo is not None and hi is not None and lo <= 0.4 <= hi
    assert model.ci_method == "launches" and model.n_launches == 3
    # The asymptotic B is s/t at the largest size, 4 MiB; the curve rises all the way, so the peak
    # is within the noise of it.
    four_mib = 2**22 / (0.4 + 2**22 / 6000.0)
    assert model.asymptotic_bytes == 2**22
    assert model.asymptotic_bandwidth_MBps == pytest.approx(four_mib, rel=0.03)
    lo, hi = model.asymptotic_bandwidth_ci_MBps
    assert lo is not None and hi is not None and model.asymptotic_bandwidth_MBps is not None
    assert lo <= model.asymptotic_bandwidth_MBps <= hi
    assert model.peak_bandwidth_MBps == pytest.approx(four_mib, rel=0.03)
    assert model.peak_bytes is not None and model.peak_bytes >= 2**21
    assert fit.latency_4B_us == pytest.approx(0.4 + 4 / 6000.0, rel=0.03)
    assert fit.bandwidth_4MiB_MBps == pytest.approx(2**22 / (0.4 + 2**22 / 6000.0), rel=0.03)
    # IMB PingPong of the same stack/transport/mapping, next to the kernel's
    assert fit.imb_latency_us == 0.5 and fit.imb_latency_ci_us == (0.45, 0.55)
    assert fit.kernel_vs_imb_latency == pytest.approx(0.8, rel=0.05)
    # Like for like: the kernel's asymptotic B against IMB's asymptotic B, its peak against IMB's peak.
    assert fit.imb_asymptotic_bandwidth_MBps == 5000.0 and fit.imb_asymptotic_bandwidth_ci_MBps == (4800, 5200)
    assert fit.kernel_vs_imb_asymptotic_bandwidth == pytest.approx(1.2, rel=0.05)
    assert fit.kernel_vs_imb_peak_bandwidth == pytest.approx(1.2, rel=0.05)
    assert [p.bytes for p in fit.points] == SIZES and all(p.n_reps == 3 for p in fit.points)
    # The file's entry: the Hockney figures flat beside the kernel's, and back to the same record.
    entry = fit.to_json()
    assert entry["latency_us"] == model.latency_us and entry["imb_latency_ci_us"] == [0.45, 0.55]
    assert PingpongFit.from_json(json.loads(json.dumps(entry))) == fit
    (alone,) = fit_pingpong(pingpong_table(label="openmpi/ob1-sm/core"), hockney_records([imb]))
    assert alone.imb_latency_us is None and alone.kernel_vs_imb_latency is None
    assert alone.kernel_vs_imb_asymptotic_bandwidth is None and alone.kernel_vs_imb_peak_bandwidth is None
    assert alone.headline is not None and "no IMB PingPong" in alone.headline
    (short,) = fit_pingpong(pingpong_table().filter(pl.col("bytes") <= 2), [])
    assert short.error is not None and "need at least 3 distinct non-zero sizes" in short.error
    assert short.hockney is None and "latency_us" not in short.to_json()
    assert fit_pingpong(None) == [] and fit_pingpong(broken) == []


def coll_table(reps: int = 3, seed: int = 4) -> pl.DataFrame:
    """kernel_coll rows of two process counts: binomial costs log2(P)·(1 + s/1000) µs, pipeline
    3 + s/3000 µs (faster above 600 B at P=4, 3000 B at P=2); the default is binomial up to 4 KiB,
    then pipeline."""
    rng = np.random.default_rng(seed)
    rows = []

    def model(algo: str, np_: int, size: int) -> float:
        if algo == "default":
            algo = "binomial" if size <= 4096 else "pipeline"
        return math.log2(np_) * (1 + size / 1000) if algo == "binomial" else 3 + size / 3000

    for np_ in (2, 4):
        for algo in ("default", "binomial", "pipeline"):
            for rep in range(reps):
                for size in (0, 16, 1024, 16384, 262144):
                    t = model(algo, np_, size) * (1 + 0.002 * rng.standard_normal())
                    for rank in range(np_):
                        rows.append({**HEAD, "label": "ompi/sm/core", "stack": "ompi", "transport": "sm",
                                     "cell_quality": "ok", "cell": f"kernel/ompi/sm/core/np{np_}/coll/bcast-{algo}/rep{rep}", "rep": rep,
                                     "np": np_, "rank": rank, "collective": "bcast", "algorithm": algo,
                                     "bytes": size, "t_usec": t, "t_avg_usec": t if rank == 0 else None,
                                     "t_min_usec": 0.9 * t if rank == 0 else None,
                                     "t_max_usec": 1.1 * t if rank == 0 else None, "valid": True,
                                     "oversubscribed": np_ > 2})
    return pl.DataFrame(rows)


def test_coll_best_algorithm_per_size_and_p() -> None:
    fits = {f.np: f for f in fit_coll(coll_table())}
    assert set(fits) == {2, 4}
    four = fits[4]
    assert four.collective == "bcast" and four.algorithms == ("default", "binomial", "pipeline")
    assert four.oversubscribed and not fits[2].oversubscribed
    best = {b.bytes: b for b in four.best}
    # P=4: binomial 2·(1 + s/1000) beats pipeline 3 + s/3000 below 600 B; the default ties binomial there
    assert best[16].algorithm in ("binomial", "default") and best[16].t_avg_usec == pytest.approx(2.032, rel=0.01)
    assert best[1024].algorithm == "pipeline" and best[1024].runner_up in ("binomial", "default")
    binomial_1k, pipeline_1k = 2 * (1 + 1.024), 3 + 1024 / 3000
    assert best[1024].default_over_best == pytest.approx(binomial_1k / pipeline_1k, rel=0.01)
    assert best[1024].margin == pytest.approx(binomial_1k / pipeline_1k - 1, abs=0.01)
    assert best[1024].candidates == 3
    # above 4 KiB the default is the pipeline: no gain from forcing it
    assert best[262144].algorithm in ("pipeline", "default")
    assert best[262144].default_over_best == pytest.approx(1.0, abs=0.01)
    # P=2: the crossover moves to 3000 B
    two = {b.bytes: b for b in fits[2].best}
    assert two[1024].algorithm in ("binomial", "default") and two[16384].algorithm in ("pipeline", "default")
    pt = next(p for p in four.points if p.algorithm == "pipeline" and p.bytes == 16384)
    assert pt.t_avg_usec is not None and pt.t_min_usec == pytest.approx(0.9 * pt.t_avg_usec, rel=0.01)
    assert pt.n_reps == 3
    assert sum(four.wins.values()) == 5
    # the record is the file's entry: to_json and back gives the same record
    assert CollFit.from_json(json.loads(json.dumps(four.to_json()))) == four
    bad = coll_table().with_columns(pl.lit("failed").alias("cell_status"))
    assert fit_coll(bad) == []



def test_a_coll_entry_of_the_wrong_shape_is_named_by_file_and_key() -> None:
    entry = fit_coll(coll_table())[0].to_json()
    points = entry["points"]
    assert isinstance(points, list) and isinstance(points[1], dict)
    points[1]["bytes"] = "16 B"
    with pytest.raises(FitRecordError, match=r"fits/kernels\.json: \$\.coll\[0\]\.points\[1\]\.bytes: "
                                             r"expected an integer or null, got '16 B'"):
        KernelFits.from_json({"coll": [entry]}, "fits/kernels.json")

def test_json_is_strict_and_the_cli_writes_kernels_json(tmp_path: Path, few_bootstraps: None,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    ring_table(P2P(LAMBDA, BW, "x")).write_parquet(tidy / "kernel_ring.parquet")
    matsum_table().write_parquet(tidy / "kernel_matsum.parquet")
    jacobi_table().write_parquet(tidy / "kernel_jacobi.parquet")
    pingpong_table().write_parquet(tidy / "kernel_pingpong.parquet")
    coll_table().write_parquet(tidy / "kernel_coll.parquet")
    hockney = tmp_path / "hockney.json"
    hockney.write_text(json.dumps([hockney_entry()]))
    # main(argv) in-process: the same parser and command as `mpiatlas fit`, without a second interpreter.
    assert main(["fit", str(tidy), "--model", "kernels", "--hockney", str(hockney), "--json"]) == 0
    result = strict_json(capsys.readouterr().out)
    assert isinstance(result, dict)
    assert set(result) == {"ring", "matsum", "matsum_grids", "jacobi", "pingpong", "coll", "notes"}
    assert problems(result, "kernels") == []  # every kernel's entries follow fits-kernels.schema.json
    assert result["pingpong"][0]["latency_us"] > 0 and result["pingpong"][0]["imb_latency_us"] == LAMBDA
    assert len(result["coll"]) == 2 and all(f["best"] for f in result["coll"])
    for name in ("ring", "matsum", "jacobi"):
        (fit,) = result[name]
        assert fit["label"] == LABEL and fit["fails_where"] and fit["points"]
        assert all("rel_err" in p for p in fit["points"])
    assert result["ring"][0]["ring_latency_us"] > 0
    assert math.isfinite(result["matsum"][0]["serial_fraction"])
    # the table view works too
    assert main(["fit", str(tidy), "--model", "kernels", "--hockney", str(hockney)]) == 0
    assert "Kernel models" in capsys.readouterr().out


def test_report_shows_each_kernel_with_its_model(tmp_path: Path, few_bootstraps: None) -> None:
    from mpiatlas.report import build as report

    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    tables = {"ring": ring_table(P2P(LAMBDA, BW, "x"), cores=4), "matsum": matsum_table(), "jacobi": jacobi_table()}
    for name, table in tables.items():
        table.write_parquet(tidy / f"kernel_{name}.parquet")
    (fits / "hockney.json").write_text(json.dumps([hockney_entry()]))
    (fits / "kernels.json").write_text(json.dumps(fit_kernels(tables, hockney_records([hockney_entry()])).to_json(), allow_nan=False))
    html = report.build_report(tidy, fits, tmp_path / "report.html").read_text()
    for sid in ("kernel-ring", "kernel-matsum", "kernel-jacobi"):
        assert f'<section id="{sid}">' in html
    assert "could not be built" not in html
    assert "ring-implied vs PingPong" in html and "Where the model fails" in html
    assert "oversubscribed (ranks × threads &gt; cores)" in html  # P=5, 6 rings on 4 cores are marked
    assert "binomial-tree signature" in html and "Pure MPI vs hybrid" in html
    # the ring's T/P chart (time per shift), the matrix sum's phases per rank, the Jacobi communication shares
    assert "Ring: T/P, measured (marks) and model (dashed) vs P" in html
    assert "Phases per rank: scatter, compute, gather" in html and "Communication share per configuration" in html
    # kernel sections come before the cell list
    assert html.index('id="kernel-jacobi"') < html.index('id="cells"')
    # without kernel data the sections are left out
    empty = report.build_report(tmp_path / "none", None, tmp_path / "empty.html").read_text()
    assert 'id="kernel-ring"' not in empty


def test_report_shows_own_pingpong_and_collectives_apart_from_imb(tmp_path: Path) -> None:
    from mpiatlas.report import build as report

    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    pingpong = pl.concat([pingpong_table(), pingpong_table(label="openmpi/ob1-sm/core", lam=2.0, bw=3000.0)])
    tables = {"pingpong": pingpong, "coll": coll_table()}
    for name, table in tables.items():
        table.write_parquet(tidy / f"kernel_{name}.parquet")
    hockney = [{**hockney_entry(lam=0.5, bw=5000.0), "latency_ci_us": [0.45, 0.55]}]
    (fits / "hockney.json").write_text(json.dumps(hockney))
    (fits / "kernels.json").write_text(json.dumps(fit_kernels(tables, hockney_records(hockney)).to_json(), allow_nan=False))
    html = report.build_report(tidy, fits, tmp_path / "report.html").read_text()
    start = html.index('<section id="kernel-p2p-coll">')
    section = html[start:html.index("</section>", start)]
    assert "mpiatlas pingpong / collectives (own kernels; Open MPI where IMB is unavailable)" in section
    assert "not the Intel MPI Benchmarks (IMB)" in section
    # Open MPI has no IMB PingPong: the notice names it; Intel MPI's IMB λ sits next to the kernel's
    assert "their only point-to-point measurement" in section and "openmpi/ob1-sm/core" in section
    assert "IMB PingPong λ (µs) [95 % CI]" in section and "0.500 [0.450, 0.550]" in section and "no IMB" in section
    assert "4 B latency (µs)" in section and "4 MiB bandwidth (MB/s)" in section
    assert "Best algorithm per (collective, P, size)" in section and "pipeline" in section
    assert html.index('id="kernel-p2p-coll"') < html.index('id="cells"')
    # measurements without fits still give the 4 B / 4 MiB table and the collectives (medians)
    (fits / "kernels.json").unlink()
    bare = report.build_report(tidy, fits, tmp_path / "bare.html").read_text()
    start = bare.index('<section id="kernel-p2p-coll">')
    section = bare[start:bare.index("</section>", start)]
    assert "No pingpong fit" in section and "4 MiB bandwidth (MB/s)" in section
    assert "Best algorithm per (collective, P, size)" in section
    empty = report.build_report(tmp_path / "none", None, tmp_path / "empty.html").read_text()
    assert 'id="kernel-p2p-coll"' not in empty


def test_one_table_gives_one_kernels_json(few_bootstraps: None) -> None:
    """Fitting the same tables again gives the same document byte for byte: the repetitions reach
    the seeded bootstrap in the table's order, not in a hash table's."""
    tables = {"ring": ring_table(P2P(2.0, 1000.0, "x"), noise=0.05), "matsum": matsum_table(noise=0.05)}
    runs = {json.dumps(fit_kernels(tables, hockney_records([hockney_entry()])).to_json(), sort_keys=True, default=str) for _ in range(3)}
    assert len(runs) == 1
