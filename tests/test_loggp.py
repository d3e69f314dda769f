"""LogGP-priced schedules (models/loggp.py) against hand-worked timelines, and the calibration
(models/loggp_fit.py) recovering known o, g and h from data the model generated with noise."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mpiatlas.models.collective_regions import ModelError
from mpiatlas.models.collective_regions import predict as latency_only
from mpiatlas.models.loggp import LogGP, predict
from mpiatlas.models.loggp_fit import Measured, MeasuredError, calibrate, predict_held_out, read_measured
from mpiatlas.models.region_latency import RegionTable, RegionTableError, place, read_region_table
from mpiatlas.node.topology_synthetic import parse_synthetic

# Two sockets of two cores: ranks 0,1 on socket 0, ranks 2,3 on socket 1 (block, core).
TOPO = parse_synthetic("pack:2 core:2 pu:1")
TABLE = RegionTable({"same_socket": 1.0, "other_socket": 10.0})
FOUR = place(TOPO, 4)
P = LogGP(overhead_us=0.5, gap_us=0.2)


def test_linear_bcast_root_pays_o_then_a_gap_per_send() -> None:
    # The wire latency is L = λ - 2o (λ, the PingPong half round trip, holds both overheads): 0 within a
    # socket, 9 across. Sends leave at 0.5, 0.7, 0.9; each arrives L + o later: 1.0 (same socket: λ, as a
    # PingPong sees it), 10.2, 10.4.
    r = predict("bcast", "basic_linear", FOUR, TABLE, 4, params=P)
    assert r.completion_us == pytest.approx(10.4)
    assert r.rank_mean_us == pytest.approx((0.9 + 1.0 + 10.2 + 10.4) / 4)  # the root is done when its last send left
    assert r.shape == "loggp-linear"


def test_binary_tree_forwarder_pays_the_level_term() -> None:
    # 0 -> 1, 2; 1 -> 3. Rank 1 has its data at λ = 1.0 and sends one message: h = 0.3 and o, no gap
    # (g paces back-to-back sends only): 1.8 + L (9) + o = 11.3.
    r = predict("bcast", "binary_tree", FOUR, TABLE, 4, params=LogGP(0.5, 0.2, 0.3))
    assert r.completion_us == pytest.approx(11.3)


def test_a_single_send_costs_lambda_even_where_the_overheads_exceed_it() -> None:
    # o = 0.8 > λ/2 = 0.5 (the overheads overlap: L = λ - 2o = -0.6): the message still arrives λ after the send
    # began, as a PingPong measures it; the sender is busy o. A 3-rank pipeline (rank 1 forwards one message)
    # costs 2λ, a round trip, without g.
    r = predict("bcast", "basic_linear", place(TOPO, 2), TABLE, 4, params=LogGP(0.8, 5.0, 0.0))
    assert (r.completion_us, r.rank_mean_us) == (pytest.approx(1.0), pytest.approx((0.8 + 1.0) / 2))
    # Pipeline 0 -> 1 -> 2 (ranks 0, 1 on socket 0, rank 2 across): λ + λ' = 1 + 10, no g paid by rank 1.
    chain = predict("bcast", "pipeline", place(TOPO, 3), TABLE, 4, params=LogGP(0.8, 5.0, 0.0))
    assert chain.completion_us == pytest.approx(11.0)


def test_scatter_blocks_grow_towards_the_root_and_gather_serialises_receives() -> None:
    table = RegionTable({"same_socket": 1.0, "other_socket": 10.0}, {"same_socket": 100.0, "other_socket": 100.0})
    # In-order binomial 0 -> 1, 2; 2 -> 3, 100 B per rank at 100 MB/s (0.01 µs/B): edge 0 -> 2 carries 200 B.
    # L = λ - 2o: 0 within a socket, 9 across. got1 = 0.5 + (0 + 1) + 0.5 = 2.0; the root's second send
    # leaves g + (100 - 1)·G = 0.2 + 0.99 after its first (LogGP: the first message's bytes hold the root):
    # 0.5 + 1.19 = 1.69, got2 = 1.69 + (9 + 2) + 0.5 = 13.19; rank 2 sends its one message o later (no gap):
    # got3 = 13.19 + 0.5 + (0 + 1) + 0.5 = 15.19.
    r = predict("scatter", "binomial", FOUR, table, 100, params=P)
    assert r.completion_us == pytest.approx(15.19)
    # Binomial gather, same tree upwards: 3 sends at 0.5, taken by 2 at 0.5 + 1 + 0.5 = 2.0; 2 sends its 200 B
    # at 2.0 + o = 2.5, taken by 0 at 2.5 + 11 + 0.5 = 14.0 (rank 1's block came at 2.0).
    assert predict("gather", "binomial", FOUR, table, 100, params=P).completion_us == pytest.approx(14.0)
    # Linear gather of 3: both send at 0.5, taken at 0.5 + 0 + 0.5 = 1.0 and 0.5 + 9 + 0.5 = 10.0.
    g = predict("gather", "basic_linear", place(TOPO, 3), TABLE, 4, params=P)
    assert g.completion_us == pytest.approx(10.0)
    # Same-socket only: both arrive at λ = 1.0, the second is taken a gap later.
    same = predict("gather", "basic_linear", place(TOPO, 3, mapping="core"), RegionTable({"same_socket": 1.0,
                   "other_socket": 1.0}), 4, params=P)  # fmt: skip
    assert same.completion_us == pytest.approx(1.2)


def test_steps_pay_two_overheads_and_the_level_term() -> None:
    # Recursive doubling on 4: (0,1),(2,3) same socket, then (0,2),(1,3) across; a step is h + o + L + o = h + λ:
    # (0.1 + 1) + (0.1 + 10).
    r = predict("allreduce", "recursive_doubling", FOUR, TABLE, 4, params=LogGP(0.5, 0.2, 0.1))
    assert r.completion_us == pytest.approx(11.2)
    assert predict("reduce", "rabenseifner", FOUR, TABLE, 4, params=P).completion_us > 0


def test_latency_only_table_keeps_todays_rules_and_table_columns_switch_to_loggp(tmp_path: Path) -> None:
    for alg in ("basic_linear", "chain", "binary_tree", "default"):
        assert predict("bcast", alg, FOUR, TABLE, 4) == latency_only("bcast", alg, FOUR, TABLE, 4)
    path = tmp_path / "t.csv"
    path.write_text("region,latency_us,overhead_us,gap_us\nsame_socket,1,0.5,0.2\nother_socket,10,0.5,0.2\n")
    table = read_region_table(path)
    assert table.overhead_us == {"same_socket": 0.5, "other_socket": 0.5}
    assert table.gap_us == {"same_socket": 0.2, "other_socket": 0.2}
    assert predict("bcast", "basic_linear", FOUR, table, 4).completion_us == pytest.approx(10.4)
    path.write_text("region,latency_us,gap_us,overhead_us\nsame_socket,1,0.5,0.2\n")
    with pytest.raises(RegionTableError, match=r"t\.csv:1: header .*expected 'region,latency_us\[,bandwidth_MBps\]"):
        read_region_table(path)
    path.write_text("region,latency_us,overhead_us\nsame_socket,1,-0.1\n")
    with pytest.raises(RegionTableError, match=r"t\.csv:2: region 'same_socket': overhead_us must be >= 0"):
        read_region_table(path)
    with pytest.raises(ModelError, match="knomial"):
        predict("bcast", "split_binary_tree", FOUR, TABLE, 4, params=P)


def _synthetic(truth: LogGP, algorithms: list[str], place_full: object, table: RegionTable, noise: float) -> list[Measured]:
    """What the model says at the true parameters, times 1 + N(0, noise): the fit must find the truth."""
    rng = np.random.default_rng(7)
    out = []
    for alg in algorithms:
        for n in range(2, 33):
            t = predict("bcast", alg, place_full.prefix(n), table, 4, params=truth).rank_mean_us
            out.append(Measured("bcast", alg, n, 4, t * (1 + noise * rng.standard_normal())))
    return out


def test_calibration_recovers_known_parameters_and_leaves_unidentified_ones_alone() -> None:
    topo = parse_synthetic("pack:2 l3:2 core:8 pu:1")
    table = RegionTable({"same_l3": 0.2, "same_socket": 0.35, "other_socket": 0.7})
    full = place(topo, 32)
    truth = LogGP(overhead_us=0.1, gap_us=0.15, level_us=0.25)
    exact = calibrate(_synthetic(truth, ["basic_linear", "binary_tree"], full, table, 0.0), full, table,
                      quantity="rank_mean")  # fmt: skip
    got = exact.params
    assert (got.overhead_us, got.gap_us, got.level_us) == pytest.approx((0.1, 0.15, 0.25), abs=1e-6)
    data = _synthetic(truth, ["basic_linear", "binary_tree", "chain"], full, table, 0.02)
    cal = calibrate(data, full, table, quantity="rank_mean")
    for p in cal.parameters:
        # With 2 % noise the values land within 5 % of the truth; the linearised CI is tight (±1-5 %) and,
        # the model being piecewise linear (max over edges), can miss the truth by about its own width. o is
        # the loosest: a hop costs λ whatever o (L = λ - 2o), so only when each sender is done shows it.
        assert p.fitted and p.value == pytest.approx(getattr(truth, p.name), rel=0.05), p.line()
        assert 0 < p.ci_high - p.ci_low < 0.15 * p.value, p.line()
    assert cal.median_abs_error < 0.03
    # A linear Bcast has no level: h is not determined, so it is not fitted (stays 0); g and o are.
    linear = calibrate([m for m in data if m.algorithm == "basic_linear"], full, table, quantity="rank_mean")
    fitted = {p.name: p for p in linear.parameters}
    assert not fitted["level_us"].fitted and linear.params.level_us == 0
    assert fitted["gap_us"].value == pytest.approx(truth.gap_us, rel=0.1)
    # Leave one algorithm out: the held-out chain, predicted from linear + tree, within 5 % at the median.
    cal2, pairs = predict_held_out(data, full, table, ("bcast", "chain"), quantity="rank_mean")
    assert cal2.points == 62 and len(pairs) == 31
    errors = sorted(abs(p - m.latency_us) / m.latency_us for m, p in pairs)
    assert errors[len(errors) // 2] < 0.05


def test_read_measured(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("collective,algorithm,np,bytes,latency_us\nBcast,chain,4,4,1.5\n")
    assert read_measured(path) == [Measured("bcast", "chain", 4, 4, 1.5)]
    for text, message in {
        "collective,algorithm,np,latency_us\n": r"m\.csv:1: header lacks bytes",
        "collective,algorithm,np,bytes,latency_us\nbcast,chain,four,4,1\n": r"m\.csv:2: np and bytes must be integers",
        "collective,algorithm,np,bytes,latency_us\nbcast,chain,1,4,1\n": r"m\.csv:2: need np >= 2",
        "collective,algorithm,np,bytes,latency_us\n": "no measurements after the header",
    }.items():
        path.write_text(text)
        with pytest.raises(MeasuredError, match=message):
            read_measured(path)


def test_mpich_scatter_allgather_bcast_is_a_binomial_scatter_then_the_allgather_steps() -> None:
    # MPICH's scatter tree on 4: 0 -> 2 (farthest first), 0 -> 1; 2 -> 3. One 1-byte chunk per rank
    # (ceil(4 / 4)), no bandwidth in the table: every edge costs its latency.
    # LogGP, L = λ - 2o (0 within a socket, 9 across): got2 = 0.5 + 9 + 0.5 = 10.0; got1 = 0.7 + 0 + 0.5 = 1.2;
    # got3 = 10.0 + 0.5 + 0 + 0.5 = 11.0 (rank 2 sends one message: o, no gap).
    # Ring: 3 steps of (0,1), (1,2), (2,3), (3,0), each as slow as a cross-socket pair: 3 x (0.5 + 9 + 0.5).
    ring = predict("bcast", "scatter_ring_allgather", FOUR, TABLE, 4, params=P)
    assert ring.completion_us == pytest.approx(11.0 + 30.0) and ring.rank_mean_us == ring.completion_us
    assert ring.shape == "loggp-scatter-allgather"
    # Recursive doubling: (0,1),(2,3) then (0,2),(1,3): 1 + 10.
    rd = predict("bcast", "scatter_recursive_doubling_allgather", FOUR, TABLE, 4, params=P)
    assert rd.completion_us == pytest.approx(11.0 + 11.0)
    # Latency only: scatter levels max(10, 1) + 1, then 3 x 10 (ring) or 1 + 10 (recursive doubling).
    assert latency_only("bcast", "scatter_ring_allgather", FOUR, TABLE, 4).completion_us == pytest.approx(41.0)
    assert latency_only("bcast", "scatter_recursive_doubling_allgather", FOUR, TABLE, 4).completion_us == (
        pytest.approx(22.0))


def test_mpich_tree_bcast_is_a_heap_ordered_binary_tree_and_pipelined_tree_cuts_8192_byte_chunks() -> None:
    from mpiatlas.models.collective_trees import kary_tree, mpich_kary_tree

    # MPICH's kary (heap order: s -> 2s+1, 2s+2) against Open MPI's level-numbered binary tree.
    assert mpich_kary_tree(5) == [[1, 2], [3, 4], [], [], []]
    assert kary_tree(5) == [[1, 2], [3], [4], [], []]
    five = place(parse_synthetic("pack:2 core:4 pu:1"), 5)  # ranks 0..3 on socket 0, rank 4 on socket 1
    # L = λ - 2o: 0 within a socket, 9 across. got1 = 0.5 + 0 + 0.5 = 1.0, got2 = 0.7 + 0.5 = 1.2; rank 1 sends
    # to 3 at 1.5 (got3 = 2.0) and, a gap later, to 4 at 1.7 (got4 = 1.7 + 9 + 0.5 = 11.2).
    r = predict("bcast", "tree", five, TABLE, 4, params=P)
    assert r.completion_us == pytest.approx(11.2)
    assert r.rank_mean_us == pytest.approx((0.7 + 1.7 + 1.2 + 2.0 + 11.2) / 5)  # sends done: 0.7, 1.7; data: 1.2, ..
    # Open MPI's binary_tree: rank 1 sends once (done 1.5), rank 2 forwards to 4 (done 1.7), got3 2.0, got4 11.2.
    assert predict("bcast", "binary_tree", five, TABLE, 4, params=P).rank_mean_us == pytest.approx(17.1 / 5)
    assert predict("bcast", "pipelined_tree", five, TABLE, 4, params=P) == r.__class__(
        "bcast", "pipelined_tree", 5, 4, r.completion_us, r.rank_mean_us, r.shape)  # one chunk: the same tree
    # 16384 B at 1000 MB/s (0.001 µs/B) over 0 -> 1, 2 within a socket: pipelined_tree sends 2 chunks of 8192 B.
    # First chunk: got1 = 0.5 + 8.192 + 0.5; the root's send to 2 leaves g + 8191·G = 8.391 after its first,
    # got2 = 0.5 + 8.391 + 8.192 + 0.5 = 17.583; then the root's link carries 2 x 8.192 µs per chunk:
    # 17.583 + 16.384 = 33.967, the root link's 4 x 8.192 µs plus o, g, o. Unsegmented (tree), the same
    # bytes over the same link: got2 = 0.5 + (0.2 + 16.383) + 16.384 + 0.5 = 33.967.
    bw = RegionTable({"same_socket": 1.0}, {"same_socket": 1000.0})
    three = place(parse_synthetic("pack:2 core:4 pu:1"), 3)
    assert predict("bcast", "pipelined_tree", three, bw, 16384, params=P).completion_us == pytest.approx(33.967)
    assert predict("bcast", "tree", three, bw, 16384, params=P).completion_us == pytest.approx(33.967)
    # Latency only (no o, g): the same trees, so usable by `mpiatlas predict` with a λ-only table.
    # Levels max(1, 1) then rank 1's max(1, 10): 11 (the rank mean by collective_regions' own convention).
    only = latency_only("bcast", "tree", five, TABLE, 4)
    assert (only.completion_us, only.rank_mean_us) == pytest.approx((11.0, 7.0))
    assert latency_only("bcast", "pipelined_tree", five, TABLE, 4).completion_us == pytest.approx(11.0)


def test_single_sends_match_the_loggp_kernels_round_trips() -> None:
    """o and g on single sends, against the loggp kernel's own measurements (tests/data/kernels, Intel MPI shm,
    4 B, 10 trials): the region table the kernel gives (λ = rtt/2, o = (o_s + o_r)/2, g) priced by the model.

    * A 3-rank pipeline in one region is a round trip: rank 1 receives one message and sends one, so it pays
      o, not g; the model gives exactly the kernel's PRTT(1, 0, s) = rtt. Charging g there as well would add
      0.10 µs, 25 % of rtt and far outside rtt's own trial spread (0.404..0.430 µs).
    * The kernel's o_s + o_r (0.27 µs) exceeds λ (0.21 µs): L = λ − 2o is negative (the kernel's own L is
      −0.06 µs), and a single message still costs λ, not 2o.
    * A linear Bcast of n + 1 ranks in one region (the root's n back-to-back sends) takes λ + (n − 1)·g, the
      kernel's burst PRTT(n, 0, s) less the reply's λ, n = its burst (32)."""
    import polars as pl

    from mpiatlas.parsers.loggp import parse_loggp_output

    trials = parse_loggp_output((Path(__file__).parent / "data/kernels/loggp_intelmpi_np2.txt").read_text())
    at4 = trials.filter(pl.col("bytes") == 4)
    med = {c: float(at4[c].median()) for c in ("rtt_usec", "prtt_burst_usec", "g_usec", "o_s_usec", "o_r_usec")}
    burst = int(at4["burst"][0])
    lam, o, g = med["rtt_usec"] / 2, (med["o_s_usec"] + med["o_r_usec"]) / 2, med["g_usec"]
    assert 2 * o > lam and g > float(at4["rtt_usec"].max()) - float(at4["rtt_usec"].min())
    node = parse_synthetic(f"pack:1 l3:1 core:{burst + 1} pu:1")
    table = RegionTable({"same_l3": lam}, overhead_us={"same_l3": o}, gap_us={"same_l3": g})
    pipeline = predict("bcast", "pipeline", place(node, 3), table, 4)
    assert pipeline.completion_us == pytest.approx(med["rtt_usec"], rel=1e-9)
    assert predict("bcast", "basic_linear", place(node, 2), table, 4).completion_us == pytest.approx(lam, rel=1e-9)
    linear = predict("bcast", "basic_linear", place(node, burst + 1), table, 4)
    burst_one_way = float((at4["prtt_burst_usec"] - at4["rtt_usec"] / 2).median())
    assert linear.completion_us == pytest.approx(burst_one_way, rel=0.02)


def _kernel_at(nbytes: int) -> dict[str, float]:
    """The loggp kernel's medians over its 10 trials at ``nbytes`` (tests/data/kernels, Intel MPI shm, this machine)."""
    import polars as pl

    from mpiatlas.parsers.loggp import parse_loggp_output

    trials = parse_loggp_output((Path(__file__).parent / "data/kernels/loggp_intelmpi_np2.txt").read_text())
    at = trials.filter(pl.col("bytes") == nbytes)
    assert at.height >= 5, f"no kernel trials at {nbytes} B"
    out = {c: float(at[c].median()) for c in ("rtt_usec", "g_usec", "o_s_usec", "o_r_usec")}
    out["burst"] = float(at["burst"][0])
    out["burst_one_way"] = float((at["prtt_burst_usec"] - at["rtt_usec"] / 2).median())
    return out


def test_back_to_back_sends_are_spaced_by_the_kernels_g_not_by_o() -> None:
    """The spacing of a rank's back-to-back sends (loggp._Edges.spacing, ``g + (m − 1)·G``) against the kernel's
    32-send burst, PRTT(32, 0, m) less the reply's λ, priced as a linear Bcast of 33 ranks in one region.

    * 4 B: the kernel's burst leaves its sends g = 0.102 µs apart though one MPI_Send alone takes o_s = 0.125 µs:
      the burst's g already holds the part of o that does not overlap. Spaced by g the model gives the burst
      within 2 %; textbook LogGP's ``max(g, o_s)`` over-prices it by 15 % or more (measured +21 %), so the model
      does not take the max.
    * 1024..4096 B: with G from the kernel's own round trips (rtt(4096) − rtt(4)) / 2 / 4092 (~10 GB/s), ``g +
      (m − 1)·G`` still under-prices the burst, by 1.3 to 2.2x (measured 1.4-1.9x: a burst's copies cost more per
      byte than one PingPong's); a constant g (G only on the wire, the model before) under-prices it 3x or more (3.4-6.1x)."""
    small, top = _kernel_at(4), _kernel_at(4096)
    lam, g, o_s = small["rtt_usec"] / 2, small["g_usec"], small["o_s_usec"]
    n = int(small["burst"])
    assert g < o_s  # the kernel's burst spacing is below one send's overhead
    node = parse_synthetic(f"pack:1 l3:1 core:{n + 1} pu:1")
    linear = place(node, n + 1)

    def burst(table: RegionTable, nbytes: int) -> float:
        return predict("bcast", "basic_linear", linear, table, nbytes).completion_us

    spaced_by_g = RegionTable({"same_l3": lam}, overhead_us={"same_l3": (o_s + small["o_r_usec"]) / 2}, gap_us={"same_l3": g})
    textbook = dataclasses.replace(spaced_by_g, gap_us={"same_l3": max(g, o_s)})
    assert burst(spaced_by_g, 4) == pytest.approx(small["burst_one_way"], rel=0.02)
    assert burst(textbook, 4) >= 1.15 * small["burst_one_way"]
    per_byte = (top["rtt_usec"] - small["rtt_usec"]) / 2 / 4092
    with_bw = dataclasses.replace(spaced_by_g, bandwidth_MBps={"same_l3": 1 / per_byte})
    for nbytes in (1024, 2048, 4096):
        measured = _kernel_at(nbytes)["burst_one_way"]
        constant_g = dataclasses.replace(spaced_by_g, latency_us={"same_l3": lam + nbytes * per_byte})
        assert 1.3 <= measured / burst(with_bw, nbytes) <= 2.2, nbytes
        assert measured / burst(constant_g, nbytes) >= 3.0, nbytes
