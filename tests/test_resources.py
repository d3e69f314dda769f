"""Cell order, job groups and their resources at scale: what `snakemake -n` on a large campaign
pays for (bench/harness.py part 3). Pure logic, no infrastructure."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from mpiatlas.matrix import cells as cell_model
from mpiatlas import programs
from mpiatlas.campaign import resources
from mpiatlas.matrix.cells import Cell, sort_cells
from mpiatlas.spine.campaign import Campaign
from mpiatlas.matrix.config import validate

ROOT = Path(__file__).resolve().parents[1]
RESOURCE_NAMES = ("tasks", "cpus_per_task", "mpi", "nodes", "slurm_extra", "runtime", "mem_mb")


def campaign(cells_per_job: int = 4) -> Campaign:
    """IMB and kernel cells over two transports, three mappings (one over 2 nodes), several sizes."""
    return validate({
        "campaign": {"name": "r", "repetitions": 3, "timeout_s": 300, "cells_per_job": cells_per_job},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["shm", "ofi-tcp"],
                                "algorithms": {"Bcast": ["default", "id1"]}}},
        "mappings": ["core", "socket", "node"], "nodes": [2], "processes": [2, 4],
        "imb": {"benchmarks": ["PingPong", "Bcast", "Allreduce"], "msglog": [0, 10], "time_s": 0.5, "mem_gb": 1},
        "kernels": {"ring": {"variants": ["nonblocking", "blocking"], "processes": [2, 4]}},
    })


def test_sort_cells_orders_by_the_fields_and_drops_duplicates_whatever_the_input_order() -> None:
    cells = programs.expand(campaign())
    assert len(cells) > 100
    shuffled = cells + cells[::7]  # duplicates
    random.Random(1).shuffle(shuffled)
    # The dataclass's own order (field by field) and equality are the reference.
    assert sort_cells(shuffled) == sorted(set(shuffled)) == cells
    assert sort_cells(iter(cells)) == cells  # any iterable, an already sorted one too
    assert sort_cells([]) == []


def test_numbers_sort_as_numbers_not_as_text() -> None:
    a, b = (Cell("imb", "s", "shm", "core", np, "Bcast", "default", rep) for np, rep in ((10, 0), (2, 1)))
    assert sort_cells([a, b]) == [b, a]  # np 2 before np 10, whatever the rep


def test_a_cell_has_no_instance_dict() -> None:
    """A 177k-cell campaign holds every cell in Snakemake's process: slots keep each one small."""
    cell = programs.expand(campaign())[0]
    assert not hasattr(cell, "__dict__")
    with pytest.raises(AttributeError):
        cell.np = 3  # type: ignore[misc]  # still frozen


def rep_major(cells: list[Cell]) -> list[Cell]:
    """A group's order: repetition 0 of every cell in the campaign's order, then repetition 1, ..."""
    return sorted(sort_cells(cells), key=lambda c: c.rep)


def test_job_groups_spread_each_cells_repetitions_over_the_group() -> None:
    """Back-to-back repetitions would hide the machine's drift in a bias between cells; spread out,
    the drift becomes the repetitions' spread, which the CIs carry."""
    config = campaign(cells_per_job=1000)
    cells = programs.expand(config)
    for members in resources.job_groups(config, cells).values():
        reps = [c.rep for c in members]
        assert reps == sorted(reps)
        for rep in set(reps):  # each repetition holds every cell of the group once
            assert [c.id.rsplit("/", 1)[0] for c in members if c.rep == rep] == \
                [c.id.rsplit("/", 1)[0] for c in members if c.rep == 0]


