"""Typed records of the kernel models' entries of ``fits/kernels.json`` (``fits-kernels.schema.json``):
what a coll fit *is*, so the report reads fields, not keys it must learn from the code that wrote them.

As :mod:`mpiatlas.models.fit_records`: a figure the file stores as ``null`` is ``None`` here,
``record.to_json()`` gives the entry back byte for byte (key order included), and JSON is read only
at the file boundary: :meth:`CollFit.from_json` raises :class:`FitRecordError` naming the file and
the key path when an entry is not of its shape.

A coll entry has no ``benchmark`` key (its collective names what was measured), so it is not a
:class:`~mpiatlas.models.fit_records.Fit`: it carries its cell key itself.

Standard library only, as fit_records: the report reads these without the numerical models.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpiatlas.models.fit_records import Fit, HockneyRecord
from mpiatlas.models.json_fields import (
    FitRecordError,
    Interval,
    JsonValue,
    located,
    optional_interval,
    read_integer,
    read_number,
    read_numbers,
    read_object,
    read_records,
    read_text,
    read_texts,
    required_integer,
    required_text,
)
from mpiatlas.models.grid_records import GridComparison, GridPoint, grid_comparisons
from mpiatlas.models.jacobi_records import JacobiFit
from mpiatlas.models.matsum_records import MatsumFit
from mpiatlas.models.ring_records import RingFit

KERNELS_FILE = "kernels.json"








@dataclass(frozen=True)
class CollPoint:
    """One algorithm at one size: medians over repetitions of the time per call averaged over ranks
    (rank 0's ``t_avg_usec``) and of its min and max over ranks, µs."""

    algorithm: str
    bytes: int
    t_avg_usec: float | None
    t_min_usec: float | None
    t_max_usec: float | None
    n_reps: int
    reps_us: tuple[float | None, ...] = ()

    def to_json(self) -> dict[str, JsonValue]:
        return {"algorithm": self.algorithm, "bytes": self.bytes, "t_avg_usec": self.t_avg_usec,
                "t_min_usec": self.t_min_usec, "t_max_usec": self.t_max_usec, "n_reps": self.n_reps,
                "reps_us": list(self.reps_us)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> CollPoint:
        obj = read_object(value, where, path)
        return cls(algorithm=required_text(obj, "algorithm", where, path),
                   bytes=required_integer(obj, "bytes", where, path),
                   t_avg_usec=read_number(obj, "t_avg_usec", where, path),
                   t_min_usec=read_number(obj, "t_min_usec", where, path),
                   t_max_usec=read_number(obj, "t_max_usec", where, path),
                   n_reps=required_integer(obj, "n_reps", where, path),
                   reps_us=read_numbers(obj, "reps_us", where, path))


@dataclass(frozen=True)
class CollBest:
    """The fastest algorithm at one size (:func:`mpiatlas.models.best_algorithm.best_algorithms`'
    criterion): its time, the runner-up, ``margin`` = runner-up's time / best's − 1, and the stack
    default's time and its ratio to the best's."""

    bytes: int
    algorithm: str
    t_avg_usec: float | None
    candidates: int
    runner_up: str | None
    margin: float | None
    default_usec: float | None
    default_over_best: float | None

    def to_json(self) -> dict[str, JsonValue]:
        return {"bytes": self.bytes, "algorithm": self.algorithm, "t_avg_usec": self.t_avg_usec,
                "candidates": self.candidates, "runner_up": self.runner_up, "margin": self.margin,
                "default_usec": self.default_usec, "default_over_best": self.default_over_best}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> CollBest:
        obj = read_object(value, where, path)
        return cls(bytes=required_integer(obj, "bytes", where, path),
                   algorithm=required_text(obj, "algorithm", where, path),
                   t_avg_usec=read_number(obj, "t_avg_usec", where, path),
                   candidates=required_integer(obj, "candidates", where, path),
                   runner_up=read_text(obj, "runner_up", where, path), margin=read_number(obj, "margin", where, path),
                   default_usec=read_number(obj, "default_usec", where, path),
                   default_over_best=read_number(obj, "default_over_best", where, path))


@dataclass(frozen=True)
class CollFit:
    """One entry of kernels.json's ``coll``: one stack/transport/mapping, collective and P; its points
    per algorithm and size, the best algorithm per size and how many sizes each algorithm won."""

    label: str | None
    stack: str | None
    transport: str | None
    mapping: str | None
    collective: str
    np: int
    source: str
    algorithms: tuple[str, ...]
    oversubscribed: bool
    points: tuple[CollPoint, ...]
    best: tuple[CollBest, ...]
    wins: dict[str, int]
    headline: str

    def to_json(self) -> dict[str, JsonValue]:
        """The entry as kernels.json holds it (the key order fit_coll has always written)."""
        return {"label": self.label, "stack": self.stack, "transport": self.transport, "mapping": self.mapping,
                "collective": self.collective, "np": self.np, "source": self.source,
                "algorithms": list(self.algorithms), "oversubscribed": self.oversubscribed,
                "points": [p.to_json() for p in self.points], "best": [b.to_json() for b in self.best],
                "wins": dict(self.wins), "headline": self.headline}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = KERNELS_FILE, path: str = "$") -> CollFit:
        obj = read_object(value, where, path)
        algorithms = read_texts(obj, "algorithms", where, path)
        wins = read_object(obj.get("wins", {}), where, f"{path}.wins")
        over = obj.get("oversubscribed", False)
        if not isinstance(over, bool):
            raise FitRecordError(located(where, f"{path}.oversubscribed") + f": expected true or false, got {over!r}")
        return cls(label=read_text(obj, "label", where, path), stack=read_text(obj, "stack", where, path),
                   transport=read_text(obj, "transport", where, path), mapping=read_text(obj, "mapping", where, path),
                   collective=required_text(obj, "collective", where, path),
                   np=required_integer(obj, "np", where, path), source=read_text(obj, "source", where, path) or "",
                   algorithms=algorithms, oversubscribed=over,
                   points=read_records(obj, "points", CollPoint.from_json, where, path),
                   best=read_records(obj, "best", CollBest.from_json, where, path),
                   wins={k: required_integer(wins, k, where, f"{path}.wins") for k in wins},
                   headline=read_text(obj, "headline", where, path) or "")


def coll_records(entries: JsonValue, where: str = KERNELS_FILE, path: str = "$.coll") -> list[CollFit]:
    """Every entry of kernels.json's ``coll`` array."""
    if not isinstance(entries, list):
        raise FitRecordError(located(where, path) + f": expected an array of coll fits, got {type(entries).__name__}")
    return [CollFit.from_json(e, where, f"{path}[{i}]") for i, e in enumerate(entries)]


@dataclass(frozen=True)
class PingpongPoint:
    """One message size of the pingpong kernel: medians over repetitions of rank 0's half round trip
    (``t_usec``, and its fastest iteration ``t_min_usec``) and of its bandwidth, MB/s."""

    bytes: int
    t_usec: float | None
    t_min_usec: float | None
    MBps: float | None
    n_reps: int
    iterations_min: int | None
    reps_us: tuple[float | None, ...] = ()

    def to_json(self) -> dict[str, JsonValue]:
        return {"bytes": self.bytes, "t_usec": self.t_usec, "t_min_usec": self.t_min_usec, "MBps": self.MBps,
                "n_reps": self.n_reps, "iterations_min": self.iterations_min, "reps_us": list(self.reps_us)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> PingpongPoint:
        obj = read_object(value, where, path)
        return cls(bytes=required_integer(obj, "bytes", where, path), t_usec=read_number(obj, "t_usec", where, path),
                   t_min_usec=read_number(obj, "t_min_usec", where, path), MBps=read_number(obj, "MBps", where, path),
                   n_reps=required_integer(obj, "n_reps", where, path),
                   iterations_min=read_integer(obj, "iterations_min", where, path),
                   reps_us=read_numbers(obj, "reps_us", where, path))


def _pair(v: Interval | None) -> JsonValue:
    return None if v is None else [v[0], v[1]]




@dataclass(frozen=True)
class PingpongFit(Fit):
    """One entry of kernels.json's ``pingpong`` (benchmark "pingpong"): the kernel's medians per
    size, the 4 B latency and 4 MiB bandwidth, its piecewise Hockney fit (``hockney``, None when it
    failed: then ``error`` says why), and IMB PingPong's λ and bandwidths of the same
    stack/transport/mapping beside it (None: no IMB fit) with the kernel / IMB ratios."""

    source: str = ""
    n_reps: int = 0
    latency_4B_us: float | None = None
    bandwidth_4MiB_MBps: float | None = None
    points: tuple[PingpongPoint, ...] = ()
    imb_latency_us: float | None = None
    imb_latency_ci_us: Interval | None = None
    imb_asymptotic_bandwidth_MBps: float | None = None
    imb_asymptotic_bandwidth_ci_MBps: Interval | None = None
    imb_peak_bandwidth_MBps: float | None = None
    imb_peak_bandwidth_ci_MBps: Interval | None = None
    hockney: HockneyRecord | None = None
    kernel_vs_imb_latency: float | None = None
    kernel_vs_imb_asymptotic_bandwidth: float | None = None
    kernel_vs_imb_peak_bandwidth: float | None = None
    headline: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The entry as kernels.json holds it (the key order fit_pingpong has always written: the
        Hockney figures after IMB's, the ratios and the headline last)."""
        head = self.cell_json()
        entry: dict[str, JsonValue] = {
            **head, "source": self.source, "n_reps": self.n_reps, "latency_4B_us": self.latency_4B_us,
            "bandwidth_4MiB_MBps": self.bandwidth_4MiB_MBps, "points": [p.to_json() for p in self.points],
            "imb_latency_us": self.imb_latency_us, "imb_latency_ci_us": _pair(self.imb_latency_ci_us),
            "imb_asymptotic_bandwidth_MBps": self.imb_asymptotic_bandwidth_MBps,
            "imb_asymptotic_bandwidth_ci_MBps": _pair(self.imb_asymptotic_bandwidth_ci_MBps),
            "imb_peak_bandwidth_MBps": self.imb_peak_bandwidth_MBps,
            "imb_peak_bandwidth_ci_MBps": _pair(self.imb_peak_bandwidth_ci_MBps)}
        if self.error is not None or self.hockney is None:
            return {**entry, "error": self.error}
        figures = {k: v for k, v in self.hockney.to_json().items() if k not in head}
        return {**entry, **figures, "kernel_vs_imb_latency": self.kernel_vs_imb_latency,
                "kernel_vs_imb_asymptotic_bandwidth": self.kernel_vs_imb_asymptotic_bandwidth,
                "kernel_vs_imb_peak_bandwidth": self.kernel_vs_imb_peak_bandwidth, "headline": self.headline}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = KERNELS_FILE, path: str = "$") -> PingpongFit:
        obj = read_object(value, where, path)
        cell = Fit.cell_fields(obj, where, path)
        return cls(
            **cell, source=read_text(obj, "source", where, path) or "",
            n_reps=read_integer(obj, "n_reps", where, path) or 0,
            latency_4B_us=read_number(obj, "latency_4B_us", where, path),
            bandwidth_4MiB_MBps=read_number(obj, "bandwidth_4MiB_MBps", where, path),
            points=read_records(obj, "points", PingpongPoint.from_json, where, path),
            imb_latency_us=read_number(obj, "imb_latency_us", where, path),
            imb_latency_ci_us=optional_interval(obj, "imb_latency_ci_us", where, path),
            imb_asymptotic_bandwidth_MBps=read_number(obj, "imb_asymptotic_bandwidth_MBps", where, path),
            imb_asymptotic_bandwidth_ci_MBps=optional_interval(obj, "imb_asymptotic_bandwidth_ci_MBps", where, path),
            imb_peak_bandwidth_MBps=read_number(obj, "imb_peak_bandwidth_MBps", where, path),
            imb_peak_bandwidth_ci_MBps=optional_interval(obj, "imb_peak_bandwidth_ci_MBps", where, path),
            hockney=None if cell["error"] is not None else HockneyRecord.from_json(obj, where, path),
            kernel_vs_imb_latency=read_number(obj, "kernel_vs_imb_latency", where, path),
            kernel_vs_imb_asymptotic_bandwidth=read_number(obj, "kernel_vs_imb_asymptotic_bandwidth", where, path),
            kernel_vs_imb_peak_bandwidth=read_number(obj, "kernel_vs_imb_peak_bandwidth", where, path),
            headline=read_text(obj, "headline", where, path))


@dataclass(frozen=True)
class KernelFits:
    """The ``fits/kernels.json`` document: every kernel model's entries (``KERNEL_MODELS`` names
    them, in the file's key order) and the notes a reader must be told, every entry a typed record:
    :class:`~mpiatlas.models.ring_records.RingFit`, :class:`~mpiatlas.models.matsum_records.MatsumFit`,
    :class:`~mpiatlas.models.grid_records.GridComparison`, :class:`~mpiatlas.models.jacobi_records.JacobiFit`,
    :class:`PingpongFit` and :class:`CollFit`."""

    ring: tuple[RingFit, ...] = ()
    matsum: tuple[MatsumFit, ...] = ()
    matsum_grids: tuple[GridComparison, ...] = ()
    jacobi: tuple[JacobiFit, ...] = ()
    pingpong: tuple[PingpongFit, ...] = ()
    coll: tuple[CollFit, ...] = ()
    notes: tuple[str, ...] = ()

    def entries(self, name: str) -> list[JsonValue]:
        """One kernel model's entries as the file holds them (``name`` one of KERNEL_MODELS)."""
        if name not in KERNEL_MODELS:
            raise KeyError(f"no kernel model {name!r}; models: {', '.join(KERNEL_MODELS)}")
        records: tuple[RingFit | MatsumFit | GridComparison | JacobiFit | PingpongFit | CollFit, ...] = getattr(self, name)
        return [r.to_json() for r in records]

    def to_json(self) -> dict[str, JsonValue]:
        """The document, in the key order kernels.json has always had."""
        doc: dict[str, JsonValue] = {name: self.entries(name) for name in KERNEL_MODELS}
        doc["notes"] = list(self.notes)
        return doc

    @classmethod
    def from_json(cls, value: JsonValue, where: str = KERNELS_FILE) -> KernelFits:
        """A kernels.json document (a missing model is one without entries)."""
        obj = read_object(value, where, "$")
        return cls(ring=read_records(obj, "ring", RingFit.from_json, where, "$"),
                   matsum=read_records(obj, "matsum", MatsumFit.from_json, where, "$"),
                   matsum_grids=tuple(grid_comparisons(obj.get("matsum_grids", []), where, "$.matsum_grids")),
                   jacobi=read_records(obj, "jacobi", JacobiFit.from_json, where, "$"),
                   pingpong=read_records(obj, "pingpong", PingpongFit.from_json, where, "$"),
                   coll=tuple(coll_records(obj.get("coll", []), where)), notes=read_texts(obj, "notes", where, "$"))


KERNEL_MODELS: tuple[str, ...] = ("ring", "matsum", "matsum_grids", "jacobi", "pingpong", "coll")


__all__ = ["KERNELS_FILE", "KERNEL_MODELS", "CollBest", "CollFit", "CollPoint", "GridComparison", "GridPoint", "KernelFits", "PingpongFit", "PingpongPoint",
           "coll_records", "grid_comparisons"]
