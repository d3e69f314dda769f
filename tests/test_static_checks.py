"""ruff and mypy pass on the repository, with the rules and settings pyproject.toml pins.

Both are in the ``test`` extra, so this runs on a fresh machine (no infrastructure); a finding fails the
test and its message is the tool's own report (file:line: rule, text).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Everything Python the project runs: the package (with the Snakemake scripts it ships,
# src/mpiatlas/workflow/scripts), its tests and the benchmarks.
RUFF_PATHS = ["src", "tests", "bench"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # From the repository root, so both tools read its pyproject.toml (their config and the paths in it).
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = _run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *RUFF_PATHS])
    assert result.returncode == 0, f"ruff check {' '.join(RUFF_PATHS)}:\n{result.stdout}{result.stderr}"


def test_mypy_finds_nothing() -> None:
    result = _run([sys.executable, "-m", "mypy", "src/mpiatlas"])
    assert result.returncode == 0, f"mypy src/mpiatlas:\n{result.stdout}{result.stderr}"
