"""Altair chart builders shared by the report's sections (one place for each kind of chart).

Every chart becomes a Vega-Lite dict with :func:`chart_spec` (JSON-clean, no schema URL); the
renderer embeds the specs once and inlines the Vega bundle, so no chart needs the network.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import altair as alt
import numpy as np
import polars as pl

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.models.hockney import HockneyFit
from mpiatlas.report.formatting import finite, fmt_bytes

SIZE_LABEL_EXPR = (
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB'"
    " : datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB'"
    " : datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB'"
    " : format(datum.value, '~g') + ' B'"
)
CHART_W = 380
CHART_H = 260
OVER = "oversubscribed (ranks × threads > cores)"
FITTED = "P ≤ cores"

# (column, title, format) of the measurement tooltips, shown for the columns a frame has.
_MEASURE_TIPS: tuple[tuple[str, str, str | None], ...] = (
    ("t_median_usec", "median t (µs)", ".4~g"), ("t_ci_low_usec", "CI low (µs)", ".4~g"),
    ("t_ci_high_usec", "CI high (µs)", ".4~g"), ("t_min_usec", "min t (µs)", ".4~g"), ("t_cv", "CV", ".2%"),
    ("n_reps", "repetitions", None), ("bw_median_MBps", "median bw (MB/s)", ",.4~g"),
)


# -- spec and data helpers ---------------------------------------------------------------------


def _clean_json(obj: Any) -> Any:
    """Non-finite floats -> None, so the specs are valid JSON for ``JSON.parse``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean_json(v) for v in obj]
    return obj


def chart_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """Vega-Lite dict of an altair chart, without the schema URL, JSON-clean.

    Not validated against the Vega-Lite schema here (jsonschema over every chart was most of the
    report's time, and it changes nothing in the spec): the charts come from this package's
    code, and tests/test_report_bundle.py validates every chart of a report against the schema."""
    with alt.data_transformers.enable("default", max_rows=None):
        spec = chart.to_dict(validate=False)
    spec.pop("$schema", None)
    cleaned: dict[str, Any] = _clean_json(spec)
    return cleaned


def rounded(df: pl.DataFrame, sig: int = 5) -> pl.DataFrame:
    """Round float columns for the embedded chart data (smaller file; tooltips stay exact enough)."""
    exprs = [pl.col(c).round_sig_figs(3 if c == "t_cv" else sig)
             for c, t in df.schema.items() if t in (pl.Float32, pl.Float64)]
    return df.with_columns(exprs) if exprs else df


def with_size(df: pl.DataFrame, field_: str = "bytes") -> pl.DataFrame:
    """A ``size`` column: the message size as text (``4 KiB``) for tooltips and ordinal axes."""
    return df.with_columns(pl.col(field_).map_elements(fmt_bytes, return_dtype=pl.String).alias("size"))


# -- encodings ------------------------------------------------------------------------------


def size_ticks(lo: object, hi: object, max_ticks: int = 12) -> list[int]:
    """Powers of 4 (16, 64 for wide ranges) covering [lo, hi]: byte-sized axis ticks (none unless
    both are finite numbers: a column's min and max are None when it holds no value)."""
    if not (finite(lo) and finite(hi)) or hi <= 0:
        return []
    lo = max(lo, 1)
    ticks: list[int] = []
    for base in (4, 16, 64, 1024):
        ticks = [base**k for k in range(32) if lo <= base**k <= hi]
        if len(ticks) <= max_ticks:
            break
    return ticks or [int(lo)]


def size_x(df: pl.DataFrame, field_: str = "bytes", title: str = "message size", max_ticks: int = 12) -> alt.X:
    col = df.get_column(field_)
    ticks = size_ticks(col.min(), col.max(), max_ticks) if df.height else []
    axis = alt.Axis(labelExpr=SIZE_LABEL_EXPR, values=ticks) if ticks else alt.Axis(labelExpr=SIZE_LABEL_EXPR)
    return alt.X(f"{field_}:Q", scale=alt.Scale(type="log"), axis=axis, title=title)


