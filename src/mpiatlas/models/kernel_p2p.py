"""Fits of mpiatlas's own point-to-point and collective kernels (pingpong, coll): not IMB.

Inputs: ``kernel_pingpong.parquet`` and ``kernel_coll.parquet`` (tidy; one row per rank per size per
cell, i.e. per repetition). Only ``ok`` cells and records whose own check passed (``valid``) count.

**pingpong**: rank 0's record is the number OSU and IMB print (half a round trip, µs), so the fit
uses rank 0's rows. Per stack/transport/mapping the piecewise Hockney model of
:mod:`mpiatlas.models.hockney` (``fit_hockney``: relative residuals, segments by penalised BIC, CIs
by a bootstrap over repetitions) gives λ (first segment) and B (last segment). Also reported: the
median over repetitions of the 4-byte latency and of the 4 MiB bandwidth, and, where the same
stack/transport/mapping has an IMB PingPong fit (``results/fits/hockney.json``), IMB's λ and B beside
the kernel's as a cross-check (two different programs measuring the same thing).

**coll**: per stack/transport/mapping x collective x P x algorithm x size, the median over
repetitions of the time per call averaged over ranks (OSU's Avg Latency, rank 0's ``t_avg_usec``),
with min and max over ranks; per (collective, P, size) the best algorithm (smallest median), the
runner-up's margin and the stack default's time. ``default`` is the stack's own choice, which may
be any of the forced ones; "best" is over what was measured, at these repetitions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypedDict

import polars as pl

from mpiatlas.models.best_algorithm import best_algorithms as rank_algorithms
from mpiatlas.models.fit_records import Fit, HockneyRecord
from mpiatlas.models.kernel_common import imb_pingpong_fit
from mpiatlas.models.kernel_records import CollBest, CollFit, CollPoint, PingpongFit, PingpongPoint
from mpiatlas.models.hockney import fit_hockney, record_of

LABEL_COLUMNS = ("label", "stack", "transport", "mapping")
SOURCE = "mpiatlas pingpong kernel (src/kernels/pingpong.c, OSU shape), not IMB"
COLL_SOURCE = "mpiatlas coll kernel (src/kernels/coll.c, OSU shape), not IMB"
LATENCY_BYTES = 4
BANDWIDTH_BYTES = 4 * 2**20


def _num(x: Any) -> float | None:
    """JSON-safe float (None for missing / non-finite)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _ok_rows(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rows of ``ok`` cells whose record passed its own check."""
    if df is None or df.height == 0:
        return None
    if "cell_status" in df.columns:
        df = df.filter(pl.col("cell_status") == "ok")
    if "valid" in df.columns:
        df = df.filter(pl.col("valid").fill_null(False))
    for col in LABEL_COLUMNS:
        if col not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=pl.String).alias(col))
    return df if df.height else None


def _median_at(points: Sequence[PingpongPoint], size: int, figure: Callable[[PingpongPoint], float | None]) -> float | None:
    return next((figure(p) for p in points if p.bytes == size), None)


# -------------------------------------------------------------------------------------- pingpong


def pingpong_points(df: pl.DataFrame) -> pl.DataFrame:
    """Per (label, bytes): medians over repetitions of rank 0's time and bandwidth, and the reps."""
    return (df.group_by([*LABEL_COLUMNS, "bytes"])
            .agg(pl.col("t_usec").median().alias("t_usec"), pl.col("t_usec").alias("reps_us"),
                 pl.col("t_min_usec").median().alias("t_min_usec"), pl.col("MBps").median().alias("MBps"),
                 pl.col("iterations").min().alias("iterations_min"), pl.len().alias("n_reps"))
            .sort([*LABEL_COLUMNS, "bytes"]))


def pingpong_medians(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """:func:`pingpong_points` of rank 0's rows of ok cells with a valid record (what
    :func:`fit_pingpong` fits, the report draws and its findings quote); None when there are none."""
    ok = _ok_rows(df)
    if ok is None:
        return None
    ok = ok.filter(pl.col("rank") == 0)  # the OSU/IMB reporter; rank 1 times the same round trips
    return pingpong_points(ok) if ok.height else None


def fit_pingpong(df: pl.DataFrame | None, hockney: Sequence[HockneyRecord] | None = None, *,
                 seed: int = 0) -> list[PingpongFit]:
    """One entry per stack/transport/mapping: Hockney λ, B (95 % CIs), 4 B latency, 4 MiB bandwidth,
    and IMB PingPong's λ, B beside them when that fit exists."""
    df = _ok_rows(df)
    if df is None:
        return []
    df = df.filter(pl.col("rank") == 0)  # the OSU/IMB reporter; rank 1 times the same round trips
    out = []
    for key, grp in df.group_by(list(LABEL_COLUMNS), maintain_order=True):
        cell = Fit.cell_fields({**dict(zip(LABEL_COLUMNS, key)), "benchmark": "pingpong"}, "kernel_pingpong table",
                               "$." + "/".join(map(str, key)))
        points = tuple(PingpongPoint(bytes=int(r["bytes"]), t_usec=_num(r["t_usec"]), t_min_usec=_num(r["t_min_usec"]),
                                     MBps=_num(r["MBps"]), n_reps=int(r["n_reps"]), iterations_min=r["iterations_min"],
                                     reps_us=tuple(_num(v) for v in r["reps_us"]))
                       for r in pingpong_points(grp).iter_rows(named=True))
        imb = imb_pingpong_fit(hockney, cell["label"])
        entry = PingpongFit(
            **cell, source=SOURCE, n_reps=int(grp["rep"].n_unique()),
            latency_4B_us=_median_at(points, LATENCY_BYTES, lambda p: p.t_usec),
            bandwidth_4MiB_MBps=_median_at(points, BANDWIDTH_BYTES, lambda p: p.MBps), points=points,
            imb_latency_us=_num(imb.latency_us) if imb else None, imb_latency_ci_us=imb.latency_ci_us if imb else None,
            imb_asymptotic_bandwidth_MBps=_num(imb.asymptotic_bandwidth_MBps) if imb else None,
            imb_asymptotic_bandwidth_ci_MBps=imb.asymptotic_bandwidth_ci_MBps if imb else None,
            imb_peak_bandwidth_MBps=_num(imb.peak_bandwidth_MBps) if imb else None,
            imb_peak_bandwidth_ci_MBps=imb.peak_bandwidth_ci_MBps if imb else None)
        try:
            fit = fit_hockney(grp["bytes"].to_list(), grp["t_usec"].to_list(),
                              launches=grp["rep"].cast(pl.String).to_list(), seed=seed)
        except ValueError as exc:
            out.append(replace(entry, error=str(exc)))
            continue
        record = record_of(fit, cell)
        out.append(replace(entry, hockney=record, **_against_imb(record, entry)))
    return out


def _ratio(kernel: float | None, imb: float | None) -> float | None:
    return _num(kernel / imb) if kernel and imb else None


def _against_imb(kernel: HockneyRecord, entry: PingpongFit) -> _AgainstImb:
    """The kernel's λ and bandwidths over IMB PingPong's (the same estimand on both sides: asymptotic
    against asymptotic, peak against peak), and the entry's one-line headline."""
    lam, imb_lam = kernel.latency_us, entry.imb_latency_us
    bw = kernel.asymptotic_bandwidth_MBps
    head = f"λ {lam:.3g} µs, asymptotic B {bw:.4g} MB/s" if bw else f"λ {lam:.3g} µs, B unbounded"
    return _AgainstImb(
        kernel_vs_imb_latency=_ratio(lam, imb_lam),
        kernel_vs_imb_asymptotic_bandwidth=_ratio(bw, entry.imb_asymptotic_bandwidth_MBps),
        kernel_vs_imb_peak_bandwidth=_ratio(kernel.peak_bandwidth_MBps, entry.imb_peak_bandwidth_MBps),
        headline=head + (f"; IMB PingPong λ {imb_lam:.3g} µs" if imb_lam else
                         "; no IMB PingPong for this stack/transport"))


class _AgainstImb(TypedDict):
    kernel_vs_imb_latency: float | None
    kernel_vs_imb_asymptotic_bandwidth: float | None
    kernel_vs_imb_peak_bandwidth: float | None
    headline: str


# ------------------------------------------------------------------------------------------ coll


def coll_points(df: pl.DataFrame) -> pl.DataFrame:
    """Per (label, collective, P, algorithm, bytes): medians over repetitions of the time per call
    averaged over ranks (rank 0's t_avg_usec) and of its min/max over ranks."""
    rank0 = df.filter((pl.col("rank") == 0) & pl.col("t_avg_usec").is_not_null())
    if "oversubscribed" not in rank0.columns:
        rank0 = rank0.with_columns(pl.lit(None, dtype=pl.Boolean).alias("oversubscribed"))
    return (rank0.group_by([*LABEL_COLUMNS, "collective", "np", "algorithm", "bytes"])
            .agg(pl.col("t_avg_usec").median().alias("t_avg_usec"), pl.col("t_avg_usec").alias("reps_us"),
                 pl.col("t_min_usec").median().alias("t_min_usec"), pl.col("t_max_usec").median().alias("t_max_usec"),
                 pl.col("oversubscribed").any().alias("oversubscribed"), pl.len().alias("n_reps"))
            .sort([*LABEL_COLUMNS, "collective", "np", "algorithm", "bytes"]))


def best_algorithms(points: Sequence[CollPoint]) -> list[CollBest]:
    """Per size: the algorithm with the smallest median time, the runner-up's margin and the default's
    time; the criterion is :func:`mpiatlas.models.best_algorithm.best_algorithms`' (shared with the report)."""
    timed = [p for p in points if p.t_avg_usec is not None]
    if not timed:
        return []
    frame = pl.DataFrame({"bytes": [p.bytes for p in timed], "algorithm": [p.algorithm for p in timed],
                          "t_avg_usec": [p.t_avg_usec for p in timed]},
                         schema={"bytes": pl.Int64, "algorithm": pl.String, "t_avg_usec": pl.Float64})
    best = rank_algorithms(frame, ["bytes"], time="t_avg_usec", ci_low=None, ci_high=None)
    return [CollBest(
        bytes=int(r["bytes"]), algorithm=r["best"], t_avg_usec=r["t_best"], candidates=int(r["n_algorithms"]),
        runner_up=r["runner_up"],
        # how decisive: the runner-up's time over the best's, minus one (0.02 = 2 % slower)
        margin=_num(r["margin"]), default_usec=_num(r["t_default"]), default_over_best=_num(r["speedup"]),
    ) for r in best.iter_rows(named=True)]


def coll_medians(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """:func:`coll_points` of the ok cells' valid records (a table without ``algorithm`` ran the
    default); None when there are none. What :func:`fit_coll` ranks and the report's findings quote."""
    df = _ok_rows(df)
    if df is None:
        return None
    if "algorithm" not in df.columns:
        df = df.with_columns(pl.lit("default").alias("algorithm"))
    return coll_points(df)


def fit_coll(df: pl.DataFrame | None) -> list[CollFit]:
    """One entry per stack/transport/mapping x collective x P: points per algorithm and size, and the
    best algorithm per size."""
    pts = coll_medians(df)
    if pts is None:
        return []
    out = []
    keys = [*LABEL_COLUMNS, "collective", "np"]
    for (label, stack, transport, mapping, collective, np_), grp in pts.group_by(keys, maintain_order=True):
        points = tuple(CollPoint(algorithm=r["algorithm"], bytes=int(r["bytes"]), t_avg_usec=_num(r["t_avg_usec"]),
                                 t_min_usec=_num(r["t_min_usec"]), t_max_usec=_num(r["t_max_usec"]),
                                 n_reps=int(r["n_reps"]), reps_us=tuple(_num(v) for v in r["reps_us"]))
                       for r in grp.iter_rows(named=True))
        best = best_algorithms(points)
        algorithms = sorted({p.algorithm for p in points}, key=lambda a: (a != "default", a))
        wins: dict[str, int] = {}
        for b in best:
            wins[b.algorithm] = wins.get(b.algorithm, 0) + 1
        top = max(wins, key=lambda a: wins[a]) if wins else None
        out.append(CollFit(
            label=label, stack=stack, transport=transport, mapping=mapping, collective=str(collective),
            np=int(np_), source=COLL_SOURCE, algorithms=tuple(algorithms),
            oversubscribed=bool(grp["oversubscribed"].any()), points=points, best=tuple(best), wins=wins,
            headline=(f"{len(algorithms)} algorithm(s); fastest at most sizes: {top} "
                      f"({wins[top]} of {len(best)} sizes)") if top else "no timed sizes",
        ))
    return out


__all__ = [
    "COLL_SOURCE",
    "SOURCE",
    "best_algorithms",
    "coll_medians",
    "coll_points",
    "fit_coll",
    "fit_pingpong",
    "pingpong_medians",
    "pingpong_points",
]
