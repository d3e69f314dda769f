"""Kernel cells: the ``kernels:`` block of a campaign expanded into launches of src/kernels.

A kernel cell is one launch of one kernel: stack x transport x mapping x kernel x process
count x variant group x repetition. Its id reads like an IMB cell's, with the same eight
parts (so every tool that splits an id keeps working)::

    kernel/<stack>/<transport>/<mapping>/np<P>/ring/<variant group>/rep<r>
    kernel/intelmpi/shm/core/np3/ring/nonblocking/rep0
    kernel/intelmpi/shm/core/np4/matsum/t1-slab/rep2
    kernel/openmpi/ob1-sm/core/np1/jacobi/weak-L48-t2/rep1     (1 rank x 2 OpenMP threads)
    kernel/openmpi/ob1-tcp/node2/np2/pingpong/m0-22/rep0       (the `node` mapping over 2 nodes)

Variant groups, i.e. what one launch runs:

* ring: each entry of ``ring.variants`` (``nonblocking``, or ``nonblocking+blocking+ssend`` to
  run several in one launch); every ``streams`` x ``bytes`` combination runs in that launch;
* matsum: ``t<topos>-<dists>`` (every topo x dist combination in one launch, e.g. ``t1-slab``);
* jacobi: ``<mode>-L<L>-t<threads>`` (or ``-N<N>-``): ``processes`` gives the pure MPI cells
  (t1), ``hybrid.processes`` x ``hybrid.threads`` the MPI + OpenMP ones;
* pingpong: ``m<lo>-<hi>`` (the whole size sweep in one launch), always 2 ranks;
* coll: ``default`` (every configured collective, the stack's own algorithms) and, for the
  stacks of ``forced_algorithms``, ``<collective>-<algorithm>`` per non-default algorithm of
  ``stacks.<label>.algorithms`` (e.g. ``bcast-binomial``): that collective only, launched with
  ``LaunchSpec(collective=..., algorithm=...)`` like an IMB cell of that algorithm.

``pingpong`` and ``coll`` may choose their own ``stacks`` (else ``kernels.stacks``): they are
mpiatlas's OSU-style point-to-point and collective measurements, run on every stack so that
Open MPI, which has no IMB here, is measured too, and the others cross-check against IMB.

A cell needs ``np x threads`` cores; more than the node has is allowed (campaign
``allow_oversubscribe``) and labelled ``oversubscribed`` by the runner.

The `node` mapping spreads a cell's ranks over m nodes exactly as for IMB cells
(``matrix.node_counts``: every configured m that divides np; rank i on node i mod m), so its
id carries the placement segment (``node2``) and its batch job spans m nodes.

``kernel_spec`` is the JSON the runner gets (like ``matrix.cell_spec``: no config file needed
at run time): the stack, the kernel's argument list, threads, where the host build is (or the
image, when ``containers.enabled``), timeout, oversubscription and launcher.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from mpiatlas import layout, matrix

KERNEL_NAMES: tuple[str, ...] = ("ring", "matsum", "jacobi", "pingpong", "coll")
# The collectives of the coll kernel: config name (IMB's, as in stacks.<label>.algorithms) -> kernel name.
COLL_COLLECTIVES: dict[str, str] = {"Bcast": "bcast", "Allreduce": "allreduce", "Alltoall": "alltoall"}
DEFAULT_GROUP = "default"
# The record the kernels' build writes beside the binaries (layout.kernel_build_dir).
BUILD_RECORD = "build.json"


@dataclass(frozen=True, order=True)
class KernelCell(matrix.PlacedCell):
    stack: str
    transport: str
    mapping: str
    np: int
    kernel: str
    variant: str
    rep: int
    threads: int = 1
    kind: str = "kernel"
    # Nodes the ranks are spread over (the `node` mapping, as matrix.Cell.nodes); 1 otherwise.
    nodes: int = 1

    @property
    def id(self) -> str:
        return (f"{self.kind}/{self.stack}/{self.transport}/{self.placement}/np{self.np}/"
                f"{self.kernel}/{self.variant}/rep{self.rep}")

    # The IMB names of the two id parts, so tables and tools that know IMB cells read kernel cells too.
    @property
    def benchmark(self) -> str:
        return self.kernel

    @property
    def algorithm(self) -> str:
        return self.variant

    @property
    def cores(self) -> int:
        return self.np * self.threads

    def coords(self) -> dict[str, Any]:
        return {**asdict(self), "benchmark": self.kernel, "algorithm": self.variant}


# -- variant groups -------------------------------------------------------------------------


def _triplet(value: int | list[int]) -> list[int]:
    return [int(value)] * 3 if isinstance(value, int) else [int(v) for v in value]


def _size_name(value: int | list[int]) -> str:
    x = _triplet(value)
    return str(x[0]) if len(set(x)) == 1 else "x".join(map(str, x))


def matsum_group(matsum: dict[str, Any]) -> str:
    return f"t{''.join(str(t) for t in matsum['topo'])}-{'+'.join(matsum['dist'])}"


def jacobi_group(jacobi: dict[str, Any], threads: int) -> str:
    size = "L" if jacobi["mode"] == "weak" else "N"
    return f"{jacobi['mode']}-{size}{_size_name(jacobi[size])}-t{threads}"


def pingpong_group(pingpong: dict[str, Any]) -> str:
    lo, hi = pingpong["msglog"]
    return f"m{lo}-{hi}"


def forces_algorithms(coll: dict[str, Any], stack: str) -> bool:
    forced = coll.get("forced_algorithms", True)
    return stack in forced if isinstance(forced, list) else bool(forced)


def coll_groups(config: dict[str, Any], stack: str) -> list[str]:
    """``default``, then ``<collective>-<algorithm>`` for every forced algorithm of ``stack``."""
    coll = config["kernels"]["coll"]
    groups = [DEFAULT_GROUP]
    if forces_algorithms(coll, stack):
        algorithms = config["stacks"][stack].get("algorithms", {})
        groups += [f"{COLL_COLLECTIVES[name]}-{algo}" for name in coll["collectives"]
                   for algo in algorithms.get(name, []) if algo != matrix.DEFAULT_ALGORITHM]
    return groups


def coll_group_parts(group: str) -> tuple[str | None, str]:
    """``bcast-binomial`` -> (``bcast``, ``binomial``); ``default`` -> (None, ``default``).

    Collective names have no '-', algorithm names may: split at the first one."""
    if group == DEFAULT_GROUP:
        return None, matrix.DEFAULT_ALGORITHM
    collective, _, algorithm = group.partition("-")
    if collective not in COLL_COLLECTIVES.values() or not algorithm:
        raise ValueError(f"{group!r} is not a coll group (default or <collective>-<algorithm>)")
    return collective, algorithm


def _groups(config: dict[str, Any], kernel: str, stack: str) -> list[tuple[str, list[int], int]]:
    """(variant group, process counts, threads) of every launch shape of ``kernel`` on ``stack``."""
    block = config["kernels"][kernel]
    if kernel == "ring":
        return [(group, list(block["processes"]), 1) for group in block["variants"]]
    if kernel == "matsum":
        return [(matsum_group(block), list(block["processes"]), 1)]
    if kernel == "jacobi":
        out = [(jacobi_group(block, 1), list(block["processes"]), 1)]
        hybrid = block.get("hybrid")
        if hybrid:
            out += [(jacobi_group(block, t), list(hybrid["processes"]), t) for t in hybrid["threads"]]
        return out
    if kernel == "pingpong":
        return [(pingpong_group(block), [2], 1)]  # a ping-pong has exactly two ranks
    if kernel == "coll":
        return [(group, list(block["processes"]), 1) for group in coll_groups(config, stack)]
    raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNEL_NAMES)}")


def kernel_stacks(config: dict[str, Any], kernel: str | None = None) -> dict[str, list[str]]:
    """stack label -> transports ``kernel`` runs over: its own ``stacks`` (pingpong, coll), else
    ``kernels.stacks``, else every stack with every transport."""
    kernels = config.get("kernels") or {}
    chosen = ((kernels.get(kernel) or {}).get("stacks") if kernel else None) or kernels.get("stacks")
    if chosen:
        return {label: list(transports) for label, transports in chosen.items()}
    return {label: list(spec["transports"]) for label, spec in config["stacks"].items()}


def kernel_cells(config: dict[str, Any]) -> list[KernelCell]:
    """Every kernel cell of the campaign, in a stable order ([] without a ``kernels`` block)."""
    kernels = config.get("kernels") or {}
    names = [name for name in KERNEL_NAMES if kernels.get(name)]
    if not names:
        return []
    matrix._check_transports(config)
    if "coll" in names:
        matrix._check_algorithms(config)  # forced coll algorithms must exist, as for IMB cells
    reps = range(config["campaign"]["repetitions"])
    cells = {
        KernelCell(stack, transport, mapping, np, kernel, group, rep, threads, nodes=nodes)
        for kernel in names
        for stack, transports in kernel_stacks(config, kernel).items()
        for group, counts, threads in _groups(config, kernel, stack)
        for transport in transports
        for mapping in config["mappings"]
        for np in counts
        for nodes in matrix.node_counts(config, mapping, np)
        for rep in reps
    }
    return sorted(cells)


def build_labels(config: dict[str, Any]) -> list[str]:
    """Stacks whose kernels the DAG builds on the host (none when the images carry them)."""
    if (config.get("containers") or {}).get("enabled"):
        return []
    return sorted({c.stack for c in kernel_cells(config)})


def build_dir(config: dict[str, Any], label: str) -> str:
    """Where the DAG builds stack ``label``'s kernels: results/<campaign>/kernels/<label>."""
    return layout.kernel_build_dir(layout.results_dir(config["campaign"]["name"]), label)


