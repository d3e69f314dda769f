"""What the report says first: plain sentences with their numbers, computed from the tables.

Pure functions over polars frames; each returns its sentences only when the data supports them
(no PingPong, no sentence about PingPong). The Findings section (``sections/findings.py``)
assembles the frames from the campaign and prints the sentences in this order:

1. the fastest and slowest point-to-point series at 4 B and at 4 MiB (IMB PingPong; the pingpong
   kernel for the series that have no IMB PingPong), or at the smallest / largest size measured;
2. IMB PingPong against the pingpong kernel (two programs measuring the same thing): a λ or B
   more than 30 % apart, both figures with their 95 % intervals (:func:`cross_check`);
3. per stack, shared-memory vs TCP latency at 4 B (or the smallest size both have);
4. collective algorithms more than 2× faster than the stack's default, and where;
5. anomalies: latency steps of more than 10× between neighbouring sizes of one series;
6. what failed: cells per status with the first reason.

The campaign's trust (perturbed launches, noisy points, wide intervals) comes before all of these,
as its own paragraph: :mod:`mpiatlas.report.trust`.

Frames:

* *p2p medians* (:func:`imb_pingpong`, :func:`kernel_pingpong`): ``label, stack, transport,
  bytes, t_usec`` (median over repetitions) and optionally ``bw_MBps``;
* *latency series* (:func:`imb_series`, :func:`kernel_series`): ``series, bytes, t_usec``;
* *best algorithms*: :func:`mpiatlas.models.best_algorithm.best_algorithms` output;
* *cells*: ``cells.parquet`` (``cell, status, reason``);
* *fits*: hockney.json's entries (IMB) and kernels.json's pingpong entries (the kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from mpiatlas.models.best_algorithm import best_algorithms
from mpiatlas.models.fit_records import HockneyRecord, Interval
from mpiatlas.report.formatting import finite, fmt_bytes, fmt_ci, fmt_num
from mpiatlas.stacks.base import SHM, TCP, medium

LATENCY_BYTES = 4
BANDWIDTH_BYTES = 4 * 2**20
WIN_FACTOR = 2.0  # a forced algorithm worth naming beats the default by more than this
STEP_FACTOR = 10.0  # a latency step between neighbouring sizes worth naming
MAX_SENTENCES = 8  # per kind of finding; the rest is counted, the sections show them all
# IMB PingPong and the pingpong kernel measure the same half round trip: a λ or B of one more than
# this fraction above the other's (larger / smaller − 1) means one of them is not a result.
DISAGREE = 0.30

IMB_PINGPONG = "IMB PingPong"
KERNEL_PINGPONG = "pingpong kernel"

_STATUS_VERBS = {"failed": "failed", "timeout": "timed out", "invalid": "were invalid",
                 "unavailable": "were unavailable"}
_STATUS_ORDER = ("failed", "timeout", "invalid", "unavailable")
P2P_COLUMNS = ("label", "stack", "transport", "bytes", "t_usec")


# A transport name tells its medium (stacks.base.medium): ob1-vader, ucx-posix, ofi-shm, shm are shared
# memory; ob1-tcp, ofi-tcp, ucx-tcp are TCP; the rest (verbs, default) neither.
def is_shared_memory(transport: str) -> bool:
    return medium(transport) == SHM


def is_tcp(transport: str) -> bool:
    return medium(transport) == TCP


def _ratio(x: float) -> str:
    return f"{fmt_num(x)}×"


def _us(t: float) -> str:
    return f"{fmt_num(t)} µs"


# -- frames from the tables -------------------------------------------------------------------------


def imb_pingpong(summary: pl.DataFrame | None) -> pl.DataFrame | None:
    """IMB PingPong medians per label (the smallest np of each label: PingPong is a 2-rank test)."""
    need = ("benchmark", "label", "bytes", "t_median_usec")
    if summary is None or any(c not in summary.columns for c in need):
        return None
    pp = summary.filter((pl.col("benchmark") == "PingPong") & pl.col("t_median_usec").is_not_null())
    if "np" in pp.columns:
        pp = pp.filter(pl.col("np").fill_null(0) == pl.col("np").fill_null(0).min().over("label"))
    if pp.height == 0:
        return None
    return pp.select(
        pl.col("label").cast(pl.String),
        # The series' own columns (a label is for people, not taken apart): null in a table without them.
        *[(pl.col(c) if c in pp.columns else pl.lit(None)).cast(pl.String).alias(c) for c in ("stack", "transport")],
        pl.col("bytes").cast(pl.Int64), pl.col("t_median_usec").cast(pl.Float64).alias("t_usec"),
        (pl.col("bw_median_MBps") if "bw_median_MBps" in pp.columns else pl.lit(None)).cast(pl.Float64)
        .alias("bw_MBps"),
    )


def kernel_pingpong(medians: pl.DataFrame | None, without: Sequence[str] = ()) -> pl.DataFrame | None:
    """The pingpong kernel's medians (:func:`mpiatlas.models.kernel_p2p.pingpong_medians`) of the labels
    not in ``without`` (those with an IMB PingPong: the kernel is their cross-check, not their number)."""
    if medians is None or any(c not in medians.columns for c in ("label", "bytes", "t_usec")):
        return None
    pp = medians.filter(~pl.col("label").is_in(list(without)) & pl.col("t_usec").is_not_null())
    if pp.height == 0:
        return None
    return pp.select(
        pl.col("label").cast(pl.String), pl.col("stack").cast(pl.String), pl.col("transport").cast(pl.String),
        pl.col("bytes").cast(pl.Int64), pl.col("t_usec").cast(pl.Float64),
        (pl.col("MBps") if "MBps" in pp.columns else pl.lit(None)).cast(pl.Float64).alias("bw_MBps"),
    )


def imb_series(summary: pl.DataFrame | None) -> pl.DataFrame | None:
    """Every IMB summary series (benchmark, label, np, algorithm) as ``series, bytes, t_usec``."""
    if summary is None or any(c not in summary.columns for c in ("benchmark", "label", "bytes", "t_median_usec")):
        return None
    np_ = pl.col("np").cast(pl.String) if "np" in summary.columns else pl.lit(None, dtype=pl.String)
    alg = pl.col("algorithm").fill_null("default") if "algorithm" in summary.columns else pl.lit("default")
    # IMB runs a collective at several process counts within one launch (-npmin): name the active ones.
    active = pl.col("processes").cast(pl.String) if "processes" in summary.columns else np_
    name = pl.concat_str([pl.lit("IMB "), pl.col("benchmark"), pl.lit(" "), pl.col("label").cast(pl.String),
                          pl.when(np_.is_not_null()).then(pl.lit(" np=") + np_).otherwise(pl.lit("")),
                          pl.when(active.is_not_null() & (active != np_.fill_null("")))
                          .then(pl.lit(" (") + active + pl.lit(" active)")).otherwise(pl.lit("")),
                          pl.when(alg != "default").then(pl.lit(" ") + alg).otherwise(pl.lit(""))])
    # The CI of each median bounds what its repetitions measured: a step must hold between the bounds.
    lo = pl.col("t_ci_low_usec") if "t_ci_low_usec" in summary.columns else pl.col("t_median_usec")
    hi = pl.col("t_ci_high_usec") if "t_ci_high_usec" in summary.columns else pl.col("t_median_usec")
    return summary.select(name.alias("series"), pl.col("bytes").cast(pl.Int64),
                          pl.col("t_median_usec").cast(pl.Float64).alias("t_usec"),
                          lo.cast(pl.Float64).fill_null(pl.col("t_median_usec")).alias("t_lo_usec"),
                          hi.cast(pl.Float64).fill_null(pl.col("t_median_usec")).alias("t_hi_usec"))


def kernel_series(pingpong: pl.DataFrame | None, coll: pl.DataFrame | None) -> pl.DataFrame | None:
    """The kernels' medians as ``series, bytes, t_usec`` (pingpong per label; coll per label,
    collective, np and algorithm)."""
    parts = []
    if pingpong is not None and pingpong.height:
        parts.append(pingpong.select((pl.lit(f"{KERNEL_PINGPONG} ") + pl.col("label").cast(pl.String)).alias("series"),
                                     pl.col("bytes").cast(pl.Int64), pl.col("t_usec").cast(pl.Float64)))
    if coll is not None and coll.height:
        parts.append(coll.select(
            pl.concat_str([pl.lit("coll kernel "), pl.col("collective"), pl.lit(" "), pl.col("label").cast(pl.String),
                           pl.lit(" np="), pl.col("np").cast(pl.String), pl.lit(" "), pl.col("algorithm")])
            .alias("series"), pl.col("bytes").cast(pl.Int64), pl.col("t_avg_usec").cast(pl.Float64).alias("t_usec")))
    return pl.concat(parts) if parts else None


def imb_best_algorithms(summary: pl.DataFrame | None) -> pl.DataFrame | None:
    """:func:`best_algorithms` over the IMB series with more than one algorithm."""
    need = ("benchmark", "label", "np", "bytes", "algorithm", "t_median_usec")
    if summary is None or any(c not in summary.columns for c in need):
        return None
    if "processes" in summary.columns:  # the launch's full size only (IMB -npmin adds smaller groups)
        summary = summary.filter(pl.col("processes").is_null() | (pl.col("processes") == pl.col("np")))
    return best_algorithms(summary).filter(pl.col("n_algorithms") > 1)


def kernel_best_algorithms(coll: pl.DataFrame | None) -> pl.DataFrame | None:
    """:func:`best_algorithms` over the coll kernel's medians (benchmark = ``<collective> (coll kernel)``)."""
    if coll is None or coll.height == 0:
        return None
    frame = coll.with_columns((pl.col("collective") + pl.lit(" (coll kernel)")).alias("benchmark"))
    return best_algorithms(frame, time="t_avg_usec", ci_low=None, ci_high=None).filter(pl.col("n_algorithms") > 1)


