"""ReFrame regression test for bench/harness.py part 2: IMB-MPI1 PingPong, one test case per
launch that an mpiatlas campaign made (argv and environment from the cells' provenance.json).

Runs inside ReFrame's own venv (reframe-hpc, see bench/_harness_reframe.py), so it imports nothing
from mpiatlas: the launches come from the JSON file named by $MPIATLAS_BENCH_LAUNCHES, a list of
{"name", "argv", "env"} with env values already shell-quoted (ReFrame writes `export K=V` as is).

Each launch's wall time is taken inside ReFrame's job script, around the launch only: bash's
$EPOCHREALTIME before and after (no extra process, so ReFrame pays nothing for being measured),
appended with the test case's name to the file named by $MPIATLAS_BENCH_WALLS.
"""

import json
import os
import shlex

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, performance_function, run_before, sanity_function

# IMB's PingPong table: "#bytes #repetitions t[usec] Mbytes/sec" per message size.
ROW = r"^\s+(\d+)\s+\d+\s+(\d+\.\d+)\s+(\d+\.\d+)\s*$"


def _launches():
    path = os.environ.get("MPIATLAS_BENCH_LAUNCHES")
    if not path:  # listed without the harness (e.g. `reframe -l`): no cases
        return []
    with open(path) as fh:
        return json.load(fh)


@rfm.simple_test
class ImbPingPong(rfm.RunOnlyRegressionTest):
    descr = "IMB-MPI1 PingPong, the launch of one mpiatlas cell"
    valid_systems = ["*"]  # noqa: RUF012 - ReFrame reads its settings from class attributes
    valid_prog_environs = ["*"]  # noqa: RUF012
    sourcesdir = None
    num_tasks = 1  # the launcher is `local`: mpirun in the argv starts the ranks
    launch = parameter(_launches(), fmt=lambda launch: launch["name"])

    @run_before("run")
    def set_launch(self):
        argv = self.launch["argv"]
        self.executable = shlex.quote(argv[0])
        self.executable_opts = [shlex.quote(arg) for arg in argv[1:]]
        self.env_vars = dict(self.launch["env"])
        walls = shlex.quote(os.environ["MPIATLAS_BENCH_WALLS"])
        name = shlex.quote(self.launch["name"])
        self.prerun_cmds = ["_mpiatlas_t0=$EPOCHREALTIME"]
        self.postrun_cmds = [f'echo {name} "$_mpiatlas_t0" "$EPOCHREALTIME" >> {walls}']

    @sanity_function
    def pingpong_table(self):
        # The benchmark ran on 2 processes, and the largest size (the last row) was measured.
        return sn.all([
            sn.assert_found(r"# Benchmarking PingPong", self.stdout),
            sn.assert_found(r"# #processes = 2", self.stdout),
            sn.assert_found(r"# All processes entering MPI_Finalize", self.stdout),
            sn.assert_gt(sn.count(sn.extractall(ROW, self.stdout, 1)), 0),
        ])

    @performance_function("us")
    def latency_small(self):
        """t[usec] of the smallest message size (the first row)."""
        return sn.extractall(ROW, self.stdout, 2, float)[0]

    @performance_function("MB/s")
    def bandwidth_max(self):
        return sn.max(sn.extractall(ROW, self.stdout, 3, float))
