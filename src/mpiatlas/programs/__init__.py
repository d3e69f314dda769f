"""The benchmark programs mpiatlas runs, and the campaign matrix they make together.

``REGISTRY`` maps a program's name to its instance: IMB, and one module per C kernel under
``programs/kernels``. Adding a kernel (or another benchmark suite) is one module here plus its
C file: the matrix, the runner, the workflow, the build (the Makefile's list of kernels), tidy, the
kernel models' inputs, ``mpiatlas compare`` and the report's kernel sections read this registry;
:func:`register` adds a program defined elsewhere.

* :mod:`.base` — the Program protocol every benchmark implements;
* :mod:`.imb` — the Intel MPI Benchmarks; :mod:`.imb_options` — IMB's own options (e.g. ``-off_cache``);
* :mod:`.build` — compiling the C kernels per stack;
* :mod:`.kernels` — the C kernels, one module each.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from itertools import chain
from typing import TYPE_CHECKING, cast

from mpiatlas.matrix import knobs
from mpiatlas.matrix.layout import UnplannedNote
from mpiatlas.matrix.cells import (
    DEFAULT_DISTRIBUTION,
    Cell,
    cell_distribution,
    cell_spec_base,
    check_algorithms,
    check_transports,
    forced_algorithms_max_np,
    hybrid_fit_problem,
    region_pairs_only,
    sort_cells,
    unplanned_node_counts,
)
from mpiatlas.programs.base import Program
from mpiatlas.programs.imb import TWO_RANK_BENCHMARKS, Imb
from mpiatlas.programs.imb import unplanned_notes as imb_unplanned_notes
from mpiatlas.programs.kernels import KernelProgram
from mpiatlas.programs.kernels.coll import Coll
from mpiatlas.programs.kernels.jacobi import Jacobi
from mpiatlas.programs.kernels.loggp import Loggp
from mpiatlas.programs.kernels.matsum import Matsum
from mpiatlas.programs.kernels.pingpong import Pingpong
from mpiatlas.programs.kernels.ring import Ring
from mpiatlas.node.topology import REGION_MAPPINGS
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.spine.campaign import add_kernel_block_schema, remove_kernel_block_schema

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec
    from mpiatlas.spine.campaign import Campaign

REGISTRY: dict[str, Program] = {p.name: p for p in (Imb(), Ring(), Matsum(), Jacobi(), Pingpong(), Coll(), Loggp())}


def register(program: Program) -> None:
    """Add ``program`` to the registry, after the others (the order of the matrix, the build, the
    tables and the report's sections); a kernel's ``config_schema`` joins the campaign schema's
    ``kernels`` block. The shipped programs are registered above; this is the entry point for one
    defined elsewhere (a test's, a site's own kernel)."""
    if program.name in REGISTRY:
        raise ValueError(f"a program named {program.name!r} is already registered")
    REGISTRY[program.name] = program
    if isinstance(program, KernelProgram) and program.config_schema is not None:
        add_kernel_block_schema(program.name, program.config_schema)


def unregister(name: str) -> Program:
    """Take the program ``name`` out of the registry (and its kernel block out of the schema)."""
    program = REGISTRY.pop(name)
    if isinstance(program, KernelProgram) and program.config_schema is not None:
        remove_kernel_block_schema(name)
    return program


@contextmanager
def registered(program: Program) -> Iterator[Program]:
    """``program`` in the registry for the duration of a ``with`` block."""
    register(program)
    try:
        yield program
    finally:
        unregister(program.name)


def kernel_names() -> tuple[str, ...]:
    """The C kernels of the registry, in the order they are built and tabled."""
    return tuple(name for name, p in REGISTRY.items() if isinstance(p, KernelProgram))


def modelled_kernels() -> tuple[str, ...]:
    """The kernels whose tables the kernel models read (mpiatlas.models.kernels), in registry order."""
    return tuple(name for name, p in REGISTRY.items() if isinstance(p, KernelProgram) and p.modelled)


def kernel_programs() -> list[KernelProgram]:
    """The registry's C kernels, in registry order."""
    return [p for p in REGISTRY.values() if isinstance(p, KernelProgram)]


def program_named(kind: str, benchmark: str) -> Program | None:
    """The program of a cell of ``kind`` running ``benchmark`` (None: no such program here)."""
    return REGISTRY.get("imb" if kind == "imb" else benchmark)


def program_of(cell: Cell) -> Program:
    """The program a cell launches: IMB, or its kernel."""
    return REGISTRY["imb" if cell.kind == "imb" else cell.benchmark]


def program_of_spec(spec: CellSpec) -> Program:
    """The program of a cell spec (programs.cell_spec): its ``kernel`` block names a kernel."""
    return REGISTRY[spec["kernel"]["name"]] if "kernel" in spec else REGISTRY["imb"]


def expand(config: Campaign) -> list[Cell]:
    """Every cell of every registered program, validated (transports, algorithms), sorted; each
    once per knob set its stack runs with (mpiatlas.matrix.knobs: an axis of every program's cells), and
    over nodes once per ranks per node and placement (``ppn``, ``placement``)."""
    check_transports(config)
    check_algorithms(config)
    cells: Iterable[Cell] = chain.from_iterable(program.cells(config) for program in REGISTRY.values())
    if region_pairs_only(config):
        cells = (c for c in cells if c.mapping not in REGION_MAPPINGS or program_of(c).measures_a_pair(c))
    if (cap := forced_algorithms_max_np(config)) is not None:
        cells = (c for c in cells if c.np <= cap or not program_of(c).forces_an_algorithm(c))
    cells = (c for c in with_node_axes(config, cells) if hybrid_unplanned(config, c) is None)
    return sort_cells(with_knob_sets(config, cells))


@functools.cache
def _node_cores(spec: str) -> int:
    return read_topology(spec).n_cores


def hybrid_unplanned(config: Campaign, cell: Cell) -> str | None:
    """Why a hybrid cell over nodes cannot run on the nodes the config's ``topology`` describes
    (:func:`mpiatlas.matrix.cells.hybrid_fit_problem`), or None: such cells are not planned. Without a
    ``topology`` the nodes' cores are known only where a cell runs, and the runner refuses it there."""
    spec = config.topology
    if cell.threads <= 1 or cell.nodes <= 1 or not spec:
        return None
    return hybrid_fit_problem(cell.mapping, cell.nodes, cell.np, cell.threads, _node_cores(str(spec)),
                              bool(config.campaign.allow_oversubscribe))


def unplanned_notes(config: Campaign) -> list[UnplannedNote]:
    """What was left out before the run: IMB cells of stacks that cannot run IMB (programs.imb, a note
    per stack), and hybrid cells over nodes the config's ``topology`` cannot hold (one note, its
    distinct reasons in one line)."""
    notes = imb_unplanned_notes(config) + mapping_unplanned_notes(config)
    if not config.topology:
        return notes
    reasons: dict[str, int] = {}
    every = chain.from_iterable(program.cells(config) for program in REGISTRY.values() if program.threaded)
    for cell in with_node_axes(config, every):
        why = hybrid_unplanned(config, cell)
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
    if not reasons:
        return notes
    return [*notes, {"what": f"hybrid cells over nodes of {config.topology}",
                     "why": "; ".join(reasons), "cells": sum(reasons.values())}]


def mapping_unplanned_notes(config: Campaign) -> list[UnplannedNote]:
    """A note per reason a mapping plans no cell at a P some program asks for (a region mapping at
    P != 2, the `node` mapping over more nodes than ranks): the cells each program makes at that P
    on one node (under `core`, once per knob set) are the cells left out, so none goes silently."""
    if not any(unplanned_node_counts(config, m, 1) for m in config.mappings):
        return []  # P = 1 is the fewest ranks: a mapping that places it places every P
    plain = config.revised(mappings=["core"], over_nodes=[1])
    every = chain.from_iterable(program.cells(plain) for program in REGISTRY.values())
    per_np = Counter(c.np for c in with_knob_sets(plain, every))
    reasons: dict[str, int] = {}
    for mapping in config.mappings:
        for np, count in sorted(per_np.items()):
            for why in unplanned_node_counts(config, mapping, np):
                reasons[why] = reasons.get(why, 0) + count
    return [{"what": "cells of a mapping at a process count it cannot place", "why": why, "cells": count}
            for why, count in reasons.items()]


def with_node_axes(config: Campaign, cells: Iterable[Cell]) -> Iterable[Cell]:
    """``cells``, the multi-node ones under the ``ppn`` and ``placement`` axes.

    ``ppn`` (ranks per node): a node cell is kept when np / nodes is one of them; an IMB two-rank
    benchmark (PingPong, PingPing: ranks 0 and 1 measure, the others wait in IMB's barrier) runs
    with nodes x ppn ranks, so where ranks 0 and 1 sit -- one node or two -- is the placement's doing.
    ``placement`` (cyclic | block): each node cell with more than one rank per node once per
    placement (one rank per node places alike either way: once, as cyclic). Without these keys
    every cell stays as it was (ids unchanged). A spread mapping over nodes (core-n2: ranks fill the
    nodes, :func:`mpiatlas.matrix.cells.fills_nodes`) has no fixed ranks per node: ``ppn`` does not
    apply to it, and it runs once per placement at every P, 1 included (one series per placement)."""
    ppns, placements = config.ppn, config.placement
    if ppns is None and placements == (DEFAULT_DISTRIBUTION,):
        return cells
    distributions = [cell_distribution(p) for p in placements]

    def expand_one(cell: Cell) -> Iterable[Cell]:
        if cell.nodes == 1:
            yield cell
            return
        if cell.fills_nodes:
            # P = 1 too: it places alike either way, but each placement's series then starts at P = 1.
            yield from [replace(cell, distribution=d) for d in distributions]
            return
        if ppns is None:
            shapes = [cell]
        elif cell.kind == "imb" and cell.benchmark in TWO_RANK_BENCHMARKS:
            shapes = [replace(cell, np=cell.nodes * k) for k in ppns]
        else:
            shapes = [cell] if cell.ppn in ppns else []
        for shape in shapes:
            yield from [replace(shape, distribution=d) for d in distributions] if shape.ppn > 1 else [shape]
    return chain.from_iterable(expand_one(cell) for cell in cells)


def with_knob_sets(config: Campaign, cells: Iterable[Cell]) -> Iterable[Cell]:
    """``cells``, each once per knob set selected for its stack ("" keeps the cell as it is)."""
    if not config.knobs:
        return cells  # no knob set defined: every cell as it always was, at no cost
    sets = {label: knobs.selected_sets(config, label) for label in config.stacks}
    return (cell if name == "" else replace(cell, knobs=name) for cell in cells for name in sets[cell.stack])


def cell_spec(config: Campaign, cell: Cell) -> CellSpec:
    """Everything the runner needs for one cell, JSON-ready (no config file needed at run time):
    what every cell shares, and its program's own block (``imb`` or ``kernel``)."""
    program = program_of(cell)
    spec = cell_spec_base(config, cell)
    extras = program.stack_extras(config, cell)
    if "imb_from" in extras:  # StackExtras' one key, typed alike in StackSpec
        spec["stack"]["imb_from"] = extras["imb_from"]
    return cast("CellSpec", {**spec, **program.spec_block(config, cell)})


def tables() -> list[str]:
    """Every tidy table a program fills, in registry order."""
    return [table for program in REGISTRY.values() for table in program.tables]


def cells_of_kind(config: Campaign, kind: str) -> list[Cell]:
    """The campaign's cells of one kind (``imb`` or ``kernel``), validated and sorted."""
    return [cell for cell in expand(config) if cell.kind == kind]
