"""The ``default`` Bcast the models price is the one Open MPI 4.1 and 5.0 really run.

The rule table (:mod:`mpiatlas.models.ompi_decision`, cited to coll_tuned_decision_fixed.c) is checked
against what the libraries called, as an LD_PRELOAD probe saw it (tests/ompi_decision_probe.py):
recorded once at P = 2..64 for Debian's 4.1.4 and PyPI's 5.0.11 (tests/data/ompi_bcast_decision.csv),
then at P = 65..256 (LARGE_NPS: the 64..127, 128..255 and 256..1023 rows, at their byte limits) for
4.1.4, the release installed when it was extended (5.0 was not: its rows stop at 64); re-run live at a
few P up to 64, and at P = 256, for whichever release is installed. The decision is read as the
function rank 0 called, never as a timing: 256 oversubscribed ranks on 2 cores decide as 256 on 256.
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
    small = {(np, b) for np in probe.NPS for b in probe.SIZES}
    large = {(np, b) for np in probe.LARGE_NPS for b in probe.LARGE_SIZES}
    grids = {release: {(o.np, o.bytes) for o in observations if o.release == release} for release in SOURCES}
    assert grids == {"4.1": small | large, "5.0": small}
    assert _mismatches(observations) == []


def test_recorded_probe_decides_at_256_ranks() -> None:
    # P = 256 is the first row of 256..1023 (decision file line 617): knomial below 16 KiB, split_binary_tree
    # from 16 to 32 KiB, knomial above; P = 255 is still the 128..255 row (line 605): binomial below 2 B,
    # binary_tree to 16 KiB, basic_linear to 32 KiB, binary_tree to 64 KiB, knomial above.
    called = {(o.np, o.bytes): o.called for o in probe.read(RECORDED) if o.release == "4.1"}
    assert [called[(256, b)] for b in (4, 16384, 32767, 32768, 1048576)] == [
        "knomial", "split_binary_tree", "split_binary_tree", "knomial", "knomial"]
    assert [called[(255, b)] for b in (1, 4, 16384, 32768, 65536)] == [
        "binomial", "binary_tree", "basic_linear", "binary_tree", "knomial"]
    assert bcast_default_choice(256, 4).line == 617 and bcast_default_choice(255, 4).line == 605


def _arm(np: int, nbytes: int) -> tuple[int, float]:
    """(source line of the P row, byte limit of the arm) a Bcast falls in."""
    rule = next(r for r in BCAST_RULES if np < r.p_below)
    return rule.line, next(limit for limit, _ in rule.by_bytes if nbytes < limit)


def test_recorded_probe_exercises_every_rule_up_to_1024_ranks() -> None:
    # Every (P row, byte arm) of the rows the probe reaches (P <= 256 here) was seen at least once, so a
    # wrong limit or id in any of them would have shown as a mismatch above.
    seen = {_arm(o.np, o.bytes) for o in probe.read(RECORDED)}
    reachable = {(rule.line, limit) for rule in BCAST_RULES if rule.p_below <= 1024 for limit, _ in rule.by_bytes}
    assert reachable <= seen
    assert len(reachable) == 10 + 6 + 6 + 3 + 2 + 1 + 5 + 3  # the arms of the eight rows below 1024 ranks


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


@pytest.mark.infra
@pytest.mark.parametrize("release", sorted(probe.RELEASES))
def test_open_mpi_decides_at_256_ranks(release: str, tmp_path: Path) -> None:
    """One launch of 256 oversubscribed ranks (~1 min here): the 256..1023 row's three arms."""
    require_infra(probe.installed(release), f"Open MPI {release} ({probe.RELEASES[release][1]})")
    shim, program = probe.build(release, tmp_path)
    observations = probe.run(release, 256, (4, 16384, 65536), shim, program)
    assert [o.called for o in observations] == ["knomial", "split_binary_tree", "knomial"]
    assert _mismatches(observations) == []
