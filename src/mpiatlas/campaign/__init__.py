"""Running a campaign: job groups and their resources, adaptive rounds, checks before, progress during.

* :mod:`.resources` — cells cut into job groups, what a group asks of a scheduler, the campaign's time estimate;
* :mod:`.auto_plan` — ``mappings: auto`` / ``processes: auto`` from the node's topology, within a time budget;
* :mod:`.cell_groups` — what ``mpiatlas run-cell`` does: the cells of one job group, run in one process;
* :mod:`.adaptive_rounds` — adaptive repetitions in the DAG: rounds decided from the cells sealed so far;
* :mod:`.round_decision` — a round's decision (JSON between the workflow's processes) as typed records;
* :mod:`.preflight` — every prerequisite of a campaign's cells, checked once before anything runs;
* :mod:`.preflight_cache` — the compiler probe and stack hellos that passed, remembered per host and boot;
* :mod:`.snakemake_start` — Snakemake's command line without the executor plugins a local run does not use;
* :mod:`.status_pacing` — how often a SLURM campaign polls its jobs: a wait that grows with the time waited;
* :mod:`.progress` — cells done and ETA; the progress bar of long commands;
* :mod:`.runlock` — one campaign per checkout; recovery from a killed run, stale Snakemake locks.
"""
