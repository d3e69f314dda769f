"""A node lost mid-campaign: its job's running cell ends `failed` with SLURM's word, the job's
unstarted cells stay missing, the other jobs complete, and the same command run again runs
only those cells.

The infra test runs config/test/lost_node.yaml on the two-node namespace cluster
(tests/test_two_node.py's fixture) and sets node2 DOWN (`scontrol update ... state=down`: SLURM
ends the job at once with NODE_FAIL; a killed slurmd is noticed only after SlurmdTimeout) while the
first batch job runs its second cell. The rest checks the pieces everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import EVERY_LAUNCH_COUNTS, campaign_workdir, run_campaign
from mpiatlas.matrix import layout
from mpiatlas.matrix.config import load
from mpiatlas.programs import expand
from mpiatlas.campaign.progress import read_status
from mpiatlas.campaign.resources import job_groups
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.runner import lifecycle, run_group, scheduler_state
from test_two_node import ONE_JOB_AT_A_TIME, PROFILE, netns_cluster  # noqa: F401 (the fixture)

LOST_NODE = "config/test/lost_node.yaml"
RESULTS = "results/lost-node"
DOWN_REASON = "mpiatlas test: node lost"

# What srun and slurmstepd printed when node2 was set DOWN under a running step (SLURM 22.05,
# namespace cluster), and `scontrol show job -o` of that job while its batch step was ending.
SRUN_STDERR = """\
srun: error: Node failure on node2
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-node1: error: *** STEP 2.0 ON node1 CANCELLED AT 2026-11-26T07:55:08 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
srun: error: node1: task 0: Terminated
"""
SCONTROL_ENDING = ("JobId=2 JobName=job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 "
                   "JobState=COMPLETING Reason=NodeDown Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1\n")
SCONTROL_CANCELLED = "JobId=7 JobName=g JobState=CANCELLED Reason=None Dependency=(null)\n"


# -- everywhere ------------------------------------------------------------------------------


def test_node_loss_is_read_from_srun_and_the_job_state(monkeypatch: pytest.MonkeyPatch) -> None:
    ending = scheduler_state.JobState("2", "COMPLETING", "NodeDown")
    assert scheduler_state.parse_job_state("2", SCONTROL_ENDING) == ending
    assert scheduler_state.parse_job_state("2", "slurm_load_jobs error: Invalid job id specified") is None
    nodes, lines = scheduler_state.node_failure_lines(SRUN_STDERR)
    assert nodes == ("node2",) and len(lines) == 2 and "DUE TO NODE FAILURE" in lines[1]

    states = {"2": SCONTROL_ENDING, "7": SCONTROL_CANCELLED}
    monkeypatch.setattr(scheduler_state, "slurm_job_state",
                        lambda job: scheduler_state.parse_job_state(job, states[job]))
    lost = scheduler_state.node_loss(SRUN_STDERR, {"SLURM_JOB_ID": "2"})
    assert lost is not None
    assert lost.reason == "node lost: node2 failed under SLURM job 2 (JobState=COMPLETING Reason=NodeDown)"
    assert lost.facts()["nodes"] == ["node2"] and lost.facts()["job_reason"] == "NodeDown"
    # SLURM's word alone is enough (srun may be killed before it prints)...
    assert scheduler_state.node_loss("", {"SLURM_JOB_ID": "2"}).nodes == ()
    # ...but scancel, a time limit or no job at all is not a node loss.
    assert scheduler_state.node_loss("srun: error: node1: task 0: Terminated\n", {"SLURM_JOB_ID": "7"}) is None
    assert scheduler_state.node_loss(SRUN_STDERR, {}) is None


def test_a_cell_whose_job_lost_a_node_is_sealed_failed_and_stops_its_group(tmp_path: Path, monkeypatch) -> None:
    """close_cell: an srun that failed with a node failure under a job SLURM is ending seals the
    cell `failed` with SLURM's word (not discarded like a scancel), then raises NodeLost."""
    spec = {"id": "imb/intelmpi/ofi-tcp/node2/np2/Bcast/default/rep1", "cell": {}, "stack": {"kind": "intelmpi"}}
    monkeypatch.setenv("SLURM_JOB_ID", "2")
    monkeypatch.setattr(scheduler_state, "slurm_job_state",
                        lambda job: scheduler_state.parse_job_state(job, SCONTROL_ENDING))
    monkeypatch.setattr(lifecycle, "slurm_job_alive", lambda: False)
    out = tmp_path / "raw" / spec["id"]
    work, record = lifecycle.open_cell(spec, out)
    (work / "stderr.txt").write_text(SRUN_STDERR)
    record.launcher, record.exit_code = "srun", 143
    with pytest.raises(lifecycle.NodeLost, match="node lost: node2 failed under SLURM job 2"):
        lifecycle.close_cell(work, out, spec, record, Outcome("failed", "exit code 143"))
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"].endswith("(JobState=COMPLETING Reason=NodeDown)")
    assert status[layout.NODE_LOST]["evidence"][0] == "srun: error: Node failure on node2"
    assert json.loads((out / "provenance.json").read_text())["interrupted_by"].startswith("srun exited with 143")
    # The same srun failure under a job cancelled by scancel: no result, nothing sealed.
    monkeypatch.setattr(scheduler_state, "slurm_job_state",
                        lambda job: scheduler_state.parse_job_state(job, SCONTROL_CANCELLED))
    other = tmp_path / "raw" / "other"
    work, record = lifecycle.open_cell(spec, other)
    (work / "stderr.txt").write_text("srun: error: node1: task 0: Terminated\n")
    record.launcher, record.exit_code = "srun", 143
    with pytest.raises(lifecycle.CellInterrupted) as raised:
        lifecycle.close_cell(work, other, spec, record, Outcome("failed", "exit code 143"))
    assert not isinstance(raised.value, lifecycle.NodeLost) and not other.exists() and not work.exists()


