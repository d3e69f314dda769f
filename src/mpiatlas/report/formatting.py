"""Numbers, sizes, CPU sets and bindings as the report's text: one format for every figure.

Used by the tables, the captions and the findings, so a test can format a fitted value the same
way and look for it in the HTML.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import TypeGuard, TypeVar

from mpiatlas.node.topology_sysfs import cpu_list

DASH = "—"
T = TypeVar("T")


def finite(x: object) -> TypeGuard[float]:
    """A real, finite number (not a bool, not None, not NaN/inf)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_num(value: object, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, thousands-grouped when >= 1000; a dash for None/NaN."""
    if not finite(value):
        return DASH
    x = float(value)
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 1e-3:
        decimals = max(0, digits - 1 - math.floor(math.log10(ax)))
        return f"{x:.{decimals}f}"
    return f"{x:.{max(digits - 1, 0)}e}"


def fmt_ci(ci: object, digits: int = 3, unbounded: str | None = None) -> str:
    """``[lo, hi]`` of a confidence interval, or a dash.

    ``unbounded``: text for a null bound when the other one is finite (e.g. ``∞`` for a
    bandwidth whose JSON stored an infinite bound as null).
    """
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2):
        return DASH
    if all(finite(v) for v in ci):
        return f"[{fmt_num(ci[0], digits)}, {fmt_num(ci[1], digits)}]"
    if unbounded is not None and any(finite(v) for v in ci):
        return "[" + ", ".join(fmt_num(v, digits) if finite(v) else unbounded for v in ci) + "]"
    return DASH


def fmt_bytes(size: object) -> str:
    """Message size with binary units: ``0 B``, ``512 B``, ``4 KiB``, ``1.5 MiB``."""
    if not finite(size):
        return DASH
    n = float(size)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B" if n == int(n) else f"{n:.3g} B"


def fmt_pct(x: object, digits: int = 1) -> str:
    return DASH if not finite(x) else f"{100 * float(x):.{digits}f} %"


def fmt_bool(x: object) -> str:
    if x is None:
        return DASH
    return "yes" if x else "no"


def _shown(value: object, render: Callable[[object], str | None]) -> str:
    """A JSON cell (pins, a binding) as text: DASH for None, text that is no JSON as it is, else
    ``render`` of the object (JSON text decoded), or the value's own text where render gives None."""
    if value is None:
        return DASH
    obj = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except ValueError:
            return value
    text = render(obj)
    return str(value) if text is None else text


def fmt_pins(value: object) -> str:
    """Requested pins (JSON list or plain text) as cpu ranges."""
    return _shown(value, _pins_text)


def _pins_text(obj: object) -> str | None:
    if isinstance(obj, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in obj):
        return cpu_list(obj) if len(set(obj)) == len(obj) else ",".join(map(str, obj))
    return None


def fmt_binding(value: object) -> str:
    """Compact ``rank:cpus`` text for a JSON rank -> cpus binding (or its raw text)."""
    return _shown(value, _binding_text)


def _binding_text(obj: object) -> str | None:
    if isinstance(obj, list):
        obj = dict(enumerate(obj))
    if not isinstance(obj, dict):
        return None

    def cpus(v: object) -> str:
        if isinstance(v, list) and all(isinstance(c, int) for c in v):
            return cpu_list(v)
        return str(v)

    def key(k: int | str) -> tuple[int, int | str]:
        try:
            return (0, int(k))
        except (TypeError, ValueError):
            return (1, str(k))

    return " ".join(f"{k}:{cpus(obj[k])}" for k in sorted(obj, key=key))


def shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def distinct(values: Iterable[T]) -> list[T]:
    """The non-empty values in first-seen order, each once."""
    out: list[T] = []
    for v in values:
        if v is not None and v != "" and v not in out:
            out.append(v)
    return out


def interval_scope(ci_method: str | None, n_launches: int | None) -> str:
    """What a fit's intervals include, in words: over launches, or within fewer (mpiatlas.models.hockney.MIN_LAUNCHES)."""
    n = int(n_launches or 0)
    if ci_method == "launches":
        return f"over {n} launches"
    within = f"within {n} launch{'es' if n != 1 else ''}" if n else "launches unknown"
    return f"{within} ({ci_method or 'bootstrap'}): leaves out the variation between launches"
