"""Build the C kernels (package data ``mpiatlas/kernels_src``; the registry's kernel programs) against one MPI stack.

``build_kernels(stack, outdir)`` runs ``make -C <kernels_src> MPICC=<stack's mpicc> OUT=<outdir>``
in the stack's environment and returns ``{kernel name: binary path}``. ``OUT`` holds the
objects too, so stacks build side by side; the Makefile rebuilds an ``OUT`` when its
compiler or flags change. Launch a binary with ``stack.launch([str(path), *args], spec)``
and parse its stdout with :func:`mpiatlas.parsers.kernels.parse_kernel_output`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

from mpiatlas.matrix import layout
from mpiatlas.files import shipped_kernel_sources, user_cache_dir
from mpiatlas.programs import REGISTRY, expand, kernel_names
from mpiatlas.programs.kernels import BUILD_RECORD

KERNELS_DIR = shipped_kernel_sources()


class KernelBuildError(RuntimeError):
    """The kernels could not be built (make failed, or a binary is missing)."""


class _BuildStack(Protocol):
    def mpicc(self) -> list[str]: ...

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]: ...


def kernels_source_dir(source_dir: str | Path | None = None) -> Path:
    src = Path(source_dir) if source_dir is not None else KERNELS_DIR
    src = src.resolve()
    if not (src / "Makefile").is_file():
        raise KernelBuildError(f"no kernel sources (Makefile) in {src}: mpiatlas ships them in {KERNELS_DIR}")
    return src


def mpicc_make_value(mpicc: list[str]) -> str:
    """The ``MPICC=`` value: the wrapper argv joined for the shell that runs make's recipes."""
    if not mpicc or not all(isinstance(part, str) and part for part in mpicc):
        raise KernelBuildError(f"stack.mpicc() must be a non-empty list of strings, got {mpicc!r}")
    return shlex.join(mpicc)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count: a SLURM or
    taskset mask is what make's parallel compiles can use)."""
    return len(os.sched_getaffinity(0))


def make_kernel_args(kernels: tuple[str, ...] | list[str]) -> list[str]:
    """The Makefile's kernel lists, from the registry: ``KERNELS`` (built from ``<name>.c`` over
    util.c) and ``OPENMP_KERNELS`` (those of them compiled and linked with OpenMP)."""
    unknown = sorted(set(kernels) - set(kernel_names()))
    if unknown:
        raise KernelBuildError(f"unknown kernels {unknown}; known: {list(kernel_names())}")
    openmp = [name for name in kernels if getattr(REGISTRY[name], "openmp", False)]
    return [f"KERNELS={' '.join(kernels)}", f"OPENMP_KERNELS={' '.join(openmp)}"]


