"""The synthetic campaign's report (test_report.make_inputs), built once per pytest session.

A report build costs ~1.5 s of CPU (altair) and several modules only read the page: test_report
checks its content, test_report_bundle validates its charts against the Vega-Lite schema.
Per xdist worker this is one build instead of one per module. Registered through
``pytest_plugins`` in conftest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def synthetic_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]], Path]:
    """(page text, the fits written to fits/hockney.json, the page's path); the tidy tables are in
    ``path.parent.parent / "tidy"``. Read only: a test that changes the inputs builds its own."""
    from mpiatlas.report.build import build_report
    from test_report import NOW, make_inputs

    root = tmp_path_factory.mktemp("report")
    tidy, fits_dir, fits = make_inputs(root)
    out = build_report(tidy, fits_dir, root / "out" / "report.html", title="Test campaign & co", now=NOW)
    return out.read_text(encoding="utf-8"), fits, out
