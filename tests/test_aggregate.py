"""summarize: median, min, CV and the bootstrap CI of the median per cell x size, all groups at once."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import polars as pl
import pytest
from scipy import stats

from mpiatlas.stats.aggregate import CONFIDENCE, N_RESAMPLES, SEED, median_ci, median_cis, summarize


def _samples(groups: dict[tuple[str, int], list[float | None]], **extra: list[object]) -> pl.DataFrame:
    """Imported-style samples: one row per repetition of (label, bytes)."""
    rows = [(label, size, t) for (label, size), ts in groups.items() for t in ts]
    df = pl.DataFrame(
        {
            "label": [r[0] for r in rows],
            "benchmark": ["PingPong"] * len(rows),
            "processes": pl.Series([2] * len(rows), dtype=pl.Int32),
            "bytes": pl.Series([r[1] for r in rows], dtype=pl.Int64),
            "t_usec": pl.Series([r[2] for r in rows], dtype=pl.Float64),
            "bandwidth_MBps": pl.Series([None if r[2] is None else r[1] / r[2] for r in rows], dtype=pl.Float64),
            "status": ["ok" if r[2] is not None else "time-out" for r in rows],
        }
    )
    return df.with_columns(pl.Series(k, v) for k, v in extra.items())


def _row(summary: pl.DataFrame, label: str, size: int) -> dict[str, object]:
    rows = summary.filter((pl.col("label") == label) & (pl.col("bytes") == size)).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def _scipy_median_ci(values: np.ndarray) -> tuple[float, float]:
    """The implementation summarize had before it was vectorised: one scipy bootstrap per group."""
    res = stats.bootstrap((values,), np.median, confidence_level=CONFIDENCE, n_resamples=N_RESAMPLES,
                          method="percentile", random_state=np.random.default_rng(SEED))  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def test_hand_made_medians_min_and_cv() -> None:
    summary = summarize(_samples({("a", 8): [3.0, 1.0, 2.0], ("a", 16): [10.0, 40.0, 20.0, 30.0], ("b", 8): [5.0, 5.0]}))
    a8, a16, b8 = _row(summary, "a", 8), _row(summary, "a", 16), _row(summary, "b", 8)
    assert (a8["n_reps"], a8["t_median_usec"], a8["t_min_usec"]) == (3, 2.0, 1.0)
    assert a8["t_cv"] == pytest.approx(0.5)  # sample std 1 / mean 2
    assert (a16["n_reps"], a16["t_median_usec"], a16["t_min_usec"]) == (4, 25.0, 10.0)
    assert a16["t_cv"] == pytest.approx(math.sqrt(500 / 3) / 25)
    assert a16["bw_median_MBps"] == pytest.approx(np.median([16 / 10, 16 / 20, 16 / 30, 16 / 40]))
    # All repetitions equal: no spread, the CI is the value itself.
    assert (b8["t_median_usec"], b8["t_cv"], b8["t_ci_low_usec"], b8["t_ci_high_usec"]) == (5.0, 0.0, 5.0, 5.0)
    assert summary["label"].to_list() == ["a", "a", "b"] and summary["bytes"].to_list() == [8, 16, 8]


def test_ci_contains_the_median_and_stays_within_the_data() -> None:
    rng = np.random.default_rng(7)
    groups = {("x", 2**k): list(rng.lognormal(1 + k / 4, 0.15, size=9 + k)) for k in range(12)}
    summary = summarize(_samples(groups))
    for (label, size), values in groups.items():
        row = _row(summary, label, size)
        assert row["t_median_usec"] == pytest.approx(np.median(values))
        assert row["t_ci_low_usec"] <= row["t_median_usec"] <= row["t_ci_high_usec"]
        assert min(values) <= row["t_ci_low_usec"] < row["t_ci_high_usec"] <= max(values)


def test_single_repetition_gives_nan_ci() -> None:
    row = _row(summarize(_samples({("one", 4): [1.5]})), "one", 4)
    assert (row["n_reps"], row["t_median_usec"], row["t_min_usec"]) == (1, 1.5, 1.5)
    assert math.isnan(row["t_ci_low_usec"]) and math.isnan(row["t_ci_high_usec"])
    assert median_ci(np.array([1.5])) == pytest.approx((math.nan, math.nan), nan_ok=True)


def test_invalid_cells_and_failure_rows_are_excluded() -> None:
    samples = _samples(
        {("c", 8): [1.0, 2.0, 3.0, 100.0, None], ("d", 8): [7.0, 8.0]},
        cell_status=["ok", "ok", "ok", "invalid", "ok", "failed", "failed"],
    )
    summary = summarize(samples)
    c8 = _row(summary, "c", 8)
    # The invalid cell's 100 and IMB's time-out row (no timing) never enter the statistics.
    assert (c8["n_reps"], c8["t_median_usec"], c8["t_min_usec"]) == (3, 2.0, 1.0)
    assert c8["t_ci_high_usec"] <= 3.0
    assert summary.filter(pl.col("label") == "d").height == 0  # a cell with no ok row has no summary


def test_empty_samples_give_an_empty_summary() -> None:
    assert summarize(_samples({})).height == 0


def test_samples_of_invalid_cells_only_give_an_empty_summary_with_its_columns() -> None:
    """A campaign whose every cell was invalid (a mispinned two-node cell) still gets its summary
    table, with no rows: once a crash of the aggregate rule."""
    summary = summarize(_samples({("c", 8): [1.0, 2.0]}, cell_status=["invalid", "invalid"]))
    assert summary.height == 0
    assert {"n_reps", "t_median_usec", "t_min_usec", "t_ci_low_usec", "t_ci_high_usec"} <= set(summary.columns)
    assert summary.schema["t_median_usec"] == pl.Float64 and summary.schema["t_min_usec"] == pl.Float64


def test_ci_does_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(3)
    samples = _samples({("p", 64): list(rng.normal(10, 1, 20)), ("p", 128): list(rng.normal(20, 2, 15))})
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=1)
    ci = ["t_ci_low_usec", "t_ci_high_usec"]
    assert summarize(samples).select(ci).equals(summarize(shuffled).select(ci))


def test_vectorised_bootstrap_equals_its_definition() -> None:
    """The order-statistic shortcut is exact: np.quantile over the 999 medians of the resamples."""
    rng = np.random.default_rng(11)
    alpha = (1 - CONFIDENCE) / 2
    for n in (2, 3, 4, 7, 10, 25, 40):
        values = np.sort(np.round(rng.normal(50, 5, size=(40, n)), 1), axis=1)  # rounded: ties too
        draws = np.random.default_rng(SEED).integers(0, n, (N_RESAMPLES, n))
        medians = np.median(np.take(values, draws, axis=1), axis=2)  # (groups, resamples)
        expected = np.quantile(medians, [alpha, 1 - alpha], axis=1)
        low, high = median_cis(list(values))
        spread = values[:, 0] != values[:, -1]
        np.testing.assert_array_equal(low[spread], expected[0][spread])
        np.testing.assert_array_equal(high[spread], expected[1][spread])


def test_agrees_with_scipy_bootstrap_within_bootstrap_noise() -> None:
    """Same method (percentile bootstrap, 999 seeded resamples) as one scipy call per group.

    Both are Monte-Carlo estimates of the same interval: the ends differ by resampling noise,
    which is a jump to a neighbouring order statistic at worst. Tolerance: every end within
    1.5 CI widths, the mean difference within 0.1 CI width, and against a 50 000-resample
    reference the vectorised ends are on average no further off than scipy's (x1.25).
    """
    rng = np.random.default_rng(2024)
    groups = [rng.lognormal(3, 0.2, size=int(n)) for n in rng.integers(5, 41, 150)]
    reference = np.array([_scipy_median_ci(g) for g in groups])
    low, high = median_cis(groups)
    width = reference[:, 1] - reference[:, 0]
    diff = np.abs(np.column_stack([low, high]) - reference) / width[:, None]
    assert diff.max() <= 1.5
    assert diff.mean() <= 0.1

    def precise(values: np.ndarray) -> np.ndarray:
        draws = np.random.default_rng(99).integers(0, len(values), (50_000, len(values)))
        return np.quantile(np.median(values[draws], axis=1), [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])

    truth = np.array([precise(g) for g in groups[:60]])
    ours = np.abs(np.column_stack([low, high])[:60] - truth).mean()
    theirs = np.abs(reference[:60] - truth).mean()
    assert ours <= 1.25 * theirs


def test_median_ci_is_seeded_and_ignores_non_finite_values() -> None:
    values = np.array([4.0, 1.0, np.nan, 3.0, 2.0, np.inf, 5.0])
    first = median_ci(values)
    assert first == median_ci(values) == median_ci(values[np.isfinite(values)])
    assert first[0] <= 3.0 <= first[1]


def test_aggregate_does_not_import_scipy() -> None:
    code = "import sys, mpiatlas.stats.aggregate; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("odd_value", [None, math.inf])
def test_median_and_min_are_polars_own_to_the_last_bit(odd_value: float | None) -> None:
    """Read off the sorted timings (all finite) or computed by polars (an infinite timing): the
    same numbers as polars' group median (lo + (hi - lo) * 0.5, not (lo + hi) / 2) and min."""
    rng = np.random.default_rng(3)
    groups = {(f"c{i}", 8): list(rng.lognormal(0.0, 3.0, size=int(rng.integers(1, 9)))) for i in range(300)}
    if odd_value is not None:
        groups[("c0", 8)].append(odd_value)
    samples = _samples(groups)
    summary = summarize(samples)
    t = pl.col("t_usec")
    expected = samples.group_by("label").agg(t.median().alias("median"), t.min().alias("min"))
    both = summary.join(expected, on="label")
    assert both.height == 300
    assert (both["t_median_usec"] == both["median"]).all() and (both["t_min_usec"] == both["min"]).all()
    assert both.filter(pl.col("n_reps") % 2 == 0).height > 100  # even groups: the interpolated medians
