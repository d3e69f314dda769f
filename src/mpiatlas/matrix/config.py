"""Read and validate a campaign config against the schema (mpiatlas/data/config.schema.yaml).

Errors name the file, the key path and what was expected, so a typo in a
300-cell campaign is found before anything runs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mpiatlas.matrix import adaptive, knobs
from mpiatlas.matrix.kernel_sweeps import kernel_sweep_problems
from mpiatlas.node import ssh_hosts
from mpiatlas.node.topology import ALL_REGIONS, REGION_MAPPINGS
from mpiatlas.spine.campaign import Campaign, _schema

if TYPE_CHECKING:
    import jsonschema
    from jsonschema.protocols import Validator


class ConfigError(ValueError):
    """The campaign config is not valid; the message says where and why."""


def schema() -> dict[str, Any]:
    return copy.deepcopy(_schema())


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    # YAML reads unquoted on/off/yes/no as booleans: say so where a boolean is not what the key takes.
    hint = " (YAML reads unquoted on/off/yes/no as true/false: quote the value)" if isinstance(error.instance, bool) else ""
    # The failing subschema: a mapping in our schema (jsonschema also allows true/false there).
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "enum" and isinstance(error.validator_value, list):
        allowed = ", ".join(str(v) for v in error.validator_value if not isinstance(v, bool))
        return f"{error.instance!r} is not allowed; allowed values: {allowed}"
    if error.validator in ("anyOf", "oneOf", "not") and "description" in schema:
        return f"{error.instance!r} is not allowed; expected {schema['description']}{hint}"
    if error.validator == "const":
        return f"{error.instance!r} is not allowed; expected {error.validator_value!r} (or a list)"
    if error.validator == "type":
        return f"{error.message}{hint}"
    if error.validator == "additionalProperties":
        keys = sorted(schema.get("properties", {}))
        hint = f"; allowed keys: {', '.join(keys)}" if keys else ""
        return f"{error.message}{hint}"
    return error.message


def _defaults_filling_validator() -> Validator:
    """A validator of the campaign schema that fills in its defaults, so code reads one complete config."""
    import jsonschema  # only when validating: importing the cell model (a run-cell process) needs none of it

    validator_cls = jsonschema.Draft202012Validator
    validate_properties = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator: Validator, properties: dict[str, Any], instance: object, schema_: dict[str, Any]
                     ) -> Iterator[jsonschema.ValidationError]:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema_)

    # types-jsonschema leaves validators.extend unannotated; it returns a validator class.
    extended: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        validator_cls, {"properties": set_defaults})
    return extended(_schema())


# ``mappings`` and ``processes`` may say ``auto``: planned for a node by mpiatlas.campaign.auto_plan, a step
# of its own after validation, never here (so validating reads no topology and runs no cost model).
AUTO = "auto"
AUTO_KEYS = ("mappings", "processes")


def checked_document(config: Mapping[str, Any], source: str = "<config>") -> dict[str, Any]:
    """A copy of ``config`` that the schema accepted, with its defaults filled in (``auto`` lists kept as
    they are), or ConfigError naming every problem."""
    doc = config.as_dict() if isinstance(config, Campaign) else copy.deepcopy(dict(config))
    validator = _defaults_filling_validator()
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"{source}: {_key_path(e)}: {_describe(e)}" for e in errors]
        raise ConfigError("invalid campaign config:\n  " + "\n  ".join(lines))
    return doc


def unplanned_keys(doc: Mapping[str, Any]) -> list[str]:
    """The keys of ``doc`` that still say ``auto``."""
    return [key for key in AUTO_KEYS if doc.get(key) == AUTO]


def validate(config: Mapping[str, Any], source: str = "<config>") -> Campaign:
    """The typed, defaults-filled campaign of ``config``, or ConfigError naming every problem.

    Only validates: a config whose ``mappings`` or ``processes`` say ``auto`` is planned for a node first
    (:func:`mpiatlas.campaign.auto_plan.plan` validates it, plans, and hands the concrete lists here)."""
    doc = checked_document(config, source)
    if unplanned := unplanned_keys(doc):
        raise ConfigError(f"{source}: {', '.join(unplanned)}: `auto` is planned for a node before the campaign "
                          "is built (mpiatlas.campaign.auto_plan.plan, or `mpiatlas cells`/`campaign`, which run it)")
    doc["mappings"] = _expand_mappings(doc["mappings"])
    _knob_values_as_strings(doc)
    campaign = Campaign.of(doc, validate)
    _check_cross_fields(campaign, source)
    return campaign


def _expand_mappings(mappings: list[str]) -> list[str]:
    """``regions`` stands for every region mapping (same_core ... other_socket): which of them a
    compute node has is known where its cells run, and the rest end `unavailable` saying why."""
    expanded = [m for name in mappings for m in (REGION_MAPPINGS if name == ALL_REGIONS else (name,))]
    return list(dict.fromkeys(expanded))


def _check_cross_fields(config: Campaign, source: str) -> None:
    problem = adaptive.spec_problem(config.campaign.repetitions)
    if problem:
        raise ConfigError(f"{source}: campaign.repetitions: {problem}")
    lo, hi = config.imb.msglog
    if lo > hi:
        raise ConfigError(f"{source}: imb.msglog: min {lo} is larger than max {hi}")
    for i, label in enumerate(config.imb.stacks or ()):
        if label not in config.stacks:
            raise ConfigError(f"{source}: imb.stacks.{i}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config.stacks))}")
    benches = set(config.imb.benchmarks)
    # The coll kernel forces algorithms too, so its collectives may have them without IMB cells.
    kernel_colls = set((config.kernels.get("coll") or {}).get("collectives", []))
    for label, stack in config.stacks.items():
        for coll in stack.algorithms:
            if coll not in benches | kernel_colls:
                raise ConfigError(
                    f"{source}: stacks.{label}.algorithms.{coll}: {coll} is not in imb.benchmarks "
                    f"({', '.join(sorted(benches))}) nor in kernels.coll.collectives"
                )
    _check_kernels(config, source)
    _check_knobs(config, source)
    problems = ssh_hosts.check_config(config, source)
    if problems:
        raise ConfigError(problems[0])


def _knob_values_as_strings(config: dict[str, Any]) -> None:
    """Integer knob values become the strings an environment holds (the schema allows both)."""
    for env in (config.get("knobs") or {}).values():
        for var, value in env.items():
            env[var] = str(value)


def _check_knobs(config: Campaign, source: str) -> None:
    """Knob sets: variable names a stack kind reads, values without shell meaning, selections that
    name defined sets suiting their stacks (mpiatlas.matrix.knobs)."""
    sets = config.knobs
    for name, env in sets.items():
        for var, value in env.items():
            name_problem = knobs.name_problem(var)
            if name_problem:
                raise ConfigError(f"{source}: knobs.{name}.{var}: {var!r} {name_problem}")
            value_problem = knobs.value_problem(value)
            if value_problem:
                raise ConfigError(f"{source}: knobs.{name}.{var}: {value_problem}")
        kinds = sorted({stack.kind for stack in config.stacks.values()})
        if not any(knobs.suits(kind, env) for kind in kinds):
            detail = "; ".join(f"{kind} does not read {', '.join(knobs.unsuited(kind, env))}" for kind in kinds)
            raise ConfigError(f"{source}: knobs.{name}: suits no stack of this campaign ({detail})")
    for label, stack in config.stacks.items():
        names, strict = knobs.selection(config, label)
        key = f"stacks.{label}.knobs" if strict else "campaign.knobs"
        for i, name in enumerate(names):
            if name != knobs.NONE and name not in sets:
                raise ConfigError(f"{source}: {key}.{i}: no knob set {name!r}; defined (top-level knobs): "
                                  f"{', '.join(sorted(sets)) or '(none)'}, or {knobs.NONE!r} for no set")
            if strict and name != knobs.NONE and not knobs.suits(stack.kind, sets[name]):
                bad = ", ".join(knobs.unsuited(stack.kind, sets[name]))
                raise ConfigError(f"{source}: {key}.{i}: knob set {name!r} sets {bad}, which {stack.kind} does not "
                                  f"read; {stack.kind} reads {', '.join(p + '*' for p in knobs.prefixes_for(stack.kind))}")
        if not knobs.selected_sets(config, label):
            raise ConfigError(f"{source}: {key}: selects no knob set that stack {label!r} ({stack.kind}) reads, so it "
                              f"would have no cells; add {knobs.NONE!r} or give stacks.{label}.knobs")


RING_VARIANTS = ("blocking", "ssend", "nonblocking")


def _check_kernels(config: Campaign, source: str) -> None:
    """The kernels block's cross-field rules (the schema checks keys, types and ranges)."""
    kernels = config.kernels
    _check_kernel_stacks(config, kernels.get("stacks"), "kernels.stacks", source)
    for name in ("pingpong", "coll", "loggp"):
        block = kernels.get(name)
        if not block:
            continue
        _check_kernel_stacks(config, block.get("stacks"), f"kernels.{name}.stacks", source)
        lo, hi = block["msglog"]
        if lo > hi:
            raise ConfigError(f"{source}: kernels.{name}.msglog: min {lo} is larger than max {hi}")
    forced = (kernels.get("coll") or {}).get("forced_algorithms")
    for i, label in enumerate(forced if isinstance(forced, list) else []):
        if label not in config.stacks:
            raise ConfigError(f"{source}: kernels.coll.forced_algorithms.{i}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config.stacks))}")
    for i, group in enumerate((kernels.get("ring") or {}).get("variants", [])):
        parts = group.split("+")
        bad = [p for p in parts if p not in RING_VARIANTS]
        if bad or len(set(parts)) != len(parts):
            raise ConfigError(
                f"{source}: kernels.ring.variants.{i}: {group!r} is not a variant group; allowed variants: "
                f"{', '.join(RING_VARIANTS)}, or several of them joined with '+' (each at most once)")
    # The matsum/jacobi sweeps (mode lists, sizes, process grids whose product must be a P).
    problems = kernel_sweep_problems(kernels)
    if problems:
        raise ConfigError(f"{source}: {problems[0]}")


