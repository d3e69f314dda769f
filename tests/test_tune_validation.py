"""mpiatlas tune --validate, without MPI: the generated campaign, the per-cell verdicts, the coll kernel
samples and the report's Tuning section, on synthetic data with known truth."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from mpiatlas.matrix.config import validate as validate_config
from mpiatlas.programs import expand
from mpiatlas.report.build import build_report
from mpiatlas.tuning import samples, validation
from mpiatlas.tuning.decide import Block, Point, SeriesDecision, SizeRange, TuneError, decide
from mpiatlas.tuning.validation_config import file_env, knob_set, untuned_points, validation_config

BASE = {"campaign": {"name": "tune", "repetitions": 5, "timeout_s": 60, "stacks_dir": ".stacks"},
        "stacks": {"openmpi": {"kind": "openmpi", "transports": ["ob1-sm"],
                               "algorithms": {"Allreduce": ["default", "ring", "basic_linear"]}},
                   "intelmpi": {"kind": "intelmpi", "transports": ["shm"],
                                "algorithms": {"Allreduce": ["default", "id5", "id6"]}}},
        "mappings": ["core"], "processes": [2],
        "imb": {"benchmarks": ["Allreduce"], "msglog": [10, 20], "time_s": 0.1},
        "kernels": {"stacks": {"openmpi": ["ob1-sm"]},
                    "coll": {"collectives": ["Allreduce"], "msglog": [10, 20], "processes": [2]}}}


def _series(stack: str, kind: str, version: str, transport: str, alg: str, sizes: tuple[int, ...],
            source: str = samples.IMB, nps: tuple[int, ...] = (2,)) -> SeriesDecision:
    """A decision choosing ``alg`` at ``sizes`` (20 % claimed gain) and the default at 512 B."""
    pts = [Point(p, b, alg, alg, 0.8, 0.7, 0.9, 10, 10, "x") for p in nps for b in sizes]
    pts += [Point(p, 512, "default", "default", None, None, None, 10, 10, "x") for p in nps]
    ranges = (SizeRange(512, sizes[0] - 1, "default", ()), SizeRange(sizes[0], sizes[-1], alg, ()))
    return SeriesDecision(stack, kind, version, transport, "allreduce", "Allreduce", pts,
                          [Block(nps[0], nps[-1], nps, ranges)], source)


def test_the_validation_campaign_is_the_tuned_cells_three_ways(tmp_path: Path) -> None:
    ompi = _series("openmpi", "openmpi", "5.0.11", "ob1-sm", "ring", (65536, 262144), samples.KERNEL)
    impi = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    (tmp_path / "openmpi.ob1-sm.rules").write_text("rules\n")
    files = {("openmpi", "ob1-sm"): ["openmpi.ob1-sm.rules"], ("intelmpi", "shm"): ["intelmpi.shm.env"]}
    config = validation_config(BASE, [ompi, impi], files, tmp_path)
    assert config["campaign"]["name"] == "tune-validate" and config["campaign"]["repetitions"] == 5
    # The exported file as a knob set, applied as a user would: MCA parameters as OMPI_MCA_*, Intel's values.
    assert config["knobs"] == {
        "tuned-openmpi-ob1-sm": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                 "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(tmp_path / "openmpi.ob1-sm.rules")},
        "tuned-intelmpi-shm": {"I_MPI_ADJUST_ALLREDUCE": "5:16384-16384@2-2"}}
    assert config["stacks"]["openmpi"]["algorithms"] == {"Allreduce": ["default", "ring"]}
    assert config["stacks"]["openmpi"]["knobs"] == ["none", "tuned-openmpi-ob1-sm"]
    # Tuned 16 KiB .. 256 KiB and the untuned 512 B sample: log2 9..18, two warm-up sizes below (7);
    # the Open MPI series runs by the coll kernel, Intel's by IMB.
    assert config["imb"]["msglog"] == [7, 18] and config["imb"]["stacks"] == ["intelmpi"]
    assert config["kernels"]["stacks"] == {"openmpi": ["ob1-sm"]}
    assert config["kernels"]["coll"]["forced_algorithms"] == ["openmpi"]
    # The config is a valid campaign whose cells are default/winner x none/file x 5 repetitions per stack.
    cells = expand(validate_config(json.loads(json.dumps(config))))
    by_stack = {s: [c for c in cells if c.stack == s] for s in ("openmpi", "intelmpi")}
    assert len(by_stack["intelmpi"]) == 2 * 2 * 5 and {c.kind for c in by_stack["intelmpi"]} == {"imb"}
    assert len(by_stack["openmpi"]) == 2 * 2 * 5 and {c.kind for c in by_stack["openmpi"]} == {"kernel"}
    assert {c.knobs for c in cells} == {"", "tuned-openmpi-ob1-sm", "tuned-intelmpi-shm"}
    text = yaml.safe_dump(config)
    assert "ring" in text and "basic_linear" not in text


def test_an_mpich_validation_brings_its_imb_provider_without_cells(tmp_path: Path) -> None:
    """MPICH runs Intel MPI's IMB (MPICH ABI): the provider stack comes along, with no cells of its own."""
    campaign = {**BASE, "stacks": {**BASE["stacks"], "mpich": {"kind": "mpich", "transports": ["default", "ofi-tcp"],
                                                               "algorithms": {"Bcast": ["default", "binomial"]}}}}
    s = _series("mpich", "mpich", "5.0.2", "default", "binomial", (16384,))
    s = SeriesDecision(s.stack, s.kind, s.version, s.transport, "bcast", "Bcast", s.points, s.blocks, s.source)
    files = {("mpich", "default"): ["mpich.default.json", "mpich.default.ch4.json", "mpich.default.env"]}
    config = validation_config(campaign, [s], files, tmp_path)
    assert config["knobs"] == {"tuned-mpich-default": {
        "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(tmp_path / "mpich.default.json"),
        "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE": str(tmp_path / "mpich.default.ch4.json")}}
    assert sorted(config["stacks"]) == ["intelmpi", "mpich"] and config["imb"]["stacks"] == ["mpich"]
    assert config["stacks"]["intelmpi"]["algorithms"] == {} and config["stacks"]["intelmpi"]["transports"] == ["shm"]
    cells = expand(validate_config(json.loads(json.dumps(config))))
    # default/binomial x none/file x 5 repetitions, all MPICH's.
    assert len(cells) == 2 * 2 * 5 and {c.stack for c in cells} == {"mpich"}


