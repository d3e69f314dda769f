"""An adaptive round's decision as a typed record: JSON between the workflow's processes
(``<results>/adaptive/round<r>.json``), so its type is a TypedDict and the wire format is the value itself.

:func:`read_decision` is the file boundary: a file that is not such a decision fails there, naming the
file and the key, instead of a KeyError deep in the workflow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from mpiatlas.spine.cell_coords import CellFields


class SpecFields(TypedDict):
    """mpiatlas.matrix.adaptive.AdaptiveSpec as JSON."""

    min: int
    max: int
    ci_halfwidth: float


class SeriesEntry(TypedDict):
    """One series (a cell id without its rep segment): its base cell, launches planned and state."""

    series: str
    cell: CellFields
    reps: int
    # The worst size's relative CI half-width of the median; None while unknown (JSON has no infinity).
    halfwidth: float | None
    state: str
    round: int


class RoundDecision(TypedDict):
    round: int
    spec: SpecFields | None
    series: list[SeriesEntry]
    # Round r + 1's job groups: group id -> its cells.
    groups: dict[str, list[CellFields]]
    later_remeasure: NotRequired[list[str]]  # set by decide_round; absent from a bare decide_series


_TOP_KEYS: dict[str, type | tuple[type, ...]] = {"round": int, "spec": (dict, type(None)), "series": list,
                                                 "groups": dict}
_SERIES_KEYS = ("series", "cell", "reps", "state")


def read_decision(path: Path) -> RoundDecision:
    """The decision in ``path``; a ValueError naming the file and the key when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable round decision ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a round decision is a JSON object, got {type(data).__name__}")
    for key, kind in _TOP_KEYS.items():
        if not isinstance(data.get(key), kind) or key not in data:
            raise ValueError(f"{path}: key {key!r} missing or not {_names(kind)} (got {data.get(key)!r:.60})")
    for i, entry in enumerate(data["series"]):
        missing = [k for k in _SERIES_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise ValueError(f"{path}: series[{i}] lacks {', '.join(missing)}")
    later = data.get("later_remeasure", [])
    if not isinstance(later, list):
        raise ValueError(f"{path}: key 'later_remeasure' is not a list of group ids (got {later!r:.60})")
    return cast(RoundDecision, data)


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
