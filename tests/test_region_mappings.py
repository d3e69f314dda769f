"""Region mappings: a PingPong pair placed per hardware region from the node's own topology
(same_core ... other_socket), the `die` mapping, and `mappings: [regions]` in a campaign config."""

from __future__ import annotations

import pytest

from mpiatlas.node import topology
from mpiatlas.matrix.cells import Cell, parse_id
from mpiatlas.matrix.config import validate
from mpiatlas.programs import expand
from mpiatlas.runner.plan import rank_cpu_sets
from mpiatlas.node.topology_synthetic import parse_synthetic

# 2 x AMD EPYC 7H12 in NPS4 mode, with SMT: 2 packages x 4 NUMA x 2 dies (CCDs) x 2 L3 (CCXs) x 4 cores x 2 PUs.
EPYC = "pack:2 numa:4 die:2 l3:2 core:4 pu:2"
# This machine's shape: 2 cores under one L3, no SMT.
TWO_CORES = "pack:1 l3:1 core:2 pu:1"


@pytest.fixture(scope="module")
def epyc() -> topology.Topology:
    return parse_synthetic(EPYC)


@pytest.mark.parametrize("region", topology.REGION_MAPPINGS)
def test_each_region_mapping_places_a_pair_whose_closest_shared_level_is_that_region(
        epyc: topology.Topology, region: str) -> None:
    pins = topology.pin_list(epyc, region, 2)
    assert len(pins) == 2 and pins.node_of == (0, 0)
    assert topology.region(epyc, pins[0], pins[1]) == region
    assert topology.mapping_region(epyc, region) == region


def test_the_pairs_are_the_nearest_ones_to_the_first_core(epyc: topology.Topology) -> None:
    # 16 PUs per NUMA node, 8 per die, 4 cores x 2 PUs per L3, 64 cores per package; PU os index =
    # core index x 2 + sibling (hwloc's synthetic numbering: consecutive PUs per core).
    first = epyc.cores[0]
    assert topology.pin_list(epyc, "same_core", 2) == list(first.pus[:2])
    pairs = {region: topology.pin_list(epyc, region, 2) for region in topology.REGION_MAPPINGS if region != "same_core"}
    cores = {region: [epyc.core_of(cpu).index for cpu in pins] for region, pins in pairs.items()}
    assert cores == {"same_l3": [0, 1], "same_die": [0, 4], "same_numa": [0, 8], "same_socket": [0, 16],
                     "other_socket": [0, 64]}


def test_the_die_mapping_spreads_ranks_over_dies(epyc: topology.Topology) -> None:
    pins = topology.pin_list(epyc, "die", 4)
    assert [epyc.core_of(cpu).die for cpu in pins] == [0, 1, 2, 3]
    assert topology.mapping_region(epyc, "die") == "same_numa"  # two dies of one NUMA node


def test_a_node_without_the_region_says_which_pairs_it_has() -> None:
    small = parse_synthetic(TWO_CORES)
    assert topology.region(small, *topology.pin_list(small, "same_l3", 2)) == "same_l3"
    for region in ("same_core", "same_die", "same_numa", "same_socket", "other_socket"):
        with pytest.raises(topology.MappingUnavailable, match=f"no two cpus whose closest shared level is {region} "
                                                               r"\(its 2 cores pair up as: same_l3\)"):
            topology.pin_list(small, region, 2)
    with pytest.raises(topology.MappingUnavailable, match=r"single die|no die level"):
        topology.pin_list(small, "die", 2)


def test_same_core_without_smt_shares_one_cpu_only_when_oversubscribing() -> None:
    small = parse_synthetic(TWO_CORES)
    pins = topology.pin_list(small, "same_core", 2, oversubscribe=True)
    assert pins == [small.cores[0].pu] * 2 and pins.oversubscribed
    assert topology.region(small, *pins) == "same_core"
    with pytest.raises(topology.MappingUnavailable, match="closest shared level is same_core"):
        topology.pin_list(small, "same_core", 2)
    assert not topology.pin_list(small, "same_l3", 2, oversubscribe=True).oversubscribed


def test_a_region_mapping_places_a_pair_only(epyc: topology.Topology) -> None:
    with pytest.raises(topology.MappingUnavailable, match="places a pair of ranks, not 4"):
        topology.pin_list(epyc, "same_numa", 4)
    with pytest.raises(topology.MappingUnavailable, match="one cpu per rank; this cell has 2 threads per rank"):
        rank_cpu_sets(epyc, "same_numa", 2, 2, oversubscribe=False)
    assert rank_cpu_sets(epyc, "other_socket", 2, 1, oversubscribe=False) == [(0,), (128,)]


def _config(mappings: list[str]) -> dict:
    return validate({
        "campaign": {"name": "regions", "repetitions": 2},
        "stacks": {"intelmpi": {"kind": "intelmpi", "source": "pypi", "transports": ["shm"]}},
        "mappings": mappings, "processes": [2, 4],
        "imb": {"benchmarks": ["PingPong", "Allreduce"], "msglog": [0, 4]},
    }, "regions.yaml")


def test_regions_in_a_config_plans_one_pingpong_pair_per_region() -> None:
    config = _config(["core", "regions"])
    assert config.mappings == ("core", *topology.REGION_MAPPINGS)
    cells = expand(config)
    by_mapping: dict[str, set[tuple[str, int]]] = {}
    for cell in cells:
        by_mapping.setdefault(cell.mapping, set()).add((cell.benchmark, cell.np))
    assert by_mapping["core"] == {("PingPong", 2), ("Allreduce", 2), ("Allreduce", 4)}
    for region in topology.REGION_MAPPINGS:  # 2-rank cells only: a region places one pair
        assert by_mapping[region] == {("PingPong", 2), ("Allreduce", 2)}
    assert _config(["regions", "same_l3"]).mappings == tuple(topology.REGION_MAPPINGS)


@pytest.mark.parametrize("mapping", topology.MAPPINGS)
def test_every_mapping_round_trips_through_a_cell_id(mapping: str) -> None:
    nodes = 2 if mapping == "node" else 1
    cell = Cell("imb", "intelmpi", "shm", mapping, 2, "PingPong", "default", 0, nodes=nodes)
    parsed = parse_id(cell.id)
    assert (parsed["mapping"], parsed["nodes"]) == (mapping, nodes)  # l3 once came back as ("l", 3)


def test_a_mapping_unknown_to_the_schema_names_the_key() -> None:
    from mpiatlas.matrix.config import ConfigError

    with pytest.raises(ConfigError, match=r"regions.yaml: mappings.0: .*'ccx'"):
        _config(["ccx"])
