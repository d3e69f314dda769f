"""Load and validate a campaign config against workflow/schemas/config.schema.yaml.

Errors name the file, the key path and what was expected, so a typo in a
300-cell campaign is found before anything runs.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import jsonschema


class ConfigError(ValueError):
    """The campaign config is not valid; the message says where and why."""


def schema() -> dict[str, Any]:
    text = resources.files("mpiatlas").joinpath("data/config.schema.yaml").read_text()
    # The C loader where libyaml is there: the pure-Python one takes ~60 ms on the schema.
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "enum":
        return f"{error.instance!r} is not allowed; allowed values: {', '.join(map(str, error.validator_value))}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{error.message}{hint}"
    return error.message


def _with_defaults(validator_cls: type) -> type:
    """A validator that fills in schema defaults, so code reads one complete config."""
    import jsonschema  # only when validating: importing the cell model (a run-cell process) needs none of it

    validate_properties = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema_):  # type: ignore[no-untyped-def]
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema_)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


def validate(config: dict[str, Any], source: str = "<config>") -> dict[str, Any]:
    """Return a defaults-filled copy of ``config`` or raise ConfigError naming every problem."""
    import jsonschema

    config = copy.deepcopy(config)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"{source}: {_key_path(e)}: {_describe(e)}" for e in errors]
        raise ConfigError("invalid campaign config:\n  " + "\n  ".join(lines))
    _check_cross_fields(config, source)
    return config


def _check_cross_fields(config: dict[str, Any], source: str) -> None:
    lo, hi = config["imb"]["msglog"]
    if lo > hi:
        raise ConfigError(f"{source}: imb.msglog: min {lo} is larger than max {hi}")
    for i, label in enumerate(config["imb"].get("stacks", [])):
        if label not in config["stacks"]:
            raise ConfigError(f"{source}: imb.stacks.{i}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config['stacks']))}")
    benches = set(config["imb"]["benchmarks"])
    # The coll kernel forces algorithms too, so its collectives may have them without IMB cells.
    kernel_colls = set(((config.get("kernels") or {}).get("coll") or {}).get("collectives", []))
    for label, stack in config["stacks"].items():
        for coll in stack.get("algorithms", {}):
            if coll not in benches | kernel_colls:
                raise ConfigError(
                    f"{source}: stacks.{label}.algorithms.{coll}: {coll} is not in imb.benchmarks "
                    f"({', '.join(sorted(benches))}) nor in kernels.coll.collectives"
                )
    _check_kernels(config, source)


RING_VARIANTS = ("blocking", "ssend", "nonblocking")


def _check_kernels(config: dict[str, Any], source: str) -> None:
    """The kernels block's cross-field rules (the schema checks keys, types and ranges)."""
    kernels = config.get("kernels") or {}
    _check_kernel_stacks(config, kernels.get("stacks"), "kernels.stacks", source)
    for name in ("pingpong", "coll"):
        block = kernels.get(name)
        if not block:
            continue
        _check_kernel_stacks(config, block.get("stacks"), f"kernels.{name}.stacks", source)
        lo, hi = block["msglog"]
        if lo > hi:
            raise ConfigError(f"{source}: kernels.{name}.msglog: min {lo} is larger than max {hi}")
    forced = (kernels.get("coll") or {}).get("forced_algorithms")
    for i, label in enumerate(forced if isinstance(forced, list) else []):
        if label not in config["stacks"]:
            raise ConfigError(f"{source}: kernels.coll.forced_algorithms.{i}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config['stacks']))}")
    for i, group in enumerate((kernels.get("ring") or {}).get("variants", [])):
        parts = group.split("+")
        bad = [p for p in parts if p not in RING_VARIANTS]
        if bad or len(set(parts)) != len(parts):
            raise ConfigError(
                f"{source}: kernels.ring.variants.{i}: {group!r} is not a variant group; allowed variants: "
                f"{', '.join(RING_VARIANTS)}, or several of them joined with '+' (each at most once)")
    jacobi = kernels.get("jacobi")
    if jacobi:
        size, other = ("L", "N") if jacobi["mode"] == "weak" else ("N", "L")
        if other in jacobi:
            raise ConfigError(f"{source}: kernels.jacobi.{other}: not used in mode {jacobi['mode']!r}, "
                              f"which takes {size} (points {'per rank' if size == 'L' else 'in total'} per axis)")
        if size not in jacobi:
            raise ConfigError(f"{source}: kernels.jacobi: mode {jacobi['mode']!r} needs {size}")


def _check_kernel_stacks(config: dict[str, Any], chosen: dict[str, list[str]] | None, key: str,
                         source: str) -> None:
    """A kernel's stack -> transports choice names configured stacks and their transports."""
    for label, transports in (chosen or {}).items():
        if label not in config["stacks"]:
            raise ConfigError(f"{source}: {key}.{label}: no stack {label!r}; stacks: "
                              f"{', '.join(sorted(config['stacks']))}")
        known = config["stacks"][label]["transports"]
        for transport in transports:
            if transport not in known:
                raise ConfigError(f"{source}: {key}.{label}: transport {transport!r} is not one of "
                                  f"stacks.{label}.transports ({', '.join(known)})")


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return validate(data, str(path))
