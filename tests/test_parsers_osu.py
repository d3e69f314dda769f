"""OSU Micro-Benchmarks text output and CSV exports -> the IMB samples schema.

Every OSU file and OSU CSV in ../shared/datasets is parsed and its rows are counted here
independently (numeric lines / non-empty CSV lines) and compared value by value; the StackHPC
figures are checked against their ReFrame perflogs and the published numbers, and the Hockney
fit (as ``mpiatlas fit`` runs it) against the published osu_latency minima and osu_bw maxima.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.models.hockney import fit_hockney, fit_hockney_table
from mpiatlas.parsers.imb import COLUMNS, parse_imb_file
from mpiatlas.parsers.osu import OSU_COLUMNS, OsuParseError, is_osu_text, parse_osu_file, parse_osu_text
from mpiatlas.parsers.osu_csv import is_osu_csv, parse_osu_csv_file, parse_osu_csv_text
from mpiatlas.parsers.osu_input import osu_kind, parse_osu_input

STACKHPC = "stackhpc-alaska-csd3-imb-omb"
ORFEO = ("valentinis-orfeo-epyc-osu-bcast-barrier", "zampar-orfeo-osu-bcast-barrier")
# The ORFEO CSVs that are not OSU exports: the author's derived tables and the Mandelbrot runs
# (zampar PROVENANCE.md, sections D and G).
NOT_OSU_CSV = re.compile(r"/comparison[^/]*\.csv$|/Excercise_2_c/")
# A table row as OSU prints it: numbers separated by spaces (independent of the parser's rules).
NUMERIC_ROW = re.compile(r"^\s*\d+(?:\.\d+)?(?:\s+\d+(?:\.\d+)?)*\s*$")

# Published figures, stackhpc-alaska-csd3-imb-omb/PROVENANCE.md, "Absolute last-run values from
# the perflogs" table (lines 117-126): osu_latency min (µs), osu_bw max (MB/s), per partition.
PUBLISHED_OSU_LATENCY_MIN_US = {
    "alaska/ib-gcc9-impi-verbs": 1.5,
    "alaska/ib-gcc9-openmpi4-ucx": 1.02,
    "alaska/roce-gcc9-impi-verbs": 2.69,
    "alaska/roce-gcc9-openmpi4-ucx": 1.37,
    "csd3/cclake-ib-gcc9-ompi3-ucx": 0.97,
    "csd3/cclake-roce-gcc9-ompi3-ucx": 1.44,
}
PUBLISHED_OSU_BW_MAX_MBPS = {
    "alaska/ib-gcc9-impi-verbs": 10865.8,
    "alaska/ib-gcc9-openmpi4-ucx": 12171.87,
    "alaska/roce-gcc9-impi-verbs": 3029.14,
    "alaska/roce-gcc9-openmpi4-ucx": 3063.09,
    "csd3/cclake-ib-gcc9-ompi3-ucx": 12319.6,
    "csd3/cclake-roce-gcc9-ompi3-ucx": 5785.05,
}


def _stackhpc_osu_files() -> list[Path]:
    files = sorted((require_datasets() / STACKHPC / "output").glob("*/*/omb/*/*.out"))
    assert len(files) == 102  # 4 alaska partitions x 21 tests + 2 csd3 partitions x 9 tests
    return files


def _orfeo_csvs() -> list[Path]:
    root = require_datasets()
    return sorted(p for d in ORFEO for p in (root / d).rglob("*.csv") if not NOT_OSU_CSV.search(str(p)))


def _partition(path: Path) -> str:
    return "/".join(path.parts[-5:-3])  # output/<system>/<partition>/omb/<Test>/<file>


# -- every row of every file ---------------------------------------------------------------------


def test_every_stackhpc_osu_file_parses_with_every_row_recovered() -> None:
    total = 0
    for path in _stackhpc_osu_files():
        rows = [line.split() for line in path.read_text().splitlines() if NUMERIC_ROW.match(line)]
        df = parse_osu_file(path)
        assert df.columns == OSU_COLUMNS
        assert df.height == len(rows), path
        assert df["bytes"].to_list() == [int(r[0]) for r in rows], path
        # The second column is the figure: bandwidth for osu_bw/bibw/mbw_mr, else the latency.
        bandwidth_only = df["benchmark"][0] in ("Uniband", "Biband")
        figure = df["bandwidth_MBps"] if bandwidth_only else df["t_usec"]
        if "mbw_mr" in path.name:
            assert df["msg_per_sec"].to_list() == [float(r[2]) for r in rows], path
        assert figure.to_list() == [float(r[1]) for r in rows], path
        assert (df["status"] == "ok").all() and df["line"].is_sorted()
        total += df.height
    assert total == 2304


def test_stackhpc_benchmarks_versions_and_process_counts() -> None:
    root = require_datasets() / STACKHPC / "output"
    lat = parse_osu_file(root / "alaska/ib-gcc9-openmpi4-ucx/omb/Osu_latency/rfm_Osu_latency_job.out")
    assert set(lat["benchmark"]) == {"PingPong"} and set(lat["imb_version"]) == {"OMB 5.6.2"}
    assert set(lat["processes"]) == {2} and lat["bytes"][0] == 0 and lat["t_usec"][0] == 1.00
    # PingPong bandwidth as IMB prints it: bytes / t, MB = 10^6 B.
    assert lat.filter(pl.col("bytes") == 4194304)["bandwidth_MBps"][0] == pytest.approx(4194304 / 351.21)
    bibw = parse_osu_file(root / "csd3/cclake-ib-gcc9-ompi3-ucx/omb/Osu_bibw/rfm_Osu_bibw_job.out")
    assert set(bibw["benchmark"]) == {"Biband"} and set(bibw["imb_version"]) == {"OMB 5.6.3"}
    assert bibw["t_usec"].null_count() == bibw.height  # bandwidth rows carry no time, like IMB Biband
    mbw = parse_osu_file(root / "alaska/ib-gcc9-impi-verbs/omb/Osu_mbw_mr_32/rfm_Osu_mbw_mr_32_job.out")
    assert set(mbw["benchmark"]) == {"Uniband"} and set(mbw["processes"]) == {32}  # "# [ pairs: 16 ]"
    a2a = parse_osu_file(root / "alaska/ib-gcc9-impi-verbs/omb/Osu_alltoall/rfm_Osu_alltoall_job.out", processes=64)
    assert set(a2a["benchmark"]) == {"Alltoall"} and set(a2a["processes"]) == {64}
    assert a2a["t_avg_usec"].to_list() == a2a["t_usec"].to_list() and a2a["t_usec"][1] == 43.79
    # OSU prints no rank count for a collective: unknown unless the caller says.
    assert parse_osu_file(root / "csd3/cclake-ib-gcc9-ompi3-ucx/omb/Osu_allreduce/rfm_Osu_allreduce_job.out")[
        "processes"
    ].null_count() == 19  # sizes 4 B … 1 MiB


def test_stackhpc_figures_match_every_reframe_perflog_record() -> None:
    """ReFrame's last record per test (perflogs/...) is the figure of the kept .out.

    ReFrame's extraction skips each table's first row (the 0 B latency row, the 1 B collective
    row): the published osu_latency minimum 1.02 µs of alaska ib ompi4 is the 1 B row, not the
    1.00 µs at 0 B, and its allgather "minimum" 5.86 µs is the 2 B row, not the 5.31 µs at 1 B.
    """
    root = require_datasets() / STACKHPC
    checked = 0
    for path in _stackhpc_osu_files():
        log = root / "perflogs" / path.parent.relative_to(root / "output") / f"{path.parent.name}.log"
        last: dict[str, tuple[float, str]] = {}
        for record in log.read_text().splitlines():
            fields = record.split("|")
            variable, value = fields[4].split("=")
            last[variable] = (float(value), fields[-1])
        df = parse_osu_file(path).slice(1)
        ours = {"max_bandwidth": df["bandwidth_MBps"].max(), "max_message_rate": df["msg_per_sec"].max(),
                "min_av_latency": df["t_avg_usec"].min(), "min_latency": df["t_usec"].min()}  # fmt: skip
        for variable, (value, tags) in last.items():
            assert ours[variable] == value, (path, variable)
            procs = re.search(r"num_procs=(\d+)", tags)
            if procs and df["processes"][0] is not None:
                assert df["processes"][0] == int(procs.group(1)), path
            checked += 1
    assert checked == 168


def test_every_orfeo_osu_csv_parses_with_every_row_recovered() -> None:
    files = _orfeo_csvs()
    assert len(files) == 50  # 30 valentinis + 20 zampar (PROVENANCE.md, sections A-C, E, F)
    total = 0
    for path in files:
        lines = path.read_text().splitlines()
        assert is_osu_csv(path, lines[0]), path
        rows = [row for row in csv.reader(lines[1:]) if row and any(c.strip() for c in row)]
        df = parse_osu_csv_file(path)
        assert df.height == len(rows), path
        has_min_max = "minlatency" in lines[0].replace(" ", "").lower()
        latency = [float(r[-3] if has_min_max else r[-1]) for r in rows]  # the export's latency column
        assert df["t_usec"].to_list() == latency, path
        if has_min_max:
            assert df["t_min_usec"].to_list() == [float(r[-2]) for r in rows], path
            assert df["t_max_usec"].to_list() == [float(r[-1]) for r in rows], path
        assert df["line"].to_list() == list(range(2, len(rows) + 2)), path
        total += df.height
    assert total == 121_701  # awk "FNR>1 && NF" over the same 50 files


def test_orfeo_axes_algorithm_mapping_and_size() -> None:
    root = require_datasets()
    bcast = parse_osu_csv_file(root / ORFEO[0] / "exercise1/results_def/bcast_bintree_results_wu_socket.csv")
    assert set(bcast["benchmark"]) == {"Bcast"} and set(bcast["algorithm"]) == {"binary_tree"}
    assert set(bcast["mapping"]) == {"socket"} and sorted(bcast["bytes"].unique()) == [2**i for i in range(12)]
    assert bcast["processes"].min() == 2 and bcast["processes"].max() == 256
    # The earlier barrier exports name a MessageSize column that none of their rows has.
    barrier = parse_osu_csv_file(root / ORFEO[0] / "exercise1/results_def/barrier_linear_results_wu.csv")
    first = barrier.row(0, named=True)
    assert (first["benchmark"], first["algorithm"], first["mapping"], first["processes"], first["bytes"],
            first["t_usec"]) == ("Barrier", "linear", "core", 2, None, 0.29)  # fmt: skip
    ring = parse_osu_csv_file(root / ORFEO[0] / "exercise1/results_def/barrier_ring_results_wu_core.csv")
    assert set(ring["algorithm"]) == {"double_ring"}  # coll_tuned_barrier_algorithm 2
    # zampar's "Linear" bcast ran algorithm 6 (binomial): the caller can correct the label.
    linear = root / ORFEO[1] / "Excercise_1/bcast/results/bcast_linear.csv"
    assert set(parse_osu_csv_file(linear)["algorithm"]) == {"basic_linear"}
    assert set(parse_osu_csv_file(linear, algorithm="binomial")["algorithm"]) == {"binomial"}
    pairs = parse_osu_csv_file(root / ORFEO[1] / "Excercise_1/latency/latency_data_single_node.csv")
    assert set(pairs["benchmark"]) == {"PingPong"} and set(pairs["processes"]) == {2}
    assert pairs["mapping"].n_unique() == 276  # every core pair i < j of 24 cores


def test_raw_core_pair_log_holds_the_same_rows_as_its_csv() -> None:
    """slurm_latency is osu_latency's rows without OSU's banner (the script kept the table only);
    its CSV twin, which the CSV parser reads, must hold the same numbers in the same order."""
    latency = require_datasets() / ORFEO[1] / "Excercise_1/latency"
    for log, export in (("slurm_latency", "latency_data_single_node.csv"),
                        ("slurm_latency_2_nodes", "latency_data_two_nodes.csv")):  # fmt: skip
        rows = [line.split() for line in (latency / log).read_text().splitlines() if NUMERIC_ROW.match(line)]
        df = parse_osu_csv_file(latency / export)
        assert df.height == len(rows)
        assert df["bytes"].to_list() == [int(r[0]) for r in rows]
        assert df["t_usec"].to_list() == [float(r[1]) for r in rows]


# -- the models on OSU data ----------------------------------------------------------------------


def test_hockney_latency_of_osu_latency_matches_published_minima() -> None:
    root = require_datasets() / STACKHPC / "output"
    for partition, published in PUBLISHED_OSU_LATENCY_MIN_US.items():
        path = root / partition / "omb/Osu_latency/rfm_Osu_latency_job.out"
        samples = parse_osu_file(path).with_columns(pl.lit(partition).alias("label"))
        (fit,) = fit_hockney_table(samples, ["label"])  # as `mpiatlas fit` runs it on imported samples
        assert fit.benchmark == "PingPong" and fit.error is None
        assert fit.latency_us == pytest.approx(published, rel=0.15), partition


def test_mpiatlas_fit_reads_osu_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI path: OSU rows with a label and np (what the importer adds) in a samples table."""
    root = require_datasets() / STACKHPC / "output"
    frames = [
        parse_osu_file(root / partition / "omb" / test / f"rfm_{test}_job.out").with_columns(
            pl.lit(partition).alias("label"), pl.col("processes").alias("np"))
        for partition in ("alaska/ib-gcc9-openmpi4-ucx", "csd3/cclake-roce-gcc9-ompi3-ucx")
        for test in ("Osu_latency", "Osu_bw", "Osu_allreduce")
    ]  # fmt: skip
    pl.concat(frames).write_parquet(tmp_path / "osu_samples.parquet")
    assert main(["fit", str(tmp_path), "--json"]) == 0
    fits = {f["label"]: f for f in json.loads(capsys.readouterr().out)}
    assert sorted(fits) == ["alaska/ib-gcc9-openmpi4-ucx", "csd3/cclake-roce-gcc9-ompi3-ucx"]  # PingPong only
    assert fits["alaska/ib-gcc9-openmpi4-ucx"]["latency_us"] == pytest.approx(1.02, rel=0.15)
    assert fits["csd3/cclake-roce-gcc9-ompi3-ucx"]["np"] == 2


