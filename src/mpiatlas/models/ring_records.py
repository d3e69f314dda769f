"""Typed records of the ring entries of ``fits/kernels.json`` (:func:`mpiatlas.models.kernels.fit_ring`):
what a ring fit *is*, so the report reads fields, not keys it must learn from the code that wrote them.

As :mod:`mpiatlas.models.kernel_records`: a figure the file stores as ``null`` is ``None`` here,
``record.to_json()`` gives the entry back as the fit writes it (key order included), and JSON is read
only at the file boundary: :meth:`RingFit.from_json` raises
:class:`~mpiatlas.models.json_fields.FitRecordError` naming the file and the key path.

A ring entry has no ``benchmark`` key (the kernel is the benchmark), so it is not a
:class:`~mpiatlas.models.fit_records.Fit`: it carries its stack/transport/mapping itself.

Standard library only, as the other record modules: the report reads these without the numerical models.
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


def _counts(obj: JsonObject, key: str, where: str, path: str) -> dict[str, int] | None:
    """A JSON object of integers (hops per region), None when null."""
    if obj.get(key) is None:
        return None
    counts = read_object(obj[key], where, f"{path}.{key}")
    return {k: required_integer(counts, k, where, f"{path}.{key}") for k in counts}


def _figures(obj: JsonObject, key: str, where: str, path: str) -> dict[str, float | None]:
    """A JSON object of numbers or nulls (a figure per region)."""
    figures = read_object(obj.get(key, {}), where, f"{path}.{key}")
    return {k: read_number(figures, k, where, f"{path}.{key}") for k in figures}


def _required_bool(obj: JsonObject, key: str, where: str, path: str) -> bool:
    value = read_bool(obj, key, where, path)
    if value is None:
        raise FitRecordError(located(where, f"{path}.{key}") + ": required, true or false")
    return value


@dataclass(frozen=True)
class RingRegionPoint:
    """The region-aware prediction of one ring point (:mod:`mpiatlas.models.ring_regions`): every hop
    priced by its region, the slowest setting the pace. All None: no hops or no region table."""

    region_predicted_us: float | None = None
    region_rel_err: float | None = None
    boundary_hops: int | None = None  # hops that cross a socket or a node
    slowest_region: str | None = None
    hop_regions: dict[str, int] | None = None  # hops per region, closest region first

    def to_json(self) -> JsonObject:
        hops: JsonValue = None if self.hop_regions is None else dict(self.hop_regions)
        return {"region_predicted_us": self.region_predicted_us, "region_rel_err": self.region_rel_err,
                "boundary_hops": self.boundary_hops, "slowest_region": self.slowest_region, "hop_regions": hops}

    @classmethod
    def from_json(cls, obj: JsonObject, where: str, path: str) -> RingRegionPoint:
        return cls(region_predicted_us=read_number(obj, "region_predicted_us", where, path),
                   region_rel_err=read_number(obj, "region_rel_err", where, path),
                   boundary_hops=read_integer(obj, "boundary_hops", where, path),
                   slowest_region=read_text(obj, "slowest_region", where, path),
                   hop_regions=_counts(obj, "hop_regions", where, path))


@dataclass(frozen=True)
class RingPoint:
    """One (variant, streams, bytes, P) of a ring fit: the median over repetitions of the slowest
    rank's time per full exchange against the single-λ model, and the message phases per shift the
    model assumes (``phases_model``) and the time implies (``phases_measured`` = T / (P·m·t(s)))."""

    variant: str  # "nonblocking" | "blocking" | "ssend"
    streams: int
    bytes: int
    np: int
    oversubscribed: bool
    n_reps: int
    measured_us: float | None
    predicted_us: float | None
    rel_err: float | None  # predicted / measured − 1
    phases_model: int
    phases_measured: float | None
    reps_us: tuple[float | None, ...] = ()
    region: RingRegionPoint = field(default_factory=RingRegionPoint)

    def to_json(self) -> JsonObject:
        return {"variant": self.variant, "streams": self.streams, "bytes": self.bytes, "np": self.np,
                "oversubscribed": self.oversubscribed, "n_reps": self.n_reps, "measured_us": self.measured_us,
                "predicted_us": self.predicted_us, "rel_err": self.rel_err, "phases_model": self.phases_model,
                "phases_measured": self.phases_measured, "reps_us": list(self.reps_us), **self.region.to_json()}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> RingPoint:
        obj = read_object(value, where, path)
        return cls(variant=required_text(obj, "variant", where, path),
                   streams=required_integer(obj, "streams", where, path),
                   bytes=required_integer(obj, "bytes", where, path), np=required_integer(obj, "np", where, path),
                   oversubscribed=_required_bool(obj, "oversubscribed", where, path),
                   n_reps=required_integer(obj, "n_reps", where, path),
                   measured_us=read_number(obj, "measured_us", where, path),
                   predicted_us=read_number(obj, "predicted_us", where, path),
                   rel_err=read_number(obj, "rel_err", where, path),
                   phases_model=required_integer(obj, "phases_model", where, path),
                   phases_measured=read_number(obj, "phases_measured", where, path),
                   reps_us=read_numbers(obj, "reps_us", where, path),
                   region=RingRegionPoint.from_json(obj, where, path))


@dataclass(frozen=True)
class RingRange:
    """λ and B from the ring alone over one message-size range (``kernels.RING_RANGES``): the
    nonblocking points' T/(P·m) = λ + s/B; a range of one size has no B."""

    range: str
    sizes: tuple[int, ...]
    np: tuple[int, ...]
    n_points: int
    latency_us: float | None
    bandwidth_MBps: float | None

    def to_json(self) -> JsonObject:
        return {"range": self.range, "sizes": list(self.sizes), "np": list(self.np), "n_points": self.n_points,
                "latency_us": self.latency_us, "bandwidth_MBps": self.bandwidth_MBps}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> RingRange:
        obj = read_object(value, where, path)
        return cls(range=required_text(obj, "range", where, path), sizes=read_integers(obj, "sizes", where, path),
                   np=read_integers(obj, "np", where, path), n_points=required_integer(obj, "n_points", where, path),
                   latency_us=read_number(obj, "latency_us", where, path),
                   bandwidth_MBps=read_number(obj, "bandwidth_MBps", where, path))


