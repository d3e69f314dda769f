"""Kernel sweeps (issue #14, part 3): every matsum/jacobi knob takes a list, each combination is
its own variant group (the id's algorithm segment), explicit process grids are validated, single
values keep today's ids, and the models and report sections keep the values apart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema.core import load_schema

from conftest import REPO
from mpiatlas.models.fit_records import hockney_records
from mpiatlas.matrix.config import ConfigError, load, validate
from mpiatlas.matrix.kernel_sweeps import group_grid, jacobi_problems, jacobi_variants, kernel_sweep_problems, sizes
from mpiatlas.models.kernel_grids import matsum_grids
from mpiatlas.models.kernel_records import GridComparison
from mpiatlas.models.kernels import fit_jacobi, fit_kernels, fit_matsum
from mpiatlas.programs import cell_spec, cells_of_kind
from test_report import _specs

TINY = REPO / "config" / "test" / "tiny.yaml"
HEAD = {"label": "impi/shm/core", "stack": "impi", "transport": "shm", "mapping": "core", "cell_status": "ok"}


def tiny() -> dict[str, Any]:
    return yaml.safe_load(TINY.read_text())


def groups(config: dict[str, Any], kernel: str) -> set[tuple[str, int, int]]:
    """(variant group, P, threads) of every cell of ``kernel``."""
    return {(c.variant, c.np, c.threads) for c in cells_of_kind(config, "kernel") if c.kernel == kernel}


def args_of(config: dict[str, Any], kernel: str, group: str) -> list[str]:
    cell = next(c for c in cells_of_kind(config, "kernel") if c.kernel == kernel and c.variant == group)
    return cell_spec(config, cell)["kernel"]["args"]


# -- single values keep today's ids --------------------------------------------------------------


@pytest.mark.parametrize(("config", "matsum", "jacobi"), [
    ("config/test/tiny.yaml", {"t1-slab"}, {"weak-L16-t1", "weak-L16-t2"}),
    ("config/full.yaml", {"t1-slab"}, {"weak-L48-t1", "weak-L48-t2"}),
])
def test_configs_without_sweeps_keep_their_groups(config: str, matsum: set[str], jacobi: set[str]) -> None:
    loaded = load(REPO / config)
    assert {g for g, _, _ in groups(loaded, "matsum")} == matsum
    assert {g for g, _, _ in groups(loaded, "jacobi")} == jacobi


def test_a_one_value_list_is_the_single_value() -> None:
    config = tiny()
    config["kernels"]["matsum"]["dims"] = [[96, 40, 40]]
    config["kernels"]["jacobi"]["L"] = [16]
    config = validate(config)
    assert groups(config, "matsum") == {("t1-slab", p, 1) for p in (1, 2, 3)}
    assert {g for g, _, _ in groups(config, "jacobi")} == {"weak-L16-t1", "weak-L16-t2"}
    assert args_of(config, "matsum", "t1-slab")[:6] == ["--dims", "96,40,40", "--topo", "1", "--dist", "slab"]


# -- matsum ----------------------------------------------------------------------------------------


def test_matsum_dims_and_grids_are_groups_with_their_own_argv() -> None:
    config = tiny()
    config["kernels"]["matsum"].update(dims=[[96, 40, 40], [40, 96, 40]], procdims=[[2, 1], [1, 2]],
                                       dist=["slab", "block"])
    config = validate(config)
    # P = 2 has explicit grids: they replace MPI_Dims_create's there; P = 1, 3 keep it
    assert groups(config, "matsum") == {
        (f"t1-slab+block-d{d}", p, 1) for d in ("96x40x40", "40x96x40") for p in (1, 3)} | {
        (f"t2-slab+block-g{g}-d{d}", 2, 1) for d in ("96x40x40", "40x96x40") for g in ("2x1", "1x2")}
    assert args_of(config, "matsum", "t2-slab+block-g1x2-d40x96x40") == [
        "--dims", "40,96,40", "--topo", "2", "--dist", "slab,block", "--procdims", "1,2",
        "--iterations", "5", "--warmup", "1"]
    assert args_of(config, "matsum", "t1-slab+block-d96x40x40")[:2] == ["--dims", "96,40,40"]
    assert group_grid("t2-slab+block-g1x2-d40x96x40") == (1, 2) and group_grid("t1-slab+block-d96x40x40") is None


def test_matsum_three_axis_grids_and_their_ids() -> None:
    config = tiny()
    config["kernels"]["matsum"].update(processes=[24], procdims=[[24, 1], [12, 2], [6, 4], [3, 4, 2]])
    config = validate(config)
    ids = {c.id for c in cells_of_kind(config, "kernel") if c.kernel == "matsum"}
    assert "kernel/intelmpi/shm/core/np24/matsum/t3-slab-g3x4x2/rep0" in ids
    assert {g for g, _, _ in groups(config, "matsum")} == {"t2-slab-g24x1", "t2-slab-g12x2", "t2-slab-g6x4",
                                                           "t3-slab-g3x4x2"}


def test_a_grid_whose_product_is_not_a_process_count_is_refused_naming_key_grid_and_p() -> None:
    config = tiny()
    config["kernels"]["matsum"]["procdims"] = [[2, 1], [3, 2]]
    with pytest.raises(ConfigError) as err:
        cells_of_kind(validate(config), "kernel")
    text = str(err.value)
    assert "kernels.matsum.procdims.1" in text and "[3, 2]" in text and "P = 3·2 = 6" in text
    assert "kernels.matsum.processes [1, 2, 3]" in text and "procdims.0" not in text


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("dims", [[96, 40]], "kernels.matsum.dims"),
    ("procdims", [[2, 1, 1, 1]], "kernels.matsum.procdims.0"),
    ("procdims", [[0, 2]], "kernels.matsum.procdims.0.0"),
    ("procdims", [], "kernels.matsum.procdims"),
])
def test_the_schema_names_bad_matsum_sweeps(key: str, value: Any, expected: str) -> None:
    config = tiny()
    config["kernels"]["matsum"][key] = value
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        validate(config, "sweep.yaml")


# -- jacobi ----------------------------------------------------------------------------------------


def test_jacobi_sizes_grids_and_hybrid_cores() -> None:
    config = tiny()
    config["kernels"]["jacobi"].update(L=[16, [32, 16, 16]], processes=[2], procdims=[[2, 1, 1], [1, 2, 1]],
                                       hybrid={"cores": [2]})
    config = validate(config)
    found = groups(config, "jacobi")
    # hybrid.cores 2: 1 × 2 (hybrid) and 2 × 1 (pure, which the explicit grids replace at P = 2)
    assert found == {(f"weak-L{s}-t1-g{g}", 2, 1) for s in ("16", "32x16x16") for g in ("2x1x1", "1x2x1")} | {
        (f"weak-L{s}-t2", 1, 2) for s in ("16", "32x16x16")}
    assert args_of(config, "jacobi", "weak-L32x16x16-t1-g1x2x1") == [
        "--mode", "weak", "--L", "32,16,16", "--threads", "1", "--check", "--procdims", "1,2,1",
        "--iterations", "20", "--warmup", "5"]


def test_hybrid_cores_gives_every_ranks_times_threads_pair() -> None:
    config = tiny()
    config["kernels"]["jacobi"].update(processes=[1], hybrid={"cores": [4]})
    found = groups(validate(config), "jacobi")
    assert {(p, t) for _, p, t in found} == {(1, 1), (4, 1), (2, 2), (1, 4)}
    assert all(p * t == 4 for _, p, t in found if (p, t) != (1, 1))


def test_a_flat_list_of_three_sizes_stays_one_triple() -> None:
    # The schema always read L: [a, b, c] as one size per axis: a sweep of three cubes is written as triples.
    assert sizes([16, 24, 32]) == [(16, 24, 32)]
    assert sizes([16, 24]) == [(16, 16, 16), (24, 24, 24)]
    assert sizes([[16, 16, 16], [24, 24, 24], 32]) == [(16, 16, 16), (24, 24, 24), (32, 32, 32)]
    config = tiny()
    config["kernels"]["jacobi"]["L"] = [16, 24, 32]
    assert {g for g, _, _ in groups(validate(config), "jacobi")} == {"weak-L16x24x32-t1", "weak-L16x24x32-t2"}


def test_jacobi_mode_list_gives_both_modes_their_sizes() -> None:
    block = {"mode": ["weak", "strong"], "L": [16, 24], "N": 48, "processes": [1, 2]}
    assert jacobi_problems(block) == []
    assert [(v.group, v.counts) for v in jacobi_variants(block)] == [
        ("weak-L16-t1", (1, 2)), ("weak-L24-t1", (1, 2)), ("strong-N48-t1", (1, 2))]


@pytest.mark.parametrize(("block", "expected"), [
    ({"mode": ["weak", "strong"], "L": 16, "processes": [2]}, "kernels.jacobi: mode 'strong' needs N"),
    ({"mode": "weak", "L": 16, "N": 32, "processes": [2]}, "kernels.jacobi.N: not used"),
    ({"mode": "weak", "L": 16, "processes": [2], "procdims": [[2, 2, 1]]},
     "kernels.jacobi.procdims.0: grid [2, 2, 1] runs at P = 2·2·1 = 4 processes"),
    ({"mode": "strong", "N": [2, 64, 64], "processes": [4], "procdims": [[4, 1, 1]]},
     "kernels.jacobi.procdims.0: grid [4, 1, 1] has more ranks on axis 0 than N = [2, 64, 64] has points"),
])
def test_jacobi_sweep_problems_name_the_key(block: dict[str, Any], expected: str) -> None:
    problems = kernel_sweep_problems({"jacobi": block})
    assert any(p.startswith(expected) for p in problems), problems


def test_expansion_refuses_a_jacobi_grid_of_no_process_count() -> None:
    config = tiny()
    config["kernels"]["jacobi"]["procdims"] = [[3, 1, 1]]
    with pytest.raises(ConfigError, match=r"kernels\.jacobi\.procdims\.0: grid \[3, 1, 1\]"):
        cells_of_kind(validate(config), "kernel")


def test_the_config_accepts_a_jacobi_mode_list() -> None:
    config = tiny()
    config["kernels"]["jacobi"].update(mode=["weak", "strong"], L=16, N=32)
    config = validate(config)
    assert {g for g, _, _ in groups(config, "jacobi")} >= {"weak-L16-t1", "strong-N32-t1"}


# -- models and report -------------------------------------------------------------------------------

# Slowest-rank total time (µs) of each repetition per (dims, grid) at P = 2.
MATSUM_REPS = {("96,40,40", (2, 1)): [100.0, 110.0, 120.0], ("96,40,40", (1, 2)): [300.0, 330.0, 360.0],
               ("40,96,40", (2, 1)): [220.0, 200.0, 210.0], ("40,96,40", (1, 2)): [105.0, 100.0, 95.0]}


def matsum_sweep_table() -> pl.DataFrame:
    """Explicit grids at P = 2 for two dims, and MPI_Dims_create cells at P = 1, 3."""
    rows = []
    for (dims, grid), reps in MATSUM_REPS.items():
        for rep, total in enumerate(reps):
            cell = f"kernel/impi/shm/core/np2/matsum/t2-block-g{grid[0]}x{grid[1]}-d{dims.replace(',', 'x')}/rep{rep}"
            rows += [{**HEAD, "cell": cell, "rep": rep, "np": 2, "rank": rank, "topo": 2, "dist": "block",
                      "dims": dims, "procdims": list(grid), "grid_explicit": True, "node_cores": 4,
                      "oversubscribed": False, "total_us": total * (1.0 if rank == 0 else 0.9),
                      "scatter_us": total / 2, "gather_us": total / 4} for rank in range(2)]
    for np_ in (1, 3):
        for rep in range(3):
            rows += [{**HEAD, "cell": f"kernel/impi/shm/core/np{np_}/matsum/t1-block-d96x40x40/rep{rep}", "rep": rep,
                      "np": np_, "rank": rank, "topo": 1, "dist": "block", "dims": "96,40,40", "procdims": [np_],
                      "grid_explicit": False, "node_cores": 4, "oversubscribed": False,
                      "total_us": 500.0 / np_, "scatter_us": 1.0, "gather_us": 1.0 + rank} for rank in range(np_)]
    return pl.DataFrame(rows)


def test_matsum_grids_are_compared_at_their_p_and_kept_out_of_the_amdahl_series() -> None:
    table = matsum_sweep_table()
    comparisons = {c.key["dims"]: c for c in matsum_grids(table)}
    assert set(comparisons) == {"96×40×40", "40×96×40"}
    first = comparisons["96×40×40"]
    assert first.key["np"] == 2 and first.best == "2×1" and first.spread == pytest.approx(3.0)
    grids = {g.grid: g for g in first.grids}
    assert grids["2×1"].measured_us == 110.0 and grids["1×2"].measured_us == 330.0
    assert grids["1×2"].vs_best == pytest.approx(3.0) and grids["2×1"].explicit
    assert sorted(v or 0.0 for v in grids["2×1"].reps_us) == [100.0, 110.0, 120.0] and grids["2×1"].n_reps == 3
    low, high = grids["2×1"].ci_us
    assert low is not None and high is not None and 100.0 <= low <= 110.0 <= high <= 120.0
    assert comparisons["40×96×40"].best == "1×2"
    # The file's entry: coordinates first, the phases beside each grid's time, and back to the same record.
    entry = first.to_json()
    assert list(entry)[:7] == ["label", "stack", "transport", "mapping", "dims", "dist", "np"]
    assert set(grids["2×1"].extras) == {"scatter_us", "gather_us"}  # the phases this table has
    assert GridComparison.from_json(json.loads(json.dumps(entry)), "kernels.json", "$.matsum_grids[0]") == first
    # The Amdahl series of dims 96x40x40 has only its MPI_Dims_create cells (P = 1, 3): too few to fit.
    (series,) = fit_matsum(table)
    assert series.dims == "96×40×40" and series.error is not None and "P = [1, 3]" in series.error


def jacobi_sweep_table() -> pl.DataFrame:
    """weak L=16: P = 1, explicit grids 2x1x1 and 1x2x1 at P = 2, a 1 x 2 hybrid; strong N=32: P = 1, 2."""
    rows = []
    shapes = [("weak", 1, 1, [1, 1, 1], False, 100.0), ("weak", 2, 1, [2, 1, 1], True, 130.0),
              ("weak", 2, 1, [1, 2, 1], True, 150.0), ("weak", 1, 2, [1, 1, 1], False, 60.0),
              ("strong", 1, 1, [1, 1, 1], False, 400.0), ("strong", 2, 1, [2, 1, 1], False, 250.0)]
    for mode, np_, threads, grid, explicit, iteration in shapes:
        size = {"L": "16,16,16", "N": None} if mode == "weak" else {"L": None, "N": "32,32,32"}
        group = (f"{mode}-{'L16' if mode == 'weak' else 'N32'}-t{threads}"
                 + (f"-g{'x'.join(map(str, grid))}" if explicit else ""))
        k = sum(d > 1 for d in grid)
        for rep in range(3):
            rows += [{**HEAD, "cell": f"kernel/impi/shm/core/np{np_}/jacobi/{group}/rep{rep}", "rep": rep, "np": np_,
                      "rank": rank, "threads": threads, "mode": mode, **size, "variant_group": group,
                      "procdims": grid, "grid_explicit": explicit, "bytes_sent": 2048 * k, "messages": k,
                      "halo_us": 2.0 * k, "iteration_us": iteration * (1 + 0.01 * rep), "compute_us": iteration - 5,
                      "allreduce_us": 1.0, "mlups_total": 4096 * np_ / iteration, "local_points": 4096,
                      "oversubscribed": False} for rank in range(np_)]
    return pl.DataFrame(rows)


def test_jacobi_keeps_problems_apart_and_compares_grids() -> None:
    hockney = [{"label": HEAD["label"], "benchmark": "PingPong", "latency_us": 1.0,
                "asymptotic_bandwidth_MBps": 1000.0, "peak_bandwidth_MBps": 1000.0}]
    (fit,) = [f.to_json() for f in fit_jacobi(jacobi_sweep_table(), hockney_records(hockney))]
    assert fit["problems"] == ["strong N=32", "weak L=16"]
    pts = {(p["problem"], p["np"], p["threads"], tuple(p["procdims"])): p for p in fit["points"]}
    # strong scaling within its own problem: 400·1 / (2·250); the weak grids (explicit) get none
    assert pts[("strong N=32", 2, 1, (2, 1, 1))]["efficiency"] == pytest.approx(400 * 1.01 / (2 * 250 * 1.01))
    assert "efficiency" not in pts[("weak L=16", 2, 1, (2, 1, 1))]
    (comparison,) = fit["grids"]
    assert (comparison["problem"], comparison["np"], comparison["threads"]) == ("weak L=16", 2, 1)
    assert comparison["best"] == "2×1×1" and comparison["spread"] == pytest.approx(150 / 130)
    # the hybrid 1 x 2 is paired with the fastest pure cell of its problem at 2 cores
    (hybrid,) = fit["hybrid_vs_pure"]
    assert hybrid["problem"] == "weak L=16" and hybrid["pure"] == "2 × 1 (grid 2×1×1)"
    assert hybrid["pure_iteration_us"] == pytest.approx(130 * 1.01)


def test_report_shows_each_grid_and_problem_with_valid_charts(tmp_path: Path) -> None:
    from mpiatlas.report import build as report

    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    tables = {"matsum": matsum_sweep_table(), "jacobi": jacobi_sweep_table()}
    for name, table in tables.items():
        table.write_parquet(tidy / f"kernel_{name}.parquet")
    (fits / "kernels.json").write_text(json.dumps(fit_kernels(tables, None).to_json(), allow_nan=False))
    html = report.build_report(tidy, fits, tmp_path / "report.html").read_text()
    matsum = html[html.index('<section id="kernel-matsum">'):html.index('<section id="kernel-jacobi">')]
    assert "Process grids at equal P" in matsum and "asked for (procdims)" in matsum
    for value in ("110", "330", "210", "100"):  # each grid's median (µs), then its CI
        assert re.search(rf">\s*{value} \[", matsum), value
    jacobi = html[html.index('<section id="kernel-jacobi">'):]
    jacobi = jacobi[:jacobi.index("</section>")]
    assert "strong N=32" in jacobi and "weak L=16" in jacobi and "2×1×1" in jacobi and "1×2×1" in jacobi
    schema = load_schema()
    for cid, spec in _specs(html).items():
        assert validate_jsonschema(spec, schema, raise_error=False) is None, cid


def test_sweep_free_blocks_have_no_sweep_problems() -> None:
    kernels = load(REPO / "config" / "full.yaml").as_dict()["kernels"]
    assert kernel_sweep_problems(kernels) == []
