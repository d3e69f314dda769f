"""Two bandwidth figures with one fixed definition each (issue #33): the peak B, the highest per-size
median s/t, and the asymptotic B, s/t at the largest size; and the model's plateau segment on curves
that peak in cache (issue #15).

Real curves: IMB PingPong over shared memory recorded on this machine up to 256 MiB
(tests/data/imb_shm_256mib, PROVENANCE.md there), and the shared datasets' captures.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.models.asymptote import PEAK_EXCESS, find_asymptote
from mpiatlas.models.hockney import HockneyFit, fit_hockney
from mpiatlas.parsers.imb import parse_imb_file
from mpiatlas.report.formatting import DASH

CAPTURES = Path(__file__).parent / "data" / "imb_shm_256mib"
PLATEAU_TOL_TEST = 0.03  # the issue's bar: B within 3 % of the largest sizes' median
MiB = 2**20


def _pingpong(files: list[Path], benchmark: str = "PingPong", max_bytes: int | None = None) -> pl.DataFrame:
    """The files' rows of ``benchmark`` (bytes, t_usec, source: the file, one launch each)."""
    frames = [parse_imb_file(f).filter(pl.col("benchmark") == benchmark).select("bytes", "t_usec")
              .with_columns(pl.lit(f.name).alias("source")) for f in files]
    df = pl.concat(frames)
    return df if max_bytes is None else df.filter(pl.col("bytes") <= max_bytes)


def _median_bw(df: pl.DataFrame, min_bytes: int) -> float:
    """Median effective bandwidth (MB/s) of the per-size median times of the sizes >= min_bytes:
    the test's own definition of "the largest sizes", independent of the fit's plateau rule."""
    med = df.group_by("bytes").agg(pl.col("t_usec").median()).filter(pl.col("bytes") >= min_bytes)
    return float((med["bytes"] / med["t_usec"]).median())


def _runs(mode: str) -> list[Path]:
    return sorted(CAPTURES.glob(f"impi_shm_pingpong_{mode}_r*.txt"), key=lambda p: int(p.stem.rsplit("r", 1)[1]))


@pytest.mark.parametrize("mode", ["cache", "offcache"])
def test_shm_curves_of_this_machine_get_the_plateau_as_b(mode: str) -> None:
    files = sorted(CAPTURES.glob(f"impi_shm_pingpong_{mode}_r*.txt"))
    assert len(files) == 10
    df = _pingpong(files)
    assert df["bytes"].max() == 256 * MiB
    fit = fit_hockney(df["bytes"], df["t_usec"], launches=df["source"])
    largest = _median_bw(df, 64 * MiB)  # 64, 128, 256 MiB: 2–8 × the 32 MiB L3
    assert fit.asymptotic_bytes == 256 * MiB
    at_256 = df.filter(pl.col("bytes") == 256 * MiB)
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(256 * MiB / float(at_256["t_usec"].median()))
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(largest, rel=0.05)  # it is on the plateau (here +4 %)
    # The model ends on the plateau: its last segment's B is the plateau's median bandwidth.
    assert fit.plateau_from_bytes is not None and fit.plateau_from_bytes >= 16 * MiB
    assert fit.segments[-1].bandwidth_MBps == pytest.approx(largest, rel=PLATEAU_TOL_TEST)
    # The in-cache peak: a size that fits the 512 KiB L2 / 32 MiB L3, well above the plateau.
    assert fit.peak_bytes is not None and 64 * 1024 <= fit.peak_bytes <= 32 * MiB
    assert fit.peak_bandwidth_MBps > 1.5 * fit.asymptotic_bandwidth_MBps
    assert fit.ci_method == "launches" and fit.n_launches == 10
    for figure in ("peak", "asymptotic"):
        lo, hi = getattr(fit, f"{figure}_bandwidth_ci_MBps")
        assert 0 < lo <= getattr(fit, f"{figure}_bandwidth_MBps") <= hi, figure


