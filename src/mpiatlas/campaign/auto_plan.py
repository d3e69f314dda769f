"""``mappings: auto`` and ``processes: auto``: a first look shaped by the node, under a time budget.

A step of its own, after validation and before the campaign is built: :func:`plan` (and :func:`load`, for a
file) validates a config, and where its ``mappings`` or ``processes`` say ``auto`` :func:`resolve` reads the
node's topology (``topology:`` of the config, one given
by the caller such as ``mpiatlas cells --topology``, else this host's) and writes concrete lists back,
with what it chose and dropped under the config's ``auto`` key (so campaign.json, which every later
process reads, holds the resolved plan and never resolves again):

* mappings: ``core``, and where the node's cores pair up in more than one region (a cache, a NUMA
  node, a socket apart) one pair per region it has (the region mappings, :mod:`mpiatlas.node.topology`),
  measured by the 2-rank programs only (PingPong, PingPing, the pingpong kernel): what the report's
  per-region table needs, without every program again per region. On a node of one region the
  ``core`` pair already is that region, and the plan is ``[core]``.
* processes: P = 2, 4, 8, ... and the node's core count.

Then the campaign's time estimate (:func:`mpiatlas.campaign.resources.estimate`, the programs' own
cost model) must stay within ``campaign.time_budget_min``: the largest P of an ``auto`` list below the
core count is dropped first, then repetitions (a fixed count, down to 1), then the core count; the steps
are said in one note line. The model is pessimistic (it budgets IMB's -time cap at every size and the
kernels' messages at 100 MB/s), so a campaign that fits takes less.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

from mpiatlas.campaign import resources
from mpiatlas.campaign.resources import Estimate
from mpiatlas.matrix.adaptive import HEADLINE_KEY, HEADLINE_REPETITIONS
from mpiatlas.matrix.config import AUTO, ConfigError, checked_document, read, unplanned_keys, validate
from mpiatlas.node.topology import REGION_MAPPINGS, MappingUnavailable, Topology, TopologyError, detect, region_pair
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.programs import expand
from mpiatlas.spine.campaign import AutoRecord, Campaign

# The key of the config document under which the resolution is recorded.
RECORD_KEY = "auto"


def is_auto(doc: Mapping[str, Any]) -> bool:
    return bool(unplanned_keys(doc))


def plan(config: Mapping[str, Any], source: str = "<config>", topology: Topology | None = None) -> Campaign:
    """The campaign of ``config``: validated, then its ``auto`` lists planned for ``topology`` (else the
    config's ``topology``, else this host's), then built from the concrete lists. The campaign's document
    holds them, so a campaign derived from it or read back from campaign.json plans the same cells."""
    doc = checked_document(config, source)
    if is_auto(doc):
        try:
            doc = resolve(doc, source, topology)
        except TopologyError as exc:
            raise ConfigError(f"{source}: topology: `auto` needs the node's topology: {exc}") from None
    return validate(doc, source)


def load(path: str | Path, topology: Topology | None = None,
         overrides: Mapping[str, Any] | None = None) -> Campaign:
    """The campaign of the YAML file ``path`` (:func:`mpiatlas.matrix.config.read`), planned (:func:`plan`)."""
    doc, source = read(path, overrides)
    return plan(doc, source, topology)


def node_regions(topo: Topology) -> list[str]:
    """The region mappings whose pair of cpus this node has (closest first)."""
    found = []
    for name in REGION_MAPPINGS:
        try:
            region_pair(topo, name)
        except MappingUnavailable:
            continue
        found.append(name)
    return found


def auto_mappings(topo: Topology) -> list[str]:
    regions = node_regions(topo)
    return ["core", *regions] if len(regions) > 1 else ["core"]


def auto_processes(topo: Topology) -> list[int]:
    """2, 4, 8, ... below the core count, then the core count (at least 2: a pair is the first look)."""
    cores = max(2, topo.n_cores)
    counts, p = [], 2
    while p < cores:
        counts.append(p)
        p *= 2
    return [*counts, cores]


@functools.cache
def _this_host() -> Topology:
    return detect()


def topology_for(doc: Mapping[str, Any], given: Topology | None) -> Topology:
    """The node ``auto`` plans for: ``given``, the config's ``topology``, else this host's."""
    if given is not None:
        return given
    spec = doc.get("topology")
    if spec:
        return read_topology(str(spec))
    return _this_host()


def resolve(doc: dict[str, Any], source: str, topology: Topology | None) -> dict[str, Any]:
    """``doc`` (validated by the schema) with its ``auto`` lists made concrete and trimmed to the time
    budget (see the module docstring)."""
    topo = topology_for(doc, topology)
    out = copy.deepcopy(doc)
    auto_keys = [key for key in ("mappings", "processes") if doc.get(key) == AUTO]
    if doc.get("mappings") == AUTO:
        out["mappings"] = auto_mappings(topo)
    if doc.get("processes") == AUTO:
        out["processes"] = auto_processes(topo)
    # Region cells of an auto mapping are its pairs only (matrix.cells.region_pairs_only reads this).
    out[RECORD_KEY] = {"region_cells": "pairs" if "mappings" in auto_keys else "all"}
    budget_s = 60.0 * float(out["campaign"].get("time_budget_min", 15))
    dropped: list[str] = []
    estimate = _estimate(out, source)
    while estimate.expected_s > budget_s:
        step = _trim(out, auto_keys)
        if step is None:
            break
        dropped.append(step)
        estimate = _estimate(out, source)
    estimate = _refill(out, dropped, estimate, budget_s, source)
    out[RECORD_KEY] |= {
        "resolved": auto_keys,
        "topology": {k: v for k, v in topo.summary().items() if k in ("source", "hostname", "cpu_model", "packages",
                                                                    "numa_nodes", "l3_domains", "cores", "synthetic")},
        "mappings": list(out["mappings"]), "processes": list(out["processes"]),
        "budget_min": budget_s / 60.0, "expected_s": round(estimate.expected_s, 1),
        "dropped": dropped, "fits": estimate.expected_s <= budget_s,
    }
    return out


# The largest IMB size the budget may cut down to (2^20 = 1 MiB: past the eager/rendezvous switches,
# so a bandwidth is still measured), two powers of 2 a step.
MIN_MSGLOG_HI = 20
MSGLOG_STEP = 2
# Repetitions the budget keeps while any other cut is left: two give a run-to-run spread, one none.
KEEP_REPETITIONS = 2


def _trim(doc: dict[str, Any], auto_keys: list[str]) -> str | None:
    """One step towards the budget, applied to ``doc``: its note, or None when nothing is left to drop.

    Cheapest information first: with ``processes: auto``, the forced-algorithm sweeps at the largest P
    (the default algorithm stays there; the sweeps stay at the smallest P), then IMB's largest sizes
    (down to :data:`MIN_MSGLOG_HI`), then repetitions down to :data:`KEEP_REPETITIONS` (two still give a
    run-to-run spread), then the largest P between 2 and the core count (the whole node is the point of
    a P sweep, 2 the pair every program runs), the core count, and last repetitions down to 1."""
    auto_processes = "processes" in auto_keys
    for step in (_cut_algorithms, _cut_sizes) if auto_processes else ():
        if (note := step(doc)) is not None:
            return note
    if (note := _cut_repetitions(doc, KEEP_REPETITIONS)) is not None:
        return note
    if auto_processes and (note := _cut_middle_p(doc)) is not None:
        return note
    processes = doc["processes"]
    if auto_processes and len(processes) > 1:
        return f"P={processes.pop()}"
    return _cut_repetitions(doc, 1)


def _forces_algorithms(doc: Mapping[str, Any]) -> bool:
    return any(a != "default" for stack in (doc.get("stacks") or {}).values()
               for algorithms in ((stack or {}).get("algorithms") or {}).values() for a in algorithms)


def _cut_algorithms(doc: dict[str, Any]) -> str | None:
    """Forced algorithms no longer at the largest P that still has them (matrix.cells.forced_algorithms_max_np)."""
    processes = sorted(doc["processes"])
    record = doc[RECORD_KEY]
    cap = record.get("algorithms_max_np", processes[-1])
    below = [p for p in processes if p < cap]
    if not _forces_algorithms(doc) or not below:
        return None
    record["algorithms_max_np"] = below[-1]
    dropped = [p for p in processes if below[-1] < p <= cap]
    return f"forced algorithms at P={', '.join(map(str, dropped))}"


def _cut_sizes(doc: dict[str, Any]) -> str | None:
    """IMB's largest message sizes: the top of ``imb.msglog`` two powers of 2 lower."""
    imb = doc.get("imb") or {}
    msglog = imb.get("msglog")
    if not (isinstance(msglog, list) and len(msglog) == 2 and msglog[1] > max(MIN_MSGLOG_HI, msglog[0])):
        return None
    hi = max(MIN_MSGLOG_HI, msglog[0], msglog[1] - MSGLOG_STEP)
    imb["msglog"] = [msglog[0], hi]
    return f"IMB sizes above 2^{hi} B"


