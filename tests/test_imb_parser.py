"""IMB parser: every raw IMB file of the shared datasets, published spot values, broken input."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from conftest import DATASETS, require_datasets
from mpiatlas.parsers.imb import COLUMNS, MIB_TO_MB, SCHEMA, ImbParseError, parse_imb_file, parse_imb_text

STACKHPC = "stackhpc-alaska-csd3-imb-omb"
BRANDINO = "brandino-juno-arm-imb41/data"
LOCAL = "local-imb-samples"
INVALID = f"{LOCAL}/edge_invalid_option.txt"


def _imb_files(root: Path) -> list[str]:
    """Every raw IMB stdout file in the datasets (relative paths), found by location, not content."""
    patterns = [
        f"{BRANDINO}/IMB-*.txt",
        f"{STACKHPC}/output/*/*/imb/**/*.out",
        f"{STACKHPC}/mpi-container-test/*.out",
        f"{LOCAL}/*.txt",
    ]
    return sorted(str(p.relative_to(root)) for pat in patterns for p in root.glob(pat))


ALL_FILES = _imb_files(DATASETS)
VALID_FILES = [f for f in ALL_FILES if f != INVALID]

# An IMB table row: integers/decimals only (Barrier rows start with #repetitions), or IMB's own
# failure row "<size> time-out." / "<size> out-of-mem." (with an optional -multi group first).
_NUMERIC_ROW = re.compile(r"^\s*\d+(\s+\d+(\.\d+)?)+\s*$")
_FAILURE_ROW = re.compile(r"^\s*\d+(\s+\d+)?\s+(time-out|out-of-mem|int-overflow)\.")


def _expected_row_lines(path: Path) -> list[int]:
    """Line numbers of table rows, counted independently of the parser: numeric rows after the
    first '# Benchmarking' header (the preamble before it has no numeric rows in IMB output)."""
    lines, started = [], False
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        started = started or line.startswith("# Benchmarking")
        if started and (_NUMERIC_ROW.match(line) or _FAILURE_ROW.match(line)):
            lines.append(n)
    return lines


def _parse(rel: str) -> pl.DataFrame:
    return parse_imb_file(require_datasets() / rel)


def test_inventory_of_raw_imb_files() -> None:
    root = require_datasets()
    files = _imb_files(root)
    counts = {
        "brandino": sum(f.startswith(BRANDINO) for f in files),
        "stackhpc output": sum(f.startswith(f"{STACKHPC}/output") for f in files),
        "mpi-container-test": sum("mpi-container-test" in f for f in files),
        "local": sum(f.startswith(LOCAL) for f in files),
    }
    assert counts == {"brandino": 6, "stackhpc output": 152, "mpi-container-test": 4, "local": 17}


@pytest.mark.parametrize("rel", VALID_FILES)
def test_every_table_row_is_recovered(rel: str) -> None:
    path = require_datasets() / rel
    df = parse_imb_file(path)
    expected = _expected_row_lines(path)
    assert len(expected) > 0
    assert df.height == len(expected)
    assert df["line"].to_list() == expected
    # The row really is that line: its leading integers are [group] bytes / repetitions.
    text = path.read_text().splitlines()
    for row in df.iter_rows(named=True):
        tokens = text[row["line"] - 1].split()
        lead = [row[c] for c in ("group", "bytes", "repetitions") if row[c] is not None]
        assert [int(t) for t in tokens[: len(lead)]] == lead
    assert df.schema == pl.Schema(SCHEMA)
    assert df["run"].unique().to_list() == [0]
    assert df["processes"].null_count() == 0


def test_output_columns_exactly() -> None:
    df = _parse(f"{LOCAL}/impi_np2_PingPong.txt")
    assert df.columns == [
        "source", "run", "imb_version", "benchmark", "mode", "processes", "group", "bytes", "repetitions",
        "t_usec", "t_min_usec", "t_max_usec", "t_avg_usec", "bandwidth_MBps", "msg_per_sec", "status", "line",
    ]  # fmt: skip
    assert df.columns == COLUMNS
    assert [str(t) for t in df.dtypes] == [
        "String", "Int32", "String", "String", "String", "Int32", "Int32", "Int64", "Int64",
        "Float64", "Float64", "Float64", "Float64", "Float64", "Float64", "String", "Int32",
    ]  # fmt: skip


# -- published figures -------------------------------------------------------------------------


def _row(df: pl.DataFrame, benchmark: str, size: int | None, **extra: object) -> dict[str, object]:
    cond = (pl.col("benchmark") == benchmark) & (pl.col("bytes").is_null() if size is None else pl.col("bytes") == size)
    for k, v in extra.items():
        cond &= pl.col(k) == v
    rows = df.filter(cond).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def test_brandino_intranode_imb41_values_and_mib_conversion() -> None:
    # PROVENANCE.md (brandino): "This file: PingPong 0 B = 3.09 µs and 1347.94 MiB/s at 4 MiB".
    df = _parse(f"{BRANDINO}/IMB-MPI1_intranode.txt")
    assert df["imb_version"].unique().to_list() == ["4.1"]
    assert df["benchmark"].unique(maintain_order=True).to_list() == [
        "PingPong", "PingPing", "Sendrecv", "Exchange", "Allreduce", "Reduce", "Reduce_scatter", "Allgather",
        "Allgatherv", "Gather", "Gatherv", "Scatter", "Scatterv", "Alltoall", "Alltoallv", "Bcast", "Barrier",
    ]  # fmt: skip
    assert _row(df, "PingPong", 0)["t_usec"] == 3.09
    big = _row(df, "PingPong", 4194304)
    assert big["t_usec"] == 2967.49 and big["repetitions"] == 10
    assert big["bandwidth_MBps"] == pytest.approx(1347.94 * 1.048576, rel=1e-12)
    assert big["bandwidth_MBps"] == pytest.approx(1413.4175, abs=1e-4)
    # MiB/s: 4194304 B / 2967.49 µs = 1413.4 MB/s, i.e. the printed 1347.94 was 2^20-based.
    assert big["bandwidth_MBps"] == pytest.approx(4194304 / 2967.49, rel=1e-4)
    sendrecv = _row(df, "Sendrecv", 0)
    assert (sendrecv["t_min_usec"], sendrecv["t_max_usec"], sendrecv["t_avg_usec"]) == (3.08, 3.08, 3.08)
    assert sendrecv["t_usec"] == sendrecv["t_avg_usec"]
    barrier = _row(df, "Barrier", None)
    assert (barrier["repetitions"], barrier["t_usec"], barrier["bandwidth_MBps"]) == (1000, 3.06, None)
    # Reductions start at 4 bytes (MPI_FLOAT).
    assert df.filter(pl.col("benchmark") == "Allreduce")["bytes"].to_list()[:2] == [0, 4]
    # Collectives have no bandwidth column.
    bcast = df.filter(pl.col("benchmark") == "Bcast")
    assert bcast.height == 24 and bcast["bandwidth_MBps"].null_count() == 24


@pytest.mark.parametrize(
    ("name", "t0", "mib_s_4m"),
    [("IMB-MPI1_internode.txt", 155.82, 108.26), ("IMB-MPI1_internode_Socket.txt", 179.73, 108.36)],
)
def test_brandino_internode_published(name: str, t0: float, mib_s_4m: float) -> None:
    # PROVENANCE.md (brandino): internode 155.82 µs / 108.26 MiB/s; socket variant 179.73 µs / 108.36 MiB/s.
    df = _parse(f"{BRANDINO}/{name}")
    assert _row(df, "PingPong", 0)["t_usec"] == t0
    assert _row(df, "PingPong", 4194304)["bandwidth_MBps"] == pytest.approx(mib_s_4m * MIB_TO_MB)


def test_brandino_imb_ext_modes() -> None:
    df = _parse(f"{BRANDINO}/IMB-EXT_intranode.txt")
    assert df.height == 11 * 22
    by = df.group_by("benchmark", "mode", maintain_order=True).len()
    assert by.filter(pl.col("benchmark") == "Window")["mode"].to_list() == [None]
    assert sorted(by.filter(pl.col("benchmark") == "Unidir_Put")["mode"].to_list()) == ["AGGREGATE", "NON-AGGREGATE"]
    assert set(df["benchmark"]) == {"Window", "Unidir_Get", "Unidir_Put", "Bidir_Get", "Bidir_Put", "Accumulate"}
    put = _row(df, "Unidir_Get", 4194304, mode="AGGREGATE")
    assert put["t_usec"] == 1718.71
    assert put["bandwidth_MBps"] == pytest.approx(2327.32 * MIB_TO_MB)
    assert _row(df, "Window", 0)["t_avg_usec"] == 439.14


def test_stackhpc_alaska_ib_openmpi4_pingpong() -> None:
    # PROVENANCE.md: "alaska ib ompi4 PingPong job 6575 gives 11892.6 MB/s and 1.03 µs".
    df = _parse(f"{STACKHPC}/output/alaska/ib-gcc9-openmpi4-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out")
    assert df.height == 24
    assert df["imb_version"].unique().to_list() == ["2019 Update 5"]
    assert df["bandwidth_MBps"].max() == 11892.6  # IMB 2019: already 10^6-based, not converted
    assert df.filter(pl.col("bytes") == 0)["t_usec"].to_list() == [1.03]
    assert df["t_usec"].min() == 1.03


def test_stackhpc_csd3_impi_startup_noise_line() -> None:
    rel = f"{STACKHPC}/output/csd3/cclake-ib-icc19-impi19-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out"
    assert (require_datasets() / rel).read_text().startswith("[0] MPI startup():")
    df = _parse(rel)
    assert df["imb_version"].unique().to_list() == ["2019 Update 6"]
    assert df.height == 24 and df["bandwidth_MBps"].max() == 12069.36


def test_stackhpc_uniband_npmin_blocks() -> None:
    df = _parse(f"{STACKHPC}/output/alaska/ib-gcc9-impi-verbs/imb/IMB_Uniband_0_25/rfm_IMB_Uniband_0_25_job.out")
    per = df.group_by("processes", maintain_order=True).len()
    assert per["processes"].to_list() == [2, 4, 8, 16]
    assert per["len"].to_list() == [24, 24, 24, 24]
    assert df["t_usec"].null_count() == df.height  # bandwidth-only table
    first = _row(df, "Uniband", 4096, processes=4)
    assert (first["bandwidth_MBps"], first["msg_per_sec"]) == (12348.12, 3014679.0)


_RESULTS = re.compile(r"^Results:\s+(?P<lat>[\d.]+) us (?P<bw>[\d.]+) MB/s")


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("ompi3-NA-ib-ping.sh.out", "2018 Update 1"),
        ("ompi3-foss2019-ib-ping.sh.out", "2019 Update 3"),
        ("ompi4-NA-ib-ping.sh.out", "2019 Update 5"),
        ("ompi4-foss2019-ib-ping.sh.out", "2019 Update 3"),
    ],
)
def test_mpi_container_results_line(name: str, version: str) -> None:
    # The author's "Results:  <t at 0 B> us <max MB/s> MB/s" line (= README table) after the IMB output.
    path = require_datasets() / STACKHPC / "mpi-container-test" / name
    match = next(m for line in path.read_text().splitlines() if (m := _RESULTS.match(line)))
    df = parse_imb_file(path)
    assert df["imb_version"].unique().to_list() == [version]
    assert df.height == 24 and set(df["benchmark"]) == {"PingPong"}
    assert df.filter(pl.col("bytes") == 0)["t_usec"].item() == pytest.approx(float(match["lat"]))
    assert df["bandwidth_MBps"].max() == pytest.approx(float(match["bw"]))


def test_local_multi_group_tables() -> None:
    per_group = _parse(f"{LOCAL}/impi_np4_PingPong_multi1.txt")
    assert per_group.height == 12
    assert per_group["benchmark"].unique().to_list() == ["Multi-PingPong"]
    assert per_group["group"].to_list() == [0, 1] * 6
    assert per_group["processes"].unique().to_list() == [2]  # "2 groups of 2 processes each"
    assert _row(per_group, "Multi-PingPong", 1, group=1)["t_usec"] == 2.38
    merged = _parse(f"{LOCAL}/impi_np4_PingPong_multi0.txt")
    assert merged["group"].null_count() == merged.height == 6
    r = _row(merged, "Multi-PingPong", 16)
    assert (r["t_min_usec"], r["t_max_usec"], r["t_usec"], r["bandwidth_MBps"]) == (0.48, 0.84, 0.66, 19.03)


def test_local_npmin_collectives() -> None:
    df = _parse(f"{LOCAL}/impi_np4_npmin2_colls.txt")
    per = df.group_by("benchmark", "processes", maintain_order=True).len()
    assert per.rows() == [
        ("Bcast", 2, 18), ("Bcast", 4, 18), ("Scatter", 2, 18), ("Scatter", 4, 18),
        ("Allreduce", 2, 16), ("Allreduce", 4, 16), ("Alltoall", 2, 18), ("Alltoall", 4, 18),
    ]  # fmt: skip
    assert _row(df, "Alltoall", 65536, processes=4)["t_avg_usec"] == 31.10


def test_local_uniband_biband_sendrecv_and_versions() -> None:
    df = _parse(f"{LOCAL}/impi_np2_Uniband_Biband_Sendrecv.txt")
    assert df["imb_version"].unique().to_list() == ["2021.10"]
    assert _row(df, "Biband", 1024)["msg_per_sec"] == 5493604.0
    assert _row(df, "Sendrecv", 1024)["bandwidth_MBps"] == 3874.88


def test_imb_failure_rows() -> None:
    timeout = _parse(f"{LOCAL}/edge_timeout.txt")
    assert timeout["status"].to_list() == ["ok", "time-out"]
    row = timeout.row(1, named=True)
    assert row["bytes"] == 1048576 and row["t_usec"] is None and row["repetitions"] is None
    oom = _parse(f"{LOCAL}/edge_out_of_mem.txt")
    assert oom["status"].to_list() == ["ok", "ok", "out-of-mem"]
    assert oom["bytes"].to_list() == [0, 33554432, 67108864]
    assert oom.row(2, named=True)["bandwidth_MBps"] is None


def test_appended_runs_are_numbered() -> None:
    path = require_datasets() / LOCAL / "impi_np2_PingPong.txt"
    text = path.read_text()
    df = parse_imb_text("noise before\n" + text + text + "trailer\n", source="two_runs.txt")
    one = parse_imb_file(path)
    assert df["run"].unique().sort().to_list() == [0, 1]
    assert df.filter(pl.col("run") == 1).height == one.height
    assert df.filter(pl.col("run") == 1)["line"][0] == one["line"][0] + len(text.splitlines()) + 1
    assert df["source"].unique().to_list() == ["two_runs.txt"]


# -- broken input --------------------------------------------------------------------------------


def test_invalid_benchmark_name_raises() -> None:
    path = require_datasets() / INVALID
    with pytest.raises(ImbParseError, match=r"edge_invalid_option\.txt:29: .*Invalid benchmark name -bogus") as exc:
        parse_imb_file(path)
    assert exc.value.line == 29 and exc.value.source.endswith("edge_invalid_option.txt")


def _broken_copy(tmp_path: Path, name: str, line_no: int, new_line: str) -> Path:
    lines = (require_datasets() / LOCAL / "impi_np2_PingPong.txt").read_text().splitlines()
    assert lines[line_no - 1].split()[0] == "1024"  # the row we damage
    lines[line_no - 1] = new_line
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _row_line_of_1024() -> int:
    lines = (require_datasets() / LOCAL / "impi_np2_PingPong.txt").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if line.split()[:1] == ["1024"])


def test_truncated_row_names_file_and_line(tmp_path: Path) -> None:
    n = _row_line_of_1024()
    path = _broken_copy(tmp_path, "truncated.txt", n, "         1024         1000")
    with pytest.raises(ImbParseError, match=rf"truncated\.txt:{n}: expected 4 columns .* but found 2") as exc:
        parse_imb_file(path)
    assert exc.value.line == n


def test_non_numeric_value_names_file_and_line(tmp_path: Path) -> None:
    n = _row_line_of_1024()
    path = _broken_copy(tmp_path, "garbled.txt", n, "         1024         1000         0.5x      2000.00")
    with pytest.raises(ImbParseError, match=rf"garbled\.txt:{n}: non-numeric value '0\.5x' in column t\[usec\]"):
        parse_imb_file(path)


def test_file_without_tables_raises(tmp_path: Path) -> None:
    path = tmp_path / "empty_run.txt"
    path.write_text("Nodes:, node[0-1]\nsrun: error: task 0 failed\n")
    with pytest.raises(ImbParseError, match=r"empty_run\.txt:2: end of file: no IMB result tables"):
        parse_imb_file(path)
    banner_only = "#----\n#    Intel(R) MPI Benchmarks 2021.10, MPI-1 part\n#----\n"
    with pytest.raises(ImbParseError, match=r"x\.txt:3: .*no IMB result tables"):
        parse_imb_text(banner_only, source="x.txt")


def test_row_without_column_header_raises() -> None:
    text = (
        "#    Intel(R) MPI Benchmarks 2021.10, MPI-1 part\n"
        "# Benchmarking PingPong\n"
        "# #processes = 2\n"
        "            0         1000         0.26         0.00\n"
    )
    with pytest.raises(ImbParseError, match=r"h\.txt:4: expected a column header"):
        parse_imb_text(text, source="h.txt")


def test_table_before_banner_raises() -> None:
    with pytest.raises(ImbParseError, match=r"b\.txt:1: '# Benchmarking' outside an IMB run"):
        parse_imb_text("# Benchmarking PingPong\n", source="b.txt")
