"""Fits written by the library: `mpiatlas.models.fits.fit_all` on recorded and synthetic tidy tables, the
fits files written from it and checked against their schemas, and `mpiatlas fit --model all
--out-dir` (the workflow's fit rule runs the same two calls): each file exactly what
`--model <model> --json` prints, the kernel models on the fresh Hockney fits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.models.fits import FitError, FitOptions, TidyTables, fit_all, read_fits, write_fits
from mpiatlas.models import kernels as kernel_models
from mpiatlas.models.fits_files import FILES, MODELS, FitsFileError, problems, read, schema
from mpiatlas.parsers.imb import parse_imb_text

LABEL = "impi/shm/core"
SIZES = [2**k for k in range(1, 23)]
LAMBDA, BW = 1.0, 8000.0  # µs, MB/s (bytes/µs) of the IMB PingPong samples
ASYMPTOTIC = SIZES[-1] / (LAMBDA + SIZES[-1] / BW)  # s/t at the largest size, 4 MiB: the asymptotic B


@pytest.fixture
def few_bootstraps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer (still real) bootstrap replicates of the kernel models: no interval is asserted here."""
    monkeypatch.setattr(kernel_models, "N_BOOT", 40)


def tidy_dir(tmp_path: Path) -> Path:
    """IMB PingPong samples (t = λ + s/B, 3 repetitions) and the pingpong kernel's rows of the same
    stack/transport/mapping, as `mpiatlas tidy` writes them."""
    rng = np.random.default_rng(5)
    imb, kernel = [], []
    for rep in range(3):
        for s in SIZES:
            t = (LAMBDA + s / BW) * (1.0 + 0.01 * rng.standard_normal())
            imb.append({"label": LABEL, "stack": "impi", "transport": "shm", "mapping": "core", "np": 2,
                        "algorithm": None, "rep": rep, "benchmark": "PingPong", "bytes": s, "t_usec": t,
                        "status": "ok"})
            for rank in (0, 1):
                kt = 0.8 * t if rank == 0 else 4 * t
                kernel.append({"label": LABEL, "stack": "impi", "transport": "shm", "mapping": "core",
                               "cell_status": "ok", "cell_quality": "ok", "cell": f"kernel/{LABEL}/np2/pingpong/m0-22/rep{rep}",
                               "rep": rep, "np": 2, "rank": rank, "bytes": s, "iterations": 100, "t_usec": kt,
                               "t_min_usec": 0.9 * kt, "MBps": s / kt, "valid": True, "oversubscribed": False})
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    pl.DataFrame(imb).write_parquet(tidy / "imb_samples.parquet")
    pl.DataFrame(kernel).write_parquet(tidy / "kernel_pingpong.parquet")
    return tidy


# Two ARM Juno boards over 1 GbE, IMB 4.1 (brandino-juno-arm-imb41, PROVENANCE.md): the expectations
# are those of test_hockney (λ, B of PingPong) and test_alphabeta (α, β over two nodes).
JUNO = [("IMB-MPI1_internode.txt", "tcp", 2, 1, "node"), ("IMB-MPI1_internode_Socket.txt", "unimem", 2, 1, "node"),
        ("IMB-MPI1_intranode.txt", "tcp", 1, 2, "core")]
BW_TOL_REAL = 0.03  # fitted asymptotic B vs the published 4 MiB plateau (test_hockney)


def juno_tidy(tmp_path: Path) -> Path:
    """The Juno IMB files as a tidy directory's samples table (the cell columns a campaign sets)."""
    data = require_datasets() / "brandino-juno-arm-imb41" / "data"
    frames = []
    for name, transport, nodes, ppn, mapping in JUNO:
        s = parse_imb_text((data / name).read_text(), name)
        frames.append(s.with_columns(
            pl.lit(f"ompi165/{transport}/{mapping}").alias("label"), pl.lit("ompi165").alias("stack"),
            pl.lit(transport).alias("transport"), pl.lit(mapping).alias("mapping"),
            pl.lit(2, dtype=pl.Int32).alias("np"), pl.lit("default").alias("algorithm"),
            pl.lit(nodes, dtype=pl.Int32).alias("nodes"), pl.lit(ppn, dtype=pl.Int32).alias("ppn")))
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    pl.concat(frames, how="diagonal_relaxed").write_parquet(tidy / "imb_samples.parquet")
    return tidy