def _cut_middle_p(doc: dict[str, Any]) -> str | None:
    """One P strictly between the smallest and the largest: the one whose loss leaves the sweep most
    evenly spread (the smallest largest ratio between neighbours; the larger P on a tie, as it costs
    more), so a thinned sweep still spans 2 .. all cores in even steps rather than losing its middle."""
    processes: list[int] = doc["processes"]
    if len(processes) <= 2:
        return None

    def widest_step(without: int) -> float:
        kept = processes[:without] + processes[without + 1:]
        return max(b / a for a, b in pairwise(kept))

    drop = min(range(1, len(processes) - 1), key=lambda i: (widest_step(i), -processes[i]))
    return f"P={processes.pop(drop)}"


def _cut_repetitions(doc: dict[str, Any], floor: int) -> str | None:
    """One repetition less, down to ``floor``; the headline series (matrix.adaptive.initial_repetitions)
    keep HEADLINE_REPETITIONS of them, so their intervals stay over launches."""
    reps = doc["campaign"]["repetitions"]
    if isinstance(reps, int) and reps > floor:
        doc["campaign"]["repetitions"] = reps - 1
        if reps - 1 < HEADLINE_REPETITIONS:
            doc[RECORD_KEY].setdefault(HEADLINE_KEY, min(HEADLINE_REPETITIONS, reps))  # the first cut's count
        return f"repetitions {reps}->{reps - 1}" + (
            f" (IMB PingPong and the pingpong kernel keep {doc[RECORD_KEY][HEADLINE_KEY]})"
            if HEADLINE_KEY in doc[RECORD_KEY] else "")
    return None


