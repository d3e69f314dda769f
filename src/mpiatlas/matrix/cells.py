"""The campaign matrix: a validated config expanded into cells, IMB and kernel cells alike.

A cell is one launch of one program: stack x transport x mapping x process count x benchmark
(the IMB benchmark or the kernel) x algorithm (the collective algorithm, or the kernel's variant
group) x repetition, with ``threads`` per rank and the ``nodes`` it spans. Repetitions are separate
launches on purpose: run-to-run variance (placement, page layout, noise) is what a user needs to
see, and a program's inner iterations hide it. Each program (mpiatlas.programs) knows its own
axes, and ``programs.expand`` collects them; this module holds what every cell shares: the id, the
placement, the stack's facts and the checks of the config they rest on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

from mpiatlas.node import ssh_hosts
from mpiatlas.spine.campaign import Campaign
from mpiatlas.spine.cell_coords import OPTIONAL_AXES, Coords, IdFields
from mpiatlas.spine.cell_spec import CellSpec, ContainerSpec
from mpiatlas.spine.series import (KNOBS_SEGMENT_PREFIX, OVER_NODES_SEPARATOR, PLACEMENT_SEGMENT_PREFIX, SeriesKey,
                                   mapping_segment)
from mpiatlas.matrix.config import ConfigError
from mpiatlas.stacks import STACK_KINDS, collectives
from mpiatlas.node.topology import REGION_MAPPINGS

DEFAULT_ALGORITHM = "default"


# Slots: a 177k-cell campaign holds every cell in Snakemake's process; without a __dict__ a cell
# takes ~110 bytes instead of ~160 (CPython 3.11), and its fields read faster.
# Its fields as JSON are mpiatlas.spine.cell_coords.CellFields (tests/test_cell_coords.py holds the two together):
# a new coordinate goes there too, and into OptionalAxes when a cell names it only when set.
@dataclass(frozen=True, order=True, slots=True)
class Cell:
    kind: str  # imb | kernel
    stack: str
    transport: str
    mapping: str
    np: int
    benchmark: str  # the IMB benchmark, or the kernel
    algorithm: str  # the collective algorithm, or the kernel's variant group
    rep: int
    # OpenMP threads per rank (kernels' hybrid cells); 1 otherwise.
    threads: int = 1
    # Nodes the ranks are spread over: the `node` mapping (np / nodes ranks on each), or a spread
    # mapping over nodes (core-n2: ranks fill nodes in the mapping's order, :func:`fills_nodes`); 1 otherwise.
    nodes: int = 1
    # IMB options of the cell, as its id segment (``off_cache=-1``; programs.imb_options); "" for
    # IMB's defaults and for kernels.
    options: str = ""
    # The knob set (named environment variables, mpiatlas.matrix.knobs) the cell runs with; "" for none.
    knobs: str = ""
    # Who pins the ranks when it is not the stack (campaign.pinner: ``likwid``, kernel cells only); "" for
    # the stack: a pinner changes where threads run, so it is part of what a cell measures.
    pinner: str = ""
    # Ranks over nodes (campaign ``placement``): "" for cyclic (rank i on node i mod nodes, what
    # multi-node cells always did), ``block`` for a node filled before the next (rank i on node i // ppn).
    distribution: str = ""

    @property
    def id(self) -> str:
        return (f"{self.kind}/{self.stack}/{self.transport}/{self.placement}/np{self.np}/"
                f"{self.benchmark}/{self.algorithm}/{self.axes_segments}rep{self.rep}")

    @property
    def axes_segments(self) -> str:
        """The id's segments of the optional axes, each ending in ``/``; "" without options, knobs
        and pinner, so such a cell keeps the id it had before these axes existed (sealed results resolve)."""
        return axes_segments(self.options, self.knobs, self.pinner, self.distribution)

    @property
    def ppn(self) -> int:
        """Ranks per node of the `node` mapping: the most a node holds, np / nodes rounded up (round-robin
        as ``--map-by node``: 3 over 2 is 2 + 1); a cell that fills nodes has no one count per node."""
        return -(-self.np // self.nodes)

    @property
    def fills_nodes(self) -> bool:
        return fills_nodes(self.mapping, self.nodes)

    @property
    def placement(self) -> str:
        """The mapping as a path segment: ``node2`` for the `node` mapping over 2 nodes."""
        return mapping_segment(self.mapping, self.nodes)

    @property
    def series(self) -> SeriesKey:
        return SeriesKey(stack=self.stack, transport=self.transport, mapping=self.mapping, nodes=self.nodes,
                         placement=self.distribution, options=self.options, knobs=self.knobs,
                         benchmark=self.benchmark, algorithm=self.algorithm, np=self.np, threads=self.threads)

    @property
    def label(self) -> str:
        return self.series.label

    # A kernel cell's names for its benchmark and algorithm (kept in its provenance's coords).
    @property
    def kernel(self) -> str:
        return self.benchmark

    @property
    def variant(self) -> str:
        return self.algorithm

    @property
    def cores(self) -> int:
        return self.np * self.threads

    def coords(self) -> Coords:
        """The cell's coordinates as provenance.json stores them (each kind keeps its own shape)."""
        coords = asdict(self)
        # The optional axes appear only when set: a cell without them records what it always did.
        for axis in OPTIONAL_AXES:
            if not coords[axis]:
                del coords[axis]
        if self.kind == "imb":
            del coords["threads"]  # IMB cells never had threads
            return cast(Coords, coords)
        return cast(Coords, {**coords, "kernel": self.benchmark, "variant": self.algorithm})


