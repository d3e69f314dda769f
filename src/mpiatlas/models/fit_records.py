"""Typed records of the fits files: what a fit *is*, so a reader learns its fields here, not from
the code that wrote it.

:class:`Fit` is what every fitted group has (the cell it belongs to, the benchmark, or why it was not
fitted); :class:`HockneyRecord` is one entry of ``fits/hockney.json`` (the piecewise λ + s/B fit of
:mod:`mpiatlas.models.hockney`). The records hold the file's view of a fit: a figure the file stores
as ``null`` (an unbounded bandwidth, an unknown bound) is ``None`` here, so
``record.to_json()`` gives back the entry byte for byte (:mod:`mpiatlas.models.fits_files`
serialises it). JSON is converted only at that boundary: :meth:`HockneyRecord.from_json` raises
:class:`FitRecordError` naming the file and the key path when an entry is not of the documented
schema's shape.

Standard library only: fits_files, compare and the report read these without the numerical models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict

from mpiatlas.models.json_fields import (
    FitRecordError,
    Interval,
    JsonValue,
    Scalar,
    json_number,
    located,
    read_integer,
    read_integers,
    read_interval,
    read_number,
    read_object,
    read_records,
    read_text,
)

# A fits entry's cell key, in the order a fit writes it (label, then tables.samples.CELL_COLUMNS), and
# the region its ranks sat in when a fit is placed by region rather than by mapping.
CELL_KEYS: tuple[str, ...] = ("label", "stack", "transport", "mapping", "np", "algorithm", "region")

@dataclass(frozen=True)
class Fit:
    """What every fitted group of a fits file has: its cell (the cell key columns the fitted table
    had, in :data:`CELL_KEYS` order), its benchmark, and ``error`` when it could not be fitted (then it
    has no figures)."""

    benchmark: str
    label: str | None = None
    stack: str | None = None
    transport: str | None = None
    mapping: str | None = None
    np: int | None = None
    algorithm: str | None = None
    region: str | None = None  # e.g. "other_node" (mpiatlas.node.topology.REGIONS)
    # Which cell key columns the entry carries (a table without a column writes no key for it).
    cell_keys: tuple[str, ...] = ()
    error: str | None = None

    @property
    def fitted(self) -> bool:
        return self.error is None

    def cell_json(self) -> dict[str, Scalar]:
        """The entry's cell key and benchmark, as the file writes them."""
        head: dict[str, Scalar] = {k: getattr(self, k) for k in self.cell_keys}
        head["benchmark"] = self.benchmark
        return head

    @staticmethod
    def cell_fields(obj: dict[str, JsonValue], where: str, path: str) -> CellFields:
        """The :class:`Fit` fields of a JSON entry (its cell key, benchmark and error)."""
        benchmark = read_text(obj, "benchmark", where, path)
        if benchmark is None:
            raise FitRecordError(f"{located(where, f'{path}.benchmark')}: required, a string")
        return CellFields(benchmark=benchmark, label=read_text(obj, "label", where, path),
                          stack=read_text(obj, "stack", where, path), transport=read_text(obj, "transport", where, path),
                          mapping=read_text(obj, "mapping", where, path), np=read_integer(obj, "np", where, path),
                          algorithm=read_text(obj, "algorithm", where, path), region=read_text(obj, "region", where, path),
                          cell_keys=tuple(k for k in CELL_KEYS if k in obj), error=read_text(obj, "error", where, path))


class CellFields(TypedDict):
    """:class:`Fit`'s fields, as keyword arguments of a record's constructor."""

    benchmark: str
    label: str | None
    stack: str | None
    transport: str | None
    mapping: str | None
    np: int | None
    algorithm: str | None
    region: str | None
    cell_keys: tuple[str, ...]
    error: str | None