def test_osu_bw_asymptote_matches_published_maxima() -> None:
    """osu_bw prints bandwidth, not time: per message t = size / bandwidth. The published maximum is
    the peak B (the highest s/t, exactly); the last Hockney segment's B, the model's asymptotic
    slope, is within 5 % of it, and the asymptotic B (s/t at the largest size) does not exceed it."""
    root = require_datasets() / STACKHPC / "output"
    for partition, published in PUBLISHED_OSU_BW_MAX_MBPS.items():
        df = parse_osu_file(root / partition / "omb/Osu_bw/rfm_Osu_bw_job.out")
        fit = fit_hockney(df["bytes"].to_list(), (df["bytes"] / df["bandwidth_MBps"]).to_list())
        assert fit.peak_bandwidth_MBps == pytest.approx(published, rel=1e-9), partition
        assert fit.segments[-1].bandwidth_MBps == pytest.approx(published, rel=0.05), partition
        assert fit.asymptotic_bytes == df["bytes"].max(), partition
        assert fit.asymptotic_bandwidth_MBps <= fit.peak_bandwidth_MBps, partition


# -- OSU text formats ----------------------------------------------------------------------------


def _bcast_full_text(rows: list[dict[str, object]], version: str = "7.3") -> str:
    """osu_bcast -f output (OMB 7.x print_stats with show_full) for the given CSV rows."""
    columns = f"{'Avg Latency(us)':>18}{'Min Latency(us)':>18}{'Max Latency(us)':>18}{'Iterations':>12}"
    lines = [f"# OSU MPI Broadcast Latency Test v{version}", "# Datatype: MPI_CHAR.", f"{'# Size':<10}{columns}"]
    for r in rows:
        lines.append(f"{r['bytes']:<10}{r['t_usec']:>18.2f}{r['t_min_usec']:>18.2f}{r['t_max_usec']:>18.2f}{10000:>12}")
    return "\n".join(lines) + "\n"


