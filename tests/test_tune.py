"""mpiatlas tune: the decision on synthetic samples with known truth, each writer's exact text, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.cli import main
from mpiatlas.tuning import intelmpi_env, mpich_json, openmpi_rules
from mpiatlas.tuning.decide import Block, Point, SeriesDecision, SizeRange, TuneError, decide

SIZES = (512, 1024, 4096, 16384, 65536, 262144)


def write_samples(root: Path, speed, *, reps: int = 10, nps=(2, 4), stack: str = "openmpi", kind: str = "openmpi",
                  version: str = "4.1.4", bench: str = "Bcast", noise: float = 0.01, algorithms=None) -> Path:
    """A results dir whose t_usec = 10 (1 + b/1 KiB) x speed(np, b)[alg] x (1 + noise N(0,1))."""
    rng = np.random.default_rng(1)
    rows = []
    for np_ in nps:
        for b in SIZES:
            for alg, factor in speed(np_, b).items():
                for r in range(reps):
                    t = 10.0 * (1 + b / 1024) * factor * (1 + noise * rng.standard_normal())
                    rows.append({"stack": stack, "stack_kind": kind, "stack_version": version, "transport": "shm",
                                 "mapping": "core", "np": np_, "benchmark": bench, "algorithm": alg, "bytes": b,
                                 "t_usec": t, "status": "ok", "bandwidth_MBps": None, "rep": r,
                                 "cell_quality": "ok", "cell": f"c/{np_}/{alg}/rep{r}", "cell_status": "ok"})
    tidy = root / "tidy"
    tidy.mkdir(parents=True)
    pl.DataFrame(rows, schema_overrides={"np": pl.Int32, "bandwidth_MBps": pl.Float64}).write_parquet(
        tidy / "imb_samples.parquet")
    return root


def test_twenty_percent_faster_algorithm_is_chosen_over_a_merged_range(tmp_path: Path) -> None:
    # binomial 20 % faster at 1 KiB..64 KiB (slower elsewhere); chain 2 % faster everywhere.
    res = write_samples(tmp_path / "r", lambda p, b: {"default": 1.0, "chain": 0.98,
                                                      "binomial": 0.8 if 1024 <= b <= 65536 else 1.1})
    [series] = decide(res).series
    assert series.collective == "bcast" and series.version == "4.1.4"
    # Both process counts have the same ranges: one block, P 2..4.
    [block] = series.blocks
    assert (block.p_lo, block.p_hi, block.nps) == (2, 4, (2, 4))
    assert [(r.lo, r.hi, r.algorithm) for r in block.ranges] == [
        (512, 1023, "default"), (1024, 262143, "binomial"), (262144, 262144, "default")]
    won = [p for p in series.points if p.algorithm == "binomial"]
    assert len(won) == 8 and all(0.18 < p.gain < 0.22 and p.ci_high < 1 for p in won)
    # The 2 % algorithm is the fastest by median at 512 B and 256 KiB, but not chosen.
    lost = [p for p in series.points if p.bytes in (512, 262144)]
    assert {p.candidate for p in lost} == {"chain"} and all(p.algorithm == "default" for p in lost)
    assert all("below the minimum 5%" in p.reason for p in lost)


def test_a_candidate_whose_ci_includes_one_is_not_chosen(tmp_path: Path) -> None:
    # 10 % faster by median but 40 % noise on 10 repetitions: the CI of the ratio reaches 1.
    res = write_samples(tmp_path / "r", lambda p, b: {"default": 1.0, "binomial": 0.9}, noise=0.4, nps=(2,))
    [series] = decide(res).series
    # Points at least 5 % faster by median whose CI reaches 1 keep the default...
    wide = [p for p in series.points if p.candidate == "binomial" and p.gain >= 0.05 and p.ci_high >= 1]
    assert len(wide) >= 3 and all(p.algorithm == "default" for p in wide)
    assert all("does not lie below 1" in p.reason for p in wide)
    # ...and every choice made has its CI below 1.
    assert all(p.ci_high < 1 and p.gain >= 0.05 for p in series.points if p.algorithm != "default")


def test_too_few_repetitions_keep_the_default(tmp_path: Path) -> None:
    res = write_samples(tmp_path / "r", lambda p, b: {"default": 1.0, "binomial": 0.5}, reps=3, nps=(2,))
    [series] = decide(res).series
    assert not series.tuned and all("too few repetitions" in p.reason for p in series.points)


def test_no_default_cells_is_a_clear_error(tmp_path: Path) -> None:
    res = write_samples(tmp_path / "r", lambda p, b: {"binomial": 1.0, "chain": 0.9})
    with pytest.raises(TuneError, match=r"no cells with algorithm 'default' for openmpi/shm/Bcast"):
        decide(res)
    assert main(["tune", str(res), "--out", str(tmp_path / "o")]) == 2


# -- writers on a small hand-made decision ------------------------------------------------------


def _pt(np_: int, b: int, alg: str) -> Point:
    return Point(np_, b, alg, alg, 0.8, 0.78, 0.82, 10, 10, "x")


def _series(kind: str, version: str, coll: str, alg: str) -> SeriesDecision:
    ranges = (SizeRange(0, 1023, "default", (_pt(2, 0, "default"),)),
              SizeRange(1024, 65535, alg, (_pt(2, 1024, alg),)),
              SizeRange(65536, 65536, "default", (_pt(2, 65536, "default"),)))
    return SeriesDecision(kind, kind, version, "shm", coll, coll.capitalize(), [],
                          [Block(2, 3, (2,), ranges)])


def test_openmpi_rules_text() -> None:
    text = openmpi_rules.rules_text([_series("openmpi", "4.1.4", "bcast", "binomial")])
    assert text == (
        "# mpiatlas tune: coll_tuned dynamic rules for openmpi over shm\n"
        "1  # collectives\n7  # bcast\n3  # communicator sizes\n"
        "0 1  # from comm size 0: message sizes\n0 0 0 0  # default\n"
        "2 3  # from comm size 2: message sizes\n0 0 0 0  # default\n1024 6 0 0  # binomial\n65536 0 0 0  # default\n"
        "4 1  # from comm size 4: message sizes\n0 0 0 0  # default\n")


def test_openmpi_allgather_thresholds_scale_with_comm_size() -> None:
    text = openmpi_rules.rules_text([_series("openmpi", "5.0.11", "allgather", "ring")])
    # allgather looks up count x type size x P: 1 KiB per rank on 2 ranks is 2048.
    assert "2048 4 0 0  # ring\n131072 0 0 0  # default\n" in text and text.splitlines()[2] == "0  # allgather"


def test_intelmpi_env_text() -> None:
    text = intelmpi_env.env_text([_series("intelmpi", "2021.16", "bcast", "id3")])
    assert text.splitlines()[1] == 'I_MPI_ADJUST_BCAST="3:1024-65535@2-3"'


def test_mpich_json_wraps_the_builtin_subtree() -> None:
    orig = {"avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_binomial": {}}}
    base = {"collective=bcast": {"comm_type=intra": orig, "comm_type=inter": {"algorithm=X": {}}},
            "collective=barrier": {"comm_type=intra": {"algorithm=MPIR_Barrier_intra_k_dissemination": {}}}}
    tree = json.loads(mpich_json.json_text([_series("mpich", "5.0.2", "bcast", "scatter_ring_allgather")], base))
    assert tree["collective=bcast"]["comm_type=intra"] == {
        "comm_size<=1": orig,
        "comm_size<=3": {"avg_msg_size<=1023": orig,
                         "avg_msg_size<=65535": {"algorithm=MPIR_Bcast_intra_scatter_ring_allgather": {}},
                         "avg_msg_size<=65536": orig, "avg_msg_size=any": orig},
        "comm_size=any": orig}
    assert tree["collective=barrier"] == base["collective=barrier"]
    # Device collectives stay on: no MPIR_CVAR_DEVICE_COLLECTIVES / MPIR_CVAR_<COLL>_DEVICE_COLLECTIVE.
    assert mpich_json.env_vars("/f.json", "/f.ch4.json") == {
        "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": "/f.json",
        "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE": "/f.ch4.json"}


def test_mpich_ch4_tree_hands_only_the_tuned_ranges_to_mpir() -> None:
    """The CH4 (composition) tree: the tuned range ends in a condition that never holds and has no
    failure path (no composition: MPID calls MPIR_<Coll>_impl); every other size keeps the compositions."""
    orig = {"comm_hierarchy=parent": {"composition=MPIDI_Bcast_intra_composition_alpha": {}},
            "comm_hierarchy=any": {"composition=MPIDI_Bcast_intra_composition_gamma": {}}}
    base = {"collective=bcast": {"comm_type=intra": orig},
            "collective=barrier": {"comm_type=intra": {"composition=MPIDI_Barrier_intra_composition_beta": {}}}}
    series = [_series("mpich", "5.0.2", "bcast", "binomial"), _series("mpich", "5.0.2", "alltoall", "pairwise")]
    tree = json.loads(mpich_json.json_text(series, base, level="ch4"))
    none = {"comm_type=inter": orig}
    assert tree["collective=bcast"]["comm_type=intra"] == {
        "comm_size<=1": orig,
        "comm_size<=3": {"avg_msg_size<=1023": orig, "avg_msg_size<=65535": none,
                         "avg_msg_size<=65536": orig, "avg_msg_size=any": orig},
        "comm_size=any": orig}
    # A collective the CH4 tree does not name (alltoall here) already goes to MPIR: left out, no error.
    assert "collective=alltoall" not in tree and tree["collective=barrier"] == base["collective=barrier"]


def test_unknown_algorithm_names_the_series() -> None:
    with pytest.raises(TuneError, match=r"openmpi/shm/Bcast: .*unknown bcast algorithm 'warp'"):
        openmpi_rules.rules_text([_series("openmpi", "4.1.4", "bcast", "warp")])


def test_cli_writes_rules_and_tuning_md(tmp_path: Path) -> None:
    res = write_samples(tmp_path / "r", lambda p, b: {"default": 1.0, "binomial": 0.8 if 1024 <= b <= 65536 else 1.1})
    out = tmp_path / "out"
    assert main(["tune", str(res), "--out", str(out), "--min-gain", "5%"]) == 0
    assert "1024 6 0 0  # binomial" in (out / "openmpi.shm.rules").read_text()
    md = (out / "tuning.md").read_text()
    assert "| 1 KiB–262143 B | 2–4 | binomial |" in md and "coll_tuned_dynamic_rules_filename" in md


def test_mpich_builtin_tree_that_is_not_a_csel_tree_names_the_key(tmp_path: Path) -> None:
    """A csel tree is objects all the way down: an embedded tree with any other value is refused at
    the library, naming it and the key path, before a tuning file is built on it."""
    lib = tmp_path / "libmpi.so"
    good = b'{"collective=bcast": {"comm_type=intra": {"algorithm=MPIR_Bcast_intra_binomial": {}}}}'
    lib.write_bytes(b"\x7fELF\0" + good + b"\0" + b'{"collective=barrier": {"comm_type=intra": 3}}\0')
    with pytest.raises(TuneError, match=r"libmpi\.so: embedded tree at byte \d+: "
                                        r"collective=barrier/comm_type=intra: expected a JSON object.*got int"):
        mpich_json.builtin_trees(lib)
    lib.write_bytes(b"\x7fELF\0" + good + b"\0")
    with pytest.raises(TuneError, match=r"no built-in CH4 composition collective-selection JSON"):
        mpich_json.builtin_trees(lib)  # the MPIR tree alone: parsed, and the CH4 one is missing
