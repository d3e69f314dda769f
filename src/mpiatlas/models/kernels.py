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

**jacobi**: :mod:`mpiatlas.models.kernel_jacobi`; sweeps of process grids (matsum, jacobi):
:mod:`mpiatlas.models.kernel_grids`.

Every model result carries its residuals (``rel_err`` = predicted / measured − 1) and a one-line
``fails_where`` computed from them.
"""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.json_fields import Interval
from mpiatlas.models.kernel_common import (
    LABEL_COLUMNS,
    P2P,
    bootstrap_medians,
    failure_statement,
    fit_latency_bandwidth,
    json_num,
    percentile_ci,
    pingpong_params,
    relative_error,
    size_text,
    usable,
)
from mpiatlas.stats.aggregate import scalar
from mpiatlas.models.kernel_grids import matsum_grids, with_grid_facts
from mpiatlas.programs import modelled_kernels
from mpiatlas.models.kernel_jacobi import fit_jacobi
from mpiatlas.models.region_latency import RegionTable, RegionTableError
from mpiatlas.models.ring_regions import RegionInputs, RingHops, exchange_time, placement_boundaries
from mpiatlas.stats.quality import trusted
from mpiatlas.models.kernel_p2p import fit_coll, fit_pingpong
from mpiatlas.models.kernel_records import KernelFits
from mpiatlas.models.matsum_records import GatherOrder, MatsumFit, MatsumPoint, PhasesByRank
from mpiatlas.models.ring_records import PlacementBoundary, RegionModel, RingFit, RingPoint, RingRange, RingRegionPoint

# scipy (~0.5 s to import) is imported by the fits that use it: most campaigns need few of them.

N_BOOT = 400

RING_FORMULA = {
    "nonblocking": "T = P·m·t(s)",
    "blocking": "T = P·m·φ(P)·t(s), φ = 2 (even P), 3 (odd P)",
    "ssend": "T = P·m·φ(P)·(2λ + s/B)",
}
MATSUM_FORMULA = "T(P) = s + p/min(P, cores) + c·⌈log2 P⌉"


# ---------------------------------------------------------------------------------------- inputs


def load_kernel_tables(directory: str | Path) -> dict[str, pl.DataFrame | None]:
    """``kernel_<name>.parquet`` of ``directory`` (searched recursively), None when absent/empty;
    rows of perturbed launches left out (mpiatlas.stats.quality.trusted, as samples.load_samples does)."""
    directory = Path(directory)
    out: dict[str, pl.DataFrame | None] = {}
    for name in modelled_kernels():  # the registry's kernels that declare a model (programs.base.Program.modelled)
        files = sorted(directory.rglob(f"kernel_{name}.parquet")) if directory.is_dir() else []
        frames = [pl.read_parquet(f) for f in files]
        frames = [f for f in frames if f.height]
        table = trusted(pl.concat(frames, how="diagonal_relaxed")) if frames else None
        out[name] = table if table is not None and table.height else None
    return out


# ------------------------------------------------------------------------------------------ ring


def _interval(ci: list[float | None]) -> Interval:
    """A percentile_ci pair as a record's interval."""
    return (ci[0], ci[1])


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
    # maintain_order: the reps lists (and the bootstrap that draws from them) follow the table's
    # order, so one table gives one kernels.json byte for byte.
    per_cell = (df.group_by([*LABEL_COLUMNS, "cell", "rep", "np", "variant", "streams", "bytes"], maintain_order=True)
                .agg(pl.col("time_us").max().alias("t"), pl.col("oversubscribed").any().alias("over")))
    return (per_cell.group_by([*LABEL_COLUMNS, "np", "variant", "streams", "bytes"], maintain_order=True)
            .agg(pl.col("t").median().alias("measured_us"), pl.col("t").alias("reps"),
                 pl.col("over").any().alias("oversubscribed"))
            .sort([*LABEL_COLUMNS, "variant", "streams", "bytes", "np"]))


@dataclass(frozen=True)
class RingSelfFit:
    """λ (µs, with its bootstrap CI) and B (MB/s, None: unbounded) the ring's nonblocking points imply
    by themselves, from ``n_points`` points (oversubscribed ones only when there were no others)."""

    latency_us: float
    latency_ci_us: Interval
    bandwidth_MBps: float | None
    n_points: int
    used_oversubscribed: bool


