"""Re-measuring perturbed launches (campaign.remeasure, runner.run.run_group).

A launch judged ``perturbed`` (status.json ``quality``) is set aside whole under
``perturbed/<cell id>/attempt<k>`` and the cell runs again at the end of its job group, up to the
budget; the final status lists the attempts set aside, the cells table counts them, the progress
counts them and the report lists them. These tests run the real run_cell, lifecycle and sealing;
only the MPI launch and its judgement (runner.run._launch_and_judge) are replaced by a script of
outcomes, since a fresh machine has no MPI (the live campaign: tests/test_perturbation_campaign.py).
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from mpiatlas.matrix import layout
from mpiatlas.matrix.config import load
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.programs import cell_spec, expand
from mpiatlas.campaign import cell_groups
from mpiatlas.campaign.progress import Progress
from mpiatlas.report.blocks import Table, Text
from mpiatlas.report.data import ReportData
from mpiatlas.report.render import render_html
from mpiatlas.report.sections.cell_table import REMEASURED_TITLE, remeasured_blocks, section_cells
from mpiatlas.runner import CellInterrupted, run_group
from mpiatlas.runner import run as run_module
from mpiatlas.runner import scheduler_state
from mpiatlas.tables.tidy import CELL_SCHEMA, cell_row

ROOT = Path(__file__).resolve().parents[1]
WAITED = "ranks waited 41 % of the launch for cpu 1"


def _specs(n: int) -> list[dict[str, Any]]:
    config = load(ROOT / "config" / "test" / "tiny.yaml")
    cells = [c for c in expand(config) if c.kind == "imb" and c.transport == "shm"][:n]
    return [cell_spec(config, c) for c in cells]


class Script:
    """The launches' judgements, per cell in the order its launches run; ``stop_at``: the launch
    (0-based, over all cells) during which the group is stopped by SIGTERM, as scancel would."""

    def __init__(self, plan: dict[str, list[str]], stop_at: int | None = None, reason: str = WAITED) -> None:
        self.plan = {cell: list(qualities) for cell, qualities in plan.items()}
        self.launched: list[str] = []
        self.stop_at = stop_at
        self.reason = reason

    def __call__(self, program: Any, stack: Any, spec: dict[str, Any], work: Path, record: dict[str, Any],
                 shared: Any) -> Outcome:
        if len(self.launched) == self.stop_at:
            self.stop_at = None
            os.kill(os.getpid(), signal.SIGTERM)  # lifecycle's handler raises CellInterrupted
        self.launched.append(spec["id"])
        (work / layout.STDOUT).write_text(f"launch {len(self.launched)}\n")
        quality = self.plan[spec["id"]].pop(0)
        reason = self.reason if quality == "perturbed" else None
        return Outcome("ok", None, {"quality": quality, "quality_reason": reason})


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], list[Path], Path]:
    monkeypatch.chdir(tmp_path)
    specs = _specs(3)
    results = tmp_path / "results" / "tiny"
    return specs, [results / "raw" / s["id"] for s in specs], results


def _status(out: Path) -> dict[str, Any]:
    return json.loads((out / layout.STATUS).read_text())


def test_perturbed_launches_run_again_at_the_groups_end_up_to_the_budget(group, monkeypatch) -> None:
    specs, outs, results = group
    a, b, c = (s["id"] for s in specs)
    script = Script({a: ["perturbed", "ok"], b: ["ok"], c: ["perturbed"] * 4})
    monkeypatch.setattr(run_module, "_launch_and_judge", script)
    done = run_group(specs, outs, remeasure=3)
    # The group's cells first, then passes over the perturbed ones in the group's order.
    assert script.launched == [a, b, c, a, c, c, c]
    assert [(d["cell"], d["quality"], d["remeasured"]) for d in done] == [(a, "ok", 1), (b, "ok", 0),
                                                                          (c, "perturbed", 3)]
    final = _status(outs[0])
    assert final["quality"] == "ok"
    assert final[layout.REMEASURED] == [{"path": f"perturbed/{a}/attempt1", "quality_reason": WAITED}]
    # The perturbed attempt is kept whole and read-only, as it was sealed.
    aside = results / "perturbed" / a / "attempt1"
    assert (aside / layout.STDOUT).read_text() == "launch 1\n" and _status(aside)["quality"] == "perturbed"
    assert all(f.stat().st_mode & 0o222 == 0 for f in aside.iterdir())
    assert (outs[0] / layout.STDOUT).read_text() == "launch 4\n"
    # The budget spent, the last launch stays sealed perturbed with its three attempts listed.
    last = _status(outs[2])
    assert last["quality"] == "perturbed" and last["quality_reason"] == WAITED
    assert [r["path"] for r in last[layout.REMEASURED]] == [f"perturbed/{c}/attempt{k}" for k in (1, 2, 3)]
    assert layout.count_perturbed_attempts(results) == 4
    assert layout.perturbed_attempts(outs[2], c) == [results / "perturbed" / c / f"attempt{k}" for k in (1, 2, 3)]
    # A re-run of the finished group runs nothing: the budget is counted from the attempts on disk.
    assert [d["ran"] for d in run_group(specs, outs, remeasure=3)] == [False] * 3
    assert script.launched == [a, b, c, a, c, c, c]


def test_a_group_stopped_during_a_remeasure_resumes_without_losing_or_repeating_attempts(group, monkeypatch) -> None:
    specs, outs, results = group
    a, b, c = (s["id"] for s in specs)
    # Stopped in the 5th launch: c's first re-measure, after its perturbed attempt was set aside.
    first = Script({a: ["perturbed", "ok"], b: ["ok"], c: ["perturbed"]}, stop_at=4)
    monkeypatch.setattr(run_module, "_launch_and_judge", first)
    with pytest.raises(CellInterrupted):
        run_group(specs, outs, remeasure=2)
    assert first.launched == [a, b, c, a]
    assert not outs[2].exists() and layout.perturbed_attempts(outs[2], c) == [results / "perturbed" / c / "attempt1"]
    # The same group again: c runs in the main pass (it has no raw directory), knows its attempt,
    # is still perturbed and gets the one re-measure left.
    again = Script({c: ["perturbed", "perturbed"]})
    monkeypatch.setattr(run_module, "_launch_and_judge", again)
    done = run_group(specs, outs, remeasure=2)
    assert again.launched == [c, c]
    assert [d["ran"] for d in done] == [False, False, True]
    assert [r["path"] for r in _status(outs[2])[layout.REMEASURED]] == [f"perturbed/{c}/attempt{k}" for k in (1, 2)]
    assert _status(outs[0])[layout.REMEASURED][0]["path"] == f"perturbed/{a}/attempt1"
    assert layout.count_perturbed_attempts(results) == 3
    # A cell sealed perturbed with budget left (an earlier run with a smaller budget) is re-measured on resume.
    more = Script({c: ["ok"]})
    monkeypatch.setattr(run_module, "_launch_and_judge", more)
    assert run_group(specs, outs, remeasure=3)[2] == {"cell": c, "status": "ok", "ran": True, "quality": "ok",
                                                     "remeasured": 3}


class Clock:
    """A job's clock that a launch moves on by ``launch_s`` (Script calls ``tick``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_re_measures_start_only_while_their_budget_fits_before_the_jobs_end(group, monkeypatch) -> None:
    """Under a deadline (the SLURM job's end) a re-measure runs only if the cell's budget still
    fits; the launch left perturbed keeps its re-measures for the later round."""
    specs, outs, _results = group
    a, b, c = (s["id"] for s in specs)
    clock = Clock()
    script = Script({a: ["perturbed"] * 4, b: ["perturbed"] * 4, c: ["perturbed"] * 4})
    monkeypatch.setattr(run_module, "_launch_and_judge", _taking(20.0, clock, script))
    # 200 s of job, 30 s budgeted per cell, 20 s per launch. The first launches end at 60 s; the
    # first pass (90 s budgeted, 140 left) ends at 120; with 80 s left a and b fit (60), c does not;
    # with 40 left a fits; with 20 left nothing does.
    deadline = run_module.Deadline(200.0, (30.0, 30.0, 30.0), clock)
    done = run_group(specs, outs, remeasure=3, deadline=deadline)
    assert script.launched == [a, b, c, a, b, c, a, b, a]
    assert [entry["remeasured"] for entry in done] == [3, 2, 1] and clock.now == 180.0
    assert all(_status(o)["quality"] == "perturbed" for o in outs)
    # b and c keep re-measures for the later round (its decision reads them from status.json).
    assert [run_module.wants_remeasure(o, s["id"], 3) for o, s in zip(outs, specs)] == [False, True, True]
    # The done file and the group log say so: the job's end (20 s after the last launch, plus the margin).
    assert [entry.get(run_module.DEFERRED) for entry in done] == [
        None, *["re-measure left for the later round: the job ends in 40 s"] * 2]


