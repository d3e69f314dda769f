"""The compact summary of a comparison: what got faster or slower, where, by how much.

Plain sentences (no markup): ``mpiatlas compare`` prints them and the diff report lists them.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from mpiatlas.compare.campaigns import ONE_RUN_NOTE, Comparison, KernelComparison
from mpiatlas.stats.ratios import FASTER, MIN_REPS, MIN_RUNS, SAME, SLOWER, TOO_FEW, TOO_FEW_RUNS, regressions
from mpiatlas.report.formatting import fmt_bytes


def series_name(row: dict[str, Any], series: list[str]) -> str:
    """``PingPong · intelmpi · core · np=2``: a series' key values, numbers named by their axis."""
    parts = []
    for k in sorted(series, key=lambda k: k != "benchmark"):  # the benchmark first, then the axes in order
        v = row.get(k)
        if v is not None and v != "":  # "" is an unset axis (no IMB options, no knob set)
            parts.append(f"{k}={v}" if isinstance(v, int) else str(v))
    return " · ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _ratio(x: float) -> str:
    """A ratio for reading: ``1.23``, ``382``, ``1,910``, ``0.00029`` (no exponent notation)."""
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x >= 1e-3 else f"{x:.1e}"


def _direction_lines(sizes: pl.DataFrame, series: list[str], verdict: str, limit: int, noun: str = "size") -> list[str]:
    """Per series with ``verdict`` sizes: how many, the median ratio and the extreme one (where)."""
    hit = sizes.filter(pl.col("verdict") == verdict)
    if hit.height == 0:
        return []
    worst = pl.col("ratio").max() if verdict == SLOWER else pl.col("ratio").min()
    per = (hit.group_by(series, maintain_order=True)
           .agg(pl.len().alias("n"), pl.col("ratio").median().alias("mid"), worst.alias("extreme"),
                pl.col("bytes").sort_by(pl.col("ratio")).last().alias("at_max"),
                pl.col("bytes").sort_by(pl.col("ratio")).first().alias("at_min"))
           .join(sizes.group_by(series).agg(pl.len().alias("of")), on=series, nulls_equal=True))
    per = per.sort("extreme", descending=verdict == SLOWER)
    lines = []
    for row in per.head(limit).to_dicts():
        at = row["at_max"] if verdict == SLOWER else row["at_min"]
        lines.append(f"{verdict} in B: {series_name(row, series)}: {row['n']} of {_count(row['of'], noun)}, median "
                     f"×{_ratio(row['mid'])}, {'up to' if verdict == SLOWER else 'down to'} ×{_ratio(row['extreme'])} "
                     + (f"at {fmt_bytes(at)}" if at is not None else "per point (no message size)"))
    if per.height > limit:
        lines.append(f"… and {per.height - limit} more series {verdict} (see the report's table)")
    return lines


def method_line(cmp: Comparison) -> str:
    """How the CI was made, and whether run-to-run variation is in it."""
    if cmp.two_level:
        return (f"{cmp.a.runs} runs (A) and {cmp.b.runs} runs (B): the CI resamples runs, then repetitions within "
                "each (two-level bootstrap, widened for few runs), so run-to-run variation is in it")
    runs = f" (A: {cmp.a.runs} runs, B: {cmp.b.runs}; repetitions pooled)" if max(cmp.a.runs, cmp.b.runs) > 1 else ""
    return ONE_RUN_NOTE + runs


