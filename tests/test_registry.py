"""The program registry carries a program's whole slice (issue #37 item 2): a kernel defined outside
the package (tests/toy_program.py, tests/data/toy.c) and added through :func:`mpiatlas.programs.registered`
shows up in the cells, the cost model, tidy, ``mpiatlas compare``, the build and the report, with no
package module touched. And the lists that used to be written by hand agree with the registry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import REPO
from toy_program import TOY_BUFFER_B, TOY_TITLE, Toy
from mpiatlas.campaign.adaptive_rounds import cell_values
from mpiatlas.campaign.resources import RUNTIME_OVERHEAD_S, RUNTIME_SAFETY, CellCosts, estimate, job_groups
from mpiatlas.compare.kernels import load_kernel_samples, reductions
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.files import shipped_kernel_sources
from mpiatlas.matrix.cells import Cell
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.programs import (
    REGISTRY,
    cell_spec,
    expand,
    kernel_names,
    modelled_kernels,
    program_of,
    registered,
    tables,
)
from mpiatlas.programs.base import MEM_PER_JOB_MB, MEM_PER_RANK_MB
from mpiatlas.programs.build import build_outputs, make_kernel_args
from mpiatlas.report.data import load_data
from mpiatlas.report.render import build_sections, render_html
from mpiatlas.report.sections import order
from mpiatlas.spine.campaign import Campaign
from mpiatlas.tables.tidy import tidy

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
TOY_C = Path(__file__).parent / "data" / "toy.c"
SHIPPED_KERNELS = ("ring", "matsum", "jacobi", "pingpong", "coll", "loggp")


@pytest.fixture
def toy() -> Iterator[Toy]:
    with registered(Toy()) as program:
        assert isinstance(program, Toy)
        yield program


def toy_document() -> dict:
    doc = yaml.safe_load((REPO / "config/test/tiny.yaml").read_text())
    doc["kernels"]["toy"] = {"processes": [1, 2], "iterations": 50}
    return doc


def toy_config() -> Campaign:
    return validate(toy_document())


def toy_output(np_: int, t_usec: float) -> str:
    lines = ["# mpiatlas toy kernel", "# kernel: toy", f"# nprocs: {np_}"]
    lines += [json.dumps({"kernel": "toy", "rank": r, "size": np_, "host": "h", "cpu": r, "t_usec": t_usec + r,
                          "valid": True}) for r in range(np_)]
    return "\n".join(lines) + "\n"


def sealed_cell(root: Path, cell: Cell, stdout: str) -> Path:
    d = root / "raw" / cell.id
    d.mkdir(parents=True)
    (d / "stdout.txt").write_text(stdout)
    (d / "stderr.txt").write_text("")
    (d / "status.json").write_text(json.dumps({"cell": cell.id, "status": "ok", "reason": Outcome("ok").reason}))
    (d / "provenance.json").write_text(json.dumps({"cell": cell.id, "coords": cell.coords(), "stack_kind": "intelmpi",
                                                   "oversubscribed": False, "topology": {"cores": 2}}))
    return d


def test_the_package_ships_no_toy_and_its_block_needs_the_registry() -> None:
    assert "toy" not in REGISTRY and kernel_names() == SHIPPED_KERNELS
    with pytest.raises(ConfigError, match="toy"):
        toy_config()  # the shipped schema does not know kernels.toy: its program brings it


def test_toy_cells_spec_and_costs(toy: Toy) -> None:
    config = toy_config()
    assert config.kernels["toy"] == {"processes": [1, 2], "iterations": 50, "warmup": 10}  # defaults filled
    cells = [c for c in expand(config) if c.benchmark == "toy"]
    assert {(c.kind, c.np, c.variant) for c in cells} == {("kernel", 1, "default"), ("kernel", 2, "default")}
    assert len(cells) == 2 * config.campaign.repetitions
    assert "kernel/intelmpi/shm/core/np2/toy/default/rep0" in {c.id for c in cells}
    cell = next(c for c in cells if c.np == 2)
    assert program_of(cell) is toy
    spec = cell_spec(config, cell)
    assert spec["kernel"]["name"] == "toy" and spec["kernel"]["args"] == ["--iterations", "50", "--warmup", "10"]
    # The cost model is the toy's: its work and its buffers price the cell.
    costs = CellCosts(config)
    work = toy.work_s(config, cell)
    assert work == pytest.approx(60 * 50e-6)
    assert costs.runtime_s(cell) == pytest.approx(RUNTIME_OVERHEAD_S + RUNTIME_SAFETY * work)
    assert costs.mem_mb(cell) == int(MEM_PER_JOB_MB + 2 * (MEM_PER_RANK_MB + TOY_BUFFER_B / 2**20) + 1)
    assert estimate(config, cells).cells == len(cells)
    grouped = {c.id for group in job_groups(config, expand(config)).values() for c in group}
    assert {c.id for c in cells} <= grouped


def test_toy_rows_land_in_its_table_and_its_report_section(toy: Toy, tmp_path: Path) -> None:
    assert "kernel_toy.parquet" in tables()
    cells = [Cell("kernel", "intelmpi", "shm", "core", np_, "toy", "default", rep) for np_ in (1, 2) for rep in (0, 1)]
    dirs = [sealed_cell(tmp_path, c, toy_output(c.np, 3.0 + c.rep)) for c in cells]
    counts = tidy(dirs, tmp_path / "tidy", expected=[c.id for c in cells])
    assert counts["kernel_rows"] == 6
    table = pl.read_parquet(tmp_path / "tidy/kernel_toy.parquet")
    assert table.height == 6 and set(table["label"]) == {"intelmpi/shm/core"}
    assert set(pl.read_parquet(tmp_path / "tidy/cells.parquet")["benchmark"]) == {"toy"}
    # Adaptive repetitions judge its series by its measure: rank 0's time.
    assert cell_values(dirs[-1]) == {("kernel_toy.parquet", "default"): 4.0}
    # mpiatlas compare reads it through the toy's reduction: one time per launch, the slowest rank's.
    assert "toy" in reductions() and "toy" not in modelled_kernels()
    samples = load_kernel_samples(tmp_path / "tidy")["toy"]
    assert samples.height == 4 and sorted(samples["t_usec"].to_list()) == [3.0, 4.0, 4.0, 5.0]
    # The report places its section among the programs' ones, before the closing sections.
    names = [fn.__name__ for fn in order()]
    assert names.index("section_kernel_p2p_coll") < names.index("section_toy") < names.index("section_adaptive")
    data = load_data(tmp_path / "tidy", None, now=NOW)
    sections = build_sections(data)
    toy_section = next(s for s in sections if s.id == "kernel-toy")
    assert toy_section.title == TOY_TITLE
    assert TOY_TITLE in render_html(data, sections)


def test_toy_is_built_from_its_c_file(toy: Toy, tmp_path: Path) -> None:
    config = toy_config()
    assert any(out.endswith("/toy") for out in build_outputs(config, "intelmpi"))
    args = make_kernel_args(kernel_names())
    assert args == [f"KERNELS={' '.join((*SHIPPED_KERNELS, 'toy'))}", "OPENMP_KERNELS=jacobi"]
    src = tmp_path / "src"
    shutil.copytree(shipped_kernel_sources(), src, ignore=shutil.ignore_patterns("build"))
    shutil.copy(TOY_C, src / "toy.c")
    out = tmp_path / "out"
    dry = subprocess.run(["make", "-n", "-C", str(src), *args, "MPICC=mpicc", f"OUT={out}", f"{out}/toy"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert re.search(rf"mpicc .*-o {out}/toy toy\.c {out}/util\.o", dry), dry
    assert "-fopenmp" not in dry


def test_the_makefile_defaults_are_the_registry() -> None:
    """A plain `make` (the images' build) builds what the registry lists; programs.build passes the lists."""
    text = (shipped_kernel_sources() / "Makefile").read_text()
    listed = dict(re.findall(r"^(KERNELS|OPENMP_KERNELS) \?= (.*)$", text, re.M))
    assert tuple(listed["KERNELS"].split()) == kernel_names()
    assert listed["OPENMP_KERNELS"].split() == [n for n in kernel_names() if getattr(REGISTRY[n], "openmp", False)]
    assert make_kernel_args(kernel_names()) == [f"KERNELS={listed['KERNELS']}", f"OPENMP_KERNELS={listed['OPENMP_KERNELS']}"]
    assert modelled_kernels() == ("ring", "matsum", "jacobi", "pingpong", "coll")
    assert tuple(reductions()) == ("ring", "matsum", "jacobi", "pingpong", "coll")
    assert [fn.__name__ for fn in order()][13:18] == [
        "section_kernel_ring", "section_kernel_matsum", "section_kernel_jacobi", "section_kernel_jacobi_nodes",
        "section_kernel_p2p_coll"]