def test_fit_all_on_recorded_juno_data_recovers_the_published_figures(tmp_path: Path) -> None:
    fits = fit_all(juno_tidy(tmp_path), FitOptions(bandwidth_gbit_s=1.0, network_name="1GbE"))
    assert fits.hockney is not None and fits.kernels is not None and fits.alphabeta is not None
    pingpong = {r.label: r.to_json() for r in fits.hockney if r.benchmark == "PingPong"}
    assert sorted(pingpong) == ["ompi165/tcp/core", "ompi165/tcp/node", "ompi165/unimem/node"]
    # readme: intranode "~2–4 µs", internode ~150 µs; 108.3 MiB/s = 113.6 MB/s at 4 MiB, B within 3 %.
    assert 2.0 <= pingpong["ompi165/tcp/core"]["latency_us"] <= 4.0
    for label in ("ompi165/tcp/node", "ompi165/unimem/node"):
        assert 140.0 <= pingpong[label]["latency_us"] <= 180.0
        # The published figure is the 4 MiB bandwidth: the asymptotic B, read at the largest size.
        assert pingpong[label]["asymptotic_bytes"] == 4 << 20
        assert pingpong[label]["asymptotic_bandwidth_MBps"] == pytest.approx(108.3 * 1.048576, rel=BW_TOL_REAL)
    # α-β over the two boards: α ≥ 1 and of order 1, β some hundreds of µs; the intranode file is one node.
    assert len(fits.alphabeta.fits) == 4
    for f in fits.alphabeta.fits:
        assert f.fitted and f.nodes == (2,) and f.ppn == 1
        assert f.alpha is not None and f.beta_us is not None
        assert 1.0 <= f.alpha <= 3.0 and 150.0 <= f.beta_us <= 400.0
    assert fits.documents()["alphabeta"]["network"] == {"name": "1GbE", "bandwidth_gbit_s": 1.0,
                                                        "bandwidth_bytes_per_s": 1.25e8}
    assert any("measured on one node only" in p for p in fits.problems)
    # No kernel tables: a kernels file with every list empty, and the reason among the problems.
    assert all(fits.kernel(k) == [] for k in ("ring", "matsum", "jacobi", "pingpong", "coll"))
    assert any("no kernel_*.parquet rows" in p for p in fits.problems)

    written = write_fits(fits, tmp_path / "fits")
    assert sorted(p.name for p in written) == sorted(FILES.values())
    for model in MODELS:
        assert read(tmp_path / "fits" / FILES[model]) == fits.documents()[model]  # read() validates
    assert read_fits(tmp_path / "fits").documents() == fits.documents()


def test_fit_all_takes_loaded_tables_and_fits_the_kernels_on_its_hockney(tmp_path: Path, few_bootstraps: None) -> None:
    tables = TidyTables.load(tidy_dir(tmp_path))
    fits = fit_all(tables, FitOptions(bandwidth_gbit_s=10.0, network_name="veth"))
    assert fits.hockney is not None and fits.kernels is not None and fits.alphabeta is not None
    (imb,) = fits.hockney
    assert imb.latency_us == pytest.approx(LAMBDA, rel=0.05)
    assert imb.segments[-1].bandwidth_MBps == pytest.approx(BW, rel=0.05)  # the model's B
    assert imb.model_bandwidth_MBps == imb.segments[-1].bandwidth_MBps
    assert imb.asymptotic_bandwidth_MBps == pytest.approx(ASYMPTOTIC, rel=0.03)
    (pingpong,) = fits.kernel("pingpong")
    assert pingpong["imb_latency_us"] == imb.latency_us  # the Hockney fit of the same call
    assert pingpong["latency_us"] == pytest.approx(0.8 * LAMBDA, rel=0.05)
    assert fits.alphabeta.fits == () and fits.alphabeta.network.name == "veth"
    for model, document in fits.documents().items():
        assert problems(document, model) == [], model
    # One model only: the others are not fitted, and not written.
    only = fit_all(tables, FitOptions(models=("hockney",)))
    assert only.kernels is None and only.alphabeta is None and only.hockney == fits.hockney
    assert [p.name for p in write_fits(only, tmp_path / "one")] == ["hockney.json"]


