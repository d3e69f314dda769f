"""Performance models of the C kernels (ring, matsum, jacobi), fitted to ``kernel_<name>.parquet``.

Units: bytes, µs; a bandwidth B in MB/s is bytes per µs. ``t(s)`` is the one-way time of one
s-byte message, from the piecewise Hockney PingPong fit of the same stack/transport/mapping
(``results/fits/hockney.json``, λ = its first segment's latency); when that stack has no IMB
PingPong (e.g. Open MPI without IMB), λ and B are fitted to the ring's own nonblocking data and
every result says so (``lambda_source: "ring"``).

**ring** (one full exchange = P steps; each step every rank sends ``m = streams`` messages, one
per direction, and receives as many; the kernel reports the mean time of a full exchange)::

    nonblocking (Irecv/Isend both directions, one Waitall)   T = P · m · t(s)
    blocking    (even ranks Send then Recv, odd ranks the reverse; each direction one shift)
                                                             T = P · m · φ(P) · t(s)
    ssend       (the same with MPI_Ssend: rendezvous)        T = P · m · φ(P) · (2λ + s/B)

  with 2 streams and small messages, T_nonblocking = 2·P·λ: every message costs a full λ (the
  two directions are not assumed to overlap). φ(P) = phases per shift: 2 for even P (even→odd,
  then odd→even); 3 for odd P, where ranks 0 and P−1 are both even: rank 0's send to P−1 can only
  complete once P−1 has finished its own send, and rank 1's send to 0 waits for that (a third
  phase). That holds when a send waits for its receive (rendezvous, Ssend); an eagerly buffered
  MPI_Send completes without it, so blocking with small messages is measured to fall between
  φ = 2 and 3 at odd P (``phases_measured`` = T / (P·m·t(s)) is reported per point). P = 1:
  φ = 1 (the rank sends to itself). An Ssend costs ≈ 2λ + s/B: the request-to-send and its
  acknowledgement make a round trip before the data moves.
  Ring-implied λ: T_nonblocking / (P·m) = λ + s/B fitted (bounded ≥ 0, relative residuals) over
  the cells with P ≤ cores, CI from a bootstrap over repetitions; compared with PingPong λ.

**matsum** (rank 0 scatters A and B, every rank adds its part, rank 0 gathers C)::

    T(P) = s + p / min(P, cores) + c · ⌈log₂ P⌉

  Amdahl with a communication term: s = serial time (rank 0's initial copy-in and copy-out of
  the data, which no P divides), p = parallelisable time, c = one level of a binomial scatter +
  gather tree. P beyond the node's cores cannot divide p further (oversubscribed ranks share
  cores), hence min(P, cores). Fitted with ``scipy.optimize.least_squares`` on relative residuals,
  s, p, c ≥ 0; 95 % CIs and the serial fraction s / (s + p) from a bootstrap over repetitions.
  The gather-time ordering of the ranks tells the gather algorithm: a binomial tree makes a rank
  wait in proportion to its subtree (2^trailing_zeros(r)), a linear gather in rank order; the
  Spearman correlation of the per-rank gather times with each is reported.

**jacobi** (halo exchange of the 6 faces per iteration, non-blocking, one Waitall)::

    T_c(L, N) = c(L, N) / B + k · λ

  c = bytes a rank sends per iteration (its faces, from the record), k = number of decomposed
  directions (process-grid axes with more than one rank), λ and B from the p2p fits. Predicted
  vs measured halo time of the rank that waited least (a rank's halo time also holds the wait for
  a late neighbour, i.e. skew and noise, which that rank shows least; the mean over ranks is
  reported beside it), MLUP/s, weak-scaling efficiency T(1)/T(P) (strong:
  T(1)/(P·T(P))) of the pure MPI cells, and pure MPI vs hybrid (MPI + OpenMP) bytes and messages
  per rank at equal cores.

Every model result carries its residuals (``rel_err`` = predicted / measured − 1) and a one-line
``fails_where`` computed from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

# scipy (~0.5 s to import) is imported by the fits that use it: most campaigns need few of them.

KERNEL_NAMES: tuple[str, ...] = ("ring", "matsum", "jacobi", "pingpong", "coll")
N_BOOT = 400
CONFIDENCE = 0.95
LABEL_COLUMNS = ("label", "stack", "transport", "mapping")

RING_FORMULA = {
    "nonblocking": "T = P·m·t(s)",
    "blocking": "T = P·m·φ(P)·t(s), φ = 2 (even P), 3 (odd P)",
    "ssend": "T = P·m·φ(P)·(2λ + s/B)",
}
MATSUM_FORMULA = "T(P) = s + p/min(P, cores) + c·⌈log2 P⌉"
JACOBI_FORMULA = "T_c = c/B + k·λ (c = bytes sent per rank per iteration, k = decomposed directions)"


# ---------------------------------------------------------------------------------------- inputs


def load_kernel_tables(directory: str | Path) -> dict[str, pl.DataFrame | None]:
    """``kernel_<name>.parquet`` of ``directory`` (searched recursively), None when absent/empty."""
    directory = Path(directory)
    out: dict[str, pl.DataFrame | None] = {}
    for name in KERNEL_NAMES:
        files = sorted(directory.rglob(f"kernel_{name}.parquet")) if directory.is_dir() else []
        frames = [pl.read_parquet(f) for f in files]
        frames = [f for f in frames if f.height]
        out[name] = pl.concat(frames, how="diagonal_relaxed") if frames else None
    return out


def usable(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rows of ``ok`` cells only (a failed or invalid cell's numbers are not evidence)."""
    if df is None or df.height == 0:
        return None
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    if "label" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("label"))
    return df if df.height else None


