"""Kernel models (mpiatlas.models.kernels) on synthetic data with known parameters.

Each test builds a kernel table shaped like tidy's ``kernel_<name>.parquet`` from the model
itself (plus stated noise) and checks the fit gives the parameters back within a stated
tolerance, that residuals and the failure statement are there, and that the CLI writes them.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

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


def hockney_entry(lam: float = LAMBDA, bw: float = BW, label: str = LABEL) -> dict:
    return {"label": label, "benchmark": "PingPong", "latency_us": lam, "bandwidth_MBps": bw,
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
                        rows.append({**HEAD, "cell": cell, "rep": rep, "np": np_, "rank": rank, "size": np_,
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
    (fit,) = fit_ring(df, [hockney_entry()])
    assert fit["lambda_source"] == "PingPong" and fit["pingpong_latency_us"] == LAMBDA
    # ring-implied λ within 5 % of the true λ (1 % noise), its CI covers it
    assert fit["ring_latency_us"] == pytest.approx(LAMBDA, rel=0.05)
    lo, hi = fit["ring_latency_ci_us"]
    assert lo <= LAMBDA <= hi
    assert fit["ring_vs_pingpong_latency"] == pytest.approx(1.0, rel=0.05)
    assert fit["ring_bandwidth_MBps"] == pytest.approx(BW, rel=0.05)
    # the data follow the model: every residual within 4 % (1 % noise on the median of 3)
    assert len(fit["points"]) == 5 * 3 * 2
    assert all(abs(p["rel_err"]) < 0.04 for p in fit["points"])
    blocking3 = next(p for p in fit["points"] if p["variant"] == "blocking" and p["np"] == 3 and p["bytes"] == 4)
    assert blocking3["phases_model"] == 3 and blocking3["phases_measured"] == pytest.approx(3, rel=0.04)
    assert fit["fails_where"].startswith("holds within 25% at every point")


def test_ring_without_pingpong_fits_lambda_from_the_ring_and_says_so() -> None:
    df = ring_table(P2P(2.0, 1000.0, "x"))
    (fit,) = fit_ring(df, [hockney_entry(label="other/label/core")])
    assert fit["lambda_source"] == "ring" and "no IMB PingPong" in fit["lambda_note"]
    assert fit["pingpong_latency_us"] is None and fit["ring_vs_pingpong_latency"] is None
    assert fit["latency_us"] == pytest.approx(2.0, rel=1e-6)
    assert fit["bandwidth_MBps"] == pytest.approx(1000.0, rel=1e-6)
    result = fit_kernels({"ring": df}, [])
    assert any("no IMB PingPong" in n for n in result["notes"])


def test_ring_failure_statement_names_the_worst_point() -> None:
    p2p = P2P(LAMBDA, BW, "PingPong")
    df = ring_table(p2p, nps=(2, 4), cores=2)
    # oversubscribed P=4 runs 10x slower than the model
    df = df.with_columns(pl.when(pl.col("np") == 4).then(pl.col("time_us") * 10).otherwise(pl.col("time_us"))
                         .alias("time_us"))
    (fit,) = fit_ring(df, [hockney_entry()])
    assert "P=4" in fit["fails_where"] and "oversubscribed" in fit["fails_where"]
    assert "10× the model" in fit["fails_where"]
    # the ring λ comes from P ≤ cores only, so it is not spoilt by the oversubscribed cells
    assert fit["ring_latency_us"] == pytest.approx(LAMBDA, rel=1e-6)
    assert failure_statement([], str).endswith("no measured point to test it against")


def test_failed_cells_do_not_enter_the_models() -> None:
    df = ring_table(P2P(LAMBDA, BW, "PingPong"), nps=(2,))
    bad = df.with_columns(pl.lit("failed").alias("cell_status"), pl.col("time_us") * 100)
    (fit,) = fit_ring(pl.concat([df, bad]), [hockney_entry()])
    assert all(abs(p["rel_err"]) < 1e-9 for p in fit["points"])
    assert fit_ring(bad, [hockney_entry()]) == []


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
                rows.append({**HEAD, "cell": f"kernel/impi/shm/core/np{np_}/matsum/t1-slab/rep{rep}", "rep": rep,
                             "np": np_, "rank": rank, "topo": 1, "dist": "slab", "node_cores": CORES,
                             "oversubscribed": np_ > CORES, "total_us": t * (0.98 if rank else 1.0),
                             "gather_us": 10.0 * wait * (1 + 0.01 * rng.standard_normal())})
    return pl.DataFrame(rows)


def test_amdahl_fit_recovers_parameters_and_serial_fraction() -> None:
    (fit,) = fit_matsum(matsum_table())
    assert fit["cores"] == CORES
    # 0.5 % noise, 5 repetitions, 6 process counts: parameters within 10 %, serial fraction within 0.01
    # (over 20 seeds the worst errors were 7 % (s), 1 % (p), 6 % (c), 0.008 (fraction))
    assert fit["s_us"] == pytest.approx(S, rel=0.10)
    assert fit["p_us"] == pytest.approx(PAR, rel=0.10)
    assert fit["c_us"] == pytest.approx(C, rel=0.10)
    assert fit["serial_fraction"] == pytest.approx(S / (S + PAR), abs=0.01)
    for key, truth in (("s_ci_us", S), ("p_ci_us", PAR), ("c_ci_us", C), ("serial_fraction_ci", S / (S + PAR))):
        lo, hi = fit[key]
        assert lo <= truth <= hi, (key, lo, truth, hi)
    assert all(abs(p["rel_err"]) < 0.02 for p in fit["points"])
    assert [p["p_eff"] for p in fit["points"]] == [1, 2, 3, 4, 4, 4]
    assert [p["oversubscribed"] for p in fit["points"]] == [False] * 4 + [True] * 2


def test_amdahl_parameters_stay_non_negative() -> None:
    df = matsum_table(noise=0.0).with_columns(
        (pl.col("total_us") * 0 + 5000.0 / pl.col("np")).alias("total_us"))  # pure p/P: s = c = 0
    (fit,) = fit_matsum(df.filter(pl.col("np") <= CORES))
    assert min(fit["s_us"], fit["p_us"], fit["c_us"]) >= 0
    assert fit["serial_fraction"] == pytest.approx(0.0, abs=1e-3)


def test_too_few_process_counts_is_an_error_not_a_fit() -> None:
    (fit,) = fit_matsum(matsum_table(nps=(1, 2)))
    assert "need 3 process counts" in fit["error"]


@pytest.mark.parametrize(("gather", "verdict"), [("binomial", "binomial-tree signature"),
                                                 ("linear", "no binomial-tree signature")])
def test_gather_ordering_tells_binomial_from_linear(gather: str, verdict: str) -> None:
    (fit,) = fit_matsum(matsum_table(gather=gather))
    order = {g["np"]: g for g in fit["gather_order"]}
    assert set(order) == {3, 4, 6, 8}
    assert order[8]["verdict"].startswith(verdict)
    if gather == "binomial":
        assert order[8]["slowest_first"][:2] == [0, 4] and order[8]["spearman_binomial"] > 0.8  # ties: four leaves
    else:
        assert order[8]["slowest_first"][:2] == [0, 7] and order[8]["spearman_linear"] > 0.9
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
                rows.append({**HEAD, "cell": f"kernel/impi/shm/core/np{np_}/jacobi/weak-L{L}-t{threads}/rep{rep}",
                             "rep": rep, "np": np_, "rank": rank, "threads": threads, "mode": "weak",
                             "variant_group": f"weak-L{L}-t{threads}", "procdims": grid, "bytes_sent": c,
                             "messages": k, "halo_us": c / bw + k * lam + (5.0 if rank else 0.0),
                             "iteration_us": 100.0 * (1 + 0.1 * k), "compute_us": 90.0, "allreduce_us": 5.0,
                             "mlups_total": np_ * L**3 / (100.0 * (1 + 0.1 * k)), "local_points": L**3,
                             "oversubscribed": np_ * threads > 4})
    return pl.DataFrame(rows)


def test_jacobi_halo_model_scaling_and_hybrid_comparison() -> None:
    (fit,) = fit_jacobi(jacobi_table(), [hockney_entry(lam=1.0, bw=1000.0)])
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
    (fit,) = result["jacobi"]
    assert fit["lambda_source"] == "ring" and fit["latency_us"] == pytest.approx(1.0, rel=1e-6)
    assert all(p["rel_err"] is None or abs(p["rel_err"]) < 1e-6 for p in fit["points"])


def test_json_is_strict_and_the_cli_writes_kernels_json(tmp_path: Path) -> None:
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    ring_table(P2P(LAMBDA, BW, "x")).write_parquet(tidy / "kernel_ring.parquet")
    matsum_table().write_parquet(tidy / "kernel_matsum.parquet")
    jacobi_table().write_parquet(tidy / "kernel_jacobi.parquet")
    hockney = tmp_path / "hockney.json"
    hockney.write_text(json.dumps([hockney_entry()]))
    out = subprocess.run([sys.executable, "-m", "mpiatlas.cli", "fit", str(tidy), "--model", "kernels",
                          "--hockney", str(hockney), "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {"ring", "matsum", "jacobi", "notes"}
    for name in ("ring", "matsum", "jacobi"):
        (fit,) = result[name]
        assert fit["label"] == LABEL and fit["fails_where"] and fit["points"]
        assert all("rel_err" in p for p in fit["points"])
    assert result["ring"][0]["ring_latency_us"] > 0
    assert math.isfinite(result["matsum"][0]["serial_fraction"])
    # the table view works too
    table = subprocess.run([sys.executable, "-m", "mpiatlas.cli", "fit", str(tidy), "--model", "kernels",
                            "--hockney", str(hockney)], capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and "Kernel models" in table.stdout


def test_report_shows_each_kernel_with_its_model(tmp_path: Path) -> None:
    from mpiatlas import report

    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    tables = {"ring": ring_table(P2P(LAMBDA, BW, "x"), cores=4), "matsum": matsum_table(), "jacobi": jacobi_table()}
    for name, table in tables.items():
        table.write_parquet(tidy / f"kernel_{name}.parquet")
    (fits / "hockney.json").write_text(json.dumps([hockney_entry()]))
    (fits / "kernels.json").write_text(json.dumps(fit_kernels(tables, [hockney_entry()]), allow_nan=False))
    html = report.build_report(tidy, fits, tmp_path / "report.html").read_text()
    for sid in ("kernel-ring", "kernel-matsum", "kernel-jacobi"):
        assert f'<section id="{sid}">' in html
    assert "could not be built" not in html
    assert "ring-implied vs PingPong" in html and "Where the model fails" in html
    assert "oversubscribed (ranks × threads &gt; cores)" in html  # P=5, 6 rings on 4 cores are marked
    assert "binomial-tree signature" in html and "Pure MPI vs hybrid" in html
    # kernel sections come before the cell list
    assert html.index('id="kernel-jacobi"') < html.index('id="cells"')
    # without kernel data the sections are left out
    empty = report.build_report(tmp_path / "none", None, tmp_path / "empty.html").read_text()
    assert 'id="kernel-ring"' not in empty