def test_an_intel_value_with_several_presets_cannot_be_a_knob_set(tmp_path: Path) -> None:
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    two = SeriesDecision(s.stack, s.kind, s.version, s.transport, s.collective, s.benchmark, s.points,
                         [Block(2, 2, (2,), (SizeRange(1024, 2047, "id6", ()), SizeRange(16384, 16384, "id5", ())))])
    with pytest.raises(TuneError, match=r"I_MPI_ADJUST_ALLREDUCE: .*';'.*cannot be a knob set"):
        file_env([two], tmp_path, ["intelmpi.shm.env"])


def _validation_samples(root: Path, exported: float, *, reps: int = 8, noise: float = 0.02,
                        untuned: float = 1.0) -> Path:
    """Validation results of one tuned point (Intel MPI Allreduce 16 KiB, id5): default 10 µs, forced
    winner 8 µs, the exported file ``exported`` µs; at the untuned 512 B 3 µs, x ``untuned`` with the file."""
    rng = np.random.default_rng(3)
    rows = []
    ways = [("default", "", 10.0), ("id5", "", 8.0), ("default", knob_set("intelmpi", "shm"), exported)]
    for alg, knobs, t in ways:
        for b, scale in ((512, 1.0), (16384, 1.0)):
            for r in range(reps):
                base = t if b == 16384 else 3.0 * (untuned if knobs else 1.0)
                rows.append({"stack": "intelmpi", "stack_kind": "intelmpi", "stack_version": "2021.16",
                             "transport": "shm", "mapping": "core", "np": 2, "benchmark": "Allreduce",
                             "algorithm": alg, "knobs": knobs, "bytes": b, "status": "ok", "bandwidth_MBps": None,
                             "t_usec": base * scale * (1 + noise * rng.standard_normal()), "rep": r,
                             "cell_quality": "ok", "cell": f"imb/intelmpi/shm/core/np2/Allreduce/{alg}/{knobs}/rep{r}", "cell_status": "ok"})
    tidy = root / "tidy"
    tidy.mkdir(parents=True)
    pl.DataFrame(rows, schema_overrides={"bandwidth_MBps": pl.Float64}).write_parquet(tidy / "imb_samples.parquet")
    return root


