"""Which MPI library a cell's ranks really ran: the banner they printed and the libmpi the loader gave them.

The stack's version (``Stack.version``) is asked of its tools before the launch; what the launched
program loaded is evidence of its own, of two kinds:

* a **banner** the ranks print, naming the library and its version (captured from real runs in
  tests/data/mpi_library/):

  - our kernels: ``# mpi_library: ...`` (rank 0, ``MPI_Get_library_version``; src/kernels/util.c),
    e.g. ``Intel(R) MPI Library 2021.16 for Linux* OS``, ``MPICH Version: 4.0.2; ...``,
    ``Open MPI v5.0.11, package: ...``;
  - Intel MPI under ``I_MPI_DEBUG`` (the stack sets 5 or 10 for its evidence):
    ``[0] MPI startup(): Intel(R) MPI Library, Version 2021.16  Build 20250722 (id: c37a540)``;
  - MPICH 5 under ``MPIR_CVAR_DEBUG_SUMMARY`` (the stack asks for it on every transport):
    ``MPICH 5.0.2 -  - <date>``. MPICH 4.0 prints no version at any summary level (measured: level 1
    prints sizes only, level 2 is refused by 4.0.2), nor does Open MPI at any verbosity we set: IMB
    cells on those have the resolved library only.

* the **libmpi the dynamic loader resolves** for the program under the launch's own
  ``LD_LIBRARY_PATH`` (``ldd``, run on the launching host): an MPICH-ABI program (Intel's IMB on
  MPICH) loads whichever ``libmpi.so.12`` comes first, so this is what shows the ABI swap took. It is
  resolved once per (program, LD_LIBRARY_PATH) in a process and cached: an ``ldd`` of IMB-MPI1 costs
  6.1 ms (median of 20; 5.8-7.6 ms) on the 2-core VM, paid once per program and stack by a group, not
  per cell; per cell what remains is the banner scan, 0.10 ms on a 2 kB output and 2.9 ms on 0.2 MB. Inside an image the
  host's loader says nothing of the image's libraries: containerized cells are not resolved.

A cell whose banner names another vendor or version than its stack, or whose libmpi is not one of
the stack's own files (``Stack.libmpi_files``, compared by real path), ran another library than the
one it is labelled with: the judge makes it ``invalid`` (runner.judge.judge_library).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NotRequired, TypedDict

from mpiatlas.stacks import Stack

# Where a banner comes from: the kernels' header, Intel MPI's debug output, MPICH's summary.
FROM_KERNEL, FROM_I_MPI_DEBUG, FROM_MPICH_SUMMARY = "MPI_Get_library_version", "I_MPI_DEBUG", "MPIR_CVAR_DEBUG_SUMMARY"

# The kernels' header line (src/kernels/util.h; parsers.kernels reads the whole header, but needs polars,
# which a cell's process does not load).
_KERNEL_HEADER = re.compile(r"^#\s*mpi_library:\s?(.*?)\s*$", re.MULTILINE)
_IMPI_STARTUP = re.compile(r"^\[\d+\] MPI startup\(\):\s*(Intel\(R\) MPI Library, Version .*?)\s*$", re.MULTILINE)
_MPICH_SUMMARY = re.compile(r"^(MPICH \d+\.\d+\S* - .*?)\s*$", re.MULTILINE)
# Vendor and version in a banner's text (Intel first: its library is MPICH-derived).
_VENDORS = (
    ("intelmpi", re.compile(r"Intel\(R\) MPI Library(?:,? Version)?\s+(\d+(?:\.\d+)+)")),
    ("openmpi", re.compile(r"Open MPI v?(\d+(?:\.\d+)+)")),
    ("mpich", re.compile(r"MPICH(?: Version:)?\s+(\d+(?:\.\d+)+)")),
)
# The MPI library among a program's needed libraries: Open MPI's libmpi.so.40, the MPICH ABI's
# libmpi.so.12 (Intel MPI, MPICH wheel), Debian MPICH's libmpich.so.12, MPICH 5's libmpi_abi.so.
_LDD_LIBMPI = re.compile(r"^\s*(libmpi(?:ch|_abi)?\.so[.\d]*)\s+=>\s+(.+?)(?:\s+\(0x[0-9a-f]+\))?\s*$", re.MULTILINE)
_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


@dataclass(frozen=True)
class Banner:
    """A library banner the ranks printed: its line, where it comes from, vendor (a stack kind) and version."""

    line: str
    source: str
    vendor: str | None
    version: str | None


def identify(text: str) -> tuple[str | None, str | None]:
    """(stack kind, version) a library banner names, or (None, None)."""
    for vendor, pattern in _VENDORS:
        match = pattern.search(text)
        if match:
            return vendor, match[1]
    return None, None


def banners(output: str) -> list[Banner]:
    """Every distinct banner in a launch's output (stdout + stderr), the kernels' own first."""
    found = [(m[1], FROM_KERNEL) for m in _KERNEL_HEADER.finditer(output)]
    found += [(m[1], FROM_I_MPI_DEBUG) for m in _IMPI_STARTUP.finditer(output)]
    found += [(m[1], FROM_MPICH_SUMMARY) for m in _MPICH_SUMMARY.finditer(output)]
    seen: dict[tuple[str, str], Banner] = {}
    for line, source in found:
        seen.setdefault((line, source), Banner(line, source, *identify(line)))
    return list(seen.values())


@dataclass(frozen=True)
class Resolved:
    """What the dynamic loader gives a program as its MPI library (``path`` None: none found)."""

    program: str
    ld_library_path: str | None
    soname: str | None = None
    path: str | None = None  # as the loader names it (a symlink, e.g. the MPICH-ABI directory's)
    real_path: str | None = None
    note: str | None = None  # why there is no path


@cache
def resolve_libmpi(program: str, ld_library_path: str | None) -> Resolved:
    """The libmpi ``program`` loads under ``LD_LIBRARY_PATH=ld_library_path`` (None: unset), per ``ldd``.

    Cached per process: a group of cells runs one program per stack many times, and the loader's
    answer only changes when the program or its library directories do."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return Resolved(program, ld_library_path, note="ldd is not on PATH")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    try:
        out = subprocess.run([ldd, program], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return Resolved(program, ld_library_path, note=f"ldd {program}: {exc}")
    return parse_ldd(out.stdout, program, ld_library_path) if out.returncode == 0 else \
        Resolved(program, ld_library_path, note=f"ldd {program} exited {out.returncode}: {out.stderr.strip()[-300:]}")


def parse_ldd(text: str, program: str, ld_library_path: str | None) -> Resolved:
    """The MPI library of ``ldd``'s listing of ``program``."""
    match = _LDD_LIBMPI.search(text)
    if match is None:
        return Resolved(program, ld_library_path, note=f"{program} needs no libmpi (static, or loads it itself)")
    soname, target = match[1], match[2].strip()
    if target == "not found":
        return Resolved(program, ld_library_path, soname, note=f"{soname} not found")
    return Resolved(program, ld_library_path, soname, target, os.path.realpath(target))


def expected_version(stack: Stack) -> str | None:
    """The version number in the stack's own version line (e.g. 'MPICH 5.0.2' -> '5.0.2')."""
    match = _VERSION.search(stack.version())
    return match[1] if match else None


def same_version(seen: str, expected: str) -> bool:
    """Versions agree to the precision both give ('2021.16' and '2021.16.1' agree, '4.0.2' and '5.0.2' do not)."""
    a, b = seen.split("."), expected.split(".")
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class Expected(TypedDict):
    """The library a launch on a stack must show: kind, version, prefix, its own libmpi files."""

    kind: str
    version: str | None
    prefix: str
    libmpi: list[str]


class BannerSeen(TypedDict):
    line: str
    source: str


class LibraryRecord(TypedDict):
    """What a launch showed of its MPI library (provenance.json ``mpi_library``): the first banner,
    every banner when there are more, and the loader's answer (``libmpi_path`` None and a
    ``libmpi_note`` when not resolved); ``expected``: its stack's."""

    banner: str | None
    banner_source: str | None
    vendor: str | None
    version: str | None
    banners: NotRequired[list[BannerSeen]]
    libmpi_path: str | None
    libmpi_real_path: NotRequired[str | None]
    libmpi_soname: NotRequired[str | None]
    resolved_for: NotRequired[str]
    ld_library_path: NotRequired[str | None]
    libmpi_note: NotRequired[str]
    expected: NotRequired[Expected]


def expectation(stack: Stack) -> Expected:
    """What a launch on ``stack`` must show: its kind, version, prefix and own libmpi files (real paths)."""
    return {"kind": stack.kind, "version": expected_version(stack), "prefix": str(stack.prefix),
            "libmpi": sorted(stack.libmpi_files())}


def evidence(stack: Stack, program: list[str], ld_library_path: str | None, output: str,
             containerized: bool = False) -> LibraryRecord:
    """What the launch of ``program`` on ``stack`` shows of its library, for provenance (``mpi_library``)
    and the judge (``problems``). The program's libmpi is resolved unless its ranks run in an image."""
    resolved = None if containerized or not program else resolve_libmpi(program[0], ld_library_path)
    record = observed(output, resolved)
    record["expected"] = expectation(stack)
    return record


def observed(output: str, resolved: Resolved | None) -> LibraryRecord:
    """The banners in ``output`` and the loader's answer (None: not resolved, the ranks ran in an image)."""
    found = banners(output)
    first = found[0] if found else None
    record: LibraryRecord = {
        "banner": first.line if first else None, "banner_source": first.source if first else None,
        "vendor": first.vendor if first else None, "version": first.version if first else None,
        "libmpi_path": None,
    }
    if len(found) > 1:
        record["banners"] = [{"line": b.line, "source": b.source} for b in found]
    if resolved is None:
        record["libmpi_note"] = "not resolved: the ranks run inside the image"
        return record
    record.update({"libmpi_path": resolved.path, "libmpi_real_path": resolved.real_path,
                   "libmpi_soname": resolved.soname, "resolved_for": resolved.program,
                   "ld_library_path": resolved.ld_library_path})
    if resolved.note:
        record["libmpi_note"] = resolved.note
    return record


def problems(seen: LibraryRecord) -> list[str]:
    """Why the library a launch shows (``evidence``) is not its stack's (``seen["expected"]``), in words:
    what was expected, what was seen."""
    if "expected" not in seen:
        raise ValueError("mpi_library record without 'expected': its stack's library is not known")
    wanted = seen["expected"]
    kind = wanted["kind"]
    label = f"{kind} {wanted['version'] or '(version unknown)'} at {wanted['prefix']}"
    found: list[str] = []
    first: list[BannerSeen] = ([{"line": seen["banner"], "source": seen["banner_source"] or "?"}]
                               if seen["banner"] else [])
    for banner in seen.get("banners") or first:
        vendor, version = identify(banner["line"])
        if vendor != kind:
            found.append(f"the ranks' {banner['source']} banner {banner['line'][:200]!r} names "
                         f"{vendor or 'an unknown library'}, but the cell's stack is {label}")
        elif version and wanted["version"] and not same_version(version, wanted["version"]):
            found.append(f"the ranks' {banner['source']} banner names {vendor} {version}, "
                         f"but the cell's stack is {label}")
    real, own, ld_library_path = seen.get("libmpi_real_path"), set(wanted["libmpi"]), seen.get("ld_library_path")
    where = f"under LD_LIBRARY_PATH={ld_library_path!r}" if ld_library_path else "with LD_LIBRARY_PATH unset"
    if real and own and real not in own:
        found.append(f"the dynamic loader resolves {Path(seen.get('resolved_for', '?')).name}'s {seen['libmpi_soname']} to "
                     f"{seen['libmpi_path']} (real path {real}) {where}, not to the stack's own "
                     f"{' or '.join(sorted(own))} ({label})")
    elif seen.get("libmpi_soname") and not seen.get("libmpi_path"):
        found.append(f"the dynamic loader finds no {seen['libmpi_soname']} for "
                     f"{Path(seen.get('resolved_for', '?')).name} {where} (expected {label})")
    return found


def label(seen: LibraryRecord | None) -> str | None:
    """The library seen, in one short text for the cells table: 'mpich 5.0.2', else the banner, else None."""
    if not seen:
        return None
    if vendor := seen["vendor"]:
        return f"{vendor} {seen['version']}" if seen["version"] else vendor
    return seen["banner"]
