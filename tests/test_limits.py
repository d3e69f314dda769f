"""Physical limits: likwid-bench copy bandwidth per cache level, and shm B as a % of it in the report."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from conftest import require_infra
from mpiatlas.node import limits
from mpiatlas.cli import main
from mpiatlas.models.hockney import fit_hockney
from mpiatlas.parsers.imb import parse_imb_file
from mpiatlas.report.blocks import Table, Text
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
    # Neither likwid-bench nor a compiler for the copy kernel (tests/test_copy_kernel.py: with one).
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    cache = tmp_path / "cache"
    assert main(["limits", "--out-dir", str(tmp_path / "limits"), "--cache-dir", str(cache)]) == 0
    doc = json.loads((tmp_path / "limits" / "limits.json").read_text())
    (record,) = doc["nodes"]
    assert record["available"] is False and "likwid-bench not found" in record["reason"]
    assert (tmp_path / "limits" / f"{record['node']}.json").is_file()
    assert "unavailable" in capsys.readouterr().out
    assert not cache.exists()  # nothing cached: installing likwid takes effect at once


@pytest.mark.infra
def test_measures_this_node_with_likwid_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_infra(shutil.which("likwid-bench") is not None, "likwid-bench (Debian package likwid)")
    monkeypatch.setattr(limits, "TARGET_VOLUME_BYTES", 5e8)  # short runs: the figures, not their precision
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["limits", "--out-dir", str(out), "--cache-dir", str(cache)]) == 0
    (record,) = json.loads((out / "limits.json").read_text())["nodes"]
    assert record["available"] is True and record["version"] and "cached_from" not in record
    rates = limits.level_limits(record)
    assert "memory" in rates and "L1" in rates
    assert rates["L1"] > rates["memory"] > 500  # MB/s copied by one core; L1 is several times memory
    assert all(len(lv["runs_MByte_s"]) == limits.REPEATS for lv in record["levels"])
    # The second campaign on this node and boot: the same record, from the cache.
    assert main(["limits", "--out-dir", str(tmp_path / "again"), "--cache-dir", str(cache)]) == 0
    (again,) = json.loads((tmp_path / "again" / "limits.json").read_text())["nodes"]
    assert again["cached_from"].startswith(str(cache)) and again["levels"] == record["levels"]


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
    section = section_parameters(load_data(None, fits, limits=tmp_path / "R" / "limits" / "limits.json"))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    col = {name: i for i, name in enumerate(table.columns)}
    rows = {r[col["Label"]].text: r for r in table.rows}
    memory = limits.level_limits(json.loads(RECORD.read_text())["nodes"][0])
    shm = rows["intelmpi/shm/core"]
    # The asymptotic B is read at the largest size, 256 MiB: set against the memory copy rate (the
    # level that holds that message); the peak at 512 KiB against the 512 KiB L2's.
    assert entry["asymptotic_bytes"] == 256 << 20 and entry["peak_bytes"] == 512 << 10
    want = 100 * entry["asymptotic_bandwidth_MBps"] / memory["memory"]
    assert shm[col["Asymptotic B % of copy"]].text == f"{want:.1f} % (memory)"
    peak = 100 * entry["peak_bandwidth_MBps"] / memory["L2"]
    assert shm[col["Peak B % of copy"]].text == f"{peak:.1f} % (L2)"
    # This record predates link rates and there are no α-β fits: the report says the rate is unknown.
    assert rows["intelmpi/ofi-tcp/node2"][col["Asymptotic B % of copy"]].text == "link rate unknown"
    assert any("likwid-bench copy" in getattr(b, "text", "") for b in section.blocks)


def test_report_without_limits_has_no_percent_columns(tmp_path: Path) -> None:
    """Limits reach the report only through --limits: a limits.json beside the fits (where the
    report used to look for it) is not read, and the report says it was given none."""
    fits = tmp_path / "R" / "fits"
    fits.mkdir(parents=True)
    (fits / "hockney.json").write_text(json.dumps([_shm_fit_entry()]))
    (tmp_path / "R" / "limits").mkdir()
    shutil.copy(RECORD, tmp_path / "R" / "limits" / "limits.json")
    data = load_data(None, fits)
    assert data.limits is None and data.limits_path is None
    blocks = section_parameters(data).blocks
    table = next(b for b in blocks if isinstance(b, Table))
    assert "Asymptotic B % of copy" not in table.columns and "Peak B % of copy" not in table.columns
    assert "Asymptotic B (MB/s)" in table.columns and "Peak B (MB/s)" in table.columns
    assert any("campaign.limits is off" in b.text for b in blocks if isinstance(b, Text))


def test_report_command_takes_the_limits_file(tmp_path: Path) -> None:
    fits = tmp_path / "fits"
    fits.mkdir()
    (fits / "hockney.json").write_text(json.dumps([_shm_fit_entry()]))
    limits_file = tmp_path / "elsewhere" / "nodes.json"
    limits_file.parent.mkdir()
    shutil.copy(RECORD, limits_file)
    base = ["report", "--tidy", str(tmp_path / "no-tidy"), "--fits", str(fits)]
    assert main([*base, "--limits", str(limits_file), "--out", str(tmp_path / "with.html")]) == 0
    assert main([*base, "--out", str(tmp_path / "without.html")]) == 0
    memory = limits.level_limits(json.loads(RECORD.read_text())["nodes"][0])["memory"]
    want = f"{100 * _shm_fit_entry()['asymptotic_bandwidth_MBps'] / memory:.1f} % (memory)"
    assert want in (tmp_path / "with.html").read_text() and str(limits_file) in (tmp_path / "with.html").read_text()
    assert "Asymptotic B % of copy" not in (tmp_path / "without.html").read_text()
    # A given file that is not there: said in the section, not fatal, no percent columns.
    data = load_data(None, fits, limits=tmp_path / "missing.json")
    assert data.limits is None and "missing.json" in str(data.limits_error)
    assert any(f.name == "limits" and f.state == "missing" for f in data.inputs)
    section = section_parameters(data)
    assert any("Physical limits not shown" in getattr(b, "text", "") for b in section.blocks)


def _link_entry(label: str, bandwidth: float) -> dict:
    """An inter-node fit whose curve rises to its largest size (a link): the asymptotic and the peak B
    are the same s/t, at that size."""
    entry = _shm_fit_entry()
    return {**entry, "label": label, "mapping": "node2", "asymptotic_bandwidth_MBps": bandwidth,
            "peak_bandwidth_MBps": bandwidth, "peak_bytes": entry["asymptotic_bytes"]}


def test_inter_node_b_against_the_nominal_link_rate(tmp_path: Path) -> None:
    """The α-β fits' network.bandwidth_gbit_s bounds an inter-node PingPong: 12047 MB/s on a
    100 Gbit/s link (12500 MB/s) is 96.4 %, the figure StackHPC published for csd3 ib ompi3."""
    fits = tmp_path / "fits"
    fits.mkdir()
    entry = _link_entry("csd3-ib", 12047.46)
    (fits / "hockney.json").write_text(json.dumps([entry]))
    (fits / "alphabeta.json").write_text(json.dumps({"network": {"name": "HDR100", "bandwidth_gbit_s": 100},
                                                      "fits": [], "notes": []}))
    section = section_parameters(load_data(None, fits))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    (row,) = table.rows
    assert row[table.columns.index("Asymptotic B % of copy")].text == "96.4 % (config)"


def _node(name: str, net: dict) -> dict:
    """A limits record of a node without likwid but with a network link."""
    return {"node": name, "available": False, "reason": "likwid-bench not found", "network_link": net}


def _inter_report(tmp_path: Path, records: list[dict], alphabeta: dict | None = None) -> tuple[Table, list]:
    fits = tmp_path / "fits"
    fits.mkdir(exist_ok=True)
    entry = _link_entry("ompi/ucx/node2", 12047.46)
    region = {**_link_entry("ompi/ucx/region", 2911.5), "mapping": None, "region": "other_node"}
    (fits / "hockney.json").write_text(json.dumps([entry, region]))
    if alphabeta is not None:
        (fits / "alphabeta.json").write_text(json.dumps(alphabeta))
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"nodes": records}))
    section = section_parameters(load_data(None, fits, limits=path))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    return table, section.blocks


def test_inter_node_b_against_the_recorded_link_rate(tmp_path: Path) -> None:
    """Two nodes on EDR (100 Gbit/s = 12500 MB/s): 12047.46 MB/s is 96.4 %; the records win over
    the α-β fits' configured 10 Gbit/s, and a fit placed by region (other_node) counts as inter-node."""
    edr = {"interface": "ib0", "chosen_by": "config tcp_interface", "gbit_s": 100.0, "source": "infiniband:mlx5_0/1"}
    table, blocks = _inter_report(tmp_path, [_node("n1", edr), _node("n2", edr)],
                                  {"network": {"name": "nominal link", "bandwidth_gbit_s": 10}})
    col = table.columns.index("Asymptotic B % of copy")
    rows = {r[1].text: r for r in table.rows}
    assert rows["ompi/ucx/node2"][col].text == "96.4 % (infiniband:mlx5_0/1)"
    assert rows["ompi/ucx/region"][col].text == "23.3 % (infiniband:mlx5_0/1)"  # 2911.5 / 12500
    assert rows["ompi/ucx/region"][col].cls == "num"
    assert "n1: ib0 (config tcp_interface), 100 Gbit/s from infiniband:mlx5_0/1" in rows["ompi/ucx/node2"][col].title
    assert any("12,500 MB/s" in getattr(b, "text", "") for b in blocks)


