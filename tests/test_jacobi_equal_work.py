"""Weak-mode Jacobi gives every core L³ points (issue #34, part 1): a hybrid rank of t threads owns
t·L³, so every ranks × threads pair on the same cores solves the same global grid, and the hybrid /
pure ratio compares equal work. Checked on the planned cells of one study and on recorded runs of
the kernel (tests/data/kernels)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import REPO
from mpiatlas.matrix.config import validate
from mpiatlas.matrix.kernel_sweeps import dims_create, jacobi_variants
from mpiatlas.models.kernels import fit_jacobi, fit_kernels
from mpiatlas.parsers.kernels import parse_kernel_file
from mpiatlas.programs import cells_of_kind
from mpiatlas.programs.kernels.jacobi import grid_points
from mpiatlas.spine.campaign import Campaign

DATA = Path(__file__).parent / "data" / "kernels"
HEAD = {"label": "openmpi/ob1-vader/core", "stack": "openmpi", "transport": "ob1-vader", "mapping": "core",
        "cell_status": "ok", "rep": 0, "oversubscribed": False}


@pytest.mark.parametrize(("n", "dims"), [(1, (1, 1, 1)), (2, (2, 1, 1)), (4, (2, 2, 1)), (6, (3, 2, 1)),
                                         (8, (2, 2, 2)), (12, (3, 2, 2))])
def test_dims_create_matches_mpi(n: int, dims: tuple[int, ...]) -> None:
    # The grids Open MPI's and MPICH's MPI_Dims_create(n, 3) return (the recorded procdims below agree).
    assert dims_create(n) == dims


def study_block() -> Campaign:
    config = yaml.safe_load((REPO / "config" / "test" / "tiny.yaml").read_text())
    config["kernels"]["jacobi"].update(mode="weak", L=16, processes=[1, 2, 4], hybrid={"cores": [2, 4]})
    return validate(config)


def test_weak_hybrid_and_pure_cells_of_one_study_plan_equal_global_grids() -> None:
    config = study_block()
    variants = {v.group: v for v in jacobi_variants(config.kernels["jacobi"])}
    by_cores: dict[int, set[tuple[int, int, int]]] = {}
    pairs: dict[int, set[tuple[int, int]]] = {}
    for cell in (c for c in cells_of_kind(config, "kernel") if c.kernel == "jacobi"):
        variant = variants[cell.variant]
        by_cores.setdefault(cell.np * cell.threads, set()).add(variant.global_dims(cell.np))
        pairs.setdefault(cell.np * cell.threads, set()).add((cell.np, cell.threads))
        per_rank, total = grid_points(variant, cell.np)
        # every core owns L³ points, whatever its rank's thread count
        assert per_rank == pytest.approx(cell.threads * 16**3) and total == cell.np * cell.threads * 16**3
    assert pairs[2] == {(2, 1), (1, 2)} and pairs[4] == {(4, 1), (2, 2), (1, 4)}
    # one global grid per core count: the one 2 (4) pure ranks solve
    assert by_cores == {1: {(16, 16, 16)}, 2: {(32, 16, 16)}, 4: {(32, 32, 16)}}


def test_strong_hybrid_and_pure_cells_of_one_study_plan_one_global_grid() -> None:
    # Strong mode was already equal work: every ranks × threads pair solves the N³ grid, split over its ranks.
    config = yaml.safe_load((REPO / "config" / "test" / "tiny.yaml").read_text())
    config["kernels"]["jacobi"].pop("L", None)
    config["kernels"]["jacobi"].update(mode="strong", N=24, processes=[1, 2, 4], hybrid={"cores": [2, 4]})
    config = validate(config)
    variants = {v.group: v for v in jacobi_variants(config.kernels["jacobi"])}
    seen = set()
    for cell in (c for c in cells_of_kind(config, "kernel") if c.kernel == "jacobi"):
        variant = variants[cell.variant]
        seen.add((cell.np, cell.threads))
        assert variant.global_dims(cell.np) == (24, 24, 24)
        assert grid_points(variant, cell.np) == (24**3 / cell.np, 24**3)
    assert {(2, 1), (1, 2), (4, 1), (2, 2), (1, 4)} <= seen


def recorded(name: str, cell: str, group: str) -> pl.DataFrame:
    frame = parse_kernel_file(DATA / name)["jacobi"]
    return frame.with_columns(pl.lit(cell).alias("cell"), pl.lit(group).alias("variant_group"),
                              pl.col("size").alias("np"), *(pl.lit(v).alias(k) for k, v in HEAD.items()))


def test_recorded_weak_hybrid_and_pure_runs_solve_one_global_grid() -> None:
    hybrid = recorded("jacobi_openmpi_np1_t2_weak.txt", "kernel/openmpi/ob1-vader/core/np1/jacobi/weak-L24-t2/rep0",
                      "weak-L24-t2")
    pure = recorded("jacobi_openmpi_np2_weak.txt", "kernel/openmpi/ob1-vader/core/np2/jacobi/weak-L24-t1/rep0",
                    "weak-L24-t1")
    # the kernel's own record: 1 × 2 owns 2·24³ points, each of 2 × 1 24³, one 48×24×24 grid
    assert hybrid["local_points"].to_list() == [2 * 24**3] and pure["local_points"].to_list() == [24**3] * 2
    assert set(map(tuple, hybrid["global_dims"].to_list() + pure["global_dims"].to_list())) == {(48, 24, 24)}
    # the same problem: identical residual sequences (the check also passed on both)
    assert hybrid["residuals"][0].to_list() == pytest.approx(pure["residuals"][0].to_list(), rel=1e-12)
    (fit,) = [f.to_json() for f in fit_jacobi(pl.concat([hybrid, pure], how="diagonal_relaxed"), None)]
    (row,) = fit["hybrid_vs_pure"]
    assert (row["hybrid"], row["pure"]) == ("1 × 2", "2 × 1")
    assert row["equal_work"] and row["hybrid_global_dims"] == row["pure_global_dims"] == [48, 24, 24]
    assert row["iteration_ratio"] == pytest.approx(
        hybrid["iteration_us"].max() / pure["iteration_us"].max(), rel=1e-9)
    assert math.prod(row["hybrid_global_dims"]) == 2 * 24**3


def test_unequal_work_gets_no_ratio() -> None:
    # A record from before equal work: the hybrid rank owned only L³ (half of 2 × 1's grid).
    hybrid = recorded("jacobi_openmpi_np1_t2_weak.txt", "kernel/openmpi/ob1-vader/core/np1/jacobi/weak-L24-t2/rep0",
                      "weak-L24-t2").with_columns(pl.lit([24, 24, 24]).alias("global_dims"))
    pure = recorded("jacobi_openmpi_np2_weak.txt", "kernel/openmpi/ob1-vader/core/np2/jacobi/weak-L24-t1/rep0",
                    "weak-L24-t1")
    (fit,) = [f.to_json() for f in fit_jacobi(pl.concat([hybrid, pure], how="diagonal_relaxed"), None)]
    (row,) = fit["hybrid_vs_pure"]
    assert not row["equal_work"] and row["iteration_ratio"] is None
    assert row["hybrid_global_dims"] == [24, 24, 24] and row["pure_global_dims"] == [48, 24, 24]


def test_communication_share_per_configuration_in_the_report(tmp_path: Path) -> None:
    from mpiatlas.report import build as report

    hybrid = recorded("jacobi_openmpi_np1_t2_weak.txt", "kernel/openmpi/ob1-vader/core/np1/jacobi/weak-L24-t2/rep0",
                      "weak-L24-t2")
    pure = recorded("jacobi_openmpi_np2_weak.txt", "kernel/openmpi/ob1-vader/core/np2/jacobi/weak-L24-t1/rep0",
                    "weak-L24-t1")
    table = pl.concat([hybrid, pure], how="diagonal_relaxed")
    (fit,) = [f.to_json() for f in fit_jacobi(table, None)]
    points = {(p["np"], p["threads"]): p for p in fit["points"]}
    # halo and Allreduce: means over ranks; the iteration: the slowest rank's (one repetition each)
    two = points[(2, 1)]
    assert two["halo_share"] == pytest.approx(pure["halo_us"].mean() / pure["iteration_us"].max(), rel=1e-9)
    assert two["allreduce_share"] == pytest.approx(pure["allreduce_us"].mean() / pure["iteration_us"].max(),
                                                   rel=1e-9)
    assert points[(1, 2)]["compute_share"] == pytest.approx(
        hybrid["compute_us"][0] / hybrid["iteration_us"][0], rel=1e-9)
    tidy, fits = tmp_path / "tidy", tmp_path / "fits"
    tidy.mkdir()
    fits.mkdir()
    table.drop("residuals").write_parquet(tidy / "kernel_jacobi.parquet")
    (fits / "kernels.json").write_text(json.dumps(fit_kernels({"jacobi": table}, None).to_json(), allow_nan=False))
    html = report.build_report(tidy, fits, tmp_path / "report.html").read_text()
    section = html[html.index('<section id="kernel-jacobi">'):]
    section = section[:section.index("</section>")]
    assert "Communication share per configuration" in section and "48×24×24" in section
    assert "Equal work" in section
