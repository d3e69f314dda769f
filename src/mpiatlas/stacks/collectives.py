"""Collective-algorithm tables: which algorithm names/ids each stack version accepts.

Every stack forces a collective algorithm differently (Open MPI: numeric
``coll_tuned_<coll>_algorithm`` ids; MPICH: ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM``
names; Intel MPI: opaque ``I_MPI_ADJUST_<COLL>`` ids). A campaign names an
algorithm; these tables map that name to the value the knob takes and reject
names the stack version does not have.

Tables ship as package data (``mpiatlas/data/collectives_<kind>_<version>.json``);
Open MPI and MPICH can also be read live from ``ompi_info --all --level 9`` and
``mpivars`` (parsers below), which is what the fallback files were generated from.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from collections.abc import Mapping
from typing import TypedDict

from mpiatlas.stacks.base import StackError

_FILE = re.compile(r"^collectives_(?P<kind>[a-z0-9]+)_(?P<version>[0-9][0-9.]*)\.json$")


def _data_dir() -> Traversable:
    return resources.files("mpiatlas") / "data"


def available_tables() -> dict[str, list[str]]:
    """kind -> versions for which a packaged table exists."""
    found: dict[str, list[str]] = {}
    for entry in _data_dir().iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.setdefault(match["kind"], []).append(match["version"])
    return {kind: sorted(versions) for kind, versions in found.items()}


def _version_matches(table_version: str, version: str) -> bool:
    """'4.1' matches '4.1', '4.1.4' and '4.1.4-debian'; '4.1' does not match '4.10'."""
    if version == table_version:
        return True
    return version.startswith(table_version) and not version[len(table_version)].isdigit()


# An algorithm's name -> the id its knob takes: a number (Open MPI, Intel MPI) or the name (MPICH).
AlgorithmIds = Mapping[str, str | int]


class AlgorithmRules(TypedDict, total=False):
    """Where an algorithm works: at most ``max_np`` ranks, at least ``min_nodes`` nodes, and why."""

    max_np: int
    min_nodes: int
    note: str


class CollectiveTable(TypedDict, total=False):
    """A packaged table (data/collectives_<kind>_<version>.json), as it is in the file."""

    kind: str
    version: str
    source: str
    knob: str
    note: str
    ranges: dict[str, list[int]]
    unverified: list[str]
    # collective -> its algorithms: names (MPICH: name == id) or name -> id
    collectives: dict[str, list[str] | dict[str, int]]
    constraints: dict[str, dict[str, AlgorithmRules]]  # collective -> algorithm -> rules
    applied_np: dict[str, dict[str, list[str]]]  # collective -> np -> the names that took effect


@cache
def load_table(kind: str, version: str) -> CollectiveTable:
    """The packaged table of ``kind`` whose version is a prefix of ``version``."""
    versions = available_tables().get(kind, [])
    # Longest matching prefix wins ("5.0" over "5").
    for table_version in sorted(versions, key=len, reverse=True):
        if _version_matches(table_version, version):
            name = f"collectives_{kind}_{table_version}.json"
            # The file is the record; its one key every reader needs is checked here.
            table: CollectiveTable = json.loads((_data_dir() / name).read_text(encoding="utf-8"))
            if not isinstance(table, dict) or not isinstance(table.get("collectives"), dict):
                raise StackError(f"{name}: expected a JSON object with a 'collectives' object")
            return table
    raise StackError(
        f"{kind}: no collective-algorithm table for version {version!r}; packaged versions: {versions or 'none'}"
    )


def _as_mapping(entries: list[str] | dict[str, int]) -> dict[str, str | int]:
    # A list means name == id (MPICH); a dict maps name -> id.
    if isinstance(entries, list):
        return {str(name): str(name) for name in entries}
    return dict(entries)


def algorithms(kind: str, version: str, collective: str) -> dict[str, str | int]:
    """name -> id of every algorithm ``kind``/``version`` accepts for ``collective``.

    Empty when the table does not know the collective.
    """
    table = load_table(kind, version)
    return _as_mapping(table.get("collectives", {}).get(collective.lower(), {}))


def resolve(
    kind: str,
    version: str,
    collective: str,
    name: str,
    *,
    table: AlgorithmIds | None = None,
    np: int | None = None,
    nodes: int = 1,
) -> str | int:
    """The knob value for algorithm ``name``; StackError listing the valid names otherwise.

    ``table`` (name -> id) overrides the packaged one, e.g. when read live from
    the installed stack. Constraints in the packaged table (``max_np``,
    ``min_nodes``) are checked when ``np``/``nodes`` are given.
    """
    coll = collective.lower()
    names = table if table is not None else algorithms(kind, version, coll)
    if not names:
        raise StackError(f"{kind} {version}: no forcible algorithms known for collective {coll!r}")
    if name not in names:
        raise StackError(
            f"{kind} {version}: unknown {coll} algorithm {name!r}; valid: {', '.join(_ordered(names))}"
        )
    try:
        packaged = load_table(kind, version)
    except StackError:
        packaged = CollectiveTable()
    rules = packaged.get("constraints", {}).get(coll, {}).get(name, {})
    # Where it was measured per rank count which ids really took effect (Intel MPI
    # silently falls back otherwise), an id outside that list would mislabel the cell.
    applied = packaged.get("applied_np", {}).get(coll, {}).get(str(np)) if np is not None else None
    if applied is not None and name not in applied:
        raise StackError(
            f"{kind} {version}: {coll} algorithm {name!r} did not take effect at np={np} "
            f"(the stack falls back silently); applied at np={np}: {', '.join(applied)}"
        )
    if np is not None and "max_np" in rules and np > rules["max_np"]:
        raise StackError(
            f"{kind} {version}: {coll} algorithm {name!r} only works up to {rules['max_np']} ranks (asked {np})"
        )
    if "min_nodes" in rules and nodes < rules["min_nodes"]:
        note = f" ({rules['note']})" if rules.get("note") else ""
        raise StackError(
            f"{kind} {version}: {coll} algorithm {name!r} needs at least {rules['min_nodes']} nodes{note}"
        )
    return names[name]


def _ordered(names: AlgorithmIds) -> list[str]:
    """Names by numeric id where ids are numbers (Open MPI, Intel MPI), else alphabetically."""
    return sorted(names, key=lambda n: (0, names[n], n) if isinstance(names[n], int) else (1, 0, n))


# -- live parsers ---------------------------------------------------------------

_OMPI_PARAM = re.compile(r'parameter "coll_tuned_(?P<coll>[a-z_]+?)_algorithm"')
# Open MPI 4.1: 0:"ignore", 1:"basic_linear"   Open MPI 5.0: 0|ignore, 1|basic_linear
_OMPI_ENUM = re.compile(r'(\d+)\s*(?::\s*"([^"]+)"|\|\s*([A-Za-z0-9_\-]+))')


def parse_ompi_info(text: str) -> dict[str, dict[str, int]]:
    """collective -> {name: id} from ``ompi_info --all --level 9`` (4.1 and 5.0 formats)."""
    tables: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        param = _OMPI_PARAM.search(line)
        if param:
            current = param["coll"]
            continue
        if "parameter \"" in line:
            current = None
            continue
        if current and "Valid values:" in line:
            values = line.split("Valid values:", 1)[1]
            entries = {
                (m.group(2) or m.group(3)): int(m.group(1)) for m in _OMPI_ENUM.finditer(values)
            }
            if entries:
                tables[current] = entries
            current = None
    return tables


_MPIVAR = re.compile(r"^\tMPIR_CVAR_(?P<coll>[A-Z_]+)_INTRA_ALGORITHM\s*=")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_AUTO = "auto - "


def _glued_names(rest: str) -> list[str] | None:
    """Names from MPICH 4.0's mpivars, which prints the enum list without newlines.

    Each name is padded to a common width W before " - "; the first name follows the
    closing parenthesis of the "auto" description, which gives W.
    """
    seps = list(re.finditer(r"( +)- ", rest))
    if not seps:
        return []
    first = seps[0]
    paren = rest.rfind(")", 0, first.start())
    if paren < 0:
        return None
    width = first.end() - 2 - (paren + 1)  # name + padding
    names = []
    for sep in seps:
        start = sep.end() - 2 - width
        name = rest[start:sep.start()]
        if not _NAME.match(name):
            return None
        names.append(name)
    return names


def parse_mpivars(text: str) -> dict[str, list[str]]:
    """collective -> algorithm names of ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` from ``mpivars``.

    Only blocking, non-neighbourhood collectives at the MPIR level (no ``I*``,
    ``NEIGHBOR_*``, ``*_POSIX``/``*_OFI`` device-level variables).
    """
    lines = text.splitlines()
    tables: dict[str, list[str]] = {}
    i = 0
    while i < len(lines):
        match = _MPIVAR.match(lines[i])
        if not match:
            i += 1
            continue
        coll = match["coll"]
        block = [lines[i]]
        i += 1
        # MPICH 5 continues the description on lines that do not start with a tab.
        while i < len(lines) and not lines[i].startswith("\t") and lines[i].strip():
            block.append(lines[i])
            i += 1
        if coll.startswith("I") or "NEIGHBOR" in coll or coll.endswith(("_POSIX", "_OFI")):
            continue
        first = block[0]
        if _AUTO not in first and len(block) == 1:
            continue
        if len(block) > 1:
            # MPICH 5: one "name   - description" per line after the variable's line.
            names = ["auto"] if _AUTO in first or block[1].startswith("auto") else []
            for extra in block[1:]:
                m = re.match(r"^([a-z][a-z0-9_]*)\s+- ", extra)
                if m and m.group(1) not in names:
                    names.append(m.group(1))
        else:
            rest = first.split(_AUTO, 1)[1]
            glued = _glued_names(rest)
            if glued is None:
                continue
            names = ["auto", *glued]
        tables[coll.lower()] = names
    return tables
