"""Section "History": this campaign beside the earlier entries of the checkout's history store.

The store is ``results/history.sqlite`` of the checkout the campaign ran in (found from the tidy
directory: ``results/<campaign>/tidy`` or ``results/<campaign>/partial/tidy``). This campaign is
judged as the newest entry of every one of its series, whether or not it is already in the store
(``mpiatlas campaign`` adds it after the report is built), by the test of
:mod:`mpiatlas.history.check`. The trend charts: each headline figure (Hockney λ and B) of the
campaign's series that has earlier entries, and the worst size of every alarmed series, over time,
each entry with its 95 % interval. None when there is no store.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl

from mpiatlas.history.check import Alarm, CheckResult, check, figures_frame, series_name, size_text
from mpiatlas.history.entry import BANDWIDTH, LATENCY, PARAMETER_TEXT, build_entry
from mpiatlas.history.store import DEFAULT_DB, SERIES_FIELDS, Entry, FigureRow, HistoryError, SeriesIdentity, StoredEntry, open_store
from mpiatlas.report.blocks import Block, ChartBlock, Notice, Section, Text, table
from mpiatlas.report.charts import CHART_H, CHART_W, chart_spec
from mpiatlas.report.data import ReportData

TITLE = "History"
SECTION_ID = "history"
THIS = "this campaign"
NEWEST = "newest entry"
# Charts at most (the headlines first, then the alarms'); a long history has many series.
MAX_CHARTS = 12


def section_history(data: ReportData) -> Section | None:
    store_path = history_store_near(data.tidy_dir)
    if store_path is None or data.tidy_dir is None:
        return None
    try:
        current = build_entry(_campaign_dir(data.tidy_dir))
        with open_store(store_path, create=False) as store:
            own = _same_data(store.entries(), current)
            earlier = [row for row in store.figures() if row.entry_id not in own]
    except HistoryError as exc:
        return Section(TITLE, [Notice(f"The history store could not be read: {exc}", "error")], id=SECTION_ID)
    figures = figures_frame([*earlier, *_rows_of(current)])
    result = check(figures)
    blocks: list[Block] = [Text(_lead(store_path, result, figures))]
    if result.alarms:
        blocks.append(Notice(f"{len(result.alarms)} series worse than their history (the table below lists them "
                             "all; the charts show the worst size of the first ones)", "error"))
    blocks += [ChartBlock(chart_spec(trend_chart(figures, key, expected)), caption)
               for key, caption, expected in _charted(figures, result)[:MAX_CHARTS]]
    if result.alarms:
        blocks.append(table(["series", "sizes", "worst: earlier (prediction interval)", "this campaign (CI)", "ratio"],
                            [_alarm_row(a) for a in result.alarms], filterable=True,
                            caption=f"The test: {result.test}."))
    return Section(TITLE, blocks, id=SECTION_ID)


def history_store_near(tidy_dir: Path | None) -> Path | None:
    """The checkout's history store for a campaign's tidy directory, if there is one."""
    if tidy_dir is None:
        return None
    tidy = Path(tidy_dir).resolve()
    for results_root in (tidy.parent.parent, tidy.parent.parent.parent):
        candidate = results_root.parent / DEFAULT_DB
        if candidate.is_file() and results_root.name == Path(DEFAULT_DB).parent.name:
            return candidate
    return None


def _campaign_dir(tidy_dir: Path) -> Path:
    tidy = Path(tidy_dir).resolve()
    return tidy.parent.parent if tidy.parent.name == "partial" else tidy.parent


def _same_data(entries: list[StoredEntry], current: Entry) -> set[int]:
    """Entries holding this campaign's own data (already added): not its history."""
    return {e["id"] for e in entries if e["source_key"] == current.source_key or e["source"] == current.source}


def _rows_of(entry: Entry) -> list[FigureRow]:
    """The campaign's figures as store rows, under entry id 0 (stored entries count from 1)."""
    return [FigureRow(0, entry.date, THIS, *f.series, f.bytes, f.value, f.ci_low, f.ci_high, f.n)
            for f in entry.figures or []]


def _lead(path: Path, result: CheckResult, figures: pl.DataFrame) -> str:
    earlier = figures.filter(pl.col("entry_id") != 0)["entry_id"].n_unique()
    return (f"This campaign beside {earlier} earlier entr{'y' if earlier == 1 else 'ies'} of {path}: "
            f"{result.judged} of its series judged ({result.not_judged} with fewer than 2 earlier entries are not), "
            f"{len(result.alarms)} worse. `mpiatlas history check --db {path}` gives the same verdict once the "
            "campaign is added.")


