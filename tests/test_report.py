"""The offline HTML report: self-contained, escaped, complete about failures."""

from __future__ import annotations

import json
import math
import random
import re
from datetime import datetime, UTC
from html import unescape
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from mpiatlas.models.fit_records import HockneyRecord
from mpiatlas.cli import main
from mpiatlas.models.best_algorithm import best_algorithms
from mpiatlas.report.build import build_report
from mpiatlas.report.blocks import Section
from mpiatlas.report.data import ReportData, load_data
from mpiatlas.report.formatting import fmt_binding, fmt_bytes, fmt_ci, fmt_num
from mpiatlas.report.render import build_sections, full_spec, pack_dataset, render_html, unpack_dataset
from mpiatlas.report.sections import ORDER
from mpiatlas.report.sections.header import section_header

EVIL = "<script>alert(1)</script>"
HOST = "cn01&gpu"
SIZES = [0] + [2**k for k in range(23)]  # IMB default: 0, 1, 2, ..., 4 MiB
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

# label -> (stack, transport, mapping, hockney segments [(from, to, λ µs, B MB/s)])
LABELS: dict[str, tuple[str, str, str, list[tuple[int, int | None, float, float]]]] = {
    "impi/shm/core": ("impi", "shm", "core", [(0, 65536, 0.21, 6500.0), (65536, None, 1.9, 11800.0)]),
    "ompi/tcp/core": ("ompi", "tcp", "core", [(0, None, 17.5, 1150.0)]),
    "impi/tcp/node": ("impi", "tcp", "node", [(0, None, 24.0, 950.0)]),  # ranks 0 and 1 on two nodes
    f"evil/{EVIL}/core": ("evil", EVIL, "core", [(0, None, 0.9, 4000.0)]),
}
BW_FACTOR = {"PingPong": 1, "PingPing": 1, "Sendrecv": 2}  # IMB counts Sendrecv bytes twice
FITTED = ("PingPong", "PingPing")  # what `mpiatlas fit --model hockney` models
COLL = {"Allreduce": ["default", "ring", "recursive_doubling"], "Barrier": ["default", "dissemination"]}
COLL_SIZES = [0] + [4**k for k in range(1, 10)]  # 4 B .. 256 KiB
CACHES = {"L1d": 32768, "L2": 524288, "L3": 33554432}  # L3 lies beyond the 4 MiB largest message
FAILED_REASON = "mpirun exited with code 139 (SIGSEGV in MPI_Sendrecv)"


def hockney_t(segs: list[tuple[int, int | None, float, float]], m: float) -> float:
    for _lo, hi, lam, bw in segs:
        if hi is None or m < hi:
            return lam + m / bw
    raise AssertionError


def _coll_t(alg: str, np_: int, m: float, base: float) -> float:
    steps = math.log2(np_)
    if alg == "ring":
        return base * (np_ - 1) * 0.9 + 2 * (np_ - 1) / np_ * m / 5000.0
    if alg in ("recursive_doubling", "dissemination"):
        return base * steps * 0.8 + steps * m / 4500.0
    return base * steps + steps * m / 5200.0