# The cells' order (their fields in order): a C-level key, since sorting 10^5 cells through the
# dataclass's own __lt__ takes tens of seconds.
_ORDER = attrgetter(*(f.name for f in fields(Cell)))


def sort_cells(cells: Iterable[Cell]) -> list[Cell]:
    """``cells`` in the campaign's order (Cell's field order), without duplicates.

    No set: hashing 10^5 cells costs as much as sorting them, and a set's order is random, which
    makes the sort pay n log n comparisons; the cells mostly arrive sorted (each program's, then
    their concatenation), where the sort is linear. Equal cells are adjacent once sorted."""
    ordered = sorted(cells, key=_ORDER)
    unique: list[Cell] = []
    previous: tuple[Any, ...] | None = None
    for key, cell in zip(map(_ORDER, ordered), ordered):
        if key != previous:
            unique.append(cell)
            previous = key
    return unique


def fills_nodes(mapping: str, nodes: int) -> bool:
    """Does a cell of ``mapping`` over ``nodes`` nodes fill them (a spread mapping such as core,
    socket over several nodes: every P up to nodes x cores, ranks per node not fixed), rather than
    split its ranks evenly (the `node` mapping)?"""
    return nodes > 1 and mapping != "node"


def parse_mapping_segment(segment: str) -> tuple[str, int]:
    """``node2`` -> ("node", 2); ``core`` -> ("core", 1); ``l3`` -> ("l3", 1); ``core-n2`` ->
    ("core", 2): the inverse of :func:`mapping_segment`."""
    match = re.fullmatch(r"node(\d+)", segment)
    if match is not None:
        return "node", int(match.group(1))
    match = re.fullmatch(rf"([a-z][a-z0-9_]*){OVER_NODES_SEPARATOR}(\d+)", segment)
    if match is not None and int(match.group(2)) > 1:
        return match.group(1), int(match.group(2))
    if re.fullmatch(r"[a-z][a-z0-9_]*", segment) is None:
        raise ValueError(f"{segment!r} is not a mapping segment (e.g. core, l3, socket, node2, core-n2)")
    return segment, 1


# The pinner's id segment (``pinner=likwid``), only for a pinner other than the stack.
PINNER_SEGMENT_PREFIX = "pinner="
DEFAULT_PINNER = "stack"
DEFAULT_DISTRIBUTION = "cyclic"
DISTRIBUTIONS = ("cyclic", "block")