def _ring_self_fit(points: pl.DataFrame, rng: np.random.Generator) -> RingSelfFit | None:
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
    boots = np.array([fit_latency_bandwidth(sizes, yb) for yb in bootstrap_medians(reps, rng, N_BOOT)])
    return RingSelfFit(latency_us=lam, latency_ci_us=_interval(percentile_ci(boots[:, 0])),
                       bandwidth_MBps=1.0 / g if g > 0 else None, n_points=int(nb.height),
                       used_oversubscribed=bool(nb["oversubscribed"].any()))


# Message-size ranges of the per-range ring λ table: eager small messages, the medium sizes up to a
# typical eager/rendezvous switch, and the large ones (lower bound inclusive, upper exclusive).
RING_RANGES: tuple[tuple[int, int | None, str], ...] = (
    (0, 1024, "< 1 KiB"), (1024, 65536, "1 KiB – 64 KiB"), (65536, None, "≥ 64 KiB"))


def ring_range_fits(points: pl.DataFrame) -> list[RingRange]:
    """λ and B per message-size range from the ring alone: T_nonblocking/(P·m) = λ + s/B fitted
    (:func:`fit_latency_bandwidth`) over the range's nonblocking points with P ≤ cores (all of them
    when every one is oversubscribed); a range of one size gives its per-message time as λ and no B."""
    nb = points.filter((pl.col("variant") == "nonblocking") & ~pl.col("oversubscribed").fill_null(False))
    if nb.height == 0:
        nb = points.filter(pl.col("variant") == "nonblocking")
    out = []
    for low, high, name in RING_RANGES:
        part = nb.filter((pl.col("bytes") >= low) & (pl.col("bytes") < high if high is not None else pl.lit(True)))
        if part.height == 0:
            continue
        sizes = part["bytes"].to_numpy().astype(float)
        per_message = part["measured_us"].to_numpy() / (part["np"] * part["streams"]).to_numpy().astype(float)
        lam, g = fit_latency_bandwidth(sizes, per_message)
        several = np.unique(sizes).size > 1
        out.append(RingRange(range=name, sizes=tuple(sorted({int(b) for b in sizes})),
                             np=tuple(sorted(set(part["np"].to_list()))), n_points=part.height,
                             latency_us=json_num(lam), bandwidth_MBps=json_num(1.0 / g) if several and g > 0 else None))
    return out


