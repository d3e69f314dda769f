"""bench/harness.py part 2 helpers: the same IMB PingPong launches as an mpiatlas campaign,
run by ReFrame (reframe-hpc from PyPI, pinned, in its own venv), timed the same way.

Launch walls: measured inside ReFrame's job script around the launch (bash $EPOCHREALTIME, see
bench/_harness_reframe_check.py); ReFrame's own run-phase timing (`time_run` of its JSON report,
which also holds its job polling) is reported next to it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness_campaign import REPO, BenchError

REFRAME_PIN = "reframe-hpc==4.10.4"
REFRAME_VENV = REPO / ".cache" / ("reframe-" + REFRAME_PIN.split("==")[1])
CHECK = Path(__file__).with_name("_harness_reframe_check.py")
SETTINGS = Path(__file__).with_name("_harness_reframe_settings.py")


@dataclass
class ReframeRun:
    wall_s: float
    launch_walls: dict[str, float]  # test case (launch name) -> wall of its launch, job script's clock
    time_run_s: float  # Σ ReFrame's own run-phase durations
    cases: int
    passed: int

    @property
    def ratio(self) -> float:
        total = sum(self.launch_walls.values())
        if total <= 0:
            raise BenchError("ReFrame recorded no launch wall time")
        return self.wall_s / total


def reframe_executable() -> Path:
    """The pinned ReFrame, installed into its own venv under .cache/ on first use."""
    exe = REFRAME_VENV / "bin" / "reframe"
    if exe.is_file():
        return exe
    print(f"installing {REFRAME_PIN} into {REFRAME_VENV}", file=sys.stderr, flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    for argv in ([base, "-m", "venv", str(REFRAME_VENV)],
                 [str(REFRAME_VENV / "bin" / "python"), "-m", "pip", "install", "-q", REFRAME_PIN]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"installing {REFRAME_PIN} failed ({' '.join(argv)}):\n{done.stderr[-2000:]}")
    return exe


def launch_name(record: dict[str, Any]) -> str:
    """A file-name-safe test case name from the cell id."""
    return str(record["cell"]).removeprefix("imb/").replace("/", "_")


def launch_env(record: dict[str, Any], stack_env: dict[str, str]) -> dict[str, str]:
    """The cell's launch environment for ReFrame's `export K=V` lines: the stack's runtime paths
    (PATH, LD_LIBRARY_PATH prepended, as mpiatlas's Stack.env does; provenance keeps only the
    MPI-relevant variables) and every variable the cell's provenance recorded."""
    env = {}
    for key, value in stack_env.items():
        if key in ("PATH", "LD_LIBRARY_PATH"):
            env[key] = f"{shlex.quote(value)}${{{key}:+:${key}}}"
        else:
            env[key] = shlex.quote(value)
    env |= {key: shlex.quote(str(value)) for key, value in (record.get("env") or {}).items()}
    return env


def stack_runtime_env(config_path: Path, label: str) -> dict[str, str]:
    """The runtime environment of stack ``label`` of the campaign config at ``config_path``."""
    from mpiatlas.matrix import cells
    from mpiatlas.campaign import auto_plan
    from mpiatlas.stacks import get_stack

    config = auto_plan.load(config_path)  # the config may say `auto`
    stack = config.stacks[label]
    return get_stack(stack.kind, cells.stack_prefix(config, label), source=stack.source).runtime_env()


def write_launches(records: list[dict[str, Any]], config_path: Path, out: Path) -> list[dict[str, Any]]:
    launches = []
    for record in records:
        stack_env = stack_runtime_env(config_path, record["coords"]["stack"])
        launches.append({"name": launch_name(record), "argv": list(record["argv"]),
                         "env": launch_env(record, stack_env)})
    out.write_text(json.dumps(launches, indent=1) + "\n")
    return launches


def run_reframe(records: list[dict[str, Any]], config_path: Path, work: Path, timeout_s: float) -> ReframeRun:
    """ReFrame runs one test case per launch in ``records``, one at a time; the whole command is
    timed, and each launch inside its job script."""
    exe = reframe_executable()
    work.mkdir(parents=True, exist_ok=True)
    launches = write_launches(records, config_path, work / "launches.json")
    walls, report = work / "walls.txt", work / "report.json"
    walls.unlink(missing_ok=True)
    env = dict(os.environ, MPIATLAS_BENCH_LAUNCHES=str(work / "launches.json"), MPIATLAS_BENCH_WALLS=str(walls))
    argv = [str(exe), "-C", str(SETTINGS), "-c", str(CHECK), "-r", "--exec-policy=serial",
            "--prefix", str(work / "rfm"), "--report-file", str(report)]
    log = work / "reframe.out"
    start = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BenchError(f"ReFrame did not finish within {timeout_s:.0f} s (output: {log})") from None
    wall = time.monotonic() - start
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(f"ReFrame exited {done.returncode}; end of {log}:\n{tail}")
    measured = read_walls(walls)
    cases = [case for run in json.loads(report.read_text())["runs"] for case in run["testcases"]]
    missing = sorted({launch["name"] for launch in launches} - set(measured))
    if missing:
        raise BenchError(f"ReFrame ran without timing launches {missing} (see {log})")
    return ReframeRun(wall, measured, sum(float(c.get("time_run") or 0) for c in cases), len(cases),
                      sum(1 for c in cases if c.get("result") == "pass"))


def read_walls(path: Path) -> dict[str, float]:
    """name -> t1 - t0 from the job scripts' `name t0 t1` lines."""
    if not path.is_file():
        return {}
    walls = {}
    for line in path.read_text().splitlines():
        name, t0, t1 = line.split()
        walls[name] = float(t1) - float(t0)
    return walls
