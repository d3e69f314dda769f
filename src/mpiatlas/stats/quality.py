"""Can a number be trusted? Two judgements, separate from a cell's status (which says it ran right):

* a launch is ``perturbed`` when the machine took cpu time from its ranks (runner.machine_state's
  record): its ranks waited on a run queue for more than ``wait_share`` of their time (and more than
  ``wait_floor_s`` in all: on a node whose cpus the ranks fill, a short launch's busiest rank waits a
  few ms at its start for the launcher and for mpiatlas itself, 3-5 ms in the first-look campaign here,
  which is 5-8 % of a 0.07 s kernel launch; a disturbance is tens of ms and more), or a cpu of
  theirs was stolen by the hypervisor for more than ``steal_share``, or other processes used more
  than ``other_cpu_share`` of the ranks' cpus. Its samples stay in the raw tables, flagged
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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import math

import numpy as np
import polars as pl

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

OK, PERTURBED, NOISY = "ok", "perturbed", "noisy"
UNKNOWN = "unknown"  # judged without evidence (no machine record read): not trusted
DEFAULT_LIMITS = {"wait_share": 0.05, "wait_floor_s": 0.02, "steal_share": 0.02, "other_cpu_share": 0.10}
MODE_RATIO = 2.0
GAP_RATIO = 1.5
CI_HALFWIDTH = 0.25
# A point is noisy only beyond what its series shows everywhere (issue #33: 254 of 568 points of a
# quiet first look were flagged, nearly all sub-µs collectives whose every size varies ±25–40 %):
# its CI half-width must exceed this many times the series' typical one.
TYPICAL_FACTOR = 2.0
RESOLUTION_US = 0.01  # IMB prints times to 2 decimals: a CI bound is only known to ±0.01 µs
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
        share, cpus, waited_s = worst
        expected = expected_wait(machine) if oversubscribed else 0.0
        excess_s = None if waited_s is None else waited_s * (share - expected) / share if share > 0 else 0.0
        if share - expected > lim["wait_share"] and (excess_s is None or excess_s > lim["wait_floor_s"]):
            by_design = f" ({_pct(expected)} expected: oversubscribed)" if expected > 0 else ""
            reasons.append(f"ranks waited {_pct(share)} of the launch for {cpus}{by_design}")
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
    return (PERTURBED, "; ".join(reasons)) if reasons else (OK, None)


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


def _worst_waiter(machine: Mapping[str, Any]) -> tuple[float, str, float | None] | None:
    """The largest wait share of a rank, its cpu(s) in words and its wait in seconds (None: not
    recorded); without ranks (srun), the job cgroup's cpu pressure (time some task of it waited)
    stands in."""
    ranks = [r for r in machine.get("ranks") or [] if r.get("wait_share") is not None]
    if ranks:
        rank = max(ranks, key=lambda r: r["wait_share"])
        cpus = rank.get("cpus") or []  # a list, or a cpulist string for an unpinned rank on a large node
        listed = cpus if isinstance(cpus, str) else ",".join(map(str, cpus))
        where = f"cpu {cpus[0]}" if isinstance(cpus, list) and len(cpus) == 1 else f"cpus {listed}" if cpus else "a cpu"
        waited = rank.get("wait_s")
        return float(rank["wait_share"]), where, float(waited) if waited is not None else None
    pressure = machine.get("cgroup_cpu_pressure_share")
    return (float(pressure), "a cpu (job cgroup pressure)", None) if pressure is not None else None


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
                       ci_high: np.ndarray, typical: np.ndarray | None = None) -> tuple[list[str | None], list[str | None]]:
    """Per group (consecutive ascending runs of ``flat`` of ``lengths``): quality and reason.

    ``typical``: per group, the median relative CI half-width of its series (aggregate.
    series_typical_halfwidth): see :func:`ci_reason`. Groups of one value, or none, are not judged (None)."""
    offsets = (np.cumsum(lengths) - lengths).astype(np.int64)
    quality: list[str | None] = []
    reasons: list[str | None] = []
    typ = np.full(len(lengths), np.nan) if typical is None else typical
    for start, n, m, lo, hi, ty in zip(offsets, lengths, median, ci_low, ci_high, typ, strict=True):
        if n < 2:
            quality.append(None)
            reasons.append(None)
            continue
        reason = split_reason(flat[start:start + n]) or ci_reason(float(m), float(lo), float(hi), float(ty))
        quality.append(NOISY if reason else OK)
        reasons.append(reason)
    return quality, reasons


def split_reason(values: np.ndarray) -> str | None:
    """Why ascending ``values`` form two modes, or None: max/min above MODE_RATIO with a gap of at
    least GAP_RATIO between two neighbours (the modes: the values below and above the widest gap)."""
    if values.size < 2 or values[0] <= 0 or values[-1] / values[0] <= MODE_RATIO:
        return None
    gaps = values[1:] / values[:-1]
    at = int(np.argmax(gaps))
    if gaps[at] < GAP_RATIO:
        return None
    low, high = values[: at + 1], values[at + 1:]
    return (f"two modes: {low.size} repetition(s) at {_span(low)} and {high.size} at {_span(high)} "
            f"({values[-1] / values[0]:.1f}x apart)")


def ci_limit(median: float, typical: float = math.nan) -> float:
    """The relative CI half-width a point may have before it is noisy: the larger of ``CI_HALFWIDTH``
    and ``TYPICAL_FACTOR`` × its series' typical half-width (the repetitions' own variation there:
    sub-µs collectives of a quiet first look vary ±25–40 % at every size), plus the printed timer
    resolution ``RESOLUTION_US`` relative to the median (IMB prints 2 decimals: ±0.01 µs is ±5 % of
    a 0.2 µs time)."""
    base = max(CI_HALFWIDTH, TYPICAL_FACTOR * typical) if math.isfinite(typical) else CI_HALFWIDTH
    return base + (RESOLUTION_US / median if median > 0 else 0.0)


def ci_reason(median: float, low: float, high: float, typical: float = math.nan) -> str | None:
    """Why the CI [low, high] of ``median`` is too wide (beyond :func:`ci_limit` on either side), or None."""
    if not (np.isfinite(median) and np.isfinite(low) and np.isfinite(high)) or median <= 0:
        return None
    half = max(median - low, high - median) / median
    limit = ci_limit(median, typical)
    if half <= limit:
        return None
    series = (f", {TYPICAL_FACTOR:g} × its series' typical ±{100 * typical:.0f} %"
              if math.isfinite(typical) and TYPICAL_FACTOR * typical > CI_HALFWIDTH else "")
    return (f"95 % CI of the median {low:.4g}..{high:.4g} is ±{100 * half:.0f} % of it "
            f"(limit ±{100 * limit:.0f} %: ±{100 * CI_HALFWIDTH:.0f} %{series}, plus the timer's "
            f"{RESOLUTION_US:g} µs)")


def _span(values: np.ndarray) -> str:
    return f"{values[0]:.4g}" if values[0] == values[-1] else f"{values[0]:.4g}-{values[-1]:.4g}"
