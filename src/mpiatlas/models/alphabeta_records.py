"""Typed records of ``fits/alphabeta.json``: the α-β fits of Alltoall and Allgather over nodes
(:mod:`mpiatlas.models.alphabeta`), so a reader learns an entry's fields here, not from the code that
wrote it.

:class:`AlphaBetaFits` is the whole document: the nominal link (:class:`Network`), the fits per series
and k (:class:`AlphaBetaRecord`), the fits pooled over k (:class:`PooledRecord`) and the notes. A
series' model comparison is a :class:`Families` (every algorithm family's :class:`FamilyFit`, the
:class:`Selection` of the best, and :class:`PerSize` rows). As in :mod:`mpiatlas.models.fit_records`,
a figure the file stores as ``null`` is ``None`` here and ``to_json()`` gives back the document byte
for byte (keys the file leaves out, as files from before an axis or the model comparison do, stay
out); JSON is converted only at the file boundary, and a malformed entry raises
:class:`~mpiatlas.models.fit_records.FitRecordError` naming the file and the key path.

Standard library only: fits_files, compare and the report read these without the numerical models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from mpiatlas.models.fit_records import Fit
from mpiatlas.models.json_fields import (
    FitRecordError,
    Interval,
    JsonValue,
    Scalar,
    json_number,
    json_pair,
    optional_interval,
    read_bool,
    read_integer,
    read_integers,
    read_interval,
    read_number,
    read_object,
    read_records,
    read_text,
    read_texts,
    required_text,
)

# An α-β series' key in the order a fit writes it: the group keys, then the axes that tell cells apart
# (tables.samples.SERIES_AXES); the benchmark and k follow. Files from before the axes carry only the first.
SERIES_KEYS: tuple[str, ...] = ("stack", "transport", "algorithm", "options", "knobs", "placement")
FILE = "alphabeta.json"










@dataclass(frozen=True)
class Network:
    """The nominal link the α-β models are set against (the campaign's config ``network``)."""

    name: str
    bandwidth_gbit_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_gbit_s) and self.bandwidth_gbit_s > 0):
            raise ValueError(f"network bandwidth must be a finite number > 0 Gbit/s, got {self.bandwidth_gbit_s}")

    @property
    def bytes_per_us(self) -> float:
        return self.bandwidth_gbit_s * 1e9 / 8 / 1e6

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, "bandwidth_gbit_s": self.bandwidth_gbit_s,
                "bandwidth_bytes_per_s": self.bandwidth_gbit_s * 1e9 / 8}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> Network:
        obj = read_object(value, where, path)
        gbit = read_number(obj, "bandwidth_gbit_s", where, path)
        try:
            return cls(required_text(obj, "name", where, path), math.nan if gbit is None else gbit)
        except ValueError as exc:
            raise FitRecordError(f"{where}: {path}.bandwidth_gbit_s: {exc}") from exc


