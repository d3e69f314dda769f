"""Preflight checks that passed, remembered per stack and boot (``~/.cache/mpiatlas/preflight``).

The C compiler probe and a stack's 2-rank hello cost about a second of every campaign's start,
mostly the launcher's own start-up, and their answer does not change within a boot while nothing
they ran changes: as ``mpiatlas.node.limits`` does for the node's copy rate, a check that passed
is remembered under a key of everything that would change its answer, and a campaign with the
same key takes it as passed. The key holds the host, its boot id (a reboot may bring other
drivers and limits), the compiler's path, size and mtime, and for a hello the stack (kind, source,
prefix), its launcher and compiler wrapper (path, size, mtime), the transport, and the
environment variables a launch reads (PATH, LD_LIBRARY_PATH and every MPI, fabric and SLURM
family: I_MPI_, FI_, ...). A reinstalled stack, another compiler, a changed variable or a reboot
is another key: the check runs again. A failed check is never remembered; ``mpiatlas doctor``
always runs every check.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any, TypedDict

from mpiatlas.files import user_cache_dir, write_json_atomic
from mpiatlas.node.limits import read_boot_id

CACHE_DIR = "preflight"
# Families of variables that change what a launch does (MPI libraries, fabrics, launchers).
LAUNCH_ENV_PREFIXES = ("I_MPI_", "FI_", "OMPI_", "PMIX_", "PRTE_", "MPICH_", "MPIR_", "HYDRA_", "UCX_", "PSM",
                       "SLURM_", "MPIATLAS_")
LAUNCH_ENV_NAMES = ("PATH", "LD_LIBRARY_PATH", "LD_PRELOAD")


# The keys as JSON (hashed for the file name, stored in the record and compared with it).
class FileIdentity(TypedDict):
    path: str
    size: int
    mtime_ns: int


class BaseKey(TypedDict):
    host: str
    boot_id: str
    compiler: FileIdentity | None


class CompilerKey(BaseKey):
    check: str  # "compiler"
    env: dict[str, str]


class HelloKey(CompilerKey):
    kind: str
    source: str
    prefix: str
    launcher: FileIdentity
    mpicc: FileIdentity | None
    transport: str | None


CheckKey = CompilerKey | HelloKey


def file_identity(path: str | Path | None) -> FileIdentity | None:
    """(path, size, mtime) of a file, None when it is not there."""
    if path is None:
        return None
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def launch_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that change what a launch does (see the module docstring)."""
    return {k: v for k, v in sorted(env.items()) if k in LAUNCH_ENV_NAMES or k.startswith(LAUNCH_ENV_PREFIXES)}


def base_key() -> BaseKey | None:
    """Host, boot and C compiler: the part of every key (None without a boot id: nothing is remembered)."""
    boot = read_boot_id()
    if not boot:
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    return {"host": socket.gethostname(), "boot_id": boot, "compiler": file_identity(compiler)}


def hello_key(stack: Any, transport: str | None) -> HelloKey | None:
    """The key of ``stack``'s hello on ``transport`` (None: not to be remembered)."""
    base = base_key()
    launcher = file_identity(stack.launcher_path())
    if base is None or launcher is None:
        return None
    wrapper = stack.mpicc()[0]
    return {**base, "check": "hello", "kind": stack.kind, "source": stack.source, "prefix": str(stack.prefix),
            "launcher": launcher, "mpicc": file_identity(shutil.which(wrapper) or wrapper), "transport": transport,
            "env": launch_env(stack.env())}


def compiler_key() -> CompilerKey | None:
    base = base_key()
    return None if base is None else {**base, "check": "compiler", "env": launch_env(dict(os.environ))}


def _path(key: CheckKey) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return user_cache_dir(CACHE_DIR, f"{key['check']}-{digest}.json")


def remembered(key: CheckKey | None) -> str | None:
    """What the check found when it passed under ``key`` this boot; None when it has not."""
    if key is None:
        return None
    try:
        record = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("found"), str):
        return None  # another key's record under a colliding name, or a damaged file: run the check
    found: str = record["found"]
    return found


def remember(key: CheckKey | None, found: str) -> None:
    """Remember a check that passed under ``key``; a cache that cannot be written is no error."""
    if key is None:
        return
    try:
        write_json_atomic(_path(key), {"key": key, "found": found})
    except OSError:
        pass
