"""A campaign cell's coordinates as typed records: one definition that every record of a cell builds on.

A cell (mpiatlas.matrix.cells.Cell) is written down in several records: its id (:class:`IdFields`), a
round decision (:class:`CellFields`, mpiatlas.campaign.round_decision), the spec and provenance.json
(:class:`Coords`) and the cells table's row (mpiatlas.spine.cell_row.CellRow). Each extends
:class:`CellAxes`, so a coordinate every cell has is added here once. This module imports nothing of
mpiatlas, so any module may name the types without a circle.
"""

# No `from __future__ import annotations`: evaluated annotations let TypedDict see NotRequired, so
# __required_keys__ and __optional_keys__ tell the truth at run time (tests/test_cell_coords.py reads them).
from typing import NotRequired, TypedDict


class CellAxes(TypedDict):
    """The coordinates every record of a cell holds, whatever its kind and whenever it was written (what
    each means: the Cell dataclass's comments)."""

    kind: str
    stack: str
    transport: str
    mapping: str
    np: int
    benchmark: str
    algorithm: str
    rep: int
    nodes: int


class OptionalAxes(TypedDict):
    """The axes a cell names only when set ("" when not): a cell without them keeps the id and the provenance
    it had before they existed, so sealed results still resolve."""

    options: str
    knobs: str
    pinner: str
    distribution: str


# Their names in order (Cell.coords leaves out the unset ones).
OPTIONAL_AXES: tuple[str, ...] = tuple(OptionalAxes.__annotations__)


class IdFields(CellAxes, OptionalAxes):
    """What a cell id names (mpiatlas.matrix.cells.parse_id): every Cell field but ``threads``, which no id holds."""


class CellFields(IdFields):
    """Every field of a Cell (dataclasses.asdict), so that ``Cell(**fields)`` is the cell again."""

    threads: int


class Coords(CellAxes):
    """A cell's coordinates (Cell.coords) as the spec and provenance.json hold them: each kind keeps the shape
    it always had, so the optional axes appear only when set and ``threads`` only for kernel cells.

    The optional axes are :class:`OptionalAxes` again, not inherited from it: a TypedDict cannot make an
    inherited key optional (typing has no ``Partial``). tests/test_cell_coords.py holds the two lists together.
    """

    threads: NotRequired[int]  # kernel cells only
    options: NotRequired[str]
    knobs: NotRequired[str]
    pinner: NotRequired[str]
    distribution: NotRequired[str]
    kernel: NotRequired[str]  # kernel cells: their benchmark and algorithm under the kernel's own names
    variant: NotRequired[str]
