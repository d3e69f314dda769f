"""``mappings: auto`` / ``processes: auto`` (mpiatlas.campaign.auto_plan) and the time estimate
(mpiatlas.campaign.resources.estimate) on the default config, for this machine's shape, the 2-socket
Xeon sysfs fixture and a synthetic 2 x 64-core EPYC."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpiatlas import cli
from mpiatlas.campaign import auto_plan, resources
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.node.topology import REGION_MAPPINGS, Topology
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.programs import expand, program_of
from mpiatlas.programs.imb import expected_imb_s

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "config" / "config.yaml"
XEON_SYSFS = REPO / "tests/data/sysfs/xeon_2s_smt_interleaved/sys/devices/system"
EPYC = "pack:2 numa:4 die:2 l3:2 core:4 pu:1"  # 2 x AMD EPYC 7H12 in NPS4: 128 cores
# This machine: hwloc's XML of it (2 cores of one socket and one L3, no SMT), and the same as a description.
THIS_MACHINE_XML = REPO / "tests/data/topology/vm_2core.xml"
THIS_MACHINE = "pack:1 l3:1 core:2 pu:1"
BUDGET_MIN = 15.0
ESTIMATE = re.compile(r"^# time estimate: ~([0-9.]+) min for (\d+) cells .*at most (\d+) min as budgeted", re.M)


def default_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(DEFAULT.read_text())
    return doc


def cells_listed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str, float]:
    """``mpiatlas cells`` output: the cell ids, the auto note, the estimate in minutes."""
    assert cli.main(["cells", "--config", str(DEFAULT), *argv]) == 0
    out = capsys.readouterr().out
    ids = [line for line in out.splitlines() if not line.startswith("#")]
    note = next(line for line in out.splitlines() if line.startswith("# auto ("))
    match = ESTIMATE.search(out)
    assert match is not None, out[-500:]
    assert int(match.group(2)) == len(ids)
    assert float(match.group(1)) <= float(match.group(3))  # the expected time within the scheduler budget
    return ids, note, float(match.group(1))


def test_this_machine_plans_what_the_first_look_planned_before_auto(capsys: pytest.CaptureFixture[str]) -> None:
    before = default_doc() | {"mappings": ["core"], "processes": [2]}
    today = [c.id for c in expand(validate(before))]
    for node in (str(THIS_MACHINE_XML), THIS_MACHINE):
        ids, note, minutes = cells_listed(["--topology", node], capsys)
        assert ids == today and len(ids) == 150
        assert "mappings core; processes 2" in note and "dropped" not in note
        assert minutes < BUDGET_MIN


def test_xeon_fixture_gets_a_pair_per_region_and_p_up_to_its_cores(capsys: pytest.CaptureFixture[str]) -> None:
    ids, note, minutes = cells_listed(["--sysfs", str(XEON_SYSFS)], capsys)
    mappings = {i.split("/")[3] for i in ids}
    # 2 sockets of 4 cores with SMT: siblings, one L3 per socket, the other socket.
    assert mappings == {"core", "same_core", "same_l3", "other_socket"}
    nps = {int(i.split("/")[4][2:]) for i in ids if i.startswith("imb/")}
    assert max(nps) == 8 and 2 in nps
    assert minutes < BUDGET_MIN
    assert "8 cores" in note


def test_epyc_gets_every_region_and_a_p_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    """2 × 64-core EPYC under the default 15 min: every region pair, P = 2, 4, 8, and the headline series
    at 3 launches. (Before issue #33 the plan kept P = 2 and 128 at 2 repetitions for everything; the
    headline's third launch no longer leaves room for the 128-rank cells: a budget of 20 min has them.)"""
    ids, note, minutes = cells_listed(["--topology", EPYC], capsys)
    mappings = {i.split("/")[3] for i in ids}
    assert mappings == {"core", "same_l3", "same_die", "same_numa", "same_socket", "other_socket"}
    nps = sorted({int(i.split("/")[4][2:]) for i in ids if i.startswith("imb/")})
    assert nps == [2, 4, 8]
    assert minutes < BUDGET_MIN
    # What the budget cut is said in the note, in the order it was cut.
    dropped = note.split("dropped to stay within 15 min: ")[1].split(", ")
    # Cheapest information first: the forced-algorithm sweeps from the largest P down, then IMB's largest
    # sizes, then one repetition of three, then the P between 2 and the core count, then the core
    # count, and last a single repetition; the headline series keep 3 launches throughout (issue #33:
    # their intervals are over launches), and the note says so.
    headline = " (IMB PingPong and the pingpong kernel keep 3)"
    assert dropped[0] == "forced algorithms at P=128", dropped
    assert "IMB sizes above 2^20 B" in dropped and f"repetitions 3->2{headline}" in dropped
    assert dropped.index("IMB sizes above 2^20 B") < dropped.index(f"repetitions 3->2{headline}")
    assert all(f"P={p}" not in dropped for p in nps)
    if f"repetitions 2->1{headline}" in dropped:  # only once no P but 2 (and those refilled) was left to cut
        assert dropped.index("P=128") < dropped.index(f"repetitions 2->1{headline}")
    reps = {}
    for i in ids:
        series, rep = i.rsplit("/rep", 1)
        reps[series] = max(reps.get(series, 0), int(rep) + 1)
    assert all(n == 3 for s, n in reps.items() if "/PingPong/" in s or "/pingpong/" in s), reps
    assert min(reps.values()) >= 1


def test_region_cells_of_auto_are_pairs_only() -> None:
    config = auto_plan.plan(default_doc(), "config.yaml", parse_synthetic(EPYC))
    region_cells = [c for c in expand(config) if c.mapping in REGION_MAPPINGS]
    assert region_cells and {(c.kind, c.benchmark) for c in region_cells} == {("imb", "PingPong"),
                                                                                ("kernel", "pingpong")}
    assert {c.np for c in region_cells} == {2}
    # An explicit `regions` list keeps every 2-rank cell of every program per region, as before.
    explicit = validate(default_doc() | {"mappings": ["core", "regions"], "processes": [2]})
    assert {c.benchmark for c in expand(explicit) if c.mapping == "same_l3"} >= {"Bcast", "ring", "matsum"}


def test_explicit_lists_are_kept_and_not_trimmed() -> None:
    doc = default_doc() | {"processes": [2, 4, 8, 16, 32, 64, 128]}
    config = auto_plan.plan(doc, "config.yaml", parse_synthetic(EPYC))
    assert config.processes == (2, 4, 8, 16, 32, 64, 128)
    assert config.document["auto"]["resolved"] == ["mappings"]
    assert not any(d.startswith("P=") for d in config.document["auto"]["dropped"])


def test_the_resolved_document_plans_the_same_cells_without_a_topology() -> None:
    """campaign.json (the document) holds the concrete lists: read back on another host (a batch
    job's run-cell), it plans the same cells and never looks at that host's topology."""
    config = auto_plan.plan(default_doc(), "config.yaml", parse_synthetic(EPYC))
    again = validate(config.as_dict(), "campaign.json")
    assert [c.id for c in expand(again)] == [c.id for c in expand(config)]
    assert again.document["auto"] == config.document["auto"]


def test_the_config_topology_key_pins_the_node(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(default_doc() | {"topology": EPYC}))
    assert auto_plan.load(path).processes[-1] > 2  # the EPYC's sweep, not this 2-core host's
    path.write_text(yaml.safe_dump(default_doc() | {"topology": "pack:two"}))
    with pytest.raises(ConfigError, match=r"c.yaml: topology: `auto` needs the node's topology: .*pack:two"):
        auto_plan.load(path)


def test_bad_auto_values_name_the_key() -> None:
    doc = copy.deepcopy(default_doc()) | {"processes": "all"}
    with pytest.raises(ConfigError, match=r"my.yaml: processes: 'all' is not allowed; expected 'auto'"):
        validate(doc, "my.yaml")


def test_auto_processes_and_regions_of_known_nodes() -> None:
    assert auto_plan.auto_processes(parse_synthetic(EPYC)) == [2, 4, 8, 16, 32, 64, 128]
    assert auto_plan.auto_processes(parse_synthetic("pack:1 core:6 pu:1")) == [2, 4, 6]
    assert auto_plan.auto_processes(parse_synthetic("pack:1 core:1 pu:1")) == [2]
    assert auto_plan.auto_mappings(Topology.from_sysfs(XEON_SYSFS)) == ["core", "same_core", "same_l3", "other_socket"]
    assert auto_plan.auto_mappings(parse_synthetic(THIS_MACHINE)) == ["core"]


def test_estimate_is_launch_plus_the_programs_work() -> None:
    config = validate(default_doc() | {"mappings": ["core"], "processes": [2]})
    cells = expand(config)
    imb = next(c for c in cells if c.kind == "imb" and c.benchmark == "PingPong")
    # IMB PingPong over 2 ranks: one launch, plus IMB's modelled sizes (test below).
    assert resources.CellCosts(config).expected_s(imb) == pytest.approx(
        resources.LAUNCH_S + 2 * resources.LAUNCH_PER_RANK_S
        + expected_imb_s("PingPong", 2, config.imb.msglog, float(config.imb.time_s), config.imb.iterations))
    est = resources.estimate(config, cells)
    assert est.cells == 150
    assert est.expected_s == pytest.approx(sum(resources.cell_expected_s(config, c) for c in cells))
    assert est.expected_s < est.budget_s  # no safety factor, no scheduler overhead


def test_imb_expected_time_by_hand() -> None:
    """IMB PingPong msglog 0:1 (0, 1, 2 B), 1000 iterations (IMB's default) of a round trip at the
    model's 20 us + size / 0.5 GB/s per message, each size plus 10 ms of IMB's own; 4 MiB: IMB's
    40 MiB volume cap leaves 10 iterations; -time caps a size; Alltoall: P - 1 messages a step."""
    per = [1000 * 2 * (20e-6 + size / 0.5e9) for size in (0, 1, 2)]
    assert expected_imb_s("PingPong", 2, [0, 1], 0.2, None) == pytest.approx(sum(per) + 3 * 0.01)
    big = 10 * 2 * (20e-6 + 2**22 / 0.5e9)
    assert expected_imb_s("PingPong", 2, [22, 22], 1.0, None) == pytest.approx(0.01 + 1000 * 2 * 20e-6 + 0.01 + big)
    assert expected_imb_s("PingPong", 2, [22, 22], 0.1, None) == pytest.approx(0.01 + 0.04 + 0.01 + 0.1)
    assert expected_imb_s("Alltoall", 8, [0, 0], 1.0, 100) == pytest.approx(2 * (0.01 + 100 * 7 * 20e-6), rel=1e-3)


def test_pingpong_work_model_by_hand() -> None:
    """pingpong msglog 0:1, 10 timed + 2 warm-up calls per size, no budget: 3 sizes (0, 1, 2 B), each
    call a round trip of 2 x (50 us + size / 100 MB/s)."""
    doc = default_doc() | {"mappings": ["core"], "processes": [2]}
    doc["kernels"]["pingpong"] |= {"msglog": [0, 1], "iterations": 10, "warmup": 2, "time_budget_ms": 0}
    config = validate(doc)
    cell = next(c for c in expand(config) if c.benchmark == "pingpong")
    expected = sum(12 * 2 * (50e-6 + size / 100e6) for size in (0, 1, 2))
    assert program_of(cell).work_s(config, cell) == pytest.approx(expected)


def test_coll_work_model_by_hand() -> None:
    """coll at P = 4, msglog 0:0 (sizes 0 and 1 B), 10 + 2 calls per size, no budget: a Bcast call costs
    log2 4 = 2 messages, an Alltoall call P - 1 = 3, each 50 us + size / 100 MB/s."""
    doc = default_doc() | {"mappings": ["core"], "processes": [2]}
    doc["kernels"]["coll"] |= {"msglog": [0, 0], "iterations": 10, "warmup": 2, "time_budget_ms": 0,
                               "processes": [4], "collectives": ["Bcast", "Alltoall"], "forced_algorithms": []}
    config = validate(doc)
    cell = next(c for c in expand(config) if c.benchmark == "coll" and c.variant == "default")
    per_message = sum(12 * (50e-6 + size / 100e6) for size in (0, 1))
    assert program_of(cell).work_s(config, cell) == pytest.approx((2 + 3) * per_message)


def test_the_campaign_says_its_plan_and_estimate_before_it_runs() -> None:
    from mpiatlas.commands.campaign import plan_lines

    epyc = auto_plan.plan(default_doc(), "config.yaml", parse_synthetic(EPYC))
    note, line = plan_lines(epyc)
    assert note.startswith("auto (pack:2 numa:4 die:2 l3:2 core:4 pu:1, 128 cores): mappings core, same_l3")
    expected = resources.estimate(epyc, expand(epyc))
    assert line == expected.line() and f"~{expected.expected_s / 60:.1f} min for {expected.cells} cells" in line
    explicit = validate(default_doc() | {"mappings": ["core"], "processes": [2]})
    (only,) = plan_lines(explicit)  # no auto: the estimate alone
    assert only == resources.estimate(explicit, expand(explicit)).line()


def test_a_thinned_p_sweep_keeps_its_ends_and_even_steps() -> None:
    doc: dict[str, Any] = {"processes": [2, 4, 8, 16, 32, 64, 128]}
    notes = [auto_plan._cut_middle_p(doc) for _ in range(3)]
    # 64 goes first (every removal doubles one step to 4x; the larger P costs more), then the sweep
    # stays spread: 2 and 128 stay, and no step grows beyond 4x while a 4x one is possible.
    assert notes == ["P=64", "P=16", "P=4"] and doc["processes"] == [2, 8, 32, 128]
    while auto_plan._cut_middle_p(doc) is not None:
        pass
    assert doc["processes"] == [2, 128]


def test_forced_algorithm_sweeps_are_cut_from_the_largest_p_down() -> None:
    doc = default_doc()
    config = auto_plan.plan(doc, "config.yaml", parse_synthetic(EPYC))
    cut = config.document["auto"].get("algorithms_max_np")
    cells = expand(config)
    forced = [c for c in cells if c.kind == "imb" and c.algorithm != "default"]
    assert cut is not None and forced and max(c.np for c in forced) <= cut
    # The default algorithm is still measured at every P the plan kept.
    kept = {c.np for c in cells if c.kind == "imb" and c.mapping == "core"}
    assert {c.np for c in cells if c.kind == "imb" and c.algorithm == "default" and c.mapping == "core"} == kept