def test_job_groups_are_allocations_in_id_order_cut_every_cells_per_job() -> None:
    config = campaign(cells_per_job=4)
    cells = programs.expand(config)
    groups = resources.job_groups(config, list(reversed(cells)))  # input order does not matter
    assert sorted(c for members in groups.values() for c in members) == cells  # every cell once
    allocations = list(dict.fromkeys(g.rsplit("_", 1)[0] for g in groups))
    assert allocations == sorted(allocations)  # groups in the order of their allocation ids
    for group, members in groups.items():
        allocation, chunk = group.rsplit("_", 1)
        assert {resources.allocation(config, c) for c in members} == {allocation}
        assert members == rep_major(members) and 1 <= len(members) <= 4
        same = rep_major([c for c in cells if resources.allocation(config, c) == allocation])
        assert members == same[int(chunk) * 4:int(chunk) * 4 + 4]
    assert "imb_intelmpi_np4_t1_nodes2_excl_0" in groups  # an allocation over several nodes names them
    assert all(c.nodes == 2 for c in groups["imb_intelmpi_np4_t1_nodes2_excl_0"])


def test_an_allocation_holds_every_transport_and_the_mappings_that_share_its_exclusivity() -> None:
    """What a scheduler allocates is nodes x tasks x cpus per task, on whole nodes or not: the
    transports of a stack and the mappings of one exclusivity share it (each cell plans its own
    placement and launch inside), and a group asks for whole nodes when its cells need them."""
    config = campaign(cells_per_job=1000)
    cells = programs.expand(config)
    groups = resources.job_groups(config, cells)
    assert sorted(groups) == [f"{kind}_intelmpi_np{np}_t1{alloc}_0" for kind in ("imb", "kernel") for np in (2, 4)
                              for alloc in ("", "_excl", "_nodes2_excl")]
    placements = {g: {(c.transport, c.placement) for c in members} for g, members in groups.items()}
    assert placements["imb_intelmpi_np4_t1_0"] == {("shm", "core"), ("ofi-tcp", "core")}
    assert placements["imb_intelmpi_np4_t1_excl_0"] == {("shm", "socket"), ("ofi-tcp", "socket")}
    assert placements["imb_intelmpi_np4_t1_nodes2_excl_0"] == {("shm", "node2"), ("ofi-tcp", "node2")}
    assert sum(map(len, groups.values())) == len(cells)
    shape = {g: {k: v for k, v in resources.group_resources(config, m).items() if k in ("tasks", "nodes", "slurm_extra")}
             for g, m in groups.items()}
    assert shape["imb_intelmpi_np4_t1_0"] == {"tasks": 4, "nodes": 1, "slurm_extra": "--ntasks-per-node=4"}
    assert shape["imb_intelmpi_np4_t1_excl_0"] == {"tasks": 4, "nodes": 1, "slurm_extra": "--ntasks-per-node=4 --exclusive"}
    assert shape["imb_intelmpi_np4_t1_nodes2_excl_0"] == {"tasks": 4, "nodes": 2,
                                                         "slurm_extra": "--ntasks-per-node=2 --exclusive"}
    # campaign.exclusive always/never: every single-node mapping of a process count shares one allocation.
    for mode, suffix, extra in (("always", "_excl", " --exclusive"), ("never", "", "")):
        config = config.revised(campaign={"exclusive": mode})
        groups = resources.job_groups(config, cells)
        one_node = groups[f"imb_intelmpi_np2_t1{suffix}_0"]
        assert {c.placement for c in one_node} == {"core", "socket"}
        assert resources.group_resources(config, one_node)["slurm_extra"] == "--ntasks-per-node=2" + extra
    # A group that mixes exclusivities (grouping: machine) asks for whole nodes if any of its cells needs them.
    config = config.revised(campaign={"exclusive": "auto"})
    core, socket = (next(c for c in cells if c.placement == m and c.np == 4) for m in ("core", "socket"))
    assert resources.group_needs_exclusive(config, [core, socket]) and not resources.group_needs_exclusive(config, [core])
    assert resources.group_resources(config, [core, socket])["slurm_extra"] == "--ntasks-per-node=4 --exclusive"


