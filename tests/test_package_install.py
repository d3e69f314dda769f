"""mpiatlas installs like a package: ``pip install .`` (not editable: pip builds a wheel and installs
it) into a fresh venv outside the checkout, then ``mpiatlas campaign --config <tiny config elsewhere>``
run from a third, empty directory builds the C kernels from the package's own data and leaves the
results in that directory.

The package is built from a copy of the files git tracks under ``src/`` and ``pyproject.toml``, so
nothing untracked in the checkout (a build/, an egg-info, the editable install's paths) can make it
pass. The stacks are the checkout's installs (``campaign.stacks_dir``, as tests/conftest.py's
campaign_workdir does): installing Intel MPI again costs minutes and proves nothing here. The kernel
build cache is a fresh directory, so the kernels are really compiled.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import PYPI_STACKS, REPO, require_infra
from mpiatlas.programs import kernel_names

CONFIG = "config/test/tiny.yaml"
PIP_TIMEOUT_S = 1800
CAMPAIGN_TIMEOUT_S = 1800


def tracked_copy(dest: Path) -> Path:
    """The files git tracks under src/ and pyproject.toml, copied to ``dest`` (links as links)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "pyproject.toml", "src"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = REPO / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


def fresh_install(tmp: Path) -> Path:
    """A venv with mpiatlas installed (not editable) from a tracked copy; its bin directory."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    source = tracked_copy(tmp / "source")
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, timeout=PIP_TIMEOUT_S, cwd=tmp)
    assert pip.returncode == 0, f"pip install . failed:\n{pip.stdout[-3000:]}{pip.stderr[-3000:]}"
    shutil.rmtree(source)  # the installed package must not need its source tree
    return venv / "bin"


def tiny_config(dest: Path) -> Path:
    data = yaml.safe_load((REPO / CONFIG).read_text())
    data["campaign"]["stacks_dir"] = str(REPO / ".stacks")
    dest.mkdir(parents=True)
    path = dest / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.infra
def test_installed_package_runs_a_campaign_from_any_directory(tmp_path: Path) -> None:
    require_infra(PYPI_STACKS["intelmpi"].is_dir(), f"the Intel MPI stack in {PYPI_STACKS['intelmpi']}")
    require_infra(shutil.which("cc") is not None and shutil.which("make") is not None, "a C compiler and make")
    bin_dir = fresh_install(tmp_path)
    config = tiny_config(tmp_path / "elsewhere")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cache = tmp_path / "cache"
    # Nothing of the checkout on the way: no PYTHONPATH, the venv's entry points first on PATH.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{bin_dir}:{env['PATH']}", "MPIATLAS_CACHE_DIR": str(cache)}

    where = subprocess.run([str(bin_dir / "python"), "-c", "import mpiatlas.files as f; print(f.snakefile())"],
                           cwd=run_dir, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    snakefile = Path(where.stdout.strip())
    assert snakefile.is_file() and snakefile.is_relative_to(bin_dir.parent), snakefile

    done = subprocess.run([str(bin_dir / "mpiatlas"), "campaign", "--config", str(config)], cwd=run_dir, env=env,
                          capture_output=True, text=True, timeout=CAMPAIGN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    reported = re.findall(r"^report: (\S+)$", done.stdout, re.M)
    results = run_dir / "results" / "tiny"
    assert reported and (run_dir / reported[-1]).resolve() == (results / "report.html").resolve(), output[-2000:]
    assert (results / "report.html").is_file()
    # The kernels were compiled from the package's sources (the empty cache got the build), into the run's results.
    built = results / "kernels" / "intelmpi"
    assert all(os.access(built / name, os.X_OK) for name in kernel_names()), sorted(os.listdir(built))
    entries = list((cache / "kernels").iterdir())
    assert len(entries) == 1 and all((entries[0] / name).is_file() for name in kernel_names())
    assert (results / "tidy" / "cells.parquet").is_file()
    assert not (config.parent / "results").exists()  # results beside the config would be the wrong directory
