"""``mpiatlas import``: several files into one samples table; broken files reported, others kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.importer import SAMPLES_FILE
from mpiatlas.parsers.imb import COLUMNS

LOCAL = "local-imb-samples"


def _good_files(tmp_path: Path) -> list[Path]:
    root = require_datasets()
    files = [
        root / LOCAL / "impi_np2_PingPong.txt",
        root / LOCAL / "impi_np4_npmin2_colls.txt",
        root / "brandino-juno-arm-imb41/data/IMB-EXT_intranode.txt",
    ]
    # A copy under a distinct name, as one would import several systems' rfm_IMB_PingPong_job.out.
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

    stdout = capsys.readouterr().out
    assert "alaska_ib_ompi4.out: 24 rows, PingPong" in stdout
    assert "impi_np4_npmin2_colls.txt: 140 rows, Bcast, Scatter, Allreduce, Alltoall" in stdout
    assert f"wrote {out / SAMPLES_FILE}" in stdout


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
    from mpiatlas.importer import import_files
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
