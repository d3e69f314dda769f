"""Shared test helpers.

Infrastructure tests (real MPI stacks, SLURM, Apptainer) skip on a developer
machine that lacks them, but in CI (CI=true) a missing piece is a failure:
CI must prove the real thing ran.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATASETS = SHARED / "datasets"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require_infra(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) when ``what`` is not available."""
    if available:
        return
    if in_ci():
        pytest.fail(f"CI=true and {what} is not available: infrastructure tests may not be skipped")
    pytest.skip(f"{what} not available")


def require_datasets() -> Path:
    require_infra(DATASETS.is_dir(), f"shared datasets at {DATASETS}")
    return DATASETS
