"""Snakemake's command line, started without the executor plugins the run does not use.

Snakemake imports every installed ``snakemake_executor_plugin_*`` package when it starts (its
executor registry is built on ``import snakemake.api``). The SLURM plugin, while it is being
imported, runs ``which sacct``/``which squeue`` and ``scontrol show config`` to word its help text:
with the SLURM client tools on PATH, every Snakemake start waits for the controller, up to
10 s per attempt when slurmctld is down, even a run under the local profile that never submits
a job. A run whose executor is one of Snakemake's own (local, dryrun, touch) registers only those;
any other executor (the SLURM profile, ``--executor`` among the arguments) gets the full registry,
as ``python -m snakemake`` would build it.

    python -m mpiatlas.campaign.snakemake_start <snakemake arguments>
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import yaml

from mpiatlas.files import shipped_profile, snakefile

MODULE = "mpiatlas.campaign.snakemake_start"
BUILTIN_EXECUTORS = ("local", "dryrun", "touch")
EXECUTOR_FLAGS = ("--executor", "-e")
PROFILE_FILE = "profile.yaml"


def argv(*arguments: str) -> list[str]:
    """The command that starts Snakemake with ``arguments`` through this module."""
    return [sys.executable, "-m", MODULE, *arguments]


def profile_dir(profile: str, root: Path) -> str:
    """``profile`` as Snakemake should read it: a directory at that path (relative to ``root``, where
    Snakemake runs) as it is, else the profile of that name mpiatlas ships (``profiles/local`` and
    ``local`` alike), so a campaign outside a checkout runs with the shipped profiles."""
    if (root / profile).is_dir():
        return profile
    shipped = shipped_profile(Path(profile).name)
    return str(shipped) if shipped.is_dir() else profile


def workflow_argv(configfile: str | Path, profile: str, root: Path, *arguments: str) -> list[str]:
    """The command that runs mpiatlas's own workflow (package data) on ``configfile`` in ``root``."""
    return argv("--snakefile", str(snakefile()), "--configfile", str(configfile),
                "--profile", profile_dir(profile, root), *arguments)


def _option(arguments: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of ``names`` among ``arguments`` (``--name value`` or ``--name=value``)."""
    found = None
    for i, arg in enumerate(arguments):
        for name in names:
            if arg == name and i + 1 < len(arguments):
                found = arguments[i + 1]
            elif arg.startswith(f"{name}="):
                found = arg.split("=", 1)[1]
    return found


def _profile_executor(profile: str | None) -> str | None:
    if profile is None:
        return None
    path = Path(profile) / PROFILE_FILE
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # Snakemake reads the profile itself and reports what is wrong with it
    executor = document.get("executor") if isinstance(document, dict) else None
    return str(executor) if executor is not None else None


def executor_of(arguments: list[str]) -> str:
    """The executor Snakemake will run with: the command line's, else the profile's, else local."""
    return (_option(arguments, EXECUTOR_FLAGS) or _profile_executor(_option(arguments, ("--profile",)))
            or "local")


def register_builtin_executors() -> None:
    """Build Snakemake's executor registry (a singleton: later ``ExecutorPluginRegistry()`` calls
    return it as it is) with Snakemake's own executors only, before anything imports the plugins."""
    from snakemake.executors import dryrun, local, touch
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    registry = ExecutorPluginRegistry.__new__(ExecutorPluginRegistry)
    registry.plugins = {}
    for name, module in zip(BUILTIN_EXECUTORS, (local, dryrun, touch), strict=True):
        registry.register_plugin(name, module)


def main(arguments: list[str]) -> None:
    if executor_of(arguments) in BUILTIN_EXECUTORS:
        register_builtin_executors()
    from snakemake.cli import main as snakemake_main

    try:
        snakemake_main(arguments)  # ends with sys.exit
    finally:
        # As every mpiatlas command (mpiatlas.cli.skip_teardown_collection): the exiting interpreter
        # skips its cyclic collections over Snakemake's whole heap (its DAG, jobs, SQLAlchemy),
        # ~0.2 s of CPU per start, between the report and the campaign's last line. atexit
        # handlers still run; objects are released by reference count.
        gc.freeze()


if __name__ == "__main__":
    main(sys.argv[1:])
