"""Physical limits: likwid-bench copy bandwidth per cache level, and shm B as a % of it in the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import require_infra
from mpiatlas import limits
from mpiatlas.cli import main
from mpiatlas.models.hockney import fit_hockney
from mpiatlas.parsers.imb import parse_imb_file
from mpiatlas.report.blocks import Table
from mpiatlas.report.data import load_data
from mpiatlas.report.sections.parameters import section_parameters

DATA = Path(__file__).parent / "data"
RECORD = DATA / "limits" / "limits.json"  # measured on this VM (Zen 3, 2 cores), 2026-11-23


def test_parses_the_bandwidth_of_a_real_likwid_bench_run() -> None:
    out = (DATA / "limits" / "likwid_bench_copy_mem_avx_256MiB.txt").read_text()
    assert limits.parse_mbytes(out) == 11912.30
    with pytest.raises(ValueError, match="MByte/s"):
        limits.parse_mbytes("Cycles:\t\t5880\nTime:\t\t2.4e-06 sec\n")


def test_cache_sizes_from_sysfs_and_the_plan(tmp_path: Path) -> None:
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    caches = limits.cache_sizes(tmp_path)
    assert caches == {"L1": 32768, "L2": 524288, "L3": 32 * 2**20}
    runs = limits.plan(caches, limits.simd_suffix("flags\t\t: fpu sse2 avx avx2\n"))
    assert [(r["level"], r["working_set_bytes"], r["kernel"]) for r in runs] == [
        ("L1", 16384, "copy_avx"), ("L2", 262144, "copy_avx"), ("L3", 16 * 2**20, "copy_avx"),
        ("memory", 256 * 2**20, "copy_avx"), ("memory", 256 * 2**20, "copy_mem_avx")]
    assert limits.bench_argv("copy_avx", 262144)[:5] == ["likwid-bench", "-t", "copy_avx", "-w", "S0:262kB:1"]
    assert limits.simd_suffix("flags\t\t: fpu sse2 avx512f avx\n") == "_avx512"
    assert limits.simd_suffix("no flags line") == ""


def test_levels_and_the_level_a_message_fits_in() -> None:
    record = json.loads(RECORD.read_text())["nodes"][0]
    rates = limits.level_limits(record)
    assert set(rates) == {"L1", "L2", "L3", "memory"}
    assert rates["L1"] > rates["L2"] > rates["L3"] > rates["memory"] > 1000
    # memory: the better of copy and copy_mem (non-temporal stores)
    mem = [lv["copy_MBps"] for lv in record["levels"] if lv["level"] == "memory"]
    assert rates["memory"] == max(mem) and len(mem) == 2
    assert limits.level_for_size(record, 524288) == "L2"
    assert limits.level_for_size(record, 524289) == "L3"
    assert limits.level_for_size(record, 64 * 2**20) == "memory"
    assert limits.level_limits({"node": "n1", "available": False, "reason": "x"}) == {}
    with pytest.raises(limits.LimitsError, match="'levels'"):
        limits.level_limits({"node": "n1", "available": True, "levels": "L1"})


def test_missing_likwid_gives_an_unavailable_record_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert main(["limits", "--out-dir", str(tmp_path / "limits")]) == 0
    doc = json.loads((tmp_path / "limits" / "limits.json").read_text())
    (record,) = doc["nodes"]
    assert record["available"] is False and "likwid-bench not found" in record["reason"]
    assert (tmp_path / "limits" / f"{record['node']}.json").is_file()
    assert "unavailable" in capsys.readouterr().out


@pytest.mark.infra
def test_measures_this_node_with_likwid_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_infra(shutil.which("likwid-bench") is not None, "likwid-bench (Debian package likwid)")
    monkeypatch.setattr(limits, "TARGET_VOLUME_BYTES", 5e8)  # short runs: the figures, not their precision
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert main(["limits", "--out-dir", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "limits.json").read_text())["nodes"]
    assert record["available"] is True and record["version"]
    rates = limits.level_limits(record)
    assert "memory" in rates and "L1" in rates
    assert rates["L1"] > rates["memory"] > 500  # MB/s copied by one core; L1 is several times memory
    assert all(len(lv["runs_MByte_s"]) == limits.REPEATS for lv in record["levels"])


def _shm_fit_entry() -> dict:
    files = sorted((DATA / "imb_shm_256mib").glob("impi_shm_pingpong_cache_r*.txt"))
    rows = [r for f in files for r in parse_imb_file(f).filter(benchmark="PingPong").select("bytes", "t_usec").rows()]
    fit = fit_hockney([r[0] for r in rows], [r[1] for r in rows])
    return {"label": "intelmpi/shm/core", "benchmark": "PingPong", "np": 2, "mapping": "core", **fit.to_dict()}


def test_report_shows_shm_b_and_peak_as_a_percent_of_the_copy_rate(tmp_path: Path) -> None:
    fits = tmp_path / "R" / "fits"
    fits.mkdir(parents=True)
    entry = _shm_fit_entry()
    inter = {**entry, "label": "intelmpi/ofi-tcp/node2", "mapping": "node2"}
    (fits / "hockney.json").write_text(json.dumps([entry, inter]))
    (tmp_path / "R" / "limits").mkdir()
    shutil.copy(RECORD, tmp_path / "R" / "limits" / "limits.json")
    section = section_parameters(load_data(None, fits))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    col = {name: i for i, name in enumerate(table.columns)}
    rows = {r[col["Label"]].text: r for r in table.rows}
    memory = limits.level_limits(json.loads(RECORD.read_text())["nodes"][0])
    shm = rows["intelmpi/shm/core"]
    want = 100 * entry["bandwidth_MBps"] / memory["memory"]
    assert shm[col["B % of limit"]].text == f"{want:.1f} %"
    assert shm[col["Peak % of cache copy"]].text.endswith("(L2)")  # the peak at 512 KiB fits the 512 KiB L2
    assert rows["intelmpi/ofi-tcp/node2"][col["B % of limit"]].text == "—"
    assert any("likwid-bench copy" in getattr(b, "text", "") for b in section.blocks)


def test_report_without_limits_has_no_percent_columns(tmp_path: Path) -> None:
    fits = tmp_path / "fits"
    fits.mkdir()
    (fits / "hockney.json").write_text(json.dumps([_shm_fit_entry()]))
    table = next(b for b in section_parameters(load_data(None, fits)).blocks if isinstance(b, Table))
    assert "B % of limit" not in table.columns and "Peak (MB/s)" in table.columns


def test_inter_node_b_against_the_nominal_link_rate(tmp_path: Path) -> None:
    """The α-β fits' network.bandwidth_gbit_s bounds an inter-node PingPong: 12047 MB/s on a
    100 Gbit/s link (12500 MB/s) is 96.4 %, the figure StackHPC published for csd3 ib ompi3."""
    fits = tmp_path / "fits"
    fits.mkdir()
    entry = {**_shm_fit_entry(), "label": "csd3-ib", "mapping": "node2", "bandwidth_MBps": 12047.46}
    (fits / "hockney.json").write_text(json.dumps([entry]))
    (fits / "alphabeta.json").write_text(json.dumps({"network": {"name": "HDR100", "bandwidth_gbit_s": 100},
                                                      "fits": [], "notes": []}))
    section = section_parameters(load_data(None, fits))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    (row,) = table.rows
    assert row[table.columns.index("B % of limit")].text == "96.4 %"