def test_the_estimand_cannot_flip_on_recorded_runs() -> None:
    """Issue #33: this machine's recorded shm runs cut at 4 MiB (the default campaign's largest size),
    three launches per "campaign". The plateau rule that used to choose B's meaning finds a 3-size
    plateau in the first campaign and none in the other two, so B was 5,003 MB/s (a plateau) in one
    and 12,058 / 10,859 MB/s (peaks) in the others. The asymptotic B has one definition: the three
    campaigns agree within 4 % and each one's interval over launches holds the others' estimates."""
    runs = _runs("cache")
    campaigns = [_pingpong(runs[3 * i:3 * i + 3], max_bytes=4 * MiB) for i in range(3)]
    meanings = []
    fits = []
    for df in campaigns:
        med = df.group_by("bytes").agg(pl.col("t_usec").median()).sort("bytes").filter(pl.col("bytes") > 0)
        meanings.append(find_asymptote(med["bytes"].to_numpy().astype(float), med["t_usec"].to_numpy()).has_plateau)
        fits.append(fit_hockney(df["bytes"], df["t_usec"], launches=df["source"]))
    assert meanings == [True, False, False]  # what the old rule would have flipped on
    values = [f.asymptotic_bandwidth_MBps for f in fits]
    assert max(values) / min(values) < 1.04, values
    assert all(f.asymptotic_bytes == 4 * MiB and f.ci_method == "launches" and f.n_launches == 3 for f in fits)
    for a, b in itertools.permutations(fits, 2):
        lo, hi = a.asymptotic_bandwidth_ci_MBps
        assert lo <= b.asymptotic_bandwidth_MBps <= hi
        lo, hi = a.peak_bandwidth_ci_MBps
        assert lo <= b.peak_bandwidth_MBps <= hi


def test_intervals_over_launches_include_the_launches_own_spread() -> None:
    """The same recorded campaigns: launches whose ranks landed in cache (r2, r6, r8 reach 12–17 GB/s
    at 4 MiB, the others ~5) make the interval over launches wide, where the bootstrap within the
    launches (launches unknown) would call the figure precise."""
    df = _pingpong(_runs("cache")[:3], max_bytes=4 * MiB)  # r1 (5.0 GB/s at 4 MiB), r2 (16.5), r3 (4.6)
    over = fit_hockney(df["bytes"], df["t_usec"], launches=df["source"])
    within = fit_hockney(df["bytes"], df["t_usec"])
    assert over.asymptotic_bandwidth_MBps == within.asymptotic_bandwidth_MBps
    assert within.ci_method == "repetitions" and over.ci_method == "launches"
    lo, hi = over.asymptotic_bandwidth_ci_MBps
    assert hi > 16_000 and lo < 4_600  # reaches both kinds of launch
    w_lo, w_hi = within.asymptotic_bandwidth_ci_MBps
    assert hi / lo > 4 * (w_hi / w_lo)


def test_the_last_segment_alone_lands_above_the_plateau_on_these_curves() -> None:
    """Why the rule: a free line through the last segment takes the sizes on the way down from the
    peak and overshoots what the largest messages reach (here +5 to +8 %)."""
    df = _pingpong(sorted(CAPTURES.glob("impi_shm_pingpong_*_r*.txt")))
    med = df.group_by("bytes").agg(pl.col("t_usec").median()).sort("bytes")
    s, t = med["bytes"].to_numpy().astype(float), med["t_usec"].to_numpy()
    asym = find_asymptote(s, t)
    assert asym.peaks_in_cache
    from mpiatlas.models.hockney import _choose_segments, _fit_segments

    starts = _choose_segments(s, t)
    free_b = 1.0 / _fit_segments(s, t, starts)[-1][1]
    assert free_b > 1.03 * _median_bw(df, 64 * MiB)