def build_outputs(config: dict[str, Any], label: str) -> list[str]:
    """The files the build rule of stack ``label`` makes: every kernel binary, then the record."""
    out = build_dir(config, label)
    return [f"{out}/{name}" for name in KERNEL_NAMES] + [f"{out}/{BUILD_RECORD}"]


# -- one cell ------------------------------------------------------------------------------------


def kernel_args(config: dict[str, Any], cell: KernelCell) -> list[str]:
    """The kernel's own options for ``cell`` (after the binary name)."""
    kernels = config["kernels"]
    if cell.kernel == "ring":
        ring = kernels["ring"]
        args = ["--variant", ",".join(cell.variant.split("+")), "--streams", ",".join(map(str, ring["streams"])),
                "--bytes", ",".join(map(str, ring["bytes"]))]
    elif cell.kernel == "matsum":
        matsum = kernels["matsum"]
        args = ["--dims", ",".join(map(str, matsum["dims"])), "--topo", ",".join(map(str, matsum["topo"])),
                "--dist", ",".join(matsum["dist"])]
    elif cell.kernel == "jacobi":
        jacobi = kernels["jacobi"]
        size = "L" if jacobi["mode"] == "weak" else "N"
        args = ["--mode", jacobi["mode"], f"--{size}", ",".join(map(str, _triplet(jacobi[size]))),
                "--threads", str(cell.threads)]
        if jacobi.get("check", True):
            args.append("--check")
    elif cell.kernel == "pingpong":
        args = sweep_args(kernels["pingpong"])
    elif cell.kernel == "coll":
        coll = kernels["coll"]
        forced, _ = coll_group_parts(cell.variant)
        names = [forced] if forced else [COLL_COLLECTIVES[name] for name in coll["collectives"]]
        args = ["--collective", ",".join(names), *sweep_args(coll)]
    else:
        raise ValueError(f"unknown kernel {cell.kernel!r}; known: {', '.join(KERNEL_NAMES)}")
    block = kernels[cell.kernel]
    return [*args, "--iterations", str(block["iterations"]), "--warmup", str(block["warmup"])]