def test_collective_full_columns_match_the_csv_export_of_the_same_runs() -> None:
    """zampar's bcast CSVs are the -f columns ($1..$4) of osu_bcast: printing those rows back in
    OSU's own -f layout and parsing them gives the same numbers, one run per process count."""
    export = parse_osu_csv_file(require_datasets() / ORFEO[1] / "Excercise_1/bcast/results/bcast_default.csv")
    core = export.filter(pl.col("mapping") == "core")
    text = "".join(
        f"mpirun -np {np} osu_bcast -f\n" + _bcast_full_text(group.to_dicts())
        for (np,), group in core.group_by("processes", maintain_order=True)
    )
    df = parse_osu_text(text, "bcast.out", processes=None)
    assert df.height == core.height == 24 * 21 and df["run"].n_unique() == 24
    assert set(df["benchmark"]) == {"Bcast"} and set(df["repetitions"]) == {10000}
    for column in ("bytes", "t_usec", "t_min_usec", "t_max_usec", "t_avg_usec"):
        assert df[column].to_list() == core[column].to_list(), column


def test_several_runs_in_one_file_and_barrier_without_size(tmp_path: Path) -> None:
    root = require_datasets() / STACKHPC / "output/alaska/ib-gcc9-openmpi4-ucx/omb"
    text = (root / "Osu_latency/rfm_Osu_latency_job.out").read_text()
    text += "[cn01] some launcher warning\n" + (root / "Osu_bw/rfm_Osu_bw_job.out").read_text()
    # osu_barrier prints no size column; -f adds Min/Max/Iterations (OMB 5.x print_stats, size hidden).
    text += "\n# OSU MPI Barrier Latency Test v5.6.2\n"
    text += "# Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n"
    text += f"{3.17:>17.2f}{3.05:>18.2f}{3.29:>18.2f}{1000:>12}\n"
    df = parse_osu_text(text, "several.out", processes=64)
    assert df.group_by("run", maintain_order=True).agg(pl.col("benchmark").first(), pl.len()).rows() == [
        (0, "PingPong", 24), (1, "Uniband", 23), (2, "Barrier", 1)]  # fmt: skip
    barrier = df.filter(pl.col("benchmark") == "Barrier").row(0, named=True)
    assert (barrier["bytes"], barrier["t_usec"], barrier["t_min_usec"], barrier["t_max_usec"], barrier["repetitions"],
            barrier["processes"]) == (None, 3.17, 3.05, 3.29, 1000, 64)  # fmt: skip


