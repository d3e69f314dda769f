"""Run campaign cells: each launch planned, run, probed and judged, then sealed read-only.

* :mod:`.lifecycle` — scratch directory, provenance, atomic read-only seal, interruption;
* :mod:`.plan` — pins and cpu sets, one node or several; the launcher;
* :mod:`.hybrid_nodes` — hybrid ranks over nodes: a cpu set per rank on its node;
* :mod:`.judge` — a cell's status from exit, transport, binding, placement, library;
* :mod:`.process` — one launch: blocking wait, timeout kill of the process group, ``wall_s``;
* :mod:`.machine_state` — what the machine did during a launch: run-queue wait, steal, others' cpu;
* :mod:`.machine_record` — the typed ``machine`` record of provenance.json that machine_state writes;
* :mod:`.remote_nodes` — the other nodes of a multi-node cell probed before and after (srun or ssh);
* :mod:`.quiet` — the later re-measure round's bounded wait for a quiet machine;
* :mod:`.run` — ``run_cell``, ``run_group`` (with re-measures of perturbed launches);
* :mod:`.likwid_pin` — the likwid pinner: one ``likwid-pin`` argv per rank;
* :mod:`.knob_overlay` — a knob set and IMB options applied to a launch;
* :mod:`.scheduler_state` — did the cell's SLURM job lose a node: srun's words, scontrol's job state.
"""

from mpiatlas.evidence.outcome import Outcome
from mpiatlas.runner.judge import judge
from mpiatlas.runner.lifecycle import CellInterrupted, read_status, scheduler_facts
from mpiatlas.runner.hybrid_nodes import rank_cpu_sets
from mpiatlas.runner.plan import resolve_launcher
from mpiatlas.runner.run import run_cell, run_group

__all__ = ["CellInterrupted", "Outcome", "judge", "rank_cpu_sets", "read_status", "resolve_launcher",
           "run_cell", "run_group", "scheduler_facts"]
