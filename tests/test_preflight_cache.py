"""A campaign's start takes the compiler probe and a stack's 2-rank hello that passed earlier this
boot as passed, under a key of everything that would change their answer; anything else in the key
(a rebuilt launcher, another transport, a launch variable) runs the check again, and a failed check
is never remembered."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, require_infra
from mpiatlas.campaign import preflight, preflight_cache
from mpiatlas.files import CACHE_ENV
from mpiatlas.matrix.config import load
from mpiatlas.stacks import get_stack


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def installed_stack(tmp_path: Path) -> tuple[object, Path]:
    """An Intel MPI stack object whose launcher is a file of ours (the key only reads its size and mtime)."""
    stack = get_stack("intelmpi", tmp_path / "impi")
    launcher = stack.launcher_path()
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\n")
    return stack, launcher


def test_a_remembered_check_is_found_under_its_own_key_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, launcher = installed_stack(tmp_path)
    key = preflight_cache.hello_key(stack, "shm")
    assert key is not None and key["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert preflight_cache.remembered(key) is None
    preflight_cache.remember(key, "ranks 0 and 1 of 2 answered")
    assert preflight_cache.remembered(preflight_cache.hello_key(stack, "shm")) == "ranks 0 and 1 of 2 answered"
    # Each of these is another key: the hello runs again.
    assert preflight_cache.remembered(preflight_cache.hello_key(stack, "ofi-tcp")) is None
    monkeypatch.setenv("I_MPI_FABRICS", "shm")
    assert preflight_cache.remembered(preflight_cache.hello_key(stack, "shm")) is None
    monkeypatch.delenv("I_MPI_FABRICS")
    monkeypatch.setenv("HOME_OF_SOMETHING_ELSE", "x")  # not a launch variable: same key
    assert preflight_cache.remembered(preflight_cache.hello_key(stack, "shm")) is not None
    launcher.write_text("#!/bin/sh\n# reinstalled\n")
    assert preflight_cache.remembered(preflight_cache.hello_key(stack, "shm")) is None


def test_no_launcher_no_key_and_a_damaged_record_is_not_taken(tmp_path: Path, own_cache: Path) -> None:
    assert preflight_cache.hello_key(get_stack("intelmpi", tmp_path / "none"), "shm") is None
    stack, _ = installed_stack(tmp_path)
    key = preflight_cache.hello_key(stack, "shm")
    preflight_cache.remember(key, "ranks 0 and 1 of 2 answered")
    (record,) = (own_cache / preflight_cache.CACHE_DIR).iterdir()
    record.write_text("{not json")
    assert preflight_cache.remembered(key) is None


def test_the_compiler_probe_is_remembered_only_when_it_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh machine has a C compiler and make (the README's prerequisites): no skip.
    assert (shutil.which("cc") or shutil.which("gcc")) and shutil.which("make"), "no C compiler and make on PATH"
    first = preflight.check_compiler("x", cached=True)
    assert first.ok and "earlier this boot" not in first.found
    again = preflight.check_compiler("x", cached=True)
    assert again.ok and again.found == f"{first.found} (built a hello earlier this boot)"
    assert "earlier" not in preflight.check_compiler("x").found  # doctor: every check runs
    # A compiler that cannot build: its failure is not remembered, and it is not taken for the good one.
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "cc").write_text("#!/bin/sh\necho 'fatal error: stdio.h: No such file or directory' >&2\nexit 1\n")
    (broken / "cc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}:{os.environ['PATH']}")
    for _ in range(2):
        failed = preflight.check_compiler("x", cached=True)
        assert not failed.ok and "stdio.h" in failed.found


@pytest.mark.infra
def test_a_campaigns_second_start_takes_the_hello_that_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = REPO / ".stacks" / "intelmpi"
    require_infra((prefix / "bin" / "mpirun").exists(), "Intel MPI from PyPI (.stacks)")
    config_file = tmp_path / "campaign.yaml"
    config_file.write_text((REPO / "config" / "test" / "tiny.yaml").read_text()
                           .replace("timeout_s: 120", f"timeout_s: 120\n  stacks_dir: {REPO / '.stacks'}"))
    config = load(config_file)
    monkeypatch.chdir(tmp_path)

    def hello() -> preflight.Check:
        return next(c for c in preflight.run_checks(config, slurm=False, cached=True) if c.name.startswith("2-rank"))

    first = hello()
    assert first.ok and first.found == "ranks 0 and 1 of 2 answered"
    assert hello().found == "ranks 0 and 1 of 2 answered (earlier this boot)"
    monkeypatch.setenv("I_MPI_DEBUG", "0")  # a launch variable: the hello runs again
    assert hello().found == "ranks 0 and 1 of 2 answered"
