"""Typed records of the jacobi entries of ``fits/kernels.json`` (:func:`mpiatlas.models.kernel_jacobi.fit_jacobi`):
the halo exchange against T_c = c/B + k·λ, MLUP/s, scaling and hybrid vs pure MPI, so a reader learns
an entry's fields here.

As :mod:`mpiatlas.models.ring_records`: a figure the file stores as ``null`` is ``None`` here,
``record.to_json()`` gives the entry back as the fit writes it (key order included), and
:meth:`JacobiFit.from_json` raises :class:`~mpiatlas.models.json_fields.FitRecordError` naming the
file and the key path. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpiatlas.models.json_fields import (
    FitRecordError,
    JsonObject,
    JsonValue,
    located,
    read_bool,
    read_integers,
    read_number,
    read_numbers,
    read_object,
    read_records,
    read_text,
    read_texts,
    required_integer,
)
from mpiatlas.models.grid_records import GridComparison


def _required_bool(obj: JsonObject, key: str, where: str, path: str) -> bool:
    value = read_bool(obj, key, where, path)
    if value is None:
        raise FitRecordError(located(where, f"{path}.{key}") + ": required, true or false")
    return value


@dataclass(frozen=True)
class Scaling:
    """A pure MPI point's scaling efficiency relative to the smallest P of its problem (``base_np``):
    weak T(1)/T(P), strong T(1)·P(1)/(P·T(P))."""

    efficiency: float | None
    base_np: int


@dataclass(frozen=True)
class JacobiPoint:
    """One variant group and P (one problem, threads and grid): medians over repetitions of the
    cell's figures. Halo: ``halo_measured_us`` the least-waiting rank's (the one closest to the
    transfer), ``halo_mean_us`` the mean over ranks, ``halo_predicted_us`` c/B + k·λ; the shares are
    of the slowest rank's iteration. ``scaling``: pure MPI points of the stack's own grid only."""

    variant_group: str | None
    mode: str | None  # "weak" | "strong"
    problem: str  # "weak L=16", "strong N=96×96×48"
    explicit: bool  # a grid asked for (procdims), else MPI_Dims_create's
    np: int
    threads: int
    n_reps: int
    oversubscribed: bool
    k: int  # decomposed directions
    procdims: tuple[int, ...]
    global_dims: tuple[int, ...]
    bytes_per_rank: float | None
    messages_per_rank: float | None
    halo_measured_us: float | None
    halo_reps_us: tuple[float | None, ...]
    halo_mean_us: float | None
    halo_predicted_us: float | None
    iteration_us: float | None
    compute_us: float | None
    allreduce_us: float | None
    mlups_total: float | None
    local_points: float | None
    cores: int  # np × threads
    rel_err: float | None
    halo_share: float | None
    allreduce_share: float | None
    compute_share: float | None
    scaling: Scaling | None = None

    def to_json(self) -> JsonObject:
        entry: JsonObject = {
            "variant_group": self.variant_group, "mode": self.mode, "problem": self.problem,
            "explicit": self.explicit, "np": self.np, "threads": self.threads, "n_reps": self.n_reps,
            "oversubscribed": self.oversubscribed, "k": self.k, "procdims": list(self.procdims),
            "global_dims": list(self.global_dims), "bytes_per_rank": self.bytes_per_rank,
            "messages_per_rank": self.messages_per_rank, "halo_measured_us": self.halo_measured_us,
            "halo_reps_us": list(self.halo_reps_us), "halo_mean_us": self.halo_mean_us,
            "halo_predicted_us": self.halo_predicted_us, "iteration_us": self.iteration_us,
            "compute_us": self.compute_us, "allreduce_us": self.allreduce_us, "mlups_total": self.mlups_total,
            "local_points": self.local_points, "cores": self.cores, "rel_err": self.rel_err,
            "halo_share": self.halo_share, "allreduce_share": self.allreduce_share,
            "compute_share": self.compute_share}
        if self.scaling is not None:
            entry |= {"efficiency": self.scaling.efficiency, "efficiency_base_np": self.scaling.base_np}
        return entry

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> JacobiPoint:
        obj = read_object(value, where, path)

        def number(key: str) -> float | None:
            return read_number(obj, key, where, path)

        problem = read_text(obj, "problem", where, path)
        if problem is None:
            raise FitRecordError(located(where, f"{path}.problem") + ": required, a string")
        scaling = None
        if "efficiency_base_np" in obj:
            scaling = Scaling(number("efficiency"), required_integer(obj, "efficiency_base_np", where, path))
        return cls(
            variant_group=read_text(obj, "variant_group", where, path), mode=read_text(obj, "mode", where, path),
            problem=problem, explicit=_required_bool(obj, "explicit", where, path),
            np=required_integer(obj, "np", where, path), threads=required_integer(obj, "threads", where, path),
            n_reps=required_integer(obj, "n_reps", where, path),
            oversubscribed=_required_bool(obj, "oversubscribed", where, path),
            k=required_integer(obj, "k", where, path), procdims=read_integers(obj, "procdims", where, path),
            global_dims=read_integers(obj, "global_dims", where, path), bytes_per_rank=number("bytes_per_rank"),
            messages_per_rank=number("messages_per_rank"), halo_measured_us=number("halo_measured_us"),
            halo_reps_us=read_numbers(obj, "halo_reps_us", where, path), halo_mean_us=number("halo_mean_us"),
            halo_predicted_us=number("halo_predicted_us"), iteration_us=number("iteration_us"),
            compute_us=number("compute_us"), allreduce_us=number("allreduce_us"), mlups_total=number("mlups_total"),
            local_points=number("local_points"), cores=required_integer(obj, "cores", where, path),
            rel_err=number("rel_err"), halo_share=number("halo_share"), allreduce_share=number("allreduce_share"),
            compute_share=number("compute_share"), scaling=scaling)


@dataclass(frozen=True)
class HybridVsPure:
    """A hybrid point (ranks × threads) beside the pure MPI point of the same problem on as many
    cores (``pure`` None: there is none); ``iteration_ratio`` hybrid / pure only where both solved the
    same global grid (``equal_work``)."""

    problem: str | None
    cores: int
    hybrid: str  # "2 × 4"
    pure: str | None  # "8 × 1", "8 × 1 (grid 2×2×2)"
    hybrid_global_dims: tuple[int, ...]
    pure_global_dims: tuple[int, ...]
    equal_work: bool
    iteration_ratio: float | None
    hybrid_bytes_per_rank: float | None
    pure_bytes_per_rank: float | None
    hybrid_messages_per_rank: float | None
    pure_messages_per_rank: float | None
    hybrid_halo_us: float | None
    pure_halo_us: float | None
    hybrid_mlups: float | None
    pure_mlups: float | None
    hybrid_iteration_us: float | None
    pure_iteration_us: float | None

    # The figures compared, hybrid_<name> beside pure_<name>, in the file's order.
    FIGURES = ("bytes_per_rank", "messages_per_rank", "halo_us", "mlups", "iteration_us")

    def to_json(self) -> JsonObject:
        entry: JsonObject = {
            "problem": self.problem, "cores": self.cores, "hybrid": self.hybrid, "pure": self.pure,
            "hybrid_global_dims": list(self.hybrid_global_dims), "pure_global_dims": list(self.pure_global_dims),
            "equal_work": self.equal_work, "iteration_ratio": self.iteration_ratio}
        for name in self.FIGURES:
            entry[f"hybrid_{name}"] = getattr(self, f"hybrid_{name}")
            entry[f"pure_{name}"] = getattr(self, f"pure_{name}")
        return entry

    @classmethod
    def from_json(cls, value: JsonValue, where: str, path: str) -> HybridVsPure:
        obj = read_object(value, where, path)
        hybrid = read_text(obj, "hybrid", where, path)
        if hybrid is None:
            raise FitRecordError(located(where, f"{path}.hybrid") + ": required, a string")
        return cls(
            problem=read_text(obj, "problem", where, path), cores=required_integer(obj, "cores", where, path),
            hybrid=hybrid, pure=read_text(obj, "pure", where, path),
            hybrid_global_dims=read_integers(obj, "hybrid_global_dims", where, path),
            pure_global_dims=read_integers(obj, "pure_global_dims", where, path),
            equal_work=_required_bool(obj, "equal_work", where, path),
            iteration_ratio=read_number(obj, "iteration_ratio", where, path),
            **{f"{side}_{name}": read_number(obj, f"{side}_{name}", where, path)
               for name in cls.FIGURES for side in ("hybrid", "pure")})


@dataclass(frozen=True)
class JacobiFit:
    """One entry of kernels.json's ``jacobi``: one stack/transport/mapping's points, its λ and B
    (``lambda_source`` "PingPong" or "ring"; None: neither, the halo model is not evaluated), the
    hybrid vs pure comparisons and its process grids compared at equal P (``grids``)."""

    label: str | None = None
    stack: str | None = None
    transport: str | None = None
    mapping: str | None = None
    model: str = ""
    lambda_source: str | None = None
    lambda_note: str = ""
    latency_us: float | None = None
    bandwidth_MBps: float | None = None
    problems: tuple[str, ...] = ()
    points: tuple[JacobiPoint, ...] = ()
    hybrid_vs_pure: tuple[HybridVsPure, ...] = ()
    grids: tuple[GridComparison, ...] = ()
    headline: str = ""
    fails_where: str = ""

    def to_json(self) -> JsonObject:
        """The entry as kernels.json holds it (the key order fit_jacobi has always written)."""
        return {"label": self.label, "stack": self.stack, "transport": self.transport, "mapping": self.mapping,
                "model": self.model, "lambda_source": self.lambda_source, "lambda_note": self.lambda_note,
                "latency_us": self.latency_us, "bandwidth_MBps": self.bandwidth_MBps, "problems": list(self.problems),
                "points": [p.to_json() for p in self.points],
                "hybrid_vs_pure": [h.to_json() for h in self.hybrid_vs_pure],
                "grids": [g.to_json() for g in self.grids], "headline": self.headline, "fails_where": self.fails_where}

    @classmethod
    def from_json(cls, value: JsonValue, where: str = "kernels.json", path: str = "$") -> JacobiFit:
        obj = read_object(value, where, path)
        return cls(
            label=read_text(obj, "label", where, path), stack=read_text(obj, "stack", where, path),
            transport=read_text(obj, "transport", where, path), mapping=read_text(obj, "mapping", where, path),
            model=read_text(obj, "model", where, path) or "", lambda_source=read_text(obj, "lambda_source", where, path),
            lambda_note=read_text(obj, "lambda_note", where, path) or "",
            latency_us=read_number(obj, "latency_us", where, path),
            bandwidth_MBps=read_number(obj, "bandwidth_MBps", where, path),
            problems=read_texts(obj, "problems", where, path),
            points=read_records(obj, "points", JacobiPoint.from_json, where, path),
            hybrid_vs_pure=read_records(obj, "hybrid_vs_pure", HybridVsPure.from_json, where, path),
            grids=read_records(obj, "grids", GridComparison.from_json, where, path),
            headline=read_text(obj, "headline", where, path) or "",
            fails_where=read_text(obj, "fails_where", where, path) or "")


__all__ = ["HybridVsPure", "JacobiFit", "JacobiPoint", "Scaling"]
