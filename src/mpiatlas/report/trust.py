"""How far this campaign's numbers can be trusted: the paragraph the Findings open with (issue #23).

Plain sentences from the tables, in this order:

1. launches: how many were perturbed (the cells table's ``quality`` = "perturbed", with the
   first one's ``quality_reason``) and how many were re-measured (``remeasured``: attempts set
   aside and launched again), and those of the later round, with what each waited for a quiet machine
   (``quiet_wait_s``, ``quiet_wait``);
2. points left noisy: (series, size) rows of the summary whose ``quality`` is "noisy", with the
   first ones' ``quality_reason``;
3. the fits: how many carry a warning (``ci_warning``), and the widest 95 % intervals of λ and B
   (IMB Hockney fits and the pingpong kernel's), as a share of their estimate.

The quality columns are written by the runner and the aggregation; results written before them
lack them, and the paragraph then says the checks were not recorded instead of claiming they passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from mpiatlas.models.fit_records import HockneyRecord, Interval
from mpiatlas.models.hockney_trust import CI_REL_TOL, relative_ci_spread
from mpiatlas.stats.aggregate import scalar
from mpiatlas.stats.quality import SERIES_SPLIT_PREFIX, SERIES_SPLIT_SHARE, SLOW_LAUNCH_PREFIX
from mpiatlas.report.formatting import fmt_bytes, fmt_ci, fmt_num

MAX_EXAMPLES = 3  # named examples per sentence; the rest are counted
WIDEST = 3  # intervals named in the widest-intervals sentence


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _values(rows: pl.DataFrame, column: str) -> list[object]:
    """``column``'s values, all None when the table has no such column (tables written before it)."""
    return rows[column].to_list() if column in rows.columns else [None] * rows.height


def _cell_names(rows: pl.DataFrame) -> list[str]:
    return [str(c or "?") for c in _values(rows, "cell")]


def _first_reasons(rows: pl.DataFrame, names: Callable[[pl.DataFrame], list[str]], reason_col: str) -> str:
    """'first: a (why); b (why)' for up to MAX_EXAMPLES rows (``names``: each row's name), '… and N more'
    for the rest."""
    head = rows.head(MAX_EXAMPLES)
    parts = [f"{name} ({why or 'no reason recorded'})" for name, why in zip(names(head), _values(head, reason_col))]
    more = f"; … and {rows.height - MAX_EXAMPLES} more" if rows.height > MAX_EXAMPLES else ""
    return "; ".join(parts) + more


def launches(cells: pl.DataFrame | None) -> list[str]:
    """The launches, one named count per sentence, from the cells table (one row per cell: its final
    launch's ``quality``, and ``remeasured``, the attempts set aside before it, each judged perturbed):

    * judged: every launch, final or set aside;
    * perturbed: the judged ones whose machine took their cpus, set aside or final;
    * re-measured: the cells launched again, and how many attempts were set aside;
    * still perturbed: final launches judged perturbed after every re-measure (and unknown: judged
      without evidence): left out of every median.

    The counts add up (perturbed = set aside + still perturbed), so no two sentences can contradict."""
    if cells is None or cells.height == 0:
        return []
    total = cells.height
    if "quality" not in cells.columns:
        return [f"Launch quality was not recorded for these {_plural(total, 'cell')} (results written "
                "before the perturbation checks), so no launch is known to be clean.", *later_round(cells)]
    judged_cells = cells.filter(pl.col("quality").is_not_null())
    set_aside = (int(scalar(judged_cells.get_column("remeasured").fill_null(0).sum()))
                 if "remeasured" in cells.columns else 0)
    still = judged_cells.filter(pl.col("quality") == "perturbed").sort("cell", nulls_last=True) \
        if "cell" in judged_cells.columns else judged_cells.filter(pl.col("quality") == "perturbed")
    unknown = judged_cells.filter(pl.col("quality") == "unknown")
    judged = judged_cells.height + set_aside
    out = [f"Launches judged: {judged} ({_plural(judged_cells.height, 'final launch', 'final launches')} of "
           f"{_plural(total, 'cell')}, and {set_aside} set aside)."]
    out.append(f"Perturbed: {set_aside + still.height} of the {judged} launches judged"
               + (f" ({set_aside} set aside, {still.height} final)." if set_aside + still.height else "."))
    if set_aside:
        again = cells.filter(pl.col("remeasured").fill_null(0) > 0)
        verb = "was" if set_aside == 1 else "were"
        out.append(f"Re-measured: {_plural(again.height, 'cell')}, whose "
                   f"{_plural(set_aside, 'perturbed launch', 'perturbed launches')} {verb} set aside and launched again.")
    if still.height:
        reason = "quality_reason" if "quality_reason" in still.columns else "quality"
        out.append(f"Still perturbed: {still.height} of the {_plural(judged_cells.height, 'final launch', 'final launches')}, "
                   "left out of every median, fit and finding: "
                   f"{_first_reasons(still, _cell_names, reason)}.")
    else:
        out.append("Still perturbed: none of the final launches.")
    if unknown.height:
        out.append(f"Unknown: {_plural(unknown.height, 'final launch', 'final launches')} judged without evidence "
                   "(no machine record), left out like perturbed ones.")
    return out + later_round(cells)


