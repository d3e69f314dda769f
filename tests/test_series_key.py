"""SeriesKey: one render of a series' label, whatever stage builds it (a Cell, a tidy row, a cells-table row)."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from mpiatlas.matrix.cells import Cell
from mpiatlas.models.ring_regions import cell_label
from mpiatlas.programs.base import tag_columns
from mpiatlas.spine.series import SeriesKey, knobs_part, options_part, without_part


@pytest.mark.parametrize(("cell", "label"), [
    (Cell("imb", "intelmpi", "shm", "core", 2, "PingPong", "default", 0), "intelmpi/shm/core"),
    (Cell("imb", "intelmpi", "ofi-tcp", "node", 4, "PingPong", "default", 0, nodes=2), "intelmpi/ofi-tcp/node2"),
    (Cell("kernel", "mpich", "tcp", "core", 4, "ring", "blocking", 1, nodes=2, distribution="block"),
     "mpich/tcp/core-n2 [placement=block]"),
    (Cell("imb", "openmpi", "ob1-sm", "l3", 2, "PingPong", "default", 0, options="off_cache=-1", knobs="eager"),
     "openmpi/ob1-sm/l3 [off_cache=-1] [knobs=eager]"),
])
def test_a_cells_label_is_its_series_key_rendered(cell: Cell, label: str) -> None:
    assert cell.label == label
    assert cell.series == SeriesKey(stack=cell.stack, transport=cell.transport, mapping=cell.mapping, nodes=cell.nodes,
                                    placement=cell.distribution, options=cell.options, knobs=cell.knobs,
                                    benchmark=cell.benchmark, algorithm=cell.algorithm, np=cell.np,
                                    threads=cell.threads)
    # The tidy rows and the cells table name the series as the cell does: the placement over nodes
    # comes from the id there (a row has no distribution column of its own).
    row = {"cell": cell.id, "stack": cell.stack, "transport": cell.transport, "mapping": cell.mapping,
           "nodes": cell.nodes, "ppn": cell.ppn, "np": cell.np, "rep": cell.rep, "status": "ok",
           "options": cell.options, "knobs": cell.knobs}
    assert tag_columns(pl.DataFrame({"x": [1]}), row, {})["label"].item() == label
    assert cell_label(row) == label


def test_keys_beside_the_label_tell_series_apart_without_changing_it() -> None:
    """Version, benchmark, algorithm, np and threads sit in the tables' own columns: two keys that differ
    there only share a label but are different series."""
    a = SeriesKey("intelmpi", "shm", "core", np=2, benchmark="PingPong")
    b = SeriesKey("intelmpi", "shm", "core", np=4, benchmark="Allreduce", version="2021.14")
    assert a.label == b.label == "intelmpi/shm/core" and a != b
    assert len({a, b}) == 2  # frozen: usable as a dict key


def test_a_label_without_one_part_is_the_label_of_the_key_without_that_field() -> None:
    """What the knob-set and off-cache sections compare: the series without its knob set (or its
    options), the exact part the key rendered taken out, whatever parts follow it."""
    key = SeriesKey("mpich", "tcp", "core", nodes=2, placement="block", options="off_cache=-1", knobs="eager")
    assert key.label == "mpich/tcp/core-n2 [off_cache=-1] [knobs=eager] [placement=block]"
    assert without_part(key.label, knobs_part(key.knobs)) == replace(key, knobs="").label
    assert without_part(key.label, options_part(key.options)) == replace(key, options="").label
    assert without_part(key.label, knobs_part("")) == key.label
