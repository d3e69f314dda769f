"""The ``default`` Bcast the models price is the one Open MPI 4.1 and 5.0 really run.

The rule table (:mod:`mpiatlas.models.ompi_decision`, cited to coll_tuned_decision_fixed.c) is checked
against what the libraries called, as an LD_PRELOAD probe saw it (tests/ompi_decision_probe.py):
recorded once at P = 2..64 for Debian's 4.1.4 and PyPI's 5.0.11 (tests/data/ompi_bcast_decision.csv),
and re-run live at a few P up to 64 for whichever release is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ompi_decision_probe as probe
from conftest import require_infra
from mpiatlas.models.collective_regions import bcast_default_algorithm
from mpiatlas.models.ompi_decision import BCAST_RULES, SOURCES, bcast_default_choice

RECORDED = Path(__file__).parent / "data" / "ompi_bcast_decision.csv"


def _mismatches(observations: list[probe.Observation]) -> list[str]:
    return [f"{o.release} np={o.np} {o.bytes} B: called {o.called}, table {bcast_default_choice(o.np, o.bytes).function}"
            for o in observations if o.called != bcast_default_choice(o.np, o.bytes).function]


def test_recorded_probe_matches_the_table_for_both_releases() -> None:
    observations = probe.read(RECORDED)
    assert {(o.release, o.version) for o in observations} == {("4.1", "4.1.4"), ("5.0", "5.0.11")}
    for release in SOURCES:
        grid = {(o.np, o.bytes) for o in observations if o.release == release}
        assert grid == {(np, b) for np in probe.NPS for b in probe.SIZES}, release
    assert _mismatches(observations) == []


def _arm(np: int, nbytes: int) -> tuple[int, float]:
    """(source line of the P row, byte limit of the arm) a Bcast falls in."""
    rule = next(r for r in BCAST_RULES if np < r.p_below)
    return rule.line, next(limit for limit, _ in rule.by_bytes if nbytes < limit)


def test_recorded_probe_exercises_every_rule_below_128_ranks() -> None:
    # Every (P row, byte arm) of the rows the probe reaches (P <= 64 here) was seen at least once, so a
    # wrong limit or id in any of them would have shown as a mismatch above. P = 64 is the only probed
    # size of the 64..127 row, which has a single arm.
    seen = {_arm(o.np, o.bytes) for o in probe.read(RECORDED)}
    reachable = {(rule.line, limit) for rule in BCAST_RULES if rule.p_below <= 128 for limit, _ in rule.by_bytes}
    assert reachable <= seen
    assert len(reachable) == 10 + 6 + 6 + 3 + 2 + 1  # the arms of the six rows below 128 ranks


def test_chain_with_fanout_zero_is_priced_as_the_pipeline() -> None:
    # P < 4 at 128-256 KiB and P 4..7 at >= 1 MiB: the decision calls chain (id 2) with fanout 0.
    assert bcast_default_choice(3, 200_000).function == "chain"
    assert bcast_default_algorithm(3, 200_000) == "pipeline"
    assert bcast_default_algorithm(6, 1 << 20) == "pipeline"
    assert bcast_default_choice(2, 4).citation("4.1") == (
        "ompi/mca/coll/tuned/coll_tuned_decision_fixed.c:539 (v4.1.4, ffb0adcdd6)")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="np >= 1"):
        bcast_default_choice(0, 4)


def test_probe_output_is_parsed_per_size() -> None:
    stderr = ("BCAST_BYTES 4\nnoise from the launcher\nBCAST_ALGORITHM ompi_coll_base_bcast_intra_bintree\n"
              "BCAST_BYTES 8192\nBCAST_ALGORITHM ompi_coll_base_bcast_intra_split_bintree\n")
    assert probe.parse(stderr) == [(4, "binary_tree"), (8192, "split_binary_tree")]
    with pytest.raises(ValueError, match="no algorithm reported for the Bcast of 4 B"):
        probe.parse("BCAST_BYTES 4\nBCAST_BYTES 8\nBCAST_ALGORITHM ompi_coll_base_bcast_intra_bintree\n")


# A few P of the rows up to 64 ranks (two rows' edges), sizes that switch arms in them.
LIVE_NPS = (3, 7, 12, 31, 48, 64)
LIVE_SIZES = (4, 100, 2048, 8192, 131072, 1048576)


@pytest.mark.infra
@pytest.mark.parametrize("release", sorted(probe.RELEASES))
def test_open_mpi_calls_what_the_table_says(release: str, tmp_path: Path) -> None:
    require_infra(probe.installed(release), f"Open MPI {release} ({probe.RELEASES[release][1]})")
    shim, program = probe.build(release, tmp_path)
    observations = [o for np in LIVE_NPS for o in probe.run(release, np, LIVE_SIZES, shim, program)]
    assert len(observations) == len(LIVE_NPS) * len(LIVE_SIZES)
    assert _mismatches(observations) == []