@dataclass(frozen=True)
class HockneySegment:
    """One λ + s/B line of the piecewise model: the sizes ``from_bytes``..``to_bytes`` it models."""

    latency_us: float
    bandwidth_MBps: float | None  # None: unbounded (a flat, pure-latency segment)
    from_bytes: int | None = None
    to_bytes: int | None = None
    n_sizes: int | None = None

    def to_json(self) -> dict[str, JsonValue]:
        return {"from_bytes": self.from_bytes, "to_bytes": self.to_bytes, "latency_us": json_number(self.latency_us),
                "bandwidth_MBps": json_number(self.bandwidth_MBps), "n_sizes": self.n_sizes}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> HockneySegment:
        obj = read_object(value, where, path)
        latency = read_number(obj, "latency_us", where, path)
        if latency is None:
            raise FitRecordError(f"{located(where, f'{path}.latency_us')}: required, a number")
        return cls(latency_us=latency, bandwidth_MBps=read_number(obj, "bandwidth_MBps", where, path),
                   from_bytes=read_integer(obj, "from_bytes", where, path), to_bytes=read_integer(obj, "to_bytes", where, path),
                   n_sizes=read_integer(obj, "n_sizes", where, path))


@dataclass(frozen=True)
class HockneyResidual:
    """The model against the median measured time at one size."""

    bytes: int
    measured_us: float
    predicted_us: float
    rel_err: float | None  # (predicted - measured) / measured

    def to_json(self) -> dict[str, JsonValue]:
        return {"bytes": self.bytes, "measured_us": self.measured_us, "predicted_us": self.predicted_us,
                "rel_err": json_number(self.rel_err)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> HockneyResidual:
        obj = read_object(value, where, path)
        size, measured, predicted = (read_integer(obj, "bytes", where, path), read_number(obj, "measured_us", where, path),
                                     read_number(obj, "predicted_us", where, path))
        if size is None or measured is None or predicted is None:
            raise FitRecordError(f"{located(where, path)}: a residual needs bytes, measured_us and predicted_us")
        return cls(size, measured, predicted, read_number(obj, "rel_err", where, path))


@dataclass(frozen=True)
class HockneyRecord(Fit):
    """One entry of ``fits/hockney.json``: the piecewise Hockney fit T(s) = λ + s/B of one cell's
    PingPong or PingPing (schema ``fits-hockney.schema.json`` defines every field and unit).

    The two bandwidth estimands are :mod:`mpiatlas.models.asymptote`'s: s/t at the largest size
    (``asymptotic_*``, at ``asymptotic_bytes``) and the highest per-size median s/t (``peak_*``, at
    ``peak_bytes``). ``None`` is what the file holds as null (unbounded or unknown)."""

    latency_us: float | None = None
    latency_ci_us: Interval = (None, None)
    peak_bandwidth_MBps: float | None = None
    peak_bandwidth_ci_MBps: Interval = (None, None)
    peak_bytes: int | None = None
    asymptotic_bandwidth_MBps: float | None = None
    asymptotic_bandwidth_ci_MBps: Interval = (None, None)
    asymptotic_bytes: int | None = None
    breakpoints_bytes: tuple[int, ...] = ()
    segments: tuple[HockneySegment, ...] = ()
    n_sizes: int = 0
    zero_byte_us: float | None = None
    excluded_bytes: tuple[int, ...] = ()
    ci_method: str | None = None  # "launches", else "repetitions" or "residuals"
    n_launches: int | None = None
    ci_warning: str | None = None
    plateau_from_bytes: int | None = None
    plateau_n_sizes: int | None = None
    residuals: tuple[HockneyResidual, ...] = field(default=())

    FILE: ClassVar[str] = "hockney.json"

    @property
    def model_bandwidth_MBps(self) -> float | None:
        """The model's B: the last segment's 1/slope (what λ + m/B prices a large message with), None
        when unbounded or absent. Not the asymptotic bandwidth, a measured s/t that holds the last
        segment's λ. A fit without segments is one regime: its asymptotic bandwidth."""
        value = self.segments[-1].bandwidth_MBps if self.segments else self.asymptotic_bandwidth_MBps
        return value if value is not None and math.isfinite(value) and value > 0 else None

    def bandwidth(self, figure: str) -> tuple[float | None, Interval]:
        """One bandwidth estimand and its interval, MB/s: ``figure`` "asymptotic_bandwidth" or
        "peak_bandwidth" (mpiatlas.models.hockney.BANDWIDTH_FIGURES)."""
        if figure == "asymptotic_bandwidth":
            return self.asymptotic_bandwidth_MBps, self.asymptotic_bandwidth_ci_MBps
        if figure == "peak_bandwidth":
            return self.peak_bandwidth_MBps, self.peak_bandwidth_ci_MBps
        raise ValueError(f"no bandwidth figure {figure!r}; figures: asymptotic_bandwidth, peak_bandwidth")

    def to_json(self) -> dict[str, JsonValue]:
        """The entry as ``fits/hockney.json`` holds it (the key order the schema documents)."""
        head = self.cell_json()
        if self.error is not None:
            return {**head, "error": self.error}

        def pair(v: Interval) -> list[JsonValue]:
            return [json_number(v[0]), json_number(v[1])]

        return {**head,
                "latency_us": json_number(self.latency_us), "latency_ci_us": pair(self.latency_ci_us),
                "peak_bandwidth_MBps": json_number(self.peak_bandwidth_MBps),
                "peak_bandwidth_ci_MBps": pair(self.peak_bandwidth_ci_MBps), "peak_bytes": self.peak_bytes,
                "asymptotic_bandwidth_MBps": json_number(self.asymptotic_bandwidth_MBps),
                "asymptotic_bandwidth_ci_MBps": pair(self.asymptotic_bandwidth_ci_MBps),
                "asymptotic_bytes": self.asymptotic_bytes, "breakpoints_bytes": list(self.breakpoints_bytes),
                "segments": [s.to_json() for s in self.segments], "n_sizes": self.n_sizes,
                "zero_byte_us": json_number(self.zero_byte_us), "excluded_bytes": list(self.excluded_bytes),
                "ci_method": self.ci_method, "n_launches": self.n_launches, "ci_warning": self.ci_warning,
                "plateau_from_bytes": self.plateau_from_bytes, "plateau_n_sizes": self.plateau_n_sizes,
                "residuals": [r.to_json() for r in self.residuals]}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = FILE, path: str = "$") -> HockneyRecord:
        """An entry of ``fits/hockney.json`` (``where`` names the file in errors, ``path`` the entry)."""
        obj = read_object(value, where, path)
        cell = Fit.cell_fields(obj, where, path)
        if cell["error"] is not None:
            return cls(**cell)
        return cls(
            **cell,
            latency_us=read_number(obj, "latency_us", where, path),
            latency_ci_us=read_interval(obj, "latency_ci_us", where, path),
            peak_bandwidth_MBps=read_number(obj, "peak_bandwidth_MBps", where, path),
            peak_bandwidth_ci_MBps=read_interval(obj, "peak_bandwidth_ci_MBps", where, path),
            peak_bytes=read_integer(obj, "peak_bytes", where, path),
            asymptotic_bandwidth_MBps=read_number(obj, "asymptotic_bandwidth_MBps", where, path),
            asymptotic_bandwidth_ci_MBps=read_interval(obj, "asymptotic_bandwidth_ci_MBps", where, path),
            asymptotic_bytes=read_integer(obj, "asymptotic_bytes", where, path),
            breakpoints_bytes=read_integers(obj, "breakpoints_bytes", where, path),
            segments=read_records(obj, "segments", HockneySegment.from_json, where, path),
            n_sizes=read_integer(obj, "n_sizes", where, path) or 0,
            zero_byte_us=read_number(obj, "zero_byte_us", where, path),
            excluded_bytes=read_integers(obj, "excluded_bytes", where, path),
            ci_method=read_text(obj, "ci_method", where, path),
            n_launches=read_integer(obj, "n_launches", where, path),
            ci_warning=read_text(obj, "ci_warning", where, path),
            plateau_from_bytes=read_integer(obj, "plateau_from_bytes", where, path),
            plateau_n_sizes=read_integer(obj, "plateau_n_sizes", where, path),
            residuals=read_records(obj, "residuals", HockneyResidual.from_json, where, path),
        )


def hockney_records(document: JsonValue, where: str = HockneyRecord.FILE) -> list[HockneyRecord]:
    """Every entry of a ``fits/hockney.json`` document (an array)."""
    if not isinstance(document, list):
        raise FitRecordError(f"{where}: $: expected an array of Hockney fits, got {type(document).__name__}")
    return [HockneyRecord.from_json(e, where, f"$[{i}]") for i, e in enumerate(document)]


def hockney_document(records: list[HockneyRecord]) -> list[JsonValue]:
    """The ``fits/hockney.json`` document of ``records``."""
    return [r.to_json() for r in records]


__all__ = ["CELL_KEYS", "Fit", "FitRecordError", "HockneyRecord", "HockneyResidual", "HockneySegment",
           "Interval", "JsonValue", "Scalar", "hockney_document", "hockney_records"]
