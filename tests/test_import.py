"""``mpiatlas import``: several files into one samples table; broken files reported, others kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.tables.importer import SAMPLES_FILE
from mpiatlas.parsers.imb import COLUMNS

LOCAL = "local-imb-samples"


def _good_files(tmp_path: Path) -> list[Path]:
    root = require_datasets()
    files = [
        root / LOCAL / "impi_np2_PingPong.txt",
        root / LOCAL / "impi_np4_npmin2_colls.txt",
        root / "brandino-juno-arm-imb41/data/IMB-EXT_intranode.txt",
    ]
    # A copy under a name of its own, so its label is that stem (same-named logs: the labels tests below).
    alaska = tmp_path / "alaska_ib_ompi4.out"
    shutil.copy(root / "stackhpc-alaska-csd3-imb-omb/output/alaska/ib-gcc9-openmpi4-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out", alaska)
    return [*files, alaska]


def _broken_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    good = (require_datasets() / LOCAL / "impi_np2_PingPong.txt").read_text().splitlines()
    n = next(i for i, line in enumerate(good, start=1) if line.split()[:1] == ["2048"])
    truncated = tmp_path / "truncated_row.txt"
    truncated.write_text("\n".join(good[: n - 1] + ["         2048         1000         1.2"] + good[n:]) + "\n")
    garbled = tmp_path / "garbled_value.txt"
    garbled.write_text("\n".join(good[: n - 1] + ["         2048         1000         1.2      N/A"] + good[n:]) + "\n")
    invalid = require_datasets() / LOCAL / "edge_invalid_option.txt"
    return truncated, garbled, invalid


def test_import_writes_one_table_with_labels_and_cell_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _good_files(tmp_path)
    out = tmp_path / "out"
    assert main(["import", *map(str, files), "--out", str(out)]) == 0
    df = pl.read_parquet(out / SAMPLES_FILE)

    assert df.columns == [*COLUMNS, "label", "stack", "transport", "mapping", "algorithm", "np"]
    for c in ("stack", "transport", "mapping", "algorithm"):
        assert df.schema[c] == pl.String and df[c].null_count() == df.height
    assert df["np"].to_list() == df["processes"].to_list()
    per_label = dict(df.group_by("label").len().iter_rows())
    assert per_label == {
        "impi_np2_PingPong": 24,  # 0 B and 2^0..2^22
        "impi_np4_npmin2_colls": 140,
        "IMB-EXT_intranode": 242,
        "alaska_ib_ompi4": 24,
    }
    alaska = df.filter(pl.col("label") == "alaska_ib_ompi4")
    assert alaska["bandwidth_MBps"].max() == 11892.6 and alaska["source"][0] == str(files[-1])

    captured = capsys.readouterr()
    # Not a terminal, no --verbose: no line per file, no bar; one summary with the real counts.
    assert captured.out == f"wrote {out / SAMPLES_FILE}: 430 rows, 4 labels from 4 of 4 files; 0 problems\n"
    assert captured.err == ""


def test_broken_files_are_reported_and_others_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good_files(tmp_path)
    truncated, garbled, invalid = _broken_files(tmp_path)
    out = tmp_path / "out"
    rc = main(["import", str(good[0]), str(truncated), str(garbled), str(invalid), str(good[-1]), "--out", str(out)])
    assert rc == 1

    err = capsys.readouterr().err
    n = next(i for i, line in enumerate(truncated.read_text().splitlines(), start=1) if line.split()[:1] == ["2048"])
    assert f"{truncated}:{n}: expected 4 columns (#bytes #repetitions t[usec] Mbytes/sec) but found 3" in err
    assert f"{garbled}:{n}: non-numeric value 'N/A' in column Mbytes/sec" in err
    assert f"{invalid}:29: IMB reported 'Invalid benchmark name -bogus'" in err

    df = pl.read_parquet(out / SAMPLES_FILE)
    assert sorted(df["label"].unique()) == ["alaska_ib_ompi4", "impi_np2_PingPong"]
    assert df.height == 24 + 24
    assert not {"truncated_row", "garbled_value", "edge_invalid_option"} & set(df["label"])


def test_all_files_failing_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncated, _, invalid = _broken_files(tmp_path)
    out = tmp_path / "out"
    assert main(["import", str(truncated), str(invalid), "--out", str(out)]) == 1
    assert not (out / SAMPLES_FILE).exists()
    assert "nothing imported" in capsys.readouterr().err


def test_missing_file_is_a_failure_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good_files(tmp_path)[0]
    out = tmp_path / "out"
    assert main(["import", str(good), str(tmp_path / "nope.txt"), "--out", str(out)]) == 1
    assert "nope.txt: cannot read" in capsys.readouterr().err
    assert pl.read_parquet(out / SAMPLES_FILE).height == 24


def test_fit_on_a_directory_without_samples_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(tmp_path), "--model", "hockney", "--json"]) == 2
    assert f"no *samples.parquet under {tmp_path}" in capsys.readouterr().err


def test_rows_come_by_file_whichever_reader_took_it(tmp_path: Path) -> None:
    """The C scanner's files, a file it leaves to the Python lines executor ("\\r\\n" line ends) and
    an OSU log, interleaved: rows come by file order, each file's as its own reader gives them."""
    from mpiatlas.tables.importer import import_files
    from mpiatlas.parsers.imb import parse_imb_file
    from mpiatlas.parsers.imb_scan import scan_imb_files

    good = _good_files(tmp_path)
    crlf = tmp_path / "crlf_PingPong.txt"
    crlf.write_bytes(good[0].read_bytes().replace(b"\n", b"\r\n"))
    osu = sorted((require_datasets() / "stackhpc-alaska-csd3-imb-omb" / "output").glob("*/*/omb/*/*.out"))[0]
    files = [good[1], crlf, good[0], osu, good[2]]
    assert scan_imb_files(files).bailed == [1, 3]
    result = import_files(files, osu_processes=2)
    assert not result.failed and result.samples is not None
    labels = result.samples["label"]
    assert labels.rle_id().max() == len(files) - 1  # each file's rows together: one run per file
    assert labels.unique(maintain_order=True).to_list() == [f.stem for f in files]
    crlf_rows = result.samples.filter(pl.col("label") == crlf.stem).select(COLUMNS)
    assert crlf_rows.equals(parse_imb_file(crlf)) and crlf_rows.height == 24


