"""MPI stacks: one module per stack kind, each building launch argument lists.

* :mod:`.base` — the Stack protocol: launch argv, transports, evidence;
* :mod:`.intelmpi` — Intel MPI;
* :mod:`.mpich` — MPICH;
* :mod:`.openmpi` — Open MPI;
* :mod:`.collectives` — forced-algorithm tables per stack;
* :mod:`.fabrics` — InfiniBand/RoCE: ports, UCX evidence;
* :mod:`.containers` — Apptainer images of the stacks, and the hybrid launch model.
* :mod:`.apt_sources` — the Debian mirror the images install from (the host's apt sources, or the config's).

``get_stack(kind, prefix)`` is the single entry point the runner, the kernel
build and the container layer use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpiatlas.stacks.base import Launch, LaunchSpec, Stack, StackError, Transport
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI

STACK_KINDS: dict[str, type[Stack]] = {IntelMPI.kind: IntelMPI, OpenMPI.kind: OpenMPI, MPICH.kind: MPICH}


def register_kind(cls: type[Stack]) -> None:
    STACK_KINDS[cls.kind] = cls


def get_stack(kind: str, prefix: str | Path, *, source: str = "pypi", version: str | None = None,
              **options: Any) -> Stack:
    """A stack of ``kind`` at ``prefix``; ``options`` are kind-specific constructor keywords
    (e.g. MPICH's ``imb_from``: the Intel MPI prefix whose IMB binaries it runs)."""
    try:
        cls = STACK_KINDS[kind]
    except KeyError:
        raise StackError(f"unknown MPI stack kind {kind!r}; known: {sorted(STACK_KINDS)}") from None
    options = {key: value for key, value in options.items() if value is not None}
    try:
        return cls(Path(prefix), source=source, version=version, **options)
    except TypeError as exc:
        raise StackError(f"{kind}: unsupported stack option(s) {sorted(options)}: {exc}") from None


__all__ = ["STACK_KINDS", "Launch", "LaunchSpec", "Stack", "StackError", "Transport", "get_stack"]
