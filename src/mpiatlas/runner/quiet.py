"""Wait, bounded, until the machine looks quiet before a later re-measure (campaign.remeasure_later).

A launch still perturbed after its group's own re-measures ran beside a slow period as long as the
group. Relaunching it straight away would likely meet the same disturbance, so the later round
(runner.run.run_group with ``later``) first looks at the node: two reads of ``/proc/stat`` (and
``/proc/loadavg``) ``window_s`` apart, the probe's own parsers (runner.machine_state). The node is
quiet when, over that window, the cpus were busy (anyone: no launch of ours runs meanwhile) for no
more than the perturbation limit ``other_cpu_share``, the hypervisor stole no more than
``steal_share`` (mpiatlas.stats.quality's limits, with the same tick-resolution rule), and, when
``max_load_per_cpu`` is set, the 1-minute load per cpu is below it, and, at the end of the window, no
pair of the node's cpus passes a cache line in more than ``pair_latency_ratio`` times its best since
boot (node.pair_latency: a VM's vCPUs apart last tens of seconds). Looks repeat until quiet or
until ``max_wait_s`` has passed; the launch then goes ahead either way, and the record
(:class:`QuietWait`, provenance ``quiet_wait``; one wait per pass of the later round over a group)
says how long it waited, how many looks, the last
figures and why it stopped waiting. Cost: one read of two small /proc files per ``window_s``, asleep between.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NotRequired, TypedDict

from mpiatlas.node.pair_latency import PairLook, look_at_node
from mpiatlas.stats import quality
from mpiatlas.runner.machine_state import CPU_FIELDS, IDLE_FIELDS, NodeSnapshot, node_snapshot


@dataclass(frozen=True)
class QuietRule:
    """campaign.remeasure_later's waiting part, with the perturbation limits it compares against."""

    max_wait_s: float = 60.0
    window_s: float = 2.0
    max_load_per_cpu: float | None = None
    other_cpu_share: float = quality.DEFAULT_LIMITS["other_cpu_share"]
    steal_share: float = quality.DEFAULT_LIMITS["steal_share"]
    pair_latency_ratio: float = quality.DEFAULT_LIMITS["pair_latency_ratio"]

    @classmethod
    def of_config(cls, campaign: Mapping[str, Any]) -> QuietRule:
        later = campaign.get("remeasure_later") or {}
        lim = quality.limits(campaign.get("perturbation"))
        load = later.get("max_load_per_cpu")
        return cls(float(later.get("max_wait_s", 60.0)), float(later.get("window_s", 2.0)),
                   None if load is None else float(load), lim["other_cpu_share"], lim["steal_share"],
                   lim["pair_latency_ratio"])


@dataclass(frozen=True)
class Look:
    """One window's figures: the cpus' busy and stolen share (and their ticks), the 1-minute load per cpu."""

    busy_share: float
    busy_ticks: int
    steal_share: float
    steal_ticks: int
    total_ticks: int
    load_per_cpu: float
    pair_ratio: float = 0.0  # the node's worst cpu pair over its best since boot (0: not probed)
    pair_ns: float = 0.0


def look(before: NodeSnapshot, after: NodeSnapshot, pair: PairLook | None = None) -> Look:
    """The node over the window between two snapshots, all of its cpus together."""
    busy = steal = total = 0
    for cpu, end in after.cpus.items():
        start = before.cpus.get(cpu)
        if start is None:
            continue
        d = {k: end[k] - start[k] for k in CPU_FIELDS}
        span = sum(d.values())
        total += span
        steal += d["steal"]
        busy += span - sum(d[k] for k in IDLE_FIELDS) - d["steal"]
    cpus = max(len(after.cpus), 1)
    return Look(round(busy / total, 4) if total else 0.0, busy, round(steal / total, 4) if total else 0.0, steal,
                total, round(after.loadavg[0] / cpus, 3), round(pair.ratio, 2) if pair else 0.0,
                round(pair.median_ns, 1) if pair else 0.0)


def why_not_quiet(seen: Look, rule: QuietRule) -> str | None:
    """What keeps the node from looking quiet, in words (None: quiet)."""
    if seen.total_ticks == 0:  # /proc/stat did not move: nothing was seen, which is not quiet
        return "no cpu time was counted over the window"
    reasons = []
    if quality.beyond(seen.busy_share, seen.busy_ticks, seen.total_ticks, rule.other_cpu_share):
        reasons.append(f"its cpus were {100 * seen.busy_share:.0f} % busy (limit {100 * rule.other_cpu_share:.0f} %)")
    if quality.beyond(seen.steal_share, seen.steal_ticks, seen.total_ticks, rule.steal_share):
        reasons.append(f"{100 * seen.steal_share:.0f} % of its cpu time was stolen (limit {100 * rule.steal_share:.0f} %)")
    if rule.max_load_per_cpu is not None and seen.load_per_cpu > rule.max_load_per_cpu:
        reasons.append(f"its 1-minute load was {seen.load_per_cpu:g} per cpu (limit {rule.max_load_per_cpu:g})")
    if seen.pair_ratio > rule.pair_latency_ratio:
        reasons.append(f"a pair of its cpus passed a cache line in {seen.pair_ns:.0f} ns, {seen.pair_ratio:.1f}x "
                       f"its best since boot (limit {rule.pair_latency_ratio:g}x)")
    return "; ".join(reasons) or None


# provenance.json's ``quiet_wait``: the wait (QuietWait), and which pass of the later round it was
# and how many cells that pass held (runner.run). The functional form: "pass" is a keyword.
QuietWaitRecord = TypedDict("QuietWaitRecord", {
    "waited_s": float, "looks": int, "quiet": bool, "reason": str, "last": dict[str, float],
    "pass": NotRequired[int], "cells_in_pass": NotRequired[int]})


@dataclass(frozen=True)
class QuietWait:
    """What a relaunch waited for (provenance.json ``quiet_wait``)."""

    waited_s: float
    looks: int
    quiet: bool
    reason: str  # why it stopped waiting, in words
    last: dict[str, float]  # the last look's figures

    def record(self) -> QuietWaitRecord:
        return {"waited_s": self.waited_s, "looks": self.looks, "quiet": self.quiet, "reason": self.reason,
                "last": dict(self.last)}


def wait_until_quiet(rule: QuietRule, snapshot: Callable[[], NodeSnapshot] = node_snapshot,
                     sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                     pairs: Callable[[], PairLook | None] = look_at_node) -> QuietWait:
    """Look at the node one window at a time until it is quiet or ``rule.max_wait_s`` has passed
    (``pairs``: the node's cpu pairs probed at the end of each window)."""
    if rule.max_wait_s <= 0:
        return QuietWait(0.0, 0, False, "not waited (max_wait_s is 0)", {})
    start = clock()
    looks = 0
    before = snapshot()
    while True:
        sleep(rule.window_s)
        after = snapshot()
        seen, looks = look(before, after, pairs()), looks + 1
        problem = why_not_quiet(seen, rule)
        waited = clock() - start
        if problem is None:
            reason = f"quiet after {waited:.1f} s ({looks} look(s) of {rule.window_s:g} s)"
            return QuietWait(round(waited, 2), looks, True, reason, asdict(seen))
        if waited + rule.window_s > rule.max_wait_s:
            reason = f"not quiet after {waited:.1f} s, launched anyway: {problem}"
            return QuietWait(round(waited, 2), looks, False, reason, asdict(seen))
        before = after