def test_juno_intranode_curves_peak_in_cache() -> None:
    """brandino Juno ARM (IMB 4.1, 0 … 4 MiB): PingPong peaks at 256 KiB (1979 MiB/s) and ends at
    1338–1348 MiB/s at 2–4 MiB; PingPing likewise (1088 → 676–690). Only those two sizes agree: no
    3-size plateau for the model, but both figures keep their meaning: the peak at 256 KiB and the
    asymptotic B at 4 MiB, and neither is a warning."""
    path = require_datasets() / "brandino-juno-arm-imb41/data/IMB-MPI1_intranode.txt"
    for benchmark in ("PingPong", "PingPing"):
        df = _pingpong([path], benchmark)
        fit = fit_hockney(df["bytes"], df["t_usec"], launches=df["source"])
        assert fit.plateau_from_bytes is None, benchmark  # the model has no plateau segment
        assert fit.peak_bytes == 256 * 1024 and fit.asymptotic_bytes == 4 * MiB, benchmark
        last = df.filter(pl.col("bytes") == 4 * MiB)
        assert fit.asymptotic_bandwidth_MBps == pytest.approx(float((last["bytes"] / last["t_usec"]).item()))
        assert fit.peak_bandwidth_MBps > (1 + PEAK_EXCESS) * fit.asymptotic_bandwidth_MBps, benchmark
        assert fit.ci_method == "residuals" and fit.n_launches == 1, benchmark  # one launch: said, no warning
        back = HockneyFit.from_dict(fit.to_dict())
        assert (back.asymptotic_bandwidth_MBps, back.peak_bandwidth_MBps) == (
            fit.asymptotic_bandwidth_MBps, fit.peak_bandwidth_MBps), benchmark
    pingpong = fit_hockney(*_pingpong([path]).select("bytes", "t_usec").get_columns())
    assert pingpong.peak_bandwidth_MBps == pytest.approx(1978.78 * 1.048576, rel=0.01)  # MiB/s -> MB/s
    assert pingpong.asymptotic_bandwidth_MBps == pytest.approx(1347.6 * 1.048576, rel=0.01)


def test_local_samples_of_other_stacks_peak_in_cache_too() -> None:
    """The shared local-imb-samples (this VM type, 0 … 4 MiB): Intel MPI, MPICH 4 and 5 shm peak in
    cache; the peak B is the highest s/t, the asymptotic B the 4 MiB one, well below it."""
    root = require_datasets() / "local-imb-samples"
    for name in ("impi_np2_PingPong.txt", "mpich4deb_np2_PingPong_Bcast_Allreduce.txt",
                 "mpich5_np2_PingPong_Bcast_Allreduce.txt"):
        df = _pingpong([root / name]).filter(pl.col("bytes") > 0)
        fit = fit_hockney(df["bytes"], df["t_usec"])
        assert fit.peak_bandwidth_MBps == pytest.approx(float((df["bytes"] / df["t_usec"]).max()), rel=1e-12), name
        last = df.filter(pl.col("bytes") == df["bytes"].max())
        assert fit.asymptotic_bandwidth_MBps == pytest.approx(float(last["bytes"].max() / last["t_usec"].median()), rel=1e-12)
        assert fit.peak_bandwidth_MBps > (1 + PEAK_EXCESS) * fit.asymptotic_bandwidth_MBps, name


def test_slow_last_sizes_move_the_asymptote_not_its_meaning() -> None:
    """Issue #23's curve: a shm curve whose last two sizes came from a slow repetition (a tenth of the
    peak). The asymptotic B is what the largest size measured (2,400 MB/s), the peak the in-cache
    27 GB/s: both figures, each its own, and no rule in between picks one of them as "B"."""
    sizes = 2.0 ** np.arange(0, 23)
    bw = np.interp(np.log2(sizes), [0, 16, 20, 22], [20.0, 27000.0, 22000.0, 22000.0])
    slow_end = 0.3 + sizes / bw
    slow_end[-2:] = sizes[-2:] / 2400.0  # 2 and 4 MiB at 2,400 MB/s
    fit = fit_hockney(sizes, slow_end)
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(2400.0, rel=1e-9)
    assert fit.peak_bytes == sizes[np.argmax(sizes / slow_end)] and fit.peak_bandwidth_MBps > 20000.0
    assert fit.plateau_from_bytes is None  # two slow sizes are no plateau for the model
    slow_end[-3] = sizes[-3] / 2400.0  # 1 MiB too: now 3 sizes agree, a (slow) plateau for the model
    three = fit_hockney(sizes, slow_end)
    assert three.plateau_n_sizes == 3 and three.segments[-1].bandwidth_MBps == pytest.approx(2400.0, rel=0.01)
    assert three.asymptotic_bandwidth_MBps == pytest.approx(2400.0, rel=1e-9)