def test_a_rerun_sets_a_node_lost_cell_aside_and_keeps_the_others(tmp_path: Path, monkeypatch) -> None:
    """run_group: sealed cells are skipped, a node-lost one is moved (whole) to lost/<cell>/job<N>
    and runs again; the progress tracker counts it as still to run."""
    config = load(Path(__file__).resolve().parents[1] / LOST_NODE)
    cells = expand(config)[:2]
    results = tmp_path / "results" / "lost-node"
    outs = [results / "raw" / c.id for c in cells]
    lost = {"slurm_job_id": "5", "nodes": ["node2"], "job_state": "COMPLETING", "job_reason": "NodeDown"}
    for out, status in zip(outs, [{"status": "ok"}, {"status": "failed", "reason": "node lost: ...",
                                                       layout.NODE_LOST: lost}]):
        out.mkdir(parents=True)
        (out / "status.json").write_text(json.dumps(status))
    assert read_status(outs[0]) == ("ok", "") and read_status(outs[1]) is None
    ran = []
    def run_cell(spec: dict, out: Path, shared: object, remeasured: list) -> None:
        ran.append(spec["id"])
        out.mkdir(parents=True)
        (out / "status.json").write_text(json.dumps({"status": "ok"}))

    monkeypatch.setattr("mpiatlas.runner.run.run_cell", run_cell)
    done = run_group([{"id": c.id} for c in cells], outs)
    assert [d["ran"] for d in done] == [False, True] and ran == [cells[1].id]
    aside = results / "lost" / cells[1].id / "job5"
    assert json.loads((aside / "status.json").read_text())[layout.NODE_LOST] == lost
    assert read_status(outs[1]) == ("ok", "")  # the new attempt, sealed in raw/


# -- on the namespace cluster ------------------------------------------------------------------


def _groups(work: Path) -> list[list[str]]:
    """The campaign's job groups, each as its cells' ids in the order its job runs them."""
    config = load(work / "config" / "campaign.yaml")
    return [[c.id for c in cells] for cells in job_groups(config, expand(config)).values()]