def test_a_cell_too_long_for_the_time_left_is_passed_over_not_the_end_of_the_pass(group, monkeypatch) -> None:
    specs, outs, _results = group
    a, b, c = (s["id"] for s in specs)
    clock = Clock()
    script = Script({a: ["perturbed"] * 2, b: ["perturbed", "ok"], c: ["perturbed", "ok"]})
    monkeypatch.setattr(run_module, "_launch_and_judge", _taking(20.0, clock, script))
    # The first launches end at 60 s, 40 s before the deadline: a's 50 s budget does not fit; b and c (20 s) do.
    done = run_group(specs, outs, remeasure=3, deadline=run_module.Deadline(100.0, (50.0, 20.0, 20.0), clock))
    assert script.launched == [a, b, c, b, c] and clock.now == 100.0
    assert [(entry["quality"], entry["remeasured"]) for entry in done] == [("perturbed", 0), ("ok", 1), ("ok", 1)]
    assert done[0][run_module.DEFERRED].startswith("re-measure left for the later round") and len(done[1]) == 5
    assert cell_groups._quality_note(done[0]).endswith("re-measure left for the later round: the job ends in 20 s)")


def test_a_deadline_counts_on_its_own_clock() -> None:
    clock = Clock()
    clock.now = 1000.0
    deadline = run_module.Deadline.after(300.0, [10.0], clock)
    assert deadline.at == 1000.0 + 300.0 - run_module.DEADLINE_MARGIN_S and deadline.left_s() == 280.0


