"""The kernel build cache: a campaign reuses the binaries of an earlier identical build, and any input
that changes the binaries (a source, the wrapper, the MPI version, a build variable) misses.

Real compiles with the machine's gcc standing in as the wrapper (what ``mpicc -show`` runs under
the hood); the MPI builds themselves are covered by tests/test_kernels.py. gcc is one of the three things a fresh
machine has (README): without it this test fails, as the first README command would.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path


from mpiatlas.programs.build import build_key, cached_build

KERNELS = Path(__file__).resolve().parents[1] / "src" / "kernels"


class GccAsWrapper:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = dict(os.environ if env is None else env)

    def mpicc(self) -> list[str]:
        return ["gcc"]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return dict(self._env)


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(KERNELS, src, ignore=shutil.ignore_patterns("build"))
    return src


def test_key_is_stable_and_changes_with_every_input(tmp_path: Path) -> None:
    src = _sources(tmp_path)
    stack = GccAsWrapper()
    key = build_key(stack, src, ["ring"], "4.1.4")
    assert key == build_key(stack, src, ["ring"], "4.1.4")
    assert key != build_key(stack, src, ["ring"], "4.1.5")  # another MPI
    assert key != build_key(stack, src, ["ring", "matsum"], "4.1.4")
    assert key != build_key(GccAsWrapper({**os.environ, "CFLAGS": "-O3"}), src, ["ring"], "4.1.4")
    (src / "ring.c").write_text((src / "ring.c").read_text() + "\n/* changed */\n")
    assert key != build_key(stack, src, ["ring"], "4.1.4")


def _compile(out: Path, calls: list[Path]) -> dict[str, Path]:
    """A real build: one C program per name, compiled by gcc."""
    calls.append(out)
    out.mkdir(parents=True, exist_ok=True)
    binaries = {}
    for name in ("hello", "world"):
        c = out / f"{name}.c"
        c.write_text(f'#include <stdio.h>\nint main(void) {{ puts("{name}"); return 0; }}\n')
        subprocess.run(["gcc", "-O2", "-o", str(out / name), str(c)], check=True)
        binaries[name] = out / name
    return binaries


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_second_campaign_copies_the_cached_binaries(tmp_path: Path) -> None:
    cache, calls = tmp_path / "cache", []
    first, hit = cached_build("a" * 64, tmp_path / "c1", ["hello", "world"],
                              lambda: _compile(tmp_path / "c1", calls), cache=cache)
    assert hit is None and calls == [tmp_path / "c1"]
    second, hit = cached_build("a" * 64, tmp_path / "c2", ["hello", "world"],
                               lambda: _compile(tmp_path / "c2", calls), cache=cache)
    assert hit == cache / ("a" * 32) and len(calls) == 1  # nothing compiled the second time
    for name in ("hello", "world"):
        assert second[name] == tmp_path / "c2" / name and _sha(second[name]) == _sha(first[name])
        assert subprocess.run([str(second[name])], capture_output=True, text=True).stdout == f"{name}\n"
    # Another key (another source, MPI, wrapper) compiles.
    cached_build("b" * 64, tmp_path / "c3", ["hello", "world"], lambda: _compile(tmp_path / "c3", calls), cache=cache)
    assert len(calls) == 2


def test_an_incomplete_entry_is_rebuilt_and_an_unwritable_cache_only_costs_time(tmp_path: Path) -> None:
    cache, calls = tmp_path / "cache", []
    cached_build("c" * 64, tmp_path / "c1", ["hello", "world"], lambda: _compile(tmp_path / "c1", calls), cache=cache)
    (cache / ("c" * 32) / "world").unlink()
    cached_build("c" * 64, tmp_path / "c2", ["hello", "world"], lambda: _compile(tmp_path / "c2", calls), cache=cache)
    assert len(calls) == 2
    _, hit = cached_build("c" * 64, tmp_path / "c4", ["hello", "world"], lambda: _compile(tmp_path / "c4", calls),
                          cache=cache)
    assert hit is not None and len(calls) == 2  # the rebuilt entry replaced the incomplete one
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    built, hit = cached_build("d" * 64, tmp_path / "c3", ["hello", "world"],
                              lambda: _compile(tmp_path / "c3", calls), cache=blocker / "cache")
    assert hit is None and built["hello"].is_file() and len(calls) == 3