def make_inputs(root: Path, *, reps: int = 3, seed: int = 7) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Realistic tidy tables + Hockney fits, written under ``root``; returns (tidy, fits, fits_list)."""
    rng = random.Random(seed)
    tidy, fits_dir = root / "tidy", root / "fits"
    tidy.mkdir(parents=True)
    fits_dir.mkdir(parents=True)
    samples: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    prov: list[dict[str, Any]] = []

    def add_cell(label: str, bench: str, np_: int, alg: str, rep: int, status: str = "ok",
                 reason: str | None = None) -> str:
        stack, transport, mapping, _ = LABELS[label]
        cid = f"{stack}-{len(cells):04d}"
        cells.append({
            "cell": cid, "stack": stack, "transport": transport, "mapping": mapping, "np": np_, "benchmark": bench,
            "algorithm": alg, "rep": rep, "status": status, "reason": reason, "requested_transport": transport,
            "obtained_transport": transport if status == "ok" else None,
            "transport_ok": True if status == "ok" else None, "requested_pins": ",".join(map(str, range(np_))),
            "obtained_binding": json.dumps({str(r): [r] for r in range(np_)}) if status == "ok" else None,
            "binding_ok": True if status == "ok" else None, "wall_s": round(rng.uniform(3, 40), 2),
            "containerized": stack == "ompi", "image_digest": "sha256:" + "ab12" * 16 if stack == "ompi" else None,
        })
        prov.append({
            "cell": cid, "argv": ["mpirun", "-np", str(np_), "-genv", "I_MPI_FABRICS", transport, "IMB-MPI1", bench,
                                  "-msglog", "0:22", "-iter_policy", "off"],
            "env": {"I_MPI_PIN_PROCESSOR_LIST": ",".join(map(str, range(np_))), "OMP_NUM_THREADS": "1"},
            "stack_version": {"impi": "2021.14", "ompi": "5.0.6"}.get(stack, "0.1"), "imb_version": "2021.8",
            "host": HOST, "cpu_model": "AMD EPYC 7763 64-Core Processor",
            "topology": {"hostname": HOST, "cpu_model": "AMD EPYC 7763 64-Core Processor", "packages": 2,
                         "numa_nodes": 8, "l3_domains": 16, "cores": 128, "pus": 128, "smt": 1,
                         "cache_sizes": CACHES},
            "start": f"2025-01-01T10:{len(prov) % 60:02d}:00+00:00", "end": f"2025-01-01T10:{len(prov) % 60:02d}:30+00:00",
            "containerized": stack == "ompi", "image_digest": cells[-1]["image_digest"], "mpiatlas_version": "0.1.0",
        })
        return cid

    def sample(cid: str, label: str, bench: str, np_: int, alg: str, rep: int, m: int | None, t: float) -> None:
        stack, transport, mapping, _ = LABELS[label]
        f = BW_FACTOR.get(bench)
        samples.append({
            "source": f"{cid}.out", "run": rep, "imb_version": "2021.8", "benchmark": bench, "mode": None,
            "processes": np_, "group": None, "bytes": m, "repetitions": 1000, "t_usec": t, "t_min_usec": t * 0.97,
            "t_max_usec": t * 1.04, "t_avg_usec": t, "bandwidth_MBps": (f * m / t if f and m else None),
            "msg_per_sec": None, "status": "ok", "line": 10, "cell_quality": "ok", "cell": cid, "label": label, "stack": stack,
            "stack_kind": "system", "stack_version": "x", "transport": transport, "mapping": mapping, "np": np_,
            "algorithm": alg, "rep": rep, "oversubscribed": False, "containerized": stack == "ompi",
            "image_digest": None, "nodes": 2 if mapping == "node" else 1,
            "region": ("other_node" if mapping == "node" else "same_l3") if np_ == 2 else None,
        })

    for label, (_, _, _, segs) in LABELS.items():
        for bench, factor in BW_FACTOR.items():
            for rep in range(reps):
                if label == "ompi/tcp/core" and bench == "Sendrecv" and rep == 2:
                    add_cell(label, bench, 2, "default", rep, "failed", FAILED_REASON)
                    continue
                cid = add_cell(label, bench, 2, "default", rep)
                for m in SIZES:
                    t = hockney_t(segs, m) * (1.0 if factor == 1 else 1.08) * rng.lognormvariate(0, 0.02)
                    sample(cid, label, bench, 2, "default", rep, m, t)
        for bench, algs in COLL.items():
            for np_ in (2, 4, 8):
                for alg in algs:
                    for rep in range(reps):
                        cid = add_cell(label, bench, np_, alg, rep)
                        for m in ([None] if bench == "Barrier" else COLL_SIZES):
                            t = _coll_t(alg, np_, m or 0, segs[0][2] * 2) * rng.lognormvariate(0, 0.03)
                            sample(cid, label, bench, np_, alg, rep, m, t)
    add_cell("impi/shm/core", "PingPong", 2, "default", 0, "unavailable", "mapping 'socket' needs 2 packages")

    smp = pl.DataFrame(samples, infer_schema_length=None).with_columns(
        pl.col("np").cast(pl.Int32), pl.col("rep").cast(pl.Int32), pl.col("bytes").cast(pl.Int64))
    smp.write_parquet(tidy / "imb_samples.parquet")
    keys = ["label", "stack", "transport", "mapping", "np", "algorithm", "benchmark", "processes", "bytes"]
    summ = smp.group_by(keys, maintain_order=True).agg(
        pl.len().cast(pl.Int32).alias("n_reps"),
        pl.col("t_usec").median().alias("t_median_usec"),
        pl.col("t_usec").min().alias("t_min_usec"),
        (pl.col("t_usec").median() * 0.985).alias("t_ci_low_usec"),
        (pl.col("t_usec").median() * 1.02).alias("t_ci_high_usec"),
        (pl.col("t_usec").std() / pl.col("t_usec").mean()).alias("t_cv"),
        pl.col("bandwidth_MBps").median().alias("bw_median_MBps"),
        pl.col("oversubscribed").any(),
    )
    summ.write_parquet(tidy / "imb_summary.parquet")
    pl.DataFrame(cells, infer_schema_length=None).with_columns(
        pl.col("np").cast(pl.Int32), pl.col("rep").cast(pl.Int32)).write_parquet(tidy / "cells.parquet")
    (tidy / "provenance.json").write_text(json.dumps(prov, indent=1))

    # Same shape as mpiatlas.models.hockney (to_dict + the group keys).
    fits: list[dict[str, Any]] = []
    for label, (stack, transport, mapping, segs) in LABELS.items():
        for bench in FITTED:
            head = {"label": label, "stack": stack, "transport": transport, "mapping": mapping, "np": 2,
                    "algorithm": "default", "benchmark": bench}
            if stack == "evil" and bench == "PingPing":
                fits.append({**head, "error": "need at least 3 distinct non-zero sizes, got 2"})
                continue
            med = summ.filter((pl.col("label") == label) & (pl.col("benchmark") == bench)).sort("bytes")
            pts = [(m, t) for m, t in med.select("bytes", "t_median_usec").iter_rows() if m > 0]
            fitted = []
            for lo, hi, la, b in segs:
                lam, bw = la * rng.uniform(0.98, 1.03), b * rng.uniform(0.97, 1.02)
                in_seg = [m for m, _ in pts if m >= max(lo, 1) and (hi is None or m < hi)]
                fitted.append({"from_bytes": in_seg[0], "to_bytes": in_seg[-1], "latency_us": lam,
                               "bandwidth_MBps": bw, "n_sizes": len(in_seg)})
            residuals = []
            for m, t in pts:
                seg = [g for g in fitted if g["from_bytes"] <= m][-1]
                pred = seg["latency_us"] + m / seg["bandwidth_MBps"]
                residuals.append({"bytes": m, "measured_us": t, "predicted_us": pred, "rel_err": pred / t - 1})
            lam = fitted[0]["latency_us"]
            # The two bandwidth estimands, by their definitions: s/t of the median time at the largest
            # size, and the highest such s/t.
            asym_bytes, asym_t = pts[-1]
            asym = asym_bytes / asym_t
            peak_bytes, peak_t = max(pts, key=lambda p: p[0] / p[1])
            peak = peak_bytes / peak_t
            zero = med.filter(pl.col("bytes") == 0).get_column("t_median_usec").item()
            fits.append({
                **head, "latency_us": lam, "latency_ci_us": [lam * 0.96, lam * 1.05],
                "asymptotic_bandwidth_MBps": asym, "asymptotic_bandwidth_ci_MBps": [asym * 0.95, asym * 1.04],
                "asymptotic_bytes": asym_bytes, "peak_bandwidth_MBps": peak,
                "peak_bandwidth_ci_MBps": [peak * 0.95, peak * 1.04], "peak_bytes": peak_bytes,
                "breakpoints_bytes": [g["from_bytes"] for g in fitted[1:]], "segments": fitted,
                "n_sizes": len(pts), "zero_byte_us": zero, "excluded_bytes": [], "ci_method": "repetitions",
                "residuals": residuals,
            })
    (fits_dir / "hockney.json").write_text(json.dumps(fits))
    return tidy, fits_dir, fits


@pytest.fixture
def built(synthetic_report: tuple[str, list[dict[str, Any]], Path]) -> tuple[str, list[dict[str, Any]], Path]:
    """make_inputs' report, titled "Test campaign & co" (built once per session: report_fixtures.py)."""
    return synthetic_report