@dataclass
class P2P:
    """One-way message time t(s) = λ + s/B (piecewise when fitted to PingPong)."""

    latency_us: float
    bandwidth_MBps: float | None  # None: no per-byte cost known
    source: str  # "PingPong" | "ring"
    segments: list[dict[str, Any]] = field(default_factory=list)

    def time(self, size: float) -> float:
        if self.segments:
            seg = self.segments[0]
            for candidate in self.segments:
                if candidate.get("from_bytes", 0) <= size:
                    seg = candidate
            bw = seg.get("bandwidth_MBps")
            return float(seg["latency_us"]) + (size / bw if bw else 0.0)
        return self.latency_us + (size / self.bandwidth_MBps if self.bandwidth_MBps else 0.0)

    def per_byte(self) -> float:
        return 1.0 / self.bandwidth_MBps if self.bandwidth_MBps else 0.0


def pingpong_params(hockney: Sequence[dict[str, Any]] | None, label: str) -> P2P | None:
    """The PingPong Hockney fit of ``label`` (stack/transport/mapping), if there is one."""
    for fit in hockney or []:
        if fit.get("benchmark") == "PingPong" and fit.get("label") == label and "error" not in fit \
                and fit.get("latency_us") is not None:
            return P2P(float(fit["latency_us"]), fit.get("bandwidth_MBps"), "PingPong", list(fit.get("segments") or []))
    return None


# --------------------------------------------------------------------------------------- helpers


def _num(x: Any, digits: int | None = None) -> float | None:
    """JSON-safe float (None for missing / non-finite)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return round(v, digits) if digits is not None else v


def _rel(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return _num(pred / meas - 1.0)


def _label_head(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in LABEL_COLUMNS}


def _fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.0f}%"


def _ratio_text(rel: float | None) -> str:
    if rel is None:
        return "n/a"
    ratio = 1.0 / (1.0 + rel) if rel > -1 else math.inf  # measured / predicted
    return f"{ratio:.2g}× the model"


def failure_statement(points: list[dict[str, Any]], describe, *, tolerance: float = 0.25,
                      what: str = "the model") -> str:
    """One line: where the model misses most (|rel_err| largest), and how good it is elsewhere."""
    scored = [p for p in points if p.get("rel_err") is not None]
    if not scored:
        return f"{what}: no measured point to test it against"
    worst = max(scored, key=lambda p: abs(p["rel_err"]))
    good = [p for p in scored if abs(p["rel_err"]) <= tolerance]
    measured_vs = _ratio_text(worst["rel_err"])
    if abs(worst["rel_err"]) <= tolerance:
        return (f"holds within {tolerance:.0%} at every point ({len(scored)}); worst {describe(worst)}: "
                f"measured {measured_vs}")
    return (f"fails worst at {describe(worst)}: measured {measured_vs}; within {tolerance:.0%} at "
            f"{len(good)} of {len(scored)} points")


def _bootstrap_indices(reps: list[list[float]], rng: np.random.Generator, n: int) -> Iterable[np.ndarray]:
    """Per bootstrap replicate: each point's median over repetitions resampled with replacement."""
    for _ in range(n):
        yield np.array([np.median(rng.choice(np.asarray(r, dtype=float), size=len(r))) for r in reps])


