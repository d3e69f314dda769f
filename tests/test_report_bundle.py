"""What the report no longer does on every build: bundle Vega's JavaScript (kept on disk,
mpiatlas.report.bundle) and validate each chart while building it (checked here instead)."""

from __future__ import annotations

from pathlib import Path

import pytest
import vl_convert
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema.core import load_schema

from mpiatlas import files
from mpiatlas.report import bundle
from test_report import _specs


def test_bundle_is_written_once_then_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    first = bundle.javascript_bundle("6.4")
    assert first == vl_convert.javascript_bundle(vl_version="6.4")
    path = bundle.bundle_path(vl_convert.__version__, "6.4")
    assert path.parent == tmp_path / "cache" and path.read_text(encoding="utf-8") == first
    assert not list(path.parent.glob(".*.tmp"))

    def no_bundling(**_: object) -> str:
        raise AssertionError("bundled again although the cache has it")

    monkeypatch.setattr(vl_convert, "javascript_bundle", no_bundling)
    assert bundle.javascript_bundle("6.4") == first


def test_unwritable_cache_still_gives_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv(files.CACHE_ENV, str(blocker / "cache"))
    assert bundle.javascript_bundle("6.4") == vl_convert.javascript_bundle(vl_version="6.4")


def test_bundle_is_kept_in_the_user_cache_which_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(files.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert files.user_cache_dir() == tmp_path / "mpiatlas"
    assert bundle.bundle_path("1.2.3", "6.4").parent == tmp_path / "mpiatlas"


def test_every_chart_of_a_report_is_valid_vega_lite(synthetic_report: tuple[str, list, Path]) -> None:
    # charts.chart_spec skips altair's validation (most of a report's time): this is where a chart
    # the package builds wrongly is caught. The page is test_report.make_inputs' (report_fixtures.py).
    specs = _specs(synthetic_report[0])
    assert len(specs) >= 10
    schema = load_schema()
    for cid, spec in specs.items():
        error = validate_jsonschema(spec, schema, raise_error=False)
        assert error is None, f"{cid}: {error}"
