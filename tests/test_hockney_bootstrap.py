"""The Hockney bootstrap solves all replicates in one stacked call (models.hockney._fit_lines):
the numbers must be exactly those of fitting each replicate on its own with _fit_line."""

from __future__ import annotations

import numpy as np
import pytest

from mpiatlas.models.hockney import (N_BOOT, _bootstrap_times, _fit_line, _fit_lines, _fit_segments, _replicate_params,
                                     fit_hockney)

SIZES = np.array([2.0**k for k in range(23)])


def replicates(seed: int, n_sizes: int, rows: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Sizes and ``rows`` replicate time rows; some rows with negative truths, so that their
    optimum lies on a bound (λ = floor or g = 0): _fit_line's boundary path."""
    rng = np.random.default_rng(seed)
    s = np.sort(rng.choice(SIZES, size=n_sizes, replace=False))
    lam = rng.uniform(-5.0, 5.0, size=(rows, 1))
    g = rng.uniform(-1e-3, 1e-3, size=(rows, 1))
    t = np.abs(lam + g * s) + rng.uniform(0.1, 3.0, size=(rows, n_sizes))
    return s, t


@pytest.mark.parametrize("seed", range(8))
def test_stacked_fits_equal_one_by_one_fits_exactly(seed: int) -> None:
    s, t = replicates(seed, n_sizes=3 + seed)
    lams, gs = _fit_lines(s, t)
    one_by_one = [_fit_line(s, row) for row in t]
    assert lams.tolist() == [lam for lam, _, _ in one_by_one]
    assert gs.tolist() == [g for _, g, _ in one_by_one]
    # Both paths were exercised: interior optima and optima on a bound.
    on_bound = sum(1 for lam, g, _ in one_by_one if g == 0.0 or lam <= 1e-6)
    assert 0 < on_bound < len(t)


def reference_bootstrap(s: np.ndarray, samples: list[np.ndarray], starts: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap as first written (repetition resampling): every segment of every replicate
    fitted one at a time."""
    rng = np.random.default_rng(seed)
    t_star = np.column_stack([np.median(rng.choice(x, size=(N_BOOT, len(x))), axis=1) for x in samples])
    lams, gs = np.empty(N_BOOT), np.empty(N_BOOT)
    for b in range(N_BOOT):
        boot = _fit_segments(s, t_star[b], starts)
        lams[b], gs[b] = boot[0][0], boot[-1][1]
    return lams, gs


@pytest.mark.parametrize("starts", [[0], [0, 5], [0, 4, 9]])
def test_bootstrap_equals_fitting_every_segment_of_every_replicate(starts: list[int]) -> None:
    rng = np.random.default_rng(len(starts))
    s = SIZES[:14]
    truth = 1.0 + s / 5000.0
    samples = [v * (1 + 0.03 * rng.standard_normal(5)) for v in truth]
    t_med = np.array([np.median(x) for x in samples])
    params = _fit_segments(s, t_med, starts)
    t_star, method = _bootstrap_times(s, t_med, samples, starts, params, np.random.default_rng(7))
    lams = _replicate_params(s, t_star, starts)
    ref_lams, _ = reference_bootstrap(s, samples, starts, 7)
    assert method == "repetitions"
    assert lams.tolist() == ref_lams.tolist()


def test_fit_is_reproducible_with_its_seed() -> None:
    t = (1.5 + SIZES / 8000.0) * (1 + 0.03 * np.random.default_rng(3).standard_normal(SIZES.size))
    a, b = fit_hockney(SIZES, t, seed=11).to_dict(), fit_hockney(SIZES, t, seed=11).to_dict()
    assert a == b
    assert a["latency_ci_us"][0] <= a["latency_us"] <= a["latency_ci_us"][1]