def _section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"section {sid} not found"
    return m.group(1)


def _specs(html: str) -> dict[str, Any]:
    """The chart specs with their data restored, as the page's script hands them to Vega."""
    m = re.search(r'<script type="application/json" id="mpiatlas-specs">(.*?)</script>', html, re.S)
    d = re.search(r'<script type="application/json" id="mpiatlas-data">(.*?)</script>', html, re.S)
    assert m and d
    store = json.loads(d.group(1))
    return {k: full_spec(v, store) for k, v in json.loads(m.group(1)).items()}


def test_report_file_is_self_contained(built: tuple[str, list, Path]) -> None:
    html, _, out = built
    assert out.is_file() and out.stat().st_size > 0
    assert html.lstrip().startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"""<(link|img|iframe|embed|object)\b[^>]*(href|src|data)\s*=\s*["']?https?:""", html, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", html, re.I)
    # The Vega bundle is inlined exactly once, and only two executable scripts exist.
    assert html.count("window.vegaEmbed=") == 1
    assert len(re.findall(r"<script>", html)) == 2
    assert len(re.findall(r"<script\b", html)) == 4  # + the JSON specs and data containers


def test_labels_and_hostnames_are_escaped(built: tuple[str, list, Path]) -> None:
    html, _, _ = built
    assert EVIL not in html
    assert "alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert HOST not in html
    assert "cn01&amp;gpu" in html
    assert "Test campaign &amp; co" in html
    # The labels also reach the charts, as JSON-escaped data.
    assert "evil/\\u003cscript\\u003ealert(1)\\u003c/script\\u003e/core" in html
    assert any(EVIL in json.dumps(s) for s in _specs(html).values())