def test_group_resources_are_computed_once_per_group_and_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snakemake calls every resource of every job on its own, and again when it prints the job:
    the group's cells are modelled once per group and attempt, not once per call."""
    config = campaign()
    groups = resources.job_groups(config, programs.expand(config))
    computed: list[tuple[str, int]] = []
    real = resources.group_resources

    def counting(config_: dict, cells: list[Cell], attempt: int = 1, costs: resources.CellCosts | None = None,
                 budget: resources.GroupBudget | None = None) -> dict:
        computed.append((resources.allocation(config_, cells[0]), attempt))
        return real(config_, cells, attempt, costs, budget)

    monkeypatch.setattr(resources, "group_resources", counting)
    # Runtime and memory from the budgets job_groups added up: the same as going over the cells again (below).
    table = resources.GroupResources(config, groups, budgets=groups.budgets)
    getters = {name: table.resource(name) for name in RESOURCE_NAMES}
    for _ in range(3):  # the DAG, the scheduler, the dry run's print
        for group in groups:
            wildcards = SimpleNamespace(group=group)
            for name, get in getters.items():
                assert get(wildcards, 1) == real(config, groups[group], 1)[name]
    assert len(computed) == len(groups)
    # A retry is another attempt: computed once more, with a longer runtime.
    group = next(iter(groups))
    again = getters["runtime"](SimpleNamespace(group=group), 2)
    assert len(computed) == len(groups) + 1 and again >= getters["runtime"](SimpleNamespace(group=group), 1)
    with pytest.raises(ValueError, match="nosuch_0 is not a job group of this campaign"):
        table.of("nosuch_0")


def test_group_resources_of_the_first_cell_hold_for_the_whole_group() -> None:
    """Resources use the first cell for the allocation (all cells share it) and every cell for
    runtime (the sum) and memory (the largest)."""
    config = campaign(cells_per_job=6)
    groups = resources.job_groups(config, programs.expand(config))
    for group, members in groups.items():
        res = resources.group_resources(config, members)
        assert {(c.np, c.threads, c.nodes, resources.slurm_extra(config, c)) for c in members} \
            == {(res["tasks"], res["cpus_per_task"], res["nodes"], res["slurm_extra"])}
        assert res["runtime"] == resources.runtime_min(config, members)
        assert groups.budgets[group] == (sum(resources.cell_runtime_s(config, c) for c in members), res["mem_mb"])
        assert res["mem_mb"] == max(programs.program_of(c).mem_mb(config, c) for c in members)
        assert cell_model.parse_id(members[0].id)["np"] == res["tasks"]


def test_groups_are_cut_by_budgeted_runtime_as_well_as_by_count() -> None:
    """A group's budgeted runtime (what the SLURM profile requests) stays within job_minutes: the
    chunks of an allocation are the longest runs of cells, in order, that fit the budget, and a cell
    longer than the budget on its own is a group of one."""
    config = campaign(cells_per_job=1000)
    cells = programs.expand(config)
    alloc = "imb_intelmpi_np2_t1"

    def chunks_of(groups: dict[str, list[Cell]]) -> list[list[Cell]]:
        return [m for g, m in groups.items() if g.rsplit("_", 1)[0] == alloc]

    allocation = rep_major([c for c in cells if resources.allocation(config, c) == alloc])
    cost = {c: resources.cell_runtime_s(config, c) for c in allocation}
    assert len(allocation) == 24  # 2 transports x (PingPong, Bcast x 2 algorithms, Allreduce); 3 repetitions
    budget_s = 3.5 * max(cost.values())
    config = config.revised(campaign={"job_minutes": budget_s / 60})
    chunks = chunks_of(resources.job_groups(config, cells))
    assert [c for m in chunks for c in m] == allocation  # in order, none lost or repeated
    assert len(chunks) >= 4
    for i, members in enumerate(chunks):
        used = sum(cost[c] for c in members)
        assert used <= budget_s
        if i + 1 < len(chunks):  # the longest run that fits: the next cell would not have
            assert used + cost[chunks[i + 1][0]] > budget_s
    # The count still caps a group when the budget does not bind; a budget below one cell: groups of one.
    config = config.revised(campaign={"job_minutes": 10_000, "cells_per_job": 5})
    assert [len(m) for m in chunks_of(resources.job_groups(config, cells))] == [5, 5, 5, 5, 4]
    config = config.revised(campaign={"job_minutes": min(cost.values()) / 120})
    assert all(len(m) == 1 for m in resources.job_groups(config, cells).values())


