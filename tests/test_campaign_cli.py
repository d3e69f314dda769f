"""``mpiatlas campaign`` as a newcomer meets it: one message for a missing prerequisite, a stop
when every cell fails alike, a report in every case, and recovery from a killed or concurrent run.

The unit tests need nothing; the others run real (tiny) campaigns with Intel MPI from PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, campaign_workdir, require_infra, run_campaign
from mpiatlas.campaign import runlock, snakemake_start
from mpiatlas.matrix import layout
from mpiatlas.campaign.progress import Progress, format_eta

# -- units --------------------------------------------------------------------------------------


def _seal(raw: Path, cell_id: str, status: str, reason: str | None = None) -> None:
    cell = raw / cell_id
    cell.mkdir(parents=True)
    (cell / layout.STATUS).write_text(json.dumps({"status": status, "reason": reason}))


def test_progress_counts_sealed_cells_and_ignores_cells_still_running(tmp_path: Path) -> None:
    ids = [f"imb/s/t/core/np2/PingPong/default/rep{r}" for r in range(4)]
    _seal(tmp_path, ids[0], "ok")
    progress = Progress(tmp_path, ids)
    assert (progress.already_done, progress.done, progress.remaining) == (1, 1, 3)
    (tmp_path / ids[1]).mkdir(parents=True)  # a cell still running has a directory-to-be, no status
    _seal(tmp_path, ids[2], "failed", "exit code 1: boom")
    progress.poll()
    assert progress.done == 2 and progress.statuses == {"ok": 1, "failed": 1}
    assert progress.finished_now == [(ids[2], "failed", "exit code 1: boom")]
    assert progress.summary_line() == "cells: 1 ok, 1 failed, 2 not run (of 4)"


def test_progress_counts_cells_planned_later_once(tmp_path: Path) -> None:
    """An adaptive campaign's later rounds plan more cells: they join the count, each id once."""
    ids = [f"imb/s/t/core/np1/Allreduce/default/rep{r}" for r in range(3)]
    for cell_id in ids:
        _seal(tmp_path, cell_id, "ok")
    progress = Progress(tmp_path, ids)
    assert (progress.done, progress.total) == (3, 3)
    more = [f"imb/s/t/core/np1/Allreduce/default/rep{r}" for r in range(6)]  # a round's manifest: all so far
    progress.plan_more(more)
    progress.plan_more(more)  # the same manifest seen again adds nothing
    _seal(tmp_path, more[3], "ok")
    progress.poll()
    assert (progress.done, progress.total, progress.remaining) == (4, 6, 2)
    assert progress.summary_line() == "cells: 4 ok, 2 not run (of 6)"


def test_progress_polls_a_bounded_batch_and_still_sees_every_cell(tmp_path: Path) -> None:
    ids = [f"kernel/s/t/core/np2/ring/v/rep{r}" for r in range(10)]
    progress = Progress(tmp_path, ids, batch=3)
    for cell_id in ids:
        _seal(tmp_path, cell_id, "ok")
    for _ in range(4):  # ceil(10 / 3) polls go round the pending list once
        progress.poll()
    assert progress.done == 10


def test_fail_fast_needs_the_first_cells_to_fail_for_one_reason(tmp_path: Path) -> None:
    ids = [f"imb/s/t/core/np2/PingPong/default/rep{r}" for r in range(6)]
    progress = Progress(tmp_path, ids)
    for cell_id in ids[:3]:
        _seal(tmp_path, cell_id, "timeout", "no result within 1 s")
    progress.poll()
    assert progress.same_failure(3) == ("no result within 1 s", ids[0])
    assert progress.same_failure(4) is None  # not enough cells yet
    assert progress.same_failure(0) is None  # 0 turns it off
    _seal(tmp_path, ids[3], "failed", "exit code 1: other")
    progress.poll()
    assert progress.same_failure(4) is None  # two reasons: not one cause


def test_eta_reads_as_minutes_and_seconds() -> None:
    assert format_eta(None) == "estimating"
    assert format_eta(59.6) == "1 min 00 s"
    assert format_eta(12) == "12 s"


