"""Kernel cells: the ``kernels:`` block of a campaign expanded into launches of src/kernels.

A kernel cell is one launch of one kernel: stack x transport x mapping x kernel x process
count x variant group x repetition. Its id reads like an IMB cell's, with the same eight
parts (so every tool that splits an id keeps working)::

    kernel/<stack>/<transport>/<mapping>/np<P>/ring/<variant group>/rep<r>
    kernel/intelmpi/shm/core/np3/ring/nonblocking/rep0
    kernel/intelmpi/shm/core/np4/matsum/t1-slab/rep2
    kernel/openmpi/ob1-sm/core/np1/jacobi/weak-L48-t2/rep1     (1 rank x 2 OpenMP threads)

Variant groups, i.e. what one launch runs:

* ring: each entry of ``ring.variants`` (``nonblocking``, or ``nonblocking+blocking+ssend`` to
  run several in one launch); every ``streams`` x ``bytes`` combination runs in that launch;
* matsum: ``t<topos>-<dists>`` (every topo x dist combination in one launch, e.g. ``t1-slab``);
* jacobi: ``<mode>-L<L>-t<threads>`` (or ``-N<N>-``): ``processes`` gives the pure MPI cells
  (t1), ``hybrid.processes`` x ``hybrid.threads`` the MPI + OpenMP ones.

A cell needs ``np x threads`` cores; more than the node has is allowed (campaign
``allow_oversubscribe``) and labelled ``oversubscribed`` by the runner.

``kernel_spec`` is the JSON the runner gets (like ``matrix.cell_spec``: no config file needed
at run time): the stack, the kernel's argument list, threads, where the host build is (or the
image, when ``containers.enabled``), timeout, oversubscription and launcher.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mpiatlas import matrix

KERNEL_NAMES: tuple[str, ...] = ("ring", "matsum", "jacobi")
# Where the DAG builds each stack's kernels (workflow/rules/kernels.smk): <dir>/<stack label>/.
KERNEL_BUILD_DIR = "results/kernels"
BUILD_RECORD = "build.json"


@dataclass(frozen=True, order=True)
class KernelCell:
    stack: str
    transport: str
    mapping: str
    np: int
    kernel: str
    variant: str
    rep: int
    threads: int = 1
    kind: str = "kernel"

    @property
    def id(self) -> str:
        return (f"{self.kind}/{self.stack}/{self.transport}/{self.mapping}/np{self.np}/"
                f"{self.kernel}/{self.variant}/rep{self.rep}")

    @property
    def label(self) -> str:
        return f"{self.stack}/{self.transport}/{self.mapping}"

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


def _groups(kernels: dict[str, Any]) -> list[tuple[str, str, list[int], int]]:
    """(kernel, variant group, process counts, threads) of every configured launch shape."""
    out: list[tuple[str, str, list[int], int]] = []
    ring = kernels.get("ring")
    if ring:
        out += [("ring", group, list(ring["processes"]), 1) for group in ring["variants"]]
    matsum = kernels.get("matsum")
    if matsum:
        out.append(("matsum", matsum_group(matsum), list(matsum["processes"]), 1))
    jacobi = kernels.get("jacobi")
    if jacobi:
        out.append(("jacobi", jacobi_group(jacobi, 1), list(jacobi["processes"]), 1))
        hybrid = jacobi.get("hybrid")
        if hybrid:
            out += [("jacobi", jacobi_group(jacobi, t), list(hybrid["processes"]), t) for t in hybrid["threads"]]
    return out


def kernel_stacks(config: dict[str, Any]) -> dict[str, list[str]]:
    """stack label -> transports the kernels run over (``kernels.stacks``, default all)."""
    chosen = (config.get("kernels") or {}).get("stacks")
    if chosen:
        return {label: list(transports) for label, transports in chosen.items()}
    return {label: list(spec["transports"]) for label, spec in config["stacks"].items()}


def kernel_cells(config: dict[str, Any]) -> list[KernelCell]:
    """Every kernel cell of the campaign, in a stable order ([] without a ``kernels`` block)."""
    kernels = config.get("kernels") or {}
    groups = _groups(kernels)
    if not groups:
        return []
    matrix._check_transports(config)
    reps = range(config["campaign"]["repetitions"])
    cells = {
        KernelCell(stack, transport, mapping, np, kernel, group, rep, threads)
        for stack, transports in kernel_stacks(config).items()
        for transport in transports
        for mapping in config["mappings"]
        for kernel, group, counts, threads in groups
        for np in counts
        for rep in reps
    }
    return sorted(cells)


def build_labels(config: dict[str, Any]) -> list[str]:
    """Stacks whose kernels the DAG builds on the host (none when the images carry them)."""
    if (config.get("containers") or {}).get("enabled"):
        return []
    return sorted({c.stack for c in kernel_cells(config)})


def build_dir(label: str) -> str:
    return f"{KERNEL_BUILD_DIR}/{label}"


def build_outputs(label: str) -> list[str]:
    """The files the build rule of stack ``label`` makes: the three binaries, then the record."""
    return [f"{build_dir(label)}/{name}" for name in KERNEL_NAMES] + [f"{build_dir(label)}/{BUILD_RECORD}"]


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
    else:
        raise ValueError(f"unknown kernel {cell.kernel!r}; known: {', '.join(KERNEL_NAMES)}")
    block = kernels[cell.kernel]
    return [*args, "--iterations", str(block["iterations"]), "--warmup", str(block["warmup"])]


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
            # Host build of the DAG; None when the kernel runs from the image (on its PATH).
            "build_dir": None if container else build_dir(cell.stack),
        },
        "container": container,
        "timeout_s": config["campaign"]["timeout_s"],
        "allow_oversubscribe": config["campaign"]["allow_oversubscribe"],
        "launcher": config["campaign"].get("launcher", "auto"),
    }


def cell_from_id(cells: list[KernelCell], cell_id: str) -> KernelCell:
    for cell in cells:
        if cell.id == cell_id:
            return cell
    raise ValueError(f"{cell_id} is not a kernel cell of this campaign")
