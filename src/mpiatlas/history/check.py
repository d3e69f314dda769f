"""``mpiatlas history check``: is the newest entry of a series worse than its history?

The test (:data:`TEST`), per series and point (a message size, or the fitted parameter itself):

* on a log scale, ``d`` = ln(new) − mean of ln(earlier entries), signed so that positive is worse
  (slower times, lower bandwidth);
* the between-run spread σ² is the largest of three estimates from the history itself: the point's
  own variance over its earlier entries, the series' variance pooled over all its points, and the
  point's variance pooled over every series of the same system, benchmark and parameter at that
  size. The largest, because run-to-run noise differs between sizes (the sizes where a protocol
  switches wander most) and between series, and two earlier entries say little on their own;
* the prediction sd of a new entry is sqrt(σ² (1 + 1/k) + se²): k earlier entries, se the new
  entry's own standard error from its 95 % interval (zero when it has none);
* a point is worse when d / sd exceeds the normal quantile at 1 − 0.01 / m (Bonferroni over the m
  points of the series) and the change is at least ``min_change`` (default 5 %);
* a series alarms when at least two adjacent sizes are worse (a one-point series: that point). One
  size off alone is what quiet runs of single-shot data do; a regression moves a size range.

Series with fewer than two earlier entries are not judged (one entry shows no between-run variation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict, get_args, get_type_hints

import polars as pl
from scipy import stats

from mpiatlas.history.entry import HIGHER_IS_BETTER, PARAMETER_TEXT
from mpiatlas.history.store import SERIES_FIELDS, FigureRow, SeriesIdentity

ALPHA = 0.01
MIN_CHANGE = 0.05
MIN_HISTORY = 2
MIN_ADJACENT = 2
TEST = (f"per series and size: ln(new) against the mean of ln(earlier entries); prediction sd = sqrt(σ²(1+1/k) + "
        f"se_new²), σ² the largest of the point's, the series' and the size's between-run variance over the "
        f"history; worse when beyond the normal quantile at 1 − {ALPHA:g}/m (m sizes of the series, Bonferroni) "
        f"and by at least {{min_change:.0%}}; an alarm needs {MIN_ADJACENT} adjacent worse sizes (or the single "
        f"point of a fitted parameter); series with fewer than {MIN_HISTORY} earlier entries are not judged")
# The polars type of each Python type a FigureRow field holds (None aside: every column may be null).
_POLARS_TYPES: dict[type, pl.DataType] = {int: pl.Int64(), str: pl.String(), float: pl.Float64()}


@dataclass
class Point:
    bytes: int | None
    old: float  # geometric mean of the earlier entries
    old_low: float  # the prediction interval of a new entry at the test's level
    old_high: float
    new: float
    new_low: float | None
    new_high: float | None
    z: float
    history: int


@dataclass
class Alarm:
    series: SeriesIdentity
    entry_id: int
    entry_label: str | None
    entry_date: str
    points: list[Point]  # the worse sizes, in size order

    @property
    def worst(self) -> Point:
        return max(self.points, key=lambda p: p.z)

    def sizes_text(self) -> str:
        sizes = [p.bytes for p in self.points if p.bytes is not None]
        if not sizes:
            return "the fitted parameter"
        return size_text(sizes[0]) if len(sizes) == 1 else f"{size_text(sizes[0])}–{size_text(sizes[-1])} ({len(sizes)} sizes)"


@dataclass
class CheckResult:
    alarms: list[Alarm] = field(default_factory=list)
    judged: int = 0  # series judged
    not_judged: int = 0  # series with too little history
    min_change: float = MIN_CHANGE

    @property
    def test(self) -> str:
        return TEST.format(min_change=self.min_change)


def size_text(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def series_name(series: SeriesIdentity) -> str:
    """system stack-version/transport/mapping benchmark [algorithm] [knobs] np=N parameter."""
    stack = "/".join(str(v) for v in (
        f"{series.stack}-{series.stack_version}" if series.stack_version else series.stack,
        series.transport, series.mapping) if v)
    parts = [series.system, stack, series.benchmark,
             series.algorithm if series.algorithm not in (None, "default") else None,
             series.knobs, f"np={series.np}" if series.np is not None else None,
             PARAMETER_TEXT.get(str(series.parameter), series.parameter)]
    return " ".join(str(p) for p in parts if p)


def series_of(frame: pl.DataFrame, row: int = 0) -> SeriesIdentity:
    """The identity of the series of ``frame``'s ``row`` (a frame with the :data:`SERIES_FIELDS` columns)."""
    return SeriesIdentity(*frame.select(SERIES_FIELDS).row(row))