def test_a_second_campaign_is_refused_while_one_holds_the_checkout(tmp_path: Path) -> None:
    first = runlock.acquire(tmp_path, "a")
    try:
        # flock is per open file: a second open of the file (as a second process would) is refused.
        with pytest.raises(runlock.CampaignRunning, match=rf"a campaign is running here \(pid {os.getpid()}, campaign a\)"):
            runlock.acquire(tmp_path, "b")
    finally:
        first.release()
    runlock.acquire(tmp_path, "b").release()  # free again once released


def test_a_snakemake_lock_without_a_live_snakemake_is_cleared(tmp_path: Path) -> None:
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("results/x\n")
    notes = runlock.clear_stale(tmp_path)
    assert not list(locks.iterdir())
    assert any("cleared a Snakemake lock" in n for n in notes)


# A cell group's shape, for the reaper: "run-cell" (this script, named mpiatlas, run with the
# argument run-cell) starts a launch in its own session, as runner.process does; the launch starts a
# proxy; both ignore SIGTERM, as a wedged launcher and a spinning MPI proxy do. With the argument
# "dies", run-cell exits on SIGTERM without stopping its launch (the window before runner.process
# can), so the launch is reparented away from it; otherwise run-cell ignores SIGTERM too.
GROUP = r"""
import os, signal, subprocess, sys, time
LAUNCH = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
         "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); time.sleep(600)"
launch = subprocess.Popen([sys.executable, "-c", LAUNCH], start_new_session=True)
print(launch.pid, flush=True)
if sys.argv[2] != "dies":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(600)
"""


