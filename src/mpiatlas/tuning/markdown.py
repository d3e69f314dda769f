"""tuning.md: every choice with its gain and CI, and what stayed default and why."""

from __future__ import annotations

from collections import Counter

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning.decide import Decision, Point, SeriesDecision, SizeRange
from mpiatlas.tuning.validation import UNTUNED_TOLERANCE, CellCheck, UntunedCheck


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _range_line(r: SizeRange, p_lo: int, p_hi: int) -> str:
    gains = [p.gain for p in r.points if p.gain is not None]
    lows = [1 - p.ci_high for p in r.points if p.ci_high is not None]
    highs = [1 - p.ci_low for p in r.points if p.ci_low is not None]
    gain = f"{min(gains):.1%}–{max(gains):.1%}" if gains else "–"
    ci = f"[{min(lows):.1%}, {max(highs):.1%}]" if lows else "–"
    return (f"| {_size(r.lo)}–{_size(r.hi)} | {p_lo}–{p_hi} | {r.algorithm} | {gain} | {ci} | "
            f"{len(r.points)} |")


def _why_default(p: Point) -> str:
    """The kind of reason a point kept the default (the per-point figures are in decision.json)."""
    if p.candidate == DEFAULT:
        return "the default is the fastest by median"
    if "too few" in p.reason:
        return "too few repetitions"
    if "does not lie below 1" in p.reason:
        return "the CI of the ratio reaches 1"
    return "gain below the minimum"


def _series(s: SeriesDecision, files: dict[tuple[str, str], list[str]]) -> list[str]:
    lines = [f"### {s.stack} ({s.kind} {s.version}) · {s.transport} · {s.benchmark}", ""]
    chosen = [(b, r) for b in s.blocks for r in b.ranges if r.algorithm != DEFAULT]
    if chosen:
        lines += ["| sizes | P | algorithm | gain (per size) | 95 % CI of the gain | sizes measured |",
                  "|---|---|---|---|---|---|"]
        lines += [_range_line(r, b.p_lo, b.p_hi) for b, r in chosen]
        lines.append("")
    else:
        lines += ["No algorithm beats the default significantly: the default stays everywhere.", ""]
    kept = Counter(_why_default(p) for p in s.points if p.algorithm == DEFAULT)
    if kept:
        lines.append("Default kept at " + "; ".join(f"{n} point(s): {why}" for why, n in kept.most_common()) + ".")
        lines.append("")
    names = files.get((s.stack, s.transport))
    if names and s.tuned:
        lines += [f"Exported in: {', '.join(f'`{n}`' for n in names)}", ""]
    return lines


def tuning_markdown(decision: Decision, files: dict[tuple[str, str], list[str]],
                    usage: dict[tuple[str, str], str]) -> str:
    """The whole tuning.md; ``files``/``usage``: per (stack, transport) the files written and how to load them."""
    lines = ["# Collective tuning", "",
             f"From `{decision.source}`. A non-default algorithm is chosen for a (P, size) only where its 95 % "
             "bootstrap CI of t_algorithm / t_default lies below 1 (at least 5 repetitions per side) and the median "
             f"gain 1 − t_algorithm / t_default is at least {decision.min_gain:.0%}; elsewhere the default stays. "
             "The candidate is the fastest algorithm by median (the report's criterion). A measured size stands "
             "for the sizes up to the next measured one.", ""]
    for (stack, transport), how in sorted(usage.items()):
        lines += [f"- **{stack} · {transport}**: {how}"]
    if usage:
        lines.append("")
    for s in decision.series:
        lines += _series(s, files)
    return "\n".join(lines).rstrip() + "\n"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _untuned_lines(untuned: list[UntunedCheck]) -> list[str]:
    if not untuned:
        return []
    passed = sum(c.passed for c in untuned)
    lines = ["", f"Untuned sizes (the file must leave them to the library): {passed} of {len(untuned)} sampled sizes "
             f"pass. A size fails when the file is significantly slower than the default, the 95 % CI of "
             f"t_file / t_default lies wholly above {1 + UNTUNED_TOLERANCE:.2f}, or has too few repetitions.", "",
             "| stack | transport | collective | P | size | t_file / t_default [CI] | result |",
             "|---|---|---|---|---|---|---|"]
    for c in untuned:
        ratio = "–" if c.ratio is None else f"{c.ratio:.3f} [{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]"
        lines.append(f"| {c.stack} | {c.transport} | {c.collective} | {c.np} | {_size(c.bytes)} | {ratio} | "
                     f"{'pass' if c.passed else 'FAIL: ' + c.reason} |")
    return lines


def validation_markdown(checks: list[CellCheck], evidence: dict[str, str], campaign: str | None,
                        untuned: list[UntunedCheck] | None = None) -> str:
    """validation.md: per tuned cell, the file against the forced winner and the default; then the
    sampled untuned sizes, the file against the default."""
    if not checks:
        return "# Tuning validation\n\nNothing to validate: every series keeps the default.\n"
    passed = sum(c.passed for c in checks)
    lines = ["# Tuning validation", "",
             f"Validation campaign `{campaign}`: {passed} of {len(checks)} tuned cells pass. A cell passes when the "
             "exported file's time matches the forced winner's (95 % CI of t_file / t_winner contains 1) and beats "
             "the default (95 % CI of t_file / t_default below 1).", "",
             "| stack | transport | collective | P | size | algorithm | claimed gain | validated gain [CI] | "
             "t_file / t_winner [CI] | result |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        match = "–" if c.match_ratio is None else f"{c.match_ratio:.3f} [{c.match_ci[0]:.3f}, {c.match_ci[1]:.3f}]"
        gain = _pct(c.gain) + ("" if c.gain_ci[0] is None else f" [{_pct(c.gain_ci[0])}, {_pct(c.gain_ci[1])}]")
        lines.append(f"| {c.stack} | {c.transport} | {c.collective} | {c.np} | {_size(c.bytes)} | {c.algorithm} | "
                     f"{_pct(c.claimed_gain)} | {gain} | {match} | {'pass' if c.passed else 'FAIL: ' + c.reason} |")
    lines += _untuned_lines(untuned or [])
    if evidence:
        lines += ["", "What each stack said about the file:", ""]
        lines += [f"- {key}: {text}" for key, text in sorted(evidence.items())]
    return "\n".join(lines) + "\n"