def test_the_file_that_runs_the_winner_passes(tmp_path: Path) -> None:
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    [c] = validation.check(_validation_samples(tmp_path / "v", exported=8.0), [s])
    assert (c.np, c.bytes, c.algorithm) == (2, 16384, "id5") and c.n == (8, 8, 8)
    assert c.matches and c.beats and c.passed
    assert 0.18 < c.gain < 0.22 and c.gain_ci[0] > 0.1
    assert c.match_ci[0] <= 1 <= c.match_ci[1]


def test_a_file_naming_a_slow_algorithm_fails(tmp_path: Path) -> None:
    # The file ran something 30 % slower than the default: neither the winner's time nor a gain.
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    [c] = validation.check(_validation_samples(tmp_path / "v", exported=13.0), [s])
    assert not c.matches and not c.beats and not c.passed
    assert c.match_ci[0] > 1.5 and c.gain < -0.25
    assert "the file did not run the winner" in c.reason and "not significantly faster" in c.reason
    assert validation.summary([c])["passed"] == 0


def test_untuned_sizes_are_sampled_around_and_between_the_tuned_ranges() -> None:
    # P=2: default 512 B..2 KiB, id5 4 KiB..8 KiB, default 16 KiB, id5 32 KiB, default 64 KiB..1 MiB;
    # P=4 all default (not a tuned P: not sampled).
    algs = {512: "default", 1024: "default", 2048: "default", 4096: "id5", 8192: "id5", 16384: "default",
            32768: "id5", 65536: "default", 262144: "default", 1048576: "default"}
    pts = [Point(2, b, a, a, 0.8, 0.7, 0.9, 10, 10, "x") for b, a in algs.items()]
    pts += [Point(4, b, "default", "default", None, None, None, 10, 10, "x") for b in algs]
    s = SeriesDecision("intelmpi", "intelmpi", "2021.16", "shm", "allreduce", "Allreduce", pts, [])
    assert untuned_points(s) == [(2, 512), (2, 2048), (2, 16384), (2, 65536), (2, 1048576)]


def test_untuned_sizes_the_file_leaves_alone_pass(tmp_path: Path) -> None:
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    results = _validation_samples(tmp_path / "v", exported=8.0)
    [u] = validation.check_untuned(results, [s])
    assert (u.np, u.bytes, u.n) == (2, 512, (8, 8)) and u.passed and not u.slower
    assert u.ratio_ci[0] <= 1 <= u.ratio_ci[1]
    summary = validation.summary(validation.check(results, [s]), [u])
    assert summary["ok"] and summary["untuned"] == {"cells": 1, "passed": 1, "failed": [], "tolerance": 0.05}


def test_a_file_that_slows_an_untuned_size_fails(tmp_path: Path) -> None:
    # The tuned cell is fine, but the file makes 512 B 30 % slower: the validation fails.
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    results = _validation_samples(tmp_path / "v", exported=8.0, untuned=1.3)
    [u] = validation.check_untuned(results, [s])
    assert u.slower and not u.passed and u.ratio_ci[0] > 1.2 and "significantly slower" in u.reason
    summary = validation.summary(validation.check(results, [s]), [u])
    assert summary["passed"] == summary["cells"] == 1 and not summary["ok"] and len(summary["untuned"]["failed"]) == 1


def test_a_slowdown_within_the_tolerance_passes(tmp_path: Path) -> None:
    # 2 % slower with 0.2 % noise: significant (CI above 1) but within 1 + 5 %: not a failure.
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    [u] = validation.check_untuned(_validation_samples(tmp_path / "v", exported=8.0, untuned=1.02, noise=0.002), [s])
    assert 1 < u.ratio_ci[0] < 1.05 and u.passed


