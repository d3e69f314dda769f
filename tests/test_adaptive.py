"""Adaptive repetitions (mpiatlas.matrix.adaptive, mpiatlas.campaign.adaptive_rounds): the config, the round sizing,
the stopping rule, and decisions recomputed from sealed cells. Pure logic: the sealed cells are
real IMB PingPong launches recorded on this machine (tests/data/adaptive/raw: Intel MPI, shm and
ofi-tcp, 8 repetitions each), copied into a throw-away raw directory."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas import programs
from mpiatlas.campaign import adaptive_rounds
from mpiatlas.matrix import adaptive
from mpiatlas.matrix.adaptive import AdaptiveSpec, decide, next_count, relative_halfwidths
from mpiatlas.stats.aggregate import median_ci, summarize
from mpiatlas.matrix.cells import Cell
from mpiatlas.campaign.cell_groups import group_cells
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.tables.tidy import tidy

DATA = Path(__file__).parent / "data" / "adaptive" / "raw"
SERIES = {t: f"imb/intelmpi/{t}/core/np2/PingPong/default" for t in ("shm", "ofi-tcp")}


def campaign(repetitions: object) -> dict:
    return validate({
        "campaign": {"name": "ad", "repetitions": repetitions, "timeout_s": 60},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm", "ofi-tcp"]}},
        "mappings": ["core"], "processes": [2],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 10], "time_s": 0.5, "mem_gb": 0.5},
    }, source="ad.yaml")


ADAPTIVE = {"min": 3, "max": 12, "ci_halfwidth": 0.02}


# -- config ----------------------------------------------------------------------------------------


def test_an_integer_keeps_todays_cells_and_ids() -> None:
    config = campaign(3)
    assert adaptive.spec_of(config) is None
    cells = programs.expand(config)
    assert [c.id for c in cells if c.transport == "shm"] == [f"{SERIES['shm']}/rep{r}" for r in range(3)]
    assert len(cells) == 6


def test_a_mapping_starts_every_series_at_min() -> None:
    config = campaign(ADAPTIVE)
    assert adaptive.spec_of(config) == AdaptiveSpec(3, 12, 0.02)
    cells = programs.expand(config)
    # The same cells (and ids) as a fixed count of min: round 0 is the campaign's own cells.
    assert cells == programs.expand(campaign(3))


@pytest.mark.parametrize(("repetitions", "message"), [
    ({"min": 5, "max": 4, "ci_halfwidth": 0.03}, "ad.yaml: campaign.repetitions: min 5 is larger than max 4"),
    ({"min": 3, "max": 4}, "ad.yaml: campaign.repetitions: 'ci_halfwidth' is a required property"),
    ({"min": 1, "max": 4, "ci_halfwidth": 0.03}, "ad.yaml: campaign.repetitions.min: 1 is less than the minimum of 2"),
    ({"min": 3, "max": 4, "ci_halfwidth": 0}, "ad.yaml: campaign.repetitions.ci_halfwidth: 0 is less than or equal"),
    ({"min": 3, "max": 4, "ci_halfwidth": 0.1, "target": 1}, "('target' was unexpected); allowed keys: ci_halfwidth, max, min"),
    ({"min": 3, "max": 101, "ci_halfwidth": 0.1}, "campaign.repetitions.max: 101 is greater than the maximum of 100"),
    (0, "ad.yaml: campaign.repetitions: 0 is less than the minimum of 1"),
    ("five", "ad.yaml: campaign.repetitions: 'five' is not of type 'integer'"),
])
def test_bad_repetitions_are_refused_naming_the_key(repetitions: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        campaign(repetitions)
    assert message in str(err.value)


# -- round sizing ----------------------------------------------------------------------------------


SPEC = AdaptiveSpec(min=3, max=20, ci_halfwidth=0.03)


@pytest.mark.parametrize(("n", "halfwidth", "expected"), [
    (3, 0.06, 6),  # needs 3 x 4 = 12: at most doubling
    (6, 0.035, 9),  # 6 x (0.035 / 0.03)^2 = 8.2 -> 9
    (10, 0.0301, 11),  # barely above the target: at least one more
    (12, 0.2, 20),  # doubling would be 24: never beyond max
    (19, 0.04, 20),
    (4, math.inf, 8),  # no spread measurable yet: as many again
])
def test_round_sizing_aims_at_the_target_in_few_rounds(n: int, halfwidth: float, expected: int) -> None:
    assert next_count(n, halfwidth, SPEC) == expected


def test_the_stopping_rule_states() -> None:
    assert decide(3, 0.03, SPEC) == (adaptive.REACHED, 3)  # within the target, inclusive
    assert decide(3, 0.05, SPEC) == (adaptive.MORE, 6)
    assert decide(20, 0.05, SPEC) == (adaptive.AT_MAX, 20)
    assert decide(3, None, SPEC) == (adaptive.NO_DATA, 3)


def test_the_half_width_is_the_summary_s_bootstrap_ci_of_the_median() -> None:
    rng = np.random.default_rng(7)
    values = {size: list(rng.lognormal(np.log(10 + size), 0.05, 7)) for size in (0, 8, 1024)}
    widths = relative_halfwidths(values)
    for size, v in values.items():
        low, high = median_ci(np.array(v))
        assert widths[size] == pytest.approx((high - low) / 2 / np.median(v))
    assert adaptive.worst_halfwidth(values) == max(widths.values())
    # One usable value: no spread, the half-width is unknown (never "precise").
    assert relative_halfwidths({0: [1.0], 8: [2.0, 2.0]}) == {0: math.inf, 8: 0.0}


def repetitions_needed(sigma: float, seed: int, spec: AdaptiveSpec) -> tuple[int, str]:
    """Run the rule on repetitions drawn one round at a time from a log-normal of spread ``sigma``
    (12 sizes whose medians differ, as a latency curve's)."""
    rng = np.random.default_rng(seed)
    sizes = {2**k: 1.0 + 2**k / 1e3 for k in range(12)}
    drawn: dict[int, list[float]] = {size: [] for size in sizes}
    n, state = spec.min, adaptive.MORE
    while state == adaptive.MORE:
        for size, median in sizes.items():
            drawn[size] += list(rng.lognormal(np.log(median), sigma, n - len(drawn[size])))
        state, wanted = decide(n, adaptive.worst_halfwidth(drawn), spec)
        if state == adaptive.MORE:
            assert n < wanted <= min(2 * n, spec.max)
            n = wanted
    return n, state


def test_a_quiet_series_stops_at_min_and_a_noisy_one_later() -> None:
    spec = AdaptiveSpec(min=3, max=20, ci_halfwidth=0.03)
    for seed in range(5):
        assert repetitions_needed(0.003, seed, spec) == (3, adaptive.REACHED)  # ±0.3 %: precise at once
        n, state = repetitions_needed(0.05, seed, spec)  # ±5 % per launch: the median needs more
        assert n > 3 and state in (adaptive.REACHED, adaptive.AT_MAX)
        assert repetitions_needed(0.5, seed, spec) == (20, adaptive.AT_MAX)  # hopeless: stops at max


# -- decisions from sealed cells ---------------------------------------------------------------------


def seal(raw: Path, transport: str, reps: range) -> None:
    for rep in reps:
        src = DATA / SERIES[transport] / f"rep{rep}"
        shutil.copytree(src, raw / SERIES[transport] / f"rep{rep}", dirs_exist_ok=True)


def summary_halfwidth(raw: Path, tmp: Path, transport: str, n: int) -> float:
    """The series' worst relative half-width computed the report's way: tidy, then aggregate.summarize."""
    dirs = [raw / SERIES[transport] / f"rep{r}" for r in range(n)]
    tidy(dirs, tmp / f"tidy-{transport}-{n}")
    summary = summarize(pl.read_parquet(tmp / f"tidy-{transport}-{n}" / "imb_samples.parquet"))
    rel = (summary["t_ci_high_usec"] - summary["t_ci_low_usec"]) / 2 / summary["t_median_usec"]
    return float(rel.fill_nan(math.inf).max())


def test_a_decision_reads_the_sealed_cells_as_tidy_and_aggregate_do(tmp_path: Path) -> None:
    config = campaign(ADAPTIVE)
    raw = tmp_path / "raw"
    seal(raw, "shm", range(3))
    seal(raw, "ofi-tcp", range(3))
    decision = adaptive_rounds.decide_round(config, raw, 0, None)
    by_series = {e["series"]: e for e in decision["series"]}
    assert set(by_series) == set(SERIES.values())
    for transport, series in SERIES.items():
        expected = summary_halfwidth(raw, tmp_path, transport, 3)
        entry = by_series[series]
        assert (entry["halfwidth"] if entry["halfwidth"] is not None else math.inf) == pytest.approx(expected)
        assert (entry["state"], entry["reps"]) == decide(3, expected, adaptive.spec_of(config))


def test_decisions_are_recomputed_from_sealed_cells_after_an_interruption(tmp_path: Path) -> None:
    # A stricter target than the data can meet: both series get a second round.
    config = campaign({"min": 3, "max": 8, "ci_halfwidth": 0.001})
    raw = tmp_path / "raw"
    for transport in SERIES:
        seal(raw, transport, range(3))
    first = adaptive_rounds.decide_round(config, raw, 0, None)
    assert [e["state"] for e in first["series"]] == [adaptive.MORE, adaptive.MORE]
    planned = {c["rep"] for members in first["groups"].values() for c in members}
    assert planned == set(range(3, 6))  # at most doubling
    assert all(group.startswith("r1.") for group in first["groups"])

    # Interrupted in round 1: only the shm series' rep3 was sealed. The decision of round 0,
    # recomputed (a re-run of its checkpoint), is the same: it reads the repetitions it had.
    seal(raw, "shm", range(3, 4))
    assert adaptive_rounds.decide_round(config, raw, 0, None) == first
    round1_cells = [Cell(**c) for members in first["groups"].values() for c in members]
    sealed = [c.id for c in round1_cells if (raw / c.id / "status.json").is_file()]
    assert sealed == [f"{SERIES['shm']}/rep3"]  # what a re-run of the group skips

    # The re-run seals the rest; round 1's decision counts all 6 launches of each series.
    for transport in SERIES:
        seal(raw, transport, range(3, 6))
    second = adaptive_rounds.decide_round(config, raw, 1, first)
    for entry in second["series"]:
        assert entry["round"] == 1
        assert (entry["state"], entry["reps"]) in {(adaptive.MORE, 8), (adaptive.NO_DATA, 6)}
    assert adaptive_rounds.planned_cell_ids(second)[:3] == [f"{SERIES['ofi-tcp']}/rep{r}" for r in range(3)]


def test_a_round_group_resolves_for_the_workflow_and_for_run_cell(tmp_path: Path) -> None:
    config = campaign({"min": 3, "max": 8, "ci_halfwidth": 0.001})
    raw = tmp_path / "results" / "ad" / "raw"
    for transport in SERIES:
        seal(raw, transport, range(3))
    decision = adaptive_rounds.decide_round(config, raw, 0, None)
    results = str(tmp_path / "results" / "ad")
    adaptive_rounds.write_decision(decision, adaptive_rounds.decision_path(results, 0),
                                   adaptive_rounds.manifest_path(results, 0))
    group, _members = next(iter(decision["groups"].items()))
    lookup = adaptive_rounds.RoundGroups(results, {"imb_static_0": []})
    cells = lookup[group]
    # Both series (shm, ofi-tcp) share one allocation: their new repetitions, repetition-major.
    assert [c.rep for c in cells] == [3, 3, 4, 4, 5, 5] and adaptive_rounds.round_of_group(group) == 1
    assert {c.transport for c in cells} == set(SERIES)
    assert lookup.get("r1.nothing") is None and lookup.get("imb_static_0") == []
    # run-cell --round-cells: the same cells, from the campaign config and the decision.
    config_file = tmp_path / "campaign.json"
    config_file.write_text(json.dumps(config.as_dict()))
    _, read = group_cells(config_file, group, Path(adaptive_rounds.decision_path(results, 0)))
    assert [c.id for c in read] == [c.id for c in cells]
    # Every cell planned so far: the manifest tidy reads.
    ids = json.loads(Path(adaptive_rounds.manifest_path(results, 0)).read_text())
    assert len(ids) == 12 and f"{SERIES['shm']}/rep5" in ids


def test_a_series_without_usable_times_stops_at_once(tmp_path: Path) -> None:
    config = campaign(ADAPTIVE)
    decision = adaptive_rounds.decide_round(config, tmp_path / "empty-raw", 0, None)
    assert [(e["state"], e["reps"]) for e in decision["series"]] == [(adaptive.NO_DATA, 3)] * 2
    assert decision["groups"] == {}


def test_kernel_cells_keep_their_threads_through_a_decision() -> None:
    cell = Cell("kernel", "intelmpi", "shm", "core", 1, "jacobi", "weak", 4, threads=2)
    assert Cell(**adaptive_rounds.cell_coords(cell)) == cell
    assert adaptive_rounds.series_id(cell) == "kernel/intelmpi/shm/core/np1/jacobi/weak"
    assert replace(cell, rep=0).threads == 2
