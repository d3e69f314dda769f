"""A cell's coordinates are defined once (mpiatlas.spine.cell_coords) and match the Cell dataclass:
a coordinate added to one and not the other fails here, not in a sealed campaign's files."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

from mpiatlas.campaign.adaptive_rounds import cell_coords
from mpiatlas.matrix.cells import Cell, parse_id
from mpiatlas.spine.cell_coords import OPTIONAL_AXES, CellAxes, CellFields, Coords, IdFields

# A kernel cell with every field off its default, and an IMB cell with none.
EVERY_AXIS = Cell("kernel", "ompi", "ob1-vader", "node", 4, "jacobi", "overlap", 2, threads=3, nodes=2,
                  options="off_cache=-1", knobs="eager", pinner="likwid", distribution="block")
NO_AXIS = Cell("imb", "intelmpi", "shm", "core", 2, "PingPong", "default", 0)


def test_a_cell_as_json_has_the_fields_of_cell_fields_and_reads_back_as_the_cell() -> None:
    assert CellFields.__required_keys__ == {f.name for f in fields(Cell)} and not CellFields.__optional_keys__
    for cell in (EVERY_AXIS, NO_AXIS):
        assert Cell(**json.loads(json.dumps(cell_coords(cell)))) == cell


def test_the_optional_axes_are_the_cell_fields_that_default_to_empty() -> None:
    # The axes a cell names only when set are its fields whose default is "": Cell.coords and the id drop them.
    assert tuple(f.name for f in fields(Cell) if f.default == "") == OPTIONAL_AXES
    assert set(CellAxes.__required_keys__) == {f.name for f in fields(Cell)} - {*OPTIONAL_AXES, "threads"}


def test_an_id_names_every_field_but_threads() -> None:
    assert IdFields.__required_keys__ == CellFields.__required_keys__ - {"threads"}
    for cell in (EVERY_AXIS, NO_AXIS):
        assert parse_id(cell.id) == {k: v for k, v in asdict(cell).items() if k != "threads"}


def test_provenance_coords_hold_the_axes_only_when_set() -> None:
    assert Coords.__required_keys__ == CellAxes.__required_keys__
    assert Coords.__optional_keys__ == {*OPTIONAL_AXES, "threads", "kernel", "variant"}
    assert set(EVERY_AXIS.coords()) == Coords.__required_keys__ | Coords.__optional_keys__
    assert EVERY_AXIS.coords()["distribution"] == "block" and EVERY_AXIS.coords()["threads"] == 3
    assert set(NO_AXIS.coords()) == CellAxes.__required_keys__  # an IMB cell records what it always did
