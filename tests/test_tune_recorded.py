"""mpiatlas tune's decision and validation verdicts on samples recorded on this machine (tests/data/tune).

The live tests (tests/test_tune_validate.py) cannot know which outcome a machine produces; here the
samples are fixed, so each outcome is known and both branches of the pipeline run:

* mpich_bcast_validation: the validation campaign of a claimed MPICH Bcast file (binomial at
  16 KiB..32 KiB, 2 ranks, PyPI MPICH 5.0.2, 5 repetitions; recorded 2026-11-27 on the shared 2-core
  machine, load average ~4.6): the tuned cells fail, and so does the untuned 1 KiB, whose file/default
  ratio's CI lies above 1.05; the other untuned sizes pass.
* intelmpi_allreduce: a campaign of Intel MPI's Allreduce, default against preset 5, 4 KiB..64 KiB on
  2 ranks, 10 repetitions (recorded the same day): the decision on it, the winner and the no-winner
  path (``--min-gain`` above every measured gain).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiatlas.cli import main
from mpiatlas.compare import MIN_REPS
from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning import samples, validation
from mpiatlas.tuning.decide import Point, SeriesDecision, blocks, decide
from mpiatlas.tuning.validation import UNTUNED_TOLERANCE

DATA = Path(__file__).parent / "data" / "tune"


def _mpich_claim() -> SeriesDecision:
    """The decision the recorded MPICH validation campaign validated (tests/test_tune_validate.py)."""
    pts = [Point(2, b, "binomial", "binomial", 0.8, 0.7, 0.9, 5, 5, "claimed") for b in (16384, 32768)]
    pts += [Point(2, b, DEFAULT, DEFAULT, None, None, None, 5, 5, "claimed")
            for b in (1024, 2048, 4096, 8192, 65536, 131072, 262144)]
    pts.sort(key=lambda p: p.bytes)
    return SeriesDecision("mpich", "mpich", "5.0.2", "default", "bcast", "Bcast", pts, blocks(pts), samples.IMB)


def test_recorded_mpich_validation_judges_tuned_and_untuned_sizes() -> None:
    series = [_mpich_claim()]
    results = DATA / "mpich_bcast_validation"
    checks = validation.check(results, series)
    untuned = validation.check_untuned(results, series)
    assert [(c.bytes, c.n) for c in checks] == [(16384, (5, 5, 5)), (32768, (5, 5, 5))]
    # Each verdict is the one its own figures give.
    for c in checks:
        assert c.matches == (c.match_ci[0] <= 1 <= c.match_ci[1]) and c.beats == (c.gain_ci[0] > 0)
    assert not any(c.passed for c in checks)
    by_size = {u.bytes: u for u in untuned}
    assert sorted(by_size) == [1024, 8192, 65536, 262144] and all(u.n == (5, 5) for u in untuned)
    for u in untuned:
        assert u.slower == (u.ratio_ci[0] > 1 + UNTUNED_TOLERANCE) and u.passed == (not u.slower)
    # The recorded outcome: 1 KiB significantly slower with the file (CI above 1.05), the rest not.
    slow = by_size[1024]
    assert slow.slower and 1.05 < slow.ratio_ci[0] < slow.ratio < slow.ratio_ci[1]
    assert slow.ratio == pytest.approx(1.111, abs=0.001)
    assert [b for b, u in sorted(by_size.items()) if u.passed] == [8192, 65536, 262144]
    summary = validation.summary(checks, untuned)
    assert not summary["ok"] and summary["untuned"]["passed"] == 3 and len(summary["untuned"]["failed"]) == 1
    assert "1024 B" in summary["untuned"]["failed"][0] and "significantly slower" in summary["untuned"]["failed"][0]


def test_recorded_mpich_validation_record_and_exit_status(tmp_path: Path) -> None:
    """What ``tune --validation-results`` does with it: the judged record, its markdown, exit status 1."""
    from mpiatlas.tuning.decide import Decision
    from mpiatlas.tuning.validate_run import validate

    rc = validate(Decision(tmp_path, 0.05, [_mpich_claim()]), {}, tmp_path, results=DATA / "mpich_bcast_validation")
    record = json.loads((tmp_path / "validation.json").read_text())
    assert rc == 1 and not record["summary"]["ok"]
    assert [u["bytes"] for u in record["untuned"] if not u["passed"]] == [1024]
    md = (tmp_path / "validation.md").read_text()
    assert "3 of 4 sampled sizes pass" in md and "| 1 KiB | 1.111 [" in md