def fit_ring(df: pl.DataFrame | None, hockney: Sequence[HockneyRecord] | None, *,
             seed: int = 0, regions: RegionInputs | None = None) -> list[RingFit]:
    """One fit per stack/transport/mapping; with ``regions`` every point also carries the
    region-aware prediction (:mod:`mpiatlas.models.ring_regions`): hops of the cell's placement,
    each priced by its region, the slowest setting the pace."""
    df = usable(df)
    if df is None:
        return []
    rng = np.random.default_rng(seed)
    out = []
    points_all = ring_points(df)
    for key, points in points_all.group_by(list(LABEL_COLUMNS), maintain_order=True):
        head = dict(zip(LABEL_COLUMNS, key))
        label = head["label"]
        cell = {"label": label, "stack": head["stack"], "transport": head["transport"], "mapping": head["mapping"]}
        pingpong = pingpong_params(hockney, label)
        ring_fit = _ring_self_fit(points, rng)
        if pingpong is not None:
            p2p = pingpong
            source_note = "λ and t(s) from the IMB PingPong Hockney fit of the same stack/transport/mapping"
        elif ring_fit is not None:
            p2p = P2P(ring_fit.latency_us, ring_fit.bandwidth_MBps, "ring")
            source_note = ("no IMB PingPong fit for this stack/transport/mapping: λ and B fitted to the ring's own "
                           "nonblocking points, so the nonblocking residuals are a fit, not a test")
        else:
            out.append(RingFit(**cell, error="no PingPong fit and no nonblocking ring points to take λ from"))
            continue
        points_fit = []
        table = regions.table_for(label, head["stack"], head["transport"]) if regions else None
        for r in points.iter_rows(named=True):
            pred = ring_predict(r["variant"], r["np"], r["streams"], r["bytes"], p2p)
            msg = p2p.time(r["bytes"])
            unit = r["np"] * r["streams"] * msg
            hops = regions.hops.get((label, r["np"])) if regions else None
            points_fit.append(RingPoint(
                variant=r["variant"], streams=r["streams"], bytes=r["bytes"], np=r["np"],
                oversubscribed=bool(r["oversubscribed"]), n_reps=len(r["reps"]),
                measured_us=json_num(r["measured_us"]), predicted_us=json_num(pred),
                rel_err=relative_error(pred, r["measured_us"]), phases_model=ring_phases(r["variant"], r["np"]),
                phases_measured=json_num(r["measured_us"] / unit) if unit > 0 else None,
                reps_us=tuple(json_num(v) for v in r["reps"]), region=_region_point(r, hops, table)))
        ratio = None
        if ring_fit and pingpong and pingpong.latency_us:
            ratio = ring_fit.latency_us / pingpong.latency_us

        fails = failure_statement(points_fit, _describe_ring_point)
        nb_small = [p for p in points_fit if p.variant == "nonblocking" and not p.oversubscribed]
        headline = (f"ring λ {ring_fit.latency_us:.3g} µs" if ring_fit else "ring λ n/a") + \
            (f" vs PingPong λ {pingpong.latency_us:.3g} µs (×{ratio:.2f})" if ratio is not None and pingpong else
             " (no PingPong λ: ring-fitted)")
        ring_ci = ring_fit.latency_ci_us if ring_fit else (None, None)
        out.append(RingFit(
            **cell,
            model=dict(RING_FORMULA),
            lambda_source=p2p.source,
            lambda_note=source_note,
            latency_us=json_num(p2p.latency_us),
            bandwidth_MBps=json_num(p2p.bandwidth_MBps),
            pingpong_latency_us=json_num(pingpong.latency_us) if pingpong else None,
            pingpong_bandwidth_MBps=json_num(pingpong.bandwidth_MBps) if pingpong else None,
            ring_latency_us=json_num(ring_fit.latency_us) if ring_fit else None,
            ring_latency_ci_us=ring_ci,
            ring_bandwidth_MBps=json_num(ring_fit.bandwidth_MBps) if ring_fit else None,
            ring_fit_points=ring_fit.n_points if ring_fit else 0,
            ring_ranges=tuple(ring_range_fits(points)),
            ring_vs_pingpong_latency=json_num(ratio),
            nonblocking_points_within_25pct=sum(1 for p in nb_small if p.rel_err is not None
                                                and abs(p.rel_err) <= 0.25),
            points=tuple(points_fit),
            headline=headline,
            fails_where=fails,
            boundaries=_boundaries(label, regions),
            **_region_summary(points_fit, table, regions),
        ))
    return out


def _boundaries(label: str, regions: RegionInputs | None) -> tuple[PlacementBoundary, ...]:
    """The P where the label's rings first reach another socket or node (ring_regions.placement_boundaries
    of its largest ring whose placement is known); [] without one."""
    sizes = [np_ for (name, np_) in (regions.hops if regions else {}) if name == label]
    if not sizes or regions is None:
        return ()
    return tuple(placement_boundaries(regions.hops[(label, max(sizes))]))


def _region_point(r: dict[str, Any], hops: RingHops | None, table: RegionTable | None) -> RingRegionPoint:
    """The region-aware prediction of one ring point (None fields: no hops or no table)."""
    if hops is None or table is None:
        return RingRegionPoint()
    if not hops.regions:  # one rank: no hop to price (the ring's time is its own copy, not a message)
        return RingRegionPoint(boundary_hops=0, hop_regions={})
    try:
        pred = exchange_time(hops, table, np=r["np"], streams=r["streams"], nbytes=r["bytes"],
                             phases=ring_phases(r["variant"], r["np"]), ssend=r["variant"] == "ssend")
    except RegionTableError:  # a hop region the table lacks: no prediction for this point
        return RingRegionPoint(boundary_hops=hops.boundary_hops, hop_regions=hops.counts())
    return RingRegionPoint(region_predicted_us=json_num(pred.predicted_us),
                           region_rel_err=relative_error(pred.predicted_us, r["measured_us"]),
                           boundary_hops=pred.boundary_hops, slowest_region=pred.slowest_region,
                           hop_regions=dict(pred.hop_regions))


def _describe_ring_point(p: RingPoint) -> str:
    over = ", oversubscribed" if p.oversubscribed else ""
    return f"{p.variant} P={p.np} {p.bytes} B ({p.streams} streams{over})"


