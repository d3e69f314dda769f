"""`mpiatlas fit --model all --out-dir`: every model in one process (the workflow's fit rule),
each file exactly what `--model <model> --json` prints, the kernel models on the fresh Hockney fits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.cli import main
from mpiatlas.models import kernels as kernel_models

LABEL = "impi/shm/core"
SIZES = [2**k for k in range(1, 23)]
LAMBDA, BW = 1.0, 8000.0  # µs, MB/s (bytes/µs) of the IMB PingPong samples


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
                               "cell_status": "ok", "cell": f"kernel/{LABEL}/np2/pingpong/m0-22/rep{rep}",
                               "rep": rep, "np": 2, "rank": rank, "bytes": s, "iterations": 100, "t_usec": kt,
                               "t_min_usec": 0.9 * kt, "MBps": s / kt, "valid": True, "oversubscribed": False})
    tidy = tmp_path / "tidy"
    tidy.mkdir()
    pl.DataFrame(imb).write_parquet(tidy / "imb_samples.parquet")
    pl.DataFrame(kernel).write_parquet(tidy / "kernel_pingpong.parquet")
    return tidy


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
    assert imb_fit["bandwidth_MBps"] == pytest.approx(BW, rel=0.05)
    (pingpong,) = json.loads(kernels)["pingpong"]
    assert pingpong["imb_latency_us"] == imb_fit["latency_us"]
    assert pingpong["latency_us"] == pytest.approx(0.8 * LAMBDA, rel=0.05)
    assert json.loads(alphabeta)["network"]["name"] == "veth"


def test_all_models_refuses_what_it_cannot_honour_and_leaves_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], few_bootstraps: None
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
    assert not fits.exists()
    # No nominal bandwidth: the α-β fit (the last) fails; the fits before it are complete files,
    # and no truncated or temporary file is left for it.
    assert main(["fit", str(tidy), "--model", "all", "--out-dir", str(fits)]) == 2
    assert "--model alphabeta needs --bandwidth-gbit-s" in capsys.readouterr().err
    assert sorted(p.name for p in fits.iterdir()) == ["hockney.json", "kernels.json"]
    assert json.loads((fits / "hockney.json").read_text())[0]["benchmark"] == "PingPong"


def test_out_dir_writes_a_single_model_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tidy = tidy_dir(tmp_path)
    hockney = printed(["fit", str(tidy), "--json"], capsys)
    assert main(["fit", str(tidy), "--out-dir", str(tmp_path / "fits")]) == 0
    assert (tmp_path / "fits" / "hockney.json").read_text() == hockney
    assert [p.name for p in (tmp_path / "fits").iterdir()] == ["hockney.json"]
