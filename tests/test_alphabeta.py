"""Alltoall / Allgather α-β models over nodes: recovery, refusals, config, CLI, report."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.models.alphabeta import (
    ALLGATHER_M1_NOTE,
    AlphaBetaError,
    Network,
    fit_alphabeta,
    fit_alphabeta_table,
    predict,
)
from mpiatlas.parsers.imb import parse_imb_text
from mpiatlas.report.build import build_report
from mpiatlas.report.data import load_data
from mpiatlas.report.formatting import fmt_ci, fmt_num
from mpiatlas.report.render import full_spec
from mpiatlas.spine.campaign import Network as NetworkBlock

REPO = Path(__file__).resolve().parents[1]
NOW = load_data(None, None).generated

NET = Network("veth", 10.0)  # 1250 bytes/µs
SIZES = [2**i for i in range(0, 23, 2)]  # 1 B … 4 MiB
TRUE = {"Alltoall": (1.8, 40.0), "Allgather": (2.5, 15.0)}  # (α, β µs)
NOISE = 0.05  # multiplicative, lognormal σ
TOL = 0.05  # recovery tolerance on α and β


def synthetic(bench: str, alpha: float, beta: float, *, k: int, nodes: tuple[int, ...] = (1, 2, 3, 4),
              reps: int = 4, seed: int = 0, floor_us: float = 0.5) -> tuple[list[int], list[int], list[float]]:
    """(m, x, t) samples of the model with multiplicative noise; t is floored where the model is 0
    (Allgather at m = 1), as a real on-node copy would be."""
    rng = np.random.default_rng(seed)
    m_out, x_out, t_out = [], [], []
    for m in nodes:
        for x in SIZES:
            t = float(predict(bench, alpha, beta, m, x, k, NET.bytes_per_us)) or floor_us
            for _ in range(reps):
                m_out.append(m)
                x_out.append(x)
                t_out.append(t * float(rng.lognormal(0.0, NOISE)))
    return m_out, x_out, t_out


# -- recovery ------------------------------------------------------------------------------


@pytest.mark.parametrize("bench", ["Alltoall", "Allgather"])
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_known_parameters_are_recovered(bench: str, k: int, seed: int) -> None:
    alpha, beta = TRUE[bench]
    m, x, t = synthetic(bench, alpha, beta, k=k, seed=seed)
    fit = fit_alphabeta(bench, m, x, t, ppn=k, network=NET, seed=seed)
    assert fit.alpha == pytest.approx(alpha, rel=TOL)
    assert fit.beta_us == pytest.approx(beta, rel=TOL)
    assert fit.alpha_ci[0] <= fit.alpha <= fit.alpha_ci[1]
    assert fit.beta_ci_us[0] <= fit.beta_us <= fit.beta_ci_us[1]
    assert fit.ci_method == "repetitions"
    assert fit.rel_rms < 3 * NOISE and fit.r2 is not None and fit.r2 > 0.99
    # m = 1 is shown, not fitted, for both (Allgather: the model is 0 there; Alltoall: an on-node copy).
    assert fit.n_samples == len(SIZES) * 4 * 3


def test_relative_weighting_keeps_the_latency() -> None:
    """β (tens of µs) next to seconds-long 4 MiB points: an absolute fit would lose it, the relative one not."""
    alpha, beta = 1.2, 3.0
    m, x, t = synthetic("Alltoall", alpha, beta, k=8, nodes=(2, 4, 8), seed=5)
    fit = fit_alphabeta("Alltoall", m, x, t, ppn=8, network=NET)
    assert fit.beta_us == pytest.approx(beta, rel=TOL)


def test_single_repetition_uses_the_residual_bootstrap() -> None:
    m, x, t = synthetic("Alltoall", *TRUE["Alltoall"], k=2, reps=1)
    fit = fit_alphabeta("Alltoall", m, x, t, ppn=2, network=NET)
    assert fit.ci_method == "residuals"
    assert fit.alpha == pytest.approx(TRUE["Alltoall"][0], rel=2 * TOL)


def test_bounds_keep_alpha_and_beta_non_negative() -> None:
    # Times that fall with size would want α < 0: the bound holds it at 0.
    m = [2] * 4
    x = [1, 1024, 65536, 1048576]
    t = [100.0, 90.0, 80.0, 70.0]
    fit = fit_alphabeta("Alltoall", m, x, t, ppn=1, network=NET)
    assert fit.alpha == 0.0 and fit.beta_us > 0


# -- m = 1 ---------------------------------------------------------------------------------


def test_allgather_excludes_single_node_points_and_says_so() -> None:
    alpha, beta = TRUE["Allgather"]
    m, x, t = synthetic("Allgather", alpha, beta, k=4, floor_us=500.0)  # m = 1 far off the model
    fit = fit_alphabeta("Allgather", m, x, t, ppn=4, network=NET)
    assert ALLGATHER_M1_NOTE in fit.notes
    assert fit.nodes == [2, 3, 4]
    assert fit.n_points == 3 * len(SIZES)
    single = [p for p in fit.points if p.nodes == 1]
    assert len(single) == len(SIZES) and not any(p.used for p in single)
    assert all(p.rel_err is None for p in single)
    # The m = 1 points did not pull the fit: still recovered.
    assert fit.alpha == pytest.approx(alpha, rel=TOL) and fit.beta_us == pytest.approx(beta, rel=TOL)
    assert "m = 1" in fit.notes[0]


def test_alltoall_shows_single_node_points_without_fitting_them() -> None:
    alpha, beta = TRUE["Alltoall"]
    m, x, t = synthetic("Alltoall", alpha, beta, k=2)
    fit = fit_alphabeta("Alltoall", m, x, t, ppn=2, network=NET)
    assert fit.nodes == [2, 3, 4] and any("m = 1 points shown but not fitted" in n for n in fit.notes)
    at_m1 = [p for p in fit.points if p.nodes == 1]
    assert at_m1 and not any(p.used for p in at_m1)
    assert fit.alpha == pytest.approx(alpha, rel=TOL) and fit.beta_us == pytest.approx(beta, rel=TOL)


def test_allgather_on_one_node_only_is_refused() -> None:
    m, x, t = synthetic("Allgather", *TRUE["Allgather"], k=2, nodes=(1,))
    with pytest.raises(AlphaBetaError, match=r"at least 2 distinct \(m, x\) points, got 0"):
        fit_alphabeta("Allgather", m, x, t, ppn=2, network=NET)


# -- refusals ------------------------------------------------------------------------------


def test_fewer_than_two_points_is_refused() -> None:
    with pytest.raises(AlphaBetaError, match=r"at least 2 distinct \(m, x\) points, got 1"):
        fit_alphabeta("Alltoall", [2, 2, 2], [1024] * 3, [10.0, 11.0, 12.0], ppn=1, network=NET)
    # 0-byte rows are IMB no-op timings: they do not count.
    with pytest.raises(AlphaBetaError, match="got 1"):
        fit_alphabeta("Alltoall", [2, 2], [0, 1024], [0.3, 11.0], ppn=1, network=NET)


def test_alltoall_without_multinode_points_is_refused() -> None:
    with pytest.raises(AlphaBetaError, match="no multi-node"):
        fit_alphabeta("Alltoall", [1, 1, 1], [1, 2, 4], [5.0, 5.1, 5.2], ppn=4, network=NET)


def test_allgather_with_one_size_cannot_tell_alpha_from_beta() -> None:
    # Every point (m, x0): the network and latency terms are both ∝ (m − 1).
    with pytest.raises(AlphaBetaError, match="cannot tell α from β"):
        fit_alphabeta("Allgather", [2, 3, 4], [4096] * 3, [20.0, 40.0, 60.0], ppn=2, network=NET)


def test_bad_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        fit_alphabeta("Alltoall", [2, 2], [1, 2], [1.0, -1.0], ppn=1, network=NET)
    with pytest.raises(ValueError, match="no α-β model"):
        fit_alphabeta("Bcast", [2, 2], [1, 2], [1.0, 2.0], ppn=1, network=NET)
    with pytest.raises(ValueError, match="> 0 Gbit/s"):
        Network("x", 0.0)


# -- samples tables ------------------------------------------------------------------------


def samples_table(*, nodes_col: bool = True, extra_mapping: str | None = None) -> pl.DataFrame:
    """Pipeline-shaped samples: intelmpi/ofi-tcp Alltoall + Allgather at k = 2 over m = 1..3, 3 reps."""
    rows: list[dict[str, Any]] = []
    for bench, (alpha, beta) in TRUE.items():
        m_, x_, t_ = synthetic(bench, alpha, beta, k=2, nodes=(1, 2, 3), reps=3, seed=3)
        rep_of: dict[tuple[int, int], int] = {}
        for m, x, t in zip(m_, x_, t_):
            rep = rep_of[(m, x)] = rep_of.get((m, x), -1) + 1
            for mapping in (["core"] + ([extra_mapping] if extra_mapping else [])) if m == 1 else ["node"]:
                rows.append({"benchmark": bench, "bytes": x, "t_usec": t * 0.97, "t_max_usec": t,
                             "t_avg_usec": t * 0.97, "status": "ok", "cell_status": "ok", "processes": 2 * m,
                             "stack": "intelmpi", "transport": "ofi-tcp", "mapping": mapping, "np": 2 * m,
                             "algorithm": "default", "rep": rep, "nodes": m, "ppn": 2,
                             "label": f"intelmpi/ofi-tcp/{mapping}", "oversubscribed": False})
        # IMB's 0-byte row and a -npmin table at fewer processes: both ignored.
        rows.append({**rows[-1], "bytes": 0, "t_max_usec": 0.2, "t_usec": 0.2})
        rows.append({**rows[-2], "processes": 2, "t_max_usec": 1e6, "t_usec": 1e6})
    df = pl.DataFrame(rows).with_columns(pl.col("np", "rep", "nodes", "ppn", "processes").cast(pl.Int32))
    return df if nodes_col else df.drop("nodes", "ppn")


def test_table_fits_each_series() -> None:
    result = fit_alphabeta_table(samples_table(), NET)
    assert result.network == NET and result.time_column.startswith("t_max_usec")
    fits = {f.benchmark: f for f in result.fits}
    assert set(fits) == {"Alltoall", "Allgather"}
    for bench, (alpha, beta) in TRUE.items():
        f = fits[bench]
        assert f.stack == "intelmpi" and f.transport == "ofi-tcp" and f.ppn == 2
        assert f.alpha == pytest.approx(alpha, rel=TOL) and f.beta_us == pytest.approx(beta, rel=TOL)
        assert f.bandwidth_gbit_s == 10.0 and f.formula.startswith("t = ")
        assert all(p.bytes > 0 for p in f.points)
    assert fits["Allgather"].nodes == (2, 3) and fits["Alltoall"].nodes == (2, 3)
    document = result.to_json()
    assert document["network"] == {"name": "veth", "bandwidth_gbit_s": 10.0, "bandwidth_bytes_per_s": 1.25e9}
    json.dumps(document, allow_nan=False)  # JSON-clean


def test_table_prefers_the_core_baseline_and_refuses_ambiguous_ones() -> None:
    # A second single-node mapping next to core: core is the m = 1 baseline, no note.
    fits = fit_alphabeta_table(samples_table(extra_mapping="socket"), NET).to_json()["fits"]
    alltoall = next(f for f in fits if f["benchmark"] == "Alltoall")
    assert alltoall["nodes"] == [2, 3]
    assert not any("several single-node mappings" in n for n in alltoall["notes"])
    # Two single-node mappings and no core: m = 1 is left out, and the entry says why.
    df = samples_table(extra_mapping="socket").with_columns(
        pl.when(pl.col("mapping") == "core").then(pl.lit("numa")).otherwise(pl.col("mapping")).alias("mapping"))
    alltoall = next(f for f in fit_alphabeta_table(df, NET).to_json()["fits"] if f["benchmark"] == "Alltoall")
    assert alltoall["nodes"] == [2, 3]
    assert any("several single-node mappings (numa, socket)" in n for n in alltoall["notes"])


def test_old_tables_without_nodes_are_single_node_and_not_fitted() -> None:
    result = fit_alphabeta_table(samples_table(nodes_col=False), NET).to_json()
    assert result["fits"] == []
    assert "measured on one node only" in result["notes"][0]


def test_table_refusal_is_an_entry_not_a_crash() -> None:
    df = samples_table().filter((pl.col("nodes") == 1) | ((pl.col("nodes") == 2) & (pl.col("bytes") == 1024)))
    fits = fit_alphabeta_table(df.filter(pl.col("benchmark") == "Allgather"), NET).to_json()["fits"]
    assert len(fits) == 1 and "error" in fits[0]
    assert "at least 2 distinct (m, x) points, got 1" in fits[0]["error"]


def test_invalid_cells_are_left_out() -> None:
    df = samples_table().with_columns(
        pl.when(pl.col("nodes") == 3).then(pl.lit("invalid")).otherwise(pl.lit("ok")).alias("cell_status"))
    fits = fit_alphabeta_table(df, NET).to_json()["fits"]
    assert all(3 not in f["nodes"] for f in fits)


# -- config schema -------------------------------------------------------------------------


def _config() -> dict[str, Any]:
    """The default config with concrete lists where it says ``auto`` (validate() plans nothing)."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return doc | {"mappings": ["core"], "processes": [2]}