def test_default_groups_hold_an_allocation_up_to_four_hours_of_budget() -> None:
    """The schema's defaults (cells_per_job 1000, job_minutes 240): a small campaign's allocation is
    one group, so a campaign starts one `run-cell` process per allocation, not one per 20 cells."""
    config = validate({k: v for k, v in campaign().as_dict().items() if k != "campaign"}
                      | {"campaign": {"name": "r", "repetitions": 3, "timeout_s": 300}})
    assert config.campaign.cells_per_job == 1000 and config.campaign.job_minutes == 240
    cells = programs.expand(config)
    groups = resources.job_groups(config, cells)
    allocations = {resources.allocation(config, c) for c in cells}
    assert len(groups) == len(allocations) and all(g.endswith("_0") for g in groups)


def test_machine_grouping_has_one_group_per_kind_and_stack() -> None:
    """grouping: machine (profiles/local, no scheduler): every transport, placement and process count
    of a stack's IMB cells in one group, its kernel cells in another; the resources shown are the
    largest cell's, on whole nodes since some of its cells need them; the time budget and the count
    still cut."""
    config = campaign(cells_per_job=1000).revised(grouping="machine")
    cells = programs.expand(config)
    groups = resources.job_groups(config, cells)
    assert sorted(groups) == ["imb_intelmpi_machine_0", "kernel_intelmpi_machine_0"]
    imb = groups["imb_intelmpi_machine_0"]
    assert imb == rep_major([c for c in cells if c.kind == "imb"])  # by repetition, then the campaign's order
    assert {c.transport for c in imb} == {"shm", "ofi-tcp"} and {c.np for c in imb} == {2, 4}
    res = resources.group_resources(config, imb)
    assert res["tasks"] == 4 and res["nodes"] == 2 and res["cells"] == len(imb)
    assert res["slurm_extra"] == "--ntasks-per-node=2 --exclusive"
    config = config.revised(campaign={"cells_per_job": 10})
    assert [len(m) for g, m in resources.job_groups(config, cells).items() if g.startswith("imb_")][:2] == [10, 10]


@pytest.mark.parametrize("profile", ["local", "slurm"])
def test_under_each_profile_a_cells_repetitions_are_spread_over_its_groups_run(profile: str) -> None:
    """The grouping each shipped profile sets (profiles/local: machine; profiles/slurm: the schema's
    allocation) runs repetition-major: a group is passes over its series, one repetition each, so a
    series' launches are a whole pass apart, never back to back (a slow period of the machine
    then touches one repetition of many series, which the re-measures and the CIs absorb)."""
    import yaml

    settings = yaml.safe_load((ROOT / "profiles" / profile / "profile.yaml").read_text())
    overrides = dict(item.split("=", 1) for item in settings.get("config") or [])
    assert overrides == ({"grouping": "machine"} if profile == "local" else {})
    config = campaign(cells_per_job=1000).revised(**overrides)
    groups = resources.job_groups(config, programs.expand(config))
    assert len(groups) > 1
    for members in groups.values():
        series = [c.id.rsplit("/", 1)[0] for c in members]
        per_pass = len(set(series))
        assert per_pass > 1 and len(series) == 3 * per_pass
        for one in set(series):
            at = [i for i, s in enumerate(series) if s == one]
            assert [b - a for a, b in itertools.pairwise(at)] == [per_pass, per_pass]
