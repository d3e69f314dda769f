"""The campaign matrix: a validated config expanded into cells.

A cell is one launch: stack x transport x mapping x process count x
benchmark x collective algorithm x repetition. Repetitions are separate
launches on purpose: run-to-run variance (placement, page layout, noise)
is what a user needs to see, and IMB's inner iterations hide it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mpiatlas.config import ConfigError
from mpiatlas.stacks import STACK_KINDS

# IMB runs these with exactly two active ranks; more processes would only wait.
TWO_RANK_BENCHMARKS = frozenset({"PingPong", "PingPing"})
COLLECTIVES = frozenset(
    {"Bcast", "Scatter", "Scatterv", "Gather", "Gatherv", "Reduce", "Reduce_scatter", "Allreduce",
     "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Barrier"}
)
DEFAULT_ALGORITHM = "default"


@dataclass(frozen=True, order=True)
class Cell:
    stack: str
    transport: str
    mapping: str
    np: int
    benchmark: str
    algorithm: str
    rep: int
    kind: str = "imb"

    @property
    def id(self) -> str:
        return (f"{self.kind}/{self.stack}/{self.transport}/{self.mapping}/np{self.np}/"
                f"{self.benchmark}/{self.algorithm}/rep{self.rep}")

    @property
    def label(self) -> str:
        return f"{self.stack}/{self.transport}/{self.mapping}"

    def coords(self) -> dict[str, Any]:
        return asdict(self)


def stack_prefix(config: dict[str, Any], label: str) -> str:
    stack = config["stacks"][label]
    if "prefix" in stack:
        return stack["prefix"]
    if stack.get("source", "pypi") == "system":
        return "/usr"
    return str(Path(config["campaign"]["stacks_dir"]) / label)


def imb_provider(config: dict[str, Any], label: str) -> str | None:
    """The Intel MPI stack whose IMB binaries an MPICH stack runs (MPICH ABI), if any."""
    if config["stacks"][label]["kind"] != "mpich":
        return None
    return next((name for name, s in config["stacks"].items() if s["kind"] == "intelmpi"), None)


def imb_provider_prefix(config: dict[str, Any], label: str) -> str | None:
    provider = imb_provider(config, label)
    return stack_prefix(config, provider) if provider else None


def _check_transports(config: dict[str, Any]) -> None:
    for label, stack in config["stacks"].items():
        known = STACK_KINDS.get(stack["kind"])
        if known is None:
            raise ConfigError(f"stacks.{label}.kind: {stack['kind']!r} has no launch module; known: {sorted(STACK_KINDS)}")
        for transport in stack["transports"]:
            if transport not in known.transports:
                raise ConfigError(
                    f"stacks.{label}.transports: {transport!r} is not a transport of {stack['kind']}; "
                    f"allowed values: {', '.join(sorted(known.transports))}"
                )


def algorithms_for(config: dict[str, Any], stack: str, benchmark: str) -> list[str]:
    if benchmark not in COLLECTIVES:
        return [DEFAULT_ALGORITHM]
    return list(config["stacks"][stack].get("algorithms", {}).get(benchmark, [DEFAULT_ALGORITHM]))


def process_counts(config: dict[str, Any], benchmark: str) -> list[int]:
    return [2] if benchmark in TWO_RANK_BENCHMARKS else sorted(config["processes"])


def imb_cells(config: dict[str, Any]) -> list[Cell]:
    """Every IMB cell of the campaign, in a stable order."""
    _check_transports(config)
    reps = range(config["campaign"]["repetitions"])
    cells = [
        Cell(stack, transport, mapping, np, bench, algo, rep)
        for stack, spec in config["stacks"].items()
        for transport in spec["transports"]
        for mapping in config["mappings"]
        for bench in config["imb"]["benchmarks"]
        for np in process_counts(config, bench)
        for algo in algorithms_for(config, stack, bench)
        for rep in reps
    ]
    return sorted(set(cells))


def container_spec(config: dict[str, Any], label: str) -> dict[str, Any] | None:
    """The image a cell of stack ``label`` runs in (hybrid model), or None when containers are off."""
    containers = config.get("containers") or {}
    if not containers.get("enabled"):
        return None
    images = containers.get("images_dir", "results/images").rstrip("/")
    kind = config["stacks"][label]["kind"]
    return {"image": f"{images}/{kind}.sif", "inspect": f"{images}/{kind}.inspect.json",
            "preflight": f"{images}/{label}.preflight.txt", "binds": list(containers.get("binds", []))}


def cell_spec(config: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """Everything the runner needs for one cell, JSON-ready (no config file needed at run time)."""
    stack = config["stacks"][cell.stack]
    imb = config["imb"]
    return {
        "cell": cell.coords(),
        "id": cell.id,
        "stack": {
            "label": cell.stack,
            "kind": stack["kind"],
            "source": stack.get("source", "pypi"),
            "prefix": stack_prefix(config, cell.stack),
            "imb_from": imb_provider_prefix(config, cell.stack),
        },
        "imb": {
            "msglog": list(imb["msglog"]),
            "time_s": imb["time_s"],
            "mem_gb": imb["mem_gb"],
            "iterations": imb.get("iterations"),
        },
        "container": container_spec(config, cell.stack),
        "timeout_s": config["campaign"]["timeout_s"],
        "allow_oversubscribe": config["campaign"]["allow_oversubscribe"],
    }