def test_failed_and_unavailable_cells_are_listed(built: tuple[str, list, Path]) -> None:
    html, _, _ = built
    header = _section(html, "header")
    assert "SIGSEGV in MPI_Sendrecv" in header
    assert "mapping &#39;socket&#39; needs 2 packages" in header
    assert re.search(r'class="st-failed">failed</td>\s*<td>ompi-\d{4}</td>', header)
    assert "unavailable" in header
    cells = _section(html, "cells")
    assert "SIGSEGV in MPI_Sendrecv" in cells


def test_parameters_table_shows_fitted_values(built: tuple[str, list, Path]) -> None:
    html, fits, _ = built
    params = _section(html, "parameters")
    for f in fits:
        if "error" in f:
            assert f"not fitted: {f['error']}" in params
            continue
        assert fmt_num(f["latency_us"]) in params
        assert fmt_num(f["asymptotic_bandwidth_MBps"]) in params and fmt_num(f["peak_bandwidth_MBps"]) in params
        assert fmt_ci(f["latency_ci_us"]) in params
        assert fmt_ci(f["asymptotic_bandwidth_ci_MBps"], unbounded="∞") in params
        assert fmt_ci(f["peak_bandwidth_ci_MBps"], unbounded="∞") in params
    assert "64 KiB" in params  # the shm breakpoint


def test_charts_are_valid_vega_lite(built: tuple[str, list, Path]) -> None:
    import vl_convert

    html, _, _ = built
    specs = _specs(html)
    # p2p: 3 benchmarks + 2 residual charts; by region: PingPong, PingPing; Allreduce: lines, heatmap, best;
    # Barrier: vs np, best.
    assert len(specs) == 12
    for cid, spec in specs.items():
        assert f'id="{cid}"' in html
        assert "$schema" not in spec
        svg = vl_convert.vegalite_to_svg(spec)
        assert svg.startswith("<svg"), cid


def test_hockney_model_is_overlaid(built: tuple[str, list, Path]) -> None:
    html, fits, _ = built
    specs = _specs(html)
    text = json.dumps(specs)
    assert "t_model_usec" in text and "strokeDash" in text
    # The model curve follows the segments: at 1 MiB on shm, λ2 + m/B2.
    first = next(s for s in specs.values() if "PingPong: latency" in json.dumps(s))
    rows = [r for d in first["datasets"].values() for r in d if "t_model_usec" in r and r["series"] == "impi/shm/core"]
    assert rows
    seg = next(f for f in fits if f["label"] == "impi/shm/core" and f["benchmark"] == "PingPong")["segments"][1]
    r = min(rows, key=lambda r: abs(r["bytes"] - 2**20))
    assert r["t_model_usec"] == pytest.approx(seg["latency_us"] + r["bytes"] / seg["bandwidth_MBps"], rel=1e-4)


def test_dataset_packing_round_trips() -> None:
    rows = [{"series": "a", "bytes": 1, "t": 0.5}, {"series": "a", "bytes": 2, "t": None},
            {"series": None, "bytes": 4, "t": 1.5}, {"series": "a", "bytes": 8, "t": 2.5}]
    packed = pack_dataset(rows)
    assert packed["c"]["series"] == {"d": ["a"], "i": [0, 0, -1, 0]}
    assert unpack_dataset(packed) == rows


def test_collective_best_algorithm() -> None:
    df = pl.DataFrame({
        "label": ["a"] * 3, "benchmark": ["Allreduce"] * 3, "np": [4] * 3, "bytes": [1024] * 3,
        "algorithm": ["default", "ring", "rd"], "t_median_usec": [10.0, 5.0, 8.0],
        "t_ci_low_usec": [9.5, 4.8, 7.5], "t_ci_high_usec": [10.5, 5.2, 8.5],
    })
    best = best_algorithms(df).row(0, named=True)
    assert best["best"] == "ring" and best["speedup"] == pytest.approx(2.0) and best["separated"] is True