def _slurm(cluster: Path, *argv: str) -> str:
    env = dict(os.environ, PATH=f"{cluster / 'bin'}:{os.environ['PATH']}")
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60, check=True).stdout


def _sealed(raw: Path) -> dict[str, dict]:
    """cell id -> provenance of every sealed cell under raw/."""
    return {str(p.parent.relative_to(raw)): json.loads((p.parent / "provenance.json").read_text())
            for p in raw.rglob("status.json")}


def _running_launch(raw: Path) -> str | None:
    """The id of the cell whose launch is running now: its scratch directory (``.repN.*``, see
    runner.lifecycle) holds srun's binding lines, printed once both nodes started their rank."""
    for scratch in raw.rglob(".rep*"):
        stderr = scratch / "stderr.txt"
        if scratch.is_dir() and stderr.is_file() and "cpu-bind" in stderr.read_text(errors="replace"):
            return str(scratch.parent.relative_to(raw) / scratch.name.split(".")[1])
    return None


def _lose_node2_during_a_second_cell(cluster: Path, raw: Path, campaign: subprocess.Popen) -> tuple[str, str]:
    """Wait until a batch job has sealed one cell and launched the next, then set node2 DOWN.
    Returns (the job's id, the id of the cell that was running)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and campaign.poll() is None:
        time.sleep(0.2)
        running = _slurm(cluster, "squeue", "-h", "-t", "RUNNING", "-o", "%i").split()
        try:  # the walk races the campaign's renames (a scratch directory sealed under it): look again
            cell = _running_launch(raw)
            sealed = _sealed(raw) if len(running) == 1 and cell is not None else {}
        except OSError:
            continue
        if len(running) != 1 or cell is None:
            continue
        sealed_in_job = [c for c, prov in sealed.items() if prov.get("slurm_job_id") == running[0]]
        if len(sealed_in_job) == 1:
            time.sleep(0.3)  # ranks are starting: inside the launch, not between two
            _slurm(cluster, "scontrol", "update", "nodename=node2", "state=down", f"reason={DOWN_REASON}")
            return running[0], cell
    raise AssertionError("no batch job was seen running its second cell")


def _resume_node2(cluster: Path) -> None:
    """ReturnToService=2 brings node2 back once its slurmd registers; resume it if it is still down."""
    state = _slurm(cluster, "sinfo", "-h", "-n", "node2", "-o", "%T").strip()
    if "down" in state or "drain" in state:
        _slurm(cluster, "scontrol", "update", "nodename=node2", "state=resume")


@pytest.mark.infra
def test_a_lost_node_fails_its_running_cell_and_a_rerun_runs_only_the_lost_cells(
        netns_cluster: Path, tmp_path: Path) -> None:  # noqa: F811 (the imported fixture)
    started = time.monotonic()
    # Every launch counts: a launch judged perturbed in the first run is re-measured by the rerun's
    # later round (the first run ended before it), which is right but not what this test watches.
    work = campaign_workdir(tmp_path, LOST_NODE, perturbation=EVERY_LAUNCH_COUNTS)
    raw = work / RESULTS / "raw"
    expected = {c.id for c in expand(load(work / "config" / "campaign.yaml"))}
    env = dict(os.environ, PATH=f"{netns_cluster / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml",
            "--directory", str(work), *PROFILE, *ONE_JOB_AT_A_TIME]
    log = (tmp_path / "first.log").open("w+")
    first = subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        job, lost_cell = _lose_node2_during_a_second_cell(netns_cluster, raw, first)
        rc = first.wait(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGINT)
            first.wait(timeout=60)
        _resume_node2(netns_cluster)
    log.seek(0)
    first_out = log.read()
    assert rc != 0, first_out[-3000:]

    # SLURM's own record of the job: ended by the node's failure.
    assert "JobState=NODE_FAIL" in _slurm(netns_cluster, "scontrol", "show", "job", "-o", job)
    sealed = _sealed(raw)
    of_job = {c for c, prov in sealed.items() if prov["slurm_job_id"] == job}
    missing = expected - set(sealed)
    statuses = {c: json.loads((raw / c / "status.json").read_text()) for c in sealed}
    # The running cell: failed, why (the node, SLURM's job state, srun's words), kept as evidence.
    lost = statuses[lost_cell]
    print(f"lost cell {lost_cell}: {lost['status']}: {lost['reason']}")
    assert lost["status"] == "failed"
    assert lost["reason"].startswith(f"node lost: node2 failed under SLURM job {job} (JobState="), lost["reason"]
    assert "Reason=NodeDown" in lost["reason"] or "JobState=NODE_FAIL" in lost["reason"]
    facts = lost[layout.NODE_LOST]
    assert facts["slurm_job_id"] == job and facts["nodes"] == ["node2"], facts
    assert any("Node failure on node2" in line for line in facts["evidence"])
    assert "Node failure on node2" in (raw / lost_cell / "stderr.txt").read_text()
    # The job's cells before the lost one stay ok, those after it never started (missing); the
    # other two jobs ran all theirs.
    group = next(ids for ids in _groups(work) if lost_cell in ids)
    before_lost, after_lost = group[:group.index(lost_cell)], group[group.index(lost_cell) + 1:]
    assert before_lost and set(before_lost) | {lost_cell} == of_job, (group, of_job)
    assert missing == set(after_lost), (group, missing)
    others = {c: s["status"] for c, s in statuses.items() if c != lost_cell}
    assert set(others.values()) == {"ok"} and len(others) == 8 - len(missing), others
    # The partial report lists the lost cell with its reason and the ones that did not run.
    not_run = 1 + len(missing)
    assert f"partial report: {work / RESULTS / 'partial/report.html'} ({not_run} of 9 cells not run" in first_out, \
        first_out[-2000:]
    partial = pl.read_parquet(work / RESULTS / "partial/tidy/cells.parquet")
    assert partial.filter(pl.col("status") == "failed").select("cell", "reason").rows() == [(lost_cell, lost["reason"])]
    assert set(partial.filter(pl.col("status") == "missing")["cell"]) == missing
    html = (work / RESULTS / "partial/report.html").read_text()
    assert lost_cell in html and "node lost: node2" in html and all(c in html for c in missing)

    rerun_started = time.monotonic()
    before = {c: ((raw / c).stat().st_ino, prov["start"]) for c, prov in sealed.items() if c != lost_cell}
    second = run_campaign(work, *PROFILE, *ONE_JOB_AT_A_TIME, timeout=600, path_prefix=netns_cluster / "bin")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    after = _sealed(raw)
    assert set(after) == expected
    # Nothing finished was redone; exactly the lost cell and the unstarted one ran, in a new job.
    assert {c: ((raw / c).stat().st_ino, after[c]["start"]) for c in before} == before
    rerun = {c for c in after if c not in before}
    assert rerun == {lost_cell} | missing
    assert all(after[c]["slurm_job_id"] != job for c in rerun)
    # The lost attempt is kept whole beside raw/, out of the tables.
    aside = work / RESULTS / layout.LOST / lost_cell / f"job{job}"
    assert json.loads((aside / "status.json").read_text())["reason"] == lost["reason"]
    cells = pl.read_parquet(work / RESULTS / "tidy/cells.parquet")
    assert cells.height == 9 and cells["status"].to_list() == ["ok"] * 9, cells.select("cell", "status", "reason")
    assert f"report: {work / RESULTS / 'report.html'}" in second.stdout
    print(f"lost job {job}: ok before {before_lost}, not started {sorted(missing)}")
    print(f"reran {sorted(rerun)}; first run + node loss {rerun_started - started:.0f} s, "
          f"rerun {time.monotonic() - rerun_started:.0f} s")