# -- 1. fastest point-to-point ----------------------------------------------------------------------


def _size_at(sizes: Sequence[int], target: int, *, small: bool) -> tuple[int, str]:
    """``target`` when measured, else the smallest (``small``) or largest size, said in the text."""
    if target in sizes:
        return target, fmt_bytes(target)
    size = min(sizes) if small else max(sizes)
    which = "smallest" if small else "largest"
    return size, f"{fmt_bytes(size)} (the {which} size measured; no {fmt_bytes(target)})"


def _with_bw(t: float, bw: float | None, show: bool) -> str:
    return f"{_us(t)}, {fmt_num(bw)} MB/s" if show and bw is not None and bw > 0 else _us(t)


def fastest_p2p(medians: pl.DataFrame | None, what: str) -> list[str]:
    """The fastest (and slowest) series at 4 B and at 4 MiB, or at the smallest / largest size."""
    if medians is None:
        return []
    pos = medians.filter(pl.col("bytes") > 0)
    if pos.height == 0:
        return []
    sizes = sorted(set(pos.get_column("bytes").to_list()))
    out: list[str] = []
    targets = [(LATENCY_BYTES, True)] + ([(BANDWIDTH_BYTES, False)] if len(sizes) > 1 else [])
    for target, small in targets:
        size, size_text = _size_at(sizes, target, small=small)
        at = pos.filter(pl.col("bytes") == size).sort("t_usec", "label")
        rows = at.select("label", "t_usec", "bw_MBps").rows()
        if len(rows) == 1:
            (label, t, bw), = rows
            out.append(f"{what} at {size_text}: only {label} was measured, {_with_bw(t, bw, not small)}.")
            continue
        (fast, t_fast, bw_fast), (slow, t_slow, bw_slow) = rows[0], rows[-1]
        out.append(f"{what} at {size_text}: fastest {fast} ({_with_bw(t_fast, bw_fast, not small)}), slowest "
                   f"{slow} ({_with_bw(t_slow, bw_slow, not small)}, {_ratio(t_slow / t_fast)} the fastest's time).")
    return out


