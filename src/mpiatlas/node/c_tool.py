"""A node tool written in C (no MPI), built once into the user cache: the copy kernel behind the
node's limits (node.copy_kernel) and the cpu-pair probe of every launch (node.pair_latency).

A binary is cached under a digest of its source, the compiler's path and ``--version``, the flag sets
tried and the cpu they were tuned for: the user cache may be a home directory shared by nodes of
several kinds, and a ``-march=native`` binary runs only where the cpu matches. Where the compiler
refuses a flag set, the next is tried.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mpiatlas.files import shipped_kernel_sources, user_cache_dir

CPUINFO = Path("/proc/cpuinfo")


class CToolError(RuntimeError):
    """The tool could not be built: no compiler, an unreadable source, or every flag set refused."""


def compiler() -> str | None:
    """The C compiler: ``$CC``, else cc, else gcc, as found on PATH (None: none)."""
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc")):
        found = shutil.which(name)
        if found:
            return found
    return None


def cpu_identity(cpuinfo: Path = CPUINFO) -> str:
    """The first cpu's model and ISA flags: a ``-march=native`` binary runs only where they match, and
    the user cache may be a home directory shared by nodes of several kinds."""
    try:
        lines = cpuinfo.read_text().split("\n\n", 1)[0].splitlines()
    except OSError:
        return ""
    keep = ("model name", "flags", "Features", "CPU part", "cpu model", "isa")  # x86, Arm, MIPS, RISC-V
    return "\n".join(line for line in lines if line.split(":", 1)[0].strip() in keep)


def _file_identity(path: str) -> str:
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


@dataclass(frozen=True)
class CTool:
    """One tool: its source among the shipped kernels' sources, the flag sets tried in order, and
    the user-cache directory its binaries go to (named ``<stem>-<digest>``)."""

    source: str
    flag_sets: tuple[tuple[str, ...], ...]
    cache: str
    # How the compiler is told apart: by its ``--version`` (a wrapper script's version is the
    # compiler's), or by the compiler file's path, size and mtime, which costs no process: for a tool
    # built, or found built, in every run-cell process.
    by_version: bool = True

    @property
    def stem(self) -> str:
        return self.source.removesuffix(".c")

    def source_path(self) -> Path:
        return shipped_kernel_sources() / self.source

    def digest(self, cc: str) -> str:
        """The build's identity (see the module docstring)."""
        src = self.source_path()
        try:
            text = src.read_bytes()
        except OSError as exc:
            raise CToolError(f"{src}: cannot read the source of {self.stem} ({exc})") from exc
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout \
            if self.by_version else _file_identity(cc)
        build = repr(self.flag_sets) + cpu_identity()
        return hashlib.sha256(text + cc.encode() + version.encode() + build.encode()).hexdigest()[:16]

    def build(self, cache_dir: Path | None = None) -> Path:
        """The tool's binary, compiled once per source, compiler and cpu into ``cache_dir``."""
        cc = compiler()
        if cc is None:
            raise CToolError(f"no C compiler on PATH (cc, gcc or $CC) to build {self.stem}")
        src = self.source_path()
        digest = self.digest(cc)
        out_dir = user_cache_dir(self.cache) if cache_dir is None else cache_dir
        binary = out_dir / f"{self.stem}-{digest}"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
        out_dir.mkdir(parents=True, exist_ok=True)
        aside = out_dir / f".{self.stem}-{digest}.{os.getpid()}"
        errors = []
        for flags in self.flag_sets:
            command = [cc, *flags, f"-DBUILD_FLAGS=\"{' '.join(flags)}\"", "-o", str(aside), str(src)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                aside.replace(binary)  # atomic: a concurrent build of the same digest writes the same file
                return binary
            errors.append(f"{' '.join(flags)}: {done.stderr.strip()[-300:]}")
        raise CToolError(f"{cc} could not build {src} with any of the flag sets: {'; '.join(errors)}")
