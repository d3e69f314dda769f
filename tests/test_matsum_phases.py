"""The matrix sum's per-rank phase table (issue #34, part 5): every rank's scatter, compute and gather
time per P, from a recorded Open MPI run of the matsum kernel (tests/data/kernels)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from mpiatlas.models.kernels import fit_matsum
from mpiatlas.parsers.kernels import parse_kernel_file

DATA = Path(__file__).parent / "data" / "kernels"
HEAD = {"label": "openmpi/ob1-vader/core", "stack": "openmpi", "transport": "ob1-vader", "mapping": "core",
        "cell_status": "ok", "rep": 0, "oversubscribed": True, "np": 4}


def test_each_rank_phases_of_a_recorded_run() -> None:
    frame = parse_kernel_file(DATA / "matsum_openmpi_np4.txt")["matsum"]
    frame = frame.with_columns(*(pl.lit(v).alias(k) for k, v in HEAD.items()),
                               pl.format("kernel/openmpi/ob1-vader/core/np4/matsum/t{}-{}/rep0", "topo", "dist")
                               .alias("cell"), pl.format("t{}-{}", "topo", "dist").alias("variant_group"))
    fits = {(f.topo, f.dist): f for f in fit_matsum(frame)}
    slab = fits[(1, "slab")]
    # One P: no Amdahl fit, but the per-rank phases are there.
    assert slab.error is not None
    (at4,) = slab.phases_by_rank
    assert at4.np == 4 and [r["rank"] for r in at4.ranks] == [0, 1, 2, 3]
    # The recorded run's own numbers (one repetition: the median is the value): the root scatters the
    # longest and gathers the shortest; rank 1 waits longest in the gather.
    rank = {r["rank"]: r for r in at4.ranks}
    assert rank[0]["scatter_us"] == pytest.approx(36.95) and rank[0]["gather_us"] == pytest.approx(4.211)
    assert rank[1]["gather_us"] == pytest.approx(59.0385) and rank[3]["scatter_us"] == pytest.approx(30.8325)
    assert all(r["n_reps"] == 1 for r in at4.ranks)
    assert fits[(1, "block")].phases_by_rank[0].ranks[3]["gather_us"] == pytest.approx(36.2195)