# -- 2. IMB PingPong vs the pingpong kernel -----------------------------------------------------------

# (name, figure, unit, significant digits) of the parameters compared: each the same estimand on both
# sides (the asymptotic B against the asymptotic B, the peak against the peak); the figure is
# "latency" or a BANDWIDTH_FIGURES name (:func:`figure_of`).
CROSS_PARAMS = (("λ", "latency", "µs", 3), ("asymptotic B", "asymptotic_bandwidth", "MB/s", 4),
                ("peak B", "peak_bandwidth", "MB/s", 4))


def figure_of(fit: HockneyRecord, figure: str) -> tuple[float | None, Interval]:
    """A fit's λ ("latency") or one of its bandwidths, with its interval."""
    return (fit.latency_us, fit.latency_ci_us) if figure == "latency" else fit.bandwidth(figure)


@dataclass(frozen=True)
class CrossCheck:
    """A pingpong kernel fit against the IMB PingPong fit of its label: ``ratio`` (kernel / IMB per
    parameter name of CROSS_PARAMS, None where either is not a finite figure > 0) and ``disagree``
    (the names more than DISAGREE apart)."""

    label: str | None
    kernel: HockneyRecord
    imb: HockneyRecord
    ratio: dict[str, float | None]
    disagree: list[str]


