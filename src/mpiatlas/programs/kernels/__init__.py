"""What the C kernels of src/kernels share as programs; each kernel's own axes and options are in
its module (ring, matsum, jacobi, pingpong, coll, loggp).

A kernel cell is one launch of one kernel: stack x transport x mapping x kernel x process count x
variant group (what one launch runs, named by the kernel's module) x repetition, with ``threads``
OpenMP threads per rank (jacobi's hybrid cells). Its id reads like an IMB cell's::

    kernel/intelmpi/shm/core/np3/ring/nonblocking/rep0
    kernel/openmpi/ob1-sm/core/np1/jacobi/weak-L48-t2/rep1     (1 rank x 2 OpenMP threads)
    kernel/openmpi/ob1-tcp/node2/np2/pingpong/m0-22/rep0       (the `node` mapping over 2 nodes)

The binary is the stack's host build (``results/<campaign>/kernels/<stack>/<kernel>``) or, with
``containers.enabled``, the kernel on the image's PATH run through ``apptainer exec``. Its output
is JSON lines: a cell whose launch succeeded is ``failed`` when a rank reports ``"valid": false``
or a rank's records are missing; an OpenMP thread off its plan makes it ``invalid`` (a hybrid
rank's thread i on the i-th cpu of its set, :data:`OMP_BINDING`, on one node or several), and under the likwid pinner (``campaign.pinner``) so does thread i off the i-th cpu of its rank's list.
An unbound or migrated thread makes the launch ``perturbed``, no thread evidence ``unknown``
(thread_quality).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from mpiatlas.matrix import adaptive, layout
from mpiatlas.matrix.cells import Cell, cell_pinner, node_counts, sort_cells
from mpiatlas.matrix.config import ConfigError
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.programs.base import (
    PARSED_STATUSES,
    Checked,
    LaunchExtras,
    Program,
    container_binds,
    per_cell_mem_mb,
    tag_columns,
)
from mpiatlas.stacks import Stack, StackError, containers
from mpiatlas.programs.kernels.thread_quality import thread_quality
from mpiatlas.matrix.kernel_blocks import KernelBlock, SweepBlock
from mpiatlas.matrix.kernel_sweeps import group_grid
from mpiatlas.parsers.kernels import KernelParseError, parse_kernel_file, parse_kernel_output

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec, ImageFacts, ProgramBlock
    from mpiatlas.spine.cell_row import CellRow
    from mpiatlas.spine.campaign import Campaign

# The record the kernels' build writes beside the binaries (layout.kernel_build_dir).
BUILD_RECORD = "build.json"
DEFAULT_GROUP = "default"

# Pessimistic costs for the runtime request (a loaded, tcp-only or oversubscribed node): one
# message's latency, a stream's bandwidth, one Jacobi point update on one thread. Real runs
# here are 10-100x faster; the request is capped by the launch timeout anyway.
MSG_LATENCY_S = 50e-6
BANDWIDTH_BPS = 100e6
POINT_UPDATE_S = 20e-9
DOUBLE = 8
MB = 2**20

# One launch shape of a kernel on a stack: (variant group, process counts, threads per rank).
Shape = tuple[str, list[int], int]


# util.h KU_MIN_ITERATIONS: the fewest timed calls a time budget leaves for one size.
SWEEP_MIN_ITERATIONS = 5


def sweep_work_s(block: SweepBlock, steps: float) -> float:
    """Pessimistic seconds of one pingpong/coll size sweep whose call at each size costs ``steps``
    messages (a round trip: 2; a tree collective: log2 P): warm-up and timed calls per size, the
    timed ones cut to the time budget (never below KU_MIN_ITERATIONS calls), as util.c does."""
    lo, hi = block["msglog"]
    budget_s = block["time_budget_ms"] / 1e3
    total = 0.0
    for size in (0, *(2**k for k in range(lo, hi + 1))):
        large = size > block["large_size"]
        call_s = steps * (MSG_LATENCY_S + size / BANDWIDTH_BPS)
        timed = block["iterations_large" if large else "iterations"] * call_s
        if budget_s > 0:
            timed = min(timed, max(budget_s, SWEEP_MIN_ITERATIONS * call_s))
        total += block["warmup_large" if large else "warmup"] * call_s + timed
    return total


def sweep_args(block: SweepBlock) -> list[str]:
    """The message-size sweep options of pingpong and coll (util.h's KU_SWEEP_LONGOPTS)."""
    lo, hi = block["msglog"]
    return ["--msglog", f"{lo}:{hi}", "--iterations-large", str(block["iterations_large"]),
            "--warmup-large", str(block["warmup_large"]), "--large-size", str(block["large_size"]),
            "--time-budget-ms", str(block["time_budget_ms"])]


def kernel_stacks(config: Campaign, kernel: str | None = None) -> dict[str, list[str]]:
    """stack label -> transports ``kernel`` runs over: its own ``stacks`` (pingpong, coll), else
    ``kernels.stacks``, else every stack with every transport."""
    kernels = config.kernels
    chosen = ((kernels.get(kernel) or {}).get("stacks") if kernel else None) or kernels.get("stacks")
    if chosen:
        return {label: list(transports) for label, transports in chosen.items()}
    return {label: list(spec.transports) for label, spec in config.stacks.items()}


def build_dir(config: Campaign, label: str) -> str:
    """Where the DAG builds stack ``label``'s kernels: results/<campaign>/kernels/<label>."""
    return layout.kernel_build_dir(layout.results_dir(config.campaign.name), label)


def invalid_records(frame: pl.DataFrame) -> str | None:
    """Why the kernel's own check failed (``valid: false`` on some rank), or None."""
    if "valid" not in frame.columns:
        return None
    bad = frame.filter(pl.col("valid") == False)  # noqa: E712 - polars expression, null is not false
    if bad.height == 0:
        return None
    ranks = sorted(set(bad["rank"].to_list()))
    show = [c for c in ("variant", "collective", "streams", "bytes", "topo", "dist", "mismatches", "max_rel_diff",
                        "payload_ok", "msgleft", "expected_left") if c in bad.columns]
    first = bad.row(0, named=True)
    what = ", ".join(f"{c}={first[c]}" for c in show)
    return (f"{bad.height} record(s) of rank(s) {', '.join(map(str, ranks))} report valid: false "
            f"(first: rank {first['rank']}{', ' + what if what else ''})")


# OpenMP's own binding of a hybrid rank's threads inside the cpu set the stack gave the rank: one
# place per hardware thread of the rank's affinity mask, thread i on place i (libgomp and the LLVM
# runtime build their places from the mask the process starts with). The runner sets it for every
# rank of ``threads`` > 1 bound to a set (one node or several: runner.hybrid_nodes).
OMP_BINDING = {"OMP_PLACES": "threads", "OMP_PROC_BIND": "close"}


def thread_binding_env(threads: int, sets: list[tuple[int, ...]] | None) -> dict[str, str]:
    """:data:`OMP_BINDING` for hybrid ranks the stack binds to cpu sets, {} otherwise."""
    return dict(OMP_BINDING) if threads > 1 and sets is not None else {}


def planned_thread_cpus(cpus: tuple[int, ...], threads: int) -> list[int] | None:
    """Where :data:`OMP_BINDING` puts a rank's threads: thread i on the i-th cpu of its set, in
    ascending order; None when the threads outnumber the cpus (``close`` then packs several on a place)."""
    ordered = sorted(cpus)
    return ordered[:threads] if threads <= len(ordered) else None


def thread_problems(frame: pl.DataFrame, sets: list[tuple[int, ...]] | None) -> list[str]:
    """OpenMP threads off their plan (jacobi's ``thread_cpus``, each thread's ``sched_getcpu`` on
    its rank's host): a rank of one thread inside its cpu set; a hybrid rank (bound with
    :data:`OMP_BINDING`) thread by thread, thread i on the i-th cpu of its set. One line per rank,
    with its host, the cpus seen and those planned."""
    if sets is None or "thread_cpus" not in frame.columns:
        return []
    problems = []
    columns = [c for c in ("rank", "host", "thread_cpus") if c in frame.columns]
    for row in frame.select(columns).iter_rows(named=True):
        seen = list(row["thread_cpus"] or [])
        allowed = tuple(sets[row["rank"]]) if row["rank"] < len(sets) else ()
        where = f"rank {row['rank']}" + (f" ({row['host']})" if row.get("host") else "")
        planned = planned_thread_cpus(allowed, len(seen)) if len(seen) > 1 else None
        if planned is not None and seen != planned:
            wrong = next(t for t, (got, want) in enumerate(zip(seen, planned)) if got != want)
            problems.append(f"{where}: OpenMP thread {wrong} ran on cpu {seen[wrong]}, planned cpu {planned[wrong]} "
                            f"(threads on {seen}, planned {planned})")
        elif set(seen) - set(allowed):
            problems.append(f"{where}: OpenMP threads ran on cpus {sorted(set(seen))}, outside its set "
                            f"{sorted(allowed)}")
    return problems


def threads_checked(frame: pl.DataFrame, sets: list[tuple[int, ...]] | None) -> int:
    """How many threads' cpus :func:`thread_problems` compared with a plan (0 without sets)."""
    if sets is None or "thread_cpus" not in frame.columns:
        return 0
    return sum(len(cpus or []) for cpus in frame["thread_cpus"].to_list())


def likwid_problems(frame: pl.DataFrame, sets: list[tuple[int, ...]]) -> list[str]:
    """Under the likwid pinner: OpenMP thread i of rank r on the i-th cpu of r's list, one per core
    (jacobi's ``thread_cpus``), and every record of r written on r's first cpu (every kernel's
    ``cpu``: the main thread, which likwid-pin puts there). One line per rank: its first mismatch
    (rank, thread, cpu seen, cpu planned)."""
    problems: dict[int, str] = {}
    columns = [c for c in ("rank", "cpu", "thread_cpus") if c in frame.columns]
    if "thread_cpus" not in columns and "cpu" not in columns:
        return ["the kernel reported no cpu, so the likwid pinning cannot be verified"]
    for row in frame.select(columns).iter_rows(named=True):
        rank = row["rank"]
        if rank in problems:
            continue
        planned = list(sets[rank]) if 0 <= rank < len(sets) else []
        if not planned:
            problems[rank] = f"rank {rank}: no cpu list was planned for it ({len(sets)} ranks planned)"
            continue
        seen = list(row.get("thread_cpus") or [])
        if "thread_cpus" in columns and len(seen) != len(planned):
            problems[rank] = (f"rank {rank}: {len(seen)} OpenMP thread(s) reported cpus {seen}, "
                              f"planned {len(planned)} on {planned}")
            continue
        wrong = next(((t, got, want) for t, (got, want) in enumerate(zip(seen, planned)) if got != want), None)
        if wrong is not None:
            thread, got, want = wrong
            problems[rank] = (f"rank {rank}: OpenMP thread {thread} ran on cpu {got}, planned cpu {want} "
                              f"(threads on {seen}, planned {planned})")
        elif row.get("cpu") is not None and row["cpu"] != planned[0]:
            problems[rank] = f"rank {rank}: its main thread ran on cpu {row['cpu']}, planned cpu {planned[0]}"
    return [problems[rank] for rank in sorted(problems)]


def with_grid_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``grid_explicit`` (matsum, jacobi): whether the cell's process grid was asked for
    (``procdims``, a ``-g`` group) or is the stack's MPI_Dims_create choice."""
    explicit = group_grid(str(frame["variant_group"][0])) is not None
    return frame.with_columns(pl.lit(explicit).alias("grid_explicit"))


def records_failure(frame: pl.DataFrame, np: int) -> str | None:
    """Why a kernel's records do not show every rank of the launch, or ``valid: false``, or None."""
    sizes = sorted(set(frame["size"].to_list()))
    per_rank = frame.group_by("rank").len()
    if sizes != [np] or per_rank.height != np:
        return f"expected records of {np} ranks, got sizes {sizes} from {per_rank.height} rank(s)"
    return invalid_records(frame)


class KernelProgram(Program):
    """One C kernel of src/kernels: ``name`` is its binary and its config block under ``kernels``."""

    kind = "kernel"
    threaded = True
    # Its cells time one pair of ranks (kept under region mappings with ``region_pairs_only``).
    pair: bool = False
    # A headline series (adaptive.initial_repetitions keeps the auto plan's floor of repetitions).
    headline: bool = False
    # Compiled and linked with OpenMP (the Makefile's OPENMP_KERNELS, from programs.build).
    openmp: bool = False
    # The JSON schema of its ``kernels.<name>`` config block, for a kernel the shipped schema
    # (workflow/schemas/config.schema.yaml) does not describe; added to it by programs.register.
    config_schema: Mapping[str, Any] | None = None

    @property
    def tables(self) -> tuple[str, ...]:  # type: ignore[override]
        return (layout.kernel_table(self.name),)

    # -- what each kernel says about itself ---------------------------------------------------

    @abstractmethod
    def shapes(self, config: Campaign, stack: str) -> list[Shape]:
        """(variant group, process counts, threads) of every launch shape on ``stack``."""

    @abstractmethod
    def options(self, config: Campaign, cell: Cell) -> list[str]:
        """The kernel's own options for ``cell`` (before --iterations/--warmup)."""

    def problems(self, config: Campaign) -> list[str]:
        """What is wrong with the kernel's block beyond the schema's types (its sweeps), as
        ``<key>: <why>`` lines; expanding the cells refuses a block with any."""
        return []

    def forced(self, cell: Cell) -> tuple[str | None, str | None]:
        """(collective, algorithm) the launch forces for ``cell`` (coll groups), else (None, None)."""
        return None, None

    def buffers(self, config: Campaign, cell: Cell) -> tuple[float, float]:
        """(bytes per rank, extra bytes of rank 0) of the kernel's own arrays."""
        return 0.0, 0.0

    def finish_rows(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame

    # -- the Program protocol, the same for every kernel --------------------------------------

    def configured(self, config: Campaign) -> bool:
        """Does the campaign have this kernel's block (``kernels.<name>``)?"""
        return bool(config.kernels.get(self.name))

    def block(self, config: Campaign) -> KernelBlock:
        """The kernel's ``kernels.<name>`` block as the schema validated it (defaults filled); each
        kernel narrows the type to its own block (mpiatlas.matrix.kernel_blocks)."""
        block = config.kernels.get(self.name)
        if not block:
            raise ConfigError(f"kernels.{self.name}: the campaign has no such block")
        return cast(KernelBlock, block)

    def cells(self, config: Campaign) -> list[Cell]:
        if not self.configured(config):
            return []
        problems = self.problems(config)
        if problems:
            raise ConfigError("invalid campaign config:\n  " + "\n  ".join(problems))
        reps = adaptive.initial_repetitions(config, headline=self.headline)
        pinner = cell_pinner(config)
        cells = {
            Cell("kernel", stack, transport, mapping, np, self.name, group, rep, threads, nodes=nodes, pinner=pinner)
            for stack, transports in kernel_stacks(config, self.name).items()
            for group, counts, threads in self.shapes(config, stack)
            for transport in transports
            for mapping in config.mappings
            for np in counts
            for nodes in node_counts(config, mapping, np)
            for rep in reps
        }
        return sort_cells(cells)

    def measures_a_pair(self, cell: Cell) -> bool:
        return self.pair

    def argv_options(self, config: Campaign, cell: Cell) -> list[str]:
        block = self.block(config)
        return [*self.options(config, cell), "--iterations", str(block["iterations"]), "--warmup", str(block["warmup"])]

    def spec_block(self, config: Campaign, cell: Cell) -> ProgramBlock:
        collective, algorithm = self.forced(cell)
        containerized = bool(config.containers.enabled)
        return {"kind": "kernel", "kernel": {
            "name": self.name,
            "args": self.argv_options(config, cell),
            "threads": cell.threads,
            # coll groups that force an algorithm: the stack sets it at launch (as for IMB cells).
            "collective": collective,
            "algorithm": algorithm,
            # Host build of the DAG; None when the kernel runs from the image (on its PATH).
            "build_dir": None if containerized else build_dir(config, cell.stack),
        }}

    def host_argv(self, spec: CellSpec, stack: Stack) -> list[str]:
        kernel = spec["kernel"]
        build_dir = kernel.get("build_dir")
        if not build_dir:
            raise StackError(f"no build directory for kernel {self.name!r} and no container image")
        binary = Path(build_dir).resolve() / self.name
        if not binary.is_file():
            raise StackError(f"kernel {self.name} is not built: {binary} (rule kernels_build)")
        return [str(binary), *kernel["args"]]

    def image_argv(self, spec: CellSpec, facts: ImageFacts) -> list[str]:
        listed = facts["labels"].get("mpiatlas.kernels")
        if listed is not None and self.name not in listed.split():
            raise StackError(f"unavailable: image {Path(facts['image']).name} has no kernel {self.name!r} "
                             f"(mpiatlas.kernels: {listed.strip() or 'none'})")

        argv = [self.name, *spec["kernel"]["args"]]
        return containers.exec_argv(facts["image"], argv, container_binds(spec))

    def launch_extras(self, spec: CellSpec, oversubscribed: bool) -> LaunchExtras:
        threads = int(spec["kernel"]["threads"])
        env = {"OMP_NUM_THREADS": str(threads)}
        if oversubscribed and threads > 1:
            env["OMP_WAIT_POLICY"] = "passive"  # threads sharing cores must not spin at barriers
        return LaunchExtras(spec["kernel"].get("collective"), spec["kernel"].get("algorithm"), env)

    def check(self, spec: CellSpec, stdout: str, pins: list[int] | None,
              sets: list[tuple[int, ...]] | None) -> Outcome | Checked:
        try:
            frames = parse_kernel_output(stdout, layout.STDOUT)
        except KernelParseError as exc:
            return Outcome("failed", f"kernel output: {exc}")
        frame = frames.get(self.name)
        if frame is None or frame.height == 0:
            return Outcome("failed", f"no {self.name} records in the output")
        pinning = "cpu set per rank" if sets is not None else ("cpu per rank" if pins is not None else "none")
        if spec.get("pinner") == "likwid" and sets is not None:
            details = {"records": frame.height, "threads": spec["kernel"]["threads"],
                       "pinning": "likwid-pin, a cpu per thread"}
            return Checked(details, records_failure(frame, int(spec["cell"]["np"])), likwid_problems(frame, sets))
        judged, why = thread_quality(frame, sets, int(spec["kernel"]["threads"]))
        details = {"records": frame.height, "threads": spec["kernel"]["threads"], "pinning": pinning,
                   "threads_checked": threads_checked(frame, sets),
                   **({"thread_quality": judged, "thread_quality_reason": why} if judged else {})}
        return Checked(details, records_failure(frame, int(spec["cell"]["np"])), thread_problems(frame, sets))

    def single_rank_transport(self, transport: dict[str, Any]) -> dict[str, Any]:
        if transport["obtained_transport"] is not None:
            return transport
        # One rank has no peer: most stacks only show their transport when they first use it.
        return {**transport, "transport_ok": None,
                "transport_note": "not checked: a single rank sends no message to a peer"}

    def rows(self, cell_dir: Path, row: CellRow, prov: dict[str, Any]) -> dict[str, pl.DataFrame]:
        """One row per rank per record; the record's own ``variant``/``threads`` keep their meaning,
        the cell's are ``variant_group`` and ``cell_threads``."""
        if row["status"] not in PARSED_STATUSES:
            return {}
        try:
            frame = parse_kernel_file(Path(cell_dir) / layout.STDOUT).get(self.name)
        except (KernelParseError, OSError):
            return {}
        if frame is None or frame.height == 0:
            return {}
        coords = prov.get("coords", {})
        own = {"variant_group": (coords.get("variant", row.get("algorithm")), pl.String()),
               "cell_threads": (coords.get("threads", 1), pl.Int32())}
        # Cores of the node the cell ran on (models cap the parallel work at it).
        node_cores = {"node_cores": ((prov.get("topology") or {}).get("cores"), pl.Int32())}
        return {layout.kernel_table(self.name): self.finish_rows(tag_columns(frame, row, own, node_cores))}

    def mem_mb(self, config: Campaign, cell: Cell) -> int:
        per_rank_b, root_b = self.buffers(config, cell)
        return per_cell_mem_mb(cell.np, per_rank_b / MB, root_b / MB)
