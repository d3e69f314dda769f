"""IMB options as an axis of IMB cells: ``imb.options`` (-off_cache, -iter_policy, -root_shift, -sync).

``imb.options`` maps an option to the values to measure; every combination (the cross product)
is its own cell, named by an id segment of its non-default settings, e.g. ``off_cache=-1`` or
``off_cache=4,sync=off``. ``off_cache: off`` means the flag is not passed (IMB's default: the
same buffer every repetition, so it stays in cache); a cell whose options are all such defaults
has no segment and keeps the id it had before this axis existed.

The spellings and values are IMB 2021's (``IMB-MPI1 -help off_cache`` etc.):

* ``-off_cache cache_size[,cache_line_size]``: ``-1`` uses IMB_mem_info.h's built-in last-level
  cache size, a number is the last-level cache size in MB (float); buffers are then advanced
  through ~2 x max(cache_size, message size) so that no message is re-sent from cache;
* ``-iter_policy dynamic|multiple_np|auto|off`` (default dynamic);
* ``-root_shift on|off`` (default off) and ``-sync on|off`` (default on): "collective benchmarks"
  only, so they multiply only the cells of collectives (a PingPong cell would repeat itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product
from typing import Any

# The options in the order of their id segment and argv.
OPTION_ORDER = ("off_cache", "iter_policy", "root_shift", "sync")
COLLECTIVE_ONLY = frozenset({"root_shift", "sync"})
ITER_POLICIES = ("dynamic", "multiple_np", "auto", "off")
# The value of off_cache that passes no flag (cells without a segment).
CACHE_ON = "off"
# What IMB's -off_cache -1 assumes as the last-level cache size is compiled in; reserve this much
# (MiB) per buffer when modelling a cell's memory.
DEFAULT_OFF_CACHE_MIB = 64.0


def normalize_value(option: str, value: Any) -> str:
    """A config value as its canonical string. YAML reads unquoted on/off as booleans: they are
    taken as the words they were written as."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if option == "off_cache" and isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value)


def combinations(options: Mapping[str, Sequence[Any]] | None, collective: bool) -> list[str]:
    """The id segments of every combination of ``options`` a benchmark runs ("" = IMB's defaults),
    without duplicates, in config order; ``collective``: root_shift and sync apply."""
    options = options or {}
    axes = [(name, [normalize_value(name, v) for v in options[name]]) for name in OPTION_ORDER
            if name in options and (collective or name not in COLLECTIVE_ONLY)]
    segments: list[str] = []
    for values in product(*(vals for _, vals in axes)):
        segment = ",".join(f"{name}={value}" for (name, _), value in zip(axes, values)
                           if not (name == "off_cache" and value == CACHE_ON))
        if segment not in segments:
            segments.append(segment)
    return segments or [""]


def parse_segment(segment: str) -> dict[str, str]:
    """``off_cache=-1,sync=off`` -> {"off_cache": "-1", "sync": "off"} (the inverse of the segment)."""
    if not segment:
        return {}
    parsed = {}
    for part in segment.split(","):
        name, sep, value = part.partition("=")
        if not sep or name not in OPTION_ORDER:
            raise ValueError(f"{segment!r} is not an IMB options segment (<option>=<value>[,...], options: "
                             f"{', '.join(OPTION_ORDER)})")
        parsed[name] = value
    return parsed


def argv(options: dict[str, str]) -> list[str]:
    """IMB-MPI1 flags of a cell's options (in a fixed order: the id and the argv agree)."""
    flags: list[str] = []
    for name in OPTION_ORDER:
        if name in options and not (name == "off_cache" and options[name] == CACHE_ON):
            flags += [f"-{name}", options[name]]
    return flags


def off_cache_mib(options: dict[str, str]) -> float:
    """The cache size (MiB) an off_cache cell's buffers march through; 0 with the cache on."""
    value = options.get("off_cache", CACHE_ON)
    if value == CACHE_ON:
        return 0.0
    return DEFAULT_OFF_CACHE_MIB if float(value) < 0 else float(value)