def imb_fit_of(hockney: Sequence[HockneyRecord] | None, label: str | None) -> HockneyRecord | None:
    """The IMB PingPong Hockney fit of ``label`` (its smallest np: PingPong is a 2-rank test)."""
    fits = [f for f in hockney or [] if f.benchmark == "PingPong" and f.label == label and f.fitted
            and f.latency_us is not None]
    return min(fits, key=lambda f: f.np or 0) if fits else None


def apart(a: object, b: object) -> float | None:
    """How far apart two positive figures are: larger / smaller − 1 (None unless both are finite > 0)."""
    if not (finite(a) and finite(b)) or a <= 0 or b <= 0:
        return None
    return max(a, b) / min(a, b) - 1.0


def imb_vs_kernel(hockney: Sequence[HockneyRecord] | None,
                  kernel_fits: Sequence[HockneyRecord] | None) -> list[CrossCheck]:
    """Per pingpong kernel fit (its Hockney part) whose label has an IMB PingPong fit: the two, compared."""
    out = []
    for k in kernel_fits or []:
        if not k.fitted:
            continue
        imb = imb_fit_of(hockney, k.label)
        if imb is None:
            continue
        ratio: dict[str, float | None] = {}
        disagree = []
        for name, figure, _, _ in CROSS_PARAMS:
            kv, iv = figure_of(k, figure)[0], figure_of(imb, figure)[0]
            ratio[name] = kv / iv if finite(kv) and finite(iv) and iv > 0 else None
            gap = apart(kv, iv)
            if gap is not None and round(gap, 3) > DISAGREE:  # compared as printed
                disagree.append(name)
        out.append(CrossCheck(k.label, k, imb, ratio, disagree))
    return out


def _figure(fit: HockneyRecord, figure: str, unit: str, digits: int) -> str:
    value, ci = figure_of(fit, figure)
    return f"{fmt_num(value, digits)} {unit} {fmt_ci(ci, digits, unbounded='∞')}"


def cross_check(hockney: Sequence[HockneyRecord] | None, kernel_fits: Sequence[HockneyRecord] | None) -> list[str]:
    """A sentence per label whose IMB PingPong and pingpong kernel fits disagree beyond DISAGREE in λ or B."""
    out = []
    for pair in imb_vs_kernel(hockney, kernel_fits):
        if not pair.disagree:
            continue
        parts = []
        for name, figure, unit, digits in CROSS_PARAMS:
            if name in pair.disagree:
                parts.append(f"{name} {_figure(pair.imb, figure, unit, digits)} (IMB) vs "
                             f"{_figure(pair.kernel, figure, unit, digits)} (kernel), the kernel's "
                             f"{_ratio(pair.ratio[name] or 0.0)} IMB's")  # disagreeing: a ratio
        out.append(f"{IMB_PINGPONG} and the {KERNEL_PINGPONG} disagree on {pair.label}: {'; '.join(parts)}. Two "
                   f"programs measuring the same thing should agree within {100 * DISAGREE:.0f} %: one of these "
                   "figures is not a result (a perturbed launch, a slow repetition, or a fit with a warning).")
    return out