def sweep_args(block: dict[str, Any]) -> list[str]:
    """The message-size sweep options of pingpong and coll (util.h's KU_SWEEP_LONGOPTS)."""
    lo, hi = block["msglog"]
    return ["--msglog", f"{lo}:{hi}", "--iterations-large", str(block["iterations_large"]),
            "--warmup-large", str(block["warmup_large"]), "--large-size", str(block["large_size"]),
            "--time-budget-ms", str(block["time_budget_ms"])]


def launch_collective(cell: KernelCell) -> tuple[str | None, str | None]:
    """(collective, algorithm) the launch forces for ``cell`` (coll groups), else (None, None)."""
    if cell.kernel != "coll":
        return None, None
    collective, algorithm = coll_group_parts(cell.variant)
    return (collective, algorithm) if collective else (None, None)


def kernel_spec(config: dict[str, Any], cell: KernelCell) -> dict[str, Any]:
    """Everything the kernel runner needs for one cell, JSON-ready (see matrix.cell_spec)."""
    stack = config["stacks"][cell.stack]
    container = matrix.container_spec(config, cell.stack)
    return {
        "kind": "kernel",
        "cell": cell.coords(),
        "id": cell.id,
        "stack": {
            "label": cell.stack,
            "kind": stack["kind"],
            "source": stack.get("source", "pypi"),
            "prefix": matrix.stack_prefix(config, cell.stack),
        },
        "kernel": {
            "name": cell.kernel,
            "args": kernel_args(config, cell),
            "threads": cell.threads,
            # coll groups that force an algorithm: the stack sets it at launch (as for IMB cells).
            "collective": launch_collective(cell)[0],
            "algorithm": launch_collective(cell)[1],
            # Host build of the DAG; None when the kernel runs from the image (on its PATH).
            "build_dir": None if container else build_dir(config, cell.stack),
        },
        "container": container,
        "timeout_s": config["campaign"]["timeout_s"],
        "allow_oversubscribe": config["campaign"]["allow_oversubscribe"],
        # Multi-node cells: placement on co-located nodes and the inter-node interface, as for IMB.
        "colocated_nodes": config["campaign"].get("colocated_nodes", "spread"),
        "tcp_interface": stack.get("tcp_interface"),
        "launcher": config["campaign"].get("launcher", "auto"),
    }


