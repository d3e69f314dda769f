"""The cpu-pair probe (node.pair_latency, src/kernels/pair_latency.c) and what the judge decides
from it (stats.quality.pair_reasons).

Decisions are tested on two recorded launches (tests/data/pair_latency/launches.json): Intel MPI shm
PingPong on this project's 2-core AMD EPYC VM, one run while the vCPUs shared no cache (0.36 µs at
8 B, 1,851 µs at 4 MiB; the pair's round trip 323.5 ns before and 333.8 ns after, its best since boot
53.7 ns), one in the usual state (0.14 µs, 160 µs). The probe itself runs for real: its figures are
checked for shape, never against another live run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mpiatlas.node import pair_latency
from mpiatlas.runner import process
from mpiatlas.stats import quality

DATA = Path(__file__).parent / "data" / "pair_latency"
LAUNCHES = json.loads((DATA / "launches.json").read_text())


def test_the_launch_in_the_slow_state_is_perturbed_by_its_pair_alone() -> None:
    slow = LAUNCHES["slow"]["machine"]
    assert LAUNCHES["slow"]["imb_t_usec"]["4194304"] == 1851.16  # 11.6x the usual launch's 160.05
    judged, reason = quality.judge_launch(slow)
    assert judged == quality.PERTURBED
    # Nothing else in its record was beyond a limit (waits 4 %, others 4 %): the pair made the call.
    assert reason == ("cpus 0 and 1 passed a cache line in 334 ns, 6.2x their best since boot (54 ns): "
                      "the cores under them shared less cache than they can")
    without_pairs = {k: v for k, v in slow.items() if k != "pair_latency"}
    assert quality.judge_launch(without_pairs) == (quality.OK, None)


def test_the_launch_in_the_usual_state_is_ok() -> None:
    usual = LAUNCHES["usual"]["machine"]
    medians = [f["median_ns"] for when in ("before", "after") for f in usual["pair_latency"][when]["pairs"]]
    assert max(medians) / usual["pair_latency"]["best_ns"]["0-1"] < quality.PAIR_LATENCY_RATIO
    assert quality.judge_launch(usual) == (quality.OK, None)


def test_the_ratio_is_the_campaigns_limit() -> None:
    slow = LAUNCHES["slow"]["machine"]
    # 333.8 / 53.7 = 6.2: perturbed at a ratio of 6, not at 6.5.
    assert quality.judge_launch(slow, {"pair_latency_ratio": 6.0})[0] == quality.PERTURBED
    assert quality.judge_launch(slow, {"pair_latency_ratio": 6.5})[0] == quality.OK


def test_only_the_slow_side_of_the_launch_decides() -> None:
    # The state may change during a launch: slow before and usual after is still a perturbed launch.
    pairs = json.loads(json.dumps(LAUNCHES["slow"]["machine"]["pair_latency"]))
    pairs["after"]["pairs"][0]["median_ns"] = 55.0
    assert quality.pair_reasons(pairs, 2.0) == [
        "cpus 0 and 1 passed a cache line in 324 ns, 6.0x their best since boot (54 ns): the cores under them "
        "shared less cache than they can"]
    pairs["before"]["pairs"][0]["median_ns"] = 100.0  # 1.86x: within the ratio
    assert quality.pair_reasons(pairs, 2.0) == []
    assert quality.pair_reasons(None, 2.0) == []


def test_probe_output_is_parsed_and_bad_lines_are_named() -> None:
    # Lines as the probe printed them on this machine (a cpu it may not use, a pair on one cpu).
    text = "pair 0 1 61.4 59.2 62.6 101\npair 0 5 error cannot run on cpu 5\npair 0 0 error no batch within 50 ms\n"
    figures, errors = pair_latency.parse(text)
    assert figures == [{"cpus": [0, 1], "median_ns": 61.4, "p25_ns": 59.2, "p75_ns": 62.6, "batches": 101}]
    assert errors == ["cpus 0 and 5: cannot run on cpu 5", "cpus 0 and 0: no batch within 50 ms"]
    with pytest.raises(pair_latency.PairLatencyError, match="line 1: expected 'pair A B median"):
        pair_latency.parse("pair 0 1 fast\n")
    with pytest.raises(pair_latency.PairLatencyError, match="line 2: quartiles must be positive and ordered"):
        pair_latency.parse("pair 0 1 61.4 59.2 62.6 101\npair 0 1 61.4 70.0 62.6 101\n")
    with pytest.raises(pair_latency.PairLatencyError, match=r"line 1: expected 'pair A B \.\.\.'"):
        pair_latency.parse("# hello\n")


def test_pairs_are_neighbouring_cpus_at_most_eight_spread_over_the_node() -> None:
    assert pair_latency.pairs_of([1, 0]) == [(0, 1)]
    assert pair_latency.pairs_of([3, 3]) == [] and pair_latency.pairs_of(None) == []
    assert pair_latency.pairs_of([0, 2, 4]) == [(0, 2), (2, 4)]
    many = pair_latency.pairs_of(list(range(256)))
    assert len(many) == 8 and many[0] == (0, 1) and many[-1] == (254, 255)
    assert all(b == a + 1 for a, b in many) and many == sorted(set(many))


def test_the_best_since_boot_only_goes_down(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    probe = {"pairs": [{"cpus": [0, 1], "median_ns": 330.0, "p25_ns": 320.0, "p75_ns": 340.0, "batches": 101}],
             "errors": [], "cost_s": 0.006}
    assert pair_latency.remember_best([probe], path) == {"0-1": 330.0}
    probe["pairs"][0]["median_ns"] = 54.0
    assert pair_latency.remember_best([probe], path) == {"0-1": 54.0}
    probe["pairs"][0]["median_ns"] = 340.0
    assert pair_latency.remember_best([probe], path) == {"0-1": 54.0}
    assert json.loads(path.read_text()) == {"0-1": 54.0}
    path.write_text("not json")
    assert pair_latency.remember_best([probe], path) == {"0-1": 340.0}  # started again, not an error
    # Before and after one launch: the better of the two counts.
    after = json.loads(json.dumps(probe))
    after["pairs"][0]["median_ns"] = 60.0
    assert pair_latency.remember_best([probe, after], tmp_path / "two.json") == {"0-1": 60.0}


def test_the_probe_runs_on_two_cpus_and_refuses_one_it_may_not_use(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    binary = pair_latency.tool_binary()
    assert isinstance(binary, Path) and binary.stat().st_mode & stat.S_IXUSR
    a, b = sorted(os.sched_getaffinity(0))[:2]
    outside = max(os.sched_getaffinity(0)) + 1
    measured = pair_latency.probe(binary, [(a, b), (a, outside)])
    [figure] = measured["pairs"]
    assert figure["cpus"] == [a, b] and 1 <= figure["batches"] <= pair_latency.BATCHES
    assert 0 < figure["p25_ns"] <= figure["median_ns"] <= figure["p75_ns"]
    assert measured["errors"] == [f"cpus {a} and {outside}: cannot run on cpu {outside}"]
    assert 0 < measured["cost_s"] < 5


def test_a_probed_launch_records_its_pairs_before_and_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    cpus = sorted(os.sched_getaffinity(0))[:2]
    finished = process.run_launch(["true"], dict(os.environ), tmp_path, tmp_path / "out", tmp_path / "err", 30,
                                  process.Probe(planned_cpus=cpus))
    machine = finished.machine
    assert machine is not None and "error" not in machine
    pairs = machine["pair_latency"]
    assert [f["cpus"] for f in pairs["before"]["pairs"]] == [cpus] == [f["cpus"] for f in pairs["after"]["pairs"]]
    key = f"{cpus[0]}-{cpus[1]}"
    assert pairs["best_ns"][key] <= min(pairs["before"]["pairs"][0]["median_ns"], pairs["after"]["pairs"][0]["median_ns"])
    assert pairs["tool"].startswith("pair_latency.c@")
    # One planned cpu: nothing to probe, nothing recorded.
    one = process.run_launch(["true"], dict(os.environ), tmp_path, tmp_path / "out", tmp_path / "err", 30,
                             process.Probe(planned_cpus=cpus[:1])).machine
    assert one is not None and "pair_latency" not in one and "pair_latency_missing" not in one


def test_without_a_compiler_the_launch_says_why_it_was_not_probed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    finished = process.run_launch(["/bin/true"], {}, tmp_path, tmp_path / "out", tmp_path / "err", 30,
                                  process.Probe(planned_cpus=[0, 1]))
    assert finished.machine is not None
    assert finished.machine.get("pair_latency_missing") == \
        "pair probe: no C compiler on PATH (cc, gcc or $CC) to build pair_latency"