# -- 3. shared memory vs TCP ------------------------------------------------------------------------


def shm_vs_tcp(medians: pl.DataFrame | None, what: str, skip_stacks: Sequence[str] = ()) -> list[str]:
    """Per stack: its fastest shared-memory series against its fastest TCP series, at 4 B or the
    smallest size both media have (any mapping: TCP may be on-node or across nodes; the label says)."""
    if medians is None:
        return []
    out: list[str] = []
    pos = medians.filter((pl.col("bytes") > 0) & ~pl.col("stack").is_in(list(skip_stacks)))
    for (stack,), g in pos.sort("stack").group_by(["stack"], maintain_order=True):
        kinds = g.with_columns(
            pl.col("transport").map_elements(is_shared_memory, return_dtype=pl.Boolean).alias("_shm"),
            pl.col("transport").map_elements(is_tcp, return_dtype=pl.Boolean).alias("_tcp"))
        shm, tcp = kinds.filter(pl.col("_shm")), kinds.filter(pl.col("_tcp"))
        common = sorted(set(shm.get_column("bytes").to_list()) & set(tcp.get_column("bytes").to_list()))
        if not common:
            continue
        size = LATENCY_BYTES if LATENCY_BYTES in common else common[0]
        s_label, s_t = shm.filter(pl.col("bytes") == size).sort("t_usec", "label").select("label", "t_usec").row(0)
        t_label, t_t = tcp.filter(pl.col("bytes") == size).sort("t_usec", "label").select("label", "t_usec").row(0)
        size_text = fmt_bytes(size) if size == LATENCY_BYTES else f"{fmt_bytes(size)} (no common 4 B)"
        out.append(f"{stack}, {what} at {size_text}: shared memory {_us(s_t)} ({s_label}) on one node vs TCP "
                   f"{_us(t_t)} ({t_label}): TCP takes {_ratio(t_t / s_t)} the shared-memory time.")
    return out


def stacks_in(sentences_from: pl.DataFrame | None) -> list[str]:
    """Stacks that have both a shared-memory and a TCP series (so :func:`shm_vs_tcp` speaks of them)."""
    if sentences_from is None:
        return []
    return sorted({s for s in sentences_from.get_column("stack").drop_nulls().unique().to_list()
                   if shm_vs_tcp(sentences_from.filter(pl.col("stack") == s), "")})


# -- 4. algorithms that beat the default --------------------------------------------------------------


def _where_sizes(sizes: list[int]) -> str:
    if not sizes:
        return ""
    if len(sizes) == 1:
        return f" at {fmt_bytes(sizes[0])}"
    return f" at {len(sizes)} sizes from {fmt_bytes(sizes[0])} to {fmt_bytes(sizes[-1])}"


def algorithm_wins(best: pl.DataFrame | None, factor: float = WIN_FACTOR) -> list[str]:
    """Forced algorithms more than ``factor``× faster than ``default`` (best frame of
    :func:`best_algorithms`), one sentence per (benchmark, label, np, algorithm), biggest gains first."""
    if best is None or best.height == 0:
        return []
    # Compared as printed (3 significant digits): a "2.00×" gain is not "more than 2×".
    wins = best.filter((pl.col("best") != "default") & (pl.col("speedup").round_sig_figs(3) > factor))
    if wins.height == 0:
        return []
    groups = (wins.group_by("benchmark", "label", "np", "best")
              .agg(pl.col("bytes").drop_nulls().sort().alias("sizes"), pl.col("speedup").max().alias("top"))
              .sort(["top", "benchmark", "label", "np"], descending=[True, False, False, False]))
    out = []
    for r in groups.head(MAX_SENTENCES).iter_rows(named=True):
        out.append(f"{r['benchmark']}, {r['label']}, np={r['np']}: {r['best']} beats the default by more than "
                   f"{factor:g}×{_where_sizes(r['sizes'])} (up to {_ratio(r['top'])}).")
    if groups.height > MAX_SENTENCES:
        out.append(f"… and {groups.height - MAX_SENTENCES} more (benchmark, label, np, algorithm) combinations "
                   "beat the default by more than this (see the collectives sections).")
    return out