def test_collectives_section(built: tuple[str, list, Path]) -> None:
    html, _, _ = built
    coll = _section(html, "collectives")
    assert "Allreduce" in coll and "Barrier" in coll
    assert "algorithm choice vs default" in coll


def test_provenance_section(built: tuple[str, list, Path]) -> None:
    html, _, _ = built
    prov = _section(html, "provenance")
    assert "<details>" in prov
    assert "mpirun -np 2 -genv I_MPI_FABRICS shm IMB-MPI1 PingPong -msglog 0:22" in prov
    assert "I_MPI_PIN_PROCESSOR_LIST" in prov
    assert "L3 32 MiB" in prov
    assert "2021.14" in prov and "5.0.6" in prov


def test_missing_fits_still_builds(tmp_path: Path) -> None:
    tidy, _, _ = make_inputs(tmp_path)
    out = build_report(tidy, tmp_path / "no-such-fits", tmp_path / "r.html", now=NOW)
    html = out.read_text(encoding="utf-8")
    assert "No fits" in _section(html, "parameters")
    assert "No fits" in _section(html, "p2p")
    assert html.count("window.vegaEmbed=") == 1  # measured charts are still drawn


def test_everything_missing_still_builds(tmp_path: Path) -> None:
    out = build_report(tmp_path / "nothing", None, tmp_path / "r.html", now=NOW)
    html = out.read_text(encoding="utf-8")
    assert "cells.parquet is missing" in html
    assert "provenance.json is missing" in html
    assert "window.vegaEmbed=" not in html  # no charts: no bundle


def test_missing_summary_is_recomputed_from_samples(tmp_path: Path) -> None:
    tidy, fits_dir, _ = make_inputs(tmp_path)
    (tidy / "imb_summary.parquet").unlink()
    html = build_report(tidy, fits_dir, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8")
    assert "recomputed from the samples" in html
    assert len(_specs(html)) >= 4


def test_broken_section_does_not_break_report(tmp_path: Path) -> None:
    def section_boom(data: ReportData) -> Section:
        raise RuntimeError("kaboom <b>")

    data = load_data(None, None, now=NOW)
    sections = build_sections(data, [section_header, section_boom])
    html = render_html(data, sections)
    assert "kaboom &lt;b&gt;" in html and "Campaign" in html


def test_sections_are_registered_in_order() -> None:
    names = [f.__name__ for f in ORDER]
    # Findings open the report; then the campaign, its history, and the sections in their fixed order.
    assert names[:7] == ["section_findings", "section_header", "section_history", "section_p2p",
                         "section_parameters", "section_p2p_regions", "section_collectives"]
    assert names.index("section_cells") < names.index("section_provenance")


def test_formatting() -> None:
    assert fmt_num(0.2134) == "0.213"
    assert fmt_num(11800.4) == "11,800"
    assert fmt_num(None) == "—"
    assert fmt_bytes(65536) == "64 KiB"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_binding('{"0": [0, 1, 2], "1": [4]}') == "0:0-2 1:4"


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, list[HockneyRecord]]:
    """make_inputs' samples summarised by mpiatlas.stats.aggregate and fitted by mpiatlas.models.hockney,
    the page built by ``mpiatlas report`` (main(argv) in-process): (exit status, page, fits). One
    build (~1.5 s) serves the CLI test and the test that the report reads what those modules write."""
    from mpiatlas.stats import aggregate
    from mpiatlas.models import hockney

    root = tmp_path_factory.mktemp("real-report")
    tidy, fits_dir, _ = make_inputs(root)
    samples = pl.read_parquet(tidy / "imb_samples.parquet")
    aggregate.summarize(samples).write_parquet(tidy / "imb_summary.parquet")
    fits = hockney.fit_hockney_table(samples, ["label", "stack", "transport", "mapping", "np", "algorithm"])
    (fits_dir / "hockney.json").write_text(json.dumps([f.to_json() for f in fits]))
    out = root / "results" / "report.html"
    status = main(["report", "--tidy", str(tidy), "--fits", str(fits_dir), "--out", str(out), "--title", "T"])
    return status, out, fits


def test_cli(real_report: tuple[int, Path, list[dict[str, Any]]]) -> None:
    status, out, _ = real_report
    assert status == 0
    assert out.is_file()


def test_unfitted_benchmark_is_said(built: tuple[str, list, Path]) -> None:
    html, _, _ = built
    p2p = _section(html, "p2p")
    assert "hockney.json has no fit for Sendrecv" in p2p
    assert "The Hockney fit failed for these series" in p2p


