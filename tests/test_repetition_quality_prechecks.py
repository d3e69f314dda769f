"""repetition_quality's vectorised pre-checks skip only groups the per-group rules judge ok without
a reason: its output equals the rules applied to every group, on groups built to sit at the limits."""

from __future__ import annotations

import numpy as np

from mpiatlas.stats.quality import (
    CI_HALFWIDTH,
    MODE_RATIO,
    NOISY,
    OK,
    RESOLUTION_US,
    SERIES_SPLIT_MIN,
    SERIES_SPLIT_SHARE,
    ci_reason,
    majority_halfwidth,
    repetition_quality,
    series_split_reason,
    split_reason,
)


def _series_shares(splits, lengths, series):  # type: ignore[no-untyped-def]
    """Per group, (split sizes, judged sizes) of its series where it splits at the share, counted one by one."""
    judged: dict[int, int] = {}
    split: dict[int, int] = {}
    for sid, n, reason in zip(series.tolist(), lengths.tolist(), splits):
        if n >= 2:
            judged[sid] = judged.get(sid, 0) + 1
            split[sid] = split.get(sid, 0) + (reason is not None)
    common = {sid: (split[sid], judged[sid]) for sid in judged
              if split[sid] >= SERIES_SPLIT_MIN and split[sid] >= SERIES_SPLIT_SHARE * judged[sid]}
    return [common.get(sid) for sid in series.tolist()]


def _every_group(flat, lengths, median, low, high, typical, series):  # type: ignore[no-untyped-def]
    """The rules applied group by group, nothing skipped (repetition_quality before the pre-checks)."""
    offsets = np.cumsum(lengths) - lengths
    splits = [split_reason(flat[o:o + n]) if n >= 2 else None for o, n in zip(offsets, lengths)]
    shared = _series_shares(splits, lengths, series)
    quality, reasons = [], []
    for o, n, m, lo, hi, ty, split, share in zip(offsets, lengths, median, low, high, typical, splits, shared):
        if n < 2:
            quality.append(None)
            reasons.append(None)
        elif split is not None and share is not None:
            quality.append(OK)
            reasons.append(series_split_reason(split, share))
        else:
            reason = split or ci_reason(m, lo, hi, ty, majority_halfwidth(flat[o:o + n], m))
            quality.append(NOISY if reason else OK)
            reasons.append(reason)
    return quality, reasons


def test_prechecks_change_no_judgement() -> None:
    rng = np.random.default_rng(7)
    groups = 4000
    lengths = rng.integers(0, 9, groups)
    flat_parts, median, low, high = [], [], [], []
    for n in lengths:
        base = float(rng.choice([0.0, 0.2, 1.0, 50.0]))
        # Two modes exactly at, just under and beyond MODE_RATIO, or one tight mode.
        spread = float(rng.choice([1.0, MODE_RATIO, MODE_RATIO * (1 - 1e-12), 3.0, 1.1]))
        values = np.sort(base * np.where(rng.random(n) < 0.5, 1.0, spread) * rng.uniform(1, 1.02, n))
        flat_parts.append(values)
        m = float(np.median(values)) if n else float("nan")
        # CI half-widths exactly at the limit, just inside, just outside, and far out.
        limit = CI_HALFWIDTH + (RESOLUTION_US / m if m > 0 else 0.0)
        half = limit * float(rng.choice([1.0, 1 - 1e-15, 1 + 1e-15, 0.5, 3.0]))
        median.append(m)
        low.append(m - half * m)
        high.append(m + half * m * float(rng.choice([1.0, 0.5])))
    flat = np.concatenate(flat_parts)
    typical = np.where(rng.random(groups) < 0.3, 0.2, np.nan)
    series = rng.integers(0, 40, groups)
    args = (flat, lengths, np.array(median), np.array(low), np.array(high), typical, series)
    fast = repetition_quality(*args)
    assert fast == _every_group(*args)
    assert fast[0].count(NOISY) > 10 and fast[0].count(OK) > 100  # both verdicts were exercised
    assert any(r is not None and r.startswith("series spread:") for r in fast[1])