@dataclass(frozen=True)
class AlphaBetaPoint:
    """One (m, x) point of a fit: the median measured time over its repetitions, the model, and the
    speed of light (the model at α = 1, β = 0). ``used``: the point was fitted (m = 1 points are shown,
    not fitted)."""

    nodes: int
    bytes: int
    used: bool
    n_reps: int
    measured_us: float | None
    min_us: float | None
    max_us: float | None
    predicted_us: float | None
    rel_err: float | None  # predicted / measured - 1; None for a point not fitted
    speed_of_light_us: float | None

    def to_json(self) -> dict[str, JsonValue]:
        return {"nodes": self.nodes, "bytes": self.bytes, "used": self.used, "n_reps": self.n_reps,
                "measured_us": json_number(self.measured_us), "min_us": json_number(self.min_us),
                "max_us": json_number(self.max_us), "predicted_us": json_number(self.predicted_us),
                "rel_err": json_number(self.rel_err), "speed_of_light_us": json_number(self.speed_of_light_us)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> AlphaBetaPoint:
        obj = read_object(value, where, path)
        nodes, size, reps = (read_integer(obj, k, where, path) for k in ("nodes", "bytes", "n_reps"))
        if nodes is None or size is None:
            raise FitRecordError(f"{where}: {path}: a point needs nodes and bytes")
        return cls(nodes, size, bool(read_bool(obj, "used", where, path)), reps or 0,
                   *(read_number(obj, k, where, path) for k in ("measured_us", "min_us", "max_us", "predicted_us",
                                                            "rel_err", "speed_of_light_us")))


@dataclass(frozen=True)
class FamilyFit:
    """One algorithm family (:data:`mpiatlas.models.alphabeta_models.MODELS`) fitted to a series'
    multi-node points, or why it could not be (``error``, then no figures). ``aic``, ``delta_aic`` (to
    the lowest AIC) and ``plausible`` (its α CI is not wholly below 1) are set on the fitted ones."""

    model: str
    label: str
    formula: str
    error: str | None = None
    alpha: float | None = None
    alpha_ci: Interval = (None, None)
    beta_us: float | None = None
    beta_ci_us: Interval = (None, None)
    n_points: int = 0
    rss: float | None = None
    rel_rms: float | None = None
    median_abs_rel: float | None = None
    aic: float | None = None
    delta_aic: float | None = None
    plausible: bool | None = None

    def to_json(self) -> dict[str, JsonValue]:
        head: dict[str, JsonValue] = {"model": self.model, "label": self.label, "formula": self.formula}
        if self.error is not None:
            return {**head, "error": self.error}
        out: dict[str, JsonValue] = {
            **head, "alpha": json_number(self.alpha), "alpha_ci": json_pair(self.alpha_ci),
            "beta_us": json_number(self.beta_us), "beta_ci_us": json_pair(self.beta_ci_us), "n_points": self.n_points,
            "rss": json_number(self.rss), "rel_rms": json_number(self.rel_rms),
            "median_abs_rel": json_number(self.median_abs_rel)}
        # Ranked after the fits: an entry gets them only when it was fitted (always, from fit_families).
        if self.aic is not None or self.delta_aic is not None:
            out |= {"aic": json_number(self.aic), "delta_aic": json_number(self.delta_aic)}
        if self.plausible is not None:
            out["plausible"] = self.plausible
        return out

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> FamilyFit:
        obj = read_object(value, where, path)
        head = (required_text(obj, "model", where, path), read_text(obj, "label", where, path) or "",
                read_text(obj, "formula", where, path) or "")
        error = read_text(obj, "error", where, path)
        if error is not None:
            return cls(*head, error=error)
        return cls(*head, alpha=read_number(obj, "alpha", where, path), alpha_ci=read_interval(obj, "alpha_ci", where, path),
                   beta_us=read_number(obj, "beta_us", where, path),
                   beta_ci_us=read_interval(obj, "beta_ci_us", where, path),
                   n_points=read_integer(obj, "n_points", where, path) or 0, rss=read_number(obj, "rss", where, path),
                   rel_rms=read_number(obj, "rel_rms", where, path),
                   median_abs_rel=read_number(obj, "median_abs_rel", where, path),
                   aic=read_number(obj, "aic", where, path), delta_aic=read_number(obj, "delta_aic", where, path),
                   plausible=read_bool(obj, "plausible", where, path))


@dataclass(frozen=True)
class Selection:
    """How the best family was chosen (:func:`mpiatlas.models.alphabeta_models.select`): the best by
    AIC among the plausible ones, the runner-up and the margin, the verdict and a sentence for people.
    ``best`` None: no family could be fitted (then only ``criterion``, ``verdict`` and ``text``)."""

    best: str | None
    criterion: str
    verdict: str  # "clear", "indistinguishable", "only", "only plausible", "none"
    text: str
    runner_up: str | None = None
    delta_aic: float | None = None
    tied: tuple[str, ...] = ()
    implausible: tuple[str, ...] = ()

    def to_json(self) -> dict[str, JsonValue]:
        if self.best is None:
            return {"best": None, "criterion": self.criterion, "verdict": self.verdict, "text": self.text}
        return {"best": self.best, "runner_up": self.runner_up, "delta_aic": json_number(self.delta_aic),
                "criterion": self.criterion, "verdict": self.verdict, "tied": list(self.tied),
                "implausible": list(self.implausible), "text": self.text}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> Selection:
        obj = read_object(value, where, path)
        return cls(read_text(obj, "best", where, path), read_text(obj, "criterion", where, path) or "",
                   read_text(obj, "verdict", where, path) or "", read_text(obj, "text", where, path) or "",
                   read_text(obj, "runner_up", where, path), read_number(obj, "delta_aic", where, path),
                   read_texts(obj, "tied", where, path), read_texts(obj, "implausible", where, path))


@dataclass(frozen=True)
class PerSizeRow:
    """A family's α, β and 1/α at one message size, over the (m, k) points of that size. ``beta_fixed``:
    the size's points cannot separate α from β, so β is the all-size value and α alone is fitted (no β
    interval). ``beta_at_alpha_us``: the β the size implies with α held at the all-size value."""

    bytes: int
    n_points: int
    alpha: float | None
    beta_us: float | None
    beta_fixed: bool
    inv_alpha: float | None
    alpha_ci: Interval | None
    beta_ci_us: Interval | None
    beta_at_alpha_us: float | None
    beta_at_alpha_ci_us: Interval | None

    def to_json(self) -> dict[str, JsonValue]:
        def ci(v: Interval | None) -> JsonValue:
            return None if v is None else json_pair(v)

        return {"bytes": self.bytes, "n_points": self.n_points, "alpha": json_number(self.alpha),
                "beta_us": json_number(self.beta_us), "beta_fixed": self.beta_fixed,
                "inv_alpha": json_number(self.inv_alpha), "alpha_ci": ci(self.alpha_ci),
                "beta_ci_us": ci(self.beta_ci_us), "beta_at_alpha_us": json_number(self.beta_at_alpha_us),
                "beta_at_alpha_ci_us": ci(self.beta_at_alpha_ci_us)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> PerSizeRow:
        obj = read_object(value, where, path)
        size = read_integer(obj, "bytes", where, path)
        if size is None:
            raise FitRecordError(f"{where}: {path}.bytes: required, an integer")
        return cls(size, read_integer(obj, "n_points", where, path) or 0, read_number(obj, "alpha", where, path),
                   read_number(obj, "beta_us", where, path), bool(read_bool(obj, "beta_fixed", where, path)),
                   read_number(obj, "inv_alpha", where, path), optional_interval(obj, "alpha_ci", where, path),
                   optional_interval(obj, "beta_ci_us", where, path), read_number(obj, "beta_at_alpha_us", where, path),
                   optional_interval(obj, "beta_at_alpha_ci_us", where, path))


@dataclass(frozen=True)
class PerSize:
    """One family's :class:`PerSizeRow` per message size."""

    model: str
    rows: tuple[PerSizeRow, ...]

    def to_json(self) -> dict[str, JsonValue]:
        return {"model": self.model, "rows": [r.to_json() for r in self.rows]}

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> PerSize | None:
        if value is None:
            return None
        obj = read_object(value, where, path)
        return cls(required_text(obj, "model", where, path),
                   read_records(obj, "rows", PerSizeRow.from_json, where, path))


@dataclass(frozen=True)
class Families:
    """Every family of a benchmark fitted to one series' multi-node points, the best by AIC, and α, β
    per size of the best (``per_size``) and of the named, original model (``per_size_named``)."""

    models: tuple[FamilyFit, ...]
    best_model: str | None
    selection: Selection
    distinct_mk: int  # distinct (m, k) pairs among the points
    per_size: PerSize | None = None
    per_size_named: PerSize | None = None

    KEYS: ClassVar[tuple[str, ...]] = ("models", "best_model", "selection", "distinct_mk", "per_size",
                                       "per_size_named")

    def to_json(self) -> dict[str, JsonValue]:
        return {"models": [m.to_json() for m in self.models], "best_model": self.best_model,
                "selection": self.selection.to_json(), "distinct_mk": self.distinct_mk,
                "per_size": None if self.per_size is None else self.per_size.to_json(),
                "per_size_named": None if self.per_size_named is None else self.per_size_named.to_json()}

    @classmethod
    def from_json(cls, obj: dict[str, JsonValue], where: str, path: str) -> Families | None:
        """The model comparison of an entry (None: a file from before it has none)."""
        if "models" not in obj:
            return None
        selection = obj.get("selection")
        return cls(read_records(obj, "models", FamilyFit.from_json, where, path),
                   read_text(obj, "best_model", where, path),
                   Selection.from_json(selection, where, f"{path}.selection") if selection is not None
                   else Selection(None, "", "none", ""),
                   read_integer(obj, "distinct_mk", where, path) or 0,
                   PerSize.from_json(obj.get("per_size"), where, f"{path}.per_size"),
                   PerSize.from_json(obj.get("per_size_named"), where, f"{path}.per_size_named"))


@dataclass(frozen=True)
class SeriesFields:
    """An α-β series' key: the :data:`SERIES_KEYS` it carries (``keys``: which of them the entry has)."""

    stack: str | None = None
    transport: str | None = None
    algorithm: str | None = None
    options: str | None = None
    knobs: str | None = None
    placement: str | None = None
    keys: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: dict[str, JsonValue], where: str, path: str) -> SeriesFields:
        values = {k: read_text(obj, k, where, path) for k in SERIES_KEYS}
        return cls(**values, keys=tuple(k for k in SERIES_KEYS if k in obj))


@dataclass(frozen=True)
class AlphaBetaRecord(Fit):
    """One entry of ``alphabeta.json``'s ``fits``: the benchmark's named model (Alltoall linear,
    Allgather node ring) fitted to one series at k = ``ppn`` ranks per node over its node counts, with
    the points, and the model comparison (``families``). ``error``: why the series was not fitted (then
    only ``model`` and ``notes``)."""

    options: str | None = None
    knobs: str | None = None
    placement: str | None = None
    ppn: int | None = None
    model: str = ""
    formula: str = ""
    bandwidth_gbit_s: float | None = None
    network: str | None = None
    alpha: float | None = None
    alpha_ci: Interval = (None, None)
    beta_us: float | None = None
    beta_ci_us: Interval = (None, None)
    n_points: int = 0
    n_samples: int = 0
    nodes: tuple[int, ...] = ()
    r2: float | None = None
    rel_rms: float | None = None
    ci_method: str | None = None  # "repetitions" or "residuals"
    n_boot: int | None = None
    notes: tuple[str, ...] = ()
    points: tuple[AlphaBetaPoint, ...] = ()
    oversubscribed: bool | None = None  # None: the entry does not say (a refused fit, an older file)
    families: Families | None = None

    @property
    def b_bytes_per_us(self) -> float | None:
        """The nominal link bandwidth the fit used, bytes/µs (None: unknown)."""
        gbit = self.bandwidth_gbit_s
        return gbit * 1e9 / 8 / 1e6 if gbit is not None and gbit > 0 else None

    @property
    def series_keys(self) -> dict[str, Scalar]:
        """The entry's series key, benchmark and k, as the file writes them."""
        return {**self.cell_json(), "ppn": self.ppn}

    def to_json(self) -> dict[str, JsonValue]:
        head: dict[str, JsonValue] = {**self.series_keys, "model": self.model}
        if self.error is not None:
            return {**head, "error": self.error, "notes": list(self.notes)}
        out: dict[str, JsonValue] = {
            **head, "formula": self.formula, "bandwidth_gbit_s": self.bandwidth_gbit_s, "network": self.network,
            "alpha": json_number(self.alpha), "alpha_ci": json_pair(self.alpha_ci), "beta_us": json_number(self.beta_us),
            "beta_ci_us": json_pair(self.beta_ci_us), "n_points": self.n_points, "n_samples": self.n_samples,
            "nodes": list(self.nodes), "r2": json_number(self.r2), "rel_rms": json_number(self.rel_rms),
            "ci_method": self.ci_method, "n_boot": self.n_boot, "notes": list(self.notes),
            "points": [p.to_json() for p in self.points]}
        if self.oversubscribed is not None:
            out["oversubscribed"] = self.oversubscribed
        return out if self.families is None else {**out, **self.families.to_json()}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = FILE, path: str = "$") -> AlphaBetaRecord:
        obj = read_object(value, where, path)
        series = SeriesFields.from_json(obj, where, path)
        error = read_text(obj, "error", where, path)
        base = cls(benchmark=required_text(obj, "benchmark", where, path), stack=series.stack,
                   transport=series.transport, algorithm=series.algorithm, options=series.options,
                   knobs=series.knobs, placement=series.placement, cell_keys=series.keys,
                   ppn=read_integer(obj, "ppn", where, path), model=read_text(obj, "model", where, path) or "",
                   notes=read_texts(obj, "notes", where, path), error=error)
        if error is not None:
            return base
        return replace(
            base, formula=read_text(obj, "formula", where, path) or "",
            bandwidth_gbit_s=read_number(obj, "bandwidth_gbit_s", where, path), network=read_text(obj, "network", where, path),
            alpha=read_number(obj, "alpha", where, path), alpha_ci=read_interval(obj, "alpha_ci", where, path),
            beta_us=read_number(obj, "beta_us", where, path), beta_ci_us=read_interval(obj, "beta_ci_us", where, path),
            n_points=read_integer(obj, "n_points", where, path) or 0, n_samples=read_integer(obj, "n_samples", where, path) or 0,
            nodes=read_integers(obj, "nodes", where, path), r2=read_number(obj, "r2", where, path),
            rel_rms=read_number(obj, "rel_rms", where, path), ci_method=read_text(obj, "ci_method", where, path),
            n_boot=read_integer(obj, "n_boot", where, path),
            points=read_records(obj, "points", AlphaBetaPoint.from_json, where, path),
            oversubscribed=read_bool(obj, "oversubscribed", where, path), families=Families.from_json(obj, where, path))