def _taking(seconds: float, clock: Clock, script: Script) -> Any:
    """``script``'s launches, each moving ``clock`` on by ``seconds``."""
    def launch(*args: Any) -> Outcome:
        clock.now += seconds
        return script(*args)
    return launch


def test_the_later_pass_waits_only_what_the_job_has_left(group, monkeypatch) -> None:
    specs, outs, _results = group
    a = specs[0]["id"]
    clock = Clock()
    waits: list[float] = []
    not_waited = run_module.wait_until_quiet(run_module.QuietRule(max_wait_s=0))

    def wait(rule: run_module.QuietRule) -> Any:
        waits.append(rule.max_wait_s)
        clock.now += rule.max_wait_s
        return not_waited

    monkeypatch.setattr(run_module, "wait_until_quiet", wait)
    later = run_module.Later(2, run_module.QuietRule(max_wait_s=60, window_s=2))
    # 100 s of job, 30 s budgeted, 20 s per launch. The first launch ends at 20; the first pass
    # waits what is spare after its cell (80 - 30 - 2 = 48 s) and ends at 88; the second, with 12 s
    # left, does not start.
    monkeypatch.setattr(run_module, "_launch_and_judge", _taking(20.0, clock, Script({a: ["perturbed"] * 3})))
    run_group(specs[:1], outs[:1], remeasure=0, later=later, deadline=run_module.Deadline(100.0, (30.0,), clock))
    assert waits == [48.0] and clock.now == 88.0
    assert _status(outs[0])["quality"] == "perturbed" and len(_status(outs[0])[layout.REMEASURED]) == 1
    # 170 s: the first pass waits its full 60 s and ends at 100; the second waits 70 - 30 - 2 = 38 s.
    clock.now, waits[:] = 0.0, []
    b = specs[1]["id"]
    monkeypatch.setattr(run_module, "_launch_and_judge",
                        _taking(20.0, clock, Script({b: ["perturbed", "perturbed", "ok"]})))
    run_group(specs[1:2], outs[1:2], remeasure=0, later=later, deadline=run_module.Deadline(170.0, (30.0,), clock))
    assert waits == [60.0, 38.0] and _status(outs[1])["quality"] == "ok"


def test_the_jobs_time_left_is_read_from_squeue() -> None:
    assert scheduler_state.parse_time_left("45:07\n") == 2707.0
    assert scheduler_state.parse_time_left("1:00:00") == 3600.0
    assert scheduler_state.parse_time_left("2-03:04:05") == 2 * 86400 + 3 * 3600 + 4 * 60 + 5
    for unknown in ("UNLIMITED", "NOT_SET", "INVALID", "", "12"):
        assert scheduler_state.parse_time_left(unknown) is None
    assert scheduler_state.job_time_left_s({}) is None  # outside a job: no deadline


def test_remeasure_zero_is_off(group, monkeypatch) -> None:
    specs, outs, results = group
    script = Script({s["id"]: ["perturbed"] for s in specs})
    monkeypatch.setattr(run_module, "_launch_and_judge", script)
    done = run_group(specs, outs, remeasure=0)
    assert len(script.launched) == 3 and {d["quality"] for d in done} == {"perturbed"}
    assert layout.REMEASURED not in _status(outs[0]) and not (results / "perturbed").exists()


def test_the_budget_defaults_to_three_in_both_schema_copies() -> None:
    config = load(ROOT / "config" / "test" / "tiny.yaml")
    assert config.campaign.remeasure == 3
    schema = (ROOT / "workflow/schemas/config.schema.yaml").read_text()
    assert (ROOT / "src/mpiatlas/data/config.schema.yaml").read_text() == schema  # the package's copy
    assert schema.count("\n      remeasure:\n") == 1