def axes_segments(options: str, knobs: str, pinner: str = "", distribution: str = "") -> str:
    """The id segments of a cell's IMB options, knob set, pinner and placement over nodes, each
    with its trailing ``/``."""
    return ((f"{options}/" if options else "") + (f"{KNOBS_SEGMENT_PREFIX}{knobs}/" if knobs else "")
            + (f"{PINNER_SEGMENT_PREFIX}{pinner}/" if pinner else "")
            + (f"{PLACEMENT_SEGMENT_PREFIX}{distribution}/" if distribution else ""))


def distribution_of_id(cell_id: str) -> str:
    """The ``placement=`` segment's value of a cell id ("" for cyclic, or no such segment)."""
    return next((part[len(PLACEMENT_SEGMENT_PREFIX):] for part in cell_id.split("/")
                 if part.startswith(PLACEMENT_SEGMENT_PREFIX)), "")


def cell_distribution(distribution: str) -> str:
    """A cell's ``distribution`` field for a placement over nodes: "" for the default (cyclic)."""
    if distribution not in DISTRIBUTIONS:
        raise ConfigError(f"placement: {distribution!r} is not a placement over nodes; choose one of {DISTRIBUTIONS}")
    return "" if distribution == DEFAULT_DISTRIBUTION else distribution


def cell_pinner(config: Campaign) -> str:
    """The ``pinner`` field of a kernel cell under ``campaign.pinner``: "" for the stack's own binding."""
    pinner = config.campaign.pinner
    return "" if pinner == DEFAULT_PINNER else pinner


def parse_id(cell_id: str) -> IdFields:
    """The coordinates an id names: kind, stack, transport, mapping, nodes, np, benchmark, algorithm,
    rep, and the IMB ``options``, ``knobs`` set, ``pinner`` and ``distribution`` ("" when the id has none)."""
    parts = cell_id.split("/")
    if not 8 <= len(parts) <= 12:
        raise ValueError(f"{cell_id!r} is not a cell id (<kind>/<stack>/<transport>/<placement>/np<P>/"
                         "<benchmark>/<algorithm>/[<options>/][knobs=<set>/][pinner=<p>/][placement=block/]rep<r>)")
    kind, stack, transport, placement, np, benchmark, algorithm = parts[:7]
    extra, rep = parts[7:-1], parts[-1]
    distribution = (extra.pop()[len(PLACEMENT_SEGMENT_PREFIX):]
                    if extra and extra[-1].startswith(PLACEMENT_SEGMENT_PREFIX) else "")
    pinner = extra.pop()[len(PINNER_SEGMENT_PREFIX):] if extra and extra[-1].startswith(PINNER_SEGMENT_PREFIX) else ""
    knobs = extra.pop()[len(KNOBS_SEGMENT_PREFIX):] if extra and extra[-1].startswith(KNOBS_SEGMENT_PREFIX) else ""
    options = extra.pop() if extra and "=" in extra[-1] else ""
    segment_prefixes = (KNOBS_SEGMENT_PREFIX, PINNER_SEGMENT_PREFIX, PLACEMENT_SEGMENT_PREFIX)
    if extra or (options and options.startswith(segment_prefixes)):
        raise ValueError(f"{cell_id!r}: {'/'.join(parts[7:-1])!r} is not "
                         "[<options>/][knobs=<set>/][pinner=<p>/][placement=block/]")
    mapping, nodes = parse_mapping_segment(placement)
    return {"kind": kind, "stack": stack, "transport": transport, "mapping": mapping, "nodes": nodes,
            "np": int(np.removeprefix("np")), "benchmark": benchmark, "algorithm": algorithm,
            "rep": int(rep.removeprefix("rep")), "options": options, "knobs": knobs, "pinner": pinner,
            "distribution": distribution}


# -- stacks --------------------------------------------------------------------------------------


def stack_prefix(config: Campaign, label: str) -> str:
    stack = config.stacks[label]
    if stack.prefix is not None:
        return stack.prefix
    if stack.source == "system":
        return "/usr"
    return str(Path(config.campaign.stacks_dir) / label)


def imb_provider(config: Campaign, label: str) -> str | None:
    """The Intel MPI stack whose IMB binaries an MPICH stack runs (MPICH ABI), if any."""
    return imb_provider_among({name: s.kind for name, s in config.stacks.items()}, label)