def test_validation_tail_and_nonblocking_columns() -> None:
    text = (
        "# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_CHAR.\n"
        f"{'# Size':<10}{'Avg Latency(us)':>18}{'Validation':>18}{'P50 Tail Lat(us)':>18}\n"
        f"{4:<10}{5.31:>18.2f}{'Pass':>18}{5.20:>18.2f}\n{8:<10}{5.86:>18.2f}{'Fail':>18}{5.70:>18.2f}\n"
        "# OSU MPI Non-blocking Broadcast Latency Test v7.4\n# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n"
        f"{'# Size':<10}{'Overall(us)':>18}{'Compute(us)':>18}{'Pure Comm.(us)':>18}{'Overlap(%)':>18}\n"
        f"{1:<10}{12.50:>18.2f}{10.10:>18.2f}{4.20:>18.2f}{57.14:>18.2f}\n"
    )
    df = parse_osu_text(text, "v7.out")
    assert df.select("benchmark", "bytes", "t_usec", "status").rows() == [
        ("Allreduce", 4, 5.31, "ok"), ("Allreduce", 8, 5.86, "validation Fail"), ("Ibcast", 1, 4.20, "ok")]  # fmt: skip
    # A failed validation is kept, but never fitted (fits read status == "ok" only).


# -- errors name file and line -------------------------------------------------------------------