def test_attempts_are_numbered_as_numbers(tmp_path: Path) -> None:
    cell_id = "imb/intelmpi/shm/core/np2/PingPong/default/rep0"
    out = tmp_path / "raw" / cell_id
    for k in (1, 2, 10, 9):
        layout.perturbed_attempt(out, cell_id, k).mkdir(parents=True)
    assert [p.name for p in layout.perturbed_attempts(out, cell_id)] == ["attempt1", "attempt2", "attempt9", "attempt10"]
    assert layout.count_perturbed_attempts(tmp_path) == 4
    assert layout.count_perturbed_attempts(tmp_path / "nowhere") == 0


def test_progress_tidy_and_report_count_and_name_the_remeasures(group, monkeypatch) -> None:
    specs, outs, results = group
    a, b, c = (s["id"] for s in specs)
    evil = "ranks waited 60 % of the launch for <cpu 1> & co"
    script = Script({a: ["perturbed", "ok"], b: ["ok"], c: ["perturbed", "perturbed"]}, reason=evil)
    monkeypatch.setattr(run_module, "_launch_and_judge", script)
    run_group(specs, outs, remeasure=1)
    tracker = Progress(results / "raw", [s["id"] for s in specs])
    assert tracker.remeasured == 2 and tracker.done == 3
    assert tracker.summary_line() == "cells: 3 ok (of 3); 2 perturbed launch(es) measured again"

    rows = [cell_row(out)[0] for out in outs]
    assert [(r["remeasured"], r["remeasured_reasons"]) for r in rows] == [
        (1, json.dumps([evil])), (0, None), (1, json.dumps([evil]))]
    # Columns the probe adds (quality, quality_reason) may not be in this schema yet: kept if present.
    cells = pl.DataFrame([{**dict.fromkeys(CELL_SCHEMA), **r, "quality": _status(o).get("quality"),
                           "quality_reason": _status(o).get("quality_reason")} for r, o in zip(rows, outs)])
    blocks = remeasured_blocks(cells)
    assert isinstance(blocks[1], Text) and blocks[1].text.startswith("2 launch(es) of 2 cell(s) were perturbed")
    assert "1 cell(s) end with a launch still perturbed" in blocks[1].text
    table = blocks[2]
    assert isinstance(table, Table)
    rep_a, rep_c = (f"rep{s['cell']['rep']}" for s in (specs[0], specs[2]))
    assert [[x.text for x in row] for row in table.rows] == [
        [a, "1", f"{rep_a} re-measured: {evil}", "ok"],
        [c, "1", f"{rep_c} re-measured: {evil}", f"still perturbed: {evil}"]]
    assert remeasured_blocks(cells.filter(pl.col("cell") == b)) == []

    data = ReportData("t", datetime(2026, 11, 27, tzinfo=UTC), cells=cells)
    html = render_html(data, [section_cells(data)])
    assert REMEASURED_TITLE in html
    assert f"{rep_a} re-measured: ranks waited 60 % of the launch for &lt;cpu 1&gt; &amp; co" in html
    assert "<cpu 1>" not in html


def test_the_closing_count_names_the_launches_still_perturbed(tmp_path: Path) -> None:
    from mpiatlas.commands.campaign import still_perturbed

    table = tmp_path / layout.CELLS_TABLE
    pl.DataFrame({"cell": ["a", "b", "c", "d"], "quality": ["perturbed", "ok", None, "perturbed"]}).write_parquet(table)
    assert still_perturbed(table) == 2
    assert still_perturbed(tmp_path / "none.parquet") == 0
    pl.DataFrame({"cell": ["a"]}).write_parquet(table)  # a table from before the probe: no quality column
    assert still_perturbed(table) == 0


def test_a_launch_left_perturbed_does_not_feed_the_adaptive_decision(group, monkeypatch) -> None:
    """adaptive_rounds reads each sealed cell's values to decide on more repetitions: a launch still
    perturbed after its re-measures is left out there as from the medians (mpiatlas.stats.quality)."""
    from conftest import require_datasets
    from mpiatlas.campaign.adaptive_rounds import cell_values

    capture = (require_datasets() / "local-imb-samples" / "impi_np2_PingPong.txt").read_text()
    specs, outs, _ = group
    a, b = (s["id"] for s in specs[:2])
    script = Script({a: ["ok"], b: ["perturbed"]})

    def launch_imb(*args: Any) -> Outcome:
        outcome = script(*args)
        (args[3] / layout.STDOUT).write_text(capture)  # a real IMB PingPong output, as the launch left it
        return outcome

    monkeypatch.setattr(run_module, "_launch_and_judge", launch_imb)
    run_group(specs[:2], outs[:2], remeasure=0)
    assert _status(outs[1])["quality"] == "perturbed"
    assert len(cell_values(outs[0])) == 24 and cell_values(outs[1]) == {}