def later_round(cells: pl.DataFrame) -> list[str]:
    """The later re-measure round (campaign.remeasure_later): the cells whose last launch waited for a
    quiet machine first, how long, and why the wait ended (``quiet_wait_s``, ``quiet_wait``)."""
    if "quiet_wait" not in cells.columns:
        return []
    waited = cells.filter(pl.col("quiet_wait").is_not_null())
    if "cell" in waited.columns:
        waited = waited.sort("cell", nulls_last=True)
    if waited.height == 0:
        return []
    # One wait per pass over a group, shared by the pass's cells: the longest, not a sum over cells.
    longest = scalar(waited.get_column("quiet_wait_s").fill_null(0).max())
    verb = "was" if waited.height == 1 else "were"
    return [f"{_plural(waited.height, 'cell')} still perturbed after the group's own re-measures {verb} launched "
            f"again in the campaign's later round, after a wait for a quiet machine (longest {longest:.1f} s): "
            f"{_first_reasons(waited, _cell_names, 'quiet_wait')}."]


def _point_names(rows: pl.DataFrame) -> list[str]:
    return [f"{series} at {fmt_bytes(size)}" for series, size in zip(_series_names(rows), _values(rows, "bytes"))]


def noisy_points(summary: pl.DataFrame | None) -> list[str]:
    """(series, size) points of the summary left noisy (``quality`` = "noisy"), and the series whose
    launches split into two modes at many sizes (their points stay ok: stats.quality.SERIES_SPLIT_SHARE)."""
    if summary is None or summary.height == 0 or "quality" not in summary.columns:
        return []
    noisy = summary.filter(pl.col("quality").fill_null("ok") != "ok")
    total = summary.height
    keys = [c for c in ("benchmark", "label", "np", "algorithm", "bytes") if c in noisy.columns]
    if noisy.height == 0:
        out = [f"Every one of the {total} (series, size) points is within its noise bound."]
    else:
        noisy = noisy.sort(keys, nulls_last=True)
        reason = "quality_reason" if "quality_reason" in noisy.columns else "quality"
        out = [f"{noisy.height} of {total} (series, size) points stayed noisy: "
               f"{_first_reasons(noisy, _point_names, reason)}."]
    return out + slow_launch_points(summary) + spread_series(summary, [k for k in keys if k != "bytes"])


def slow_launch_points(summary: pl.DataFrame) -> list[str]:
    """One sentence counting the points where a minority of launches was slow at that size only
    (stats.quality.SLOW_LAUNCH_PREFIX): they stay ok, and the reader is told why."""
    if "quality_reason" not in summary.columns:
        return []
    slow = summary.filter(pl.col("quality_reason").fill_null("").str.starts_with(SLOW_LAUNCH_PREFIX)).height
    if slow == 0:
        return []
    return [f"{slow} of {summary.height} (series, size) points had a minority of their launches slow at that "
            "size only (2x or more): not flagged, since the median is the agreeing majority's."]


def spread_series(summary: pl.DataFrame, series: list[str]) -> list[str]:
    """One sentence naming the series whose repetitions split into two modes at SERIES_SPLIT_SHARE of
    their sizes or more: launches that disagree as a whole, said once per series, not per point."""
    if "quality_reason" not in summary.columns or not series:
        return []
    spread = pl.col("quality_reason").fill_null("").str.starts_with(SERIES_SPLIT_PREFIX)
    counts = (summary.group_by(series, maintain_order=True)
              .agg(spread.sum().alias("split"), pl.len().alias("sizes"))
              .filter(pl.col("split") > 0).sort(series, nulls_last=True))
    if counts.height == 0:
        return []
    head = counts.head(MAX_EXAMPLES)
    named = [f"{name} ({split} of {sizes} sizes)"
             for name, split, sizes in zip(_series_names(head), head["split"], head["sizes"])]
    more = f"; … and {counts.height - MAX_EXAMPLES} more" if counts.height > MAX_EXAMPLES else ""
    return [f"{_plural(counts.height, 'series', 'series')} whose launches split into two modes at "
            f"{100 * SERIES_SPLIT_SHARE:.0f} % of their sizes or more (launches that disagree as a whole: not "
            f"flagged point by point; the fits' intervals over launches carry it): {'; '.join(named)}{more}."]


