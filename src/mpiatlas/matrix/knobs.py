"""Knob sets: named sets of environment / MCA variables, an axis of every cell (IMB and kernels).

A campaign defines them once (``knobs: {tuning-auto: {I_MPI_TUNING_MODE: auto}}``) and selects
them per campaign (``campaign.knobs``) or per stack (``stacks.<label>.knobs``); ``none`` names the
cells without a knob set, whose ids are the ones cells had before this axis existed.

What a variable may be named depends on the stack kind (an ``I_MPI_*`` variable means nothing to
Open MPI); OpenMP's ``OMP_*``/``KMP_*`` suit every kind. Values are plain strings with no shell
meaning: they are passed as environment (never pasted into a shell line), and refusing ``$``,
quotes, ``;`` and the like keeps a config from smuggling anything a reader would not expect.

This module is pure logic (no config loading, no polars): config.py turns its findings into
errors naming the key, programs.expand multiplies cells by :func:`selected_sets`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

# The name of "no knob set" in a selection.
NONE = "none"

# Variable name prefixes each stack kind reads (its MPI library, its fabrics and launcher layers).
KIND_PREFIXES: dict[str, tuple[str, ...]] = {
    "intelmpi": ("I_MPI_", "FI_"),
    "openmpi": ("OMPI_MCA_", "PMIX_", "UCX_"),
    "mpich": ("MPIR_CVAR_", "MPICH_", "UCX_", "FI_"),
}
# The OpenMP runtimes' variables mean the same under every MPI.
ANY_PREFIXES: tuple[str, ...] = ("OMP_", "KMP_")

VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Allowed in a value: letters, digits and the punctuation real knobs use (UCX_TLS=sm,self,
# OMP_PLACES={0,1},{2,3}, I_MPI_PIN_DOMAIN=[0x3], KMP_AFFINITY=granularity=fine,compact, 64k, 1:2).
# Everything else has a meaning to a shell (whitespace, $, `, ;, |, &, <, >, quotes, \, *, ?, !,
# parentheses, #, ~) or is a control character (newline, NUL), and is refused.
VALUE = re.compile(r"[A-Za-z0-9_.,:=+\-/@%{}\[\]^]*")


def prefixes_for(kind: str) -> tuple[str, ...]:
    return KIND_PREFIXES.get(kind, ()) + ANY_PREFIXES


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a knob variable for any stack kind (None: it can be)."""
    if not VARIABLE_NAME.fullmatch(name):
        return "is not an environment variable name (letters, digits and _, not starting with a digit)"
    every = sorted({p for ps in KIND_PREFIXES.values() for p in ps} | set(ANY_PREFIXES))
    if not name.startswith(tuple(every)):
        return f"is not a variable any stack reads; allowed prefixes: {', '.join(every)}"
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a knob value (None: it can be)."""
    if VALUE.fullmatch(value):
        return None
    bad = sorted({ch for ch in value if not VALUE.fullmatch(ch)})
    shown = ", ".join(repr(ch) for ch in bad)
    return (f"{value!r} has characters with a shell meaning or control characters ({shown}); allowed: letters, "
            "digits and _ . , : = + - / @ % { } [ ] ^")


def unsuited(kind: str, env: Mapping[str, Any]) -> list[str]:
    """The variables of a knob set that stack kind ``kind`` does not read."""
    return [name for name in env if not name.startswith(prefixes_for(kind))]


def suits(kind: str, env: Mapping[str, Any]) -> bool:
    return not unsuited(kind, env)


def selection(config: Campaign, label: str) -> tuple[list[str], bool]:
    """The knob set names chosen for stack ``label`` and whether the choice is the stack's own
    (``stacks.<label>.knobs``: every set must suit it) rather than the campaign's (sets that do
    not suit the stack's kind are skipped for it). Default: ``none`` and every defined set."""
    own = config.stacks[label].knobs
    if own is not None:
        return list(own), True
    chosen = config.campaign.knobs
    return (list(chosen) if chosen is not None else [NONE, *config.knobs]), False


def selected_sets(config: Campaign, label: str) -> list[str]:
    """The knob sets the cells of stack ``label`` run with, in selection order; "" is no set."""
    names, _ = selection(config, label)
    kind = config.stacks[label].kind
    sets = config.knobs
    return ["" if name == NONE else name for name in names if name == NONE or suits(kind, sets[name])]
