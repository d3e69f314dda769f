"""Every mapping at every P the config asks for (issue #34, part 3): the `node` mapping places odd P
round-robin as ``--map-by node`` does (3 over 2 nodes: 2 + 1), and a cell that truly cannot be
placed (a region mapping at P != 2, more nodes than ranks) is named with its reason, one line per
reason, by ``programs.unplanned_notes`` and ``mpiatlas cells``: the planner drops nothing silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mpiatlas import programs
from mpiatlas.cli import main
from mpiatlas.matrix.config import validate
from mpiatlas.node.multinode import planned_nodes
from mpiatlas.runner.plan import cell_nodes
from mpiatlas.stacks.base import per_node_local


def ring_config(mappings: list[str]) -> dict[str, Any]:
    return {
        "campaign": {"name": "odd", "repetitions": 1},
        "stacks": {"intelmpi": {"kind": "intelmpi", "transports": ["ofi-tcp"]}},
        "mappings": mappings, "nodes": [2], "processes": [2],
        "imb": {"benchmarks": ["PingPong"], "msglog": [0, 4], "time_s": 0.1, "mem_gb": 0.5},
        "kernels": {"ring": {"variants": ["nonblocking"], "streams": [1], "bytes": [4],
                             "processes": [3, 5, 7], "iterations": 10, "warmup": 1}},
    }


def test_node_mapping_plans_ring_cells_at_odd_p() -> None:
    config = validate(ring_config(["node"]))
    ring = sorted((c.np, c.nodes, c.ppn) for c in programs.cells_of_kind(config, "kernel") if c.benchmark == "ring")
    assert ring == [(3, 2, 2), (5, 2, 3), (7, 2, 4)]
    # 3 over 2 nodes round-robin: ranks 0 and 2 on the first node, rank 1 on the second; srun's
    # per-node cpu list is indexed by the local task id (2 on the first node, 1 on the second).
    assert planned_nodes(3, 2) == [0, 1, 0]
    assert per_node_local([10, 10, 12], 2) == [10, 12]
    cell = next(c for c in programs.cells_of_kind(config, "kernel") if c.np == 3)
    assert cell_nodes(cell.coords()) == (2, 2)
    assert programs.unplanned_notes(config) == []


def test_cells_that_cannot_be_placed_are_named_once_per_reason(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    raw = ring_config(["node", "same_socket"])
    raw["nodes"] = [2, 4]
    config = validate(raw)
    notes = {n["why"]: n["cells"] for n in programs.unplanned_notes(config)}
    # same_socket places a pair: the ring's P = 3, 5, 7 have none (one ring cell each); `node` over 4
    # nodes has no rank for every node at P = 2 (PingPong) and P = 3 (the ring).
    assert notes == {
        "mapping 'same_socket' places one pair of ranks in a region: P = 3 has no such pair (only P = 2 runs)": 1,
        "mapping 'same_socket' places one pair of ranks in a region: P = 5 has no such pair (only P = 2 runs)": 1,
        "mapping 'same_socket' places one pair of ranks in a region: P = 7 has no such pair (only P = 2 runs)": 1,
        "mapping 'node' over 4 nodes needs a rank on each node: P = 2 < 4": 1,
        "mapping 'node' over 4 nodes needs a rank on each node: P = 3 < 4": 1,
    }
    # The planned cells are exactly the rest: nothing else is missing.
    kept = sorted((c.mapping, c.np, c.nodes) for c in programs.expand(config))
    assert kept == [("node", 2, 2), ("node", 3, 2), ("node", 5, 2), ("node", 5, 4), ("node", 7, 2),
                    ("node", 7, 4), ("same_socket", 2, 1)]
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["cells", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("# not planned:")]
    assert len(lines) == len(notes) and all(any(why in line for line in lines) for why in notes)
    assert "# not planned: cells of a mapping at a process count it cannot place: mapping 'node' over 4 nodes " \
           "needs a rank on each node: P = 3 < 4 (1 cells)" in lines


SPREAD = ("core", "l3", "die", "numa", "socket")


def test_every_spread_mapping_plans_odd_p_on_one_node_and_over_two() -> None:
    # core, l3, die, numa and socket place any number of ranks (consecutive cores, or round-robin over their
    # domains as --map-by does): on one node each plans the ring at P = 3, 5, 7, and nothing is noted.
    raw = ring_config(list(SPREAD))
    del raw["nodes"]
    config = validate(raw)
    ring = sorted((c.mapping, c.np, c.nodes) for c in programs.expand(config) if c.benchmark == "ring")
    assert ring == [(m, p, 1) for m in sorted(SPREAD) for p in (3, 5, 7)]
    assert programs.unplanned_notes(config) == []
    # Over two nodes (over_nodes), cyclic and block: every odd P too, the first node holding the extra rank.
    raw.update(over_nodes=[2], placement=["cyclic", "block"])
    config = validate(raw)
    over = sorted((c.mapping, c.np, c.nodes, c.ppn, c.distribution or "cyclic")
                  for c in programs.expand(config) if c.benchmark == "ring")
    assert over == [(m, p, 2, (p + 1) // 2, d) for m in sorted(SPREAD) for p in (3, 5, 7) for d in ("block", "cyclic")]
    assert programs.unplanned_notes(config) == []
