"""Real data: ORFEO OSU Bcast by forced algorithm, predicted from per-region 4 B latencies.

**EPYC** (valentinis dataset): 2 nodes of 2 × AMD EPYC 7H12, Open MPI 4.1.5, OSU 7.3 osu_bcast,
P = 2..256, ``--map-by core|socket|node``. Region table: the one published for those nodes (same
CCX 0.15 µs, same CCD other CCX 0.31, same NUMA 0.34, same socket 0.36, other socket 0.65, other
node 1.82). Topology ``pack:2 numa:4 die:2 l3:2 core:4 pu:1``: 64 cores per socket = 8 CCDs
(dies) of 2 CCXs (one L3 each) of 4 cores; 4 NUMA nodes per socket (NPS4, the EPYC nodes'
setting per the zampar PROVENANCE: "2 sockets × 64 cores per node, 4 NUMA regions per
socket"), so a NUMA node holds 2 CCDs and "same NUMA" sits between "same CCD" and "same socket"
as in the table. (The brief's example ``numa:4 l3:16 core:4`` per package would be 512 cores.)

**THIN** (zampar dataset): its Bcast runs were on 2 × 12-core Xeon Gold 6126 nodes, not EPYC,
so the EPYC table does not apply. Its own osu_latency sweep over all 276 core pairs of one node
gives the table: 4 B median 0.19 µs within a socket (132 pairs, 0.18–0.24), 0.42 µs across
(144 pairs, 0.40–0.46). No inter-node latency was measured (its two-node file is not
inter-node, see PROVENANCE), so only P ≤ 24 (one node under map-by core/socket) is predicted.

The prediction compared is ``completion_us`` (the studies' quantity: when the last rank has its
data), against OSU's Avg Latency. Tolerances are the accuracy each model is claimed to have
here (median |error| per algorithm and allocation, from the figures this data gives, rounded up
to the next 5 %); where a model fails, the test asserts the failure's direction and size, so a
change that moves either is seen. The worst |error| is bounded too, but it is set by the data's
outliers (single runs: e.g. chain/socket 305 µs at P=129 against 8.5 µs at P=65), so underestimates
can only approach -100 %.

Figures (median |e|, signed median, worst |e|), EPYC, 4 B, P = 2..256:
- basic_linear: core 344 % (+344 %), worst 667 %; socket 210 % (+210 %), 695 %; node 370 %, 565 %.
  FAILS: the root does not pay a full one-way latency per send. Measured slope 0.14 µs per extra
  rank from P=64 to 128 (5.1 -> 13.9 µs; those ranks are on the other socket) against the 0.65 µs
  charged: an eager send costs the root its injection overhead, the latencies overlap.
- chain (fanout 4): core 26 % (-25 %), worst 99 %; socket 24 % (+6 %), 99 %; node 31 % (+31 %), 101 %.
- binary_tree: core 42 % (-41 %), 90 %; socket 51 % (-51 %), 100 %; node 56 % (-56 %), 126 %.
  Underestimates ~2×: a level costs more than its slowest one-way latency (a rank receives, then
  posts two sends; the per-message software cost is not in a PingPong half round trip).
- default (Open MPI 4.1's fixed decision: pipeline / binary_tree / knomial / binomial by P):
  core 47 %, worst 164 %; socket 37 %, 100 %; node 53 %, 126 %. Same cause as binary_tree, worst for
  knomial (radix 4: the root posts up to 3·log4 P sends at once, charged as one).
THIN, P ≤ 24: chain 32 % core / 10 % socket; binary_tree 29 % / 30 %; binomial 21 % / 26 %;
pipeline 12 % / 36 %; default 49 % / 18 %.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.models.collective_regions import predict
from mpiatlas.models.prediction_errors import ErrorSummary, error_summary
from mpiatlas.models.region_latency import RegionTable, place
from mpiatlas.parsers.osu_csv import parse_osu_csv_file
from mpiatlas.node.topology_synthetic import parse_synthetic

EPYC_TOPOLOGY = "pack:2 numa:4 die:2 l3:2 core:4 pu:1"
EPYC_TABLE = RegionTable(
    {"same_l3": 0.15, "same_die": 0.31, "same_numa": 0.34, "same_socket": 0.36, "other_socket": 0.65, "other_node": 1.82},
    source="published ORFEO EPYC table",
)
THIN_TOPOLOGY = "pack:2 numa:1 l3:1 core:12 pu:1"
# Open MPI --map-by on a 2-node allocation: core and socket fill node 0 first, node deals round-robin.
PLACEMENTS = {"core": ("block", "core"), "socket": ("block", "socket"), "node": ("cyclic", "core")}

# (algorithm, file stem, allocation) -> (max median |e|, max worst |e|), prediction = completion.
EPYC_TOLERANCE = {
    ("chain", "chain", "core"): (0.30, 1.05),
    ("chain", "chain", "socket"): (0.30, 1.05),
    ("chain", "chain", "node"): (0.35, 1.05),
    ("binary_tree", "bintree", "core"): (0.45, 0.95),
    ("binary_tree", "bintree", "socket"): (0.55, 1.05),
    ("binary_tree", "bintree", "node"): (0.60, 1.30),
    ("default", "def", "core"): (0.50, 1.70),
    ("default", "def", "socket"): (0.40, 1.05),
    ("default", "def", "node"): (0.55, 1.30),
}
THIN_TOLERANCE = {
    ("chain", "chain", None, "core"): (0.35, 0.60),
    ("chain", "chain", None, "socket"): (0.15, 0.30),
    ("binary_tree", "binarytree", None, "core"): (0.30, 0.45),
    ("binary_tree", "binarytree", None, "socket"): (0.35, 0.35),
    # bcast_linear.csv ran coll_tuned algorithm 6 = binomial (PROVENANCE), whatever its label says.
    ("binomial", "linear", "binomial", "core"): (0.25, 0.40),
    ("binomial", "linear", "binomial", "socket"): (0.30, 0.40),
    ("binomial", "binomial", None, "core"): (0.25, 0.55),
    ("binomial", "binomial", None, "socket"): (0.30, 0.45),
    ("pipeline", "pipeline", None, "core"): (0.15, 0.40),
    ("pipeline", "pipeline", None, "socket"): (0.40, 0.55),
    ("default", "default", None, "core"): (0.50, 0.75),
    ("default", "default", None, "socket"): (0.20, 0.45),
}


def _measured(path: Path, allocation: str, *, algorithm: str | None = None, max_np: int = 256) -> dict[int, float]:
    """OSU Avg Latency at 4 B per P; a P measured twice (an appended re-run) gives its median."""
    rows = parse_osu_csv_file(path, algorithm=algorithm).filter(
        (pl.col("bytes") == 4) & (pl.col("mapping") == allocation) & (pl.col("processes") <= max_np)
    )
    per_np = rows.group_by("processes").agg(pl.col("t_usec").median())
    return dict(per_np.iter_rows())


def _errors(topology: str, table: RegionTable, nodes: int, allocation: str, algorithm: str,
            measured: dict[int, float]) -> ErrorSummary:  # fmt: skip
    placement, mapping = PLACEMENTS[allocation]
    full = place(parse_synthetic(topology), max(measured), nodes=nodes, placement=placement, mapping=mapping)
    predicted = {n: predict("bcast", algorithm, full.prefix(n), table, 4).completion_us for n in measured}
    return error_summary(predicted, measured)


def _epyc_file(stem: str, allocation: str) -> Path:
    return require_datasets() / "valentinis-orfeo-epyc-osu-bcast-barrier/exercise1/results_def" / (
        f"bcast_{stem}_results_wu_{allocation}.csv"
    )


@pytest.mark.parametrize(("algorithm", "stem", "allocation"), list(EPYC_TOLERANCE))
def test_epyc_bcast_within_stated_tolerance(algorithm: str, stem: str, allocation: str) -> None:
    measured = _measured(_epyc_file(stem, allocation), allocation)
    assert len(measured) >= 240  # P = 2..256 less the documented gaps
    summary = _errors(EPYC_TOPOLOGY, EPYC_TABLE, 2, allocation, algorithm, measured)
    max_median, max_worst = EPYC_TOLERANCE[(algorithm, stem, allocation)]
    assert summary.median_abs <= max_median, summary.line()
    assert summary.worst_abs <= max_worst, summary.line()


@pytest.mark.parametrize("allocation", ["core", "socket", "node"])
def test_epyc_linear_fails_by_charging_a_full_latency_per_send(allocation: str) -> None:
    """Where it fails: basic_linear as the sum of the root's P-1 one-way latencies is 3-5× too slow."""
    measured = _measured(_epyc_file("linear", allocation), allocation)
    summary = _errors(EPYC_TOPOLOGY, EPYC_TABLE, 2, allocation, "basic_linear", measured)
    assert 2.0 <= summary.median_signed <= 4.0, summary.line()
    assert summary.worst_abs <= 7.5, summary.line()
    if allocation == "core":
        # Ranks 64..127 sit on the other socket: the model charges 0.65 µs per send to them, the
        # measurement grows by well under a third of that per rank.
        slope = (measured[128] - measured[64]) / 64
        assert 0.05 < slope < EPYC_TABLE.latency_us["other_socket"] / 3


