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
from mpiatlas.stats.ratios import MIN_REPS
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


def _assert_rule(series: SeriesDecision, min_gain: float) -> None:
    """The decision's rule, point by point: a non-default choice exactly where the candidate (fastest by
    median) has enough repetitions, its CI of t/t_default below 1 and the gain reaching ``min_gain``."""
    for p in series.points:
        chosen = (p.candidate != DEFAULT and min(p.n_default, p.n_candidate) >= MIN_REPS and p.ci_high < 1
                  and p.gain >= min_gain)
        assert (p.algorithm != DEFAULT) == chosen and p.algorithm in (DEFAULT, p.candidate), p


def test_recorded_mpich_bcast_binomial_wins_at_128_and_256_kib() -> None:
    """The knob-less cells of the recorded MPICH campaign (default and binomial, 5 repetitions):
    binomial is the fastest by median from 32 KiB up, significantly only at 128 KiB and 256 KiB."""
    [s] = decide(DATA / "mpich_bcast_plain").series
    _assert_rule(s, 0.05)
    by_size = {p.bytes: p for p in s.points}
    assert [b for b, p in sorted(by_size.items()) if p.algorithm != DEFAULT] == [131072, 262144]
    assert [b for b, p in sorted(by_size.items()) if p.candidate == "binomial"] == [32768, 65536, 131072, 262144]
    assert "does not lie below 1" in by_size[65536].reason and by_size[65536].ci_high > 1
    win = by_size[131072]
    assert win.ratio == pytest.approx(0.181, abs=0.001) and win.ci_high < 0.5
    # One block (P = 2), the winner's range up to the last measured size.
    [block] = s.blocks
    assert [(r.lo, r.hi, r.algorithm) for r in block.ranges] == [(0, 131071, DEFAULT), (131072, 262144, "binomial")]
    # Its validation would sample the untuned range's ends (0 B is left out): 256 B and 64 KiB.
    from mpiatlas.tuning.validation_config import untuned_points
    assert untuned_points(s) == [(2, 256), (2, 65536)]
    # A minimum gain above the measured ones leaves nothing.
    [strict] = decide(DATA / "mpich_bcast_plain", min_gain=0.9).series
    _assert_rule(strict, 0.9)
    assert not strict.tuned


def test_recorded_intel_allreduce_has_no_winner_and_exports_nothing(tmp_path: Path, capsys) -> None:
    """The recorded Intel MPI campaign (default vs preset 5, 10 repetitions; IMB timed out at some
    sizes of some launches): the default is the fastest by median everywhere. ``tune --validate``
    takes the no-winner path: no env file, tuning.md and validation.md say so, exit status 0."""
    results = DATA / "intelmpi_allreduce"
    [s] = decide(results).series
    _assert_rule(s, 0.05)
    assert not s.tuned and {p.candidate for p in s.points} == {DEFAULT}
    # Counts are the usable samples: 10 launches, fewer where IMB timed out.
    assert {p.bytes: p.n_default for p in s.points} == {0: 10, 4096: 10, 8192: 9, 16384: 9, 32768: 9, 65536: 9}
    out = tmp_path / "out"
    assert main(["tune", str(results), "--out", str(out), "--validate"]) == 0
    printed = capsys.readouterr().out
    assert "intelmpi shm allreduce: default everywhere" in printed and "none (nothing beat the default)" in printed
    assert sorted(f.name for f in out.iterdir()) == ["decision.json", "tuning.md", "validation.json", "validation.md"]
    assert "No algorithm beats the default significantly" in (out / "tuning.md").read_text()
    record = json.loads((out / "validation.json").read_text())
    assert record["cells"] == [] and record["campaign"] is None and record["summary"]["ok"]
    assert "Nothing to validate" in (out / "validation.md").read_text()


@pytest.mark.infra
def test_recorded_mpich_winner_is_exported_as_two_trees(tmp_path: Path) -> None:
    """The winner branch of ``tune`` on the recorded MPICH campaign: the installed MPICH 5.0.2's trees
    extended at 128 KiB..256 KiB, device collectives left on."""
    from conftest import REPO, require_infra

    lib = REPO / ".stacks" / "mpich" / "lib"
    require_infra(any(lib.glob("libmpi.so.*")), f"MPICH under {lib}")
    out = tmp_path / "out"
    assert main(["tune", str(DATA / "mpich_bcast_plain"), "--out", str(out), "--stacks-dir", str(REPO / ".stacks")]) == 0
    mpir = json.loads((out / "mpich.default.json").read_text())["collective=bcast"]["comm_type=intra"]
    ch4 = json.loads((out / "mpich.default.ch4.json").read_text())["collective=bcast"]["comm_type=intra"]
    assert mpir["comm_size<=2"]["avg_msg_size<=262144"] == {"algorithm=MPIR_Bcast_intra_binomial": {}}
    assert list(ch4["comm_size<=2"]["avg_msg_size<=262144"]) == ["comm_type=inter"]
    # Below the range both trees keep the library's own subtree (the one under comm_size=any).
    assert mpir["comm_size<=2"]["avg_msg_size<=131071"] == mpir["comm_size=any"]
    assert ch4["comm_size<=2"]["avg_msg_size<=131071"] == ch4["comm_size=any"]
    env = (out / "mpich.default.env").read_text()
    assert "DEVICE_COLLECTIVE" not in env
    assert f'MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE="{out.resolve()}/mpich.default.ch4.json"' in env
    assert "| 128 KiB–256 KiB | 2–2 | binomial |" in (out / "tuning.md").read_text()
