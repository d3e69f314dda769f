"""Session-wide real campaigns shared by several test modules.

A campaign costs minutes, so each one runs at most once per pytest session and every module that
needs its results (end-to-end checks, the browser test of its report) reuses the same run.
Registered through ``pytest_plugins`` in conftest.py.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import campaign_workdir, require_infra, run_campaign

TINY_CONFIG = "config/test/tiny.yaml"
# The campaign command announces a complete report with exactly this line prefix (a failed run
# prints "partial report: ..." instead, which must not count).
REPORT_LINE_PREFIX = "report: "


@dataclass(frozen=True)
class Campaign:
    """A finished campaign: its throw-away work dir, the report it announced and its output."""

    work: Path
    report: Path
    result: subprocess.CompletedProcess[str]


def announced_report(stdout: str, work: Path) -> Path:
    """The path from the campaign's ``report: <path>`` line (relative paths are taken from
    ``work``); where the results go (results/ or results/<campaign name>/) is the command's
    business, not the tests'."""
    paths = [line[len(REPORT_LINE_PREFIX):].strip() for line in stdout.splitlines()
             if line.startswith(REPORT_LINE_PREFIX)]
    if len(paths) != 1:
        raise AssertionError(f"expected exactly one {REPORT_LINE_PREFIX!r} line in the campaign's stdout, "
                             f"found {len(paths)}:\n{stdout[-3000:]}")
    return work / paths[0]  # an absolute path stays as it is


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    return f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"


@pytest.fixture(scope="session")
def tiny_campaign(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    """config/test/tiny.yaml run for real (Intel MPI from PyPI, IMB and our kernels, 2 ranks)."""
    require_infra(shutil.which("gcc") is not None, "a C toolchain")
    work = campaign_workdir(tmp_path_factory.mktemp("tiny-campaign"), TINY_CONFIG)
    result = run_campaign(work, timeout=900)
    assert result.returncode == 0, _tail(result)
    report = announced_report(result.stdout, work)
    assert report.is_file(), f"the campaign announced {report}, which does not exist\n{_tail(result)}"
    return Campaign(work=work, report=report, result=result)
