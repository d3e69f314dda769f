"""The wait rule of mpiatlas.stats.quality.judge_launch (issue 33 item 5), on recorded launch records.

A launch is perturbed by its ranks' run-queue wait when the busiest rank's wait, less the quiet machine's
noise floor (``quiet_wait_s``), is more than ``wait_share`` of the launch's wall time. The records are the
two quiet LogGP kernel launches recorded on the 2-core VM (tests/data/loggp: Intel MPI shm, load 0.43, node
cpu pressure 2-4 %); the busiest rank is given 5, 10, 20, 40 or 60 ms of wait at a share of 5-30 % of the
launch's wall, everything else in the record as it was."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conftest import REPO
from mpiatlas.runner import machine_state as ms
from mpiatlas.stats import quality

RECORDED = [REPO / f"tests/data/loggp/raw/kernel/intelmpi/shm/same_l3/np2/loggp/m0-12/rep{i}/provenance.json"
            for i in (0, 1)]

WAITS_MS = (5, 10, 20, 40, 60)
SHARES = (0.05, 0.075, 0.15, 0.30)
# With the defaults (quiet_wait_s 5 ms, wait_share 5 %): perturbed when wait - 5 ms > 5 % of wall = 5 % of
# wait / share. Written out rather than computed, so a change of either limit shows here as a changed row.
EXPECTED = {  # wait in ms -> judged at shares 5 %, 7.5 %, 15 %, 30 % of the wall
    5: ("ok", "ok", "ok", "ok"),  # no more than the quiet floor, however short the launch
    10: ("ok", "ok", "perturbed", "perturbed"),  # 5 ms beyond the floor: 2.5 % / 3.75 % / 7.5 % / 15 % of wall
    20: ("ok", "perturbed", "perturbed", "perturbed"),  # 15 ms beyond: 3.75 % of a 0.4 s launch, 5.6 % of 0.27 s
    40: ("ok", "perturbed", "perturbed", "perturbed"),
    60: ("ok", "perturbed", "perturbed", "perturbed"),  # 55 ms of a 1.2 s launch is 4.6 %: within the share
}


def recorded(path_index: int) -> tuple[dict[str, Any], float]:
    doc = json.loads(RECORDED[path_index].read_text())
    return doc["machine"], float(doc["wall_s"])


def with_wait(machine: dict[str, Any], wall_recorded: float, wait_s: float, share: float) -> dict[str, Any]:
    """The record with its busiest rank waiting ``wait_s``, ``share`` of a launch of wall wait_s / share;
    the rank's observed lifetime keeps its recorded proportion of the wall."""
    out = copy.deepcopy(machine)
    wall = wait_s / share
    rank = max(out["ranks"], key=lambda r: r["wait_share"])
    observed = wall * rank["observed_s"] / wall_recorded
    rank.update(wait_s=wait_s, observed_s=observed, wait_share=wait_s / observed, wait_share_of_wall=share)
    out["wall_s"] = wall
    out["wait_share"] = max(r["wait_share"] for r in out["ranks"])
    return out


def test_the_recorded_quiet_launches_are_ok() -> None:
    for i in (0, 1):
        machine, wall = recorded(i)
        worst = max(r["wait_s"] for r in machine["ranks"])
        assert 0.002 < worst < 0.003 and wall == pytest.approx(0.48, abs=0.01)  # 2.3 and 2.9 ms of 0.48 s
        assert worst < quality.QUIET_WAIT_S  # the floor covers the quiet launches it was taken from
        assert quality.judge_launch(machine) == ("ok", None)
        assert quality.judge_launch({**machine, "wall_s": wall}) == ("ok", None)


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("wait_ms", WAITS_MS)
def test_wait_against_the_wall_after_the_quiet_floor(index: int, wait_ms: int) -> None:
    machine, wall = recorded(index)
    judged = [quality.judge_launch(with_wait(machine, wall, wait_ms / 1e3, share))[0] for share in SHARES]
    assert tuple(judged) == EXPECTED[wait_ms]


def test_the_reason_names_the_share_and_the_cpu() -> None:
    machine, wall = recorded(0)
    judged, reason = quality.judge_launch(with_wait(machine, wall, 0.020, 0.30))
    # 20 ms of a 0.067 s launch: 30 % of its wall (the rank saw 57 % of the wall, and waited 52 % of that).
    assert judged == "perturbed" and reason == "ranks waited 30 % of the launch for cpu 1"


def test_the_floor_and_the_share_are_configurable() -> None:
    machine, wall = recorded(0)
    ten_ms = with_wait(machine, wall, 0.010, 0.075)  # ok by default: 5 ms beyond the floor, 3.75 % of wall
    assert quality.judge_launch(ten_ms)[0] == "ok"
    assert quality.judge_launch(ten_ms, {"quiet_wait_s": 0.0})[0] == "perturbed"  # 10 ms: 7.5 % of wall
    assert quality.judge_launch(ten_ms, {"wait_share": 0.03})[0] == "perturbed"
    assert quality.limits(None)["quiet_wait_s"] == quality.QUIET_WAIT_S


def test_oversubscribed_wait_by_design_is_taken_off_in_seconds() -> None:
    # 4 ranks on the recorded record's 2 cpus wait half the wall by design; 60 ms more of a 1 s launch
    # (55 ms past the floor, 5.5 %) is a disturbance, 40 ms more (3.5 %) is not.
    machine, _ = recorded(0)
    machine = {**copy.deepcopy(machine), "n_ranks": 4, "wall_s": 1.0}
    rank = max(machine["ranks"], key=lambda r: r["wait_share"])
    for extra_s, want in ((0.040, "ok"), (0.060, "perturbed")):
        rank.update(wait_s=0.5 + extra_s, observed_s=1.0, wait_share=0.5 + extra_s)
        assert quality.judge_launch(machine, oversubscribed=True)[0] == want


def test_the_machine_record_keeps_the_wall_the_rule_reads() -> None:
    """runner.machine_state writes the launch's wall time into the record; a record without it (made
    before) is judged against the busiest rank's observed lifetime."""
    cpus = {c: dict.fromkeys(ms.CPU_FIELDS, 0) for c in (0, 1)}
    later = {c: {**v, "user": 100, "idle": 100} for c, v in cpus.items()}
    rank = ms.Seen(ms.PidStat(1000, "IMB-MPI1", "R", 1, 1, 100, 0, 0, 0, 0, 1), 30 * 10**6, 10**9, 0.5, [1])
    record = ms.launch_record(ms.NodeSnapshot(cpus, [0.1] * 3, None, None),
                              ms.NodeSnapshot(later, [0.1] * 3, None, None), 1.0, [rank], [], None, None, {})
    assert record["wall_s"] == 1.0 and record["ranks"][0]["wait_s"] == 0.03
    # 30 ms, 25 ms past the floor: 2.5 % of the 1 s wall (ok), 5.0 % of the rank's 0.5 s (not beyond 5 %)
    # and 10 % of a 0.25 s lifetime when the wall is not recorded (perturbed).
    assert quality.judge_launch(record)[0] == "ok"
    older = {**record, "ranks": [{**record["ranks"][0], "observed_s": 0.25, "wait_share": 0.12}]}
    del older["wall_s"]
    assert quality.judge_launch(older) == ("perturbed", "ranks waited 12 % of the launch for cpu 1")