def test_fit_all_refuses_before_fitting_anything(tmp_path: Path) -> None:
    with pytest.raises(FitError, match="nominal link bandwidth"):
        fit_all(tidy_dir(tmp_path), FitOptions())
    with pytest.raises(FitError, match="no model ring"):
        fit_all(tmp_path / "tidy", FitOptions(models=("ring",)))
    with pytest.raises(FitError, match=r"no \*samples.parquet under"):
        fit_all(tmp_path / "empty", FitOptions(models=("hockney",)))


def undocumented(node: object, where: str = "$") -> list[str]:
    """The properties of a schema (at any depth) that carry no description. A property whose schema
    is ``false`` is a forbidden key (an old field name, e.g. the fits' former ``bandwidth_MBps``): it
    holds nothing to describe; ``true`` (anything goes) is undescribed."""
    out = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if sub is False:
                continue
            if not isinstance(sub, dict) or "description" not in sub:
                out.append(f"{where}.{name}")
        for key, sub in node.items():
            out += undocumented(sub, f"{where}.{key}" if key != "properties" else where)
    elif isinstance(node, list):
        for sub in node:
            out += undocumented(sub, where)
    return out


def test_every_field_of_every_fits_schema_is_described() -> None:
    for model in MODELS:
        doc = schema(model)
        assert doc["title"] == f"fits/{FILES[model]}" and doc["description"]
        assert undocumented(doc) == [], model