def _percentile_ci(values: np.ndarray) -> list[float | None]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [None, None]
    lo, hi = np.percentile(values, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return [_num(lo), _num(hi)]


def fit_latency_bandwidth(x_bytes: np.ndarray, y_us: np.ndarray) -> tuple[float, float]:
    """Bounded min Σ((λ + g·s − y)/y)² over λ, g ≥ 0: (λ µs, g µs/byte); g = 0 with one size."""
    y = np.asarray(y_us, dtype=float)
    s = np.asarray(x_bytes, dtype=float)
    if np.unique(s).size < 2:
        return float(np.median(y)), 0.0
    scale = float(s.max()) or 1.0
    design = np.column_stack([1.0 / y, (s / scale) / y])
    from scipy import optimize

    res = optimize.lsq_linear(design, np.ones_like(y), bounds=([0.0, 0.0], [np.inf, np.inf]))
    return float(res.x[0]), float(res.x[1] / scale)


# ------------------------------------------------------------------------------------------ ring


def ring_phases(variant: str, np_: int) -> int:
    """Message phases per shift (see the module docstring): 1 for nonblocking and P = 1, else 2/3."""
    if variant == "nonblocking" or np_ <= 1:
        return 1
    return 2 if np_ % 2 == 0 else 3


def ring_predict(variant: str, np_: int, streams: int, size: float, p2p: P2P) -> float:
    msg = 2.0 * p2p.latency_us + size * p2p.per_byte() if variant == "ssend" else p2p.time(size)
    return np_ * streams * ring_phases(variant, np_) * msg


def ring_points(df: pl.DataFrame) -> pl.DataFrame:
    """Per (label, variant, streams, bytes, P): the exchange time of every repetition (max over
    ranks: the exchange ends when its slowest rank does) and their median."""
    per_cell = (df.group_by([*LABEL_COLUMNS, "cell", "rep", "np", "variant", "streams", "bytes"])
                .agg(pl.col("time_us").max().alias("t"), pl.col("oversubscribed").any().alias("over")))
    return (per_cell.group_by([*LABEL_COLUMNS, "np", "variant", "streams", "bytes"])
            .agg(pl.col("t").median().alias("measured_us"), pl.col("t").alias("reps"),
                 pl.col("over").any().alias("oversubscribed"))
            .sort([*LABEL_COLUMNS, "variant", "streams", "bytes", "np"]))


def _ring_self_fit(points: pl.DataFrame, rng: np.random.Generator) -> dict[str, Any] | None:
    """λ, B implied by the nonblocking points (P ≤ cores): T/(P·m) = λ + s/B."""
    nb = points.filter((pl.col("variant") == "nonblocking") & ~pl.col("oversubscribed").fill_null(False))
    if nb.height == 0:
        nb = points.filter(pl.col("variant") == "nonblocking")
    if nb.height == 0:
        return None
    div = (nb["np"] * nb["streams"]).to_numpy().astype(float)
    sizes = nb["bytes"].to_numpy().astype(float)
    y = nb["measured_us"].to_numpy() / div
    lam, g = fit_latency_bandwidth(sizes, y)
    reps = [list(np.asarray(r, dtype=float) / d) for r, d in zip(nb["reps"].to_list(), div)]
    boots = np.array([fit_latency_bandwidth(sizes, yb) for yb in _bootstrap_indices(reps, rng, N_BOOT)])
    return {
        "latency_us": lam, "latency_ci_us": _percentile_ci(boots[:, 0]),
        "bandwidth_MBps": 1.0 / g if g > 0 else None,
        "n_points": int(nb.height), "used_oversubscribed": bool(nb["oversubscribed"].any()),
    }


def fit_ring(df: pl.DataFrame | None, hockney: Sequence[dict[str, Any]] | None, *,
             seed: int = 0) -> list[dict[str, Any]]:
    df = usable(df)
    if df is None:
        return []
    rng = np.random.default_rng(seed)
    out = []
    points_all = ring_points(df)
    for key, points in points_all.group_by(list(LABEL_COLUMNS), maintain_order=True):
        head = dict(zip(LABEL_COLUMNS, key))
        label = head["label"]
        pingpong = pingpong_params(hockney, label)
        ring_fit = _ring_self_fit(points, rng)
        if pingpong is not None:
            p2p = pingpong
            source_note = "λ and t(s) from the IMB PingPong Hockney fit of the same stack/transport/mapping"
        elif ring_fit is not None:
            p2p = P2P(ring_fit["latency_us"], ring_fit["bandwidth_MBps"], "ring")
            source_note = ("no IMB PingPong fit for this stack/transport/mapping: λ and B fitted to the ring's own "
                           "nonblocking points, so the nonblocking residuals are a fit, not a test")
        else:
            out.append({**head, "error": "no PingPong fit and no nonblocking ring points to take λ from"})
            continue
        rows = []
        for r in points.iter_rows(named=True):
            pred = ring_predict(r["variant"], r["np"], r["streams"], r["bytes"], p2p)
            msg = p2p.time(r["bytes"])
            unit = r["np"] * r["streams"] * msg
            rows.append({
                "variant": r["variant"], "streams": r["streams"], "bytes": r["bytes"], "np": r["np"],
                "oversubscribed": bool(r["oversubscribed"]), "n_reps": len(r["reps"]),
                "measured_us": _num(r["measured_us"]), "predicted_us": _num(pred),
                "rel_err": _rel(pred, r["measured_us"]),
                "phases_model": ring_phases(r["variant"], r["np"]),
                "phases_measured": _num(r["measured_us"] / unit) if unit > 0 else None,
                "reps_us": [_num(v) for v in r["reps"]],
            })
        ratio = None
        if ring_fit and pingpong and pingpong.latency_us:
            ratio = ring_fit["latency_us"] / pingpong.latency_us

        def describe(p: dict[str, Any]) -> str:
            over = ", oversubscribed" if p["oversubscribed"] else ""
            return f"{p['variant']} P={p['np']} {p['bytes']} B ({p['streams']} streams{over})"

        fails = failure_statement(rows, describe)
        nb_small = [p for p in rows if p["variant"] == "nonblocking" and not p["oversubscribed"]]
        headline = (f"ring λ {ring_fit['latency_us']:.3g} µs" if ring_fit else "ring λ n/a") + \
            (f" vs PingPong λ {pingpong.latency_us:.3g} µs (×{ratio:.2f})" if ratio is not None else
             " (no PingPong λ: ring-fitted)")
        out.append({
            **head,
            "model": RING_FORMULA,
            "lambda_source": p2p.source,
            "lambda_note": source_note,
            "latency_us": _num(p2p.latency_us),
            "bandwidth_MBps": _num(p2p.bandwidth_MBps),
            "pingpong_latency_us": _num(pingpong.latency_us) if pingpong else None,
            "pingpong_bandwidth_MBps": _num(pingpong.bandwidth_MBps) if pingpong else None,
            "ring_latency_us": _num(ring_fit["latency_us"]) if ring_fit else None,
            "ring_latency_ci_us": ring_fit["latency_ci_us"] if ring_fit else [None, None],
            "ring_bandwidth_MBps": _num(ring_fit["bandwidth_MBps"]) if ring_fit else None,
            "ring_fit_points": ring_fit["n_points"] if ring_fit else 0,
            "ring_vs_pingpong_latency": _num(ratio),
            "nonblocking_points_within_25pct": sum(1 for p in nb_small if p["rel_err"] is not None
                                                   and abs(p["rel_err"]) <= 0.25),
            "points": rows,
            "headline": headline,
            "fails_where": fails,
        })
    return out


# ---------------------------------------------------------------------------------------- matsum


def binomial_subtree(rank: int, size: int) -> int:
    """Ranks in ``rank``'s subtree of a binomial tree rooted at 0 (its gather wait grows with it)."""
    if rank == 0:
        return size
    low = rank & -rank  # 2^trailing_zeros
    return min(low, size - rank)


def matsum_model(params: Sequence[float], np_: np.ndarray, cores: np.ndarray) -> np.ndarray:
    s, p, c = params
    return s + p / np.minimum(np_, cores) + c * np.ceil(np.log2(np_))


def fit_amdahl(np_: np.ndarray, cores: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Bounded (≥ 0) least squares of relative residuals: (s, p, c)."""
    t = np.asarray(t, dtype=float)
    x0 = np.array([0.1 * t.max(), 0.8 * t.max(), 0.05 * t.max()])

    def resid(params: np.ndarray) -> np.ndarray:
        return matsum_model(params, np_, cores) / t - 1.0

    from scipy import optimize

    res = optimize.least_squares(resid, x0, bounds=(0.0, np.inf), method="trf", x_scale=np.maximum(x0, 1e-9))
    return res.x


def _gather_order(df: pl.DataFrame) -> list[dict[str, Any]]:
    """Per P ≥ 3: the median gather time of every rank, and its Spearman correlation with the
    binomial subtree size and with the rank (a linear gather's order)."""
    out = []
    per_rank = df.group_by(["np", "rank"]).agg(pl.col("gather_us").median().alias("g")).sort(["np", "rank"])
    for (np_,), grp in per_rank.group_by(["np"], maintain_order=True):
        if np_ < 3:
            continue
        from scipy import stats

        ranks = grp["rank"].to_list()
        g = grp["g"].to_numpy()
        nonroot = [i for i, r in enumerate(ranks) if r != 0]
        sub = [binomial_subtree(ranks[i], np_) for i in nonroot]
        gvals = g[nonroot]
        rho_bin = stats.spearmanr(sub, gvals).statistic if len(set(sub)) > 1 else None
        rho_lin = stats.spearmanr([ranks[i] for i in nonroot], gvals).statistic if len(nonroot) > 1 else None
        order = [ranks[i] for i in np.argsort(-g)]
        if rho_bin is None and rho_lin is None:
            verdict = "not enough ranks to tell"
        elif rho_bin is None:
            verdict = "binomial and linear orders coincide at this P"
        elif (rho_bin or -2) > (rho_lin if rho_lin is not None else -2):
            verdict = "binomial-tree signature (ranks with larger subtrees wait longer)"
        else:
            verdict = "no binomial-tree signature: gather time follows the rank order (linear gather)"
        out.append({"np": int(np_), "gather_us_by_rank": {str(r): _num(v) for r, v in zip(ranks, g)},
                    "slowest_first": order, "binomial_subtree": {str(ranks[i]): s for i, s in zip(nonroot, sub)},
                    "spearman_binomial": _num(rho_bin), "spearman_linear": _num(rho_lin), "verdict": verdict})
    return out


def fit_matsum(df: pl.DataFrame | None, *, seed: int = 0) -> list[dict[str, Any]]:
    df = usable(df)
    if df is None:
        return []
    rng = np.random.default_rng(seed)
    if "node_cores" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias("node_cores"))
    out = []
    keys = [*LABEL_COLUMNS, "topo", "dist"]
    phases = [c for c in ("scatter_us", "compute_us", "gather_us") if c in df.columns]
    per_cell = (df.group_by([*keys, "cell", "rep", "np"])
                .agg(pl.col("total_us").max().alias("t"), pl.col("oversubscribed").any().alias("over"),
                     pl.col("node_cores").max().alias("cores"), *(pl.col(c).max() for c in phases)))
    for key, grp in per_cell.group_by(keys, maintain_order=True):
        head = dict(zip(keys, key))
        pts = (grp.group_by("np").agg(pl.col("t").median().alias("measured_us"), pl.col("t").alias("reps"),
                                      pl.col("over").any().alias("oversubscribed"),
                                      pl.col("cores").max().alias("cores"),
                                      *(pl.col(c).median() for c in phases))
               .sort("np"))
        np_ = pts["np"].to_numpy().astype(float)
        known = pts["cores"].drop_nulls()
        node_cores = int(known.max()) if known.len() else int(np_.max())
        cores = np.full_like(np_, float(node_cores))
        t = pts["measured_us"].to_numpy().astype(float)
        raw = df.filter(pl.all_horizontal(pl.col(k) == v for k, v in head.items()))
        base = {**head, "model": MATSUM_FORMULA, "cores": node_cores, "gather_order": _gather_order(raw)}
        if np.unique(np.stack([np.minimum(np_, cores), np.ceil(np.log2(np_))], axis=1), axis=0).shape[0] < 3:
            out.append({**base, "error": f"need 3 process counts that separate s, p/min(P, cores) and ⌈log2 P⌉; "
                                         f"have P = {sorted(map(int, np_))} on {node_cores} cores"})
            continue
        params = fit_amdahl(np_, cores, t)
        boots = np.array([fit_amdahl(np_, cores, tb) for tb in _bootstrap_indices(pts["reps"].to_list(), rng, N_BOOT)])
        sf = params[0] / (params[0] + params[1]) if params[0] + params[1] > 0 else None
        sf_boot = boots[:, 0] / np.maximum(boots[:, 0] + boots[:, 1], 1e-300)
        pred = matsum_model(params, np_, cores)
        # Phase times (slowest rank, median over repetitions): what the total is made of.
        phase_rows = pts.select(phases).to_dicts() if phases else [{} for _ in range(pts.height)]
        rows = [{"np": int(n), "p_eff": int(min(n, node_cores)), "oversubscribed": bool(o), "n_reps": len(r),
                 "measured_us": _num(m), "predicted_us": _num(p), "rel_err": _rel(p, m),
                 "reps_us": [_num(v) for v in r], **{k: _num(v) for k, v in ph.items()}}
                for n, o, r, m, p, ph in zip(np_, pts["oversubscribed"].to_list(), pts["reps"].to_list(), t, pred,
                                             phase_rows)]

        def describe(p: dict[str, Any]) -> str:
            return f"P={p['np']}" + (" (oversubscribed)" if p["oversubscribed"] else "")

        exact = len(rows) == 3
        fails = failure_statement(rows, describe)
        if exact:
            fails = "3 process counts for 3 parameters: the fit is exact, so residuals cannot test it; " + fails
        verdicts = [g["verdict"] for g in base["gather_order"]]
        out.append({
            **base,
            "s_us": _num(params[0]), "p_us": _num(params[1]), "c_us": _num(params[2]),
            "s_ci_us": _percentile_ci(boots[:, 0]), "p_ci_us": _percentile_ci(boots[:, 1]),
            "c_ci_us": _percentile_ci(boots[:, 2]),
            "serial_fraction": _num(sf), "serial_fraction_ci": _percentile_ci(sf_boot),
            "max_speedup": _num(1.0 / sf) if sf else None,
            "points": rows,
            "headline": (f"serial fraction {sf:.2f}" if sf is not None else "serial fraction n/a")
            + (f"; gather: {verdicts[-1]}" if verdicts else ""),
            "fails_where": fails,
        })
    return out


# ---------------------------------------------------------------------------------------- jacobi


def decomposed_directions(procdims: Sequence[int] | None) -> int:
    return sum(1 for d in (procdims or []) if d and d > 1)


def _least_waiting(cg: pl.DataFrame, pred_ranks: list[float | None]) -> float | None:
    """The model's halo time of the rank with the smallest measured halo time."""
    if not pred_ranks or None in pred_ranks:
        return None
    return float(pred_ranks[int(np.argmin(cg["halo_us"].to_numpy()))])


def fit_jacobi(df: pl.DataFrame | None, hockney: Sequence[dict[str, Any]] | None,
               ring_p2p: dict[str, P2P] | None = None) -> list[dict[str, Any]]:
    df = usable(df)
    if df is None:
        return []
    out = []
    keys = list(LABEL_COLUMNS)
    threads_col = "threads" if "threads" in df.columns else "cell_threads"
    for key, grp in df.group_by(keys, maintain_order=True):
        head = dict(zip(keys, key))
        label = head["label"]
        p2p = pingpong_params(hockney, label) or (ring_p2p or {}).get(label)
        note = ("λ, B from the IMB PingPong Hockney fit" if p2p is not None and p2p.source == "PingPong" else
                "no PingPong fit: λ, B from the ring model's own fit" if p2p is not None else
                "no λ, B (neither a PingPong fit nor ring data): the halo model is not evaluated")
        per_cell = []
        for (cell,), cg in grp.group_by(["cell"], maintain_order=True):
            r0 = cg.row(0, named=True)
            k = decomposed_directions(r0.get("procdims"))
            pred_ranks = []
            for r in cg.iter_rows(named=True):
                if p2p is None:
                    pred_ranks.append(None)
                else:
                    pred_ranks.append(r["bytes_sent"] * p2p.per_byte() + k * p2p.latency_us)
            per_cell.append({
                "cell": cell, "variant_group": r0.get("variant_group"), "mode": r0.get("mode"),
                "np": int(r0["np"]), "threads": int(r0.get(threads_col) or 1), "rep": r0.get("rep"),
                "oversubscribed": bool(cg["oversubscribed"].any()), "k": k,
                "procdims": list(r0.get("procdims") or []),
                "bytes_per_rank": float(cg["bytes_sent"].mean()), "messages_per_rank": float(cg["messages"].mean()),
                "halo_us": float(cg["halo_us"].mean()), "halo_min_us": float(cg["halo_us"].min()),
                "halo_max_us": float(cg["halo_us"].max()),
                # The rank that waited least for its neighbours: its halo time is closest to the transfer.
                "halo_pred_us": _least_waiting(cg, pred_ranks),
                "iteration_us": float(cg["iteration_us"].max()), "compute_us": float(cg["compute_us"].mean()),
                "allreduce_us": float(cg["allreduce_us"].mean()), "mlups_total": float(cg["mlups_total"].max()),
                "local_points": float(cg["local_points"].mean()),
            })
        cells = pl.DataFrame(per_cell)
        pts = (cells.group_by(["variant_group", "mode", "np", "threads"], maintain_order=True)
               .agg(pl.len().alias("n_reps"), pl.col("oversubscribed").any(), pl.col("k").first(),
                    pl.col("procdims").first(), pl.col("bytes_per_rank").median(), pl.col("messages_per_rank").median(),
                    pl.col("halo_min_us").median().alias("halo_measured_us"),
                    pl.col("halo_min_us").alias("halo_reps_us"), pl.col("halo_us").median().alias("halo_mean_us"),
                    pl.col("halo_pred_us").median().alias("halo_predicted_us"),
                    pl.col("iteration_us").median(), pl.col("compute_us").median(), pl.col("allreduce_us").median(),
                    pl.col("mlups_total").median(), pl.col("local_points").median())
               .sort(["threads", "np"]))
        rows = []
        for r in pts.iter_rows(named=True):
            row = {k: (_num(v) if isinstance(v, float) else v) for k, v in r.items()}
            row["halo_reps_us"] = [_num(v) for v in r["halo_reps_us"]]
            row["cores"] = r["np"] * r["threads"]
            row["rel_err"] = _rel(r["halo_predicted_us"], r["halo_measured_us"]) if r["k"] else None
            rows.append(row)
        # Scaling of the pure MPI cells (threads = 1) of each mode.
        for mode in {r["mode"] for r in rows}:
            pure = sorted((r for r in rows if r["threads"] == 1 and r["mode"] == mode), key=lambda r: r["np"])
            if not pure:
                continue
            base = pure[0]
            for r in pure:
                if not r["iteration_us"] or not base["iteration_us"]:
                    continue
                if mode == "weak":
                    r["efficiency"] = _num(base["iteration_us"] / r["iteration_us"])
                else:
                    r["efficiency"] = _num(base["iteration_us"] * base["np"] / (r["np"] * r["iteration_us"]))
                r["efficiency_base_np"] = base["np"]
        hybrid = []
        for h in (r for r in rows if r["threads"] > 1):
            pure = next((r for r in rows if r["threads"] == 1 and r["np"] == h["cores"] and r["mode"] == h["mode"]),
                        None)
            hybrid.append({
                "cores": h["cores"], "hybrid": f"{h['np']} × {h['threads']}",
                "pure": f"{h['cores']} × 1" if pure else None,
                "hybrid_bytes_per_rank": h["bytes_per_rank"],
                "pure_bytes_per_rank": pure["bytes_per_rank"] if pure else None,
                "hybrid_messages_per_rank": h["messages_per_rank"],
                "pure_messages_per_rank": pure["messages_per_rank"] if pure else None,
                "hybrid_halo_us": h["halo_measured_us"], "pure_halo_us": pure["halo_measured_us"] if pure else None,
                "hybrid_mlups": h["mlups_total"], "pure_mlups": pure["mlups_total"] if pure else None,
            })

        def describe(p: dict[str, Any]) -> str:
            over = ", oversubscribed" if p["oversubscribed"] else ""
            return f"P={p['np']}×{p['threads']} (k={p['k']}, {p['bytes_per_rank']:.0f} B/rank{over})"

        tested = [r for r in rows if r["rel_err"] is not None]
        fails = failure_statement(tested, describe) if p2p is not None else note
        weak = [r for r in rows if r.get("efficiency") is not None and r["np"] > r.get("efficiency_base_np", r["np"])]
        headline = f"MLUP/s {max((r['mlups_total'] or 0) for r in rows):.0f} (best)"
        if weak:
            last = max(weak, key=lambda r: r["np"])
            headline += f"; efficiency {last['efficiency']:.2f} at P={last['np']}"
        out.append({
            **head, "model": JACOBI_FORMULA, "lambda_source": p2p.source if p2p else None, "lambda_note": note,
            "latency_us": _num(p2p.latency_us) if p2p else None,
            "bandwidth_MBps": _num(p2p.bandwidth_MBps) if p2p else None,
            "points": rows, "hybrid_vs_pure": hybrid, "headline": headline, "fails_where": fails,
        })
    return out


# ------------------------------------------------------------------------------------------- all


def fit_kernels(tables: dict[str, pl.DataFrame | None], hockney: Sequence[dict[str, Any]] | None, *,
                seed: int = 0) -> dict[str, Any]:
    """Every kernel model: ``{"ring": [...], "matsum": [...], "jacobi": [...], "pingpong": [...],
    "coll": [...], "notes": [...]}``, one entry per stack/transport/mapping (matsum: also per
    topo/dist; coll: per collective and P). pingpong/coll: :mod:`mpiatlas.models.kernel_p2p`."""
    from mpiatlas.models.kernel_p2p import fit_coll, fit_pingpong

    notes: list[str] = []
    ring = fit_ring(tables.get("ring"), hockney, seed=seed)
    ring_p2p = {r["label"]: P2P(r["ring_latency_us"], r.get("ring_bandwidth_MBps"), "ring")
                for r in ring if r.get("ring_latency_us") is not None}
    for r in ring:
        if r.get("lambda_source") == "ring":
            notes.append(f"ring {r['label']}: {r['lambda_note']}")
    matsum = fit_matsum(tables.get("matsum"), seed=seed)
    jacobi = fit_jacobi(tables.get("jacobi"), hockney, ring_p2p)
    pingpong = fit_pingpong(tables.get("pingpong"), hockney, seed=seed)
    coll = fit_coll(tables.get("coll"))
    for name, fits in (("ring", ring), ("matsum", matsum), ("jacobi", jacobi), ("pingpong", pingpong)):
        for f in fits:
            if "error" in f:
                notes.append(f"{name} {f.get('label')}: not fitted: {f['error']}")
    return {"ring": ring, "matsum": matsum, "jacobi": jacobi, "pingpong": pingpong, "coll": coll, "notes": notes}


__all__ = ["fit_kernels", "fit_ring", "fit_matsum", "fit_jacobi", "load_kernel_tables", "P2P",
           "ring_predict", "ring_phases", "matsum_model", "fit_amdahl", "binomial_subtree"]