# -- 5. anomalies ----------------------------------------------------------------------------------


def _steps(series: pl.DataFrame, factor: float) -> list[dict[str, Any]]:
    """Neighbour pairs of one series' sizes whose latency rises or drops by more than ``factor``, in
    every repetition: the step holds between the medians' CI bounds (``t_lo_usec``, ``t_hi_usec``,
    when the series has them), so one slow repetition in a median of three does not make one."""
    lo = pl.col("t_lo_usec") if "t_lo_usec" in series.columns else pl.col("t_usec")
    hi = pl.col("t_hi_usec") if "t_hi_usec" in series.columns else pl.col("t_usec")
    d = (series.filter((pl.col("bytes") > 0) & (pl.col("t_usec") > 0)).sort("series", "bytes")
         .with_columns(lo.alias("_lo"), hi.alias("_hi"))
         .with_columns(pl.col("bytes").shift(1).over("series").alias("prev_bytes"),
                       pl.col("t_usec").shift(1).over("series").alias("prev_t"),
                       pl.col("_lo").shift(1).over("series").alias("_prev_lo"),
                       pl.col("_hi").shift(1).over("series").alias("_prev_hi"),
                       (pl.col("bytes").rank("ordinal").over("series") == 2).alias("first_pair"))
         .drop_nulls(["prev_bytes", "prev_t"]))
    # Compared as printed (3 significant digits): a "10.0×" step is not "more than 10×".
    up = (pl.col("_lo") / pl.col("_prev_hi")).round_sig_figs(3)
    rise = (up > factor) & (pl.col("t_usec") / pl.col("prev_t") > pl.col("bytes") / pl.col("prev_bytes"))
    drop = (pl.col("_prev_lo") / pl.col("_hi")).round_sig_figs(3) > factor
    return list(d.filter(rise | drop).drop("_lo", "_hi", "_prev_lo", "_prev_hi").iter_rows(named=True))


def _step_sentence(r: dict[str, Any], nxt: dict[str, Any] | None) -> tuple[str, bool]:
    """One step, or an isolated spike (a rise then a drop at the next size) as one sentence;
    returns the sentence and whether it used ``nxt``."""
    rose = r["t_usec"] > r["prev_t"]
    if rose and nxt is not None and nxt["series"] == r["series"] and nxt["prev_bytes"] == r["bytes"] \
            and nxt["t_usec"] < nxt["prev_t"]:
        return (f"{r['series']}: an isolated spike at {fmt_bytes(r['bytes'])}: {_us(r['t_usec'])}, "
                f"{_ratio(r['t_usec'] / r['prev_t'])} the {_us(r['prev_t'])} at {fmt_bytes(r['prev_bytes'])} and "
                f"{_ratio(r['t_usec'] / nxt['t_usec'])} the {_us(nxt['t_usec'])} at {fmt_bytes(nxt['bytes'])}.", True)
    ratio = r["t_usec"] / r["prev_t"] if rose else r["prev_t"] / r["t_usec"]
    if not rose and r.get("first_pair"):
        # The first message a launch sends pays its warm-up (page faults, connection set-up): not a regime.
        return (f"{r['series']}: the first size measured, {fmt_bytes(r['prev_bytes'])}, took {_ratio(ratio)} the "
                f"next size's time ({_us(r['prev_t'])} against {_us(r['t_usec'])} at {fmt_bytes(r['bytes'])}): a "
                "first-size effect (the first message's warm-up), not a latency regime.", False)
    return (f"{r['series']}: latency {'jumps' if rose else 'drops'} {_ratio(ratio)} from {_us(r['prev_t'])} at "
            f"{fmt_bytes(r['prev_bytes'])} to {_us(r['t_usec'])} at {fmt_bytes(r['bytes'])}.", False)