@dataclass(frozen=True)
class PooledRecord(Fit):
    """One entry of ``alphabeta.json``'s ``pooled``: the families fitted to one series (benchmark, no k)
    over every k with multi-node samples (``ppns``); only series measured at two k or more."""

    options: str | None = None
    knobs: str | None = None
    placement: str | None = None
    ppns: tuple[int, ...] = ()
    bandwidth_gbit_s: float | None = None
    network: str | None = None
    nodes: tuple[int, ...] = ()
    families: Families | None = None

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {**self.cell_json(), "ppn": None, "ppns": list(self.ppns),
                                     "bandwidth_gbit_s": self.bandwidth_gbit_s, "network": self.network,
                                     "nodes": list(self.nodes)}
        return out if self.families is None else {**out, **self.families.to_json()}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = FILE, path: str = "$") -> PooledRecord:
        obj = read_object(value, where, path)
        series = SeriesFields.from_json(obj, where, path)
        return cls(benchmark=required_text(obj, "benchmark", where, path), stack=series.stack,
                   transport=series.transport, algorithm=series.algorithm, options=series.options,
                   knobs=series.knobs, placement=series.placement, cell_keys=series.keys,
                   ppns=read_integers(obj, "ppns", where, path), bandwidth_gbit_s=read_number(obj, "bandwidth_gbit_s", where, path),
                   network=read_text(obj, "network", where, path), nodes=read_integers(obj, "nodes", where, path),
                   families=Families.from_json(obj, where, path))


