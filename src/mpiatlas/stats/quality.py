"""Can a number be trusted? Two judgements, separate from a cell's status (which says it ran right):

* a launch is ``perturbed`` when the machine took cpu time from its ranks (runner.machine_state's
  record): its busiest rank's run-queue wait, less what a quiet machine gives a launch anyway
  (``quiet_wait_s``), is more than ``wait_share`` of the launch's wall time (the wait rule, below), or
  a cpu of theirs was stolen by the hypervisor for more than ``steal_share``, or other processes used
  more than ``other_cpu_share`` of the ranks' cpus, or the cache-line round trip between two of its
  cpus, before or after it, was more than ``pair_latency_ratio`` times the best that pair has shown
  since the node booted (node.pair_latency: a VM's vCPUs moved apart). Its samples stay in the raw tables, flagged
  (``cell_quality``), and :func:`trusted` leaves them out of medians and fits;
* the repetitions of one series at one size are ``noisy`` when they split into two modes (the
  largest is more than ``MODE_RATIO`` times the smallest, with a gap of ``GAP_RATIO`` between
  neighbours somewhere) or when the 95 % CI of their median reaches beyond ±``CI_HALFWIDTH`` of it.

Default limits. A rank that waits a share w of its time for a cpu, spread evenly, takes ~1/(1-w) as
long: 5 % of waiting is a ~5 % slower time, already beyond the ±3 % a campaign's CI usually aims at
(issue #23's slow window was ~50 % at 4 B and ~90 % at 4 MiB). Measured with bench/machine_probe.py
calibrate (IMB PingPong, Intel MPI, shm, ranks pinned to cpus 0 and 1, 2-core VM shared with five other
sessions, load 2.4-7.2, 2026-11-27, two runs of 4 + 4 launches): with a busy loop pinned to cpu 1,
ranks waited 61-79 % of their time (all 8 launches perturbed); without it, 3-79 % (the other sessions'
work: 7 of 8 perturbed); the one launch in a quieter moment waited 2.6 % (rank on cpu 0) and 0.13 %
(cpu 1), below the limit. No quieter baseline could be had on this machine that day. Others' share
of the ranks' cpus is counted while the ranks ran (runner.machine_state): above 10 % others ran there
while ranks waited or slept in MPI calls (blocking progress, or MPI_Init waiting for a slow launcher);
the wait share is the direct evidence, this one the corroboration. Steal (a VM's cpus given to
other guests): 2 %, as for waiting, and it was 0-1 % here.

The wait rule (issue 33), from measurement. A launch's busiest rank waits ``w`` seconds on a run
queue in a launch of wall time ``T``; it is perturbed when ``w - e*T - quiet_wait_s > wait_share * T``
(``e``: the share an oversubscribed cell waits by design, else 0).

* The noise floor ``quiet_wait_s`` = 5 ms is what a launch's busiest rank waits on a quiet machine:
  its own start-up (exec, loading, the launcher and mpiatlas's probe on the cpus the ranks fill), a
  fixed cost, not a share. Quiet launches recorded on this 2-core AMD EPYC VM: the two LogGP kernel
  launches of tests/data/loggp (Intel MPI shm, ranks pinned to cpus 0 and 1, load 0.43, node cpu
  pressure 2-4 %) waited 2.25 and 2.88 ms of 0.48 s walls (0.5-0.6 %); the first-look campaign's
  Open MPI kernel launches (2026-11-27, machine otherwise idle) 3.5-5 ms of ~0.13 s. The floor is the
  highest of these. ``bench/machine_probe.py quiet`` measures it again (launches in which the node's
  own cpu pressure stayed under 5 %); on 2026-12-04 the machine was never that quiet
  (other sessions' campaigns): in 148 launches of IMB PingPong over 35 minutes (Intel MPI shm, -msglog
  0:16, 0.38-8.4 s) the node's cpu pressure was 25-100 % of the wall, and the busiest rank waited up to
  6.8 s (81 % of the wall), others' work, not a floor. The 9 least pressed (25-43 %) waited 1.2-11 ms,
  median 6.1 ms, of 0.38-0.53 s (0.3-2.6 %): near the recorded floor even then, and judged ok by the
  rule (19 of the 148 were, all with at most 36 ms of wait).
* Relative to the wall, because a wait slows a launch by the share of its time it takes: 5 % of the
  wall is a ~5 % slower time, already beyond a campaign's ±3 %. The fixed 20 ms floor it replaces
  let a short launch lose up to 20 ms whatever its length (29 % of a 0.07 s launch): on a first look
  39 of 150 launches the share alone would have flagged passed, one of them waiting 23.6 % of its
  wall with the node's pressure at 22 %.
* What it decides (tests/test_wait_rule.py, the recorded quiet launches given more wait): 5 ms is
  never a disturbance; 10 ms is from 15 % of the wall up (a launch under 67 ms); 20, 40 and 60 ms
  are at 7.5 % and more, and not at 5 % (60 ms of a 1.2 s launch is 4.6 % past the floor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import math

import numpy as np
import polars as pl

from mpiatlas.node.pair_latency import PairLatencyRecord, pair_key

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

OK, PERTURBED, NOISY = "ok", "perturbed", "noisy"
UNKNOWN = "unknown"  # judged without evidence (no machine record read): not trusted
QUIET_WAIT_S = 0.005  # the noise floor: see the module docstring for where it was measured
# A pair's round trip beyond this many times its best since boot. Measured on this project's 2-core
# AMD EPYC VM (2026-12-05, node.pair_latency's docstring): 52-67 ns in the state in which Intel MPI shm
# PingPong took 160 µs at 4 MiB, 305-366 ns when it took 1.8 ms; a quiet pair's median varied by 1.3x.
PAIR_LATENCY_RATIO = 2.0
DEFAULT_LIMITS = {"wait_share": 0.05, "quiet_wait_s": QUIET_WAIT_S, "steal_share": 0.02, "other_cpu_share": 0.10,
                  "pair_latency_ratio": PAIR_LATENCY_RATIO}
MODE_RATIO = 2.0
GAP_RATIO = 1.5
CI_HALFWIDTH = 0.25
# A point is noisy only beyond what its series shows everywhere (issue #33: 254 of 568 points of a
# quiet first look were flagged, nearly all sub-µs collectives whose every size varies ±25–40 %):
# its CI half-width must exceed this many times the series' typical one.
TYPICAL_FACTOR = 2.0
RESOLUTION_US = 0.01  # IMB prints times to 2 decimals: a CI bound is only known to ±0.01 µs
# Two modes among a point's repetitions are the series' own variation, not the point's, where its
# series splits so at this share of its sizes (and at SERIES_SPLIT_MIN sizes at least). Calibrated on
# five recorded first looks of this project's 2-core VM (issue #33): 97-200 of 568 points split into
# two modes, nearly all in series that split at a third to three quarters of their sizes (launches
# that disagree as a whole, as Intel MPI's shm at 1-4 MiB does here: 160 µs or 1.5-2.4 ms at 4 MiB).
SERIES_SPLIT_SHARE = 0.25
SERIES_SPLIT_MIN = 3
SERIES_SPLIT_PREFIX = "series spread:"
# Two modes whose upper mode is a minority of the repetitions, the majority within the point's CI
# limit: launches slowed at this size only (one of three), which the median resists, as the CI rule
# already lets a majority decide. Recalibrated on five first looks recorded with the pair rule on
# (tests/data/quiet_first_look, 2026-12-05): 24-38 of 568 points were such splits, 2-7x apart, at
# scattered sizes. A faster minority stays noisy: the majority may be the slow state (issue #23's
# "1 at 0.18 and 2 at 0.33-0.37").
SLOW_LAUNCH_PREFIX = "slow launch at this size:"
QUALITY_COLUMN = "cell_quality"  # the launch's quality on every sample row (programs.base.tag_columns)


def limits(perturbation: Mapping[str, Any] | None) -> dict[str, float]:
    """The configured limits (``campaign.perturbation``) over the defaults."""
    return DEFAULT_LIMITS | {k: float(v) for k, v in (perturbation or {}).items() if v is not None}


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def expected_wait(machine: Mapping[str, Any]) -> float:
    """The wait share a rank has by design: ranks that all want a cpu, more of them than cpus,
    share them (each waits 1 - cpus/ranks of the time); 0 when every rank has a cpu of its own."""
    ranks: int = machine.get("n_ranks", len(machine.get("ranks") or []))
    cpus = machine.get("cpus") or []
    if not ranks or not cpus or ranks <= len(cpus):
        return 0.0
    return 1.0 - len(cpus) / ranks


def judge_launch(machine: Mapping[str, Any] | None, perturbation: Mapping[str, Any] | None = None,
                 oversubscribed: bool = False) -> tuple[str | None, str | None]:
    """(quality, reason in words) of one launch from its ``machine`` record; (None, None) without one."""
    if not machine or "error" in machine:  # not probed, or the probe could not read /proc
        return None, None
    lim = limits(perturbation)
    reasons = []
    worst = _worst_waiter(machine)
    if worst is not None:
        expected = expected_wait(machine) if oversubscribed else 0.0
        wall_s = launch_wall_s(machine, worst)
        if waited_too_long(worst, expected, wall_s, lim):
            by_design = f" ({_pct(expected)} expected: oversubscribed)" if expected > 0 else ""
            # The share the rule judged: of the launch's wall where both are known.
            share = worst.wait_s / wall_s if worst.wait_s is not None and wall_s else worst.share
            reasons.append(f"ranks waited {_pct(share)} of the launch for {worst.cpus}{by_design}")
    steal = machine.get("steal_share")
    if steal is not None and beyond(steal, machine.get("steal_ticks"), machine.get("steal_of_ticks"),
                                    lim["steal_share"]):
        reasons.append(f"the hypervisor stole {_pct(steal)} of the ranks' cpus")
    other = machine.get("other_cpu_share")
    if other is not None and beyond(other, machine.get("other_cpu_ticks"), machine.get("cpu_ticks"),
                                    lim["other_cpu_share"]):
        used: list[int] = machine.get("cpus") or []
        named = ", ".join(map(str, used)) if len(used) <= 16 else f"{len(used)} cpus"
        reasons.append(f"other processes used {_pct(other)} of the ranks' cpus ({named})")
    reasons += remote_reasons(machine, lim)
    reasons += pair_reasons(machine.get("pair_latency"), lim["pair_latency_ratio"])
    return (PERTURBED, "; ".join(reasons)) if reasons else (OK, None)


def pair_reasons(pairs: PairLatencyRecord | None, ratio: float) -> list[str]:
    """The cpu pairs whose cache-line round trip, before or after the launch, was beyond ``ratio``
    times their best since boot (node.pair_latency's record; nothing without one)."""
    if not pairs:
        return []
    best = pairs["best_ns"]
    probes = [pairs["before"], *([pairs["after"]] if "after" in pairs else [])]
    slowest: dict[str, float] = {}
    for figure in (figure for probe in probes for figure in probe["pairs"]):
        key = pair_key(figure["cpus"])
        slowest[key] = max(slowest.get(key, 0.0), float(figure["median_ns"]))
    return [f"cpus {key.replace('-', ' and ')} passed a cache line in {median:.0f} ns, {median / best[key]:.1f}x "
            f"their best since boot ({best[key]:.0f} ns): the cores under them shared less cache than they can"
            for key, median in sorted(slowest.items()) if best.get(key) and median > ratio * best[key]]


def launch_wall_s(machine: Mapping[str, Any], worst: Waiter) -> float | None:
    """The launch's wall time: the record's ``wall_s`` (runner.machine_state), else, in records made
    before it was kept, the worst rank's observed lifetime (a little shorter: the share it gives is
    a little larger, the stricter side); None when neither is known."""
    wall = machine.get("wall_s")
    if isinstance(wall, (int, float)) and wall > 0:
        return float(wall)
    return worst.observed_s


def waited_too_long(worst: Waiter, expected: float, wall_s: float | None, lim: Mapping[str, float]) -> bool:
    """The wait rule: the worst rank's wait beyond what the launch waits by design (``expected``
    share, oversubscribed cells) and beyond the quiet machine's noise floor (``quiet_wait_s``, a fixed
    cost of starting: see the module docstring) is more than ``wait_share`` of the launch's wall time.
    Without seconds (srun: the job cgroup's pressure share), the share beyond ``expected`` decides."""
    if worst.wait_s is None or wall_s is None:
        return worst.share - expected > lim["wait_share"]
    excess_s = worst.wait_s - expected * wall_s - lim["quiet_wait_s"]
    return excess_s > lim["wait_share"] * wall_s


def remote_reasons(machine: Mapping[str, Any], lim: Mapping[str, float]) -> list[str]:
    """The nodes of a multi-node cell (runner.remote_nodes): one whose cpus the hypervisor stole from
    beyond the limit perturbed the launch. Their busy share and load are mostly the ranks' own there
    (not ours to subtract): recorded, not judged."""
    return [f"the hypervisor stole {_pct(node['steal_share'])} of node {node.get('host', '?')}'s cpus"
            for node in machine.get("nodes") or []
            if node.get("steal_share") is not None
            and beyond(node["steal_share"], node.get("steal_ticks"), node.get("total_ticks"), lim["steal_share"])]


def beyond(share: float, part_ticks: int | None, total_ticks: int | None, limit: float) -> bool:
    """Is a /proc/stat share beyond ``limit`` by more than its counting error? The kernel charges
    each clock tick (10 ms) whole to what the cpu was doing then, so a figure of n ticks is uncertain
    by ~sqrt(n): the share counts as beyond only when (n - 2 sqrt(n)) / total is (a 0.4 s launch
    with 3 ticks of 88 stolen is not judged on them). Without tick counts, the share itself."""
    if part_ticks is None or not total_ticks:
        return share > limit
    return (part_ticks - 2 * math.sqrt(part_ticks)) / total_ticks > limit


@dataclass(frozen=True)
class Waiter:
    """The rank that waited most: its wait share (of its observed lifetime), its cpu(s) in words, its
    wait and observed lifetime in seconds (None: not recorded)."""

    share: float
    cpus: str
    wait_s: float | None = None
    observed_s: float | None = None


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def _worst_waiter(machine: Mapping[str, Any]) -> Waiter | None:
    """The rank with the largest wait share; without ranks (srun), the job cgroup's cpu pressure
    (time some task of it waited) stands in."""
    ranks = [r for r in machine.get("ranks") or [] if r.get("wait_share") is not None]
    if ranks:
        rank = max(ranks, key=lambda r: r["wait_share"])
        cpus = rank.get("cpus") or []  # a list, or a cpulist string for an unpinned rank on a large node
        listed = cpus if isinstance(cpus, str) else ",".join(map(str, cpus))
        where = f"cpu {cpus[0]}" if isinstance(cpus, list) and len(cpus) == 1 else f"cpus {listed}" if cpus else "a cpu"
        observed = _seconds(rank.get("observed_s"))
        return Waiter(float(rank["wait_share"]), where, _seconds(rank.get("wait_s")), observed or None)
    pressure = machine.get("cgroup_cpu_pressure_share")
    return Waiter(float(pressure), "a cpu (job cgroup pressure)") if pressure is not None else None


class UnjudgedTableError(ValueError):
    """A table of a campaign's launches (it has a ``cell`` column) without their judgement."""


# The column that marks a table's rows as a campaign's launches (programs.base.tag_columns); tables
# without it hold imported logs, whose machines left no record to judge.
LAUNCH_ID_COLUMN = "cell"
# Judgements a median may take: ok, and no judgement at all (rows recorded before launches were
# judged). Perturbed and unknown (judged without evidence, runner.judge) stay out.
UNTRUSTED = (PERTURBED, UNKNOWN)


def require_judgement(columns: list[str], source: str) -> None:
    """Raise UnjudgedTableError when ``columns`` are a campaign's launches (a ``cell`` column) without
    their judgement (``cell_quality``): a reader that loads only some columns checks the file's schema."""
    if QUALITY_COLUMN not in columns and LAUNCH_ID_COLUMN in columns:
        raise UnjudgedTableError(
            f"{source}: has a '{LAUNCH_ID_COLUMN}' column (a campaign's launches) but no '{QUALITY_COLUMN}' "
            "column: which launches were perturbed is unknown, so no median can be taken over it "
            "(tables written by mpiatlas tidy carry it; run mpiatlas tidy again)")


def trusted(samples: FrameT, source: str = "a samples table") -> FrameT:
    """Rows whose launch was not perturbed (nor judged without evidence): the one filter every median,
    fit, finding, model and tuning decision goes through. Every loader of a campaign's tables (the
    fits' tables.samples, the report's ReportData, stats.aggregate, the kernel models, tuning, compare)
    calls it, so no path can skip it.

    A table of a campaign's launches (with a ``cell`` column) must say how each launch was judged
    (``cell_quality``): without it the filter cannot be applied, and that is an error naming
    ``source``, never a pass. Imported logs (no ``cell`` column) have no judgement to apply."""
    names = samples.collect_schema().names()
    require_judgement(names, source)
    if QUALITY_COLUMN not in names:
        return samples
    return samples.filter(pl.col(QUALITY_COLUMN).is_null() | ~pl.col(QUALITY_COLUMN).is_in(list(UNTRUSTED)))


# -- repetitions of one series at one size ------------------------------------------------------------


def repetition_quality(flat: np.ndarray, lengths: np.ndarray, median: np.ndarray, ci_low: np.ndarray,
                       ci_high: np.ndarray, typical: np.ndarray | None = None,
                       series: np.ndarray | None = None) -> tuple[list[str | None], list[str | None]]:
    """Per group (consecutive ascending runs of ``flat`` of ``lengths``): quality and reason.

    ``typical``: per group, the median relative CI half-width of its series (aggregate.
    series_typical_halfwidth): see :func:`ci_reason`. ``series``: per group, an id of its series;
    where a series' repetitions split into two modes at SERIES_SPLIT_SHARE of its sizes or more, a
    split is the series' launch-to-launch variation (its fit's interval over launches carries it),
    not the point's: such a point stays ok, its reason saying so (:func:`series_split_reason`).
    Groups of one value, or none, are not judged (None)."""
    offsets = (np.cumsum(lengths) - lengths).astype(np.int64)
    judged = np.asarray(lengths) >= 2
    # Vectorised pre-checks, each only ruling out what the per-group rule would also rule out (with
    # a relative margin, so rounding can only send a group on to the exact rule): 1 M repetitions in
    # ~40 k groups otherwise pay ~0.5 s of Python per group in `mpiatlas aggregate`.
    may_split = _may_split(flat, offsets, lengths, judged)
    splits: list[str | None] = [None] * len(lengths)
    for i in np.flatnonzero(may_split).tolist():
        splits[i] = split_reason(flat[offsets[i]:offsets[i] + lengths[i]])
    shared = _series_split_shares(splits, lengths, series)
    typ = np.full(len(lengths), np.nan) if typical is None else np.asarray(typical, dtype=float)
    may_be_wide = judged & _may_be_wide(np.asarray(median, dtype=float), np.asarray(ci_low, dtype=float),
                                        np.asarray(ci_high, dtype=float), typ)
    quality: list[str | None] = [OK if j else None for j in judged.tolist()]
    reasons: list[str | None] = [None] * len(lengths)
    for i in np.flatnonzero(judged & (may_split | may_be_wide)).tolist():
        split, share = splits[i], shared[i]
        if split is not None and share is not None:
            reasons[i] = series_split_reason(split, share)
            continue
        m = float(median[i])
        values = flat[offsets[i]:offsets[i] + lengths[i]]
        if split is not None and slow_minority(values, m, ci_limit(m, float(typ[i]))):
            reasons[i] = f"{SLOW_LAUNCH_PREFIX} {split}; the median is the majority's"
            continue
        reason = split or ci_reason(m, float(ci_low[i]), float(ci_high[i]), float(typ[i]),
                                    majority_halfwidth(values, m))
        quality[i] = NOISY if reason else OK
        reasons[i] = reason
    return quality, reasons


# Relative slack of the vectorised pre-checks: numpy's and Python's float arithmetic agree, but a
# group near a limit goes on to the exact per-group rule anyway.
_PRECHECK_SLACK = 1e-9


def _may_split(flat: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """Per group: whether :func:`split_reason` may find two modes (max/min beyond MODE_RATIO, min > 0)."""
    if not judged.any():
        return judged.copy()
    first = flat[offsets[judged]]
    last = flat[(offsets + lengths - 1)[judged]]
    with np.errstate(divide="ignore", invalid="ignore"):
        wide = (first > 0) & ~(last / first <= MODE_RATIO * (1 - _PRECHECK_SLACK))
    out = np.zeros(len(lengths), dtype=bool)
    out[judged] = wide
    return out


def _may_be_wide(median: np.ndarray, low: np.ndarray, high: np.ndarray, typical: np.ndarray) -> np.ndarray:
    """Per group: whether :func:`ci_reason` may find the CI too wide (its half-width beyond
    :func:`ci_limit`), before the majority test; False only where it returns None regardless."""
    with np.errstate(divide="ignore", invalid="ignore"):
        finite = np.isfinite(median) & np.isfinite(low) & np.isfinite(high) & (median > 0)
        half = np.maximum(median - low, high - median) / median
        base = np.where(np.isfinite(typical), np.maximum(CI_HALFWIDTH, TYPICAL_FACTOR * typical), CI_HALFWIDTH)
        limit = base + np.where(median > 0, RESOLUTION_US / median, 0.0)
        wide: np.ndarray = finite & ~(half <= limit * (1 - _PRECHECK_SLACK))
    return wide


def _series_split_shares(splits: list[str | None], lengths: np.ndarray,
                         series: np.ndarray | None) -> list[tuple[int, int] | None]:
    """Per group: (split sizes, judged sizes) of its series when that series splits at
    SERIES_SPLIT_SHARE of its judged sizes or more, else None."""
    if series is None:
        return [None] * len(splits)
    # Counted per series with bincount over dense series codes: a Python dict per group cost ~0.06 s
    # at 40 k groups.
    _, code = np.unique(np.asarray(series), return_inverse=True)
    code = code.ravel()
    judged_group = np.asarray(lengths) >= 2
    split_group = judged_group & np.fromiter((r is not None for r in splits), dtype=bool, count=len(splits))
    judged = np.bincount(code[judged_group], minlength=code.max(initial=-1) + 1)
    split = np.bincount(code[split_group], minlength=judged.size)
    common = (split >= SERIES_SPLIT_MIN) & (split >= SERIES_SPLIT_SHARE * judged) & (judged > 0)
    pairs = {int(c): (int(split[c]), int(judged[c])) for c in np.flatnonzero(common)}
    return [pairs.get(c) for c in code.tolist()]


def series_split_reason(split: str, share: tuple[int, int]) -> str:
    """The reason of a point whose split its series shares (quality stays ok)."""
    return (f"{SERIES_SPLIT_PREFIX} {split}; its series splits so at {share[0]} of {share[1]} sizes: "
            "launch-to-launch variation, carried by the fit's interval over launches")


def split_modes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The two modes of ascending ``values`` (below and above the widest gap between neighbours), or
    None: max/min at most MODE_RATIO, or no gap of GAP_RATIO."""
    if values.size < 2 or values[0] <= 0 or values[-1] / values[0] <= MODE_RATIO:
        return None
    gaps = values[1:] / values[:-1]
    at = int(np.argmax(gaps))
    if gaps[at] < GAP_RATIO:
        return None
    return values[: at + 1], values[at + 1:]


def split_reason(values: np.ndarray) -> str | None:
    """Why ascending ``values`` form two modes (:func:`split_modes`), or None."""
    modes = split_modes(values)
    if modes is None:
        return None
    low, high = modes
    return (f"two modes: {low.size} repetition(s) at {_span(low)} and {high.size} at {_span(high)} "
            f"({values[-1] / values[0]:.1f}x apart)")


def slow_minority(values: np.ndarray, median: float, limit: float) -> bool:
    """Do ascending ``values`` split with a minority in the upper mode while a majority lies within
    ``limit`` (relative) of ``median``? Launches slowed at this size only (SLOW_LAUNCH_PREFIX)."""
    modes = split_modes(values)
    return modes is not None and modes[1].size < modes[0].size and majority_halfwidth(values, median) <= limit


def ci_limit(median: float, typical: float = math.nan) -> float:
    """The relative CI half-width a point may have before it is noisy: the larger of ``CI_HALFWIDTH``
    and ``TYPICAL_FACTOR`` × its series' typical half-width (the repetitions' own variation there:
    sub-µs collectives of a quiet first look vary ±25–40 % at every size), plus the printed timer
    resolution ``RESOLUTION_US`` relative to the median (IMB prints 2 decimals: ±0.01 µs is ±5 % of
    a 0.2 µs time)."""
    base = max(CI_HALFWIDTH, TYPICAL_FACTOR * typical) if math.isfinite(typical) else CI_HALFWIDTH
    return base + (RESOLUTION_US / median if median > 0 else 0.0)


def majority_halfwidth(values: np.ndarray, median: float) -> float:
    """The relative half-width of the narrowest band around ``median`` that holds a majority of the
    ascending ``values`` (2 of 3, 3 of 5, both of 2): how far the launches that back the median lie."""
    if values.size == 0 or median <= 0:
        return math.nan
    need = values.size // 2 + 1
    distances = np.sort(np.abs(values - median))
    return float(distances[need - 1] / median)


def ci_reason(median: float, low: float, high: float, typical: float = math.nan,
              majority: float = math.nan) -> str | None:
    """Why the CI [low, high] of ``median`` is too wide (beyond :func:`ci_limit` on either side), or None.

    ``majority`` (:func:`majority_halfwidth`, when the repetitions are at hand): a wide CI whose
    majority of repetitions still lies within the limit is one launch off at this size, which the
    median already resists (issue #33: 23-46 points of each recorded first look were flagged so, one
    launch of three 30-70 % slow at one size); such a point is not noisy."""
    if not (np.isfinite(median) and np.isfinite(low) and np.isfinite(high)) or median <= 0:
        return None
    half = max(median - low, high - median) / median
    limit = ci_limit(median, typical)
    if half <= limit or (math.isfinite(majority) and majority <= limit):
        return None
    series = (f", {TYPICAL_FACTOR:g} × its series' typical ±{100 * typical:.0f} %"
              if math.isfinite(typical) and TYPICAL_FACTOR * typical > CI_HALFWIDTH else "")
    return (f"95 % CI of the median {low:.4g}..{high:.4g} is ±{100 * half:.0f} % of it "
            f"(limit ±{100 * limit:.0f} %: ±{100 * CI_HALFWIDTH:.0f} %{series}, plus the timer's "
            f"{RESOLUTION_US:g} µs)")


def _span(values: np.ndarray) -> str:
    return f"{values[0]:.4g}" if values[0] == values[-1] else f"{values[0]:.4g}-{values[-1]:.4g}"
