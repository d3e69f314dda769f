"""A series' key: what tells one measured series from another, and the one place its label is written.

A label (``intelmpi/shm/core [off_cache=-1] [knobs=eager-64k] [placement=block]``) is for people and for
the tables' ``label`` column; code that needs a series' stack, transport or knob set carries the
:class:`SeriesKey` (or the table's own columns), never a label taken apart again. This module imports
nothing of mpiatlas, so any module may name the type without a circle.
"""

from __future__ import annotations

from dataclasses import dataclass

# A spread mapping over m nodes names its node count after this (``core-n2``, ``l3-n4``): a mapping's
# own name may end in a digit (l3), so the count cannot follow it directly as it does for ``node2``.
OVER_NODES_SEPARATOR = "-n"
# The knob set's id segment and label part: ``knobs=<name>``; an options segment is ``<option>=<value>[,...]``.
KNOBS_SEGMENT_PREFIX = "knobs="
# The placement over nodes' id segment and label part (``placement=block``), only for one other than cyclic.
PLACEMENT_SEGMENT_PREFIX = "placement="


def mapping_segment(mapping: str, nodes: int) -> str:
    """The mapping as a path segment: ``core``; ``node2`` for the `node` mapping over 2 nodes; ``core-n2``."""
    if nodes == 1:
        return mapping
    return f"{mapping}{nodes}" if mapping == "node" else f"{mapping}{OVER_NODES_SEPARATOR}{nodes}"


@dataclass(frozen=True)
class SeriesKey:
    """One series' coordinates. The label names stack, transport, mapping over nodes, IMB options, knob
    set and placement over nodes; the rest (version, benchmark, algorithm, np, threads) sit beside it in
    the tables' columns, and are here so a stage that keys on them carries one value, not a tuple."""

    stack: str
    transport: str
    mapping: str
    nodes: int = 1
    # The placement over nodes: "" for cyclic (the default), ``block``.
    placement: str = ""
    # IMB options as the cell id's segment (``off_cache=-1``), "" for IMB's defaults and for kernels.
    options: str = ""
    knobs: str = ""
    version: str = ""
    benchmark: str = ""
    algorithm: str = ""
    np: int = 0
    threads: int = 1

    @property
    def label(self) -> str:
        return render_label(self)


def render_label(key: SeriesKey) -> str:
    """A series' label: ``stack/transport/placement``, then its options, knob set and placement over
    nodes when it has them, so every section that draws one series per label keeps such cells apart."""
    parts = (key.options, key.knobs and f"{KNOBS_SEGMENT_PREFIX}{key.knobs}",
             key.placement and f"{PLACEMENT_SEGMENT_PREFIX}{key.placement}")
    base = f"{key.stack}/{key.transport}/{mapping_segment(key.mapping, key.nodes)}"
    return base + "".join(f" [{part}]" for part in parts if part)