def test_with_the_real_aggregate_and_fit(real_report: tuple[int, Path, list[HockneyRecord]]) -> None:
    """The report reads what mpiatlas.stats.aggregate and mpiatlas.models.hockney actually write."""
    _, out, fits = real_report
    html = out.read_text(encoding="utf-8")
    params = _section(html, "parameters")
    assert "could not be built" not in html
    for f in fits:
        if f.error is None:
            assert fmt_num(f.latency_us) in params
    assert len(_specs(html)) == 12


def _mark(layer: dict[str, Any]) -> str | None:
    m = layer.get("mark")
    return m.get("type") if isinstance(m, dict) else m


def _rows(spec: dict[str, Any], view: dict[str, Any]) -> list[dict[str, Any]]:
    name = (view.get("data") or spec.get("data") or {}).get("name")
    return spec["datasets"][name] if name else []


def test_region_section_cache_rules_and_intra_inter(built: tuple[str, list, Path]) -> None:
    html, _, out = built
    sec = _section(html, "p2p-regions")
    ids = re.findall(r'id="(chart-\d+)"', sec)
    assert len(ids) == 2  # PingPong and PingPing
    spec = _specs(html)[ids[0]]
    for panel in spec["hconcat"]:  # latency and bandwidth both carry the cache rules
        rules = [r for lay in panel["layer"] if _mark(lay) == "rule" for r in _rows(spec, lay)]
        assert sorted(r["bytes"] for r in rules) == [CACHES["L1d"], CACHES["L2"]]
        labels = {r["label"] for lay in panel["layer"] if _mark(lay) == "text" for r in _rows(spec, lay)}
        assert labels == {"L1d 32 KiB", "L2 512 KiB"}
    assert "not drawn: L3 32 MiB" in sec  # beyond the 4 MiB largest message: named, not drawn
    series = {r["series"] for lay in spec["hconcat"][0]["layer"] for r in _rows(spec, lay) if "series" in r}
    assert {"impi/shm · same_l3", "impi/tcp · other_node", "ompi/tcp · same_l3"} <= series

    # The table's ratios, recomputed independently from the samples.
    smp = pl.read_parquet(out.parent.parent / "tidy" / "imb_samples.parquet").filter(
        (pl.col("benchmark") == "PingPong") & (pl.col("stack") == "impi"))

    def med(transport: str, m: int, col: str) -> float:
        return smp.filter((pl.col("transport") == transport) & (pl.col("bytes") == m)).get_column(col).median()

    lat = med("tcp", 4, "t_usec") / med("shm", 4, "t_usec")
    bw = med("shm", 4 << 20, "bandwidth_MBps") / med("tcp", 4 << 20, "bandwidth_MBps")
    row = re.search(r"<tr><td>impi</td><td>same stack</td>(.*?)</tr>", sec, re.S)
    assert row, sec
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[:2] == ["shm · same_l3", "tcp · other_node"]
    assert cells[5].startswith(fmt_num(lat) + " [") and cells[9].startswith(fmt_num(bw) + " [")
    assert lat > 50 and bw > 5  # the shm/tcp gap of the fixture's Hockney parameters
    assert "impi: shm (same_l3) within a node, tcp across nodes" in sec
    assert "<td>ompi</td>" not in sec  # ompi has no inter-node run


def test_collective_heatmaps_per_algorithm(built: tuple[str, list, Path]) -> None:
    """Issue #4: latency heatmaps over (size × np) per algorithm, and the best algorithm per cell."""
    html, _, out = built
    specs = {json.dumps(s.get("title")): s for s in _specs(html).values()}
    heat = specs['"Allreduce: latency over (size, np)"']
    assert heat["facet"]["column"]["field"] == "algorithm"
    enc = heat["spec"]["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"], enc["color"]["field"]) == ("size", "np", "t_median_usec")
    rows = _rows(heat, heat)
    for alg in COLL["Allreduce"]:
        for np_ in (2, 4, 8):
            cells = [r for r in rows if r["algorithm"] == alg and r["np"] == np_ and r["label"] == "impi/shm/core"]
            assert sorted(r["bytes"] for r in cells) == COLL_SIZES

    summ = pl.read_parquet(out.parent.parent / "tidy" / "imb_summary.parquet").filter(
        pl.col("benchmark") == "Allreduce")
    expected = best_algorithms(summ)
    best = _rows(specs['"Allreduce: fastest algorithm per (size, np)"'],
                 specs['"Allreduce: fastest algorithm per (size, np)"'])
    assert len(best) == expected.height == 4 * 3 * len(COLL_SIZES)
    got = {(r["label"], r["np"], r["bytes"]): (r["best"], r["speedup"]) for r in best}
    for r in expected.iter_rows(named=True):
        b, sp = got[(r["label"], r["np"], r["bytes"])]
        assert b == r["best"] and sp == pytest.approx(r["speedup"], rel=1e-4)


