"""models/perturbed_runs.py on small hand-made launches (the threshold's data: tests/test_measured_vs_predicted.py)."""

from __future__ import annotations

import polars as pl
import pytest

from mpiatlas.models.perturbed_runs import SPREAD, launch_spread, perturbed_launches


def _samples() -> pl.DataFrame:
    rows = [
        # np 4: healthy, 1..16 B within 1.2x; 4096 B is not latency-bound and does not count
        *[("chain", 4, b, t) for b, t in ((1, 1.0), (2, 1.1), (4, 1.2), (8, 1.0), (16, 1.1), (4096, 9.0))],
        # np 8: an episode hit 4 and 8 B
        *[("chain", 8, b, t) for b, t in ((1, 2.0), (2, 2.1), (4, 50.0), (8, 40.0), (16, 2.0))],
        # np 6: 4 B measured twice (a re-run appended): its median counts
        *[("chain", 6, b, t) for b, t in ((1, 1.5), (2, 1.5), (4, 1.4), (4, 4.0), (8, 1.5))],
        # a size of 0 B or a time of 0 is ignored
        *[("binary_tree", 4, b, t) for b, t in ((0, 9.0), (1, 1.0), (4, 0.0), (8, 1.9))],
    ]
    return pl.DataFrame(rows, schema=["algorithm", "np", "bytes", "t_usec"], orient="row")


def test_spread_is_over_the_latency_bound_sizes() -> None:
    spread = {(a, n): s for a, n, s in launch_spread(_samples(), ["algorithm", "np"]).iter_rows()}
    assert spread[("chain", 4)] == pytest.approx(1.2)
    assert spread[("chain", 8)] == pytest.approx(25.0)
    assert spread[("chain", 6)] == pytest.approx(2.7 / 1.5)
    assert spread[("binary_tree", 4)] == pytest.approx(1.9)


def test_only_the_disturbed_launch_is_flagged() -> None:
    flags = perturbed_launches(_samples(), ["algorithm", "np"])
    assert flags.filter(pl.col("perturbed")).select("algorithm", "np").rows() == [("chain", 8)]
    tighter = perturbed_launches(_samples(), ["algorithm", "np"], spread=1.5)
    assert set(tighter.filter(pl.col("perturbed")).select("algorithm", "np").rows()) == {
        ("chain", 8), ("chain", 6), ("binary_tree", 4)}
    assert SPREAD == 2.0


def test_missing_columns_are_named() -> None:
    with pytest.raises(ValueError, match="mapping"):
        launch_spread(_samples(), ["mapping", "np"])