def _check_kernel_stacks(config: Campaign, chosen: Mapping[str, list[str]] | None, key: str,
                         source: str) -> None:
    """A kernel's stack -> transports choice names configured stacks and their transports."""
    for label, transports in (chosen or {}).items():
        if label not in config.stacks:
            raise ConfigError(f"{source}: {key}.{label}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config.stacks))}")
        known = config.stacks[label].transports
        for transport in transports:
            if transport not in known:
                raise ConfigError(f"{source}: {key}.{label}: transport {transport!r} is not one of "
                                  f"stacks.{label}.transports ({', '.join(known)})")


def read(path: str | Path, overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The config document of the YAML file ``path``, not yet validated, and the source its errors name
    (``overrides``: values set on top of the file, as Snakemake's ``--config`` sets them on a
    ``--configfile``, merged key by key)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    source = str(path) if not overrides else f"{path} with --config {', '.join(sorted(overrides))}"
    return merged(data, overrides or {}), source


def load(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Campaign:
    """The campaign of the YAML file ``path`` (see :func:`read`), whose lists are concrete (campaign.json
    is; a config that may say ``auto`` is loaded by :func:`mpiatlas.campaign.auto_plan.load`)."""
    return validate(*read(path, overrides))


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = merged(below, value) if isinstance(below, Mapping) and isinstance(value, Mapping) else value
    return out


def has_campaign(config: Mapping[str, Any]) -> bool:
    """Does Snakemake's ``config`` hold a campaign (a --configfile), not only a profile's or the
    command line's ``--config`` values (profiles/local sets ``grouping``)?"""
    return bool(set(config) & set(schema().get("required", [])))