# -- what the report shows first: findings, planned notes, suspect cells ----------------------------


def test_findings_open_the_report(built: tuple[str, list, Path]) -> None:
    html, _, out = built
    assert html.index('<section id="findings">') < html.index('<section id="header">')
    findings = [unescape(li) for li in re.findall(r"<li>(.*?)</li>", _section(html, "findings"), re.S)]
    tidy = out.parent.parent / "tidy"
    summ = pl.read_parquet(tidy / "imb_summary.parquet").filter(pl.col("benchmark") == "PingPong")

    def t_at(label: str, m: int) -> float:
        return summ.filter((pl.col("label") == label) & (pl.col("bytes") == m)).get_column("t_median_usec").item()

    at4 = sorted((t_at(lab, 4), lab) for lab in LABELS)
    (t_fast, fast), (t_slow, slow) = at4[0], at4[-1]
    assert findings[0] == (f"IMB PingPong at 4 B: fastest {fast} ({fmt_num(t_fast)} µs), slowest {slow} "
                           f"({fmt_num(t_slow)} µs, {fmt_num(t_slow / t_fast)}× the fastest's time).")
    assert fast == "impi/shm/core" and slow == "impi/tcp/node"
    shm, tcp = t_at("impi/shm/core", 4), t_at("impi/tcp/node", 4)
    assert (f"impi, IMB PingPong at 4 B: shared memory {fmt_num(shm)} µs (impi/shm/core) on one node vs TCP "
            f"{fmt_num(tcp)} µs (impi/tcp/node): TCP takes {fmt_num(tcp / shm)}× the shared-memory time.") in findings
    cells = pl.read_parquet(tidy / "cells.parquet")
    failed = cells.filter(pl.col("status") == "failed").get_column("cell").sort().to_list()
    assert f"1 of {cells.height} cells failed; the first ({failed[0]}): {FAILED_REASON}." in findings
    assert (f"1 of {cells.height} cells were unavailable; the first (impi-{cells.height - 1:04d}): mapping 'socket' "
            "needs 2 packages.") in findings
    assert "Not planned" not in html  # no notes.json: every cell was planned


def _kernel_rows(cell_id: str, label: str) -> list[dict[str, Any]]:
    stack, transport, mapping = label.split("/")
    return [{"cell_quality": "ok", "cell": cell_id, "label": label, "stack": stack, "transport": transport, "mapping": mapping,
             "cell_status": "ok", "rep": 0, "np": 2, "rank": rank, "bytes": m, "iterations": 100,
             "t_usec": 0.4 + m / 6000, "t_min_usec": 0.38 + m / 6000, "MBps": m / (0.4 + m / 6000) if m else None,
             "valid": True} for rank in (0, 1) for m in (0, 4, 1024, 65536, 4 << 20)]