@dataclass(frozen=True)
class AlphaBetaFits:
    """The document of ``fits/alphabeta.json`` (schema ``fits-alphabeta.schema.json``)."""

    network: Network
    time_column: str  # which samples column the models fit ("t_max_usec else t_usec")
    fits: tuple[AlphaBetaRecord, ...] = ()
    pooled: tuple[PooledRecord, ...] | None = None  # None: a file from before the pooled fits
    notes: tuple[str, ...] = ()

    FILE: ClassVar[str] = FILE

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"network": self.network.to_json(), "time_column": self.time_column,
                                     "fits": [f.to_json() for f in self.fits]}
        if self.pooled is not None:
            out["pooled"] = [p.to_json() for p in self.pooled]
        return {**out, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = FILE) -> AlphaBetaFits:
        """The document of an ``alphabeta.json`` (``where`` names the file in errors)."""
        obj = read_object(value, where, "$")
        pooled = None if "pooled" not in obj else read_records(obj, "pooled", PooledRecord.from_json, where, "$")
        return cls(Network.from_json(obj.get("network"), where, "$.network"),
                   read_text(obj, "time_column", where, "$") or "",
                   read_records(obj, "fits", AlphaBetaRecord.from_json, where, "$"),
                   pooled, read_texts(obj, "notes", where, "$"))


def document_network(document: JsonValue, where: str = FILE) -> Network | None:
    """The nominal link an ``alphabeta.json`` document names (None: none, or not of the schema's shape):
    for a reader that wants only the link, and shows a document as far as it goes."""
    if not isinstance(document, dict) or document.get("network") is None:
        return None
    try:
        return Network.from_json(document["network"], where, "$.network")
    except FitRecordError:
        return None


__all__ = [
    "SERIES_KEYS",
    "AlphaBetaFits",
    "AlphaBetaPoint",
    "AlphaBetaRecord",
    "Families",
    "FamilyFit",
    "Network",
    "PerSize",
    "PerSizeRow",
    "PooledRecord",
    "Selection",
    "SeriesFields",
    "document_network",
]