def test_the_slower_node_bounds_the_link_and_unknown_rates_are_said(tmp_path: Path) -> None:
    fast = {"interface": "eth0", "chosen_by": "default route", "gbit_s": 25.0, "source": "sysfs:eth0"}
    slow = {"interface": "eth0", "chosen_by": "default route", "gbit_s": 10.0, "source": "sysfs:eth0"}
    table, _ = _inter_report(tmp_path, [_node("n1", fast), _node("n2", slow)])
    rows = {r[1].text: r for r in table.rows}
    over = rows["ompi/ucx/region"][table.columns.index("Asymptotic B % of copy")]
    assert over.text == "232.9 % (sysfs:eth0)" and over.cls == "num bad"  # / 1250 MB/s: above the link
    assert "Above the link rate" in over.title
    # The netns cluster: cl0 is a veth, the config's 10 Gbit/s stands in, and the report says why.
    veth = {"interface": "cl0", "chosen_by": "config tcp_interface", "gbit_s": 10.0, "source": "config",
            "config_name": "veth-tcp", "note": "cl0 is a veth interface, not a hardware link "
            "(10000 Mbit/s is a kernel default): rate unknown"}
    table, blocks = _inter_report(tmp_path, [_node("node1", veth)])
    rows = {r[1].text: r for r in table.rows}
    assert rows["ompi/ucx/region"][table.columns.index("Asymptotic B % of copy")].text == "232.9 % (config)"
    notes = next(b for b in blocks if getattr(b, "text", "") == "Link rate notes:")
    assert any(i.startswith("node1: cl0 is a veth") for i in notes.items)
    # A VM NIC reporting -1 and no config value: no percent, and why.
    vm = {"interface": "eth0", "chosen_by": "default route", "gbit_s": None, "source": None,
          "note": "eth0: speed unknown (the NIC reports none, as a VM's virtio NIC does)"}
    table, blocks = _inter_report(tmp_path, [_node("vm", vm)])
    cell_ = table.rows[0][table.columns.index("Asymptotic B % of copy")]
    assert cell_.text == "link rate unknown" and "virtio" in cell_.title
    assert any("not set against a link rate" in getattr(b, "text", "") for b in blocks)


