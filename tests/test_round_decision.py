"""A round's decision file is read at one boundary (read_decision): a bad file fails there, naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiatlas.campaign.round_decision import read_decision

GOOD = {"round": 0, "spec": {"min": 3, "max": 9, "ci_halfwidth": 0.05}, "groups": {},
        "series": [{"series": "imb/i/shm/core/np2/PingPong/default", "cell": {}, "reps": 3, "halfwidth": 0.02,
                    "state": "reached", "round": 0}], "later_remeasure": []}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "round0.json"
    path.write_text(json.dumps(data))
    return path


def test_a_decision_reads_back_as_written(tmp_path: Path) -> None:
    decision = read_decision(_write(tmp_path, GOOD))
    assert decision == GOOD and decision["series"][0]["reps"] == 3


@pytest.mark.parametrize(("data", "expected"), [
    ({k: v for k, v in GOOD.items() if k != "groups"}, "key 'groups' missing or not dict"),
    ({**GOOD, "round": "0"}, "key 'round' missing or not int (got '0')"),
    ({**GOOD, "spec": []}, "key 'spec' missing or not dict or null"),
    ({**GOOD, "series": [{"series": "s", "cell": {}}]}, "series[0] lacks reps, state"),
    ({**GOOD, "later_remeasure": "r1.again.0"}, "key 'later_remeasure' is not a list of group ids"),
    ([GOOD], "a round decision is a JSON object, got list"),
])
def test_a_bad_decision_names_the_file_and_the_key(tmp_path: Path, data: object, expected: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ValueError) as err:
        read_decision(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)


def test_an_unreadable_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "round0.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"round0\.json: not a readable round decision"):
        read_decision(path)