def color(domain: list[str], title: str = "series", field_: str = "series") -> alt.Color:
    scheme: Literal["tableau10", "tableau20"] = "tableau10" if len(domain) <= 10 else "tableau20"
    # symbolOpacity: the legend would otherwise take a faint layer's opacity (CI bands).
    return alt.Color(f"{field_}:N", scale=alt.Scale(domain=domain, scheme=scheme), title=title,
                     legend=alt.Legend(labelLimit=320, symbolLimit=80, symbolOpacity=1))


def legend_pick(field_: str = "series") -> alt.Parameter:
    """Click a legend entry to highlight its series."""
    return alt.selection_point(name="pick", fields=[field_], bind="legend")


def picked(sel: alt.Parameter, on: float, off: float = 0.07) -> Mapping[str, Any]:
    # A dict, which altair converts with a slow from_dict; typing it (OpacityValue) would change
    # altair's view names in the spec, so the page would not stay byte-identical.
    return alt.condition(sel, alt.value(on), alt.value(off))


def size_tip() -> alt.Tooltip:
    return alt.Tooltip("size:N", title="size")


# -- the Hockney model ---------------------------------------------------------------------------


def hockney_curve(fit: HockneyRecord, lo: float, hi: float, points: int = 24) -> list[dict[str, Any]]:
    """Points of a fitted (piecewise) Hockney model t(m) = λ + m/B on a log grid, per segment.

    Segment i is drawn over [from_bytes_i, from_bytes_{i+1}] (the first from ``lo``, the last up
    to ``hi``) with its own line, so the curve breaks at the breakpoints. The values come from
    :meth:`HockneyFit.predict`; raises ValueError when the fit's segments are unusable.
    """
    model = HockneyFit.from_record(fit)
    out: list[dict[str, Any]] = []
    starts = [float(seg.from_bytes or 0) for seg in model.segments]
    for i in range(len(starts)):
        a = max(starts[i] if i > 0 else lo, 1.0)
        b = starts[i + 1] if i + 1 < len(starts) else hi
        if b < a:
            continue
        grid = np.geomspace(a, b, points) if b > a else np.array([a])
        for m, t in zip(grid, model.predict(grid, segment=i)):
            out.append({"segment": i, "bytes": float(m), "t_model_usec": float(t)})
    return out


# -- point-to-point: latency and bandwidth vs size -------------------------------------------------


# Encodings are given as typed channels (alt.X("bytes:Q"), alt.Tooltip(...)), not shorthand strings:
# altair converts each untyped one with a from_dict that hashes its whole schema (the same spec).


