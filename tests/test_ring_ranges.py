"""λ and B per message-size range from the ring alone (issue #34, part 5), on a recorded Open MPI ring
sweep (tests/data/kernels/ring_openmpi_np2_sizes.txt: nonblocking, 2 streams, P = 2, 4 B .. 1 MiB), and the
ring's T/P chart drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from mpiatlas.models.kernels import fit_ring
from mpiatlas.parsers.kernels import parse_kernel_file
from mpiatlas.report.formatting import fmt_bytes

DATA = Path(__file__).parent / "data" / "kernels"
HEAD = {"label": "openmpi/ob1-vader/core", "stack": "openmpi", "transport": "ob1-vader", "mapping": "core",
        "cell_status": "ok", "rep": 0, "oversubscribed": False, "np": 2,
        "cell": "kernel/openmpi/ob1-vader/core/np2/ring/nonblocking/rep0"}


def recorded() -> pl.DataFrame:
    frame = parse_kernel_file(DATA / "ring_openmpi_np2_sizes.txt")["ring"]
    return frame.with_columns(*(pl.lit(v).alias(k) for k, v in HEAD.items()))


def per_message(frame: pl.DataFrame) -> dict[int, float]:
    """The recorded T/(P·m) per size: the slowest rank's exchange over P = 2 shifts of 2 messages."""
    slowest = frame.group_by("bytes").agg(pl.col("time_us").max())
    return {int(b): float(t) / 4 for b, t in slowest.iter_rows()}


def test_each_range_has_its_own_lambda_and_b_from_the_ring_alone() -> None:
    frame = recorded()
    (fit,) = [f.to_json() for f in fit_ring(frame, None)]  # no PingPong: the ring alone
    ranges = {r["range"]: r for r in fit["ring_ranges"]}
    assert list(ranges) == ["< 1 KiB", "1 KiB – 64 KiB", "≥ 64 KiB"]
    assert ranges["< 1 KiB"]["sizes"] == [4, 64, 512] and ranges["≥ 64 KiB"]["sizes"] == [262144, 1048576]
    # Two sizes per range above 1 KiB: λ + s/B passes through both recorded points (the fit is exact).
    t = per_message(frame)
    for name, (small, large) in (("1 KiB – 64 KiB", (4096, 32768)), ("≥ 64 KiB", (262144, 1048576))):
        slope = (t[large] - t[small]) / (large - small)
        assert ranges[name]["bandwidth_MBps"] == pytest.approx(1 / slope, rel=1e-6)
        assert ranges[name]["latency_us"] == pytest.approx(t[small] - small * slope, rel=1e-6, abs=1e-9)
    # The small range: λ within the recorded per-message times of its sizes.
    small = ranges["< 1 KiB"]
    assert min(t[4], t[64], t[512]) * 0.5 <= small["latency_us"] <= max(t[4], t[64], t[512])
    json.dumps(fit["ring_ranges"], allow_nan=False)


def test_the_t_over_p_chart_plots_each_recorded_exchange_over_p(tmp_path: Path) -> None:
    """The ring's T/P chart (issue #34, part 5) from the same recorded sweep: one point per size, at its
    recorded full-exchange time (the slowest rank's) over P, beside the model's T/P."""
    from mpiatlas.models.kernels import fit_kernels
    from mpiatlas.report.blocks import ChartBlock
    from mpiatlas.report.data import load_data
    from mpiatlas.report.sections.kernel_ring import section_kernel_ring

    frame = recorded()
    (tmp_path / "tidy").mkdir()
    (tmp_path / "fits").mkdir()
    frame.write_parquet(tmp_path / "tidy" / "kernel_ring.parquet")
    (tmp_path / "fits" / "kernels.json").write_text(json.dumps(fit_kernels({"ring": frame}, None).to_json(),
                                                               allow_nan=False))
    section = section_kernel_ring(load_data(tmp_path / "tidy", tmp_path / "fits"))
    assert section is not None
    (spec,) = [b.spec for b in section.blocks if isinstance(b, ChartBlock)
               and b.spec.get("title") == "Ring: T/P, measured (marks) and model (dashed) vs P"]
    measured_layer = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    assert measured_layer["encoding"]["y"]["field"] == "measured_per_p_us"
    (rows,) = spec["datasets"].values()
    points = {r["series"]: r for r in rows if r.get("measured_per_p_us") is not None}
    slowest = {int(b): float(t) for b, t in frame.group_by("bytes").agg(pl.col("time_us").max()).iter_rows()}
    assert len(points) == len(slowest) == 7
    for row in points.values():
        assert row["np"] == 2
        exchange = next(t for b, t in slowest.items() if row["series"].startswith(f"nonblocking · {fmt_bytes(b)} "))
        assert row["measured_us"] == pytest.approx(exchange, rel=1e-4)
        assert row["measured_per_p_us"] == pytest.approx(exchange / 2, rel=1e-4)
        assert row["predicted_per_p_us"] == pytest.approx(row["predicted_us"] / 2, rel=1e-4)