# -- labels: one label is one system ---------------------------------------------------------------

PARTITIONS = [
    "ib-gcc9-impi-verbs", "ib-gcc9-openmpi4-ucx", "roce-gcc9-impi-verbs", "roce-gcc9-openmpi4-ucx",
    "cclake-ib-gcc9-ompi3-ucx", "cclake-ib-icc19-impi19-ucx", "cclake-roce-gcc9-ompi3-ucx", "cclake-roce-icc19-impi19-ucx",
]  # fmt: skip


def _stackhpc_pingpongs() -> list[Path]:
    """StackHPC's eight IMB PingPong logs: one per partition of two clusters, every one named alike."""
    paths = sorted((require_datasets() / "stackhpc-alaska-csd3-imb-omb" / "output").rglob("rfm_IMB_PingPong_job.out"))
    assert [p.parts[-4] for p in paths] == PARTITIONS
    return paths


def _hockney(out: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["fit", str(out), "--model", "hockney", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_logs_sharing_a_name_stay_apart_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No flag: eight partitions' rfm_IMB_PingPong_job.out are eight systems, eight Hockney fits."""
    paths = _stackhpc_pingpongs()
    out = tmp_path / "out"
    assert main(["import", *map(str, paths), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    labels = [f"{partition}/rfm_IMB_PingPong_job" for partition in PARTITIONS]
    df = pl.read_parquet(out / SAMPLES_FILE)
    assert dict(df.group_by("label").len().iter_rows()) == dict.fromkeys(labels, 24)
    assert df.select("source", "label").unique().sort("source").rows() == list(zip(map(str, paths), labels))
    assert captured.out.count("\n") == 1 and "24 rows" not in captured.out  # the summary only
    assert "note" not in captured.err

    fits = _hockney(out, capsys)
    assert [(f["label"], f["benchmark"], "error" in f) for f in fits] == [(label, "PingPong", False) for label in labels]
    # RoCE with Intel MPI over verbs against InfiniBand with Open MPI + UCX: ~2.5 vs ~12 GB/s, on one cluster.
    # Both curves rise to their largest size: the published maximum is the peak B, there equal to the
    # asymptotic B (s/t at 4 MiB).
    for figure in ("peak", "asymptotic"):
        bandwidth = {f["label"]: f[f"{figure}_bandwidth_MBps"] for f in fits}
        assert 2400 < bandwidth[labels[2]] < 2700 and 11_500 < bandwidth[labels[1]] < 12_500, figure


def test_pool_keeps_the_stem_and_pools_on_purpose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _stackhpc_pingpongs()
    out = tmp_path / "out"
    assert main(["import", *map(str, paths), "--pool", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "label 'rfm_IMB_PingPong_job' pools 8 files (as --pool asked)" in err
    df = pl.read_parquet(out / SAMPLES_FILE)
    assert df["label"].unique().to_list() == ["rfm_IMB_PingPong_job"] and df.height == 8 * 24
    (fit,) = _hockney(out, capsys)  # one fit of eight systems' rows: what --pool asks for
    assert fit["label"] == "rfm_IMB_PingPong_job" and "error" not in fit


def test_one_label_for_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _stackhpc_pingpongs()[:4]
    out = tmp_path / "out"
    assert main(["import", *map(str, paths), "--label", "alaska", "--out", str(out), "--verbose"]) == 0
    captured = capsys.readouterr()
    assert "label 'alaska' pools 4 files (as --label asked)" in captured.err
    assert captured.out.count("(label 'alaska')") == 4  # --verbose: a line per file
    assert f"{out / SAMPLES_FILE}: 96 rows, 1 label from 4 of 4 files; 0 problems" in captured.out
    df = pl.read_parquet(out / SAMPLES_FILE)
    assert dict(df.group_by("label").len().iter_rows()) == {"alaska": 4 * 24}


def test_labels_csv_maps_the_files_it_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Alaska's four logs pooled as one label by the mapping; CSD3's keep their default labels."""
    paths = _stackhpc_pingpongs()
    mapping = tmp_path / "labels.csv"
    mapping.write_text("path,label\n" + "".join(f"{os.path.relpath(p, tmp_path)},alaska\n" for p in paths[:4]))
    out = tmp_path / "out"
    assert main(["import", *map(str, paths), "--labels", str(mapping), "--out", str(out)]) == 0
    assert "label 'alaska' pools 4 files (as --labels asked)" in capsys.readouterr().err
    df = pl.read_parquet(out / SAMPLES_FILE)
    assert dict(df.group_by("label").len().iter_rows()) == {
        "alaska": 96, **{f"{partition}/rfm_IMB_PingPong_job": 24 for partition in PARTITIONS[4:]}}
    assert set(df.filter(pl.col("label") == "alaska")["source"]) == set(map(str, paths[:4]))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--labels", "{csv}"], "{csv}:3: expected a path and a label, got 'b.txt', ''"),
        (["--labels", "{tmp}/none.csv"], "{tmp}/none.csv: cannot read the labels mapping: No such file or directory"),
        (["--label", "x", "--pool"], "--label gives every file one label: it cannot be combined with --pool"),
        (["--label", "x", "--labels", "{csv}"], "--label gives every file one label: it cannot be combined with --labels"),
        (["--label", " "], "--label: expected a non-empty label"),
    ],
)
def test_a_label_error_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("path,label\na.txt,alaska\nb.txt,\n")
    fill = {"csv": str(bad), "tmp": str(tmp_path)}
    out = tmp_path / "out"
    args = ["import", *map(str, _stackhpc_pingpongs()[:2]), *(f.format(**fill) for f in flags), "--out", str(out)]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"mpiatlas import: {message.format(**fill)}"  # one line
    assert not captured.out and not out.exists()


def test_each_reader_and_chunk_gives_the_files_own_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same-named files, in chunks of two on two threads, some through the C scanner and some through
    Python ("\\r\\n" line ends, an OSU log): every row carries its own file's label."""
    import mpiatlas.tables.importer as importer

    pingpong = require_datasets() / LOCAL / "impi_np2_PingPong.txt"
    osu = sorted((require_datasets() / "stackhpc-alaska-csd3-imb-omb" / "output").glob("*/*/omb/*/*.out"))[0]
    files = []
    for rep, source in enumerate([pingpong, pingpong, osu, pingpong, pingpong]):
        path = tmp_path / f"rep{rep}" / "x.txt"
        path.parent.mkdir()
        data = source.read_bytes()
        path.write_bytes(data.replace(b"\n", b"\r\n") if rep == 3 else data)
        files.append(path)
    monkeypatch.setattr(importer, "CHUNK_FILES", 2)
    result = importer.import_files(files, threads=2, osu_processes=2)
    assert not result.failed and result.samples is not None
    assert [f.label for f in result.files] == [f"rep{r}/x" for r in range(5)]
    by_source = result.samples.select("source", "label").unique(maintain_order=True).rows()
    assert by_source == [(str(f), f"rep{r}/x") for r, f in enumerate(files)]
    pooled = importer.import_files(files, pool=True, osu_processes=2)
    assert pooled.samples is not None and pooled.samples["label"].unique().to_list() == ["x"]
    assert pooled.pooled_labels() == {"x": 5}