def build_kernels(
    stack: _BuildStack,
    outdir: str | Path,
    *,
    source_dir: str | Path | None = None,
    kernels: tuple[str, ...] | list[str] | None = None,
    jobs: int | None = None,
    timeout: float = 600,
    make: str = "make",
) -> dict[str, Path]:
    """Build ``kernels`` (default: every kernel of the registry) with ``stack``'s compiler wrapper
    into ``outdir``; return name -> binary.

    Raises :class:`KernelBuildError` with make's output when the build fails (warnings are
    errors: ``-Werror``).
    """
    kernels = kernel_names() if kernels is None else kernels
    src = kernels_source_dir(source_dir)
    out = Path(outdir).resolve()
    if re.search(r"\s", str(out)):
        raise KernelBuildError(f"make cannot handle whitespace in OUT: {out}")
    out.mkdir(parents=True, exist_ok=True)
    argv = [make, "-C", str(src), f"-j{int(jobs or usable_cpus())}", *make_kernel_args(kernels)]
    argv += [f"MPICC={mpicc_make_value(stack.mpicc())}", f"OUT={out}"]
    argv += [str(out / name) for name in kernels]
    env = stack.env()
    env.pop("MAKEFLAGS", None)  # a parent make's flags must not leak into this build
    env.pop("MFLAGS", None)
    try:
        proc = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise KernelBuildError(f"kernel build timed out after {timeout} s: {shlex.join(argv)}") from exc
    except FileNotFoundError as exc:
        raise KernelBuildError(f"cannot run {make!r}: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise KernelBuildError(f"kernel build failed (exit {proc.returncode}): {shlex.join(argv)}\n{tail}")
    binaries: dict[str, Path] = {}
    for name in kernels:
        path = out / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise KernelBuildError(f"make succeeded but {path} is missing or not executable")
        binaries[name] = path
    return binaries


# -- a cache of builds, across campaigns ---------------------------------------------------------
#
# Every campaign builds the kernels against every stack it uses (~7 s here, before any cell, while
# nothing else may run): the same sources with the same compiler against the same MPI give the
# same binaries, so a build is kept in the user cache under the hash of everything that decides
# it, and a campaign whose inputs hash the same copies the binaries instead of compiling.

BUILD_ENV_VARS = ("CFLAGS", "OPENMP_CFLAGS", "LDFLAGS", "LDLIBS", "CC", "OMPI_CC", "MPICH_CC", "I_MPI_CC")


def wrapper_queries(stack: _BuildStack) -> dict[str, str]:
    """What the wrapper really runs (compiler, include and library paths): Open MPI's ``--showme``,
    else MPICH's and Intel MPI's ``-show``; and the compiler's version. Flag -> "rc: output"
    (asked once per build: the cache key and the build record both use it)."""
    queries = {}
    for flag in ("--showme", "-show", "--version"):
        try:
            done = subprocess.run([*stack.mpicc(), flag], env=stack.env(), capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            queries[flag] = f"{exc}"
            continue
        queries[flag] = f"{done.returncode}: {(done.stdout + done.stderr).strip()}"
    return queries


def compiler_line(queries: dict[str, str]) -> str | None:
    """The compiler's version line (the first line ``--version`` printed), None if it failed."""
    answer = queries.get("--version", "")
    rc, _, text = answer.partition(": ")
    lines = text.strip().splitlines()
    return lines[0].strip() if rc == "0" and lines else None


def build_key(stack: _BuildStack, src: Path, kernels: tuple[str, ...] | list[str], version: str,
              queries: dict[str, str] | None = None) -> str:
    """sha256 of the sources, the wrapper argv and what it runs (``queries``: wrapper_queries,
    asked here when not given), the MPI version and the build variables make would take from the
    environment."""
    env = stack.env()
    digest = hashlib.sha256()
    for path in sorted(p for p in src.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    wrapper = shutil.which(stack.mpicc()[0], path=env.get("PATH")) or stack.mpicc()[0]
    asked = wrapper_queries(stack) if queries is None else queries
    line = "\n".join(f"{flag} -> {answer}" for flag, answer in asked.items())
    parts = [repr(stack.mpicc()), wrapper, line, version, repr(sorted(kernels)),
             repr([(name, env.get(name)) for name in BUILD_ENV_VARS])]
    digest.update("\0".join(parts).encode())
    return digest.hexdigest()


def cached_build(key: str, outdir: Path, kernels: tuple[str, ...] | list[str],
                 build: Callable[[], dict[str, Path]], cache: Path | None = None) -> tuple[dict[str, Path], Path | None]:
    """The kernels in ``outdir``: copied from the cache entry ``key`` when it holds all of them
    (returns its path), else built by ``build`` and stored for the next campaign (returns None)."""
    entry = (cache or user_cache_dir("kernels")) / key[:32]
    if all((entry / name).is_file() for name in kernels):
        outdir.mkdir(parents=True, exist_ok=True)
        binaries = {}
        for name in kernels:
            tmp = outdir / f".{name}.{os.getpid()}.tmp"
            shutil.copy2(entry / name, tmp)  # aside, then renamed: a reader never sees half a binary
            tmp.replace(outdir / name)
            binaries[name] = outdir / name
        return binaries, entry
    binaries = build()
    _store(entry, binaries)
    return binaries, None


def _store(entry: Path, binaries: dict[str, Path]) -> None:
    """Put a finished build in the cache: filled aside, renamed into place (a concurrent campaign
    storing the same key loses the rename and changes nothing). A cache that cannot be written is
    only a slower next campaign."""
    try:
        if entry.is_dir() and not all((entry / name).is_file() for name in binaries):
            shutil.rmtree(entry)  # an incomplete entry (a file lost) is never read: replace it
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
        for name, path in binaries.items():
            shutil.copy2(path, staging / name)
        try:
            staging.rename(entry)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError:
        pass


def build_labels(config: Campaign) -> list[str]:
    """Stacks whose kernels the DAG builds on the host (none when the images carry them)."""
    if config.containers.enabled:
        return []
    return sorted({c.stack for c in expand(config) if c.kind == "kernel"})


def build_outputs(config: Campaign, label: str) -> list[str]:
    """The files the build rule of stack ``label`` makes: every kernel binary, then the record."""
    out = layout.kernel_build_dir(layout.results_dir(config.campaign.name), label)
    return [f"{out}/{name}" for name in kernel_names()] + [f"{out}/{BUILD_RECORD}"]
