"""``mpiatlas predict``: inputs, the JSON list, the table, and errors that name what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiatlas import cli
from mpiatlas.commands.predict import parse_np

DIES_XML = Path(__file__).parent / "data" / "topology" / "synthetic-dies.xml"


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "regions.csv"
    path.write_text("region,latency_us\nsame_socket,1\nother_socket,10\nother_node,100\n")
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["predict", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_per_np(capsys: pytest.CaptureFixture[str], table: Path) -> None:
    code, out, _ = _run(capsys, str(table), "--topology", "pack:2 core:2 pu:1", "--collective", "bcast",
                        "--algorithm", "basic_linear", "--np", "2..4", "--json")  # fmt: skip
    assert code == 0
    rows = json.loads(out)
    # Root 0 sends to 1 (1 µs), 2 and 3 (10 µs each, other socket), one after the other.
    assert [(r["np"], r["bytes"], r["predicted_us"]) for r in rows] == [(2, 4, 1.0), (3, 4, 11.0), (4, 4, 21.0)]


def test_nodes_placement_and_default(capsys: pytest.CaptureFixture[str], table: Path) -> None:
    common = [str(table), "--topology", "pack:2 core:2 pu:1", "--collective", "bcast", "--json"]
    # Cyclic over 2 nodes: rank 1 is on the other node.
    code, out, _ = _run(capsys, *common, "--algorithm", "pipeline", "--np", "2", "--nodes", "2", "--placement", "cyclic")
    assert code == 0 and json.loads(out)[0]["predicted_us"] == 100.0
    # 'default' resolves to Open MPI 4.1's choice: binary_tree at 4 ranks, 4 B.
    code, out, _ = _run(capsys, *common, "--algorithm", "default", "--np", "4")
    assert code == 0 and json.loads(out)[0]["algorithm"] == "binary_tree"


def test_rich_table_and_xml_topology(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("region,latency_us\nsame_l3,0.15\nsame_die,0.3\nsame_numa,0.4\n")
    code, out, _ = _run(capsys, str(path), "--topology", str(DIES_XML), "--collective", "bcast",
                        "--algorithm", "pipeline", "--np", "2,3,5")  # fmt: skip
    assert code == 0
    assert "bcast pipeline, 4 B" in out
    # Pipeline 0 -> 1 -> 2 -> 3 -> 4: same L3, same die, same L3, same NUMA.
    assert "0.150" in out and "0.450" in out and "1.000" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--np", "1..4"], "every count must be >= 2"),
        (["--np", "8..2"], "need A <= B"),
        (["--np", "x"], "cannot read 'x'"),
        (["--np", "9"], "np=9 does not fit 1 node(s) x 4 ranks per node"),
        (["--np", "4", "--algorithm", "split_binary_tree"], "'split_binary_tree' is not modelled"),
        (["--np", "4", "--topology", "pack:2 core:2"], "the last level must be pu"),
        (["--np", "4", "--collective", "alltoall"], "collective 'alltoall' is not modelled"),
    ],
)
def test_errors_exit_2_with_a_message(capsys: pytest.CaptureFixture[str], table: Path, argv: list[str], message: str) -> None:
    base = {"--topology": "pack:2 core:2 pu:1", "--collective": "bcast", "--algorithm": "chain"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    code, _, err = _run(capsys, str(table), *[x for kv in base.items() for x in kv])
    assert code == 2 and message in err, err


def test_missing_region_names_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "partial.csv"
    path.write_text("region,latency_us\nsame_socket,1\n")
    code, _, err = _run(capsys, str(path), "--topology", "pack:2 core:2 pu:1", "--collective", "bcast",
                        "--algorithm", "chain", "--np", "3")  # fmt: skip
    assert code == 2 and f"{path}: the placement has rank pairs in region 'other_socket'" in err


def test_parse_np() -> None:
    assert parse_np("2..5") == [2, 3, 4, 5]
    assert parse_np("2..9:3,16, 4") == [2, 4, 5, 8, 16]


def test_calibrate_fits_gap_and_overhead_and_predicts_with_them(
    capsys: pytest.CaptureFixture[str], table: Path, tmp_path: Path
) -> None:
    from mpiatlas.models.loggp import LogGP
    from mpiatlas.models.loggp import predict as loggp_predict
    from mpiatlas.models.region_latency import place, read_region_table
    from mpiatlas.node.topology_synthetic import parse_synthetic

    # Measurements made by the model itself at o = 0.3, g = 0.4 (rank mean, as OSU reports): the fit finds them.
    truth = LogGP(overhead_us=0.3, gap_us=0.4)
    full = place(parse_synthetic("pack:2 core:4 pu:1"), 8)
    regions = read_region_table(table)
    measured = tmp_path / "measured.csv"
    lines = ["collective,algorithm,np,bytes,latency_us"]
    for n in range(2, 9):
        t = loggp_predict("bcast", "basic_linear", full.prefix(n), regions, 4, params=truth).rank_mean_us
        lines.append(f"bcast,basic_linear,{n},4,{t}")
    measured.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, str(table), "--topology", "pack:2 core:4 pu:1", "--collective", "bcast",
                          "--algorithm", "binary_tree", "--np", "2..8", "--calibrate", str(measured), "--json")  # fmt: skip
    assert code == 0, err
    assert "gap_us = 0.4 µs, 95 % CI" in err and "overhead_us = 0.3 µs" in err and "Jacobian covariance" in err
    assert "level_us = 0 µs (not fitted" in err  # a linear Bcast has no level to fit it on
    rows = json.loads(out)
    assert [set(r) >= {"np", "bytes", "predicted_us"} for r in rows] == [True] * 7
    expected = loggp_predict("bcast", "binary_tree", full.prefix(8), regions, 4, params=truth).completion_us
    assert rows[-1]["predicted_us"] == pytest.approx(expected, rel=1e-4)
    bad = tmp_path / "bad.csv"
    bad.write_text("collective,np\n")
    code, _, err = _run(capsys, str(table), "--topology", "pack:2 core:4 pu:1", "--collective", "bcast",
                        "--algorithm", "chain", "--np", "4", "--calibrate", str(bad))  # fmt: skip
    assert code == 2 and "bad.csv:1: header lacks algorithm, bytes, latency_us" in err