def cell_from_id(cells: list[KernelCell], cell_id: str) -> KernelCell:
    for cell in cells:
        if cell.id == cell_id:
            return cell
    raise ValueError(f"{cell_id} is not a kernel cell of this campaign")


# -- scheduler resources of a kernel cell (profiles/slurm) ---------------------------------------
#
# Like IMB cells (matrix.job_group): kernel cells that need the same allocation -- stack,
# transport, placement, ranks and threads per rank -- form one Snakemake group, which Snakemake
# cuts into batch jobs of campaign.cells_per_job cells among the cells still to run, one after
# another in the job (workflow/rules/kernels.smk). Groups never mix IMB and kernel cells.
KERNEL_GROUP = "kernel_{stack}_{transport}_{mapping}_np{np}_t{threads}"

# Pessimistic costs for the runtime request (a loaded, tcp-only or oversubscribed node): one
# message's latency, a stream's bandwidth, one Jacobi point update on one thread. Real runs
# here are 10-100x faster; the request is capped by the launch timeout anyway.
MSG_LATENCY_S = 50e-6
BANDWIDTH_BPS = 100e6
POINT_UPDATE_S = 20e-9
DOUBLE = 8


def kernel_nodes(cell: KernelCell) -> int:
    """Nodes a kernel cell's allocation spans (``cell.nodes``: >1 only for the `node` mapping)."""
    return cell.nodes


def job_group(cell: KernelCell) -> str:
    return KERNEL_GROUP.format(stack=cell.stack, transport=cell.transport, mapping=cell.placement, np=cell.np,
                               threads=cell.threads)


def slurm_extra(config: dict[str, Any], cell: KernelCell) -> str:
    """sbatch options beyond tasks/cpus_per_task/nodes/mem/runtime: ranks per node, whole nodes."""
    return matrix.slurm_extra(config, cell)  # reads only cell.ppn and cell.mapping


def _grid_points(jacobi: dict[str, Any], np: int) -> tuple[float, float]:
    """(points per rank, global points) of a Jacobi launch."""
    if jacobi["mode"] == "weak":
        per_rank = float(math.prod(_triplet(jacobi["L"])))
        return per_rank, per_rank * np
    total = float(math.prod(_triplet(jacobi["N"])))
    return total / np, total


