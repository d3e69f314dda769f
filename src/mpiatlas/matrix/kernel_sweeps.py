"""The kernels' swept knobs: a knob of matsum or jacobi may take a list, and every combination of
values is one variant group, the ``algorithm`` segment of a kernel cell's id (not a cell field).

* matsum: ``dims`` one triple or a list of triples; ``procdims`` explicit process grids of 1 to 3
  axes (``[[2, 1], [1, 2], [3, 4, 2]]``).
* jacobi: ``mode`` weak, strong or ``[weak, strong]``; ``L`` (weak) and ``N`` (strong) one size or
  a list of sizes, a size being n (n³) or [x, y, z] (a flat list of exactly three integers stays
  one [x, y, z] size, as it always was: sweep three cubes as triples); ``procdims`` explicit 3-axis
  grids; ``hybrid.cores`` every ranks × threads pair whose product is each core count (its pure MPI
  pair included), beside the ``hybrid.processes`` × ``hybrid.threads`` product. Weak mode gives
  every core L³ points, so a rank of t threads owns t·L³ and all ranks × threads pairs on the same
  cores solve the same global grid (:func:`jacobi_global_dims`).

An explicit grid runs at the process count it multiplies to, which must be one of the kernel's
process counts; there it replaces the stack's default grid (MPI_Dims_create). Group names keep
today's form when a knob has one value, so sealed results keep resolving::

    matsum  t<topos>-<dists>[-g<grid>][-d<X>x<Y>x<Z>]     -d only when dims takes several values
    jacobi  <mode>-<L|N><size>-t<threads>[-g<grid>]

This module imports nothing of mpiatlas: the config's validation and the kernel programs both read it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from mpiatlas.matrix.kernel_blocks import JacobiBlock, MatsumBlock

Grid = tuple[int, ...]
Triple = tuple[int, int, int]

MATSUM_DEFAULT_DIMS: Triple = (240, 100, 100)
JACOBI_SIZE_KEY = {"weak": "L", "strong": "N"}
_GRID_SEGMENT = re.compile(r"-g(\d+(?:x\d+)*)(?=-|$)")


# -- values ------------------------------------------------------------------------------------


def triple(value: int | Iterable[int]) -> Triple:
    """n -> (n, n, n); [x, y, z] -> (x, y, z)."""
    if isinstance(value, int):
        return (value, value, value)
    x, y, z = (int(v) for v in value)
    return (x, y, z)


def size_name(size: Triple) -> str:
    """``16`` for a cube, ``32x16x16`` otherwise (the size part of a jacobi group)."""
    return str(size[0]) if len(set(size)) == 1 else "x".join(map(str, size))


def grid_name(grid: Grid) -> str:
    return "x".join(map(str, grid))


def grid_text(grid: Iterable[int]) -> str:
    """A grid as people write it: ``2×1``."""
    return "×".join(map(str, grid))


def group_grid(group: str) -> Grid | None:
    """The explicit process grid a matsum/jacobi variant group names (``-g2x1``), or None."""
    match = _GRID_SEGMENT.search(group)
    return tuple(int(v) for v in match.group(1).split("x")) if match else None


def is_flat_triple(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value)


def sizes(value: Any) -> list[Triple]:
    """Every size a jacobi ``L``/``N`` value names (see the module docstring), in config order."""
    if value is None:
        return []
    if isinstance(value, int) or is_flat_triple(value):
        return [triple(value)]
    return [triple(v) for v in value]


def matsum_dims(block: MatsumBlock) -> list[Triple]:
    dims = block.get("dims", list(MATSUM_DEFAULT_DIMS))
    return [triple(dims)] if is_flat_triple(dims) else [triple(d) for d in dims]


def grids(block: MatsumBlock | JacobiBlock) -> list[Grid]:
    return [tuple(int(v) for v in g) for g in block.get("procdims") or []]


def jacobi_modes(block: JacobiBlock) -> list[str]:
    mode = block.get("mode", "weak")
    return [mode] if isinstance(mode, str) else list(mode)


def jacobi_thread_counts(block: JacobiBlock) -> dict[int, list[int]]:
    """threads per rank -> process counts: pure MPI (1) from ``processes``, hybrid from
    ``hybrid.processes`` × ``hybrid.threads`` and every ranks × threads pair of ``hybrid.cores``."""
    counts: dict[int, set[int]] = {1: set(block.get("processes", []))}
    hybrid = block.get("hybrid") or {}
    for threads in hybrid.get("threads", []):
        counts.setdefault(threads, set()).update(hybrid.get("processes", []))
    for cores in hybrid.get("cores", []):
        for threads in range(1, cores + 1):
            if cores % threads == 0:
                counts.setdefault(threads, set()).add(cores // threads)
    return {t: sorted(c) for t, c in sorted(counts.items()) if c}


# -- variants ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatsumVariant:
    """One matsum launch shape: its group, the values it runs with and the process counts."""

    group: str
    dims: Triple
    topos: tuple[int, ...]
    dists: tuple[str, ...]
    grid: Grid | None
    counts: tuple[int, ...]


def dims_create(n: int, ndims: int = 3) -> Grid:
    """MPI_Dims_create(n, ndims) with every dimension free: the prime factors of n, largest first,
    each multiplied into the smallest dimension so far, then sorted non-increasing (what Open MPI
    and MPICH return; the kernel records the grid it actually used)."""
    factors, rest, p = [], n, 2
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    dims = [1] * ndims
    for f in sorted(factors, reverse=True):
        dims[dims.index(min(dims))] *= f
    return tuple(sorted(dims, reverse=True))


@dataclass(frozen=True)
class JacobiVariant:
    group: str
    mode: str
    size: Triple
    threads: int
    grid: Grid | None
    counts: tuple[int, ...]

    @property
    def size_key(self) -> str:
        return JACOBI_SIZE_KEY[self.mode]

    def global_dims(self, np: int) -> Triple:
        """The global grid a launch of ``np`` ranks solves (src/kernels/jacobi.c): strong N; weak the
        grid of the np·threads cores' pure MPI run (their default grid × L; a pure run's own grid,
        explicit or not, × L), so hybrid and pure MPI on the same cores do the same work."""
        if self.mode == "strong":
            return self.size
        if self.threads > 1:
            cores = dims_create(np * self.threads)
        else:
            cores = self.grid if self.grid is not None else dims_create(np)
        x, y, z = (c * s for c, s in zip(cores, self.size, strict=True))
        return (x, y, z)


def split_by_grid(counts: Iterable[int], grid_list: list[Grid]) -> list[tuple[Grid | None, tuple[int, ...]]]:
    """(None, the counts no explicit grid covers), then (grid, (its P,)) for each grid whose P is in ``counts``."""
    counts = sorted(set(counts))
    covered = {math.prod(g) for g in grid_list}
    out: list[tuple[Grid | None, tuple[int, ...]]] = []
    default = tuple(p for p in counts if p not in covered)
    if default:
        out.append((None, default))
    out += [(g, (math.prod(g),)) for g in grid_list if math.prod(g) in counts]
    return out


def matsum_variants(block: MatsumBlock) -> list[MatsumVariant]:
    dims_list = matsum_dims(block)
    topos = tuple(block.get("topo", [1]))
    dists = tuple(block.get("dist", ["slab"]))
    dist_part = "+".join(dists)
    out = []
    for dims in dims_list:
        dims_part = f"-d{'x'.join(map(str, dims))}" if len(dims_list) > 1 else ""
        for grid, counts in split_by_grid(block.get("processes", []), grids(block)):
            if grid is None:
                group = f"t{''.join(map(str, topos))}-{dist_part}{dims_part}"
                out.append(MatsumVariant(group, dims, topos, dists, None, counts))
            else:
                group = f"t{len(grid)}-{dist_part}-g{grid_name(grid)}{dims_part}"
                out.append(MatsumVariant(group, dims, (len(grid),), dists, grid, counts))
    return out


def jacobi_variants(block: JacobiBlock) -> list[JacobiVariant]:
    out = []
    grid_list = grids(block)
    for mode in jacobi_modes(block):
        key = JACOBI_SIZE_KEY[mode]
        for size in sizes(block.get(key)):
            for threads, counts in jacobi_thread_counts(block).items():
                base = f"{mode}-{key}{size_name(size)}-t{threads}"
                for grid, at in split_by_grid(counts, grid_list):
                    group = base if grid is None else f"{base}-g{grid_name(grid)}"
                    out.append(JacobiVariant(group, mode, size, threads, grid, at))
    return out


# -- what is wrong with a block ------------------------------------------------------------------


def _grid_problems(key: str, grid_list: list[Grid], counts: list[int], counts_key: str) -> list[str]:
    return [f"{key}.procdims.{i}: grid {list(g)} runs at P = {'·'.join(map(str, g))} = {math.prod(g)} processes, "
            f"which is not one of {counts_key} {counts} (a grid's product must equal its P)"
            for i, g in enumerate(grid_list) if math.prod(g) not in counts]


def matsum_problems(block: MatsumBlock, key: str = "kernels.matsum") -> list[str]:
    return _grid_problems(key, grids(block), sorted(block.get("processes", [])), f"{key}.processes")


def jacobi_problems(block: JacobiBlock, key: str = "kernels.jacobi") -> list[str]:
    problems = []
    modes = jacobi_modes(block)
    for mode, size_key in JACOBI_SIZE_KEY.items():
        what = "points per rank" if size_key == "L" else "points in total"
        if mode in modes and size_key not in block:
            problems.append(f"{key}: mode {mode!r} needs {size_key} ({what} per axis)")
        if mode not in modes and size_key in block:
            problems.append(f"{key}.{size_key}: not used: {size_key} ({what} per axis) is for mode {mode!r}, "
                            f"and mode is {block.get('mode', 'weak')!r}")
    by_threads = jacobi_thread_counts(block)
    counts = sorted({p for c in by_threads.values() for p in c})
    grid_list = grids(block)
    problems += _grid_problems(key, grid_list, counts, f"the process counts of {key} (processes, hybrid)")
    # Strong scaling splits N points per axis over the grid's ranks: an axis needs a point per rank.
    for i, g in enumerate(grid_list):
        for n in sizes(block.get("N")) if "strong" in modes else []:
            short = [a for a in range(3) if n[a] < g[a]]
            if short:
                problems.append(f"{key}.procdims.{i}: grid {list(g)} has more ranks on axis {short[0]} than "
                                f"N = {list(n)} has points ({n[short[0]]})")
    return problems


def kernel_sweep_problems(kernels: Mapping[str, Any] | None) -> list[str]:
    """Every cross-field problem of the ``kernels:`` block's sweeps (the schema checks types)."""
    kernels = kernels or {}
    problems = matsum_problems(kernels["matsum"]) if kernels.get("matsum") else []
    return problems + (jacobi_problems(kernels["jacobi"]) if kernels.get("jacobi") else [])