def p2p_chart(meas: pl.DataFrame, title: str, *, model: pl.DataFrame | None = None,
              breakpoints: pl.DataFrame | None = None, overlays: Sequence[alt.Chart] = (),
              domain: list[str] | None = None, color_title: str = "series", tips: list[Any] | None = None,
              latency_title: str = "latency t (µs)") -> alt.TopLevelMixin:
    """Latency (left) and bandwidth (right) vs size, one line per ``series``, the model dashed.

    ``meas``: series, bytes, size, t_median_usec, and optionally the CI columns (drawn as a band),
    bw_median_MBps and the other tooltip columns. ``model``: series, bytes, segment,
    t_model_usec and optionally bw_model_MBps. ``breakpoints``: series, bytes, size (dotted rules,
    latency panel). ``overlays``: layers drawn on both panels (e.g. cache-size rules). ``domain``:
    the series in legend order (default: sorted). ``tips``: the measurement tooltips (default:
    series, size and the known measurement columns ``meas`` has).
    """
    if domain is None:
        domain = sorted(set(meas.get_column("series").to_list()) | (set(model.get_column("series").to_list())
                                                                    if model is not None else set()))
    sel, colors, x = legend_pick(), color(domain, color_title), size_x(meas, max_ticks=8)
    if tips is None:
        tips = [alt.Tooltip("series:N"), size_tip(),
                *[alt.Tooltip(f"{c}:Q", title=t, format=f or alt.Undefined) for c, t, f in _MEASURE_TIPS
                  if c in meas.columns]]
    base = alt.Chart(meas)
    lat: list[alt.Chart] = []
    if "t_ci_low_usec" in meas.columns and "t_ci_high_usec" in meas.columns:
        lat.append(base.transform_filter("datum.t_ci_low_usec > 0 && datum.t_ci_high_usec > 0").mark_area().encode(
            x=x, y=alt.Y("t_ci_low_usec:Q", scale=alt.Scale(type="log")), y2=alt.Y2("t_ci_high_usec:Q"),
            color=colors, opacity=picked(sel, 0.22, 0.03)))
    lat.append(base.mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20)).encode(
        x=x, y=alt.Y("t_median_usec:Q", scale=alt.Scale(type="log"), title=latency_title), color=colors,
        opacity=picked(sel, 1.0), tooltip=tips).add_params(sel))
    bw_meas = meas.filter(pl.col("bw_median_MBps") > 0) if "bw_median_MBps" in meas.columns else meas.clear()
    bw: list[alt.Chart] = []
    if bw_meas.height:
        bw.append(alt.Chart(bw_meas).mark_line(strokeWidth=1.2, point=alt.OverlayMarkDef(size=20)).encode(
            x=x, y=alt.Y("bw_median_MBps:Q", scale=alt.Scale(type="log"), title="bandwidth (MB/s, 10⁶ B/s)"),
            color=colors, opacity=picked(sel, 1.0), tooltip=tips))
    if model is not None and model.height:
        mtips = [alt.Tooltip("series:N"), size_tip(), alt.Tooltip("segment:O"),
                 alt.Tooltip("t_model_usec:Q", title="model t (µs)", format=".4~g")]
        lat.append(alt.Chart(model).mark_line(strokeDash=[5, 3], strokeWidth=2.4).encode(
            x=x, y=alt.Y("t_model_usec:Q"), color=colors, detail=alt.Detail("segment:N"), opacity=picked(sel, 0.9),
            tooltip=mtips))
        if bw and "bw_model_MBps" in model.columns and model.get_column("bw_model_MBps").is_not_null().any():
            bw.append(alt.Chart(model).mark_line(strokeDash=[5, 3], strokeWidth=2.4).encode(
                x=x, y=alt.Y("bw_model_MBps:Q"), color=colors, detail=alt.Detail("segment:N"),
                opacity=picked(sel, 0.9),
                tooltip=[*mtips, alt.Tooltip("bw_model_MBps:Q", title="model bw (MB/s)", format=",.4~g")]))
    if breakpoints is not None and breakpoints.height:
        lat.append(alt.Chart(breakpoints).mark_rule(strokeDash=[2, 3]).encode(
            x=alt.X("bytes:Q"), color=colors, opacity=picked(sel, 0.7, 0.03),
            tooltip=[alt.Tooltip("series:N"), alt.Tooltip("size:N", title="breakpoint")]))
    lat_chart = alt.layer(*lat, *overlays).properties(width=CHART_W, height=CHART_H, title=f"{title}: latency")
    if not bw:
        return lat_chart
    return alt.hconcat(lat_chart, alt.layer(*bw, *overlays).properties(width=CHART_W, height=CHART_H,
                                                                       title=f"{title}: bandwidth"))


def residual_chart(res: pl.DataFrame, colors: alt.Color, title: str, *, width: int = 2 * CHART_W,
                   height: int = 180, tooltip: list[Any] | None = None) -> alt.LayerChart | alt.FacetChart:
    """Relative error (model − measured)/measured vs size (``rel_err``, ``bytes``), a rule at zero."""
    field_ = _channel_field(colors)
    sel = legend_pick(field_)
    return alt.layer(
        alt.Chart(pl.DataFrame({"zero": [0.0]})).mark_rule(color="#888").encode(y=alt.Y("zero:Q")),
        alt.Chart(res).mark_line(point=alt.OverlayMarkDef(size=22)).encode(
            x=size_x(res, max_ticks=8), y=alt.Y("rel_err:Q", title="relative error (model − measured)/measured",
                                                 axis=alt.Axis(format="%")),
            color=colors, opacity=picked(sel, 1.0),
            tooltip=tooltip or [alt.Tooltip(f"{field_}:N"), size_tip(),
                                alt.Tooltip("rel_err:Q", format=".2%")]).add_params(sel),
    ).properties(width=width, height=height, title=title)