def summary_lines(cmp: Comparison, threshold: float | None = None, *, limit: int = 8) -> list[str]:
    """The compact summary: what got faster or slower, where, by how much; fits; one-side-only."""
    s, series = cmp.sizes, cmp.series_keys
    counts = {v: s.filter(pl.col("verdict") == v).height for v in (SLOWER, FASTER, SAME, TOO_FEW, TOO_FEW_RUNS)}
    n_series = s.select(series).unique().height if s.height else 0
    lines = [f"matched {_count(s.height, 'size')} in {n_series} series on {', '.join(cmp.matching.keys)}"
             if s.height or not cmp.kernels else "no IMB samples on both sides: kernels only"]
    for axis, (va, vb) in cmp.matching.settings.items():
        lines.append(f"compared setting: {axis} {va} (A) → {vb} (B)")
    if cmp.matching.ignored:
        lines.append(f"ignored axes: {', '.join(cmp.matching.ignored)}")
    if s.height or not cmp.kernels:
        lines.append(f"{_count(counts[SLOWER], 'size')} significantly slower in B, {counts[FASTER]} faster, {counts[SAME]} "
                     "without significant change (95 % bootstrap CI of the ratio of medians)")
    lines.append(method_line(cmp))
    if counts[TOO_FEW_RUNS]:
        lines.append(f"{_count(counts[TOO_FEW_RUNS], 'size')} not judged: measured in fewer than {MIN_RUNS} runs on a side")
    if counts[TOO_FEW]:
        lines.append(f"{_count(counts[TOO_FEW], 'size')} not judged: fewer than {MIN_REPS} repetitions on a side "
                     f"(their CIs are listed, but cannot support a 95 % statement)")
    lines += _direction_lines(s, series, SLOWER, limit) + _direction_lines(s, series, FASTER, limit)
    if cmp.a.runs > 1 or cmp.b.runs > 1:
        lines.append("model parameters (λ, B, α-β): each side's mean over its runs' fits, the difference by Welch's "
                     "t interval (judged with at least 2 runs per side)")
    for row in cmp.fits.filter(pl.col("significant")).to_dicts():
        lines.append(f"{row['model']} {row['parameter']} {row['series']}: {row['a']:.4g} → {row['b']:.4g} "
                     f"{row['unit']} ({row['rel_diff']:+.1%}, {row['direction']})".replace(" )", ")"))
    for side, only in (("A", cmp.only_a), ("B", cmp.only_b)):
        if only.height:
            other = "B" if side == "A" else "A"
            names = [series_name(r, series) + (f" (in {other}: {r['other_status']})" if r["other_status"] else "")
                     for r in only.to_dicts()]
            more = f" … and {len(names) - limit} more" if len(names) > limit else ""
            lines.append(f"{only.height} series only in {side}: {'; '.join(names[:limit])}{more}")
    for side, lone in (("A", cmp.lone_a), ("B", cmp.lone_b)):
        if lone.height:
            where = lone.group_by(series, maintain_order=True).agg(pl.col("bytes"))
            names = [f"{series_name(r, series)} ({', '.join(fmt_bytes(m) for m in r['bytes'])})"
                     for r in where.head(limit).to_dicts()]
            more = f" … and {where.height - limit} more series" if where.height > limit else ""
            lines.append(f"{_count(lone.height, 'size')} of matched series only in {side}: {'; '.join(names)}{more}")
    for kc in cmp.kernels:
        lines += kernel_lines(kc, limit)
    if threshold is not None:
        reg = regressions(cmp.all_sizes(), threshold)
        lines.append(f"regressions beyond {threshold:.1%} (CI's lower end above ×{1 + threshold:.3g}): {_count(reg.height, 'size')}")
    return lines


def kernel_lines(kc: KernelComparison, limit: int = 8) -> list[str]:
    """One kernel's part of the summary: what was matched, the verdicts, the series that moved."""
    s, series = kc.sizes, kc.series_keys
    counts = {v: s.filter(pl.col("verdict") == v).height for v in (SLOWER, FASTER, SAME)}
    unit = "size" if s.height and s.get_column("bytes").null_count() < s.height else "point"
    lines = [f"kernel {kc.kernel}: matched {_count(s.height, unit)} in {s.select(series).unique().height if s.height else 0} "
             f"series on {', '.join(kc.matching.keys)}; {counts[SLOWER]} significantly slower in B, {counts[FASTER]} "
             f"faster, {counts[SAME]} without significant change"]
    lines += [f"kernel {kc.kernel}: compared setting: {axis} {va} (A) → {vb} (B)"
              for axis, (va, vb) in kc.matching.settings.items()]
    not_judged = s.height - sum(counts.values())
    if not_judged:
        lines.append(f"kernel {kc.kernel}: {_count(not_judged, unit)} not judged (too few repetitions or runs on a side)")
    lines += [f"kernel {kc.kernel}: {line}" for line in
              _direction_lines(s, series, SLOWER, limit, unit) + _direction_lines(s, series, FASTER, limit, unit)]
    for side, only in (("A", kc.only_a), ("B", kc.only_b)):
        if only.height:
            names = [series_name(r, series) for r in only.head(limit).to_dicts()]
            more = f" … and {only.height - limit} more" if only.height > limit else ""
            lines.append(f"kernel {kc.kernel}: {only.height} series only in {side}: {'; '.join(names)}{more}")
    return lines