def latency_steps(series: pl.DataFrame | None, factor: float = STEP_FACTOR) -> list[str]:
    """Steps of more than ``factor``× between neighbouring sizes of one series.

    A rise only counts when it is also steeper than the size ratio: t = λ + m/B grows at most as
    fast as m, so a 4 B -> 4 MiB gap in a sparse sweep is not an anomaly; a drop always counts. A
    rise followed by a drop at the next size is one isolated spike, said once. A step counts only when
    every repetition shows it (it holds between the medians' CI bounds), and a drop after the first
    size measured is named as the first-size effect it is.
    """
    if series is None or series.height == 0:
        return []
    steps = _steps(series, factor)
    sentences: list[str] = []
    i = 0
    while i < len(steps):
        text, paired = _step_sentence(steps[i], steps[i + 1] if i + 1 < len(steps) else None)
        sentences.append(text)
        i += 2 if paired else 1
    if len(sentences) > MAX_SENTENCES:
        more = len(sentences) - MAX_SENTENCES
        sentences = sentences[:MAX_SENTENCES] + [
            f"… and {more} more latency steps of more than {factor:g}× between neighbouring sizes."]
    return sentences


# -- 6. failures -----------------------------------------------------------------------------------


def failures(cells: pl.DataFrame | None) -> list[str]:
    """Cells per non-ok status with the first (by cell id) reason; all ok is said too."""
    if cells is None or "status" not in cells.columns or cells.height == 0:
        return []
    total = cells.height
    bad = cells.filter(pl.col("status").fill_null("(none)") != "ok")
    if bad.height == 0:
        return [f"All cells completed with status ok ({total} cell{'s' if total > 1 else ''})."]
    statuses = bad.get_column("status").fill_null("(none)").unique().to_list()
    order = [s for s in _STATUS_ORDER if s in statuses] + sorted(s for s in statuses if s not in _STATUS_ORDER)
    out = []
    for status in order:
        g = bad.filter(pl.col("status").fill_null("(none)") == status)
        if "cell" in g.columns:
            g = g.sort("cell", nulls_last=True)
        first = g.row(0, named=True)
        verb = _STATUS_VERBS.get(status, f"ended with status {status}")
        reason = first.get("reason") or "no reason recorded"
        out.append(f"{g.height} of {total} cells {verb}; the first ({first.get('cell') or '?'}): {reason}.")
    return out


# -- all of them ------------------------------------------------------------------------------------


def findings(summary: pl.DataFrame | None, pingpong: pl.DataFrame | None, coll: pl.DataFrame | None,
             cells: pl.DataFrame | None, *, hockney: Sequence[HockneyRecord] | None = None,
             kernel_fits: Sequence[HockneyRecord] | None = None) -> list[str]:
    """Every finding, in the module's order.

    ``summary``: the IMB summary; ``pingpong``: the pingpong kernel's medians
    (:func:`mpiatlas.models.kernel_p2p.pingpong_medians`); ``coll``: the coll kernel's
    (:func:`mpiatlas.models.kernel_p2p.coll_medians`); ``cells``: the cells table; ``hockney``:
    hockney.json's fits; ``kernel_fits``: kernels.json's pingpong fits (their Hockney part).
    """
    imb = imb_pingpong(summary)
    imb_labels = imb.get_column("label").unique().to_list() if imb is not None else []
    kernel = kernel_pingpong(pingpong, without=imb_labels)
    out = fastest_p2p(imb, IMB_PINGPONG) + fastest_p2p(kernel, f"{KERNEL_PINGPONG} (no IMB PingPong for these)")
    out += cross_check(hockney, kernel_fits)
    out += shm_vs_tcp(imb, IMB_PINGPONG)
    out += shm_vs_tcp(kernel_pingpong(pingpong), KERNEL_PINGPONG, skip_stacks=stacks_in(imb))
    bests = [b for b in (imb_best_algorithms(summary), kernel_best_algorithms(coll)) if b is not None]
    out += algorithm_wins(pl.concat(bests, how="diagonal_relaxed") if bests else None)
    steps = [s for s in (imb_series(summary), kernel_series(kernel_pingpong(pingpong), coll)) if s is not None]
    out += latency_steps(pl.concat(steps, how="diagonal_relaxed") if steps else None)
    out += failures(cells)
    return out