def imb_provider_among(kinds: Mapping[str, str], label: str) -> str | None:
    """:func:`imb_provider` over stack label -> kind (a config document not validated here)."""
    if kinds[label] != "mpich":
        return None
    return next((name for name, kind in kinds.items() if kind == "intelmpi"), None)


def imb_provider_prefix(config: Campaign, label: str) -> str | None:
    provider = imb_provider(config, label)
    return stack_prefix(config, provider) if provider else None


def container_spec(config: Campaign, label: str) -> ContainerSpec | None:
    """The image a cell of stack ``label`` runs in (hybrid model), or None when containers are off."""
    containers = config.containers
    if not containers.enabled:
        return None
    images = containers.images_dir.rstrip("/")
    kind = config.stacks[label].kind
    return {"image": f"{images}/{kind}.sif", "inspect": f"{images}/{kind}.inspect.json",
            "preflight": f"{images}/{label}.preflight.txt", "binds": list(containers.binds or ())}


# -- validation and axes shared by the programs --------------------------------------------------


def check_transports(config: Campaign) -> None:
    for label, stack in config.stacks.items():
        known = STACK_KINDS.get(stack.kind)
        if known is None:
            raise ConfigError(f"stacks.{label}.kind: {stack.kind!r} has no launch module; known: {sorted(STACK_KINDS)}")
        for transport in stack.transports:
            if transport not in known.transports:
                raise ConfigError(
                    f"stacks.{label}.transports: {transport!r} is not a transport of {stack.kind}; "
                    f"allowed values: {', '.join(sorted(known.transports))}"
                )


def known_algorithms(kind: str, collective: str) -> set[str]:
    """Every algorithm name any packaged version of ``kind`` accepts (the exact version is checked at launch)."""
    names = {DEFAULT_ALGORITHM}
    for version in collectives.available_tables().get(kind, []):
        names |= set(collectives.algorithms(kind, version, collective))
    return names


def check_algorithms(config: Campaign) -> None:
    for label, stack in config.stacks.items():
        for coll, requested in stack.algorithms.items():
            known = known_algorithms(stack.kind, coll)
            unknown = [a for a in requested if a not in known]
            if unknown:
                raise ConfigError(
                    f"stacks.{label}.algorithms.{coll}: {', '.join(map(repr, unknown))} not known for "
                    f"{stack.kind}; allowed values: {', '.join(sorted(known))}"
                )


def node_counts(config: Campaign, mapping: str, np: int) -> list[int]:
    """The node counts a cell of ``np`` ranks runs over: for `node`, every configured m (``nodes``)
    with a rank for each node, round-robin as ``--map-by node`` (3 over 2: 2 + 1); none for a region
    mapping unless np is 2; for a spread mapping (core, l3, die, numa, socket) every m of ``over_nodes``
    (1 by default): over m >= 2 nodes any np is planned, the ranks fill the nodes (runner.plan checks np
    against m x cores where the cell runs, the only place that knows a node's cores). What is left out
    is said by :func:`unplanned_node_counts`."""
    if mapping in REGION_MAPPINGS:
        return [1] if np == 2 else []  # a region places a pair of ranks: only 2-rank cells have one
    if mapping != "node":
        return sorted(config.over_nodes)
    return [m for m in config.nodes if m <= np]


def unplanned_node_counts(config: Campaign, mapping: str, np: int) -> list[str]:
    """Why ``mapping`` plans no cell of ``np`` ranks over some configured node count, one line per
    count left out (the complement of :func:`node_counts`)."""
    if mapping in REGION_MAPPINGS:
        return [] if np == 2 else [f"mapping {mapping!r} places one pair of ranks in a region: P = {np} has no "
                                   "such pair (only P = 2 runs)"]
    if mapping != "node":
        return []
    return [f"mapping 'node' over {m} nodes needs a rank on each node: P = {np} < {m}"
            for m in config.nodes if m > np]


