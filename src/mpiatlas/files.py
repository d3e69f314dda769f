"""Files mpiatlas writes, at the ground floor: atomic replacement (a reader never sees half a file) and
the user cache directory. Every package writes through these; :mod:`mpiatlas.matrix.layout` names the files.

And the files it ships (:func:`shipped`): package data found through importlib.resources, never by
walking up from a module, so an installed mpiatlas (``pip install .``, a wheel) runs from any directory.
"""

from __future__ import annotations

import json
import os
import secrets
from importlib import resources
from pathlib import Path


# Package data (pyproject.toml [tool.setuptools.package-data]); the checkout links the old top-level
# paths (workflow/, profiles/, containers/, src/kernels) to these.
WORKFLOW = "workflow"
PROFILES = "profiles"
IMAGE_TEMPLATES = "containers"
KERNEL_SOURCES = "kernels_src"


class NotOnDisk(RuntimeError):
    """mpiatlas's package data is not a directory on disk (a zipped install)."""


def shipped(*parts: str) -> Path:
    """A file or directory of mpiatlas's package data, as a path: Snakemake, make and apptainer read
    them from disk, so mpiatlas must be installed as files (pip's default), not zipped."""
    root = resources.files("mpiatlas")
    if not isinstance(root, Path):
        raise NotOnDisk(f"mpiatlas is installed as {root!r}, not as files: reinstall it with pip")
    return root.joinpath(*parts)


def snakefile() -> Path:
    return shipped(WORKFLOW, "Snakefile")


def shipped_profile(name: str) -> Path:
    """A Snakemake profile mpiatlas ships (``local``, ``slurm``)."""
    return shipped(PROFILES, name)


def shipped_kernel_sources() -> Path:
    """The C kernels' sources and Makefile."""
    return shipped(KERNEL_SOURCES)


# Overrides the user cache (tests; a shared cluster home that must not be written to).
CACHE_ENV = "MPIATLAS_CACHE_DIR"


def user_cache_dir(*parts: str) -> Path:
    """$MPIATLAS_CACHE_DIR, else $XDG_CACHE_HOME/mpiatlas, else ~/.cache/mpiatlas (then ``parts``)."""
    base = os.environ.get(CACHE_ENV) or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpiatlas")
    return Path(base).joinpath(*parts)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """``text`` written aside and renamed over ``path``: a reader never sees half a file, and two
    writers of one path (two campaigns on a node, a re-run beside a stale one) each replace it whole,
    because each writes under a name of its own (pid + random, created exclusively, so the umask
    sets its mode as for any other file). A failed write leaves no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: object) -> None:
    """``data`` as JSON, through :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=0) + "\n")