def _region_summary(points: list[RingPoint], table: RegionTable | None, regions: RegionInputs | None) -> RegionSummary:
    """The fit's region-aware fields: the table used, where that model fails, and where it parts
    from the single-λ model (|region/single − 1| > 10 %)."""
    priced = [(p, p.region.region_predicted_us) for p in points if p.region.region_predicted_us is not None]
    if not priced:
        why = ("no region table (no per-region PingPong fits for this stack/transport)" if table is None
               else "no hop regions for these cells (placement or topology unknown)")
        return {"region_model": None, "region_note": why if regions else "no region inputs given",
                "region_fails_where": None, "region_changes": None}
    # The points scored by the region model's error instead of the single-λ one's.
    scored = [replace(p, rel_err=p.region.region_rel_err) for p, _ in priced]
    differ = [p for p, region_us in priced if p.predicted_us and abs(region_us / p.predicted_us - 1) > 0.1]
    changes = None
    if differ:
        nps = sorted({p.np for p in differ})
        crossing = sorted({str(p.region.slowest_region) for p in differ})
        changes = (f"region-aware model parts from the single-λ one (>10 %) at P = {', '.join(map(str, nps))} "
                   f"(slowest hop {', '.join(crossing)}); it {failure_statement(scored, _describe_ring_point)}")
    return {"region_model": RegionModel(source=table.source, latency_us=dict(table.latency_us),
                                        bandwidth_MBps=dict(table.bandwidth_MBps)) if table else None,
            "region_note": None, "region_fails_where": failure_statement(scored, _describe_ring_point),
            "region_changes": changes}


# ---------------------------------------------------------------------------------------- matsum


class RegionSummary(TypedDict):
    """The region-aware fields of a :class:`RingFit` (see there)."""

    region_model: RegionModel | None
    region_note: str | None
    region_fails_where: str | None
    region_changes: str | None


def binomial_subtree(rank: int, size: int) -> int:
    """Ranks in ``rank``'s subtree of a binomial tree rooted at 0 (its gather wait grows with it)."""
    if rank == 0:
        return size
    low = rank & -rank  # 2^trailing_zeros
    return min(low, size - rank)


def matsum_model(params: Sequence[float] | np.ndarray, np_: np.ndarray, cores: np.ndarray) -> np.ndarray:
    s, p, c = params
    model: np.ndarray = s + p / np.minimum(np_, cores) + c * np.ceil(np.log2(np_))
    return model


def fit_amdahl(np_: np.ndarray, cores: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Bounded (≥ 0) least squares of relative residuals: (s, p, c)."""
    t = np.asarray(t, dtype=float)
    x0 = np.array([0.1 * t.max(), 0.8 * t.max(), 0.05 * t.max()])

    def resid(params: np.ndarray) -> np.ndarray:
        rel: np.ndarray = matsum_model(params, np_, cores) / t - 1.0
        return rel

    from scipy import optimize  # by the fit that uses it (see the note after this module's imports)

    res = optimize.least_squares(resid, x0, bounds=(0.0, np.inf), method="trf", x_scale=np.maximum(x0, 1e-9))
    return res.x


def _gather_order(df: pl.DataFrame) -> list[GatherOrder]:
    """Per P ≥ 3: the median gather time of every rank, and its Spearman correlation with the
    binomial subtree size and with the rank (a linear gather's order)."""
    out = []
    per_rank = df.group_by(["np", "rank"]).agg(pl.col("gather_us").median().alias("g")).sort(["np", "rank"])
    for (np_,), grp in per_rank.group_by(["np"], maintain_order=True):
        if np_ < 3:
            continue

        ranks = grp["rank"].to_list()
        g = grp["g"].to_numpy()
        nonroot = [i for i, r in enumerate(ranks) if r != 0]
        sub = [binomial_subtree(ranks[i], np_) for i in nonroot]
        gvals = g[nonroot]
        from scipy import stats  # by the fit that uses it (see the note after this module's imports)

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
        out.append(GatherOrder(np=int(np_), gather_us_by_rank={str(r): json_num(v) for r, v in zip(ranks, g)},
                               slowest_first=tuple(order),
                               binomial_subtree={str(ranks[i]): s for i, s in zip(nonroot, sub)},
                               spearman_binomial=json_num(rho_bin), spearman_linear=json_num(rho_lin), verdict=verdict))
    return out


def phases_by_rank(df: pl.DataFrame) -> list[PhasesByRank]:
    """Per P, every rank's scatter, compute and gather time and their total (medians over repetitions):
    where each rank spends the matrix sum, the per-rank table of the study."""
    phases = [c for c in ("scatter_us", "compute_us", "gather_us", "total_us") if c in df.columns]
    if not phases:
        return []
    per_rank = (df.group_by(["np", "rank"]).agg(pl.len().alias("n_reps"), *(pl.col(c).median() for c in phases))
                .sort(["np", "rank"]))
    return [PhasesByRank(np=int(np_), ranks=tuple({k: (json_num(v) if isinstance(v, float) else v) for k, v in r.items()
                                                   if k != "np"} for r in grp.iter_rows(named=True)))
            for (np_,), grp in per_rank.group_by(["np"], maintain_order=True)]


def amdahl_rows(df: pl.DataFrame) -> pl.DataFrame:
    """The rows one Amdahl series each per dims, topo and dist: the stack's own (MPI_Dims_create)
    grids only. An explicit grid runs at one P (kernel_grids compares those), and where it ran
    the default grid did not."""
    df = with_grid_facts(df).filter(~pl.col("explicit"))
    if "dims" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("dims"))
    df = df.with_columns(pl.col("dims").map_elements(size_text, return_dtype=pl.String).fill_null("?"))
    if "node_cores" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias("node_cores"))
    return df