def estimate_work_s(config: dict[str, Any], cell: KernelCell) -> float | None:
    """Pessimistic seconds of one launch's own work (timed and warm-up iterations, the Jacobi
    serial check), from the kernel's config block; None for a kernel this does not model."""
    block = config["kernels"].get(cell.kernel) or {}
    rounds = int(block.get("iterations", 0)) + int(block.get("warmup", 0))
    if cell.kernel == "ring":
        # One exchange = P steps; each step moves `streams` messages of `bytes` per rank.
        step_s = sum(MSG_LATENCY_S + s * b / BANDWIDTH_BPS for s in block["streams"] for b in block["bytes"])
        return len(cell.variant.split("+")) * rounds * cell.np * step_s
    if cell.kernel == "matsum":
        # Rank 0 scatters A and B and gathers C whole, once per iteration and topo x dist.
        moved_s = 3 * DOUBLE * math.prod(_triplet(block["dims"])) / BANDWIDTH_BPS + cell.np * MSG_LATENCY_S
        return len(block["topo"]) * len(block["dist"]) * rounds * moved_s
    if cell.kernel == "jacobi":
        per_rank, total = _grid_points(block, cell.np)
        sweep_s = per_rank * POINT_UPDATE_S / cell.threads + 6 * MSG_LATENCY_S
        check_s = total * POINT_UPDATE_S * rounds if block.get("check", True) else 0.0
        return rounds * sweep_s + check_s
    return None


def estimate_runtime_min(config: dict[str, Any], cell: KernelCell, attempt: int = 1) -> int:
    """Minutes to request for one kernel cell: its pessimistic work x matrix.RUNTIME_SAFETY plus
    the per-cell overhead, never more than the launch timeout (the runner kills it there) plus
    that overhead, at least matrix.RUNTIME_FLOOR_MIN; an unmodelled kernel gets the ceiling.
    ``attempt`` > 1 (a Snakemake retry) scales it up."""
    ceiling_s = float(config["campaign"]["timeout_s"]) + matrix.RUNTIME_OVERHEAD_S
    work_s = estimate_work_s(config, cell)
    if work_s is None:
        seconds = ceiling_s
    else:
        seconds = min(ceiling_s, matrix.RUNTIME_OVERHEAD_S + matrix.RUNTIME_SAFETY * work_s)
    return max(matrix.RUNTIME_FLOOR_MIN, -(-int(seconds * max(1, attempt)) // 60))


def estimate_mem_mb(config: dict[str, Any], cell: KernelCell) -> int:
    """Memory for one kernel cell: per rank the MPI library and the kernel's arrays, rank 0's
    whole matrices (matsum) or serial check grid (jacobi), and the job's Snakemake."""
    block = config["kernels"].get(cell.kernel) or {}
    per_rank_b = root_b = 0.0
    if cell.kernel == "ring":
        per_rank_b = 4.0 * max(block["bytes"])  # send + receive buffer, both directions
    elif cell.kernel == "matsum":
        whole = DOUBLE * math.prod(_triplet(block["dims"]))
        per_rank_b, root_b = 3.0 * whole / cell.np, 3.0 * whole
    elif cell.kernel == "jacobi":
        per_rank, total = _grid_points(block, cell.np)
        per_rank_b = 2.0 * DOUBLE * per_rank * 1.2  # two grids, plus halo layers
        root_b = 2.0 * DOUBLE * total if block.get("check", True) else 0.0
    mb = 2**20
    return int(matrix.MEM_PER_JOB_MB + cell.np * (matrix.MEM_PER_RANK_MB + per_rank_b / mb) + root_b / mb + 1)


def batch_jobs(config: dict[str, Any], cells: list[KernelCell]) -> int:
    """How many batch jobs the kernel cells need under a scheduler profile."""
    size = int(config["campaign"].get("cells_per_job", 20))
    counts: dict[str, int] = {}
    for cell in cells:
        counts[job_group(cell)] = counts.get(job_group(cell), 0) + 1
    return sum(-(-n // size) for n in counts.values())
