"""Typed records of the process grids compared at equal P (:mod:`mpiatlas.models.kernel_grids`):
kernels.json's ``matsum_grids`` and a jacobi entry's ``grids``. As the other record modules:
``to_json()`` gives the entry back byte for byte, ``from_json`` raises
:class:`~mpiatlas.models.json_fields.FitRecordError` naming the file and key path. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpiatlas.models.json_fields import (
    FitRecordError,
    Interval,
    JsonValue,
    Scalar,
    located,
    read_interval,
    read_list,
    read_number,
    read_numbers,
    read_object,
    read_records,
    read_text,
    required_integer,
    required_text,
)


# What a grid comparison's entry holds beside its coordinates (the rest of its keys).
_COMPARISON_FIELDS = ("value", "grids", "best", "spread", "headline")
_GRID_FIELDS = ("grid", "procdims", "explicit", "measured_us", "ci_us", "n_reps", "reps_us", "vs_best")


@dataclass(frozen=True)
class GridPoint:
    """One process grid of a comparison at equal P: the median over repetitions of the slowest
    rank's time (µs), its bootstrap CI, its time over the fastest grid's, and ``extras``: the
    kernel's per-grid medians beside the time (matsum's phases, jacobi's halo and MLUP/s)."""

    grid: str
    procdims: tuple[int, ...]
    explicit: bool  # asked for (procdims), else MPI_Dims_create's
    measured_us: float | None
    ci_us: Interval
    n_reps: int
    reps_us: tuple[float | None, ...]
    vs_best: float | None
    extras: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, JsonValue]:
        return {"grid": self.grid, "procdims": list(self.procdims), "explicit": self.explicit,
                "measured_us": self.measured_us, "ci_us": [self.ci_us[0], self.ci_us[1]], "n_reps": self.n_reps,
                "reps_us": list(self.reps_us), "vs_best": self.vs_best, **self.extras}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> GridPoint:
        obj = read_object(value, where, path)
        explicit = obj.get("explicit", False)
        if not isinstance(explicit, bool):
            raise FitRecordError(located(where, f"{path}.explicit") + f": expected true or false, got {explicit!r}")
        procdims = tuple(required_integer({"v": v}, "v", where, f"{path}.procdims[{i}]")
                         for i, v in enumerate(read_list(obj, "procdims", where, path)))
        return cls(grid=required_text(obj, "grid", where, path), procdims=procdims, explicit=explicit,
                   measured_us=read_number(obj, "measured_us", where, path), ci_us=read_interval(obj, "ci_us", where, path),
                   n_reps=required_integer(obj, "n_reps", where, path), reps_us=read_numbers(obj, "reps_us", where, path),
                   vs_best=read_number(obj, "vs_best", where, path),
                   extras={k: read_number(obj, k, where, path) for k in obj if k not in _GRID_FIELDS})


@dataclass(frozen=True)
class GridComparison:
    """Process grids compared at one P (:mod:`mpiatlas.models.kernel_grids`): ``key`` the comparison's
    coordinates in the file's order (matsum: label, stack, transport, mapping, dims, dist, np; jacobi:
    problem, threads, np), ``value`` the time column compared, every grid fastest first, the fastest's
    name and ``spread`` = the slowest grid's time over it."""

    key: dict[str, Scalar]
    value: str
    grids: tuple[GridPoint, ...]
    best: str
    spread: float | None
    headline: str

    def to_json(self) -> dict[str, JsonValue]:
        return {**self.key, "value": self.value, "grids": [g.to_json() for g in self.grids], "best": self.best,
                "spread": self.spread, "headline": self.headline}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> GridComparison:
        obj = read_object(value, where, path)
        key: dict[str, Scalar] = {}
        for k, v in obj.items():
            if k in _COMPARISON_FIELDS:
                continue
            if isinstance(v, (list, dict)):
                raise FitRecordError(located(where, f"{path}.{k}") + f": expected a coordinate (a scalar), got {v!r}")
            key[k] = v
        return cls(key=key, value=required_text(obj, "value", where, path),
                   grids=read_records(obj, "grids", GridPoint.from_json, where, path),
                   best=required_text(obj, "best", where, path), spread=read_number(obj, "spread", where, path),
                   headline=read_text(obj, "headline", where, path) or "")


def grid_comparisons(entries: JsonValue, where: str, path: str) -> list[GridComparison]:
    """A JSON array of grid comparisons (kernels.json's ``matsum_grids``, a jacobi entry's ``grids``)."""
    if not isinstance(entries, list):
        raise FitRecordError(located(where, path) + f": expected an array of grid comparisons, got {entries!r}")
    return [GridComparison.from_json(e, where, f"{path}[{i}]") for i, e in enumerate(entries)]


__all__ = ["GridComparison", "GridPoint", "grid_comparisons"]