def fit_matsum(df: pl.DataFrame | None, *, seed: int = 0) -> list[MatsumFit]:
    """One Amdahl fit per stack/transport/mapping, dims, topo and dist (see the module docstring)."""
    df = usable(df)
    if df is None:
        return []
    df = amdahl_rows(df)
    rng = np.random.default_rng(seed)
    out = []
    keys = [*LABEL_COLUMNS, "dims", "topo", "dist"]
    phases = [c for c in ("scatter_us", "compute_us", "gather_us") if c in df.columns]
    per_cell = (df.group_by([*keys, "cell", "rep", "np"], maintain_order=True)
                .agg(pl.col("total_us").max().alias("t"), pl.col("oversubscribed").any().alias("over"),
                     pl.col("node_cores").max().alias("cores"), *(pl.col(c).max() for c in phases)))
    for key, grp in per_cell.group_by(keys, maintain_order=True):
        head = dict(zip(keys, key))
        pts = (grp.group_by("np", maintain_order=True).agg(pl.col("t").median().alias("measured_us"), pl.col("t").alias("reps"),
                                      pl.col("over").any().alias("oversubscribed"),
                                      pl.col("cores").max().alias("cores"),
                                      *(pl.col(c).median() for c in phases))
               .sort("np"))
        np_ = pts["np"].to_numpy().astype(float)
        known = pts["cores"].drop_nulls()
        node_cores = int(scalar(known.max())) if known.len() else int(np_.max())
        cores = np.full_like(np_, float(node_cores))
        t = pts["measured_us"].to_numpy().astype(float)
        raw = df.filter(pl.all_horizontal(pl.col(k) == v for k, v in head.items()))
        topo = head["topo"]
        base = MatsumFit(label=head["label"], stack=head["stack"], transport=head["transport"],
                         mapping=head["mapping"], dims=head["dims"], topo=tuple(topo) if isinstance(topo, list) else topo,
                         dist=head["dist"], model=MATSUM_FORMULA, cores=node_cores,
                         gather_order=tuple(_gather_order(raw)), phases_by_rank=tuple(phases_by_rank(raw)))
        if np.unique(np.stack([np.minimum(np_, cores), np.ceil(np.log2(np_))], axis=1), axis=0).shape[0] < 3:
            out.append(replace(base, error=f"need 3 process counts that separate s, p/min(P, cores) and ⌈log2 P⌉; "
                                           f"have P = {sorted(map(int, np_))} on {node_cores} cores"))
            continue
        params = fit_amdahl(np_, cores, t)
        boots = np.array([fit_amdahl(np_, cores, tb) for tb in bootstrap_medians(pts["reps"].to_list(), rng, N_BOOT)])
        sf = params[0] / (params[0] + params[1]) if params[0] + params[1] > 0 else None
        sf_boot = boots[:, 0] / np.maximum(boots[:, 0] + boots[:, 1], 1e-300)
        pred = matsum_model(params, np_, cores)
        # Phase times (slowest rank, median over repetitions): what the total is made of.
        phase_rows = pts.select(phases).to_dicts() if phases else [{} for _ in range(pts.height)]
        points_fit = [MatsumPoint(np=int(n), p_eff=int(min(n, node_cores)), oversubscribed=bool(o), n_reps=len(r),
                                  measured_us=json_num(m), predicted_us=json_num(p), rel_err=relative_error(p, m),
                                  reps_us=tuple(json_num(v) for v in r), phases={k: json_num(v) for k, v in ph.items()})
                      for n, o, r, m, p, ph in zip(np_, pts["oversubscribed"].to_list(), pts["reps"].to_list(), t,
                                                   pred, phase_rows)]
        def describe(p: MatsumPoint) -> str:
            return f"P={p.np}" + (" (oversubscribed)" if p.oversubscribed else "")

        exact = len(points_fit) == 3
        fails = failure_statement(points_fit, describe)
        if exact:
            fails = "3 process counts for 3 parameters: the fit is exact, so residuals cannot test it; " + fails
        verdicts = [g.verdict for g in base.gather_order]
        out.append(replace(
            base,
            s_us=json_num(params[0]), p_us=json_num(params[1]), c_us=json_num(params[2]),
            s_ci_us=_interval(percentile_ci(boots[:, 0])), p_ci_us=_interval(percentile_ci(boots[:, 1])),
            c_ci_us=_interval(percentile_ci(boots[:, 2])),
            serial_fraction=json_num(sf), serial_fraction_ci=_interval(percentile_ci(sf_boot)),
            max_speedup=json_num(1.0 / sf) if sf else None,
            points=tuple(points_fit),
            headline=(f"serial fraction {sf:.2f}" if sf is not None else "serial fraction n/a")
            + (f"; gather: {verdicts[-1]}" if verdicts else ""),
            fails_where=fails,
        ))
    return out


