"""Typed records of the matsum entries of ``fits/kernels.json`` (:func:`mpiatlas.models.kernels.fit_matsum`):
the Amdahl-with-communication fit of the distributed matrix sum, so the report reads fields, not keys.

As :mod:`mpiatlas.models.ring_records`: a figure the file stores as ``null`` is ``None`` here,
``record.to_json()`` gives the entry back as the fit writes it (key order included), and
:meth:`MatsumFit.from_json` raises :class:`~mpiatlas.models.json_fields.FitRecordError` naming the
file and the key path. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpiatlas.models.json_fields import (
    FitRecordError,
    Interval,
    JsonObject,
    JsonValue,
    located,
    read_bool,
    read_integer,
    read_integers,
    read_interval,
    read_number,
    read_numbers,
    read_object,
    read_records,
    read_text,
    required_integer,
    required_text,
)

# The phase times a matsum point or rank may carry (the tables of older kernels lack some).
PHASES: tuple[str, ...] = ("scatter_us", "compute_us", "gather_us")
Topo = int | str | tuple[int, ...] | None  # the kernel's topo column as the table holds it


def _numbers_by_key(obj: JsonObject, key: str, where: str, path: str) -> dict[str, float | None]:
    values = read_object(obj.get(key, {}), where, f"{path}.{key}")
    return {k: read_number(values, k, where, f"{path}.{key}") for k in values}


def _required_bool(obj: JsonObject, key: str, where: str, path: str) -> bool:
    value = read_bool(obj, key, where, path)
    if value is None:
        raise FitRecordError(located(where, f"{path}.{key}") + ": required, true or false")
    return value


def _topo(obj: JsonObject, where: str, path: str) -> Topo:
    value = obj.get("topo")
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return value
    if isinstance(value, list):
        return read_integers(obj, "topo", where, path)
    raise FitRecordError(located(where, f"{path}.topo") + f": expected an integer, a string or integers, got {value!r}")


def _ci(v: Interval) -> list[JsonValue]:
    return [v[0], v[1]]


@dataclass(frozen=True)
class GatherOrder:
    """At one P ≥ 3: every rank's median gather time, the ranks slowest first, each non-root rank's
    binomial subtree size, and the Spearman correlation of the gather time with it and with the rank
    (a linear gather's order), with the verdict they give."""

    np: int
    gather_us_by_rank: dict[str, float | None]
    slowest_first: tuple[int, ...]
    binomial_subtree: dict[str, int]
    spearman_binomial: float | None
    spearman_linear: float | None
    verdict: str

    def to_json(self) -> JsonObject:
        return {"np": self.np, "gather_us_by_rank": dict(self.gather_us_by_rank),
                "slowest_first": list(self.slowest_first), "binomial_subtree": dict(self.binomial_subtree),
                "spearman_binomial": self.spearman_binomial, "spearman_linear": self.spearman_linear,
                "verdict": self.verdict}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> GatherOrder:
        obj = read_object(value, where, path)
        subtree = read_object(obj.get("binomial_subtree", {}), where, f"{path}.binomial_subtree")
        return cls(np=required_integer(obj, "np", where, path),
                   gather_us_by_rank=_numbers_by_key(obj, "gather_us_by_rank", where, path),
                   slowest_first=read_integers(obj, "slowest_first", where, path),
                   binomial_subtree={k: required_integer(subtree, k, where, f"{path}.binomial_subtree")
                                     for k in subtree},
                   spearman_binomial=read_number(obj, "spearman_binomial", where, path),
                   spearman_linear=read_number(obj, "spearman_linear", where, path),
                   verdict=required_text(obj, "verdict", where, path))


@dataclass(frozen=True)
class PhasesByRank:
    """At one P, every rank's medians over repetitions: ``rank``, ``n_reps`` and the phase times
    (scatter, compute, gather, total µs) its table has."""

    np: int
    ranks: tuple[dict[str, float | None], ...]

    def to_json(self) -> JsonObject:
        return {"np": self.np, "ranks": [dict(r) for r in self.ranks]}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> PhasesByRank:
        obj = read_object(value, where, path)
        return cls(np=required_integer(obj, "np", where, path),
                   ranks=read_records(obj, "ranks", lambda v, w, p: _numbers_by_key({"r": v}, "r", w, p), where, path))


@dataclass(frozen=True)
class MatsumPoint:
    """One P of a matsum series: the median over repetitions of the slowest rank's time per
    iteration against the Amdahl model, P_eff = min(P, cores), and the phase times (slowest rank)."""

    np: int
    p_eff: int
    oversubscribed: bool
    n_reps: int
    measured_us: float | None
    predicted_us: float | None
    rel_err: float | None
    reps_us: tuple[float | None, ...] = ()
    phases: dict[str, float | None] = field(default_factory=dict)  # of PHASES, those the table has

    def to_json(self) -> JsonObject:
        return {"np": self.np, "p_eff": self.p_eff, "oversubscribed": self.oversubscribed, "n_reps": self.n_reps,
                "measured_us": self.measured_us, "predicted_us": self.predicted_us, "rel_err": self.rel_err,
                "reps_us": list(self.reps_us), **self.phases}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> MatsumPoint:
        obj = read_object(value, where, path)
        return cls(np=required_integer(obj, "np", where, path), p_eff=required_integer(obj, "p_eff", where, path),
                   oversubscribed=_required_bool(obj, "oversubscribed", where, path),
                   n_reps=required_integer(obj, "n_reps", where, path),
                   measured_us=read_number(obj, "measured_us", where, path),
                   predicted_us=read_number(obj, "predicted_us", where, path),
                   rel_err=read_number(obj, "rel_err", where, path), reps_us=read_numbers(obj, "reps_us", where, path),
                   phases={k: read_number(obj, k, where, path) for k in PHASES if k in obj})


@dataclass(frozen=True)
class MatsumFit:
    """One entry of kernels.json's ``matsum``: one stack/transport/mapping, dims, topo and dist's
    T(P) = s + p/min(P, cores) + c·⌈log2 P⌉ (``model``), with bootstrap CIs, the serial fraction
    s/(s+p) and 1/it, the points, and the gather order and per-rank phases of its cells. ``error``
    (the process counts cannot separate s, p and c): no fitted figures, the gather order and phases
    still there."""

    label: str | None = None
    stack: str | None = None
    transport: str | None = None
    mapping: str | None = None
    dims: str | None = None  # "96×40×40", "?" when unknown
    topo: Topo = None
    dist: str | None = None
    model: str = ""
    cores: int = 0
    gather_order: tuple[GatherOrder, ...] = ()
    phases_by_rank: tuple[PhasesByRank, ...] = ()
    error: str | None = None
    s_us: float | None = None
    p_us: float | None = None
    c_us: float | None = None
    s_ci_us: Interval = (None, None)
    p_ci_us: Interval = (None, None)
    c_ci_us: Interval = (None, None)
    serial_fraction: float | None = None
    serial_fraction_ci: Interval = (None, None)
    max_speedup: float | None = None
    points: tuple[MatsumPoint, ...] = ()
    headline: str = ""
    fails_where: str = ""

    @property
    def fitted(self) -> bool:
        return self.error is None

    def to_json(self) -> JsonObject:
        """The entry as kernels.json holds it (the key order fit_matsum has always written)."""
        topo: JsonValue = list(self.topo) if isinstance(self.topo, tuple) else self.topo
        base: JsonObject = {
            "label": self.label, "stack": self.stack, "transport": self.transport, "mapping": self.mapping,
            "dims": self.dims, "topo": topo, "dist": self.dist, "model": self.model, "cores": self.cores,
            "gather_order": [g.to_json() for g in self.gather_order],
            "phases_by_rank": [p.to_json() for p in self.phases_by_rank]}
        if self.error is not None:
            return {**base, "error": self.error}
        return {**base, "s_us": self.s_us, "p_us": self.p_us, "c_us": self.c_us, "s_ci_us": _ci(self.s_ci_us),
                "p_ci_us": _ci(self.p_ci_us), "c_ci_us": _ci(self.c_ci_us), "serial_fraction": self.serial_fraction,
                "serial_fraction_ci": _ci(self.serial_fraction_ci), "max_speedup": self.max_speedup,
                "points": [p.to_json() for p in self.points], "headline": self.headline,
                "fails_where": self.fails_where}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = "kernels.json", path: str = "$") -> MatsumFit:
        obj = read_object(value, where, path)
        return cls(
            label=read_text(obj, "label", where, path), stack=read_text(obj, "stack", where, path),
            transport=read_text(obj, "transport", where, path), mapping=read_text(obj, "mapping", where, path),
            dims=read_text(obj, "dims", where, path), topo=_topo(obj, where, path),
            dist=read_text(obj, "dist", where, path), model=read_text(obj, "model", where, path) or "",
            cores=read_integer(obj, "cores", where, path) or 0,
            gather_order=read_records(obj, "gather_order", GatherOrder.from_json, where, path),
            phases_by_rank=read_records(obj, "phases_by_rank", PhasesByRank.from_json, where, path),
            error=read_text(obj, "error", where, path),
            s_us=read_number(obj, "s_us", where, path), p_us=read_number(obj, "p_us", where, path),
            c_us=read_number(obj, "c_us", where, path), s_ci_us=read_interval(obj, "s_ci_us", where, path),
            p_ci_us=read_interval(obj, "p_ci_us", where, path), c_ci_us=read_interval(obj, "c_ci_us", where, path),
            serial_fraction=read_number(obj, "serial_fraction", where, path),
            serial_fraction_ci=read_interval(obj, "serial_fraction_ci", where, path),
            max_speedup=read_number(obj, "max_speedup", where, path),
            points=read_records(obj, "points", MatsumPoint.from_json, where, path),
            headline=read_text(obj, "headline", where, path) or "",
            fails_where=read_text(obj, "fails_where", where, path) or "")


__all__ = ["PHASES", "GatherOrder", "MatsumFit", "MatsumPoint", "PhasesByRank", "Topo"]
