#!/usr/bin/env python3
"""The machine probe (mpiatlas.runner.machine_state): what it adds per launch, and what it sees.

  .venv/bin/python bench/machine_probe.py cost [--launches 40]
      launches of /bin/true (nothing to measure but the harness) with and without the probe,
      alternated: the wall time around run_launch and the probe's own cpu time, median [95 % CI].
  .venv/bin/python bench/machine_probe.py calibrate [--launches 4] [--capture DIR]
      IMB PingPong (Intel MPI, shm, ranks pinned to cpus 0 and 1) alone and with a busy loop pinned
      to cpu 1, alternated: per launch the probe's wait, others' cpu and steal shares. These set the
      defaults of mpiatlas.stats.quality. --capture also writes the /proc files of one rank of one launch
      of each kind (for tests/data/machine_state).
  .venv/bin/python bench/machine_probe.py quiet [--launches 30] [--max-pressure 0.05] [--spacing-s 0]
      IMB PingPong alone (as calibrate), short launches: per launch the wall, the worst rank's run-queue
      wait (ms, and its share of the wall) and the node's cpu pressure; then the wait's median, 90th
      percentile and max over the launches in which the node itself was quiet (its cpu pressure, PSI
      "some", at most --max-pressure of the wall). That figure is the noise floor of
      mpiatlas.stats.quality (``quiet_wait_s``): what a rank waits with nobody else on the machine.

Wall and cpu times: on a shared machine compare runs made side by side (as here), never a figure alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from mpiatlas.stats.aggregate import median_ci
from mpiatlas.runner.process import Probe, run_launch
from mpiatlas.stacks import LaunchSpec, get_stack

REPO = Path(__file__).resolve().parents[1]
TRUE = shutil.which("true") or "/bin/true"
RANK = frozenset({"IMB-MPI1"})  # the ranks' process name, as runner.run.launch_probe gives it


def _figure(values: list[float], unit: str, scale: float = 1.0) -> str:
    arr = np.asarray(values) * scale
    low, high = median_ci(arr)
    return f"{np.median(arr):.3g} {unit} [95 % CI {low:.3g}..{high:.3g}, n={arr.size}]"


def cost(launches: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="probe-cost-"))
    around: dict[bool, list[float]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    probe_cpu: list[float] = []
    for i in range(2 * launches):
        probed = bool(i % 2)
        start = time.perf_counter()
        finished = run_launch([TRUE], dict(os.environ), work, work / "o", work / "e", 60, Probe() if probed else None)
        around[probed].append(time.perf_counter() - start)
        walls[probed].append(finished.wall_s)
        if probed and finished.machine:
            p = finished.machine["probe"]
            probe_cpu.append(p["sampler_cpu_s"] + p["snapshot_cpu_s"])
    print("wall around run_launch(/bin/true):")
    print("  without probe:", _figure(around[False], "ms", 1e3))
    print("  with probe:   ", _figure(around[True], "ms", 1e3))
    print("the launch's own wall_s:")
    print("  without probe:", _figure(walls[False], "ms", 1e3))
    print("  with probe:   ", _figure(walls[True], "ms", 1e3))
    print("  probe's own cpu per launch (sampler thread + snapshots):", _figure(probe_cpu, "ms", 1e3))
    shutil.rmtree(work)


def _hog(cpu: int) -> subprocess.Popen:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(hog.pid, {cpu})
    return hog


def _capture(pid: int, into: Path, stop: threading.Event) -> None:
    """Copy one rank's /proc files and the node's when first seen (``*_first``) and then as late in
    the rank's life as possible (with /proc/uptime: the rank's age)."""
    first = True
    while first or not stop.wait(0.2):
        try:
            files = {name: Path(f"/proc/{pid}/{name}").read_text() for name in ("stat", "schedstat")}
        except OSError:
            return
        if "Z" in files["stat"].rpartition(")")[2].split()[:1]:
            return
        files |= {name: Path(f"/proc/{name}").read_text() for name in ("loadavg", "uptime")} | \
            {"proc_stat": Path("/proc/stat").read_text()}
        for name, text in files.items():
            (into / name).write_text(text)
            if first and name in ("stat", "proc_stat"):
                (into / f"{name}_first").write_text(text)
        first = False


def calibrate(launches: int, capture: Path | None) -> None:
    stack = get_stack("intelmpi", str(REPO / ".stacks/intelmpi"), source="pypi")
    imb = str(REPO / ".stacks/intelmpi/bin/IMB-MPI1")
    rows: dict[str, list[dict]] = {"alone": [], "busy loop on cpu 1": []}
    for i in range(2 * launches):
        kind = "busy loop on cpu 1" if i % 2 else "alone"
        work = Path(tempfile.mkdtemp(prefix="probe-cal-"))
        launch = stack.launch([imb, "PingPong", "-msglog", "0:20", "-time", "0.5"],
                              LaunchSpec(np=2, transport="shm", pins=[0, 1], workdir=work, launcher="mpirun"))
        hog = _hog(1) if i % 2 else None
        try:
            finished = run_launch(launch.argv, stack.env() | launch.env, work, work / "o", work / "e", 300,
                                  Probe(rank_names=RANK))
        finally:
            if hog:
                hog.kill()
                hog.wait()
        m = finished.machine or {}
        rows[kind].append(m)
        print(f"{kind:20s} rc={finished.exit_code} wall={finished.wall_s:.2f}s wait={m.get('wait_share')} "
              f"other={m.get('other_cpu_share')} steal={m.get('steal_share')} load1={m['loadavg_before'][0]} "
              f"ranks={[(r['cpus'], r['wait_share']) for r in m['ranks']]}")
        shutil.rmtree(work)
    for kind, ms in rows.items():
        print(f"{kind}: wait share {_figure([m['wait_share'] or 0 for m in ms], '')}; "
              f"others' share {_figure([m['other_cpu_share'] or 0 for m in ms], '')}; "
              f"steal {_figure([m['steal_share'] or 0 for m in ms], '')}")
    if capture:
        capture_launches(stack, imb, capture)


def quiet(launches: int, max_pressure: float, spacing_s: float) -> None:
    stack = get_stack("intelmpi", str(REPO / ".stacks/intelmpi"), source="pypi")
    imb = str(REPO / ".stacks/intelmpi/bin/IMB-MPI1")
    rows: list[tuple[float, float, float, float | None]] = []  # wall, worst wait, load1, node pressure
    for i in range(launches):
        if i:
            time.sleep(spacing_s)  # spread over time: a shared machine has calm moments between others' work
        work = Path(tempfile.mkdtemp(prefix="probe-quiet-"))
        launch = stack.launch([imb, "PingPong", "-msglog", "0:16", "-time", "0.1"],
                              LaunchSpec(np=2, transport="shm", pins=[0, 1], workdir=work, launcher="mpirun"))
        finished = run_launch(launch.argv, stack.env() | launch.env, work, work / "o", work / "e", 300,
                              Probe(rank_names=RANK))
        shutil.rmtree(work)
        m = finished.machine or {}
        wait = max((r["wait_s"] for r in m.get("ranks") or [] if r.get("wait_s") is not None), default=float("nan"))
        rows.append((finished.wall_s, wait, m["loadavg_before"][0], m.get("node_cpu_pressure_share")))
        print(f"rc={finished.exit_code} wall={finished.wall_s:.3f}s worst wait={1e3 * wait:.2f} ms "
              f"({100 * wait / finished.wall_s:.2f} % of wall) load1={rows[-1][2]} node pressure={rows[-1][3]}",
              flush=True)
    calm = [r for r in rows if r[3] is not None and r[3] <= max_pressure and r[1] == r[1]]
    for name, chosen in (("all launches", rows), (f"node pressure <= {max_pressure:.0%}", calm)):
        waits = np.array([r[1] for r in chosen if r[1] == r[1]]) * 1e3
        shares = np.array([r[1] / r[0] for r in chosen if r[1] == r[1]]) * 100
        if waits.size == 0:
            print(f"{name}: none")
            continue
        print(f"{name} (n={waits.size}): worst-rank wait median {np.median(waits):.2f} ms, "
              f"p90 {np.percentile(waits, 90):.2f} ms, max {waits.max():.2f} ms; "
              f"share of wall median {np.median(shares):.2f} %, max {shares.max():.2f} %; "
              f"walls {min(r[0] for r in chosen):.3f}-{max(r[0] for r in chosen):.3f} s")


def capture_launches(stack, imb: str, into: Path) -> None:
    """The raw /proc files of rank 1 (on cpu 1) of a launch alone and of one with a busy loop on cpu 1:
    node files before the launch, the rank's and the node's when first seen and last."""
    for kind, hogged in (("idle", False), ("busy_loop", True)):
        out = into / kind
        out.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="probe-cap-"))
        launch = stack.launch([imb, "PingPong", "-msglog", "0:20", "-time", "0.5"],
                              LaunchSpec(np=2, transport="shm", pins=[0, 1], workdir=work, launcher="mpirun"))
        (out / "proc_stat_before").write_text(Path("/proc/stat").read_text())
        (out / "loadavg_before").write_text(Path("/proc/loadavg").read_text())
        hog = _hog(1) if hogged else None
        for name in ("stat_first", "proc_stat_first"):
            (out / name).unlink(missing_ok=True)
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_rank, args=(out, stop), daemon=True)
        watcher.start()
        try:
            finished = run_launch(launch.argv, stack.env() | launch.env, work, work / "o", work / "e", 300,
                                  Probe(rank_names=RANK))
        finally:
            stop.set()
            watcher.join()
            if hog:
                hog.kill()
                hog.wait()
        shutil.rmtree(work)
        m = finished.machine or {}
        print(f"captured {kind} into {out}: the probe saw wait {m.get('wait_share')}, "
              f"others {m.get('other_cpu_share')}")


def _watch_rank(out: Path, stop: threading.Event) -> None:
    """Find the IMB rank on cpu 1 (pinned: its affinity is {1}), then copy its files until it ends."""
    while not stop.wait(0.01):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if "IMB-MPI1" in Path(f"/proc/{name}/stat").read_text() and os.sched_getaffinity(int(name)) == {1}:
                    _capture(int(name), out, stop)
                    return
            except OSError:
                continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--launches", type=int, default=40)
    k = sub.add_parser("calibrate")
    k.add_argument("--launches", type=int, default=4)
    k.add_argument("--capture", type=Path)
    q = sub.add_parser("quiet")
    q.add_argument("--launches", type=int, default=30)
    q.add_argument("--max-pressure", type=float, default=0.05)
    q.add_argument("--spacing-s", type=float, default=0.0, help="pause between launches")
    args = parser.parse_args()
    if args.what == "cost":
        cost(args.launches)
    elif args.what == "quiet":
        quiet(args.launches, args.max_pressure, args.spacing_s)
    else:
        calibrate(args.launches, args.capture)


if __name__ == "__main__":
    main()