def test_network_block_defaults() -> None:
    cfg = _config()
    cfg.pop("network", None)
    net = validate(cfg).network
    assert net == NetworkBlock(name="nominal link", bandwidth_gbit_s=10)
    cfg["network"] = {"bandwidth_gbit_s": 100}
    assert validate(cfg).network == NetworkBlock(name="nominal link", bandwidth_gbit_s=100)


@pytest.mark.parametrize(("network", "expected"), [
    ({"bandwidth_gbit_s": 0}, "network.bandwidth_gbit_s: 0 is less than or equal to the minimum of 0"),
    ({"bandwidth_gbit_s": "fast"}, "network.bandwidth_gbit_s: 'fast' is not of type 'number'"),
    ({"name": ""}, "network.name:"),
    ({"speed": 10}, "network: Additional properties are not allowed ('speed'"),
])
def test_bad_network_values_name_the_key(network: dict[str, Any], expected: str) -> None:
    cfg = copy.deepcopy(_config())
    cfg["network"] = network
    with pytest.raises(ConfigError) as err:
        validate(cfg, "my.yaml")
    assert expected in str(err.value) and "my.yaml" in str(err.value)


# -- CLI -----------------------------------------------------------------------------------


def test_cli_writes_the_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples_table().write_parquet(tmp_path / "imb_samples.parquet")
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--bandwidth-gbit-s", "10", "--network-name", "veth",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["network"]["name"] == "veth"
    assert {f["benchmark"] for f in result["fits"]} == {"Alltoall", "Allgather"}
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--bandwidth-gbit-s", "10"]) == 0
    assert "α-β models over nodes" in capsys.readouterr().out