def figure_schema() -> dict[str, pl.DataType]:
    """The columns of :func:`figures_frame`'s rows: FigureRow's fields in order, each typed by its annotation,
    so a field added to the row (or to SeriesIdentity, whose fields it repeats) needs no second list here."""
    return {name: _POLARS_TYPES[_not_none(hint)] for name, hint in get_type_hints(FigureRow).items()}


def _not_none(hint: object) -> type:
    """``int`` of ``int | None`` (and of ``int``)."""
    kinds = [kind for kind in get_args(hint) or (hint,) if kind is not type(None)]
    if len(kinds) != 1 or not isinstance(kinds[0], type):
        raise TypeError(f"a FigureRow field is one type or None, got {hint!r}")
    return kinds[0]


def figures_frame(rows: list[FigureRow]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=figure_schema(), orient="row").with_columns(
        pl.concat_str([pl.col(f).cast(pl.String).fill_null("") for f in SERIES_FIELDS], separator="\x1f").alias("series"))


def check(figures: pl.DataFrame, *, min_change: float = MIN_CHANGE) -> CheckResult:
    """Judge the newest entry of every series in ``figures`` (:func:`figures_frame`) against its earlier ones."""
    result = CheckResult(min_change=min_change)
    if figures.height == 0:
        return result
    points = _points(figures)
    judged = points.filter(pl.col("k") >= MIN_HISTORY)
    result.not_judged = points.select("series").n_unique() - judged.select("series").n_unique()
    if judged.height == 0:
        return result
    judged = _spread(judged)
    m = judged.group_by("series").len().rename({"len": "m"})
    judged = judged.join(m, on="series")
    crit = stats.norm.ppf(1 - ALPHA / judged["m"].to_numpy())
    judged = judged.with_columns(pl.Series("crit", crit)).with_columns(
        ((pl.col("z") > pl.col("crit")) & (pl.col("d") >= math.log1p(min_change))).alias("worse"))
    result.judged = judged.select("series").n_unique()
    for _, group in judged.sort("series", "bytes", nulls_last=True).group_by("series", maintain_order=True):
        alarm = _alarm(group)
        if alarm is not None:
            result.alarms.append(alarm)
    return result


def _points(figures: pl.DataFrame) -> pl.DataFrame:
    """Per series and size: the newest entry's value and the earlier entries' log mean, sum of squares and count."""
    newest = figures.sort("date", "entry_id").group_by("series").agg(pl.col("entry_id").last().alias("new_entry"))
    df = figures.join(newest, on="series").with_columns(pl.col("value").log().alias("y"))
    new = df.filter(pl.col("entry_id") == pl.col("new_entry"))
    old = (df.filter(pl.col("entry_id") != pl.col("new_entry")).group_by("series", "bytes")
           .agg(pl.len().alias("k"), pl.col("y").mean().alias("mean_y"),
                ((pl.col("y") - pl.col("y").mean()) ** 2).sum().alias("ss")))
    keep = ["series", *SERIES_FIELDS, "bytes", "entry_id", "date", "label", "value", "ci_low", "ci_high", "y"]
    return new.select(keep).join(old, on=["series", "bytes"], how="left", nulls_equal=True).with_columns(
        pl.col("k").fill_null(0))