# -- collectives: latency vs size or vs processes -----------------------------------------------


def _channel_field(channel: alt.Color) -> str:
    spec = channel.to_dict()
    if not isinstance(spec, dict):  # to_dict() gives a list for an array-valued channel only
        raise TypeError(f"expected a field channel, got {spec!r}")
    return str(spec["field"])


def latency_lines(df: pl.DataFrame, title: str) -> tuple[alt.TopLevelMixin, int]:
    """Latency vs size, one line per label · algorithm · np; one panel per np when there are several.

    ``df``: label, algorithm, np, series, bytes, size, t_median_usec and the CI/CV/reps columns.
    Returns the chart and the number of lines drawn.
    """
    nps = df.get_column("np").unique().to_list()
    multi_np = len(nps) > 1
    key = "line" if multi_np else "series"
    d = df.with_columns(pl.concat_str([pl.col("label").cast(pl.String), pl.lit(" · "), pl.col("algorithm")])
                        .alias("line"))
    data = rounded(d.select("series", "line", "label", "algorithm", "np", "bytes", "size", "t_median_usec",
                            "t_ci_low_usec", "t_ci_high_usec", "t_cv", "n_reps"))
    domain = sorted(data.get_column(key).unique().to_list())
    sel = legend_pick(key)
    tips = [alt.Tooltip("label:N"), alt.Tooltip("algorithm:N"), alt.Tooltip("np:Q"), size_tip(),
            *[alt.Tooltip(f"{c}:Q", title=t, format=f or alt.Undefined) for c, t, f in _MEASURE_TIPS
              if c in data.columns and c != "t_min_usec"]]
    colors = color(domain, "label · algorithm" if multi_np else "label · algorithm · np", field_=key)
    chart = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=size_x(data, max_ticks=7 if multi_np else 12),
        y=alt.Y("t_median_usec:Q", scale=alt.Scale(type="log"), title="latency t (µs)"),
        color=colors, opacity=picked(sel, 1.0), tooltip=tips,
    ).add_params(sel)
    if not multi_np:
        return chart.properties(width=2 * CHART_W, height=CHART_H + 40, title=title), len(domain)
    cols = min(len(nps), 3)
    return chart.properties(width=300, height=230).facet(
        facet=alt.Facet("np:O", title="processes (np)", header=alt.Header(labelFontWeight="bold")), columns=cols,
    ).properties(title=title), data.select("series").n_unique()


def np_chart(df: pl.DataFrame, title: str) -> alt.TopLevelMixin:
    """Size-less collectives (Barrier): latency vs np per label × algorithm."""
    d = rounded(df.with_columns(pl.concat_str([pl.col("label"), pl.lit(" · "), pl.col("algorithm")])
                                .alias("series"))
                .select("series", "np", "t_median_usec", "t_ci_low_usec", "t_ci_high_usec", "n_reps"))
    series = sorted(d.get_column("series").unique().to_list())
    sel = legend_pick()
    chart: alt.Chart = alt.Chart(d).mark_line(point=alt.OverlayMarkDef(size=30)).encode(
        x=alt.X("np:Q", title="processes (np)", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted(d.get_column("np").drop_nulls().unique().to_list()), format="d")),
        y=alt.Y("t_median_usec:Q", title="latency t (µs)", scale=alt.Scale(type="log")),
        color=color(series), opacity=picked(sel, 1.0),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("np:Q"),
                 alt.Tooltip("t_median_usec:Q", title="median t (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_low_usec:Q", title="CI low (µs)", format=".4~g"),
                 alt.Tooltip("t_ci_high_usec:Q", title="CI high (µs)", format=".4~g"), alt.Tooltip("n_reps:Q")],
    ).add_params(sel).properties(width=2 * CHART_W, height=CHART_H, title=title)
    return chart