def test_inter_node_curves_have_no_model_plateau() -> None:
    """StackHPC InfiniBand/RoCE and Juno Ethernet PingPong rise to the end: no plateau segment, and the
    asymptotic B is the largest size's s/t."""
    root = require_datasets()
    files = [*root.glob("stackhpc-alaska-csd3-imb-omb/output/*/*/imb/IMB_PingPong/*.out"),
             root / "brandino-juno-arm-imb41/data/IMB-MPI1_internode.txt"]
    assert len(files) == 9
    for path in files:
        df = _pingpong([path]).filter(pl.col("bytes") > 0)
        fit = fit_hockney(df["bytes"], df["t_usec"])
        assert fit.plateau_from_bytes is None, path
        last = df.filter(pl.col("bytes") == df["bytes"].max())
        assert fit.asymptotic_bandwidth_MBps == pytest.approx(float(last["bytes"].max() / last["t_usec"].median()))
        assert fit.peak_bandwidth_MBps >= fit.asymptotic_bandwidth_MBps and fit.peak_bytes is not None


def test_synthetic_peak_and_plateau() -> None:
    """Bandwidth rising to 20 GB/s at 512 KiB, falling to an 8 GB/s plateau from 16 MiB, 3 % noise."""
    sizes = 2.0 ** np.arange(0, 29)
    bw = np.interp(np.log2(sizes), [0, 19, 24, 28], [20.0, 20000.0, 8000.0, 8000.0])
    rng = np.random.default_rng(1)
    times = np.repeat(0.3 + sizes / bw, 5) * (1 + 0.03 * rng.standard_normal(sizes.size * 5))
    fit = fit_hockney(np.repeat(sizes, 5), times)
    assert fit.plateau_from_bytes == 2**24
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(8000.0, rel=PLATEAU_TOL_TEST)
    assert fit.peak_bytes == 2**19 and fit.peak_bandwidth_MBps > (1 + PEAK_EXCESS) * fit.asymptotic_bandwidth_MBps


def test_a_shallow_bump_is_not_a_cache_peak() -> None:
    """A top within PEAK_EXCESS of the end (e.g. a NIC's pipelining bump) gets no plateau segment."""
    sizes = 2.0 ** np.arange(0, 23)
    bw = np.interp(np.log2(sizes), [0, 18, 22], [10.0, 12500.0, 12000.0])
    fit = fit_hockney(sizes, 1.0 + sizes / bw)
    assert fit.plateau_from_bytes is None
    assert fit.asymptotic_bandwidth_MBps == pytest.approx(2**22 / (1.0 + 2**22 / 12000.0), rel=1e-9)


def test_new_fields_round_trip_through_json() -> None:
    df = _pingpong(_runs("cache"))
    fit = fit_hockney(df["bytes"], df["t_usec"], launches=df["source"])
    back = HockneyFit.from_dict(fit.to_dict())
    for key in ("plateau_from_bytes", "plateau_n_sizes", "peak_bytes", "peak_bandwidth_MBps", "asymptotic_bytes",
                "asymptotic_bandwidth_MBps", "ci_method", "n_launches"):
        assert getattr(back, key) == getattr(fit, key), key
    assert back.peak_bandwidth_ci_MBps == pytest.approx(fit.peak_bandwidth_ci_MBps)
    assert back.asymptotic_bandwidth_ci_MBps == pytest.approx(fit.asymptotic_bandwidth_ci_MBps)


