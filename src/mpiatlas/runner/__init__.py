"""Run campaign cells: lifecycle (open, seal, interruption), plan (placement), judge (status), run."""

from mpiatlas.outcome import Outcome
from mpiatlas.runner.judge import judge
from mpiatlas.runner.lifecycle import CellInterrupted, read_status, scheduler_facts
from mpiatlas.runner.plan import rank_cpu_sets, resolve_launcher
from mpiatlas.runner.run import run_cell, run_group

__all__ = ["CellInterrupted", "Outcome", "judge", "rank_cpu_sets", "read_status", "resolve_launcher",
           "run_cell", "run_group", "scheduler_facts"]