@pytest.fixture
def counted_limits_command(monkeypatch: pytest.MonkeyPatch) -> CountingRunner:
    """`mpiatlas limits` measuring through a CountingRunner on the synthetic sources, outside SLURM:
    the runner counts the likwid-bench runs, so a test sees which records came from the cache."""
    runner = CountingRunner()
    real = limits.measure_cached
    monkeypatch.setattr(limits, "measure_cached", lambda cache_dir, fresh=False: real(
        cache_dir, fresh=fresh, runner=runner, sources=_sources()))
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    return runner


def test_limits_command_records_links_fresh_not_cached(
    tmp_path: Path, counted_limits_command: CountingRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = counted_limits_command
    cache = tmp_path / "cache"
    args = ["--cache-dir", str(cache), "--tcp-interface", "no-such-if0", "--bandwidth-gbit-s", "10",
            "--network-name", "veth-tcp"]
    for run in ("a", "b"):
        assert main(["limits", "--out-dir", str(tmp_path / run), *args]) == 0
    a, b = (json.loads((tmp_path / r / "n01.json").read_text()) for r in "ab")
    assert runner.runs == RUNS_PER_RECORD and b["cached_from"]  # the copy rate from the cache ...
    for rec in (a, b):  # ... the links read each time
        net = rec["network_link"]
        assert (net["interface"], net["source"], net["gbit_s"], net["MBps"]) == (None, "config", 10.0, 1250.0)
        assert "no-such-if0 not on this node" in net["note"]
        assert [lk["name"] for lk in rec["links"]] == sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    (stored,) = cache.glob("*.json")
    assert "links" not in json.loads(stored.read_text()) and "network_link" not in json.loads(stored.read_text())
    assert "n01: link no interface: 10 Gbit/s (config)" in capsys.readouterr().out


def test_srun_runs_get_the_link_options() -> None:
    import argparse

    from mpiatlas.commands.limits import _network_argv

    args = argparse.Namespace(tcp_interface=["ib0", "eth0"], bandwidth_gbit_s=100.0, network_name="HDR100")
    assert _network_argv(args) == ["--tcp-interface", "ib0", "--tcp-interface", "eth0", "--bandwidth-gbit-s",
                                   "100.0", "--network-name", "HDR100"]


# -- the cache per node and boot ------------------------------------------------------------------

LIKWID_OUT = (DATA / "limits" / "likwid_bench_copy_mem_avx_256MiB.txt").read_text()
CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2\n"
CACHES = {"L1": 32768, "L2": 524288, "L3": 32 * 2**20}


class CountingRunner:
    """likwid-bench stand-in: every run reports ``mbytes`` MByte/s; counts the benchmark runs."""

    def __init__(self, mbytes: float = 11912.30, fail: bool = False) -> None:
        self.runs = 0
        self.mbytes, self.fail = mbytes, fail

    def __call__(self, argv: list[str]) -> str:
        if argv[1:] == ["-v"]:
            return "likwid-bench -- Version 5.2.2 (commit: 233ab943543480cd46058b34616c174198ba0459)\n"
        self.runs += 1
        if self.fail:
            raise RuntimeError(f"{' '.join(argv)} exited 1: Cannot pin thread")
        return LIKWID_OUT.replace("11912.30", f"{self.mbytes:.2f}")


def _sources(boot: str = "boot-1", version: str | None = "5.2.2") -> limits.KeySources:
    return limits.KeySources(hostname=lambda: "n01.cluster", boot_id=lambda: boot, version=lambda: version,
                             cpuinfo=lambda: CPUINFO, caches=lambda: dict(CACHES))


RUNS_PER_RECORD = 5 * limits.REPEATS  # L1, L2, L3, memory copy, memory copy_mem


def test_a_cache_hit_returns_the_stored_record_without_running_likwid(tmp_path: Path) -> None:
    runner = CountingRunner()
    first = limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert runner.runs == RUNS_PER_RECORD and first["available"] and "cached_from" not in first
    assert first["node"] == "n01" and first["cache_key"]["cpu_model"] == "AMD EPYC 7B13"
    (stored,) = tmp_path.glob("*.json")
    assert stored.name.startswith("n01.cluster-")
    hit = limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert runner.runs == RUNS_PER_RECORD  # nothing measured again
    assert hit["cached_from"] == str(stored) and hit["measured_at"] == first["measured_at"]
    assert {k: v for k, v in hit.items() if k != "cached_from"} == json.loads(stored.read_text())
    assert limits.level_limits(hit)["memory"] == 11912.30 / 2


def test_another_boot_or_tool_version_misses(tmp_path: Path) -> None:
    runner = CountingRunner()
    limits.measure_cached(tmp_path, runner=runner, sources=_sources(boot="boot-1"))
    limits.measure_cached(tmp_path, runner=runner, sources=_sources(boot="boot-2"))
    assert runner.runs == 2 * RUNS_PER_RECORD and len(list(tmp_path.glob("*.json"))) == 2
    limits.measure_cached(tmp_path, runner=runner, sources=_sources(boot="boot-2", version="5.3.0"))
    assert runner.runs == 3 * RUNS_PER_RECORD
    limits.measure_cached(tmp_path, runner=runner, sources=_sources(boot="boot-1"))  # still cached
    assert runner.runs == 3 * RUNS_PER_RECORD


def test_fresh_measures_and_replaces_the_cached_record(tmp_path: Path) -> None:
    limits.measure_cached(tmp_path, runner=CountingRunner(10000.0), sources=_sources())
    runner = CountingRunner(12000.0)
    record = limits.measure_cached(tmp_path, fresh=True, runner=runner, sources=_sources())
    assert runner.runs == RUNS_PER_RECORD and "cached_from" not in record
    assert limits.level_limits(record)["memory"] == 6000.0
    hit = limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert runner.runs == RUNS_PER_RECORD and limits.level_limits(hit)["memory"] == 6000.0


def test_unavailable_records_are_not_cached(tmp_path: Path) -> None:
    runner = CountingRunner(fail=True)
    record = limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert record["available"] is False and "Cannot pin thread" in record["reason"]
    limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert runner.runs == 2 * 5 and not list(tmp_path.glob("*.json"))  # each of the 5 runs tried once per call
    # No likwid-bench version (not installed, or it says none): measured, never cached.
    ok = CountingRunner()
    assert limits.measure_cached(tmp_path, runner=ok, sources=_sources(version=None))["available"]
    assert not list(tmp_path.glob("*.json"))


def test_a_corrupt_cache_file_is_ignored_with_a_warning_and_measured_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    limits.measure_cached(tmp_path, runner=CountingRunner(), sources=_sources())
    (stored,) = tmp_path.glob("*.json")
    stored.write_text('{"node": "n01", "levels": [')  # a half-written file (a crash mid-write elsewhere)
    runner = CountingRunner()
    with caplog.at_level(logging.WARNING, logger="mpiatlas.node.limits"):
        record = limits.measure_cached(tmp_path, runner=runner, sources=_sources())
    assert runner.runs == RUNS_PER_RECORD and record["available"] and "cached_from" not in record
    assert any(str(stored) in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)
    assert json.loads(stored.read_text())["measured_at"] == record["measured_at"]  # replaced whole
    assert not list(tmp_path.glob("*.tmp"))


def test_limits_command_uses_the_cache_and_fresh(
    tmp_path: Path, counted_limits_command: CountingRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = counted_limits_command
    cache = tmp_path / "cache"
    for run in ("a", "b", "c"):
        fresh = ["--fresh"] if run == "c" else []
        assert main(["limits", "--out-dir", str(tmp_path / run), "--cache-dir", str(cache), *fresh]) == 0
    (a,), (b,), (c,) = (json.loads((tmp_path / r / "limits.json").read_text())["nodes"] for r in "abc")
    assert runner.runs == 2 * RUNS_PER_RECORD  # a measured, b from the cache, c measured (--fresh)
    assert "cached_from" not in a and b["cached_from"].startswith(str(cache)) and "cached_from" not in c
    assert (tmp_path / "b" / "n01.json").is_file()
    assert "cached, measured " + a["measured_at"] in capsys.readouterr().out


def test_default_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert limits.default_cache_dir() == tmp_path / "xdg" / "mpiatlas" / "limits"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert limits.default_cache_dir() == tmp_path / "home" / ".cache" / "mpiatlas" / "limits"


def test_two_campaigns_starting_at_once_measure_once(tmp_path: Path) -> None:
    """The second waits for the first one's lock and reads its record, rather than measuring
    beside it (each would see part of the memory bandwidth) or reading a half-written file."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    runner = CountingRunner()

    def slow(argv: list[str]) -> str:
        time.sleep(0.01)
        return runner(argv)

    with ThreadPoolExecutor(2) as pool:
        records = list(pool.map(lambda _: limits.measure_cached(tmp_path, runner=slow, sources=_sources()), range(2)))
    assert runner.runs == RUNS_PER_RECORD
    assert sorted("cached_from" in r for r in records) == [False, True]
    assert records[0]["measured_at"] == records[1]["measured_at"]