def _latency_lines() -> list[str]:
    path = require_datasets() / STACKHPC / "output/alaska/ib-gcc9-openmpi4-ucx/omb/Osu_latency/rfm_Osu_latency_job.out"
    return path.read_text().splitlines()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ls: ls[:10] + ["2048"] + ls[11:],
         "t.out:11: expected 2 columns (Size | Latency (us)) but found 1: '2048'"),
        (lambda ls: ls[:10] + ["256    N/A"] + ls[11:], "t.out:11: non-numeric value 'N/A' in column 'Latency (us)'"),
        (lambda ls: ls[:2], "t.out:2: OSU 'Latency' table has no rows (truncated output?)"),
        (lambda ls: ls[:1], "t.out:1: OSU 'Latency' run has no table header (truncated output?)"),
        (lambda ls: ls[2:], "t.out:1: data row outside an OSU table"),
        (lambda ls: [ls[0], "# Size   Latency (us)   Jitter (us)", "1   1.02   0.1"],
         "t.out:2: unrecognised OSU column(s) ['Jitter (us)']"),
        (lambda ls: ["# OSU MPI Put Latency Test v5.6.2", *ls[1:]], "t.out:1: unsupported OSU benchmark 'Put Latency'"),
        (lambda ls: ["mpirun: command not found"], "t.out:1: end of file: no OSU result tables found"),
    ],
)
def test_malformed_osu_text_is_reported_with_file_and_line(edit, message: str) -> None:
    with pytest.raises(OsuParseError) as info:
        parse_osu_text("\n".join(edit(_latency_lines())) + "\n", "t.out")
    assert str(info.value).startswith(message)