@pytest.mark.parametrize("on_term", ["dies", "ignores"])
def test_orphaned_cells_and_every_process_they_started_are_stopped(tmp_path: Path, on_term: str) -> None:
    script = tmp_path / "mpiatlas"
    script.write_text(GROUP)
    orphan = subprocess.Popen([sys.executable, str(script), "run-cell", on_term], cwd=tmp_path,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert orphan.stdout is not None
        launch = int(orphan.stdout.readline())
        deadline = time.monotonic() + 30
        while len(tree := [orphan.pid] + [p.pid for p in runlock.descendants(runlock._table(), [orphan.pid])]) < 3:
            assert time.monotonic() < deadline, tree
            time.sleep(0.05)
        assert launch in tree
        assert runlock.stop_orphans(tmp_path, grace_s=1.0) == 1
        orphan.wait(timeout=10)
        left = [pid for pid in tree[1:] if (p := runlock._table().get(pid)) is not None and not p.zombie]
        assert not left, f"still running after the orphans were stopped: {left}"
        assert not runlock.orphan_cells(tmp_path)
    finally:
        if orphan.poll() is None:
            orphan.kill()


# -- real campaigns ------------------------------------------------------------------------------


def _impi() -> None:
    require_infra((REPO / ".stacks" / "intelmpi" / "bin" / "mpirun").exists(), "Intel MPI from PyPI (.stacks)")
    require_infra(shutil.which("gcc") is not None, "a C toolchain")


@pytest.mark.infra
def test_a_missing_compiler_stops_before_anything_starts_with_one_message(tmp_path: Path) -> None:
    _impi()
    work = campaign_workdir(tmp_path, "config/test/tiny.yaml")
    # A PATH with python and the stack but no C compiler and no make.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "env", "uname", "python3"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{bare}")
    done = subprocess.run([sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    # Preflight refused before Snakemake started: no stack install, no kernel build, no cell.
    assert not (work / ".snakemake").exists() and not (work / "results" / "tiny" / "kernels").exists()
    assert "cannot run this campaign, nothing was started" in out
    assert "C compiler: cc and make not found on PATH" in out
    assert "apt-get install gcc make" in out and "without root" in out
    assert "Traceback" not in out
    assert not (work / "results" / "tiny" / "raw").exists()


@pytest.mark.infra
def test_cells_failing_alike_stop_the_campaign_and_leave_a_partial_report(tmp_path: Path) -> None:
    _impi()
    # A launch limit of 1 s, and IMB asked for 10^6 repetitions at each of 24 sizes, none cut short
    # (-iter_policy off; -time 5 would stop a size after 5 s): 10^6 x 4 MiB alone is 4 TB of copies,
    # so every cell times out on any machine. With IMB's dynamic policy a whole launch took 4.2 s
    # here, and a faster CI machine finished one within the second.
    work = campaign_workdir(tmp_path, "config/test/tiny.yaml", timeout_s=1, fail_fast=3)
    config = yaml.safe_load((work / "config" / "campaign.yaml").read_text())
    config.pop("kernels")
    config["imb"].update(benchmarks=["PingPong", "Allreduce"], msglog=[0, 22], time_s=5, iterations=1000000,
                         options={"iter_policy": ["off"]})
    (work / "config" / "campaign.yaml").write_text(yaml.safe_dump(config))
    done = run_campaign(work, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert out.count("stopped: the first 3 cells all failed with: no result within 1 s") == 1, out
    assert "Traceback" not in out
    partial = work / "results" / "tiny" / "partial" / "report.html"
    assert f"partial report: {partial}" in out
    assert partial.is_file()
    fits = work / "results" / "tiny" / "partial" / "fits"
    assert {p.name for p in fits.iterdir()} >= {"hockney.json", "kernels.json", "alphabeta.json"}
    import polars as pl

    cells = pl.read_parquet(work / "results" / "tiny" / "partial" / "tidy" / "cells.parquet")
    statuses = dict(cells.group_by("status").len().iter_rows())
    assert statuses.get("missing", 0) > 0 and statuses.get("timeout", 0) >= 3, statuses
    assert statuses.get("ok", 0) == 0


def _sealed(raw: Path) -> dict[str, int]:
    return {str(p.parent.relative_to(raw)): p.stat().st_ino for p in raw.rglob(layout.STATUS)}


def _working_in(root: Path) -> list[str]:
    """Every live process whose working directory is ``root`` or under it (run-cell works in the
    checkout, a launch in its cell's scratch directory), as "pid argv"."""
    root = root.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = Path(os.readlink(entry / "cwd")) if entry.name.isdigit() else None
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd is not None and (cwd == root or root in cwd.parents) and int(entry.name) != os.getpid():
            found.append(f"{entry.name} {argv[:200]}")
    return found


def _set_aside_inodes(results: Path) -> set[int]:
    """The inodes of the status files of attempts set aside (perturbed/, lost/): a sealed cell is
    moved there whole, by rename, when it is measured again."""
    return {p.stat().st_ino for sub in ("perturbed", "lost") if (results / sub).exists()
            for p in (results / sub).rglob(layout.STATUS)}


def _snakemake_child(parent: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            started = {b"snakemake", snakemake_start.MODULE.encode()}
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and started & set(argv):
                return int(entry.name)
    return None


@pytest.mark.infra
def test_kill_9_of_snakemake_then_the_same_command_completes_without_rerunning_cells(tmp_path: Path) -> None:
    _impi()
    work = campaign_workdir(tmp_path, "config/test/tiny.yaml")
    raw = work / "results" / "tiny" / "raw"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml"]
    first = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 400
    while len(_sealed(raw) if raw.exists() else {}) < 8 and time.monotonic() < deadline:
        assert first.poll() is None, first.stdout.read() if first.stdout else ""
        time.sleep(0.5)
    # A second campaign on the same checkout is refused and writes nothing.
    second = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 3
    assert f"a campaign is running here (pid {first.pid}, campaign tiny)" in second.stderr
    assert not (work / "results" / "tiny" / "partial").exists()

    snakemake = _snakemake_child(first.pid)
    assert snakemake is not None
    os.kill(snakemake, signal.SIGKILL)
    out1, _ = first.communicate(timeout=300)
    assert first.returncode != 0
    assert "run the same command again" in out1, out1
    # Nothing of the killed run outlives the command: no run-cell, and no launch (an orphaned
    # launcher or proxy would keep a core busy and perturb every later launch).
    left = _working_in(work)
    assert not left, "processes of the killed run still running:\n" + "\n".join(left)
    before = _sealed(raw)
    assert before, "no cell had finished before the kill"

    again = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    out2 = again.stdout + again.stderr
    assert again.returncode == 0, out2[-3000:]
    assert "Directory cannot be locked" not in out2
    assert f"report: {work / 'results' / 'tiny' / 'report.html'}" in out2
    after = _sealed(raw)
    # A finished cell is never run again, unless its launch was judged perturbed: then that
    # attempt is kept whole under perturbed/ and the cell measured again (runner.run).
    set_aside = _set_aside_inodes(work / "results" / "tiny")
    rerun = sorted(cell for cell, inode in before.items() if after.get(cell) != inode and inode not in set_aside)
    assert not rerun, f"finished cells ran again: {rerun}"
    assert not _working_in(work)
    assert len(after) == 42  # tiny.yaml: 18 IMB + 24 kernel cells


def test_headline_names_a_missing_bandwidth_asymptote(tmp_path: Path) -> None:
    """A fit whose bandwidths are null (JSON's unbounded) does not break the summary (it used to
    raise a TypeError after the whole campaign had run): it says so. A fit without intervals says
    that it has none (every printed figure carries its uncertainty), and both bandwidth estimands
    are printed with the size each is read at."""
    from mpiatlas.commands.campaign import headline

    fits = tmp_path / "hockney.json"
    fits.write_text(json.dumps([
        {"benchmark": "PingPong", "stack": "intelmpi", "transport": "shm", "latency_us": 0.31,
         "asymptotic_bandwidth_MBps": None, "peak_bandwidth_MBps": None},
        {"benchmark": "PingPong", "stack": "mpich", "transport": "default", "latency_us": 1.7,
         "asymptotic_bandwidth_MBps": 8200.0, "asymptotic_bytes": 4 << 20,
         "peak_bandwidth_MBps": 9100.0, "peak_bytes": 1 << 20},
    ]))
    lines = headline(fits, [("intelmpi", "shm"), ("mpich", "default")])
    assert lines[0] == "latency: intelmpi/shm PingPong λ = 0.310 µs (no interval) (Hockney fit)"
    assert lines[1] == "bandwidth: intelmpi/shm PingPong B = asymptotic bandwidth unbounded; peak bandwidth unbounded"
    assert headline(fits, [("mpich", "default")])[1] == (
        "bandwidth: mpich/default PingPong B = 8,200 MB/s (no interval) (asymptotic: at 4 MiB); "
        "9,100 MB/s (no interval) (peak: at 1 MiB)")
    # No launches named: the intervals line says what the intervals leave out.
    assert headline(fits, [("mpich", "default")])[2] == \
        "intervals: 95 %, launches unknown (bootstrap): leaves out the variation between launches"


def test_headline_prints_intervals_rule_and_warning(tmp_path: Path) -> None:
    """Issue #23: the closing lines print λ and both bandwidths (asymptotic and peak, each at its size)
    with their 95 % intervals, what the intervals cover, and the fit's warning; λ on its lower bound is
    not printed as a result."""
    import numpy as np

    from mpiatlas.commands.campaign import headline
    from mpiatlas.models.hockney import fit_hockney
    from mpiatlas.report.formatting import fmt_ci, fmt_num

    sizes = 2.0 ** np.arange(0, 23)
    bw = np.interp(np.log2(sizes), [0, 16, 20, 22], [20.0, 27000.0, 22000.0, 22000.0])
    times = 0.3 + sizes / bw
    times[-2:] = sizes[-2:] / 2400.0  # two slow sizes at the end: no 3-size plateau
    fit = {"label": "intelmpi/shm/core", "benchmark": "PingPong", "stack": "intelmpi", "transport": "shm",
           **fit_hockney(sizes, times).to_dict()}
    floor = {"label": "mpich/default/core", "benchmark": "PingPong", "stack": "mpich", "transport": "default",
             **fit_hockney(sizes, sizes / 9000.0).to_dict()}
    fits = tmp_path / "hockney.json"
    fits.write_text(json.dumps([fit, floor]))
    lat, band, scope, warn = headline(fits, [("intelmpi", "shm")])
    lam = fmt_num(fit["latency_us"])
    asym, peak = fmt_num(fit["asymptotic_bandwidth_MBps"], 4), fmt_num(fit["peak_bandwidth_MBps"], 4)
    assert lat == f"latency: intelmpi/shm/core PingPong λ = {lam} µs {fmt_ci(fit['latency_ci_us'])} (Hockney fit)"
    assert band == (f"bandwidth: intelmpi/shm/core PingPong B = {asym} MB/s "
                    f"{fmt_ci(fit['asymptotic_bandwidth_ci_MBps'], 4, unbounded='∞')} (asymptotic: at 4 MiB); "
                    f"{peak} MB/s {fmt_ci(fit['peak_bandwidth_ci_MBps'], 4, unbounded='∞')} (peak: at 128 KiB)")
    # Each estimand keeps its one definition: the asymptotic B is the largest size's s/t (the two slow
    # sizes' 2,400), the peak B the in-cache top; neither swaps for the other on this curve's shape.
    assert fit["asymptotic_bandwidth_MBps"] == pytest.approx(2400.0)
    assert fit["peak_bandwidth_MBps"] > 20_000 and fit["peak_bytes"] == 128 << 10
    assert scope == "intervals: 95 %, launches unknown (residuals): leaves out the variation between launches"
    assert fit["ci_warning"] and warn == f"warning: intelmpi/shm/core PingPong: {fit['ci_warning']}"
    lat, _, _, warn = headline(fits, [("mpich", "default")])
    assert lat == "latency: mpich/default/core PingPong λ not resolved: pinned on its 1e-06 µs lower bound (Hockney fit)"
    assert "λ is not a result" in warn


def test_headline_says_when_the_first_series_has_no_trusted_launch(tmp_path: Path) -> None:
    """Issue #23: when every launch of the first stack's PingPong stayed perturbed after its
    re-measures, the closing lines say so in words instead of printing another stack's series."""
    import polars as pl

    from mpiatlas.commands.campaign import headline
    from mpiatlas.tables.tidy import CELL_SCHEMA

    fits = tmp_path / "hockney.json"
    fits.write_text(json.dumps([{"benchmark": "PingPong", "stack": "mpich", "transport": "default",
                                 "latency_us": 1.7, "asymptotic_bandwidth_MBps": 8200.0, "asymptotic_bytes": 4 << 20,
                                 "peak_bandwidth_MBps": 8200.0, "peak_bytes": 4 << 20}]))

    def row(stack: str, transport: str, rep: int, quality: str, remeasured: int) -> dict:
        return {"cell": f"imb/{stack}/{transport}/core/np2/PingPong/default/rep{rep}", "stack": stack,
                "transport": transport, "benchmark": "PingPong", "kind": "imb", "status": "ok",
                "quality": quality, "remeasured": remeasured}

    cells = tmp_path / "cells.parquet"
    rows = [row("intelmpi", "shm", r, "perturbed", 3) for r in range(3)] + [row("mpich", "default", 0, "ok", 0)]
    pl.DataFrame(rows, schema={k: CELL_SCHEMA[k] for k in rows[0]}).write_parquet(cells)
    order = [("intelmpi", "shm"), ("mpich", "default")]
    said = "intelmpi/shm PingPong: no trusted launch (3 perturbed after 3 re-measures; the report's Cells section lists them)"
    assert headline(fits, order, cells) == [f"latency: {said}", f"bandwidth: {said}"]
    # One trusted launch is enough: the fit of the series that has one is the headline, as before.
    rows[1] = row("intelmpi", "shm", 1, "ok", 1)
    pl.DataFrame(rows, schema={k: CELL_SCHEMA[k] for k in rows[0]}).write_parquet(cells)
    assert headline(fits, order, cells)[1] == ("bandwidth: mpich/default PingPong B = 8,200 MB/s (no interval) "
                                               "(asymptotic: at 4 MiB); 8,200 MB/s (no interval) (peak: at 4 MiB)")
