"""α-β model families: link-byte counts, recovery, model choice, per-size and pooled-over-k fits, real data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy.optimize import lsq_linear

from conftest import require_datasets
from mpiatlas.models.alphabeta import Network, _solve, fit_alphabeta_table, fit_families, solve_batch
from mpiatlas.models.alphabeta_models import BENCHMARK_MODELS, MODELS, _tally, coefficients
from mpiatlas.report.build import build_report
from mpiatlas.report.data import load_data

NET = Network("veth", 10.0)  # 1250 bytes/µs
SIZES = [2**i for i in range(0, 23, 2)]  # 1 B … 4 MiB
NOISE = 0.03  # multiplicative, lognormal σ
TOL = 0.04  # recovery tolerance on α and β at 3 % noise, 4 repetitions, 36 points
NODES = (2, 4, 8)
# α per generating model: large enough that every other family stays plausible (α ≥ 1) on its data.
TRUE: dict[str, tuple[float, float]] = dict.fromkeys(MODELS, (1.8, 20.0)) | {"allgather_ring": (8.0, 20.0)}


def synthetic(model: str, alpha: float, beta: float, *, nodes: tuple[int, ...] = NODES, ks: tuple[int, ...] = (4,),
              reps: int = 4, seed: int = 0, noise: float = NOISE) -> tuple[list[int], list[int], list[int], list[float]]:
    rng = np.random.default_rng(seed)
    out: tuple[list[Any], ...] = ([], [], [], [])
    for k in ks:
        for m in nodes:
            for x in SIZES:
                a, c = coefficients(model, m, k, x, NET.bytes_per_us)
                t = float(alpha * a + beta * c)
                for _ in range(reps):
                    for col, v in zip(out, (m, k, x, t * float(rng.lognormal(0.0, noise)))):
                        col.append(v)
    return out  # type: ignore[return-value]


# -- the byte counts -----------------------------------------------------------------------


def _simulate(model: str, m: int, k: int) -> tuple[list[int], int]:
    """Blocks each node sends over its link, and the steps with any crossing, from every rank's sends."""
    p = m * k
    steps: list[list[tuple[int, int, int]]] = []  # (src, dst, blocks) per step
    if model in ("alltoall", "allgather_linear"):
        steps = [[(r, q, 1) for r in range(p) for q in range(p) if q != r]]
    elif model == "alltoall_pairwise":
        steps = [[(r, (r + s) % p, 1) for r in range(p)] for s in range(1, p)]
    elif model == "allgather_ring":
        steps = [[(n * k + i, ((n + 1) % m) * k + i, 1) for n in range(m) for i in range(k)] for _ in range(m - 1)]
    elif model == "allgather_ring_ranks":
        steps = [[(r, (r + 1) % p, 1) for r in range(p)] for _ in range(p - 1)]
    else:
        j = 0
        while (1 << j) < p:
            d = 1 << j
            if model == "alltoall_bruck":
                steps.append([(r, (r + d) % p, sum(1 for i in range(p) if i & d)) for r in range(p)])
            elif model == "allgather_recursive_doubling":
                steps.append([(r, r ^ d, d) for r in range(p)])
            else:
                steps.append([(r, (r - d) % p, min(d, p - d)) for r in range(p)])
            j += 1
    out = [0] * m
    crossing = 0
    for step in steps:
        cross = [(s, d, b) for s, d, b in step if s // k != d // k]
        crossing += bool(cross)
        for s, _, b in cross:
            out[s // k] += b
    return out, crossing


# Recursive doubling is defined for P a power of two only: its cases are the (m, k) with m·k = 2^j.
_MK = [(2, 1), (2, 4), (4, 2), (8, 4), (3, 3), (5, 2), (2, 6)]
# The naive Allgather is per rank, not a schedule over links: it has no rank-by-rank simulation (its own test).
_CASES = [(model, m, k) for model in MODELS for m, k in _MK if model != "allgather_naive"
          and not (model == "allgather_recursive_doubling" and (m * k) & (m * k - 1))]


def test_naive_allgather_counts_every_other_rank_once_per_rank() -> None:
    # Each rank takes in the P - 1 other blocks over a link of its own, after one latency.
    for m, k in _MK:
        assert _tally("allgather_naive", m, k) == (m * k - 1, 1.0)


@pytest.mark.parametrize(("model", "m", "k"), _CASES)
def test_link_counts_match_a_rank_by_rank_simulation(model: str, m: int, k: int) -> None:
    per_node, steps = _simulate(model, m, k)
    blocks, s = _tally(model, m, k)
    # The ring's model is node-level (a node's k blocks per step): the simulation's ring is that one.
    assert len(set(per_node)) == 1, per_node  # every node's link carries the same: node 0 stands for all
    assert (per_node[0], steps) == (blocks, s)


def test_closed_forms() -> None:
    for m, k in [(2, 4), (4, 4), (8, 2), (2, 32)]:
        assert _tally("allgather_recursive_doubling", m, k) == ((m - 1) * k * k, np.log2(m))
        assert _tally("alltoall_pairwise", m, k) == ((m - 1) * k * k, m * k - 1)
    assert _tally("alltoall_bruck", 2, 4) == (28.0, 3.0)  # 1·4 + 2·4 + 4·4 blocks over 3 steps
    assert _tally("allgather_bruck", 2, 4) == (21.0, 3.0)  # 1·1 + 2·2 + 4·4
    assert all(_tally(name, 1, 8) == (0.0, 0.0) for name in MODELS)


def test_batch_solver_is_the_bounded_least_squares() -> None:
    rng = np.random.default_rng(7)
    for i in range(200):
        n = int(rng.integers(2, 40))
        a = rng.random(n) * 10 ** rng.uniform(-3, 5)
        c = rng.random(n) if i % 4 else np.zeros(n)
        t = rng.random(n) * 100 + 0.1
        alpha, beta = _solve(a, c, t)
        ref = lsq_linear(np.column_stack([a / t, c / t]), np.ones(n), bounds=(0, np.inf), method="bvls").x
        b_alpha, b_beta = solve_batch(a, c, t[None])
        assert (alpha, beta) == pytest.approx(tuple(ref), rel=1e-6, abs=1e-12)
        assert (b_alpha[0], b_beta[0]) == pytest.approx((alpha, beta), rel=1e-6, abs=1e-12)


# -- recovery and model choice --------------------------------------------------------------


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("seed", [0, 1])
def test_each_family_is_recovered_and_chosen(model: str, seed: int) -> None:
    alpha, beta = TRUE[model]
    bench = MODELS[model].benchmark
    m, k, x, t = synthetic(model, alpha, beta, seed=seed)
    result = fit_families(bench, m, k, x, t, network=NET, seed=seed)
    fit = next(f for f in result.models if f.model == model)
    assert fit.alpha == pytest.approx(alpha, rel=TOL) and fit.beta_us == pytest.approx(beta, rel=TOL)
    assert fit.alpha_ci[0] <= alpha <= fit.alpha_ci[1] or abs(fit.alpha / alpha - 1) < 0.01
    assert fit.rel_rms < 2 * NOISE
    sel = result.selection
    assert result.best_model == model and sel.verdict == "clear", sel
    assert sel.delta_aic > 10  # every other family is clearly worse on these points
    assert {f.model for f in result.models} == set(BENCHMARK_MODELS[bench])
    assert result.distinct_mk == len(NODES)


def test_per_size_alpha_beta_on_noise_free_data() -> None:
    for model, (alpha, beta) in TRUE.items():
        m, k, x, t = synthetic(model, alpha, beta, reps=1, noise=0.0)
        result = fit_families(MODELS[model].benchmark, m, k, x, t, network=NET)
        rows = result.per_size.rows
        assert result.per_size.model == model and [r.bytes for r in rows] == SIZES
        for r in rows:
            assert r.alpha == pytest.approx(alpha, rel=1e-6) and r.inv_alpha == pytest.approx(1 / alpha, rel=1e-6)
            assert r.beta_us == pytest.approx(beta, rel=1e-6)
            # One k: a ring's network and latency terms both grow alike (m − 1 for the node ring, P − 1
            # for the rank ring), so β is held at the all-size fit.
            assert r.beta_fixed == (model in ("allgather_ring", "allgather_ring_ranks"))


def test_single_node_count_cannot_choose() -> None:
    m, k, x, t = synthetic("allgather_linear", 1.8, 20.0, nodes=(2,))
    result = fit_families("Allgather", m, k, x, t, network=NET)
    sel = result.selection
    assert sel.verdict == "indistinguishable" and "at one (m, k)" in sel.text
    ok = [f for f in result.models if f.error is None]
    assert max(f.rss for f in ok) == pytest.approx(min(f.rss for f in ok), rel=1e-6)


def test_models_faster_than_the_link_are_not_chosen() -> None:
    # Ring data at α = 1.8: the flat models move k times the bytes, so they would need α ≈ 0.45 < 1.
    m, k, x, t = synthetic("allgather_ring", 1.8, 20.0)
    result = fit_families("Allgather", m, k, x, t, network=NET)
    # The rank ring (P − 1 steps) stays plausible but fits clearly worse: several m tell the rings apart.
    assert result.best_model == "allgather_ring" and result.selection.verdict == "clear"
    assert result.selection.runner_up == "allgather_ring_ranks" and result.selection.delta_aic > 10
    implausible = set(result.selection.implausible)
    assert implausible == {"allgather_linear", "allgather_recursive_doubling", "allgather_bruck"}
    assert "faster than the link" in result.selection.text


def test_recursive_doubling_needs_a_power_of_two() -> None:
    m, k, x, t = synthetic("allgather_bruck", 1.8, 20.0, nodes=(2, 3, 5), ks=(3,))
    result = fit_families("Allgather", m, k, x, t, network=NET)
    rd = next(f for f in result.models if f.model == "allgather_recursive_doubling")
    assert rd.error == "recursive doubling needs P = m·k a power of two, not 6, 9, 15"
    assert result.best_model == "allgather_bruck"


# -- pooled over k --------------------------------------------------------------------------


def _table(model: str, alpha: float, beta: float, ks: tuple[int, ...], noise: float, reps: int = 3) -> pl.DataFrame:
    m, k, x, t = synthetic(model, alpha, beta, nodes=(2, 4), ks=ks, reps=reps, noise=noise, seed=4)
    bench = MODELS[model].benchmark
    return pl.DataFrame({"benchmark": bench, "bytes": x, "t_max_usec": t, "status": "ok", "stack": "intelmpi",
                         "transport": "ofi-tcp", "mapping": "node", "algorithm": "default",
                         "nodes": m, "ppn": k, "np": [a * b for a, b in zip(m, k)]}).with_columns(
        pl.col("nodes", "ppn", "np").cast(pl.Int32))


@pytest.mark.parametrize("model", ["alltoall", "allgather_ring"])
def test_pooled_fit_equals_the_per_k_fits_when_they_share_alpha_beta(model: str) -> None:
    alpha, beta = TRUE[model]
    exact = fit_alphabeta_table(_table(model, alpha, beta, (1, 2, 4), 0.0), NET).to_json()
    assert [f["ppn"] for f in exact["fits"]] == [1, 2, 4]
    (pooled,) = exact["pooled"]
    assert pooled["ppns"] == [1, 2, 4] and pooled["ppn"] is None and pooled["nodes"] == [2, 4]
    same = next(f for f in pooled["models"] if f["model"] == model)
    for f in exact["fits"]:
        per_k = next(g for g in f["models"] if g["model"] == model)
        assert (per_k["alpha"], per_k["beta_us"]) == pytest.approx((same["alpha"], same["beta_us"]), rel=1e-9)
        assert f["alpha"] == pytest.approx(alpha, rel=1e-9)  # the entry's own (original-model) fields
    assert same["alpha"] == pytest.approx(alpha, rel=1e-9) and same["beta_us"] == pytest.approx(beta, rel=1e-9)
    # Several k separate the ring's α from β at every size: nothing held fixed in the pooled per-size table.
    assert not any(r["beta_fixed"] for r in pooled["per_size"]["rows"])
    noisy = fit_alphabeta_table(_table(model, alpha, beta, (1, 2, 4), NOISE), NET).to_json()
    p = next(f for f in noisy["pooled"][0]["models"] if f["model"] == model)
    for f in noisy["fits"]:
        g = next(g for g in f["models"] if g["model"] == model)
        assert p["alpha"] == pytest.approx(g["alpha"], rel=TOL) and p["beta_us"] == pytest.approx(g["beta_us"], rel=TOL)
    json.dumps(noisy, allow_nan=False)


def test_one_k_is_not_pooled() -> None:
    assert fit_alphabeta_table(_table("alltoall", 1.8, 20.0, (2,), NOISE), NET).pooled == ()


# -- real data: StackHPC AlaSKA / CSD3, OSU 5.6 Alltoall and Allgather, 2 nodes ------------------

# partition -> (line rate Gbit/s, PROVENANCE.md's published min average latency µs: allgather, alltoall)
PUBLISHED = {
    "alaska/ib-gcc9-impi-verbs": (100, 17.63, 43.79), "alaska/ib-gcc9-openmpi4-ucx": (100, 5.86, 32.54),
    "alaska/roce-gcc9-impi-verbs": (25, 19.11, 50.15), "alaska/roce-gcc9-openmpi4-ucx": (25, 6.98, 33.77),
    "csd3/cclake-ib-gcc9-ompi3-ucx": (100, 5.31, 19.63), "csd3/cclake-roce-gcc9-ompi3-ucx": (50, 9.13, 26.05),
}


def _osu(partition: str, name: str) -> tuple[list[int], list[float], int]:
    """(sizes, times, procs_per_node of the last perflog record)."""
    stackhpc = require_datasets() / "stackhpc-alaska-csd3-imb-omb"
    out = stackhpc / "output" / partition / "omb" / f"Osu_{name}" / f"rfm_Osu_{name}_job.out"
    rows = [line.split() for line in out.read_text().splitlines() if line.strip() and not line.startswith("#")]
    log = stackhpc / "perflogs" / partition / "omb" / f"Osu_{name}" / f"Osu_{name}.log"
    ppn = re.findall(r"procs_per_node=(\d+)", log.read_text().splitlines()[-1])
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows], int(ppn[0])


@pytest.mark.parametrize("partition", list(PUBLISHED))
def test_stackhpc_two_node_collectives(partition: str) -> None:
    """m = 2, k = procs_per_node of the perflog (32 everywhere). One (m, k): every family fits alike, so the
    choice is only "indistinguishable" or "only plausible"; the physics (α ≥ 1) still excludes some. The
    one-latency models' β is the small-message time, which PROVENANCE.md publishes as the minimum latency."""
    gbit, allgather_min, alltoall_min = PUBLISHED[partition]
    for name, bench, published, close in (("alltoall", "Alltoall", alltoall_min, 0.10),
                                           ("allgather", "Allgather", allgather_min, 0.25)):
        x, t, ppn = _osu(partition, name)
        # The .out is the partition's latest run only; the notebook's table may come from another (≤ 10 % off).
        assert ppn == 32 and min(t) == pytest.approx(published, rel=0.10)
        result = fit_families(bench, [2] * len(x), [ppn] * len(x), x, t, network=Network(partition, gbit))
        sel = result.selection
        assert sel.verdict in ("indistinguishable", "only plausible"), sel
        best = next(f for f in result.models if f.model == result.best_model)
        assert best.plausible and best.alpha >= 1.0  # not faster than the link
        one_latency = next(f for f in result.models if f.model == BENCHMARK_MODELS[bench][0])
        assert one_latency.beta_us == pytest.approx(published, rel=close)
        top = result.per_size.rows[-1]
        assert top.bytes == 2**20 and top.beta_fixed  # one (m, k): β from the all-size fit
        assert 0.0 < top.inv_alpha <= 1.0


def test_csd3_alltoall_at_56_ranks_per_node_would_beat_the_link() -> None:
    """PROVENANCE.md says "one rank per physical core" (56 on csd3), the perflog says procs_per_node=32.
    At k = 56 every Alltoall family needs α < 1 — faster than HDR100's line rate — so the data side with 32."""
    x, t, _ = _osu("csd3/cclake-ib-gcc9-ompi3-ucx", "alltoall")
    result = fit_families("Alltoall", [2] * len(x), [56] * len(x), x, t, network=Network("HDR100", 100.0))
    assert all(f.plausible is False for f in result.models)
    assert "every model was" in result.selection.text
    at32 = fit_families("Alltoall", [2] * len(x), [32] * len(x), x, t, network=Network("HDR100", 100.0))
    assert next(f for f in at32.models if f.model == "alltoall").alpha > 1.0


# -- report --------------------------------------------------------------------------------


def test_report_shows_the_choice_and_the_per_size_table(tmp_path: Path) -> None:
    samples = _table("allgather_bruck", 1.8, 20.0, (2, 4), NOISE)
    result = fit_alphabeta_table(samples, NET).to_json()
    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    samples.write_parquet(tidy / "imb_samples.parquet")
    (fits / "alphabeta.json").write_text(json.dumps(result, allow_nan=False))
    html = build_report(tidy, fits, tmp_path / "r.html", now=load_data(None, None).generated).read_text()
    sec = re.search(r'<section id="alphabeta">(.*?)</section>', html, re.S)
    assert sec is not None
    body = sec.group(1)
    assert "Which algorithm model fits" in body and "recursive doubling" in body
    assert "pooled over k = 2, 4" in body
    for entry in [*result["fits"], *result["pooled"]]:
        assert entry["best_model"] == "allgather_bruck"
        bruck = next(f for f in entry["models"] if f["model"] == "allgather_bruck")
        assert f"Bruck fits best (rel. RMS {bruck['rel_rms']:.1%})" in body
    assert "1/α (of line rate)" in body and "best (clear)" in body
    # The named model (Allgather's node ring) has its own per-size rows beside the best model's.
    assert all(e["per_size_named"]["model"] == "allgather_ring" for e in result["fits"])
    assert "<td>named</td>" in body and "node ring" in body and "naive Allgather model" in body


@pytest.mark.parametrize("partition", list(PUBLISHED))
def test_stackhpc_allgather_rank_ring_fits_alike_but_its_step_latency_is_below_the_network(partition: str) -> None:
    """Rank ring (P − 1 = 63 steps) beside node ring (m − 1 = 1 step) on the two-node OSU Allgather: at one (m, k)
    both are α′·x + β′, so their residuals are the same; the rank ring then needs a per-step latency of 0.1-0.33 µs,
    under a third of the partition's own inter-node osu_latency (0.98-2.7 µs): the 63-step ring is not what ran at
    small messages (the libraries' decisions pick recursive doubling / Bruck there), while the node ring's single β
    (6-21 µs) is above it."""
    gbit, _, _ = PUBLISHED[partition]
    x, t, ppn = _osu(partition, "allgather")
    result = fit_families("Allgather", [2] * len(x), [ppn] * len(x), x, t, network=Network(partition, gbit))
    fits = {f.model: f for f in result.models}
    node, rank = fits["allgather_ring"], fits["allgather_ring_ranks"]
    assert rank.rel_rms == pytest.approx(node.rel_rms, rel=1e-6)
    assert rank.beta_us == pytest.approx(node.beta_us / (2 * ppn - 1), rel=1e-3)
    out = require_datasets() / "stackhpc-alaska-csd3-imb-omb" / "output" / partition / "omb" / "Osu_latency" / (
        "rfm_Osu_latency_job.out")
    zero_byte = next(float(r.split()[1]) for r in out.read_text().splitlines() if r.split()[:1] == ["0"])
    assert 0.9 <= zero_byte <= 3.0
    assert rank.beta_us < zero_byte / 3 < zero_byte < node.beta_us


@pytest.mark.parametrize("partition", list(PUBLISHED))
def test_stackhpc_allgather_named_model_per_size_and_the_naive_model(partition: str) -> None:
    """The named Allgather model (node ring, t = (m − 1)(α·x·k/b + β)) per message size on the two-node OSU
    Allgather, whichever family wins; and the naive per-rank model t = α·x·(P − 1)/b + β beside it. At one
    (m, k) = (2, 32): β is held at the all-size fit in every size's row, and a size's α is its time less β over
    the ring's network term; the naive model's β is the one-latency fit's and its α the ring's × k/(P − 1)."""
    gbit, _, _ = PUBLISHED[partition]
    x, t, ppn = _osu(partition, "allgather")
    net = Network(partition, gbit)
    result = fit_families("Allgather", [2] * len(x), [ppn] * len(x), x, t, network=net)
    named = result.per_size_named
    assert named.model == "allgather_ring" and [r.bytes for r in named.rows] == sorted(x)
    fits = {f.model: f for f in result.models}
    ring, naive = fits["allgather_ring"], fits["allgather_naive"]
    top = named.rows[-1]
    assert all(r.beta_fixed and r.beta_us == ring.beta_us for r in named.rows)
    t_top = t[x.index(top.bytes)]
    assert top.alpha == pytest.approx((t_top - ring.beta_us) / (top.bytes * ppn / net.bytes_per_us), rel=1e-6)
    assert top.alpha > 1.0  # slower than the link: the ring at 1 MiB is not at line rate
    assert naive.beta_us == pytest.approx(ring.beta_us, rel=1e-6)
    assert naive.alpha == pytest.approx(ring.alpha * ppn / (2 * ppn - 1), rel=1e-6)
