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


def options_part(options: str) -> str:
    """The label's part that names IMB options (`` [off_cache=-1]``), "" for none."""
    return f" [{options}]" if options else ""


def knobs_part(knobs: str) -> str:
    """The label's part that names a knob set (`` [knobs=eager-64k]``), "" for none."""
    return f" [{KNOBS_SEGMENT_PREFIX}{knobs}]" if knobs else ""


def placement_part(placement: str) -> str:
    """The label's part that names a placement over nodes other than cyclic (`` [placement=block]``)."""
    return f" [{PLACEMENT_SEGMENT_PREFIX}{placement}]" if placement else ""


def without_part(label: str, part: str) -> str:
    """``label`` with one part that this module rendered for it (:func:`knobs_part` of its knob set,
    :func:`options_part` of its options) taken out: the label of the same key without that field."""
    return label.replace(part, "", 1) if part else label


def render_label(key: SeriesKey) -> str:
    """A series' label: ``stack/transport/mapping``, then its options, knob set and placement over
    nodes when it has them, so every section that draws one series per label keeps such cells apart.

    A stage that must name a series without one of these parts (the knob-set section: the series
    without its knob set) takes out exactly the part rendered here from the row's own column, never
    a pattern guessed at from the label's text."""
    base = f"{key.stack}/{key.transport}/{mapping_segment(key.mapping, key.nodes)}"
    return base + options_part(key.options) + knobs_part(key.knobs) + placement_part(key.placement)