@pytest.mark.parametrize("allocation", ["core", "socket", "node"])
def test_epyc_trees_underestimate(allocation: str) -> None:
    """Where it fails: the level model misses the per-hop software cost; binary_tree lands at
    about half the measured time (signed median -40 % .. -60 %)."""
    measured = _measured(_epyc_file("bintree", allocation), allocation)
    summary = _errors(EPYC_TOPOLOGY, EPYC_TABLE, 2, allocation, "binary_tree", measured)
    assert -0.60 <= summary.median_signed <= -0.35, summary.line()


def _thin_table() -> RegionTable:
    """The THIN nodes' own 4 B latencies: median over every core pair of one node."""
    path = require_datasets() / "zampar-orfeo-osu-bcast-barrier/Excercise_1/latency/latency_data_single_node.csv"
    pairs = parse_osu_csv_file(path).filter(pl.col("bytes") == 4)
    cores = pl.col("mapping").str.extract_groups(r"cpu-list (\d+),(\d+)")
    pairs = pairs.with_columns(
        (cores.struct.field("1").cast(pl.Int64) // 12 == cores.struct.field("2").cast(pl.Int64) // 12).alias("same")
    )
    medians = dict(pairs.group_by("same").agg(pl.col("t_usec").median()).iter_rows())
    assert pairs.height == 276 and medians == {True: pytest.approx(0.19), False: pytest.approx(0.42)}
    return RegionTable({"same_l3": medians[True], "other_socket": medians[False]}, source=str(path))


@pytest.mark.parametrize(("algorithm", "stem", "relabel", "allocation"), list(THIN_TOLERANCE))
def test_thin_bcast_from_its_own_latency_table(algorithm: str, stem: str, relabel: str | None, allocation: str) -> None:
    path = require_datasets() / "zampar-orfeo-osu-bcast-barrier/Excercise_1/bcast/results" / f"bcast_{stem}.csv"
    measured = _measured(path, allocation, algorithm=relabel, max_np=24)
    assert len(measured) >= 12
    summary = _errors(THIN_TOPOLOGY, _thin_table(), 1, allocation, algorithm, measured)
    max_median, max_worst = THIN_TOLERANCE[(algorithm, stem, relabel, allocation)]
    assert summary.median_abs <= max_median, summary.line()
    assert summary.worst_abs <= max_worst, summary.line()
