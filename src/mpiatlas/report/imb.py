"""The IMB summary as the sections read it: benchmark families and order, series names, fit lookup."""

from __future__ import annotations


import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.models.fit_records import Fit
from mpiatlas.report.cells import has_columns
from mpiatlas.report.data import ReportData

P2P_ORDER = (
    "PingPong", "PingPongSpecificSource", "PingPongAnySource", "PingPing", "PingPingSpecificSource",
    "PingPingAnySource", "Sendrecv", "Exchange", "Uniband", "Biband", "Unirandom", "Birandom",
    "Corandom", "Stencil2D", "Stencil3D",
)
COLL_ORDER = (
    "Barrier", "Bcast", "Reduce", "Allreduce", "Reduce_scatter", "Reduce_scatter_block", "Gather",
    "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Reduce_local",
)
_P2P = {b.lower() for b in P2P_ORDER}
_COLL = {b.lower() for b in COLL_ORDER}
_ORDER = {b.lower(): i for i, b in enumerate(P2P_ORDER + COLL_ORDER)}

# Columns a family's summary always has after :func:`family_summary` (null when the table lacks them).
_OPTIONAL_COLUMNS: tuple[tuple[str, pl.DataType], ...] = (
    ("np", pl.Int64()), ("algorithm", pl.String()), ("bytes", pl.Int64()), ("t_ci_low_usec", pl.Float64()),
    ("t_ci_high_usec", pl.Float64()), ("bw_median_MBps", pl.Float64()), ("t_cv", pl.Float64()),
    ("n_reps", pl.Int32()), ("oversubscribed", pl.Boolean()), ("t_min_usec", pl.Float64()),
)


def benchmark_family(name: str) -> str:
    """``p2p``, ``collective`` (blocking or IMB-NBC ``I...``) or ``other``."""
    n = name.removeprefix("Multi-").lower()
    if n in _P2P:
        return "p2p"
    if n in _COLL or (n.startswith("i") and n[1:] in _COLL):
        return "collective"
    return "other"


def bench_sort_key(name: str) -> tuple[int, str]:
    """IMB's own order (p2p first, then collectives), unknown benchmarks last."""
    n = name.removeprefix("Multi-").lower()
    base = n[1:] if n.startswith("i") and n[1:] in _COLL else n
    return (_ORDER.get(base, len(_ORDER)), name)


def no_summary_text(data: ReportData) -> str:
    if data.summary is None:
        return f"No summary table ({layout.IMB_SUMMARY} missing or unreadable): nothing to plot."
    lacking = [c for c in ("benchmark", "label", "t_median_usec") if c not in data.summary.columns]
    return f"{layout.IMB_SUMMARY} lacks column(s) {', '.join(lacking)}: nothing to plot."


def family_summary(data: ReportData, family: str) -> pl.DataFrame | None:
    """The summary rows of one benchmark family with every optional column present; None without a summary."""
    s = data.summary
    if not has_columns(s, "benchmark", "label", "t_median_usec"):
        return None
    assert s is not None
    s = s.filter(pl.col("benchmark").map_elements(benchmark_family, return_dtype=pl.String) == family)
    for c, dt in _OPTIONAL_COLUMNS:
        if c not in s.columns:
            s = s.with_columns(pl.lit(None, dtype=dt).alias(c))
    return s


def coll_series(df: pl.DataFrame) -> pl.DataFrame:
    """``label · algorithm · np=N`` series names (a null algorithm is ``default``)."""
    return df.with_columns(
        pl.col("algorithm").fill_null("default").alias("algorithm"),
    ).with_columns(pl.concat_str([pl.col("label").cast(pl.String), pl.lit(" · "), pl.col("algorithm"),
                                  pl.lit(" · np="), pl.col("np").cast(pl.String).fill_null("?")]).alias("series"))


def series_name(label: object, np_: object = None, algorithm: object = None, *, multi_np: bool = False,
                multi_alg: bool = False) -> str:
    """Point-to-point series: the label, plus np / algorithm when a benchmark has several."""
    s = str(label) if label is not None else "(no label)"
    if multi_np:
        s += f" np={np_ if np_ is not None else '?'}"
    if multi_alg:
        s += f" alg={algorithm or 'default'}"
    return s


def fit_matches(fit: Fit, label: object, np_: object, algorithm: object) -> bool:
    """A fit belongs to a summary series when every key the fit carries agrees."""
    if fit.label != label:
        return False
    if fit.np is not None and np_ is not None and fit.np != np_:
        return False
    return fit.algorithm is None or algorithm is None or fit.algorithm == algorithm
