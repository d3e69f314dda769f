"""Collective models from per-region costs: hand-computed cases, placements, tables, the Open MPI
default Bcast decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpiatlas.models.collective_regions import ModelError, algorithms_for, bcast_default_algorithm, predict
from mpiatlas.models.prediction_errors import error_summary
from mpiatlas.models.region_latency import RegionTable, RegionTableError, place, read_region_table
from mpiatlas.node.topology_synthetic import parse_synthetic

# Two sockets of two cores: ranks 0,1 on socket 0 and 2,3 on socket 1 under block/core.
TWO_BY_TWO = parse_synthetic("pack:2 core:2 pu:1")
TABLE = RegionTable({"same_socket": 1.0, "other_socket": 10.0, "other_node": 100.0})


def _bcast(algorithm: str, placement: str = "block", mapping: str = "core", np: int = 4, nbytes: int = 4, **kw):
    return predict("bcast", algorithm, place(TWO_BY_TWO, np, placement=placement, mapping=mapping), TABLE, nbytes, **kw)


def test_linear_sums_the_roots_sends() -> None:
    # Root 0 sends to 1 (same socket, 1), then 2 and 3 (other socket, 10 each).
    pred = _bcast("basic_linear")
    assert pred.completion_us == pytest.approx(21.0)
    # Done at: root 21, rank 1 at 1, rank 2 at 11, rank 3 at 21.
    assert pred.rank_mean_us == pytest.approx((21 + 1 + 11 + 21) / 4)
    assert pred.shape == "linear"


def test_pipeline_sums_the_chain_and_chain_takes_the_slowest() -> None:
    assert _bcast("pipeline").completion_us == pytest.approx(1 + 10 + 1)  # 0 -> 1 -> 2 -> 3
    # Chain, fanout 4 capped at 3: the root feeds 1, 2, 3 directly; the slowest edge is 10.
    assert _bcast("chain").completion_us == pytest.approx(10.0)


def test_trees_add_the_slowest_edge_per_level() -> None:
    # Binary tree 0 -> 1, 2; 1 -> 3: level 0 max(1, 10), level 1 T(1, 3) = 10.
    assert _bcast("binary_tree").completion_us == pytest.approx(20.0)
    # Cyclic mapping by socket: ranks 0, 2 on socket 0; 1, 3 on socket 1; level 0 max(10, 1), level 1 T(1,3) = 1.
    assert _bcast("binary_tree", mapping="socket").completion_us == pytest.approx(11.0)
    # Overlap factor scales every level.
    assert _bcast("binary_tree", overlap=2.0).completion_us == pytest.approx(40.0)
    # Binomial 0 -> 1, 2; 1 -> 3; knomial radix 4 on 4 ranks: 0 -> 1, 2, 3 in one level.
    assert _bcast("binomial").completion_us == pytest.approx(20.0)
    assert _bcast("knomial").completion_us == pytest.approx(10.0)


def test_hockney_per_region_and_segments() -> None:
    table = RegionTable({"same_socket": 1.0, "other_socket": 10.0}, {"same_socket": 1000.0, "other_socket": 100.0})
    two = place(TWO_BY_TWO, 2)
    # 1 MB on one socket: 1 µs + 1e6 B / 1000 MB/s = 1001 µs.
    assert predict("bcast", "pipeline", two, table, 1_000_000).completion_us == pytest.approx(1001.0)
    # Pipeline 0 -> 1 -> 2 -> 3, 4000 B in 4 segments of 1000 B: first segment crosses
    # (1 + 1) + (10 + 10) + (1 + 1) = 24, then 3 more segments at the slowest stage (20).
    four = place(TWO_BY_TWO, 4)
    assert predict("bcast", "pipeline", four, table, 4000, segsize=1000).completion_us == pytest.approx(24 + 3 * 20)
    # A segment size at or above the message is no segmentation.
    assert predict("bcast", "pipeline", four, table, 4000, segsize=4000).completion_us == pytest.approx(
        (1 + 4) + (10 + 40) + (1 + 4)
    )


def test_scatter_binomial_sends_subtrees() -> None:
    table = RegionTable({"same_socket": 1.0, "other_socket": 10.0}, {"same_socket": 1.0, "other_socket": 1.0})
    # In-order binomial on 4: 0 -> 1 (1 block), 0 -> 2 (2 blocks: 2 and 3), 2 -> 3 (1 block); 8 B per rank.
    pred = predict("scatter", "binomial", place(TWO_BY_TWO, 4), table, 8)
    level0 = max(1 + 8, 10 + 16)
    level1 = 1 + 8
    assert pred.completion_us == pytest.approx(level0 + level1)
    linear = predict("gather", "basic_linear", place(TWO_BY_TWO, 4), table, 8)
    assert linear.completion_us == pytest.approx((1 + 8) + 2 * (10 + 8))


def test_allreduce_steps() -> None:
    four = place(TWO_BY_TWO, 4)
    # Recursive doubling: pairs (0,1),(2,3) -> 1, then (0,2),(1,3) -> 10.
    assert predict("allreduce", "recursive_doubling", four, TABLE, 4).completion_us == pytest.approx(11.0)
    # Ring: 2(P-1) = 6 steps, each as slow as its slowest neighbour pair (1-2 and 3-0 cross sockets).
    assert predict("allreduce", "ring", four, TABLE, 4).completion_us == pytest.approx(60.0)
    # Rabenseifner: reduce-scatter masks 1, 2 then allgather masks 2, 1: 1 + 10 + 10 + 1.
    assert predict("allreduce", "rabenseifner", four, TABLE, 4).completion_us == pytest.approx(22.0)
    # Non-power of two, 3 ranks: fold (0,1), one exchange between the survivors 1 and 2, unfold.
    three = place(TWO_BY_TWO, 3)
    assert predict("allreduce", "recursive_doubling", three, TABLE, 4).completion_us == pytest.approx(1 + 10 + 1)
    # Reduce rabenseifner to root 0: reduce-scatter (1, 10), gather mask 2 (2 -> 0: 10), mask 1 (1 -> 0: 1).
    assert predict("reduce", "rabenseifner", four, TABLE, 4).completion_us == pytest.approx(22.0)


def test_ring_spikes_when_it_crosses_a_socket() -> None:
    # The region-aware ring: on one socket every step costs the same-socket latency; one more
    # rank puts a socket boundary in the ring and every step pays it.
    topo = parse_synthetic("pack:2 core:8 pu:1")
    table = RegionTable({"same_socket": 0.2, "other_socket": 0.6})
    per_step = {
        n: predict("allreduce", "ring", place(topo, n), table, 4).completion_us / (2 * (n - 1)) for n in (8, 9)
    }
    assert per_step == {8: pytest.approx(0.2), 9: pytest.approx(0.6)}


def test_placements() -> None:
    topo = parse_synthetic("pack:2 numa:4 die:2 l3:2 core:4 pu:1")
    block = place(topo, 256, nodes=2)
    assert block.node_of[127] == 0 and block.node_of[128] == 1
    assert [block.region(0, r) for r in (1, 4, 8, 16, 64, 128)] == [
        "same_l3", "same_die", "same_numa", "same_socket", "other_socket", "other_node",
    ]  # fmt: skip
    cyclic = place(topo, 4, nodes=2, placement="cyclic")
    assert cyclic.node_of == (0, 1, 0, 1) and cyclic.region(0, 2) == "same_l3"
    assert place(topo, 4, nodes=2, mapping="node").node_of == (0, 1, 0, 1)
    by_socket = place(topo, 4, mapping="socket")
    assert by_socket.region(0, 1) == "other_socket" and by_socket.region(0, 2) == "same_l3"
    # ppn: 2 ranks per node, block.
    assert place(topo, 4, nodes=2, ppn=2).node_of == (0, 0, 1, 1)
    with pytest.raises(ValueError, match="does not fit"):
        place(topo, 257, nodes=2)
    with pytest.raises(ValueError, match="exceeds the 128 cores"):
        place(topo, 4, ppn=200)


def test_default_bcast_decision_is_open_mpi_41s() -> None:
    # Checked against the installed Open MPI 4.1.4 (tests/test_predict_ompi_decision.py, infra).
    cases = {(2, 4): "pipeline", (3, 4): "pipeline", (4, 4): "binary_tree", (7, 4): "binary_tree",
             (8, 4): "knomial", (16, 4): "knomial", (32, 4): "binomial", (64, 4): "knomial",
             (128, 1): "binomial", (128, 4): "binary_tree", (256, 4): "knomial", (8, 2048): "knomial",
             (40, 4096): "knomial", (20, 1 << 19): "binomial", (20, 1 << 20): "scatter_allgather",
             (2, 2048): "basic_linear"}  # fmt: skip
    assert {key: bcast_default_algorithm(*key) for key in cases} == cases
    pred = _bcast("default", np=2)
    assert pred.algorithm == "pipeline" and pred.completion_us == pytest.approx(1.0)


def test_model_errors() -> None:
    four = place(TWO_BY_TWO, 4)
    with pytest.raises(ModelError, match="not modelled; modelled: basic_linear, chain"):
        predict("bcast", "split_binary_tree", four, TABLE, 4)
    with pytest.raises(ModelError, match=r"'scatter_allgather' .*default choice at np=20"):
        predict("bcast", "default", place(parse_synthetic("pack:2 core:16 pu:1"), 20), TABLE, 1 << 20)
    with pytest.raises(ModelError, match="collective 'alltoall' is not modelled"):
        predict("alltoall", "pairwise", four, TABLE, 4)
    with pytest.raises(RegionTableError, match="region 'other_socket', which the table lacks"):
        predict("bcast", "basic_linear", four, RegionTable({"same_socket": 1.0}), 4)
    assert "default" in algorithms_for("bcast") and "default" not in algorithms_for("allreduce")


def test_read_region_table(tmp_path: Path) -> None:
    good = tmp_path / "t.csv"
    good.write_text("region,latency_us,bandwidth_MBps\n# measured\nsame_l3,0.15,9000\nother_node,1.82,\n")
    table = read_region_table(good)
    assert table.latency_us == {"same_l3": 0.15, "other_node": 1.82}
    assert table.bandwidth_MBps == {"same_l3": 9000.0}
    assert table.cost("same_l3", 9000) == pytest.approx(1.15)
    assert table.cost("other_node", 10**6) == pytest.approx(1.82)  # no bandwidth: latency at every size
    cases = {
        "region,lat\nsame_l3,1\n": r"t\.csv:1: header 'region,lat'",
        "region,latency_us\nsame_ccx,1\n": r"t\.csv:2: unknown region 'same_ccx'; expected one of same_core",
        "region,latency_us\n\nsame_l3,1\nsame_l3,2\n": r"t\.csv:4: region 'same_l3' listed twice",
        "region,latency_us\nsame_l3,-1\n": r"t\.csv:2: region 'same_l3': latency_us must be > 0",
        "region,latency_us\nsame_l3,fast\n": r"t\.csv:2: region 'same_l3': latency_us 'fast' is not a number",
        "region,latency_us\n": r"no regions after the header",
    }
    for text, message in cases.items():
        good.write_text(text)
        with pytest.raises(RegionTableError, match=message):
            read_region_table(good)
    with pytest.raises(RegionTableError, match="cannot read region table"):
        read_region_table(tmp_path / "missing.csv")


def test_error_summary() -> None:
    s = error_summary({2: 1.0, 4: 3.0, 8: 1.0}, {2: 1.0, 4: 1.0, 8: 2.0})
    assert (s.points, s.median_abs, s.median_signed, s.worst_abs, s.worst_np) == (3, 0.5, 0.0, 2.0, 4)
    with pytest.raises(ValueError, match="share no process count"):
        error_summary({2: 1.0}, {4: 1.0})
