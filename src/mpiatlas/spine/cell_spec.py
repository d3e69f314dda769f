"""The cell spec: what one launch needs, as the runner, the programs and the ssh hosts read it.

JSON that crosses a process boundary (run-cell --spec, specs re-expanded in a group, decision files), so its
type is a TypedDict: the checker knows every key, the wire format is the value itself. The cell's own
coordinates are :class:`mpiatlas.spine.cell_coords.Coords`. This module imports nothing of mpiatlas outside
the spine, so any module may name the types without a circle.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from mpiatlas.spine.cell_coords import Coords


class StackSpec(TypedDict):
    label: str
    kind: str
    source: str
    prefix: str
    imb_from: NotRequired[str | None]  # IMB cells: the prefix whose IMB binaries an MPICH stack runs


class StackExtras(TypedDict, total=False):
    """What a program adds to the spec's ``stack`` block (Program.stack_extras)."""

    imb_from: str | None


class ContainerSpec(TypedDict):
    image: str
    inspect: str
    preflight: str
    binds: NotRequired[list[str]]  # absent from specs written before binds existed


class KnobsSpec(TypedDict):
    name: str
    env: dict[str, str]


class HostSpec(TypedDict):
    name: str
    slots: int | None


class SshSpec(TypedDict):
    agent: str
    config: str | None


class ImbBlock(TypedDict):
    msglog: list[int]
    time_s: float
    mem_gb: float
    iterations: int | None
    options: NotRequired[dict[str, str]]


class KernelBlock(TypedDict):
    name: str
    args: list[str]
    threads: int
    collective: str | None
    algorithm: str | None
    build_dir: str | None


class ProgramBlock(TypedDict, total=False):
    """A program's own top-level entries of the spec (Program.spec_block): ``imb`` for IMB cells,
    ``kind`` ("kernel") and ``kernel`` for kernel cells."""

    imb: ImbBlock
    kind: str
    kernel: KernelBlock


class ImageFacts(TypedDict):
    """A cell's image as the runner found it (runner.lifecycle.image_facts): its resolved path, digest
    and the labels the image build set (which programs it carries)."""

    image: str
    digest: str
    labels: dict[str, str]


class CellSpec(TypedDict):
    """Everything the runner needs for one cell (programs.cell_spec): no config file at run time."""

    cell: Coords
    id: str
    stack: StackSpec
    container: ContainerSpec | None
    timeout_s: float
    allow_oversubscribe: bool
    perturbation: dict[str, float] | None
    colocated_nodes: str
    tcp_interface: str | None
    net_devices: list[str] | None
    launcher: str
    knobs: KnobsSpec | None
    pinner: str
    hosts: NotRequired[list[HostSpec]]  # mpirun over ssh only (ssh_hosts.spec_fields)
    ssh: NotRequired[SshSpec]
    imb: NotRequired[ImbBlock]  # the program's own block: IMB cells
    kind: NotRequired[str]  # kernel cells: "kernel", and their block
    kernel: NotRequired[KernelBlock]
