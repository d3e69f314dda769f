"""The fits files (``fits/hockney.json``, ``kernels.json``, ``alphabeta.json``): their JSON Schemas,
and the one way they are written, read and checked.

Each file has a documented schema, package data at ``mpiatlas/data/schemas/fits-<model>.schema.json``
(the fields, their units and meaning). The writer validates every document before it writes any,
and a reader that wants a checked file gets a :class:`FitsFileError` naming the file, the key path
and what was expected, instead of a ``KeyError`` three modules later.

Light on purpose (json, jsonschema only when validating): the CLI, compare and the kernel models
read fits files without importing the models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from mpiatlas.files import write_text_atomic
from mpiatlas.models.json_fields import JsonValue
from mpiatlas.matrix.layout import ALPHABETA_FIT, HOCKNEY_FIT, KERNELS_FIT

# The models in the order they are fitted (kernels after hockney: they take λ and B from it),
# and the file of each under a fits directory.
MODELS: tuple[str, ...] = ("hockney", "kernels", "alphabeta")
FILES: dict[str, str] = {"hockney": HOCKNEY_FIT, "kernels": KERNELS_FIT, "alphabeta": ALPHABETA_FIT}


class FitsFileError(ValueError):
    """A fits document that does not follow its schema, or a fits file that cannot be read;
    the message names the file, the key and what was expected."""


def schema_name(model: str) -> str:
    return f"fits-{model}.schema.json"


@cache
def schema(model: str) -> dict[str, Any]:
    """The JSON Schema of ``model``'s fits file (package data)."""
    if model not in FILES:
        raise FitsFileError(f"no fits file for model {model!r}; models: {', '.join(MODELS)}")
    text = resources.files("mpiatlas").joinpath("data", "schemas", schema_name(model)).read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def model_of(path: str | Path) -> str:
    """The model whose fits file ``path`` is, from its name (hockney.json -> hockney)."""
    name = Path(path).name
    for model, file in FILES.items():
        if file == name:
            return model
    raise FitsFileError(f"{path}: not a fits file name; expected one of {', '.join(FILES.values())}")


def _key_path(parts: Iterable[object]) -> str:
    # $[0].segments[1].latency_us: the JSONPath a reader can look up in the file.
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def problems(document: object, model: str) -> list[str]:
    """Every place ``document`` departs from ``model``'s schema, as "key path: what was expected"."""
    import jsonschema  # only when checking: most imports of this module only need the names

    validator = jsonschema.Draft202012Validator(schema(model))
    errors = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_key_path(e.absolute_path)}: {e.message}" for e in errors]


def validate(document: object, model: str, where: str | Path) -> None:
    """Raise :class:`FitsFileError` unless ``document`` follows ``model``'s schema; ``where`` names
    the file in the message."""
    found = problems(document, model)
    if found:
        shown = found[:10] + ([f"... and {len(found) - 10} more"] if len(found) > 10 else [])
        raise FitsFileError(f"{where}: not a valid {FILES[model]} (schema {schema_name(model)}):\n  "
                            + "\n  ".join(shown))


def dumps(document: object, where: str | Path = "<fits>") -> str:
    """The text of a fits file: indented JSON and a newline, never NaN or Infinity (not JSON)."""
    try:
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise FitsFileError(f"{where}: a NaN or infinite number, which JSON cannot hold ({exc})") from exc


def write(documents: Mapping[str, object], out_dir: str | Path) -> list[Path]:
    """Each model's document as ``out_dir/<its file>``, validated against its schema first.

    Every document is checked and serialised before any file is written, so a bad one leaves the
    directory as it was; each file is written aside and renamed (a reader never sees half of it)."""
    out_dir = Path(out_dir)
    texts: dict[Path, str] = {}
    for model, document in documents.items():
        if model not in FILES:
            raise FitsFileError(f"{out_dir}: no fits file for model {model!r}; models: {', '.join(MODELS)}")
        path = out_dir / FILES[model]
        validate(document, model, path)
        texts[path] = dumps(document, path)
    for path, text in texts.items():
        write_text_atomic(path, text)
    return list(texts)


def read(path: str | Path, model: str | None = None) -> JsonValue:
    """A fits file's document, checked against its schema (``model`` from the file name by default)."""
    path = Path(path)
    model = model or model_of(path)
    try:
        document: JsonValue = json.loads(path.read_text())
    except OSError as exc:
        raise FitsFileError(f"{path}: cannot read the {model} fits file ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise FitsFileError(f"{path}: not JSON ({exc})") from exc
    validate(document, model, path)
    return document


__all__ = ["FILES", "MODELS", "FitsFileError", "dumps", "model_of", "problems", "read", "schema", "validate",
           "write"]
