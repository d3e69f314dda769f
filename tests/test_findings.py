"""The report's Findings: exact sentences from small hand-made tables, and on real imported IMB data."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.models.fit_records import HockneyRecord, hockney_records
from mpiatlas.cli import main
from mpiatlas.report.build import build_report
from mpiatlas.report import findings as F
from mpiatlas.report.formatting import fmt_num

MiB4 = 4 * 2**20


def summary(rows: list[tuple[str, str, str, int, str | None, int, float, float | None]]) -> pl.DataFrame:
    """IMB summary rows: (benchmark, stack, transport, np, algorithm, bytes, median t µs, median bw MB/s)."""
    return pl.DataFrame(
        [{"benchmark": b, "label": f"{s}/{t}/core", "stack": s, "transport": t, "mapping": "core", "np": n,
          "algorithm": a, "bytes": m, "t_median_usec": tm, "bw_median_MBps": bw}
         for b, s, t, n, a, m, tm, bw in rows],
        schema_overrides={"algorithm": pl.String, "bw_median_MBps": pl.Float64})


def pingpong(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    """pingpong kernel medians (kernel_p2p.pingpong_medians' columns): (stack, transport, bytes, t µs)."""
    return pl.DataFrame([{"label": f"{s}/{t}/core", "stack": s, "transport": t, "mapping": "core", "bytes": m,
                          "t_usec": t_, "MBps": m / t_ if m else None, "n_reps": 3} for s, t, m, t_ in rows],
                        schema_overrides={"MBps": pl.Float64})


PP = summary([
    ("PingPong", "impi", "shm", 2, None, 4, 0.5, 8.0),
    ("PingPong", "impi", "shm", 2, None, MiB4, 400.0, 10485.76),
    ("PingPong", "impi", "ofi-tcp", 2, None, 4, 20.0, 0.2),
    ("PingPong", "impi", "ofi-tcp", 2, None, MiB4, 4000.0, 1048.576),
    ("PingPong", "mpich", "ucx-posix", 2, None, 4, 0.8, 5.0),
    ("PingPong", "mpich", "ucx-posix", 2, None, MiB4, 350.0, 11983.7),
])


def test_transport_media() -> None:
    for name in ("shm", "ofi-shm", "ob1-vader", "ob1-sm", "ucx-sm", "ucx-posix"):
        assert F.is_shared_memory(name) and not F.is_tcp(name), name
    for name in ("ofi-tcp", "ucx-tcp", "ob1-tcp"):
        assert F.is_tcp(name) and not F.is_shared_memory(name), name
    for name in ("ofi-verbs", "default", "ofi-psm3"):
        assert not F.is_tcp(name) and not F.is_shared_memory(name), name


def test_fastest_and_slowest_pingpong_at_4_bytes_and_4_mib() -> None:
    assert F.fastest_p2p(F.imb_pingpong(PP), "IMB PingPong") == [
        "IMB PingPong at 4 B: fastest impi/shm/core (0.500 µs), slowest impi/ofi-tcp/core (20.0 µs, 40.0× the "
        "fastest's time).",
        "IMB PingPong at 4 MiB: fastest mpich/ucx-posix/core (350 µs, 11,984 MB/s), slowest impi/ofi-tcp/core "
        "(4,000 µs, 1,049 MB/s, 11.4× the fastest's time).",
    ]


def test_fastest_falls_back_to_the_smallest_and_largest_size_and_says_so() -> None:
    pp = summary([("PingPong", "a", "shm", 2, None, m, t, m / t) for m, t in ((0, 0.3), (1, 0.4), (8, 0.5),
                                                                             (1 << 20, 90.0))]
                 + [("PingPong", "a", "tcp", 2, None, m, t, m / t) for m, t in ((1, 11.0), (8, 12.0))])
    assert F.fastest_p2p(F.imb_pingpong(pp), "IMB PingPong") == [
        "IMB PingPong at 1 B (the smallest size measured; no 4 B): fastest a/shm/core (0.400 µs), slowest "
        "a/tcp/core (11.0 µs, 27.5× the fastest's time).",
        "IMB PingPong at 1 MiB (the largest size measured; no 4 MiB): only a/shm/core was measured, 90.0 µs, "
        "11,651 MB/s.",
    ]


def test_shared_memory_vs_tcp_per_stack() -> None:
    assert F.shm_vs_tcp(F.imb_pingpong(PP), "IMB PingPong") == [
        "impi, IMB PingPong at 4 B: shared memory 0.500 µs (impi/shm/core) on one node vs TCP 20.0 µs "
        "(impi/ofi-tcp/core): TCP takes 40.0× the shared-memory time.",
    ]  # mpich has no TCP series: nothing to compare


def test_pingpong_kernel_speaks_only_for_series_without_imb_pingpong() -> None:
    kernel = pingpong([("impi", "shm", 4, 0.55), ("impi", "shm", MiB4, 420.0),
                       ("openmpi", "ob1-vader", 4, 0.9), ("openmpi", "ob1-vader", MiB4, 600.0),
                       ("openmpi", "ob1-tcp", 4, 30.0), ("openmpi", "ob1-tcp", MiB4, 5200.0)])
    got = F.findings(PP, kernel, None, None)
    assert got[:2] == F.fastest_p2p(F.imb_pingpong(PP), "IMB PingPong")
    assert got[2:] == [
        "pingpong kernel (no IMB PingPong for these) at 4 B: fastest openmpi/ob1-vader/core (0.900 µs), slowest "
        "openmpi/ob1-tcp/core (30.0 µs, 33.3× the fastest's time).",
        "pingpong kernel (no IMB PingPong for these) at 4 MiB: fastest openmpi/ob1-vader/core (600 µs, 6,991 MB/s), "
        "slowest openmpi/ob1-tcp/core (5,200 µs, 807 MB/s, 8.67× the fastest's time).",
        "impi, IMB PingPong at 4 B: shared memory 0.500 µs (impi/shm/core) on one node vs TCP 20.0 µs "
        "(impi/ofi-tcp/core): TCP takes 40.0× the shared-memory time.",
        "openmpi, pingpong kernel at 4 B: shared memory 0.900 µs (openmpi/ob1-vader/core) on one node vs TCP "
        "30.0 µs (openmpi/ob1-tcp/core): TCP takes 33.3× the shared-memory time.",
    ]  # impi's kernel series is a cross-check of its IMB numbers: not a finding of its own


def test_algorithms_more_than_twice_as_fast_as_the_default() -> None:
    rows = []
    for m, t_default, t_ring, t_rd in ((1024, 10.0, 4.0, 6.0), (2048, 12.0, 8.0, 9.0), (4096, 15.0, 5.0, 16.0),
                                       (8192, 20.0, 10.0, 10.5), (16384, 20.01, 10.0, 11.0)):
        rows += [("Allreduce", "impi", "shm", 8, "default", m, t_default, None),
                 ("Allreduce", "impi", "shm", 8, "ring", m, t_ring, None),
                 ("Allreduce", "impi", "shm", 8, "recursive_doubling", m, t_rd, None)]
    # Barrier has no size; dissemination wins 2.5× at np=4.
    rows += [("Barrier", "impi", "shm", 4, "default", 0, 5.0, None), ("Barrier", "impi", "shm", 4, "dissemination",
                                                                      0, 2.0, None)]
    s = summary(rows).with_columns(pl.when(pl.col("benchmark") == "Barrier").then(None).otherwise(pl.col("bytes"))
                                   .alias("bytes"))
    # 2048: ring 1.5× (not named); 8192: ring 2.0× (not "more than"), 16384: 2.001× (printed 2.00×: not either).
    assert F.algorithm_wins(F.imb_best_algorithms(s)) == [
        "Allreduce, impi/shm/core, np=8: ring beats the default by more than 2× at 2 sizes from 1 KiB to 4 KiB "
        "(up to 3.00×).",
        "Barrier, impi/shm/core, np=4: dissemination beats the default by more than 2× (up to 2.50×).",
    ]


def test_coll_kernel_wins_use_the_same_criterion() -> None:
    coll = pl.DataFrame({"label": ["ompi/sm/core"] * 4, "stack": ["ompi"] * 4, "transport": ["sm"] * 4,
                         "mapping": ["core"] * 4, "collective": ["bcast"] * 4, "np": [4] * 4,
                         "algorithm": ["default", "pipeline", "default", "pipeline"], "bytes": [16, 16, 1024, 1024],
                         "t_avg_usec": [2.0, 3.0, 9.0, 3.0]})
    assert F.algorithm_wins(F.kernel_best_algorithms(coll)) == [
        "bcast (coll kernel), ompi/sm/core, np=4: pipeline beats the default by more than 2× at 1 KiB (up to 3.00×).",
    ]


def test_latency_steps_between_neighbouring_sizes() -> None:
    series = pl.DataFrame({
        "series": ["jump"] * 4 + ["sparse"] * 2 + ["drop"] * 3 + ["spike"] * 4,
        "bytes": [1024, 2048, 4096, 8192, 4, MiB4, 16, 32, 64, 16, 32, 64, 128],
        "t_usec": [5.0, 5.5, 90.0, 100.0, 1.0, 900.0, 30.0, 2.0, 2.1, 0.9, 1.0, 40.0, 1.1],
    })
    # sparse: 900× over a 2^20× size step is the bandwidth term, not an anomaly; the drop right after
    # the first size measured is named as the first-size effect it is (issue #33).
    assert F.latency_steps(series) == [
        "drop: the first size measured, 16 B, took 15.0× the next size's time (30.0 µs against 2.00 µs at 32 B): "
        "a first-size effect (the first message's warm-up), not a latency regime.",
        "jump: latency jumps 16.4× from 5.50 µs at 2 KiB to 90.0 µs at 4 KiB.",
        "spike: an isolated spike at 64 B: 40.0 µs, 40.0× the 1.00 µs at 32 B and 36.4× the 1.10 µs at 128 B.",
    ]
    edge = pl.DataFrame({"series": ["edge"] * 2, "bytes": [1024, 2048], "t_usec": [1.0, 10.02]})
    assert F.latency_steps(edge) == []  # 10.02× prints as 10.0×: not "more than 10×"
    assert F.latency_steps(series, factor=50.0) == []


def test_a_step_must_hold_in_every_repetition() -> None:
    """Issue #33: two "isolated spikes" over TCP came from one slow repetition in a median of three. With
    each median's CI bounds (what its repetitions measured), a spike counts only when even its fastest
    repetition is beyond the factor over its neighbours' slowest."""
    one_slow = pl.DataFrame({"series": ["tcp"] * 3, "bytes": [2, 4, 8], "t_usec": [30.0, 400.0, 31.0],
                             "t_lo_usec": [29.0, 28.0, 30.0], "t_hi_usec": [33.0, 450.0, 34.0]})
    assert F.latency_steps(one_slow) == []
    every = one_slow.with_columns(pl.Series("t_lo_usec", [29.0, 380.0, 30.0]))
    assert F.latency_steps(every) == [
        "tcp: an isolated spike at 4 B: 400 µs, 13.3× the 30.0 µs at 2 B and 12.9× the 31.0 µs at 8 B."]


def test_failures_per_status_with_the_first_reason() -> None:
    cells = pl.DataFrame({"cell": ["c3", "c1", "c2", "c4", "c5"], "status": ["failed", "ok", "failed", "timeout",
                                                                             "unavailable"],
                          "reason": ["exit 139", None, "exit 1", None, "mapping 'socket' needs 2 packages"]})
    assert F.failures(cells) == [
        "2 of 5 cells failed; the first (c2): exit 1.",
        "1 of 5 cells timed out; the first (c4): no reason recorded.",
        "1 of 5 cells were unavailable; the first (c5): mapping 'socket' needs 2 packages.",
    ]
    assert F.failures(cells.filter(pl.col("status") == "ok")) == ["All cells completed with status ok (1 cell)."]


def test_no_data_no_findings() -> None:
    assert F.findings(None, None, None, None) == []
    assert F.findings(pl.DataFrame({"benchmark": ["Bcast"]}), None, None, pl.DataFrame()) == []


def _findings_of(page: str) -> list[str]:
    m = re.search(r'<section id="findings">(.*?)</section>', page, re.S)
    assert m, "no findings section"
    return [html.unescape(li) for li in re.findall(r"<li>(.*?)</li>", m.group(1), re.S)]


def test_findings_of_a_report_built_from_imported_shared_data(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = require_datasets()
    raw = tmp_path / "raw"
    raw.mkdir()
    stackhpc = root / "stackhpc-alaska-csd3-imb-omb" / "output"
    for out in sorted(stackhpc.glob("*/*/imb/IMB_PingPong/rfm_IMB_PingPong_job.out")):
        system, partition = out.parts[-5], out.parts[-4]
        shutil.copy(out, raw / f"{system}-{partition}.txt")  # label = file stem: one per partition
    for name in ("impi_np2_PingPong.txt", "mpich5_np2_PingPong_Bcast_Allreduce.txt"):
        shutil.copy(root / "local-imb-samples" / name, raw / name)
    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    assert main(["import", *map(str, sorted(raw.iterdir())), "--out", str(tidy)]) == 0
    capsys.readouterr()
    assert main(["fit", str(tidy), "--model", "hockney", "--json"]) == 0
    fits.mkdir()
    (fits / "hockney.json").write_text(capsys.readouterr().out)
    page = build_report(tidy, fits, tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.index('<section id="findings">') < page.index('<section id="header">')
    got = _findings_of(page)

    # The same figures, recomputed here from the imported samples: median over repetitions per label.
    smp = pl.read_parquet(tidy / "imb_samples.parquet").filter((pl.col("benchmark") == "PingPong")
                                                              & (pl.col("status") == "ok"))
    med = smp.group_by("label", "bytes").agg(pl.col("t_usec").median(), pl.col("bandwidth_MBps").median())
    at4 = med.filter(pl.col("bytes") == 4).sort("t_usec")
    at4m = med.filter(pl.col("bytes") == MiB4).sort("t_usec")
    assert at4.height == 10 and at4m.height == 10  # 8 stackhpc partitions + 2 local files
    (fast, t_fast), (slow, t_slow) = at4.select("label", "t_usec").rows()[0], at4.select("label", "t_usec").rows()[-1]
    assert got[0] == (f"IMB PingPong at 4 B: fastest {fast} ({fmt_num(t_fast)} µs), slowest {slow} "
                      f"({fmt_num(t_slow)} µs, {fmt_num(t_slow / t_fast)}× the fastest's time).")
    fast, t_fast, bw_fast = at4m.row(0)[0], at4m.row(0)[2], at4m.row(0)[3]
    assert got[1].startswith(f"IMB PingPong at 4 MiB: fastest {fast} ({fmt_num(t_fast)} µs, {fmt_num(bw_fast)} "
                             "MB/s), slowest ")
    # Imported files name no stack or transport, and have no cells table: nothing more is claimed.
    assert not any("shared memory" in s or "cells" in s for s in got)
    # The trust paragraph opens the section: no cells table or quality columns here, so it speaks of
    # the fits only. The two local shm curves have no 3-size plateau (B is their peak, with a
    # warning); the InfiniBand/RoCE fits match their published figures and carry none.
    fitted = json.loads((fits / "hockney.json").read_text())
    warned = sorted(f["label"] for f in fitted if f.get("ci_warning"))
    assert warned == ["impi_np2_PingPong", "mpich5_np2_PingPong_Bcast_Allreduce"]
    text = html.unescape(page)
    trust_at = text.index("Trust: ")
    trust = text[trust_at:text.index("<", trust_at)]
    # Imported samples are repetitions (the summary judges their noise), but there are no launches to judge.
    assert "points is within its noise bound" in trust or "noisy" in trust, trust
    assert f"{len(warned)} of {len(fitted)} fits carry a warning (see Model parameters)" in trust, trust
    assert text.index('<section id="findings">') < trust_at < text.index(got[0])


# -- IMB PingPong vs the pingpong kernel (issue #23) ------------------------------------------------


def _bw(asymptotic: float, asymptotic_ci: list[float], peak: float, peak_ci: list[float]) -> dict:
    """The two bandwidth estimands of a fit record (asymptotic at 4 MiB, peak at 256 KiB)."""
    return {"asymptotic_bandwidth_MBps": asymptotic, "asymptotic_bandwidth_ci_MBps": asymptotic_ci,
            "asymptotic_bytes": 4 << 20, "peak_bandwidth_MBps": peak, "peak_bandwidth_ci_MBps": peak_ci,
            "peak_bytes": 256 << 10}


def _recs(imb: list[dict], kernel: list[dict]) -> tuple[list[HockneyRecord], list[HockneyRecord]]:
    """The IMB fits and the kernel fits' Hockney part as the report reads them."""
    return hockney_records(imb), hockney_records(kernel)


def _cross_fits(imb_b: float, imb_b_ci: list[float]) -> tuple[list[dict], list[dict]]:
    """Issue #23's pair: IMB's asymptotic B 2,396 MB/s [2,334, 25,618] against the kernel's 22,505
    [21,529, 25,345]; their peaks agree (24,000 and 25,000 MB/s)."""
    imb = [{"label": "intelmpi/shm/core", "benchmark": "PingPong", "np": 2, "latency_us": 0.30,
            "latency_ci_us": [0.29, 0.31], **_bw(imb_b, imb_b_ci, 24_000.0, [23_000.0, 25_000.0]),
            "ci_warning": None},
           {"label": "intelmpi/shm/core", "benchmark": "PingPong", "np": 4, "latency_us": 9.0,
            "latency_ci_us": [8.0, 10.0], **_bw(1.0, [0.9, 1.1], 1.0, [0.9, 1.1])}]
    kernel = [{"label": "intelmpi/shm/core", "benchmark": "pingpong", "latency_us": 0.36, "latency_ci_us": [0.35, 0.37],
               **_bw(22_505.0, [21_529.0, 25_345.0], 25_000.0, [24_500.0, 25_500.0])},
              {"label": "mpich/shm/core", "benchmark": "pingpong", "latency_us": 0.5, "latency_ci_us": [0.4, 0.6],
               **_bw(9000.0, [8000.0, 10_000.0], 9500.0, [9000.0, 10_000.0])}]
    return imb, kernel


def test_imb_and_kernel_disagreeing_beyond_30_percent_is_a_finding() -> None:
    imb, kernel = _cross_fits(2_396.0, [2_334.0, 25_618.0])
    assert F.cross_check(*_recs(imb, kernel)) == [
        "IMB PingPong and the pingpong kernel disagree on intelmpi/shm/core: asymptotic B 2,396 MB/s "
        "[2,334, 25,618] (IMB) vs 22,505 MB/s [21,529, 25,345] (kernel), the kernel's 9.39× IMB's. Two programs "
        "measuring the same thing should agree within 30 %: one of these figures is not a result (a perturbed "
        "launch, a slow repetition, or a fit with a warning)."]
    pair, = F.imb_vs_kernel(*_recs(imb, kernel))  # mpich has no IMB fit; IMB's np=2 fit is the one compared
    assert pair.disagree == ["asymptotic B"] and pair.ratio["λ"] == pytest.approx(1.2)
    assert pair.ratio["peak B"] == pytest.approx(25_000 / 24_000)  # the peaks agree: not named
    assert F.findings(None, None, None, None, hockney=hockney_records(imb), kernel_fits=hockney_records(kernel)) == F.cross_check(*_recs(imb, kernel))


def test_imb_and_kernel_within_30_percent_agree_and_lambda_is_compared_too() -> None:
    imb, kernel = _cross_fits(18_000.0, [17_000.0, 19_000.0])  # 22,505 / 18,000 = 1.25
    assert F.cross_check(*_recs(imb, kernel)) == []
    kernel[0]["latency_us"] = 0.30 * 1.31
    kernel[0]["asymptotic_bandwidth_MBps"] = 18_000.0 * 1.5
    text, = F.cross_check(*_recs(imb, kernel))
    assert "λ 0.300 µs [0.290, 0.310] (IMB) vs 0.393 µs [0.350, 0.370] (kernel), the kernel's 1.31× IMB's; " \
           "asymptotic B 18,000 MB/s [17,000, 19,000] (IMB) vs 27,000 MB/s" in text
    assert "peak B" not in text
    # Like for like: the kernel's asymptotic B equal to IMB's peak still disagrees with IMB's asymptotic
    # B, and a kernel peak 1.5× IMB's is named as the peak's disagreement.
    kernel[0].update(latency_us=0.30, asymptotic_bandwidth_MBps=24_000.0, peak_bandwidth_MBps=36_000.0)
    pair, = F.imb_vs_kernel(*_recs(imb, kernel))
    assert pair.disagree == ["asymptotic B", "peak B"]
    assert pair.ratio["asymptotic B"] == pytest.approx(24_000 / 18_000)
    assert pair.ratio["peak B"] == pytest.approx(1.5)
    text, = F.cross_check(*_recs(imb, kernel))
    assert "; peak B 24,000 MB/s [23,000, 25,000] (IMB) vs 36,000 MB/s [24,500, 25,500] (kernel), " \
           "the kernel's 1.50× IMB's." in text
    assert F.apart(1.0, 1.3) == pytest.approx(0.3) and F.apart(None, 1.0) is None and F.apart(0.0, 1.0) is None


def test_kernel_table_shows_both_ratios_and_marks_the_disagreement() -> None:
    from mpiatlas.report.sections.kernel_p2p_coll import _fit_table

    imb, kernel = _cross_fits(2_396.0, [2_334.0, 25_618.0])
    table = _fit_table(hockney_records(kernel), hockney_records(imb))
    col = {name: i for i, name in enumerate(table.columns)}
    row = {r[0].text: r for r in table.rows}["intelmpi/shm/core"]
    assert row[col["IMB asymptotic B (MB/s) [95 % CI]"]].text == "2,396 [2,334, 25,618]"
    assert row[col["kernel asymptotic B (MB/s) [95 % CI]"]].text == "22,505 [21,529, 25,345]"
    ratio = row[col["kernel / IMB asymptotic B"]]
    assert ratio.text == "9.39" and "bad" in (ratio.cls or "")
    assert row[col["IMB peak B (MB/s) [95 % CI]"]].text == "24,000 [23,000, 25,000]"
    peak = row[col["kernel / IMB peak B"]]
    assert peak.text == "1.04" and "bad" not in (peak.cls or "")
    assert row[col["kernel λ / IMB λ"]].text == "1.20" and "bad" not in (row[col["kernel λ / IMB λ"]].cls or "")
    other = {r[0].text: r for r in table.rows}["mpich/shm/core"]
    assert other[col["IMB asymptotic B (MB/s) [95 % CI]"]].text == "no IMB"
    assert other[col["IMB peak B (MB/s) [95 % CI]"]].text == "no IMB"
