"""The later re-measure round (campaign.remeasure_later): launches still perturbed after their group's
own re-measures are measured again once every group has run, after a bounded wait for a quiet machine.

The wait's judgement runs on /proc/stat recorded on the project's 2-core VM (tests/data/machine_state:
the node while a busy loop spun on cpu 1, and while it did not); the round's decision and run run the
real run_group, lifecycle, sealing, adaptive_rounds and tidy, with the launch and its judgement
scripted as in tests/test_remeasure.py (a fresh machine has no MPI; the live campaign is
tests/test_perturbation_campaign.py). The wait itself reads this machine's real /proc.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from mpiatlas.campaign import adaptive_rounds, resources
from mpiatlas.matrix import adaptive, layout
from mpiatlas.campaign.cell_groups import later_round
from mpiatlas.matrix.config import load
from mpiatlas.programs import expand
from mpiatlas.report import trust
from mpiatlas.runner import machine_state as ms
from mpiatlas.runner import run as run_module
from mpiatlas.node.pair_latency import PairLook
from mpiatlas.runner.quiet import QuietRule, look, wait_until_quiet, why_not_quiet
from mpiatlas.runner.run import Later, run_group
from mpiatlas.tables.tidy import CELL_SCHEMA, cell_row
from mpiatlas.spine.campaign import RemeasureLater
from test_machine_quality import DATA
from test_remeasure import Script, _specs, _status

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(kind: str, stat: str, load: str) -> ms.NodeSnapshot:
    return ms.NodeSnapshot(ms.parse_proc_stat((DATA / kind / stat).read_text()),
                           ms.parse_loadavg((DATA / kind / load).read_text()), None, None)


# -- the machine, over a window ----------------------------------------------------------------------


def test_a_recorded_busy_node_is_not_quiet_and_says_why() -> None:
    # busy_loop: cpu0 +121 user +16 system +0 softirq, cpu1 +113 user +25 system +1 softirq; idle,
    # iowait and steal unchanged (the VM's idle counter stood still): 276 ticks, all busy.
    seen = look(_snapshot("busy_loop", "proc_stat_before", "loadavg_before"),
                _snapshot("busy_loop", "proc_stat", "loadavg"))
    assert (seen.busy_ticks, seen.total_ticks, seen.steal_ticks) == (276, 276, 0)
    assert seen.busy_share == 1.0 and seen.steal_share == 0.0
    assert why_not_quiet(seen, QuietRule()) == "its cpus were 100 % busy (limit 10 %)"
    load = float((DATA / "busy_loop" / "loadavg").read_text().split()[0])
    assert seen.load_per_cpu == round(load / 2, 3)
    rule = QuietRule(max_load_per_cpu=0.5)
    assert f"its 1-minute load was {seen.load_per_cpu:g} per cpu (limit 0.5)" in why_not_quiet(seen, rule)


def _stat(busy: tuple[int, int], idle: tuple[int, int], steal: tuple[int, int] = (0, 0)) -> str:
    return "".join(f"cpu{c} {busy[c]} 0 0 {idle[c]} 0 0 0 {steal[c]} 0 0\n" for c in (0, 1))


def test_a_node_whose_cpus_idle_is_quiet_and_steal_counts_against_it() -> None:
    before = ms.NodeSnapshot(ms.parse_proc_stat(_stat((100, 100), (100, 100))), [0.1, 0.1, 0.1], None, None)
    after = ms.NodeSnapshot(ms.parse_proc_stat(_stat((110, 105), (295, 290))), [0.1, 0.1, 0.1], None, None)
    seen = look(before, after)
    assert (seen.busy_ticks, seen.total_ticks, seen.busy_share) == (15, 400, 0.0375)
    assert why_not_quiet(seen, QuietRule()) is None
    stolen = ms.NodeSnapshot(ms.parse_proc_stat(_stat((110, 105), (270, 275), (20, 20))), [0.1] * 3, None, None)
    assert why_not_quiet(look(before, stolen), QuietRule()) == "10 % of its cpu time was stolen (limit 2 %)"


class Node:
    """Recorded snapshots in turn, and a clock that advances by the sleeps asked for."""

    def __init__(self, snaps: list[ms.NodeSnapshot]) -> None:
        self.snaps, self.now = list(snaps), 0.0

    def snapshot(self) -> ms.NodeSnapshot:
        return self.snaps.pop(0)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_when_the_node_is_quiet_or_at_its_bound() -> None:
    busy = [_snapshot("busy_loop", "proc_stat_before", "loadavg_before"), _snapshot("busy_loop", "proc_stat", "loadavg")]
    quiet_end = ms.NodeSnapshot({c: {**v, "idle": v["idle"] + 400} for c, v in busy[1].cpus.items()}, [0.2] * 3,
                                None, None)
    node = Node([*busy, quiet_end])
    waited = wait_until_quiet(QuietRule(max_wait_s=10, window_s=2), node.snapshot, node.sleep, lambda: node.now,
                              lambda: None)
    assert (waited.quiet, waited.looks, waited.waited_s) == (True, 2, 4.0)
    assert waited.reason == "quiet after 4.0 s (2 look(s) of 2 s)"
    # Busy all along: it gives up before a look would take it past max_wait_s, and says why.
    step = {c: {k: v[k] - busy[0].cpus[c][k] for k in v} for c, v in busy[1].cpus.items()}
    node = Node([ms.NodeSnapshot({c: {k: v + n * step[c][k] for k, v in busy[0].cpus[c].items()} for c in step},
                                 busy[1].loadavg, None, None) for n in range(10)])
    waited = wait_until_quiet(QuietRule(max_wait_s=5, window_s=2), node.snapshot, node.sleep, lambda: node.now,
                              lambda: None)
    assert (waited.quiet, waited.looks, waited.waited_s) == (False, 2, 4.0)
    assert waited.reason == "not quiet after 4.0 s, launched anyway: its cpus were 100 % busy (limit 10 %)"
    assert wait_until_quiet(QuietRule(max_wait_s=0)).reason == "not waited (max_wait_s is 0)"
    # A window over which /proc/stat did not move saw nothing: not quiet.
    node = Node([busy[0]] * 4)
    waited = wait_until_quiet(QuietRule(max_wait_s=3, window_s=1), node.snapshot, node.sleep, lambda: node.now,
                              lambda: None)
    assert not waited.quiet and waited.reason.endswith("no cpu time was counted over the window")


def test_the_wait_lasts_until_the_cpus_pair_is_back_near_its_best() -> None:
    # The round trips of the recorded slow and usual launches (tests/data/pair_latency): 333.8 ns
    # while the vCPUs shared no cache, then 55.3 ns; the pair's best since boot 53.7 ns.
    idle = ms.NodeSnapshot(ms.parse_proc_stat(_stat((100, 100), (100, 100))), [0.1] * 3, None, None)
    node = Node([ms.NodeSnapshot({c: {**v, "idle": v["idle"] + 200 * n} for c, v in idle.cpus.items()}, [0.1] * 3,
                                 None, None) for n in range(5)])
    pairs = [PairLook("0 and 1", 333.8, 53.7), PairLook("0 and 1", 333.8, 53.7), PairLook("0 and 1", 55.3, 53.7)]
    waited = wait_until_quiet(QuietRule(max_wait_s=10, window_s=2), node.snapshot, node.sleep, lambda: node.now,
                              lambda: pairs.pop(0))
    assert (waited.quiet, waited.looks, waited.waited_s) == (True, 3, 6.0)
    assert waited.last["pair_ratio"] == 1.03 and waited.last["pair_ns"] == 55.3
    later = ms.NodeSnapshot({c: {**v, "idle": v["idle"] + 200} for c, v in idle.cpus.items()}, [0.1] * 3, None, None)
    assert why_not_quiet(look(idle, later, PairLook("0 and 1", 333.8, 53.7)), QuietRule()) == \
        "a pair of its cpus passed a cache line in 334 ns, 6.2x its best since boot (limit 2x)"
    # Left out where the node has no pair to probe.
    assert look(idle, later).pair_ratio == 0.0 and why_not_quiet(look(idle, later), QuietRule()) is None


def test_the_rule_takes_the_configured_wait_and_the_perturbation_limits() -> None:
    config = load(ROOT / "config" / "test" / "tiny.yaml")
    assert config.campaign.remeasure_later == RemeasureLater(launches=2, max_wait_s=60, window_s=2,
                                                             max_load_per_cpu=None)
    campaign = {**config.as_dict()["campaign"], "perturbation": {"other_cpu_share": 0.3},
                "remeasure_later": {"launches": 1, "max_wait_s": 5, "window_s": 0.5, "max_load_per_cpu": 1.5}}
    assert QuietRule.of_config(campaign) == QuietRule(5.0, 0.5, 1.5, 0.3, 0.02)


# -- the round: decided after the groups, run in its own groups -------------------------------------------


@pytest.fixture
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list[dict], list[Path], Path]:
    """tiny.yaml's first 3 IMB shm cells run as a group: a perturbed once, b ok, c perturbed through
    its 3 in-group re-measures (a slow period as long as the group)."""
    monkeypatch.chdir(tmp_path)
    config = load(ROOT / "config" / "test" / "tiny.yaml")
    specs = _specs(3)
    results = tmp_path / "results" / "tiny"
    outs = [results / "raw" / s["id"] for s in specs]
    a, b, c = (s["id"] for s in specs)
    monkeypatch.setattr(run_module, "_launch_and_judge", Script({a: ["perturbed", "ok"], b: ["ok"], c: ["perturbed"] * 4}))
    run_group(specs, outs, remeasure=3)
    return config, specs, outs, results


def test_the_decision_after_the_groups_asks_for_the_cells_still_perturbed(sealed) -> None:
    config, specs, _outs, results = sealed
    assert adaptive.spec_of(config) is None and adaptive_rounds.has_rounds(config)
    decision = adaptive_rounds.decide_round(config, results / "raw", 0, None)
    # Fixed repetitions: every series as planned, final; one later group holding only c.
    assert decision["spec"] is None and {e["state"] for e in decision["series"]} == {adaptive.FIXED}
    assert sorted(adaptive_rounds.planned_cell_ids(decision)) == sorted(cell.id for cell in expand(config))
    (group,) = decision["later_remeasure"]
    assert group.startswith("r1.again.") and list(decision["groups"]) == [group]
    assert [cell.id for cell in adaptive_rounds.cells_of_round_group(decision, group)] == [specs[2]["id"]]
    # Off: no rounds at all for fixed repetitions (as before), and none when re-measures are off.
    for campaign in ({"remeasure_later": {"launches": 0}}, {"remeasure": 0}):
        off = config.revised(campaign=campaign)
        assert not adaptive_rounds.has_rounds(off)


def test_a_later_group_asks_the_scheduler_for_its_waits_and_launches(sealed) -> None:
    """The later group's job runs up to `launches` passes, each after a wait of up to max_wait_s:
    its runtime request holds them all. Budgeted as one launch per cell (the 1 min floor), SLURM
    ended such a job during its first wait on a busy CI node."""
    config, _, _outs, results = sealed
    decision = adaptive_rounds.decide_round(config, results / "raw", 0, None)
    adaptive_rounds.write_decision(decision, adaptive_rounds.decision_path(str(results), 0),
                                   adaptive_rounds.manifest_path(str(results), 0))
    groups = adaptive_rounds.RoundGroups(str(results), resources.job_groups(config, expand(config)))
    (group,) = groups.decision(0)["later_remeasure"]
    costs = resources.CellCosts(config)
    (cell,) = groups[group]
    # tiny.yaml: 2 later launches, a wait of up to 60 s ended by 2 s windows
    expected_s = 2 * (60 + 2 + costs.runtime_s(cell))
    assert resources.later_round_seconds(config, [cell], costs) == pytest.approx(expected_s)
    table = resources.GroupResources(config, groups, costs)
    assert table.of(group)["runtime"] == math.ceil(expected_s / 60) >= 3
    assert table.of(group, attempt=2)["runtime"] == math.ceil(2 * expected_s / 60)
    # The campaign's own groups keep their one-launch-per-cell budget.
    own = next(iter(groups._static))
    assert not groups.is_later_remeasure(own) and not groups.is_later_remeasure("r1.again.unknown_0")
    assert table.of(own)["runtime"] == resources.runtime_min(config, groups[own], 1, costs)


def test_the_later_group_waits_relaunches_and_records_the_wait(sealed, tmp_path: Path, monkeypatch) -> None:
    config, specs, outs, results = sealed
    decision = adaptive_rounds.decide_round(config, results / "raw", 0, None)
    (group,) = decision["later_remeasure"]
    decision_file = tmp_path / "round0.json"
    decision_file.write_text(json.dumps(decision))
    later = later_round(config, group, decision_file)
    assert later == Later(2, QuietRule.of_config(config.as_dict()["campaign"]))
    assert later_round(config, "intelmpi.imb.0", None) is None
    c = specs[2]["id"]
    script = Script({c: ["perturbed", "ok"]})
    monkeypatch.setattr(run_module, "_launch_and_judge", script)
    # A short bound: this shared machine is rarely quiet; either way the wait is recorded.
    fast = Later(2, QuietRule(max_wait_s=0.3, window_s=0.1))
    done = run_group([specs[2]], [outs[2]], remeasure=3, later=fast)
    assert script.launched == [c, c]  # the in-group budget spent: only the later launches ran
    final = _status(outs[2])
    # Set aside: 3 in-group re-measures, the group's last launch, and the later round's first.
    assert final["quality"] == "ok" and done[0]["remeasured"] == 5
    waited = final[layout.QUIET_WAIT]
    assert waited["pass"] == 2 and waited["cells_in_pass"] == 1 and waited["looks"] >= 1
    assert waited["reason"].startswith("quiet after" if waited["quiet"] else "not quiet after")
    assert json.loads((outs[2] / layout.PROVENANCE).read_text())[layout.QUIET_WAIT] == waited
    # The later round's perturbed attempt lists what it had waited for; the in-group ones do not.
    attempts = final[layout.REMEASURED]
    assert [layout.QUIET_WAIT in a for a in attempts] == [False, False, False, False, True]
    assert attempts[4][layout.QUIET_WAIT]["pass"] == 1
    # The budget is spent: the next decision asks for nothing more.
    assert adaptive_rounds.decide_round(config, results / "raw", 1, decision)["groups"] == {}
    # The cells table and the report's trust paragraph say what was waited and why.
    row, _ = cell_row(outs[2])
    assert (row["quiet_wait_s"], row["quiet_wait"]) == (waited["waited_s"], waited["reason"])
    cells = pl.DataFrame([cell_row(o)[0] for o in outs], schema=CELL_SCHEMA)
    (sentence,) = trust.later_round(cells)
    assert sentence.startswith("1 cell still perturbed after the group's own re-measures was launched again in "
                               f"the campaign's later round, after a wait for a quiet machine (longest {waited['waited_s']:.1f} s)")
    assert f"{c} ({waited['reason']})" in sentence
    assert sentence in trust.launches(cells)