def test_too_few_validation_repetitions_fail(tmp_path: Path) -> None:
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    results = _validation_samples(tmp_path / "v", exported=8.0, reps=3)
    [c] = validation.check(results, [s])
    assert not c.passed and "too few repetitions" in c.reason
    [u] = validation.check_untuned(results, [s])
    assert not u.passed and "too few repetitions" in u.reason


def test_coll_kernel_rows_are_decided_on_rank_zero(tmp_path: Path) -> None:
    """A stack without IMB: the coll kernel's rank-0 t_avg_usec per repetition is the sample."""
    rng = np.random.default_rng(2)
    rows = []
    for alg, factor in (("default", 1.0), ("ring", 0.7)):
        for r in range(8):
            for rank in range(2):
                for b in (1024, 65536):
                    t = 10.0 * (factor if b == 65536 else 1.0) * (1 + 0.01 * rng.standard_normal())
                    rows.append({"kernel": "coll", "rank": rank, "collective": "allreduce", "bytes": b,
                                 # Only rank 0 carries the average; the other rank's row must not count.
                                 "t_avg_usec": t if rank == 0 else None, "t_usec": 99.0, "valid": True,
                                 "cell_quality": "ok", "cell": f"kernel/openmpi/ob1-sm/core/np2/coll/x-{alg}/rep{r}", "stack": "openmpi",
                                 "stack_kind": "openmpi", "stack_version": "Open MPI v5.0.11", "transport": "ob1-sm",
                                 "mapping": "core", "np": 2, "knobs": "", "rep": r, "cell_status": "ok",
                                 "algorithm": alg})
    tidy = tmp_path / "r" / "tidy"
    tidy.mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(tidy / "kernel_coll.parquet")
    pl.DataFrame().write_parquet(tidy / "imb_samples.parquet")  # a campaign without IMB cells
    [series] = decide(tmp_path / "r").series
    assert series.source == samples.KERNEL and series.benchmark == "Allreduce" and series.version == "5.0.11"
    assert [(p.bytes, p.algorithm) for p in series.points] == [(1024, "default"), (65536, "ring")]
    [won] = [p for p in series.points if p.algorithm == "ring"]
    assert 0.28 < won.gain < 0.32 and won.n_default == 8


def test_report_tuning_section_embeds_the_files(tmp_path: Path) -> None:
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    s = _series("intelmpi", "intelmpi", "2021.16", "shm", "id5", (16384,))
    from dataclasses import asdict

    (tuning / "decision.json").write_text(json.dumps({"source": "results/x", "min_gain": 0.05,
                                                      "series": [asdict(s)]}, default=str))
    env_text = 'I_MPI_ADJUST_ALLREDUCE="5:16384-16384@2-2"\n'
    (tuning / "intelmpi.shm.env").write_text(env_text)
    results = _validation_samples(tmp_path / "v", exported=8.0, untuned=1.3)
    checks, untuned = validation.check(results, [s]), validation.check_untuned(results, [s])
    (tuning / "validation.json").write_text(json.dumps(
        {"campaign": "results/x-validate", "summary": validation.summary(checks, untuned),
         "evidence": {"intelmpi/shm": "echo"}, "cells": [{**asdict(c), "passed": c.passed} for c in checks],
         "untuned": [{**asdict(c), "passed": c.passed} for c in untuned]}, default=str))
    out = build_report(None, None, tmp_path / "report.html", tuning=tuning)
    html = out.read_text()
    assert 'id="tuning"' in html and "1 of 1 tuned cells pass" in html
    # The untuned 512 B, 30 % slower with the file: counted and flagged.
    assert "Untuned sizes: 0 of 1 sampled sizes" in html and "above 1.05" in html
    [href] = re.findall(r'download="intelmpi.shm.env" href="data:text/plain;base64,([^"]+)"', html)
    assert base64.b64decode(href).decode() == env_text
    # Without --tuning there is no section.
    assert 'id="tuning"' not in build_report(None, None, tmp_path / "plain.html").read_text()