def test_a_bad_fits_file_is_named_with_its_key(tmp_path: Path) -> None:
    fits = fit_all(tidy_dir(tmp_path), FitOptions(models=("hockney",)))
    assert fits.hockney is not None
    bad = [{**fits.hockney[0].to_json(), "latency_us": "1.0"}]
    path = tmp_path / "hockney.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(FitsFileError) as err:
        read(path)
    assert f"{path}: not a valid hockney.json" in str(err.value)
    assert "$[0].latency_us: '1.0' is not of type 'number', 'null'" in str(err.value)
    # A missing key of an α-β file, and a file that is not JSON at all.
    (tmp_path / "alphabeta.json").write_text(json.dumps({"network": {"name": "x", "bandwidth_gbit_s": 1},
                                                         "fits": [], "notes": []}))
    with pytest.raises(FitsFileError, match=r"alphabeta.json: .*\n  \$: 'time_column' is a required property"):
        read(tmp_path / "alphabeta.json")
    (tmp_path / "kernels.json").write_text("{")
    with pytest.raises(FitsFileError, match=r"kernels.json: not JSON"):
        read(tmp_path / "kernels.json")
    # The writer checks before it writes: a bad document leaves no file.
    # A typed record holds no string λ; a size that is not a whole number of bytes is what a bad
    # producer can still hand the writer.
    fits.hockney = [dataclasses.replace(fits.hockney[0], breakpoints_bytes=(1.5,))]
    with pytest.raises(FitsFileError, match=r"\$\[0\].breakpoints_bytes\[0\]"):
        write_fits(fits, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_kernels_cli_names_a_bad_hockney_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tidy = tidy_dir(tmp_path)
    bad = tmp_path / "hockney.json"
    bad.write_text(json.dumps([{"label": LABEL, "latency_us": 1.0}]))
    assert main(["fit", str(tidy), "--model", "kernels", "--hockney", str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert f"mpiatlas fit: {bad}: not a valid hockney.json" in err and "$[0]: 'benchmark' is a required property" in err


def printed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_all_models_in_one_process_write_what_each_model_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], few_bootstraps: None
) -> None:
    tidy = tidy_dir(tmp_path)
    network = ["--bandwidth-gbit-s", "10", "--network-name", "veth"]
    hockney = printed(["fit", str(tidy), "--model", "hockney", "--json"], capsys)
    (tmp_path / "hockney.json").write_text(hockney)
    kernels = printed(["fit", str(tidy), "--model", "kernels", "--hockney", str(tmp_path / "hockney.json"),
                       "--json"], capsys)
    alphabeta = printed(["fit", str(tidy), "--model", "alphabeta", *network, "--json"], capsys)

    fits = tmp_path / "fits"
    assert main(["fit", str(tidy), "--model", "all", "--out-dir", str(fits), *network]) == 0
    assert capsys.readouterr().out == ""  # everything went to the files
    assert sorted(p.name for p in fits.iterdir()) == ["alphabeta.json", "hockney.json", "kernels.json"]
    assert (fits / "hockney.json").read_text() == hockney
    assert (fits / "kernels.json").read_text() == kernels
    assert (fits / "alphabeta.json").read_text() == alphabeta
    # The numbers are real fits: λ and B of the samples, and the kernel's cross-check against the
    # IMB PingPong λ of the Hockney fit made in the same process.
    (imb_fit,) = json.loads(hockney)
    assert imb_fit["latency_us"] == pytest.approx(LAMBDA, rel=0.05)
    assert imb_fit["segments"][-1]["bandwidth_MBps"] == pytest.approx(BW, rel=0.05)  # the model's B
    assert imb_fit["asymptotic_bandwidth_MBps"] == pytest.approx(ASYMPTOTIC, rel=0.03)
    (pingpong,) = json.loads(kernels)["pingpong"]
    assert pingpong["imb_latency_us"] == imb_fit["latency_us"]
    assert pingpong["latency_us"] == pytest.approx(0.8 * LAMBDA, rel=0.05)
    assert json.loads(alphabeta)["network"]["name"] == "veth"


def test_all_models_refuses_what_it_cannot_honour_and_writes_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tidy = tidy_dir(tmp_path)
    fits = tmp_path / "fits"
    assert main(["fit", str(tidy), "--model", "all", "--bandwidth-gbit-s", "10"]) == 2
    assert "needs --out-dir" in capsys.readouterr().err
    assert main(["fit", str(tidy), "--model", "all", "--out-dir", str(fits), "--bandwidth-gbit-s", "10",
                 "--hockney", str(tmp_path / "hockney.json")]) == 2
    assert main(["fit", str(tidy), "--model", "all", "--out-dir", str(fits), "--bandwidth-gbit-s", "10",
                 "--benchmark", "PingPong"]) == 2
    assert "--benchmark and --hockney are for a single --model" in capsys.readouterr().err
    # No nominal bandwidth: refused before any model is fitted, so no file at all (not two of three).
    assert main(["fit", str(tidy), "--model", "all", "--out-dir", str(fits)]) == 2
    assert "--model alphabeta needs --bandwidth-gbit-s" in capsys.readouterr().err
    assert not fits.exists()


def test_out_dir_writes_a_single_model_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tidy = tidy_dir(tmp_path)
    hockney = printed(["fit", str(tidy), "--json"], capsys)
    assert main(["fit", str(tidy), "--out-dir", str(tmp_path / "fits")]) == 0
    assert (tmp_path / "fits" / "hockney.json").read_text() == hockney
    assert [p.name for p in (tmp_path / "fits").iterdir()] == ["hockney.json"]