def _spread(points: pl.DataFrame) -> pl.DataFrame:
    """σ² (the largest of the point's, the series' and the size's between-run variance), sd, d and z."""
    dof = pl.col("k") - 1
    sign = pl.when(pl.col("parameter").is_in(list(HIGHER_IS_BETTER))).then(-1.0).otherwise(1.0)
    size_group = ["system", "benchmark", "parameter", "bytes"]
    se = pl.when((pl.col("ci_low") > 0) & (pl.col("ci_high") > 0)).then(
        (pl.col("ci_high").log() - pl.col("ci_low").log()) / (2 * stats.norm.ppf(0.975))).otherwise(0.0)
    return (points.with_columns(
        (pl.col("ss") / dof).alias("s2_point"),
        (pl.col("ss").sum().over("series") / dof.sum().over("series")).alias("s2_series"),
        (pl.col("ss").sum().over(size_group, mapping_strategy="group_to_rows")
         / dof.sum().over(size_group, mapping_strategy="group_to_rows")).alias("s2_size"))
        .with_columns(pl.max_horizontal("s2_point", "s2_series", "s2_size").alias("s2"))
        .with_columns((pl.col("s2") * (1 + 1 / pl.col("k")) + se**2).sqrt().alias("sd"),
                      (sign * (pl.col("y") - pl.col("mean_y"))).alias("d"))
        .with_columns((pl.col("d") / pl.col("sd")).alias("z")))


def _alarm(group: pl.DataFrame) -> Alarm | None:
    worse = group["worse"].to_list()
    if not any(worse):
        return None
    if group.height > 1:
        runs = _adjacent_runs(worse)
        chosen = [i for run in runs if len(run) >= MIN_ADJACENT for i in run]
        if not chosen:
            return None
    else:
        chosen = [0]
    label = group["label"][0]
    return Alarm(series_of(group), int(group["entry_id"][0]), None if label is None else str(label),
                 str(group["date"][0]), [_point(group, i) for i in chosen])


def _adjacent_runs(flags: list[bool]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i, flag in enumerate(flags):
        if flag and runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        elif flag:
            runs.append([i])
    return runs


def _point(group: pl.DataFrame, i: int) -> Point:
    """The test's figures at row ``i`` of one series' judged sizes."""
    def at(column: str) -> float:
        return float(group[column][i])

    def optional(column: str) -> float | None:
        value = group[column][i]
        return None if value is None else float(value)

    size = group["bytes"][i]
    mean_y, k = at("mean_y"), int(group["k"][i])
    spread = at("crit") * math.sqrt(at("s2") * (1 + 1 / k))
    return Point(None if size is None else int(size), math.exp(mean_y), math.exp(mean_y - spread),
                 math.exp(mean_y + spread), at("value"), optional("ci_low"), optional("ci_high"), at("z"), k)


class AlarmPointRecord(TypedDict):
    """One worse size of an alarm, as ``history check --json`` writes it."""

    bytes: int | None
    old: float
    old_interval: list[float]
    new: float
    new_ci: list[float | None]
    ratio: float
    z: float
    history: int


class AlarmRecord(TypedDict):
    """An alarm as ``history check --json`` writes it: the series (by field), its name, the entry and the worse sizes."""

    series: dict[str, str | int | None]
    name: str
    entry: int
    entry_label: str | None
    entry_date: str
    sizes: str
    points: list[AlarmPointRecord]


def alarm_record(alarm: Alarm) -> AlarmRecord:
    """An alarm as JSON (``history check --json``)."""
    return {"series": dict(zip(SERIES_FIELDS, alarm.series)), "name": series_name(alarm.series), "entry": alarm.entry_id,
            "entry_label": alarm.entry_label, "entry_date": alarm.entry_date, "sizes": alarm.sizes_text(),
            "points": [{"bytes": p.bytes, "old": p.old, "old_interval": [p.old_low, p.old_high], "new": p.new,
                        "new_ci": [p.new_low, p.new_high], "ratio": p.new / p.old, "z": p.z, "history": p.history}
                       for p in alarm.points]}


def alarm_lines(alarm: Alarm) -> list[str]:
    """Two lines: the series and sizes, then the worst size's old → new with intervals."""
    p = alarm.worst
    where = f" at {size_text(p.bytes)}" if p.bytes is not None else ""
    new_ci = f" [{p.new_low:.4g}, {p.new_high:.4g}]" if p.new_low is not None and p.new_high is not None else ""
    return [f"WORSE {series_name(alarm.series)}: sizes {alarm.sizes_text()} (entry {alarm.entry_id}"
            f"{' ' + repr(alarm.entry_label) if alarm.entry_label else ''}, {alarm.entry_date[:10]})",
            f"  worst{where}: {p.old:.4g} [{p.old_low:.4g}, {p.old_high:.4g}] over {p.history} earlier entries -> "
            f"{p.new:.4g}{new_ci} ({p.new / p.old:.3g}x)"]
