"""`mpiatlas tune MEASURED --np ... --bytes ...`: decisions for P never measured, on the ORFEO EPYC Bcast
(core mapping, measured P <= 16; tests/test_tune_extrapolate_orfeo.py has the regret study)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
import test_tune_extrapolate_orfeo as study

from mpiatlas.cli import main
from mpiatlas.tuning.decide import TuneError
from mpiatlas.tuning.guided import DECISION_COLUMNS, parse_counts
from mpiatlas.tuning.regret import regret

REGIONS = ("region,latency_us\nsame_l3,0.15\nsame_die,0.31\nsame_numa,0.34\nsame_socket,0.36\n"
           "other_socket,0.65\nother_node,1.82\n")  # the published ORFEO EPYC table (test_predict_orfeo)


def test_counts_take_lists_and_ranges() -> None:
    assert parse_counts(["32 64", "128"], "np") == [32, 64, 128]
    assert parse_counts(["2..262144*2"], "bytes")[-3:] == [65536, 131072, 262144]
    assert parse_counts(["16..64:16", "2..4"], "np") == [2, 3, 4, 16, 32, 48, 64]
    with pytest.raises(TuneError, match=re.escape("--np: '8..2' is not a count or a range")):
        parse_counts(["8..2"], "np")
    with pytest.raises(TuneError, match=re.escape("--bytes: '1..8*1'")):
        parse_counts(["1..8*1"], "bytes")


def test_guided_tune_writes_decisions_rules_and_explanation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = study.measurements("core")
    csv = tmp_path / "measured.csv"
    data.filter(pl.col("np") <= 16).write_csv(csv)
    (tmp_path / "regions.csv").write_text(REGIONS)
    out = tmp_path / "tuning"
    code = main(["tune", str(csv), "--out", str(out), "--stack", "openmpi-4.1", "--np", "17", "32", "64", "128", "256",
                 "--bytes", "1..2048*2", "--topology", study.orfeo.EPYC_TOPOLOGY, "--nodes", "2",
                 "--mapping", "core", "--regions", str(tmp_path / "regions.csv"), "--next", "5"])
    assert code == 0, capsys.readouterr().err
    decisions = pl.read_csv(out / "decisions.csv")
    assert tuple(decisions.columns) == DECISION_COLUMNS and decisions.height == 5 * 12
    assert not decisions["measured"].any()  # every target P is above the measured 16
    assert (decisions["predicted_lo_us"] <= decisions["predicted_us"]).all()
    assert (decisions["predicted_us"] <= decisions["predicted_hi_us"]).all()
    forced = decisions.filter(pl.col("algorithm") != "default")
    # chain just above the measured P (it was the fastest at P = 16 for most sizes), nowhere else: at P = 128 the
    # default runs binary_tree itself (Open MPI's fixed decision), the same code as the forced one
    # (tuning.same_code), so forcing it cannot gain with confidence.
    assert set(forced["algorithm"]) == {"chain"} and set(forced["np"]) == {17} and forced.height == 10
    # Judged on what was really measured at those 60 points: 2.0 % mean / 21.4 % worst regret, where always the
    # default gets 3.2 % / 22.3 %.
    test = data.filter(pl.col("np").is_in([17, 32, 64, 128, 256]))
    chosen = regret("model", decisions.with_columns(pl.lit("bcast").alias("collective")), test)
    default = regret("default", decisions.with_columns(pl.lit("bcast").alias("collective"),
                                                       pl.lit("default").alias("algorithm")), test)
    assert chosen.mean == pytest.approx(0.020, abs=0.003) and chosen.worst < 0.25, chosen.row()
    assert default.mean == pytest.approx(0.032, abs=0.002) and chosen.mean < default.mean, default.row()
    rules = (out / "openmpi-4.1.rules").read_text().splitlines()
    assert rules[1].startswith("1 ") and rules[2].startswith("7 ")  # one collective: bcast
    # A block for a communicator size the campaign never measured (> 16) whose rules name chain (id 2).
    starts = [int(line.split()[0]) for line in rules if "# from comm size" in line]
    assert 17 in starts, rules
    # Written with the fanout the forced chain ran with (4): a chain rule with fanout 0 runs the pipeline.
    assert [line.split()[1:4] for line in rules if "# chain" in line] == [["2", "4", "0"]] * 2, rules
    text = (out / "tuning.md").read_text()
    assert "| 17 | 1 B | chain |" in text and "binary_tree predicted faster, but not with 90% confidence" in text
    assert "Default kept at" in text and "o = " in text
    assert "decisions (" in capsys.readouterr().out
    # One adaptive round offline: the default and the candidate at the 5 least certain points, none measured.
    cells = pl.read_csv(out / "next_cells.csv")
    # (the default, the candidate and any other algorithm that may beat the default: at most 4 per point)
    assert tuple(cells.columns) == ("collective", "algorithm", "np", "bytes") and 2 <= cells.height <= 4 * 5
    assert "default" in set(cells["algorithm"]) and set(cells["np"]) <= {17, 32, 64, 128, 256}


def test_guided_tune_names_missing_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text("collective,algorithm,np,bytes,latency_us\nbcast,chain,2,4,1.0\nbcast,chain,4,4,2.0\n")
    assert main(["tune", str(csv), "--out", str(tmp_path / "o"), "--np", "8", "--bytes", "4",
                 "--topology", "pack:1 core:8 pu:1"]) == 2
    assert "no measurements of algorithm 'default'" in capsys.readouterr().err


def test_guided_tune_on_a_campaign_with_one_process_count_keeps_the_default(tmp_path: Path) -> None:
    """A recorded campaign (Intel MPI Allreduce, default and preset 5, P = 2 only; tests/test_tune_recorded.py):
    nothing larger to validate an extrapolation on, so every interval is unbounded and the default stays,
    saying why; the campaign's stack, mapping and nodes are the defaults."""
    out = tmp_path / "o"
    code = main(["tune", str(Path(__file__).parent / "data/tune/intelmpi_allreduce"), "--out", str(out), "--np", "2",
                 "--bytes", "4096..65536*2", "--topology", "pack:1 core:2 pu:1"])
    assert code == 0
    decisions = pl.read_csv(out / "decisions.csv")
    assert decisions.height == 5 and set(decisions["algorithm"]) == {"default"} and decisions["measured"].all()
    assert decisions["predicted_hi_us"].is_infinite().all()
    text = (out / "tuning.md").read_text()
    assert "5 point(s): no interval" in text and "under mapping `core`" in text
    assert not list(out.glob("*.env"))  # nothing to export