def test_kernel_cells_are_judged_by_their_kernel_table(tmp_path: Path) -> None:
    """Issue: every kernel cell was listed as "status ok but no parsed samples" (only IMB samples counted)."""
    tidy, fits_dir, _ = make_inputs(tmp_path)
    cells = pl.read_parquet(tidy / "cells.parquet")
    kernel_ids = [f"kernel/ompi/ob1-vader/core/np2/pingpong/m0-22/rep{r}" for r in range(3)]
    imb_ok = cells.filter(pl.col("status") == "ok").get_column("cell").sort().to_list()
    extra = pl.DataFrame({"cell": kernel_ids, "stack": ["ompi"] * 3, "transport": ["ob1-vader"] * 3,
                          "mapping": ["core"] * 3, "np": [2] * 3, "benchmark": ["pingpong"] * 3, "rep": [0, 1, 2],
                          "status": ["ok"] * 3, "kind": ["kernel"] * 3},
                         schema_overrides={"np": pl.Int32, "rep": pl.Int32})
    pl.concat([cells.with_columns(pl.lit("imb").alias("kind")), extra], how="diagonal_relaxed").write_parquet(
        tidy / "cells.parquet")
    # Rows for the first two kernel cells only; one IMB cell loses its samples.
    pl.DataFrame([r for c in kernel_ids[:2] for r in _kernel_rows(c, "ompi/ob1-vader/core")]).write_parquet(
        tidy / "kernel_pingpong.parquet")
    smp = pl.read_parquet(tidy / "imb_samples.parquet")
    smp.filter(pl.col("cell") != imb_ok[0]).write_parquet(tidy / "imb_samples.parquet")

    header = _section(build_report(tidy, fits_dir, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8"),
                      "header")
    notice = re.search(r"<p>(\d+) cells completed but their results are suspect:</p>\s*<ul>(.*?)</ul>", header, re.S)
    assert notice, header
    items = [unescape(li) for li in re.findall(r"<li>(.*?)</li>", notice.group(2), re.S)]
    assert notice.group(1) == "2" and len(items) == 2
    assert items[0].startswith(f"{imb_ok[0]} (") and items[0].endswith("status ok but no rows in its IMB samples")
    assert items[1] == (f"{kernel_ids[2]} (ompi/ob1-vader/core np=2 pingpong rep=2): status ok but no rows in its "
                        "kernel table")


def test_planned_notes_are_shown_once_in_a_neutral_notice(tmp_path: Path) -> None:
    tidy, fits_dir, _ = make_inputs(tmp_path)
    why = "IMB is built from source, which needs the network"
    (tidy / "notes.json").write_text(json.dumps([
        {"what": "Open MPI <5> IMB cells", "why": why, "cells": 40},
        {"what": "Open MPI <5> IMB cells", "why": why, "cells": 2},  # the same note twice: merged
        {"what": "mpich ucx-tcp", "why": "UCX was built without TCP", "cells": 6},
    ]))
    html = build_report(tidy, fits_dir, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8")
    notice = re.search(r'<div class="notice notice-neutral" role="note">\s*<p>Not planned: (.*?)</div>',
                       _section(html, "findings"), re.S)
    assert notice, _section(html, "findings")
    assert re.findall(r"<li>(.*?)</li>", notice.group(1)) == [
        f"Open MPI &lt;5&gt; IMB cells: {why} (42 cells not planned)",
        "mpich ucx-tcp: UCX was built without TCP (6 cells not planned)"]
    assert html.count("Not planned:") == 1 and "notice-error\" role=\"alert\">\n  <p>Not planned" not in html

    # A malformed entry is said in the header, with no notice. notes.json is read apart from the
    # measurements, so a tidy directory holding only the notes shows it (a full build costs ~1.5 s);
    # a valid note there does give the notice, so its absence is the malformed entry's doing.
    bare = tmp_path / "notes-only"
    bare.mkdir()
    (bare / "notes.json").write_text(json.dumps([{"what": "x", "why": "y", "cells": 1}]))
    assert "Not planned:" in build_report(bare, None, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8")
    (bare / "notes.json").write_text(json.dumps([{"what": "x", "why": "y", "cells": "many"}]))
    html = build_report(bare, None, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8")
    assert "Not planned" not in html
    assert "notes.json: entry 0: &#39;cells&#39; must be an integer &gt;= 0, got &#39;many&#39;; ignored." in \
        _section(html, "header")


def test_report_package_has_no_import_cycle() -> None:
    """The report package's imports (module-level and lazy, read from the AST) form no cycle, no section
    imports another section, and no module exceeds 600 lines."""
    import ast
    import graphlib

    src = Path(__file__).resolve().parents[1] / "src"
    pkg = src / "mpiatlas" / "report"
    files = {".".join(f.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): f for f in pkg.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.level == 0, f"{mod}: relative import"
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[mod] = {t for t in targets if t in files and t != mod}
        assert len(f.read_text(encoding="utf-8").splitlines()) <= 600, f"{mod} is over 600 lines"
        if mod.startswith("mpiatlas.report.sections."):
            assert not {t for t in graph[mod] if t.startswith("mpiatlas.report.sections")}, mod
    assert "mpiatlas.report.sections.findings" in graph and "mpiatlas.report.render" in graph
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    assert order.index("mpiatlas.report.formatting") < order.index("mpiatlas.report.render")


def test_the_glossary_defines_every_figure_from_the_code() -> None:
    """Issue #33: each figure's one definition is in the report, with the code's own thresholds."""
    from mpiatlas.models.hockney import MIN_LAUNCHES
    from mpiatlas.report.sections.glossary import entries, section_glossary

    terms = dict(entries())
    assert {"λ (latency)", "asymptotic B", "peak B", "95 % interval", "perturbed launch", "noisy point"} <= set(terms)
    assert "largest measured size" in terms["asymptotic B"] and "highest effective bandwidth" in terms["peak B"]
    assert f"{MIN_LAUNCHES} or more" in terms["95 % interval"]
    html = render_html(load_data(None, None, now=NOW), build_sections(load_data(None, None, now=NOW), [section_glossary]))
    assert "Glossary" in html and "asymptotic B" in html