def _series_names(rows: pl.DataFrame) -> list[str]:
    """Each row's series: benchmark, label, np and a forced algorithm."""
    out = []
    for bench, label, np_, alg in zip(*(_values(rows, c) for c in ("benchmark", "label", "np", "algorithm"))):
        ranks = f" np={np_}" if np_ is not None else ""
        forced = f" {alg}" if alg not in (None, "default") else ""
        out.append(f"{bench or '?'} {label or '?'}{ranks}{forced}")
    return out


def _fit_name(f: HockneyRecord) -> str:
    what = "pingpong kernel" if f.benchmark == "pingpong" else f"IMB {f.benchmark}"
    np_ = f" np={f.np}" if f.np is not None and f.benchmark != "pingpong" else ""
    return f"{what} {f.label or '?'}{np_}"


def _intervals(fits: Sequence[HockneyRecord]) -> list[tuple[float, str]]:
    """(spread, text) of every λ and B interval of the fits."""
    out = []
    for f in fits:
        if not f.fitted:
            continue
        for name, est, ci, unit in (("λ", f.latency_us, f.latency_ci_us, "µs"),
                                    ("asymptotic B", *f.bandwidth("asymptotic_bandwidth"), "MB/s"),
                                    ("peak B", *f.bandwidth("peak_bandwidth"), "MB/s")):
            pair = _ci_pair(ci)
            spread = relative_ci_spread(est, pair)
            if spread is None or est is None:  # a spread implies an estimate
                continue
            lo, hi = pair
            pct = f"{_signed(lo, est)} to {_signed(hi, est)}"
            digits = 4 if name.endswith("B") else 3
            out.append((spread, f"{name} of {_fit_name(f)}: {fmt_num(est, digits)} {unit} "
                                f"{fmt_ci(ci, digits, unbounded='∞')} ({pct})"))
    return out


def _ci_pair(ci: Interval) -> tuple[float | None, float | None]:
    """A stored [lo, hi] with null meaning unbounded above (a bandwidth) or unknown."""
    lo, hi = ci
    return (float(lo) if lo is not None else None, float(hi) if hi is not None else float("inf"))


def _signed(bound: float | None, estimate: float) -> str:
    """The bound as a signed share of the estimate: "−3 %", "+969 %", "+∞ %" ("?" unknown)."""
    if bound is None:
        return "?"
    x = bound / estimate - 1.0
    return "+∞ %" if x == float("inf") else f"{x:+.0%}".replace("%", " %").replace("-", "−")


def fit_intervals(fits: Sequence[HockneyRecord] | None) -> list[str]:
    """How many fits carry a warning, and the widest intervals of λ and B."""
    fits = [f for f in fits or [] if f.fitted]
    if not fits:
        return []
    out = []
    warned = [f for f in fits if f.ci_warning]
    if warned:
        out.append(f"{len(warned)} of {_plural(len(fits), 'fit')} carry a warning (see Model parameters): "
                   f"{', '.join(_fit_name(f) for f in warned[:MAX_EXAMPLES])}"
                   f"{f', … and {len(warned) - MAX_EXAMPLES} more' if len(warned) > MAX_EXAMPLES else ''}.")
    else:
        out.append(f"None of the {_plural(len(fits), 'fit')} carries a warning.")
    widest = sorted(_intervals(fits), key=lambda p: -p[0])[:WIDEST]
    if widest:
        beyond = sum(1 for spread, _ in _intervals(fits) if spread > CI_REL_TOL)
        out.append(f"Widest 95 % intervals ({beyond} beyond ±{100 * CI_REL_TOL:.0f} % of their estimate): "
                   + "; ".join(text for _, text in widest) + ".")
    return out


def trust(cells: pl.DataFrame | None, summary: pl.DataFrame | None,
          fits: Sequence[HockneyRecord] | None) -> list[str]:
    """The trust paragraph's sentences (module docstring order); empty when there is nothing to judge.

    ``fits``: the IMB Hockney fits (hockney.json) and the pingpong kernel's (kernels.json).
    """
    return launches(cells) + noisy_points(summary) + fit_intervals(fits)