@dataclass(frozen=True)
class PlacementBoundary:
    """The first P whose ring reaches another socket or node (``region``), in the cells' placement
    (:func:`mpiatlas.models.ring_regions.placement_boundaries`)."""

    np: int
    region: str  # "other_socket" | "other_node"

    def to_json(self) -> JsonObject:
        return {"np": self.np, "region": self.region}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> PlacementBoundary:
        obj = read_object(value, where, path)
        return cls(np=required_integer(obj, "np", where, path), region=required_text(obj, "region", where, path))


@dataclass(frozen=True)
class RegionModel:
    """The per-region λ (µs) and B (MB/s, None: unbounded) the region-aware prediction used, and
    the fits they came from."""

    source: str
    latency_us: dict[str, float | None]
    bandwidth_MBps: dict[str, float | None]

    def to_json(self) -> JsonObject:
        return {"source": self.source, "latency_us": dict(self.latency_us), "bandwidth_MBps": dict(self.bandwidth_MBps)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> RegionModel:
        obj = read_object(value, where, path)
        return cls(source=required_text(obj, "source", where, path),
                   latency_us=_figures(obj, "latency_us", where, path),
                   bandwidth_MBps=_figures(obj, "bandwidth_MBps", where, path))


@dataclass(frozen=True)
class RingFit:
    """One entry of kernels.json's ``ring``: one stack/transport/mapping's ring times against
    T = P·m·φ(P)·t(s) (``model``: the formula per variant), t(s) from the IMB PingPong Hockney fit of
    the same stack/transport/mapping (``lambda_source`` "PingPong") or, without one, from the ring's
    own nonblocking points ("ring"); ``error`` when neither was there (then no figures).

    ``ring_*``: λ and B the nonblocking points imply by themselves, set beside PingPong's.
    ``region_model``: the per-region λ, B of the region-aware prediction, None with ``region_note``
    saying why; with one, ``region_fails_where`` and ``region_changes`` (None: the two models agree
    within 10 %) say how it fares."""

    label: str | None = None
    stack: str | None = None
    transport: str | None = None
    mapping: str | None = None
    error: str | None = None
    model: dict[str, str] = field(default_factory=dict)
    lambda_source: str = ""
    lambda_note: str = ""
    latency_us: float | None = None
    bandwidth_MBps: float | None = None
    pingpong_latency_us: float | None = None
    pingpong_bandwidth_MBps: float | None = None
    ring_latency_us: float | None = None
    ring_latency_ci_us: Interval = (None, None)
    ring_bandwidth_MBps: float | None = None
    ring_fit_points: int = 0
    ring_ranges: tuple[RingRange, ...] = ()
    ring_vs_pingpong_latency: float | None = None
    nonblocking_points_within_25pct: int = 0
    points: tuple[RingPoint, ...] = ()
    headline: str = ""
    fails_where: str = ""
    boundaries: tuple[PlacementBoundary, ...] = ()
    region_model: RegionModel | None = None
    region_note: str | None = None
    region_fails_where: str | None = None
    region_changes: str | None = None

    @property
    def fitted(self) -> bool:
        return self.error is None

    def cell_json(self) -> JsonObject:
        return {"label": self.label, "stack": self.stack, "transport": self.transport, "mapping": self.mapping}

    def to_json(self) -> JsonObject:
        """The entry as kernels.json holds it (the key order fit_ring has always written)."""
        head = self.cell_json()
        if self.error is not None:
            return {**head, "error": self.error}
        entry: JsonObject = {
            **head, "model": dict(self.model), "lambda_source": self.lambda_source, "lambda_note": self.lambda_note,
            "latency_us": self.latency_us, "bandwidth_MBps": self.bandwidth_MBps,
            "pingpong_latency_us": self.pingpong_latency_us, "pingpong_bandwidth_MBps": self.pingpong_bandwidth_MBps,
            "ring_latency_us": self.ring_latency_us,
            "ring_latency_ci_us": [self.ring_latency_ci_us[0], self.ring_latency_ci_us[1]],
            "ring_bandwidth_MBps": self.ring_bandwidth_MBps, "ring_fit_points": self.ring_fit_points,
            "ring_ranges": [r.to_json() for r in self.ring_ranges],
            "ring_vs_pingpong_latency": self.ring_vs_pingpong_latency,
            "nonblocking_points_within_25pct": self.nonblocking_points_within_25pct,
            "points": [p.to_json() for p in self.points], "headline": self.headline, "fails_where": self.fails_where,
            "boundaries": [b.to_json() for b in self.boundaries],
            "region_model": None if self.region_model is None else self.region_model.to_json(),
            "region_note": self.region_note}
        if self.region_model is not None:  # only a priced fit says how the region model fares
            entry |= {"region_fails_where": self.region_fails_where, "region_changes": self.region_changes}
        return entry

    @classmethod
    def from_json(cls, value: JsonValue, where: str = "kernels.json", path: str = "$") -> RingFit:
        obj = read_object(value, where, path)
        label, stack = read_text(obj, "label", where, path), read_text(obj, "stack", where, path)
        transport, mapping = read_text(obj, "transport", where, path), read_text(obj, "mapping", where, path)
        error = read_text(obj, "error", where, path)
        if error is not None:
            return cls(label=label, stack=stack, transport=transport, mapping=mapping, error=error)
        model = read_object(obj.get("model", {}), where, f"{path}.model")
        region_model = obj.get("region_model")
        return cls(
            label=label, stack=stack, transport=transport, mapping=mapping,
            model={k: required_text(model, k, where, f"{path}.model") for k in model},
            lambda_source=read_text(obj, "lambda_source", where, path) or "",
            lambda_note=read_text(obj, "lambda_note", where, path) or "",
            latency_us=read_number(obj, "latency_us", where, path),
            bandwidth_MBps=read_number(obj, "bandwidth_MBps", where, path),
            pingpong_latency_us=read_number(obj, "pingpong_latency_us", where, path),
            pingpong_bandwidth_MBps=read_number(obj, "pingpong_bandwidth_MBps", where, path),
            ring_latency_us=read_number(obj, "ring_latency_us", where, path),
            ring_latency_ci_us=read_interval(obj, "ring_latency_ci_us", where, path),
            ring_bandwidth_MBps=read_number(obj, "ring_bandwidth_MBps", where, path),
            ring_fit_points=read_integer(obj, "ring_fit_points", where, path) or 0,
            ring_ranges=read_records(obj, "ring_ranges", RingRange.from_json, where, path),
            ring_vs_pingpong_latency=read_number(obj, "ring_vs_pingpong_latency", where, path),
            nonblocking_points_within_25pct=read_integer(obj, "nonblocking_points_within_25pct", where, path) or 0,
            points=read_records(obj, "points", RingPoint.from_json, where, path),
            headline=read_text(obj, "headline", where, path) or "",
            fails_where=read_text(obj, "fails_where", where, path) or "",
            boundaries=read_records(obj, "boundaries", PlacementBoundary.from_json, where, path),
            region_model=None if region_model is None else RegionModel.from_json(region_model, where,
                                                                                   f"{path}.region_model"),
            region_note=read_text(obj, "region_note", where, path),
            region_fails_where=read_text(obj, "region_fails_where", where, path),
            region_changes=read_text(obj, "region_changes", where, path))


__all__ = ["PlacementBoundary", "RegionModel", "RingFit", "RingPoint", "RingRange", "RingRegionPoint"]