# -- kernels: measured marks and a model line vs processes ---------------------------------------


# Rows of a chart's data that are boundaries (measured_vs_model's ``boundaries``), not points.
_IS_BOUNDARY = "isValid(datum.boundary)"


def measured_vs_model(points: pl.DataFrame, x: str, x_title: str, y_meas: str, y_pred: str | None, y_title: str,
                      title: str, *, facet: str | None = "label", log_y: bool = True,
                      boundaries: pl.DataFrame | None = None) -> alt.LayerChart | alt.FacetChart:
    """Measured points (circles: P ≤ cores, triangles: oversubscribed, from ``placement``) with the
    model as a dashed line (hollow squares at the measured P). ``boundaries`` (``label``, ``np``,
    ``boundary``: a name such as "node"): a vertical rule between np − 1 and np, named at the top --
    where the ranks first reach another socket or node. They ride in the points' data (a faceted
    chart has one data set), each layer filtering its own rows."""
    # All-null columns have no type a chart can take (e.g. a phase time the kernel did not report).
    data = rounded(points.select(c for c, t in points.schema.items() if t != pl.Null))
    domain = sorted(data.get_column("series").unique().to_list())
    sel = legend_pick()
    xs = sorted(data.get_column(x).drop_nulls().unique().to_list())
    tips = [alt.Tooltip(c) for c in data.columns if c not in ("series",)]
    drawn = boundaries is not None and boundaries.height > 0
    if drawn and boundaries is not None:
        rules = boundaries.select(pl.col("label"), pl.col("boundary"),
                                  (pl.col("np") - 0.5).alias("boundary_x"))
        data = pl.concat([data, rules], how="diagonal_relaxed")
    x_enc = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(values=xs, format="d"), scale=alt.Scale(zero=False))
    y_scale = alt.Scale(type="log") if log_y else alt.Scale(zero=True)
    base = alt.Chart(data)
    if drawn:
        base = base.transform_filter(f"!{_IS_BOUNDARY}")
    measured = base.mark_point(size=60, filled=True).encode(
        x=x_enc, y=alt.Y(f"{y_meas}:Q", title=y_title, scale=y_scale),
        color=color(domain), shape=alt.Shape("placement:N", title="placement",
                                             scale=alt.Scale(domain=[FITTED, OVER], range=["circle", "triangle-up"])),
        opacity=picked(sel, 1.0, 0.1), tooltip=tips,
    )
    layers = [measured]
    if y_pred:
        # Hollow squares on the dashed line: the model stays visible at a single P too.
        layers.insert(0, base.mark_line(strokeDash=[5, 3], point=alt.OverlayMarkDef(
            shape="square", filled=False, size=45)).encode(
            x=x_enc, y=alt.Y(f"{y_pred}:Q", scale=y_scale), color=color(domain),
            opacity=picked(sel, 0.8, 0.05), tooltip=tips,
        ))
    if drawn:
        rule_rows = alt.Chart(data).transform_filter(_IS_BOUNDARY)
        layers.append(rule_rows.mark_rule(color="#777", strokeDash=[2, 2]).encode(
            x=alt.X("boundary_x:Q"), tooltip=[alt.Tooltip("boundary:N", title="boundary")]))
        layers.append(rule_rows.mark_text(align="left", baseline="top", dx=3, y=4, color="#555").encode(
            x=alt.X("boundary_x:Q"), text=alt.Text("boundary:N")))
    chart = alt.layer(*layers).add_params(sel)
    if facet and data.get_column(facet).n_unique() > 1:
        return chart.properties(width=CHART_W, height=CHART_H).facet(
            facet=alt.Facet(f"{facet}:N", title=None), columns=2).properties(title=title)
    return chart.properties(width=2 * CHART_W, height=CHART_H + 40, title=title)