# ------------------------------------------------------------------------------------------- all


def fit_kernels(tables: dict[str, pl.DataFrame | None], hockney: Sequence[HockneyRecord] | None, *,
                seed: int = 0, ring_regions: RegionInputs | None = None) -> KernelFits:
    """Every kernel model: ``{"ring": [...], "matsum": [...], "matsum_grids": [...], "jacobi": [...],
    "pingpong": [...], "coll": [...], "notes": [...]}``, one entry per stack/transport/mapping (matsum:
    also per dims/topo/dist; matsum_grids: per dims/dist/P that ran several grids, :mod:`kernel_grids`;
    coll: per collective and P). pingpong/coll: :mod:`mpiatlas.models.kernel_p2p`."""
    notes: list[str] = []
    ring = fit_ring(tables.get("ring"), hockney, seed=seed, regions=ring_regions)
    notes += ring_regions.notes if ring_regions else []
    ring_p2p = {r.label: P2P(r.ring_latency_us, r.ring_bandwidth_MBps, "ring")
                for r in ring if r.ring_latency_us is not None}
    notes += [f"ring {r.label}: {r.lambda_note}" for r in ring if r.lambda_source == "ring"]
    matsum = fit_matsum(tables.get("matsum"), seed=seed)
    grids = matsum_grids(usable(tables.get("matsum")), seed=seed)
    jacobi = fit_jacobi(tables.get("jacobi"), hockney, ring_p2p)
    pingpong = fit_pingpong(tables.get("pingpong"), hockney, seed=seed)
    coll = fit_coll(tables.get("coll"))
    notes += [f"ring {f.label}: not fitted: {f.error}" for f in ring if f.error is not None]
    notes += [f"matsum {f.label}: not fitted: {f.error}" for f in matsum if f.error is not None]
    notes += [f"pingpong {f.label}: not fitted: {f.error}" for f in pingpong if f.error is not None]
    return KernelFits(ring=tuple(ring), matsum=tuple(matsum), matsum_grids=tuple(grids), jacobi=tuple(jacobi), pingpong=tuple(pingpong),
                      coll=tuple(coll), notes=tuple(notes))


__all__ = [
    "P2P",
    "binomial_subtree",
    "fit_amdahl",
    "fit_jacobi",
    "fit_kernels",
    "fit_matsum",
    "fit_ring",
    "load_kernel_tables",
    "matsum_model",
    "ring_phases",
    "ring_predict",
]
