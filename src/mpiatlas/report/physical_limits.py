"""The campaign's physical limits (R/limits/limits.json, :mod:`mpiatlas.limits`) as the report uses them.

The report is given the file (``mpiatlas report --limits``; the report rule passes the campaign's
R/limits/limits.json to both views unless ``campaign.limits`` is ``off``). One record per node;
with several nodes each level's limit is the median over the nodes that measured it (a campaign's
nodes are one node type).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpiatlas.limits import MEMORY, LimitsError, level_for_size, level_limits


@dataclass
class PhysicalLimits:
    source: str
    rates: dict[str, float] = field(default_factory=dict)  # level -> MB/s copied by one core
    caches: dict[str, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)  # "node: reason"

    def level_of(self, size_bytes: float) -> str:
        return level_for_size({"caches": self.caches}, size_bytes)

    def fraction(self, bandwidth: Any, level: str) -> float | None:
        rate = self.rates.get(level)
        if rate is None or not isinstance(bandwidth, (int, float)) or bandwidth <= 0:
            return None
        return float(bandwidth) / rate


def load_limits(path: Path) -> PhysicalLimits:
    """The limits file at ``path``; LimitsError naming the file when it is missing or cannot be read."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise LimitsError(f"{path}: unreadable ({exc})") from exc
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise LimitsError(f"{path}: expected an object with a 'nodes' list")
    out = PhysicalLimits(source=str(path))
    per_level: dict[str, list[float]] = {}
    for rec in nodes:
        rates = level_limits(rec)
        if not rates:
            out.unavailable.append(f"{rec.get('node')}: {rec.get('reason') or 'no usable run'}")
            continue
        for level, rate in rates.items():
            per_level.setdefault(level, []).append(rate)
        caches = rec.get("caches")
        if isinstance(caches, dict) and not out.caches:
            out.caches = {str(k): int(v) for k, v in caches.items() if isinstance(v, (int, float))}
    out.rates = {level: statistics.median(v) for level, v in per_level.items()}
    return out


def is_intra_node(fit: dict[str, Any]) -> bool:
    """A fit of ranks on one node (its copies are what the memory limit bounds): it names a mapping
    and that mapping does not spread the ranks over nodes (``node``, ``node2``, …)."""
    mapping = fit.get("mapping")
    return isinstance(mapping, str) and bool(mapping) and not mapping.startswith("node")


def limit_cells(fit: dict[str, Any], limits: PhysicalLimits) -> tuple[float | None, str, float | None, str]:
    """(B / memory copy rate, its level, peak / copy rate of the level the peak size fits in, that level)."""
    peak_bytes = fit.get("peak_bytes")
    peak_level = limits.level_of(peak_bytes) if isinstance(peak_bytes, (int, float)) else MEMORY
    return (limits.fraction(fit.get("bandwidth_MBps"), MEMORY), MEMORY,
            limits.fraction(fit.get("peak_bandwidth_MBps"), peak_level), peak_level)