def test_malformed_csv_exports_are_reported_with_file_and_line(tmp_path: Path) -> None:
    header = "Algorithm,Allocation,Processes,MessageSize,Avg Latency(us)\n"
    cases = {
        "bcast_short.csv": (header + "chain,core,2,1,0.13\nchain,core,2,2\n", "bcast_short.csv:3: expected 5 values"),
        "bcast_text.csv": (header + "chain,core,two,1,0.13\n",
                           "bcast_text.csv:2: non-numeric value 'two' in column 'Processes'"),
        "results.csv": (header + "chain,core,2,1,0.13\n", "results.csv:1: cannot tell which collective"),
        "bcast_empty.csv": (header, "bcast_empty.csv:1: end of file: OSU export has a header but no rows"),
        "bcast_nosize.csv": ("Algorithm,Allocation,Processes,Latency\nchain,core,2,0.13\n",
                             "bcast_nosize.csv:1: OSU Bcast export"),
    }
    for name, (text, message) in cases.items():
        with pytest.raises(OsuParseError) as info:
            parse_osu_csv_text(text, tmp_path / name)
        assert str(info.value).startswith(f"{tmp_path}/{message}"), name


def test_quoted_export_is_split_by_csv_rules(tmp_path: Path) -> None:
    text = 'Algorithm,Allocation,Processes,MessageSize,Avg Latency(us)\n"bin_tree","node",4,"1,024",2.50\n'
    with pytest.raises(OsuParseError, match=r"bcast_q.csv:2: non-numeric value '1,024' in column 'MessageSize'"):
        parse_osu_csv_text(text, tmp_path / "bcast_q.csv")
    df = parse_osu_csv_text(text.replace('"1,024"', '"1024"'), tmp_path / "bcast_q.csv")
    row = df.select("algorithm", "mapping", "processes", "bytes", "t_usec").row(0)
    assert row == ("binary_tree", "node", 4, 1024, 2.5)


# -- dispatch ------------------------------------------------------------------------------------


def test_detection_tells_osu_from_imb_and_other_csvs() -> None:
    root = require_datasets()
    imb = root / STACKHPC / "output/alaska/ib-gcc9-openmpi4-ucx/imb/IMB_PingPong/rfm_IMB_PingPong_job.out"
    assert not is_osu_text(imb.read_text()) and parse_imb_file(imb).columns == COLUMNS
    imb_outputs = [*(root / STACKHPC / "output").glob("*/*/imb/*/*.out"),
                   *(root / STACKHPC / "mpi-container-test").glob("*.out"), *(root / "local-imb-samples").glob("*.txt")]
    assert len(imb_outputs) > 100 and not any(is_osu_text(p.read_text(errors="replace")) for p in imb_outputs)
    osu = [p.read_text() for p in _stackhpc_osu_files()]
    assert all(is_osu_text(text) for text in osu)
    # A log with both suites' output goes to the IMB parser, which names what it cannot read.
    assert not is_osu_text(imb.read_text() + osu[0])
    derived = root / ORFEO[1] / "Excercise_1/bcast/results/comparison.csv"
    assert not is_osu_csv(derived, derived.read_text().splitlines()[0])
    assert not is_osu_csv(imb, "Algorithm,Allocation,Processes,Latency")  # not a .csv
    # OSU rows extend the IMB schema by the two cell columns a CSV export fills.
    assert [*COLUMNS, "mapping", "algorithm"] == OSU_COLUMNS