def _charted(figures: pl.DataFrame, result: CheckResult) -> list[tuple[str, str, tuple[float, float] | None]]:
    """(series key, caption, the interval the test expected) of the charts: the campaign's Hockney λ and B
    with earlier entries, then the alarms' worst sizes."""
    mine = figures.filter(pl.col("entry_id") == 0)
    counts = figures.group_by("series").agg(pl.col("entry_id").n_unique().alias("entries"))
    headline = (mine.filter(pl.col("parameter").is_in([LATENCY, BANDWIDTH])).join(counts, on="series")
                .filter(pl.col("entries") > 1))
    out: list[tuple[str, str, tuple[float, float] | None]] = [
        (str(k), f"{name}: each entry with its 95 % interval.", None)
        for k, name in zip(headline["series"], (series_name(SeriesIdentity(*r))
                                                   for r in headline.select(SERIES_FIELDS).iter_rows()))]
    for alarm in result.alarms:
        worst = alarm.worst
        out.append((f"{_frame_key(alarm.series)}\x1e{worst.bytes}", f"{series_name(alarm.series)} at "
                    f"{size_text(worst.bytes) if worst.bytes is not None else 'its fitted value'}: worse than its "
                    "history. Points: each entry (with its 95 % interval where it has one); grey bar: where the "
                    "test expected this campaign (the earlier entries' prediction interval).",
                    (worst.old_low, worst.old_high)))
    return out


def _frame_key(series: SeriesIdentity) -> str:
    """The ``series`` column of :func:`mpiatlas.history.check.figures_frame` for a series' fields."""
    return "\x1f".join("" if v is None else str(v) for v in series)


def trend_chart(figures: pl.DataFrame, key: str, expected: tuple[float, float] | None = None) -> alt.TopLevelMixin:
    """One series (at one size: ``key`` + "\\x1e" + bytes) over time: points and 95 % interval rules;
    ``expected``: the interval the test expected the newest entry in, drawn at its date."""
    series, _, size = key.partition("\x1e")
    rows = figures.filter(pl.col("series") == series)
    rows = rows.filter(pl.col("bytes") == int(size)) if size not in ("", "None") else rows.filter(pl.col("bytes").is_null())
    parameter = str(rows["parameter"][0])
    rows = rows.sort("date", "entry_id")
    newest = THIS if rows["entry_id"][-1] == 0 else NEWEST
    df = rows.select(pl.col("date").str.slice(0, 10).alias("date"), "value", "ci_low", "ci_high",
                     pl.col("label").fill_null("").alias("label"),
                     pl.when(pl.int_range(pl.len()) == pl.len() - 1).then(pl.lit(newest))
                     .otherwise(pl.lit("earlier")).alias("entry"))
    base = alt.Chart(df).encode(x=alt.X("date:T", title="date", scale=alt.Scale(padding=14)))
    y_title = PARAMETER_TEXT.get(parameter, parameter)
    rules = base.mark_rule().encode(y=alt.Y("ci_low:Q", title=y_title, scale=alt.Scale(zero=False)), y2="ci_high:Q")
    points = base.mark_point(filled=True, size=60).encode(
        y=alt.Y("value:Q", title=y_title, scale=alt.Scale(zero=False)),
        color=alt.Color("entry:N", scale=alt.Scale(domain=["earlier", newest], range=["#4c78a8", "#e45756"])),
        tooltip=["date:T", alt.Tooltip("value:Q", format=".4~g"), alt.Tooltip("ci_low:Q", format=".4~g"),
                 alt.Tooltip("ci_high:Q", format=".4~g"), "label:N"])
    layers = [rules, points]
    if expected is not None:
        last = df["date"][-1]
        band = pl.DataFrame({"date": [last], "low": [expected[0]], "high": [expected[1]]})
        layers.insert(0, alt.Chart(band).mark_rule(strokeWidth=10, opacity=0.3, color="gray").encode(
            x=alt.X("date:T", scale=alt.Scale(padding=14)), y=alt.Y("low:Q", title=y_title), y2="high:Q",
            tooltip=[alt.Tooltip("low:Q", title="expected from", format=".4~g"),
                     alt.Tooltip("high:Q", title="expected to", format=".4~g")]))
    return alt.layer(*layers).properties(width=CHART_W, height=CHART_H // 2 + 40)


def _alarm_row(alarm: Alarm) -> list[str]:
    p = alarm.worst
    new_ci = f" ({p.new_low:.4g}–{p.new_high:.4g})" if p.new_low is not None and p.new_high is not None else ""
    return [series_name(alarm.series), alarm.sizes_text(), f"{p.old:.4g} ({p.old_low:.4g}–{p.old_high:.4g})",
            f"{p.new:.4g}{new_ci}", f"{p.new / p.old:.3g}×"]


__all__ = ["history_store_near", "section_history", "trend_chart"]
