"""Facts about where and how a number was measured."""

from __future__ import annotations

import datetime as dt
import platform
import socket
from functools import cache
from pathlib import Path

from mpiatlas import __version__

# Environment variables worth recording: they change what MPI does.
# Every prefix a knob set may use (mpiatlas.knobs) is among them.
RELEVANT_ENV_PREFIXES = ("I_MPI_", "FI_", "UCX_", "OMPI_", "PMIX_", "MPIR_", "MPICH_", "HYDRA_", "OMP_", "KMP_",
                         "SLURM_JOB", "MPIATLAS_")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_ENV_PREFIXES)}


def host_facts() -> dict[str, str]:
    """Host, cpu model, kernel, Python and mpiatlas version (a fresh dict each call)."""
    return dict(_host_facts())


@cache
def _host_facts() -> dict[str, str]:
    # Read once per process: a cell group records them for every cell, and they cannot change
    # while the process runs.
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mpiatlas_version": __version__,
    }
