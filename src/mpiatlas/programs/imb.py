"""Intel MPI Benchmarks (IMB-MPI1): one launch per cell runs every message size of one benchmark
(-msglog) with one collective algorithm; its tables become ``imb_samples`` rows.

Cells: stacks (``imb.stacks``, else every stack that can run IMB) x transports x mappings x
benchmarks x process counts (PingPong/PingPing: 2) x nodes x algorithms (collectives: the
stack's ``algorithms``) x IMB options (``imb.options``, programs.imb_options) x repetitions.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from mpiatlas.matrix import adaptive, layout
from mpiatlas.matrix.cells import (
    DEFAULT_ALGORITHM,
    Cell,
    imb_provider,
    imb_provider_prefix,
    node_counts,
    sort_cells,
    stack_prefix,
)
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.parsers.imb_lines import parse_lines
from mpiatlas.parsers.imb_shapes import ImbParseError
from mpiatlas.programs import imb_options
from mpiatlas.programs.base import (
    Measure,
    MEM_PER_JOB_MB,
    MEM_PER_RANK_MB,
    Checked,
    LaunchExtras,
    Program,
    container_binds,
    tag_columns,
)
from mpiatlas.stacks import Stack, StackError, containers
from mpiatlas.parsers.imb import parse_imb_text

if TYPE_CHECKING:
    from mpiatlas.spine.cell_row import CellRow
    from mpiatlas.spine.cell_spec import CellSpec, ImageFacts, ImbBlock, ProgramBlock, StackExtras
    from mpiatlas.spine.campaign import Campaign

# IMB runs these with exactly two active ranks; more processes would only wait.
TWO_RANK_BENCHMARKS = frozenset({"PingPong", "PingPing"})
COLLECTIVES = frozenset(
    {"Bcast", "Scatter", "Scatterv", "Gather", "Gatherv", "Reduce", "Reduce_scatter", "Allreduce",
     "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Barrier"}
)
# Statuses whose IMB output is kept (a failed launch's tables may be cut short).
SAMPLED_STATUSES = ("ok", "invalid")
# Per rank, besides the MPI library: a send and a receive buffer of the largest message per peer.
MB = 2**20


def algorithms_for(config: Campaign, stack: str, benchmark: str) -> list[str]:
    if benchmark not in COLLECTIVES:
        return [DEFAULT_ALGORITHM]
    return list(config.stacks[stack].algorithms.get(benchmark, [DEFAULT_ALGORITHM]))


def process_counts(config: Campaign, benchmark: str) -> list[int]:
    return [2] if benchmark in TWO_RANK_BENCHMARKS else sorted(config.processes)


def imb_unavailable_reason(config: Campaign, label: str) -> str | None:
    """Why stack ``label`` cannot run IMB, known before anything runs (None: it can).

    Intel MPI ships IMB in its wheel; MPICH runs Intel's IMB through the MPICH ABI, so it needs an
    Intel MPI stack in the campaign; Open MPI needs IMB built from source, which only an image with
    ``imb: build`` or an IMB the user built (MPIATLAS_IMB_OPENMPI, <prefix>/imb) provides. Such cells
    are not planned: the report states the reason once instead of showing them as failures."""
    kind = config.stacks[label].kind
    if kind == "mpich" and imb_provider(config, label) is None:
        return ("MPICH runs Intel's IMB binaries through the MPICH ABI, and the campaign has no intelmpi "
                "stack to take them from")
    if kind != "openmpi":
        return None
    image = (config.containers.stacks or {}).get("openmpi") or {}
    if config.containers.enabled and image.get("imb", "skip") == "build":
        return None
    if os.environ.get("MPIATLAS_IMB_OPENMPI") or (Path(stack_prefix(config, label)) / "imb").exists():
        return None
    return ("Open MPI needs IMB built from source, and no registry has IMB's source (no internet here); "
            "its point-to-point and collectives are measured by mpiatlas's own pingpong and coll kernels")


def imb_stacks(config: Campaign) -> list[str]:
    """Labels of the stacks with IMB cells: ``imb.stacks``, else every stack; never one that cannot
    run IMB (see :func:`imb_unavailable_reason`)."""
    chosen = config.imb.stacks
    return [label for label in config.stacks
            if (chosen is None or label in chosen) and imb_unavailable_reason(config, label) is None]


def unplanned_notes(config: Campaign) -> list[layout.UnplannedNote]:
    """One note per stack whose IMB cells were left out before the run: what, why, how many cells."""
    chosen = config.imb.stacks
    notes: list[layout.UnplannedNote] = []
    for label in config.stacks:
        reason = imb_unavailable_reason(config, label)
        if reason is None or (chosen is not None and label not in chosen):
            continue
        cells = len(sort_cells(cells_of(config, [label])))
        notes.append({"what": f"IMB cells of stack {label!r}", "why": reason, "cells": cells})
    return notes


def cells_of(config: Campaign, stacks: list[str]) -> list[Cell]:
    reps = {headline: adaptive.initial_repetitions(config, headline) for headline in (False, True)}
    options = config.imb.options
    # The option combinations depend on the options and on collective or not only: computed twice,
    # not once per (stack, transport, mapping, np, algorithm) of a 10^5-cell campaign.
    combinations = {collective: imb_options.combinations(options, collective) for collective in (False, True)}
    # A list, not a set, and not sorted here: programs.expand sorts every program's cells once (and
    # drops duplicates); a nearly sorted list sorts in linear time where a set's order costs n log n.
    return [
        Cell("imb", stack, transport, mapping, np, bench, algo, rep, nodes=nodes, options=opts)
        for stack in stacks
        for transport in config.stacks[stack].transports
        for mapping in config.mappings
        for bench in config.imb.benchmarks
        for np in process_counts(config, bench)
        for nodes in node_counts(config, mapping, np)
        for algo in algorithms_for(config, stack, bench)
        for opts in combinations[bench in COLLECTIVES]
        for rep in reps[bench in adaptive.HEADLINE_IMB]
    ]


def imb_args(benchmark: str, np: int, imb: ImbBlock) -> list[str]:
    lo, hi = imb["msglog"]
    args = [benchmark, "-msglog", f"{lo}:{hi}", "-npmin", str(np), "-time", str(imb["time_s"]), "-mem", str(imb["mem_gb"])]
    if imb.get("iterations"):
        args += ["-iter", str(imb["iterations"])]
    # The cell's own options (absent from specs written before the axis existed).
    return args + imb_options.argv(imb.get("options") or {})


def message_sizes(benchmark: str, msglog: Sequence[int]) -> int:
    """How many message sizes IMB measures for the cell (0 bytes, then 2^lo .. 2^hi)."""
    if benchmark == "Barrier":
        return 1
    lo, hi = msglog
    return hi - lo + 2


# The expected-time model of an IMB launch (Imb.expected_work_s): each message size runs
# min(-iter, IMB's volume cap / size) iterations, stopped after -time seconds; an iteration is
# modelled as `steps` messages at a deliberately slow link (TCP-class latency, 0.5 GB/s), so the
# estimate errs long on any real fabric without budgeting -time at every size, which IMB reaches
# only for large messages (that bound, work_s, stays for the scheduler's time limit).
EXPECTED_LATENCY_S = 20e-6
EXPECTED_BYTES_PER_S = 0.5e9
IMB_DEFAULT_ITERATIONS = 1000
IMB_OVERALL_VOLUME_B = 40 * 2**20
IMB_PER_SIZE_S = 0.01  # IMB's own barriers and buffer set-up around each size


def steps_per_iteration(benchmark: str, np: int) -> int:
    """Messages on the critical path of one iteration of ``benchmark`` over ``np`` ranks: a round
    trip, a tree's levels, or a rank's P-1 partners for the personalised exchanges."""
    levels = max(1, (np - 1).bit_length())
    if benchmark == "PingPong":
        return 2
    if benchmark in ("Allreduce", "Reduce_scatter", "Reduce_scatter_block", "Barrier", "Exchange"):
        return 2 * levels
    if benchmark in ("Alltoall", "Alltoallv", "Allgather", "Allgatherv"):
        return max(1, np - 1)
    return levels


def expected_imb_s(benchmark: str, np: int, msglog: Sequence[int], time_s: float,
                   iterations: int | None) -> float:
    """Expected seconds of one IMB launch's measurements (the module's model, above)."""
    lo, hi = msglog
    sizes = [0] if benchmark == "Barrier" else [0, *(2**k for k in range(lo, hi + 1))]
    steps = steps_per_iteration(benchmark, np)
    total = 0.0
    for size in sizes:
        iters = min(iterations or IMB_DEFAULT_ITERATIONS, max(1, IMB_OVERALL_VOLUME_B // max(size, 1)))
        per_iteration = steps * (EXPECTED_LATENCY_S + size / EXPECTED_BYTES_PER_S)
        total += IMB_PER_SIZE_S + min(float(time_s), iters * per_iteration)
    return total


class Imb(Program):
    name = "imb"
    kind = "imb"
    tables = (layout.IMB_SAMPLES,)
    # One row per (benchmark, processes, [group,] bytes); an IMB time-out row has no t_usec.
    measure = Measure(("benchmark", "processes", "group", "bytes"), "t_usec", (("status", "ok"),))

    def measures_a_pair(self, cell: Cell) -> bool:
        return cell.benchmark in TWO_RANK_BENCHMARKS

    def forces_an_algorithm(self, cell: Cell) -> bool:
        return cell.algorithm != DEFAULT_ALGORITHM

    def cells(self, config: Campaign) -> list[Cell]:
        return cells_of(config, imb_stacks(config))

    def stack_extras(self, config: Campaign, cell: Cell) -> StackExtras:
        # An MPICH stack runs the IMB binaries of the campaign's Intel MPI stack (MPICH ABI).
        return {"imb_from": imb_provider_prefix(config, cell.stack)}

    def spec_block(self, config: Campaign, cell: Cell) -> ProgramBlock:
        imb = config.imb
        block: ImbBlock = {"msglog": list(imb.msglog), "time_s": imb.time_s, "mem_gb": imb.mem_gb,
                           "iterations": imb.iterations}
        if cell.options:  # a cell without options keeps the spec it always had
            block["options"] = imb_options.parse_segment(cell.options)
        return {"imb": block}

    def host_argv(self, spec: CellSpec, stack: Stack) -> list[str]:
        binary = stack.imb_binary("IMB-MPI1")
        if binary is None:
            raise StackError(f"unavailable: no IMB-MPI1 for {stack.kind} (IMB source not reachable or not built)")
        cell = spec["cell"]
        return [str(binary), *imb_args(cell["benchmark"], cell["np"], spec["imb"])]

    def image_argv(self, spec: CellSpec, facts: ImageFacts) -> list[str]:
        """Hybrid model: the host launcher starts ``apptainer exec IMAGE IMB-MPI1 ...`` per rank."""
        status = facts["labels"].get("mpiatlas.imb", "")
        if status.startswith("unavailable"):
            raise StackError(f"unavailable: image {Path(facts['image']).name}: IMB {status}")
        cell = spec["cell"]
        argv = ["IMB-MPI1", *imb_args(cell["benchmark"], cell["np"], spec["imb"])]

        return containers.exec_argv(facts["image"], argv, container_binds(spec))

    def launch_extras(self, spec: CellSpec, oversubscribed: bool) -> LaunchExtras:
        cell = spec["cell"]
        collective = cell["benchmark"].lower() if cell["algorithm"] != DEFAULT_ALGORITHM else None
        return LaunchExtras(collective=collective, algorithm=cell["algorithm"])

    def check(self, spec: CellSpec, stdout: str, pins: list[int] | None,
              sets: list[tuple[int, ...]] | None) -> Outcome | Checked:
        try:
            # The plain-Python executor: checking one cell's output needs no polars (tidy reads the
            # rows later, with the same table-shape rules).
            rows = parse_lines(stdout, layout.STDOUT)
        except ImbParseError as exc:
            return Outcome("failed", str(exc))
        return Checked({"rows": len(rows)})

    def single_rank_transport(self, transport: dict[str, Any]) -> dict[str, Any]:
        # One rank has no peer: no transport is opened, so there is nothing to show or check.
        return {**transport, "transport_ok": None}

    def rows(self, cell_dir: Path, row: CellRow, prov: dict[str, Any]) -> dict[str, pl.DataFrame]:
        """Every IMB row of a cell that produced output (no averaging here), with the cell's coordinates."""
        if row["status"] not in SAMPLED_STATUSES:
            return {}
        stdout = Path(cell_dir) / layout.STDOUT
        try:
            samples = parse_imb_text(stdout.read_text(errors="replace"), str(stdout))
        except ImbParseError:
            return {}
        own = {"algorithm": (row["algorithm"], pl.String()), "options": (row.get("options") or "", pl.String())}
        return {layout.IMB_SAMPLES: tag_columns(samples, row, own)}

    def work_s(self, config: Campaign, cell: Cell) -> float | None:
        # IMB stops a message size after about -time seconds.
        imb = config.imb
        return message_sizes(cell.benchmark, imb.msglog) * float(imb.time_s)

    def expected_work_s(self, config: Campaign, cell: Cell) -> float | None:
        imb = config.imb
        return expected_imb_s(cell.benchmark, cell.np, imb.msglog, float(imb.time_s), imb.iterations)

    def mem_mb(self, config: Campaign, cell: Cell) -> int:
        """Per rank the library plus IMB's buffers (a send and a receive buffer of the largest message
        per peer, capped by IMB -mem)."""
        _, hi = config.imb.msglog
        # Off cache, each buffer spans ~2 x max(cache size, message) (IMB -help off_cache).
        cache_mib = imb_options.off_cache_mib(imb_options.parse_segment(cell.options))
        per_peer_mb = 2 * max(cache_mib, 2**hi / MB) if cache_mib else 2**hi / MB
        buffers_mb = min(float(config.imb.mem_gb) * 1024, 2 * cell.np * per_peer_mb)
        return MEM_PER_JOB_MB + cell.np * (MEM_PER_RANK_MB + int(buffers_mb + 1))
