"""CLI subcommands: every module here exposes ``register(subparsers)``.

cli.py discovers them, so parallel work adds a command by adding a module, and its help line here:
``mpiatlas --help`` lists the commands from this table without importing their modules (each imports
what its command runs, at module level).
"""

# The one-line help of each command (its module registers the command with this line).
COMMAND_HELP: dict[str, str] = {
    "aggregate": "median, min, 95%% CI and CV per cell and size",
    "campaign": "run a campaign end to end (Snakemake) and print the report path",
    "cells": "validate a config, list its cells and estimate its time",
    "compare": "compare two campaigns (results directories or imported data): ratio B/A per size with a bootstrap CI",
    "doctor": "check every prerequisite of a campaign (stacks, compiler, topology, disk, SLURM) and print them as a table",
    "fit": "fit performance models to samples tables",
    "history": "campaign history: add, list, show a series over time, check for regressions",
    "image": "Apptainer images of the MPI stacks (render, build, inspect, preflight)",
    "import": "import raw IMB-MPI1/IMB-EXT or OSU output files as a samples table",
    "kernels": "build the C kernels against an MPI stack",
    "limits": "measure memory copy bandwidth per cache level (likwid-bench, else our copy kernel)",
    "predict": "predict a collective's time per process count from a per-region latency table",
    "regions": "a campaign's per-region λ and B (PingPong fits; o, g of loggp cells), or the region CSV predict reads",
    "report": "build the self-contained HTML report",
    "run-cell": "run campaign cells: one (--spec) or a job group (--group; the workflow's)",
    "stack": "install or check an MPI stack",
    "tidy": "parse raw cell outputs into parquet tables",
    "topology": "show the node topology (hwloc, or Linux sysfs without it) and the pin list of a mapping",
    "tune": "export the significantly faster collective algorithms as Open MPI / Intel MPI / MPICH tuning files",
}