def _refill(doc: dict[str, Any], dropped: list[str], estimate: Estimate, budget_s: float,
            source: str) -> Estimate:
    """Dropped P values back, smallest first, where they fit now that fewer repetitions were left
    (the trimming is greedy: a P dropped before the repetitions may fit after them)."""
    for note in sorted((d for d in dropped if d.startswith("P=")), key=lambda d: int(d[2:])):
        p = int(note[2:])
        trial = copy.deepcopy(doc)
        trial["processes"] = sorted([*doc["processes"], p])
        trial_estimate = _estimate(trial, source)
        if trial_estimate.expected_s <= budget_s:
            doc["processes"], estimate = trial["processes"], trial_estimate
            dropped.remove(note)
    return estimate


def _estimate(doc: dict[str, Any], source: str) -> Estimate:
    campaign = validate(doc, source)
    return resources.estimate(campaign, expand(campaign))


def note(record: AutoRecord | None) -> str | None:
    """One line: what ``auto`` planned, for which node, and what the budget dropped; None without auto."""
    if not record or not record.get("resolved"):
        return None
    topo = record.get("topology") or {}
    where = topo.get("synthetic") or topo.get("hostname") or topo.get("source") or "this node"
    line = (f"auto ({where}, {topo.get('cores')} cores): mappings {', '.join(record['mappings'])}; "
            f"processes {', '.join(map(str, record['processes']))}")
    if record.get("dropped"):
        line += (f"; dropped to stay within {record['budget_min']:g} min: {', '.join(record['dropped'])}"
                 + ("" if record.get("fits") else " (still over: nothing more to drop)"))
    return line
