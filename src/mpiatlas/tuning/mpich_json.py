"""MPICH: the decision as two JSON collective-selection trees, MPIR's and the CH4 device's.

Grammar (MPICH ``src/mpi/coll/src/csel.c``, 4.x and 5.x): nested objects whose keys are conditions
tried in order, the first that holds is descended into, ``...=any`` last; a leaf is
``"algorithm=MPIR_<Coll>_intra_<name>": {}`` (``"composition=MPIDI_<Coll>_intra_composition_<x>"`` in
the CH4 tree). Conditions used here: ``comm_size<=N`` and ``avg_msg_size<=N`` (count x type size;
defined for bcast, allreduce, reduce, alltoall) or ``total_msg_size<=N`` (x comm size; allgather).

How MPICH 4.x/5.x selects (ch4 device; ``MPIR_CVAR_DEVICE_COLLECTIVES=all`` by default): ``MPI_Bcast``
calls ``MPID_Bcast``, which searches the CH4 tree (``MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE``)
for a *composition* (alpha..delta: node-local shm step + netmod step, or the whole communicator to one
of them). The shm step searches the POSIX tree (``..._CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE``:
``release_gather``, or ``MPIR_<Coll>_impl``). ``MPIR_<Coll>_impl`` searches the MPIR tree
(``MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE``) for the algorithm, the level the campaign forced
(``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` with the device collective off).

So two files, each the installed library's own tree (:func:`builtin_trees` reads both out of
``libmpi.so``, where they are embedded as JSON strings) with each tuned collective's
``comm_type=intra`` subtree wrapped by the same (P, size) conditions:

* the MPIR tree (``<stem>.json``): the tuned ranges lead to the chosen algorithm, every other
  size and process count to the original subtree. It *replaces* the built-in MPIR tree, and a
  search that finds nothing there aborts (``MPIR_Assert(cnt)``), hence the whole tree is written.
* the CH4 tree (``<stem>.ch4.json``): the tuned ranges lead to ``{"comm_type=inter": ...}``, which
  never holds there and has no failure path (:func:`ch4_leaf`), every other size to the original
  subtree. The search then ends with no composition, and ``MPID_<Coll>`` calls ``MPIR_<Coll>_impl``
  on the whole communicator (``cnt == NULL`` in ``ch4_coll.h``, 4.0 and 5.0): exactly what
  ``MPIR_CVAR_<COLL>_DEVICE_COLLECTIVE=0`` does, but for the tuned ranges only. Untuned sizes and
  process counts keep the device compositions and the POSIX release_gather algorithms. A
  collective the CH4 tree does not name already goes to MPIR.

The POSIX tree is not written: it is reached only by the compositions, i.e. at untuned sizes
(and MPICH 4.0, once its POSIX variable is set, reads the file of the CH4 variable as its POSIX tree,
``posix_init.c``: one more reason to leave it unset). One reach remains: the MPIR
tree is matched on the communicator it is called with. At a tuned size, a communicator of an untuned
P on several nodes still runs a composition, whose node-local sub-communicator may fall back to
``MPIR_<Coll>_impl`` (POSIX) and, if its size is a tuned P, gets the tuned algorithm. On one node (the
campaigns here) that cannot happen: the node's sub-communicator has the communicator's P.

Seen here (tests/test_tune_loaded.py): PyPI MPICH 5.0.2 and Debian's 4.0.2 load both trees, and
the tuned range runs the file's MPIR algorithm with device collectives on; on 5.0.2 a size outside
the CH4 ranges runs POSIX's release_gather, not MPIR. Measured (IMB Bcast, 2 ranks, 8 launches,
2026-11-27): switching the device collective off, as the former export did, made the untuned sizes
256 B..8 KiB 1.3-2.1x slower; with these two trees their time is the default's (ratio CIs contain 1).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from collections.abc import Callable

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning.decide import Block, SeriesDecision, TuneError

AVG = frozenset({"bcast", "allreduce", "reduce", "alltoall"})
TOTAL = frozenset({"allgather"})
SUPPORTED = AVG | TOTAL | {"barrier"}
_START = re.compile(rb'\{"collective=')

# A csel tree: every value is an object (conditions lead to subtrees, a leaf is ``"algorithm=...": {}``),
# so the whole grammar is one recursive type, checked once where a tree is read (:func:`csel_tree`).
CselTree = dict[str, "CselTree"]
Leaf = CselTree
LeafFn = Callable[[str, str], Leaf]


def csel_tree(value: object, source: str, path: str = "") -> CselTree:
    """``value`` (as ``json`` decoded it) as a csel tree; a :class:`TuneError` names ``source`` and the
    key path of the first value that is not a JSON object."""
    if not isinstance(value, dict):
        raise TuneError(f"{source}: {path or 'the tree'}: expected a JSON object (csel condition -> subtree), "
                        f"got {type(value).__name__}")
    return {str(k): csel_tree(v, source, f"{path}/{k}" if path else str(k)) for k, v in value.items()}


def _kind(tree: CselTree) -> str:
    """Which level an embedded tree selects for: ``ch4`` (compositions), ``posix`` or ``mpir``."""
    text = json.dumps(tree)
    if '"composition=MPIDI_' in text:
        return "ch4"
    return "posix" if "MPIDI_POSIX_" in text else "mpir"


def builtin_trees(libmpi: Path) -> dict[str, CselTree]:
    """The selection trees compiled into ``libmpi``, by level (``mpir``, ``ch4``, ``posix``)."""
    try:
        data = libmpi.read_bytes()
    except OSError as exc:
        raise TuneError(f"{libmpi}: cannot read the MPICH library ({exc})") from exc
    decoder = json.JSONDecoder()
    trees: dict[str, CselTree] = {}
    for match in _START.finditer(data):
        end = data.find(b"\0", match.start())
        try:
            tree, _ = decoder.raw_decode(data[match.start():end].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(tree, dict):
            parsed = csel_tree(tree, f"{libmpi}: embedded tree at byte {match.start()}")
            trees.setdefault(_kind(parsed), parsed)
    for level, what in (("mpir", "MPIR"), ("ch4", "CH4 composition")):
        if level not in trees:
            raise TuneError(f"{libmpi}: no built-in {what} collective-selection JSON found (expected an MPICH "
                            "4.x/5.x libmpi of the ch4 device)")
    return trees


def builtin_tree(libmpi: Path) -> CselTree:
    """The MPIR-level selection tree compiled into ``libmpi`` (the one naming ``algorithm=MPIR_``)."""
    return builtin_trees(libmpi)["mpir"]


def algorithm_name(collective: str, name: str) -> str:
    """The csel container of a ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` name: ``nb`` is ``allcomm``."""
    scope = "allcomm" if name == "nb" else "intra"
    return f"MPIR_{collective.capitalize()}_{scope}_{name}"


def _size_key(collective: str) -> str:
    return "total_msg_size" if collective in TOTAL else "avg_msg_size"


def mpir_leaf(collective: str, name: str) -> Leaf:
    """MPIR tree: the tuned range runs the chosen algorithm."""
    return {f"algorithm={algorithm_name(collective, name)}": {}}


def ch4_leaf(orig: CselTree) -> LeafFn:
    """CH4 tree: no composition, so ``MPID_<Coll>`` calls ``MPIR_<Coll>_impl`` on the whole communicator.

    ``csel.c`` refuses an empty object (``validate_tree``: "unexpected NULL success path"), but a
    boolean condition may lack a failure path: ``comm_type=inter`` never holds inside the
    ``comm_type=intra`` subtree, its failure path is none, and the search returns no composition.
    Its success path (never taken) is the original subtree, which the parser accepts."""
    def leaf(collective: str, name: str) -> Leaf:
        return {"comm_type=inter": orig}
    return leaf


def _sizes(series: SeriesDecision, block: Block, scale: int, orig: CselTree,
           leaf: LeafFn = mpir_leaf) -> CselTree:
    """Sequential size conditions of one block: default ranges lead back to ``orig``."""
    key = _size_key(series.collective)
    tree: CselTree = {}
    first = block.ranges[0].lo * scale
    if first > 0:
        tree[f"{key}<={first - 1}"] = orig
    for r in block.ranges:
        chosen = orig if r.algorithm == DEFAULT else leaf(series.collective, r.algorithm)
        tree[f"{key}<={(r.hi + 1) * scale - 1}"] = chosen
    tree[f"{key}=any"] = orig
    return tree


def wrapped(series: SeriesDecision, orig: CselTree, leaf: LeafFn = mpir_leaf) -> CselTree:
    """The new ``comm_type=intra`` subtree: comm-size conditions, then sizes, else ``orig``."""
    tree: CselTree = {}
    last = 0
    for block in series.blocks:
        if not any(r.algorithm != DEFAULT for r in block.ranges):
            continue
        if series.collective == "barrier":
            inner: CselTree = leaf("barrier", block.ranges[0].algorithm)
            spans = [(block.p_lo, block.p_hi, inner)]
        elif series.collective in TOTAL:
            nps = list(block.nps)
            spans = [(p, (nps[i + 1] - 1) if i + 1 < len(nps) else block.p_hi, _sizes(series, block, p, orig, leaf))
                     for i, p in enumerate(nps)]
        else:
            spans = [(block.p_lo, block.p_hi, _sizes(series, block, 1, orig, leaf))]
        for lo, hi, inner in spans:
            if lo - 1 > last:
                tree[f"comm_size<={lo - 1}"] = orig
            tree[f"comm_size<={hi}"] = inner
            last = hi
    tree["comm_size=any"] = orig
    return tree


def tree_with(series_list: list[SeriesDecision], base: CselTree, source: str = "the built-in tree",
              level: str = "mpir") -> CselTree:
    """``base`` with every tuned collective's intra-communicator subtree wrapped (``level``: which tree)."""
    tree = copy.deepcopy(base)
    for s in series_list:
        if not s.tuned:
            continue
        if s.collective not in SUPPORTED:
            raise TuneError(f"{s.stack}/{s.transport}: {s.benchmark} is not exported for MPICH "
                            f"(supported: {', '.join(sorted(SUPPORTED))})")
        coll = tree.get(f"collective={s.collective}")
        if level == "ch4" and coll is None:
            continue  # no composition for it: MPID already hands it to MPIR at every size
        if not isinstance(coll, dict) or "comm_type=intra" not in coll:
            raise TuneError(f"{source}: no key 'collective={s.collective}' -> 'comm_type=intra' to extend")
        orig = coll["comm_type=intra"]
        coll["comm_type=intra"] = wrapped(s, orig, ch4_leaf(orig) if level == "ch4" else mpir_leaf)
    return tree


def json_text(series_list: list[SeriesDecision], base: CselTree, source: str = "the built-in tree",
              level: str = "mpir") -> str:
    return json.dumps(tree_with(series_list, base, source, level), indent=1) + "\n"


def file_names(stem: str) -> tuple[str, str, str]:
    """(MPIR tree, CH4 tree, env file) of one stack x transport."""
    return f"{stem}.json", f"{stem}.ch4.json", f"{stem}.env"


def env_vars(mpir_path: str, ch4_path: str) -> dict[str, str]:
    """The environment that makes MPICH read both files; device collectives stay on."""
    return {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": mpir_path,
            "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE": ch4_path}
