"""The likwid pinner (``campaign.pinner: likwid``): each rank of a kernel cell runs under
``likwid-pin -q -c <its cpus> <program>``, so OpenMP thread i runs on the i-th cpu of its rank's list.

How likwid-pin 5.2 does it, and what that asks of the launch (read from /usr/bin/likwid-pin, measured on
Debian's 5.2.2 with the three stacks):

* one cpu: it pins the process and runs the program; several: it preloads ``liblikwidpin.so``, whose
  ``pthread_create`` pins the main thread to the first cpu and each created thread to the next one, in
  creation order (the ``-s`` skip mask leaves some out). MPI_Init starts helper threads of its own,
  0 to 3 of them depending on stack, transport and even rank, so no skip mask fits all: jacobi forms
  its OpenMP team before MPI_Init instead (src/kernels/jacobi.c), and the team is created first;
* with several cpus it puts its own library directory (``/usr/lib/<triplet>``) first on
  ``LD_LIBRARY_PATH``, where a PyPI stack's program then loads the system's libfabric or libmpi (the
  wheel of MPICH 5 fails to start, measured): the rank's argv restores the launch's value with ``env``;
* it runs its command split at spaces (no shell): an argument with whitespace cannot pass, and is refused.

The stack binds nothing (LaunchSpec.rank_argvs): its report shows unbound ranks, and what the threads
themselves report is the evidence (programs.kernels.likwid_problems).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from mpiatlas.stacks import StackError

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec

LIKWID_PIN = "likwid-pin"
PINNER = "likwid"
MISSING = "likwid-pin not found on PATH (package likwid)"


def is_likwid(spec: CellSpec) -> bool:
    """Does this cell's spec ask for the likwid pinner?"""
    return spec.get("pinner") == PINNER


def likwid_pin_path(path: str | None = None) -> str:
    """likwid-pin's absolute path (``path``: a PATH to search, default the process's); unavailable without it."""
    found = shutil.which(LIKWID_PIN, path=path)
    if found is None:
        raise StackError(f"unavailable: {MISSING}")
    return found


def check_pinnable(spec: CellSpec, launcher: str, nodes: int) -> None:
    """Refuse (as unavailable) what the likwid pinner does not do: launches other than one-node mpirun,
    and containerized cells (likwid-pin would have to run inside the image, per rank)."""
    if launcher != "mpirun" or nodes != 1:
        raise StackError(f"unavailable: the likwid pinner runs one-node mpirun launches (one argv per rank), "
                         f"not {launcher} over {nodes} node(s)")
    if spec.get("container"):
        raise StackError("unavailable: the likwid pinner runs host launches only (containers.enabled)")


def rank_argv(likwid_pin: str, cpus: Sequence[int], program: list[str], ld_library_path: str | None) -> list[str]:
    """The argv of one rank: ``likwid-pin -q -c <cpus> [env LD_LIBRARY_PATH=<launch's>] <program>``."""
    if not cpus:
        raise StackError("likwid pinner: a rank with no cpus")
    restore: list[str] = []
    if len(cpus) > 1:  # likwid-pin changes LD_LIBRARY_PATH only when it preloads its library
        env = shutil.which("env") or "/usr/bin/env"
        restore = [env, f"LD_LIBRARY_PATH={ld_library_path}"] if ld_library_path else [env, "-u", "LD_LIBRARY_PATH"]
    argv = [likwid_pin, "-q", "-c", ",".join(str(c) for c in cpus), *restore, *program]
    unsafe = [arg for arg in argv[4:] if not arg or re.search(r"\s", arg)]
    if unsafe:
        raise StackError(f"likwid pinner: likwid-pin splits its command at spaces, so {unsafe!r} cannot pass "
                         "(an empty argument or one with whitespace)")
    return argv


def rank_argvs(likwid_pin: str, sets: Sequence[Sequence[int]], program: list[str],
               ld_library_path: str | None) -> list[list[str]]:
    """One argv per rank: rank r under likwid-pin with ``sets[r]``."""
    return [rank_argv(likwid_pin, cpus, program, ld_library_path) for cpus in sets]


@cache
def likwid_version(likwid_pin: str) -> str | None:
    """``likwid-pin -v``'s version (``5.2.2``), asked once per process; None when it cannot be read."""
    try:
        out = subprocess.run([likwid_pin, "-v"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"Version\s+(\S+)", out.stdout + out.stderr)
    return match[1] if match else None