def hybrid_fit_problem(mapping: str, nodes: int, np: int, threads: int, cores: int,
                       allow_oversubscribe: bool) -> str | None:
    """Why ``np`` ranks of ``threads`` threads (a hybrid cell) cannot run over ``nodes`` nodes of ``cores``
    cores each, or None: a rank needs its threads' cores on one node; the `node` mapping puts np / nodes
    ranks on every node (more threads than cores only when oversubscription is on); a spread mapping
    filling nodes (core-n2) holds cores // threads such ranks a node and is never oversubscribed. The
    runner (runner.hybrid_nodes) refuses by this rule where the cell runs; the matrix leaves such cells
    out beforehand when the config names the nodes' ``topology``."""
    if threads > cores:
        return f"a rank of {threads} threads needs {threads} cores; a node has {cores}"
    if mapping == "node":
        ppn = -(-np // nodes)  # the most ranks a node holds
        if ppn * threads > cores and not allow_oversubscribe:
            return f"{ppn} ranks x {threads} threads per node > {cores} cores and oversubscription is off"
        return None
    per_node = cores // threads
    if np > nodes * per_node:
        return (f"{np} ranks x {threads} threads do not fit {nodes} nodes x {cores} cores ({per_node} such ranks "
                "per node; a cell filling nodes is never oversubscribed)")
    return None


def region_pairs_only(config: Campaign) -> bool:
    """Whether the region mappings' cells are the 2-rank measurements only (PingPong, PingPing, the
    pingpong kernel): so under ``mappings: auto`` (mpiatlas.campaign.auto_plan records it), which
    plans one pair per region, not every program again per region."""
    return config.auto is not None and config.auto.get("region_cells") == "pairs"


def forced_algorithms_max_np(config: Campaign) -> int | None:
    """The largest P at which forced-algorithm cells are planned, None for every P: ``mappings: auto``'s
    time budget (mpiatlas.campaign.auto_plan records it) cuts the algorithm sweeps at large P first."""
    return config.auto.get("algorithms_max_np") if config.auto is not None else None



def cell_from_id(cells: list[Cell], cell_id: str) -> Cell:
    for cell in cells:
        if cell.id == cell_id:
            return cell
    raise ValueError(f"{cell_id} is not a cell of this campaign")


def cell_spec_base(config: Campaign, cell: Cell) -> CellSpec:
    """What every cell's spec holds, whatever its program (programs.cell_spec adds the program's block)."""
    stack = config.stacks[cell.stack]
    run = config.campaign
    spec: CellSpec = {
        "cell": cell.coords(),
        "id": cell.id,
        "stack": {"label": cell.stack, "kind": stack.kind, "source": stack.source,
                  "prefix": stack_prefix(config, cell.stack)},
        "container": container_spec(config, cell.stack),
        "timeout_s": run.timeout_s,
        "allow_oversubscribe": run.allow_oversubscribe,
        # When the launch counts as perturbed (mpiatlas.stats.quality; runner.lifecycle judges it at sealing).
        "perturbation": asdict(run.perturbation),
        # Multi-node cells: placement on co-located nodes and the inter-node interface; which ranks
        # share a node is the cell's own ``distribution`` (in spec["cell"]).
        "colocated_nodes": run.colocated_nodes,
        "tcp_interface": stack.tcp_interface,
        # InfiniBand/RoCE ports (mlx5_0:1) the stack's RDMA transports use (stacks.fabrics).
        "net_devices": None if stack.net_devices is None else list(stack.net_devices),
        # auto|mpirun|srun; "auto" is resolved where the cell runs (runner.plan.resolve_launcher).
        "launcher": run.launcher,
        # The knob set's variables, applied over everything else at launch (runner.knob_overlay); None without.
        "knobs": {"name": cell.knobs, "env": dict(config.knobs[cell.knobs])} if cell.knobs else None,
        # Who pins the ranks: the stack, or likwid-pin around each rank (runner.likwid_pin).
        "pinner": cell.pinner or DEFAULT_PINNER,
    }
    # mpirun over ssh: the hosts and the ssh agent (mpiatlas.node.ssh_hosts); absent without hosts.
    remote = ssh_hosts.spec_fields(config)
    if remote is not None:
        spec["hosts"], spec["ssh"] = remote
    return spec
