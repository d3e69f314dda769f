"""MPICH: the decision as the JSON collective-selection tree of ``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``.

Grammar (MPICH ``src/mpi/coll/src/csel.c``, 4.x and 5.x): nested objects whose keys are conditions
tried in order, the first that holds is descended into, ``...=any`` last; a leaf is
``"algorithm=MPIR_<Coll>_intra_<name>": {}``. Conditions used here: ``comm_size<=N`` and
``avg_msg_size<=N`` (count x type size; defined for bcast, allreduce, reduce, alltoall) or
``total_msg_size<=N`` (x comm size; allgather).

The file *replaces* the library's built-in MPIR tree, and a collective missing from it aborts
(``MPIR_Assert`` in the search). So the file is the installed library's own tree
(:func:`builtin_tree` reads it out of ``libmpi.so``, where it is embedded as a JSON string) with each
tuned collective's ``comm_type=intra`` subtree wrapped: the tuned ranges lead to the chosen
algorithm, every other size and process count to the original subtree, unchanged.

The device (CH4) layer selects before MPIR and would bypass the file; :func:`env_vars` hands the
tuned collectives to MPIR (``MPIR_CVAR_DEVICE_COLLECTIVES=percoll``,
``MPIR_CVAR_<COLL>_DEVICE_COLLECTIVE=0``), which is also how the campaign forced them.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning.decide import Block, SeriesDecision, TuneError

AVG = frozenset({"bcast", "allreduce", "reduce", "alltoall"})
TOTAL = frozenset({"allgather"})
SUPPORTED = AVG | TOTAL | {"barrier"}
_START = re.compile(rb'\{"collective=')


def builtin_tree(libmpi: Path) -> dict[str, Any]:
    """The MPIR-level selection tree compiled into ``libmpi`` (the one naming ``algorithm=MPIR_``)."""
    try:
        data = libmpi.read_bytes()
    except OSError as exc:
        raise TuneError(f"{libmpi}: cannot read the MPICH library ({exc})") from exc
    decoder = json.JSONDecoder()
    for match in _START.finditer(data):
        end = data.find(b"\0", match.start())
        try:
            tree, _ = decoder.raw_decode(data[match.start():end].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(tree, dict) and '"algorithm=MPIR_' in json.dumps(tree):
            return tree
    raise TuneError(f"{libmpi}: no built-in MPIR collective-selection JSON found (expected an MPICH 4.x/5.x libmpi)")


def algorithm_name(collective: str, name: str) -> str:
    """The csel container of a ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` name: ``nb`` is ``allcomm``."""
    scope = "allcomm" if name == "nb" else "intra"
    return f"MPIR_{collective.capitalize()}_{scope}_{name}"


def _size_key(collective: str) -> str:
    return "total_msg_size" if collective in TOTAL else "avg_msg_size"


def _sizes(series: SeriesDecision, block: Block, scale: int, orig: dict[str, Any]) -> dict[str, Any]:
    """Sequential size conditions of one block: default ranges lead back to ``orig``."""
    key = _size_key(series.collective)
    tree: dict[str, Any] = {}
    first = block.ranges[0].lo * scale
    if first > 0:
        tree[f"{key}<={first - 1}"] = orig
    for r in block.ranges:
        leaf = orig if r.algorithm == DEFAULT else {f"algorithm={algorithm_name(series.collective, r.algorithm)}": {}}
        tree[f"{key}<={(r.hi + 1) * scale - 1}"] = leaf
    tree[f"{key}=any"] = orig
    return tree


def wrapped(series: SeriesDecision, orig: dict[str, Any]) -> dict[str, Any]:
    """The new ``comm_type=intra`` subtree: comm-size conditions, then sizes, else ``orig``."""
    tree: dict[str, Any] = {}
    last = 0
    for block in series.blocks:
        if not any(r.algorithm != DEFAULT for r in block.ranges):
            continue
        if series.collective == "barrier":
            inner: dict[str, Any] = {f"algorithm={algorithm_name('barrier', block.ranges[0].algorithm)}": {}}
            spans = [(block.p_lo, block.p_hi, inner)]
        elif series.collective in TOTAL:
            nps = list(block.nps)
            spans = [(p, (nps[i + 1] - 1) if i + 1 < len(nps) else block.p_hi, _sizes(series, block, p, orig))
                     for i, p in enumerate(nps)]
        else:
            spans = [(block.p_lo, block.p_hi, _sizes(series, block, 1, orig))]
        for lo, hi, inner in spans:
            if lo - 1 > last:
                tree[f"comm_size<={lo - 1}"] = orig
            tree[f"comm_size<={hi}"] = inner
            last = hi
    tree["comm_size=any"] = orig
    return tree


def tree_with(series_list: list[SeriesDecision], base: dict[str, Any], source: str = "the built-in tree") -> dict[str, Any]:
    """``base`` with every tuned collective's intra-communicator subtree wrapped."""
    tree = copy.deepcopy(base)
    for s in series_list:
        if not s.tuned:
            continue
        if s.collective not in SUPPORTED:
            raise TuneError(f"{s.stack}/{s.transport}: {s.benchmark} is not exported for MPICH "
                            f"(supported: {', '.join(sorted(SUPPORTED))})")
        coll = tree.get(f"collective={s.collective}")
        if not isinstance(coll, dict) or "comm_type=intra" not in coll:
            raise TuneError(f"{source}: no key 'collective={s.collective}' -> 'comm_type=intra' to extend")
        coll["comm_type=intra"] = wrapped(s, coll["comm_type=intra"])
    return tree


def json_text(series_list: list[SeriesDecision], base: dict[str, Any], source: str = "the built-in tree") -> str:
    return json.dumps(tree_with(series_list, base, source), indent=1) + "\n"


def env_vars(series_list: list[SeriesDecision], path: str) -> dict[str, str]:
    """The environment that makes MPICH read the file for the tuned collectives."""
    env = {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": path, "MPIR_CVAR_DEVICE_COLLECTIVES": "percoll"}
    for s in series_list:
        if s.tuned:
            env[f"MPIR_CVAR_{s.collective.upper()}_DEVICE_COLLECTIVE"] = "0"
    return env
