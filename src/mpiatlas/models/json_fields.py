"""Reading the fields of a fits file's JSON entries: one reader per JSON shape, each raising
:class:`FitRecordError` naming the file (``where``), the key path and what was expected.

The record modules (:mod:`.fit_records`, :mod:`.alphabeta_records`, :mod:`.kernel_records`,
:mod:`.ring_records`) build their ``from_json`` from these, so a malformed entry reads the same in
every fits file. The writers' side is here too: :func:`json_number` (JSON has no NaN or infinity)
and :func:`json_pair`.

Standard library only: the report and compare read fits without the numerical models.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

# A JSON value as json.loads gives it: what from_json reads and to_json gives back, at the file boundary.
Scalar = str | int | float | bool | None
JsonValue = Scalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]
Interval = tuple[float | None, float | None]

R = TypeVar("R")


class FitRecordError(ValueError):
    """A fits entry that is not of its record's shape; the message names the file, the key path and
    what was expected."""


def located(where: str, path: str) -> str:
    """``file: key.path``, the head of every reader's error message."""
    return f"{where}: {path}"


def read_object(value: JsonValue, where: str, path: str) -> JsonObject:
    if not isinstance(value, dict):
        raise FitRecordError(f"{located(where, path)}: expected a JSON object, got {type(value).__name__}")
    return value


def read_list(obj: JsonObject, key: str, where: str, path: str) -> list[JsonValue]:
    """``obj[key]`` as an array; absent or null is an empty one."""
    value = obj.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected an array, got {type(value).__name__}")
    return value


def read_records(obj: JsonObject, key: str, read: Callable[[JsonValue, str, str], R], where: str,
                 path: str) -> tuple[R, ...]:
    """The array ``obj[key]`` read entry by entry with ``read(value, where, path)`` (a record's
    ``from_json``), each entry's path its index: ``path.key[i]``."""
    return tuple(read(v, where, f"{path}.{key}[{i}]") for i, v in enumerate(read_list(obj, key, where, path)))


def read_number(obj: JsonObject, key: str, where: str, path: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected a number or null, got {value!r}")
    return value


def read_integer(obj: JsonObject, key: str, where: str, path: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():  # JSON Schema's integer: 2.0 is one
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected an integer or null, got {value!r}")
    return value


def read_text(obj: JsonObject, key: str, where: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected a string or null, got {value!r}")
    return value


def read_bool(obj: JsonObject, key: str, where: str, path: str) -> bool | None:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected true, false or null, got {value!r}")


def required_text(obj: JsonObject, key: str, where: str, path: str) -> str:
    value = read_text(obj, key, where, path)
    if value is None:
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: required, a string")
    return value


def required_integer(obj: JsonObject, key: str, where: str, path: str) -> int:
    value = read_integer(obj, key, where, path)
    if value is None:
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: required, an integer")
    return value


def read_interval(obj: JsonObject, key: str, where: str, path: str) -> Interval:
    """A ``[low, high]`` pair of numbers or nulls; absent or null is ``(None, None)``."""
    value = obj.get(key)
    if value is None:
        return (None, None)
    if not (isinstance(value, list) and len(value) == 2):
        raise FitRecordError(f"{located(where, f'{path}.{key}')}: expected [low, high], got {value!r}")
    pair: JsonObject = {"lo": value[0], "hi": value[1]}
    return (read_number(pair, "lo", where, f"{path}.{key}"), read_number(pair, "hi", where, f"{path}.{key}"))


def optional_interval(obj: JsonObject, key: str, where: str, path: str) -> Interval | None:
    """As :func:`read_interval`, but absent or null stays None (the file tells "no interval" apart)."""
    return None if obj.get(key) is None else read_interval(obj, key, where, path)


def read_integers(obj: JsonObject, key: str, where: str, path: str) -> tuple[int, ...]:
    out = []
    for i, v in enumerate(read_list(obj, key, where, path)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise FitRecordError(f"{located(where, f'{path}.{key}[{i}]')}: expected an integer, got {v!r}")
        out.append(v)
    return tuple(out)


def read_numbers(obj: JsonObject, key: str, where: str, path: str) -> tuple[float | None, ...]:
    """An array of numbers or nulls (a repetition's time the file could not hold is null)."""
    items = read_list(obj, key, where, path)
    return tuple(read_number({"v": v}, "v", where, f"{path}.{key}[{i}]") for i, v in enumerate(items))


def read_texts(obj: JsonObject, key: str, where: str, path: str) -> tuple[str, ...]:
    out = []
    for i, v in enumerate(read_list(obj, key, where, path)):
        if not isinstance(v, str):
            raise FitRecordError(f"{located(where, f'{path}.{key}[{i}]')}: expected a string, got {v!r}")
        out.append(v)
    return tuple(out)


def json_number(v: float | None) -> float | None:
    """A figure as the file holds it: NaN and infinite are null (JSON has neither)."""
    return None if v is None or not math.isfinite(v) else v


def json_pair(v: Interval) -> list[JsonValue]:
    """An interval as the file holds it: ``[low, high]``, NaN and infinite as null."""
    return [json_number(v[0]), json_number(v[1])]


__all__ = ["FitRecordError", "Interval", "JsonObject", "JsonValue", "Scalar", "json_number", "json_pair", "located",
           "optional_interval", "read_bool", "read_integer", "read_integers", "read_interval", "read_list",
           "read_number", "read_numbers", "read_object", "read_records", "read_text", "read_texts", "required_integer",
           "required_text"]