def test_cli_needs_the_bandwidth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples_table().write_parquet(tmp_path / "imb_samples.parquet")
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--json"]) == 2
    assert "--bandwidth-gbit-s" in capsys.readouterr().err
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--bandwidth-gbit-s", "-1"]) == 2
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--bandwidth-gbit-s", "1", "--benchmark",
                 "Bcast"]) == 2


def test_cli_single_node_campaign_gives_an_empty_valid_file(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    samples_table(nodes_col=False).write_parquet(tmp_path / "imb_samples.parquet")
    assert main(["fit", str(tmp_path), "--model", "alphabeta", "--bandwidth-gbit-s", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] == []


# -- report --------------------------------------------------------------------------------


def _section(html: str, sid: str) -> str | None:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    return m.group(1) if m else None


def _report(tmp_path: Path, samples: pl.DataFrame, result: dict[str, Any] | None) -> str:
    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir(parents=True)
    fits.mkdir(parents=True)
    samples.write_parquet(tidy / "imb_samples.parquet")
    if result is not None:
        (fits / "alphabeta.json").write_text(json.dumps(result, allow_nan=False))
    return build_report(tidy, fits, tmp_path / "r.html", now=NOW).read_text(encoding="utf-8")


def test_report_section_with_fits(tmp_path: Path) -> None:
    import vl_convert

    samples = samples_table().with_columns(pl.lit("<b>evil</b>").alias("transport"))
    result = fit_alphabeta_table(samples, Network("veth & co", 10.0)).to_json()
    result["fits"].append({"stack": "x", "transport": "y", "algorithm": "default", "benchmark": "Alltoall",
                           "ppn": 8, "model": "alltoall", "error": "need at least 2 distinct (m, x) points, got 1",
                           "notes": []})
    html = _report(tmp_path, samples, result)
    sec = _section(html, "alphabeta")
    assert sec is not None and "could not be built" not in sec
    assert "Alltoall / Allgather over nodes (α-β model)" in html
    assert "<b>evil</b>" not in html and "&lt;b&gt;evil&lt;/b&gt;" in sec
    assert "veth &amp; co" in sec
    for f in result["fits"]:
        if "error" in f:
            assert "not fitted: need at least 2 distinct (m, x) points" in sec
            continue
        assert fmt_num(f["alpha"]) in sec and fmt_num(f["beta_us"]) in sec
        assert fmt_ci(f["alpha_ci"]) in sec
    assert "m = 1 points excluded from the fit" in sec
    specs = re.findall(r'id="(chart-\d+)"', sec)
    assert len(specs) == 2  # one chart per fitted series (with its residuals)
    m = re.search(r'<script type="application/json" id="mpiatlas-specs">(.*?)</script>', html, re.S)
    d = re.search(r'<script type="application/json" id="mpiatlas-data">(.*?)</script>', html, re.S)
    assert m and d
    store = json.loads(d.group(1))
    all_specs = json.loads(m.group(1))
    for cid in specs:
        spec = full_spec(all_specs[cid], store)
        text = json.dumps(spec)
        assert "speed of light" in text
        assert vl_convert.vegalite_to_svg(spec).lstrip().startswith("<svg")


def test_report_section_without_fits(tmp_path: Path) -> None:
    samples = samples_table(nodes_col=False)
    # A single-node campaign: the fit file holds no fits -> the section says so.
    result = fit_alphabeta_table(samples, NET).to_json()
    sec = _section(_report(tmp_path / "a", samples, result), "alphabeta")
    assert sec is not None and "nothing fitted" in sec and "measured on one node only" in sec
    # No file and no multi-node samples: no section at all; with multi-node samples: a warning.
    assert _section(_report(tmp_path / "b", samples, None), "alphabeta") is None
    sec = _section(_report(tmp_path / "c", samples_table(), None), "alphabeta")
    assert sec is not None and "alphabeta.json is missing" in sec
    # A malformed file is reported, not fatal.
    sec = _section(_report(tmp_path / "d", samples, [1, 2]), "alphabeta")  # type: ignore[arg-type]
    assert sec is not None and "not an α-β fits object" in sec


# -- real data -----------------------------------------------------------------------------

def _juno() -> Path:
    return require_datasets() / "brandino-juno-arm-imb41" / "data"


def _alaska() -> Path:
    return require_datasets() / "stackhpc-alaska-csd3-imb-omb" / "output" / "alaska" / "ib-gcc9-openmpi4-ucx" / "omb"


def test_juno_two_boards_over_gigabit_ethernet() -> None:
    """IMB 4.1 Alltoall/Allgather between two ARM Juno boards, 1 rank each (m = 2, k = 1), 1 GbE.

    PingPong there peaks at 108 MiB/s ≈ 0.91 of the 125 MB/s line and its 0-byte latency is
    156 µs (PROVENANCE.md): α must be ≥ 1 and of order 1, β some hundreds of µs. The intranode
    file (m = 1, k = 2) is a different k: reported as single-node, not fitted.
    """
    frames = []
    for name, transport, nodes, ppn, mapping in [("IMB-MPI1_internode.txt", "tcp", 2, 1, "node"),
                                                 ("IMB-MPI1_internode_Socket.txt", "unimem", 2, 1, "node"),
                                                 ("IMB-MPI1_intranode.txt", "tcp", 1, 2, "core")]:
        s = parse_imb_text((_juno() / name).read_text(), name)
        frames.append(s.with_columns(
            pl.lit("ompi165").alias("stack"), pl.lit(transport).alias("transport"), pl.lit(mapping).alias("mapping"),
            pl.lit(2, dtype=pl.Int32).alias("np"), pl.lit("default").alias("algorithm"),
            pl.lit(nodes, dtype=pl.Int32).alias("nodes"), pl.lit(ppn, dtype=pl.Int32).alias("ppn")))
    result = fit_alphabeta_table(pl.concat(frames, how="diagonal_relaxed"), Network("1GbE", 1.0)).to_json()
    assert len(result["fits"]) == 4
    assert "2 Alltoall/Allgather series measured on one node only" in result["notes"][0]
    for f in result["fits"]:
        assert "error" not in f, f
        assert f["nodes"] == [2] and f["ppn"] == 1 and f["ci_method"] == "residuals"
        assert 1.0 <= f["alpha"] <= 3.0
        assert 150.0 <= f["beta_us"] <= 400.0
        top = max(f["points"], key=lambda p: p["bytes"])
        assert top["bytes"] == 4 * 2**20 and abs(top["rel_err"]) < 0.15  # bandwidth regime
        assert top["measured_us"] > top["speed_of_light_us"]  # nothing beats the line


def _osu(path: Path) -> tuple[list[int], list[float]]:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows]


def test_alaska_two_nodes_32_ranks_each_over_hdr100() -> None:
    """OSU 5.6.2 osu_alltoall / osu_allgather, 2 nodes × 32 ranks (perflog: procs_per_node=32), HDR100.

    Alltoall pushes 32² blocks per node through one 100 Gbit/s link: α of order 1, ≥ 1. Allgather
    moves only 32 blocks per node over the link but every rank copies 63 blocks on-node: the link is
    not the bottleneck, and α ≫ 1 says so.
    """
    ib = Network("HDR100", 100.0)
    x, t = _osu(_alaska() / "Osu_alltoall" / "rfm_Osu_alltoall_job.out")
    alltoall = fit_alphabeta("Alltoall", [2] * len(x), x, t, ppn=32, network=ib)
    assert 1.0 <= alltoall.alpha <= 2.5
    assert alltoall.r2 is not None and alltoall.r2 > 0.9
    x, t = _osu(_alaska() / "Osu_allgather" / "rfm_Osu_allgather_job.out")
    allgather = fit_alphabeta("Allgather", [2] * len(x), x, t, ppn=32, network=ib)
    assert allgather.alpha > 10 * alltoall.alpha
    assert allgather.r2 is not None and allgather.r2 > 0.9


# -- series kept apart -------------------------------------------------------------------------


def _settings_table(settings: dict[tuple[str, str, str], tuple[float, float]]) -> pl.DataFrame:
    """Pipeline-shaped Alltoall samples of one stack/transport/algorithm at k = 2 over m = 1..3, one
    series per (IMB options, knob set, placement) with its own true (α, β); the m = 1 rows carry
    no placement (one node), as the cells table has it."""
    rows: list[dict[str, Any]] = []
    for i, ((options, knobs, placement), (alpha, beta)) in enumerate(settings.items()):
        m_, x_, t_ = synthetic("Alltoall", alpha, beta, k=2, nodes=(1, 2, 3), reps=3, seed=10 + i)
        rep_of: dict[tuple[int, int], int] = {}
        for m, x, t in zip(m_, x_, t_):
            rep = rep_of[(m, x)] = rep_of.get((m, x), -1) + 1
            mapping = "core" if m == 1 else "node"
            segs = (f"{options}/" if options else "") + (f"knobs={knobs}/" if knobs else "") + (
                f"placement={placement}/" if placement == "block" and m > 1 else "")
            cell = f"imb/intelmpi/ofi-tcp/{mapping}{m if m > 1 else ''}/np{2 * m}/Alltoall/default/{segs}rep{rep}"
            rows.append({"cell": cell, "benchmark": "Alltoall", "bytes": x, "t_usec": t, "t_max_usec": t,
                         "status": "ok", "cell_status": "ok", "processes": 2 * m, "stack": "intelmpi",
                         "transport": "ofi-tcp", "mapping": mapping, "np": 2 * m, "algorithm": "default",
                         "options": options, "knobs": knobs, "rep": rep, "nodes": m, "ppn": 2})
    return pl.DataFrame(rows).with_columns(pl.col("np", "rep", "nodes", "ppn", "processes").cast(pl.Int32))


def test_knob_sets_options_and_placements_are_fitted_apart(tmp_path: Path) -> None:
    # Four settings of one stack/transport/algorithm, each with its own truth: pooled, one fit would
    # describe none of them (α from 1.2 to 3.0, β from 10 to 60 µs).
    truth = {("", "", "cyclic"): (1.2, 10.0), ("", "eager", "cyclic"): (3.0, 60.0),
             ("off_cache=-1", "", "cyclic"): (2.0, 25.0), ("", "", "block"): (1.5, 40.0)}
    result = fit_alphabeta_table(_settings_table(truth), NET).to_json()
    fits = {(f["options"], f["knobs"], f["placement"]): f for f in result["fits"]}
    assert set(fits) == set(truth) and all("error" not in f for f in fits.values())
    for key, (alpha, beta) in truth.items():
        f = fits[key]
        assert f["alpha"] == pytest.approx(alpha, rel=TOL) and f["beta_us"] == pytest.approx(beta, rel=TOL), key
        assert f["nodes"] == [2, 3] and f["ppn"] == 2
        # The chosen model's α and β per size, one row per size (their values: the next test).
        assert f["per_size"]["model"] == f["best_model"] == "alltoall"
        assert [r["bytes"] for r in f["per_size"]["rows"]] == SIZES
    # m = 1 (no placement) is the baseline of every placement of its series: shown, not fitted.
    assert all(any(p["nodes"] == 1 and not p["used"] for p in f["points"]) for f in fits.values())
    # The report's section names each setting beside its own α.
    sec = _section(_report(tmp_path, _settings_table(truth), result), "alphabeta")
    assert sec is not None and "Options · knobs · placement" in sec
    for name, key in (("knobs=eager · cyclic", ("", "eager", "cyclic")), ("off_cache=-1 · cyclic", ("off_cache=-1", "", "cyclic")),
                      ("intelmpi · ofi-tcp · block · k = 2", ("", "", "block"))):
        assert name in sec and fmt_num(fits[key]["alpha"]) in sec, name


def test_per_size_alpha_and_beta_recover_the_truth_of_each_knob_set() -> None:
    truth = {("", "", "cyclic"): (1.2, 10.0), ("", "eager", "cyclic"): (3.0, 60.0)}
    fits = {f["knobs"]: f for f in fit_alphabeta_table(_settings_table(truth), NET).to_json()["fits"]}
    for (_, knobs, _), (alpha, beta) in truth.items():
        f = fits[knobs]
        assert f["best_model"] == "alltoall" and f["per_size"]["model"] == "alltoall"
        rows = f["per_size"]["rows"]
        # Two node counts per size: a free fit would interpolate them, so β is held and α is the size's own.
        assert all(r["beta_fixed"] and r["n_points"] == 2 for r in rows)
        network_us = {r["bytes"]: alpha * r["bytes"] * 2 * 2**2 / NET.bytes_per_us for r in rows}  # at m = 3
        # Where the link term is at least β, each size's α is within 15 % of the truth (3 reps, 5 % noise).
        wide = [r for r in rows if network_us[r["bytes"]] >= beta]
        assert len(wide) >= 4
        for r in wide:
            assert r["alpha"] == pytest.approx(alpha, rel=0.15), (knobs, r["bytes"])
            assert r["alpha_ci"][0] <= r["alpha"] <= r["alpha_ci"][1]
        # Where it is under a tenth of β, the β each size implies at the all-size α is within 15 % of the truth.
        narrow = [r for r in rows if network_us[r["bytes"]] < 0.1 * beta]
        assert len(narrow) >= 3
        for r in narrow:
            assert r["beta_at_alpha_us"] == pytest.approx(beta, rel=0.15), (knobs, r["bytes"])
            lo, hi = r["beta_at_alpha_ci_us"]
            assert lo <= r["beta_at_alpha_us"] <= hi