def test_a_fit_written_before_the_two_estimands_is_refused_by_name() -> None:
    """hockney.json of an older mpiatlas has one ``bandwidth_MBps`` whose meaning changed with the
    curve: reading it says so and asks for a new fit, instead of guessing which figure it was."""
    old = {"latency_us": 0.4, "latency_ci_us": [0.3, 0.5], "bandwidth_MBps": 8500.0, "bandwidth_rule": "plateau",
           "segments": [{"from_bytes": 1, "latency_us": 0.4, "bandwidth_MBps": 8500.0}]}
    with pytest.raises(ValueError, match=r"asymptotic_bandwidth_MBps.*'bandwidth_MBps'.*fit again"):
        HockneyFit.from_dict(old)


def test_parameters_table_names_both_bandwidths(tmp_path: Path) -> None:
    """The report's parameters table shows both bandwidths with their sizes on real curves: the Juno
    intra-node PingPong (peak at 256 KiB, asymptotic at 4 MiB), this machine's 256 MiB shm capture (a
    model plateau), a StackHPC InfiniBand PingPong (rising to the end: peak and asymptote at 4 MiB);
    λ on its lower bound is "not resolved"; the intervals say what they include."""
    import json

    from mpiatlas.report.blocks import Table
    from mpiatlas.report.data import load_data
    from mpiatlas.report.sections.parameters import section_parameters

    root = require_datasets()
    curves = {"juno": [root / "brandino-juno-arm-imb41/data/IMB-MPI1_intranode.txt"],
              "shm256": sorted(CAPTURES.glob("impi_shm_pingpong_cache_r*.txt")),
              "csd3": [root / "stackhpc-alaska-csd3-imb-omb/output/csd3/cclake-ib-gcc9-ompi3-ucx/imb/IMB_PingPong/"
                              "rfm_IMB_PingPong_job.out"]}
    frames = {label: _pingpong(files) for label, files in curves.items()}
    entries = [{"label": label, "benchmark": "PingPong", "np": 2,
                **fit_hockney(df["bytes"], df["t_usec"], launches=df["source"]).to_dict()} for label, df in frames.items()]
    sizes = 2.0 ** np.arange(0, 23)
    entries.append({"label": "nolatency", "benchmark": "PingPong", "np": 2, **fit_hockney(sizes, sizes / 9000.0).to_dict()})
    fits = tmp_path / "fits"
    fits.mkdir()
    (fits / "hockney.json").write_text(json.dumps(entries))
    table = next(b for b in section_parameters(load_data(None, fits)).blocks
                 if isinstance(b, Table) and b.caption == "Hockney parameters")
    col = {name: i for i, name in enumerate(table.columns)}
    rows = {r[col["Label"]].text: r for r in table.rows}
    at = {lab: (rows[lab][col["Peak at"]].text, rows[lab][col["Asymptotic at"]].text) for lab in rows}
    assert at == {"juno": ("256 KiB", "4 MiB"), "shm256": (at["shm256"][0], "256 MiB"), "csd3": ("4 MiB", "4 MiB"),
                  "nolatency": ("1 B", "4 MiB")}  # a flat s/t: the peak is the first size (ties)
    assert rows["shm256"][col["Model plateau"]].text.startswith("from ")
    assert rows["csd3"][col["Model plateau"]].text == DASH
    assert rows["juno"][col["Intervals"]].text.startswith("within 1 launch (")
    assert rows["shm256"][col["Intervals"]].text == "over 10 launches"
    assert rows["nolatency"][col["λ (µs)"]].text == "not resolved"
    assert rows["csd3"][col["λ (µs)"]].text != "not resolved"
    assert not rows["csd3"][col["Asymptotic B 95 % CI"]].text.endswith("unreliable")