def test_dispatch_rule_routes_every_dataset_file_to_a_parser_that_reads_it() -> None:
    """The rule the importer applies: .csv -> CSV exports, OSU banner (and no IMB one) -> OSU text,
    else IMB. Over every IMB/OSU output and OSU CSV of the shared datasets, nothing fails."""
    root = require_datasets()
    files = [*(root / STACKHPC / "output").glob("*/*/[io]mb/*/*.out"),
             *(root / STACKHPC / "mpi-container-test").glob("*.out"), *_orfeo_csvs()]
    kinds: dict[str | None, int] = {}
    for path in files:
        text = path.read_text()
        kind = osu_kind(path, text)
        kinds[kind] = kinds.get(kind, 0) + 1
        df = parse_imb_file(path) if kind is None else parse_osu_input(path, text)
        assert df.height > 0 and set(COLUMNS) <= set(df.columns), path
    assert kinds == {None: 4 * 25 + 4 * 13 + 4, "text": 102, "csv": 50}  # IMB: alaska, csd3, container tests
    derived = root / ORFEO[1] / "Excercise_1/bcast/results/comparison.csv"
    with pytest.raises(OsuParseError, match=r"comparison.csv:1: unrecognised column 'Optimal_Count'"):
        parse_osu_input(derived, derived.read_text())
    with pytest.raises(OsuParseError, match=r"x.out:1: not OSU output"):
        parse_osu_input("x.out", "hello\n")


# -- through `mpiatlas import` ---------------------------------------------------------------------


def test_import_reads_osu_text_csv_and_imb_files_together(tmp_path: Path) -> None:
    """The importer routes each file to its reader: every StackHPC OSU log, every ORFEO CSV and an
    IMB capture in one call, every row kept, the CSVs' mapping and algorithm kept as axes."""
    from mpiatlas.commands import import_ as import_command
    from mpiatlas.tables.importer import import_files

    imb = require_datasets() / "local-imb-samples" / "impi_np2_PingPong.txt"
    osu_text, osu_csv = _stackhpc_osu_files(), _orfeo_csvs()
    result = import_files([*osu_text, *osu_csv, imb], osu_processes=64)
    assert not result.failed
    samples = result.samples
    assert samples is not None
    assert samples.filter(pl.col("label") != imb.stem).height == 2304 + 121_701
    assert samples.filter(pl.col("label") == imb.stem).height == parse_imb_file(imb).height
    assert (samples.filter(pl.col("label") != imb.stem)["imb_version"].str.starts_with("OMB")).all()
    orfeo = samples.filter(pl.col("source").str.ends_with(".csv")).select("source", "line", "mapping", "algorithm")
    direct = pl.concat([parse_osu_csv_file(p) for p in osu_csv]).select("source", "line", "mapping", "algorithm")
    assert orfeo.sort("source", "line").equals(direct.sort("source", "line"))
    assert orfeo["algorithm"].drop_nulls().n_unique() > 5
    # OSU collective text output gets the rank count the user gave; IMB keeps its own.
    stackhpc_bcast = samples.filter(pl.col("source").str.contains("Osu_allreduce"))
    assert stackhpc_bcast.height > 0 and set(stackhpc_bcast["np"].to_list()) == {64}
    assert set(samples.filter(pl.col("label") == imb.stem)["np"].to_list()) == {2}
    # The CLI passes --np through and writes the table.
    args = argparse.Namespace(files=[osu_text[0], imb], out=tmp_path, np=112, label=None, labels=None, pool=False,
                              verbose=False)
    assert import_command.run(args) == 0
    assert pl.read_parquet(tmp_path / "imb_samples.parquet").height > 0
