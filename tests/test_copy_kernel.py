"""mpiatlas's own copy kernel (src/kernels/stream.c, mpiatlas.node.copy_kernel): the node's copy rate
where likwid-bench is not installed. Needs a C compiler only, as a fresh machine has."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpiatlas.cli import main
from mpiatlas.node import c_tool, copy_kernel, limits
from mpiatlas.report.physical_limits import load_limits
from mpiatlas.report.sections.parameters import TOOL_NAMES

DATA = Path(__file__).parent / "data" / "limits"
# Recorded on this VM (2 cores, under load): stream --sizes 24576,1048576,268435456 --cpu 0 --repeats 5.
RECORDED = DATA / "stream_copy_vm.txt"
# Recorded on this VM (2-core AMD EPYC, load ~10, 2026-12-04) with the -O3 -march=native build: every variant,
# stream --sizes 16384,524288,16777216,268435456 --cpu 0 --repeats 5 (the node's L1/L2/L3 halves and memory).
VARIANTS = DATA / "stream_copy_variants_vm.txt"
SMALL_CACHES = {"L1": 32768, "L2": 1 << 20}  # a 256 MiB memory working set: a short run


@pytest.fixture
def no_likwid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH of a fresh machine's toolchain only (the compiler, assembler and linker: no likwid-bench),
    the caches in tmp."""
    assert shutil.which("gcc") or shutil.which("cc"), "a C compiler is on every machine the suite runs on"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("gcc", "cc", "as", "ld"):
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    return tmp_path


def test_parses_a_recorded_run() -> None:
    header, records = copy_kernel.parse(RECORDED.read_text())
    assert header["kernel"] == "stream" and header["repeats"] == "5" and header["compiler"] == "12.2.0"
    assert [r["working_set_bytes"] for r in records] == [24576, 1048576, 268435456]
    assert records[2]["copy_MBps_runs"] == [6404.59, 6286.97, 6984.69, 7045.58, 6941.05]
    entry = copy_kernel.level_entry({"level": "memory", "cache_bytes": None, "working_set_bytes": 268435456},
                                    records[2])
    # Best of 5, the median, and the spread (max - min) / median.
    assert entry["copy_MBps"] == 7045.58 and entry["median_copy_MBps"] == 6941.05
    assert entry["spread"] == pytest.approx((7045.58 - 6286.97) / 6941.05)


def test_each_level_keeps_its_best_variant_and_names_it() -> None:
    header, records = copy_kernel.parse(VARIANTS.read_text())
    assert header["flags"] == "-O3 -march=native -fno-tree-loop-distribute-patterns"
    assert header["variants"] == "loop,memcpy,nt" and len(records) == 12
    sets = copy_kernel.working_sets({"L1": 32768, "L2": 1 << 20, "L3": 32 << 20}, available=64 << 30)
    chosen = {s["level"]: copy_kernel.best_level_entry(s, [r for r in records if r["working_set_bytes"]
                                                            == s["working_set_bytes"]]) for s in sets}
    # The best run of each variant, read off the recording: the loop wins in the caches, non-temporal
    # stores from memory (48234.5 vs memcpy 41451.1 in L1; 6685.33 vs loop 4895.61 from memory).
    assert {level: (e["variant"], e["kernel"], e["copy_MBps"]) for level, e in chosen.items()} == {
        "L1": ("loop", "stream loop", 48234.5), "L2": ("loop", "stream loop", 29733.5),
        "L3": ("memcpy", "stream memcpy", 12870.2), "memory": ("nt", "stream nt", 6685.33)}
    assert chosen["memory"]["variants_copy_MBps"] == {"loop": 4895.61, "memcpy": 4491.45, "nt": 6685.33}
    record = {"available": True, "levels": list(chosen.values())}
    assert limits.level_kernels(record) == {"L1": "stream loop", "L2": "stream loop", "L3": "stream memcpy",
                                            "memory": "stream nt"}


def test_an_invalid_copy_is_never_the_limit() -> None:
    _, records = copy_kernel.parse(VARIANTS.read_text())
    memory = [r for r in records if r["working_set_bytes"] == 268435456]
    broken = [{**r, "valid": False} if r["variant"] == "nt" else r for r in memory]
    entry = copy_kernel.best_level_entry({"level": "memory", "working_set_bytes": 268435456}, broken)
    assert (entry["variant"], entry["copy_MBps"], entry["valid"]) == ("loop", 4895.61, True)


def test_the_copy_kernel_and_limits_import_one_way() -> None:
    """copy_kernel needs the working-set plan only (node.copy_plan), not node.limits: no import cycle."""
    code = "import sys, mpiatlas.node.copy_kernel; print('mpiatlas.node.limits' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(("output", "expected"), [
    ('{"kernel": "stream", "working_set_bytes": 1024, "copy_MBps_runs": [1.0]}\n', "no '# kernel: stream' header"),
    ("# kernel: stream\n{not json\n", "line 2: not JSON"),
    ('# kernel: stream\n{"working_set_bytes": 1024, "copy_MBps_runs": [0, 5.0]}\n', "must be positive numbers"),
    ('# kernel: stream\n{"working_set_bytes": 1024, "copy_MBps_runs": []}\n', "must be positive numbers"),
])
def test_bad_output_is_an_error_naming_the_line(output: str, expected: str) -> None:
    with pytest.raises(copy_kernel.CopyKernelError, match=expected):
        copy_kernel.parse(output)


def test_working_sets_follow_the_caches_and_the_memory_available() -> None:
    sets = copy_kernel.working_sets({"L1": 32768, "L2": 1 << 20, "L3": 32 << 20}, available=64 << 30)
    assert [(s["level"], s["working_set_bytes"]) for s in sets] == [
        ("L1", 16384), ("L2", 1 << 19), ("L3", 16 << 20), ("memory", 256 << 20)]
    # A VM reporting a 480 MiB L3 with 2 GiB free: capped at a quarter of it, never inside the L3.
    capped = copy_kernel.working_sets({"L3": 480 << 20}, available=2 << 30)
    assert capped[-1]["working_set_bytes"] == 960 << 20


def test_a_real_run_of_the_kernel(no_likwid: Path) -> None:
    record = copy_kernel.measure(SMALL_CACHES, repeats=3, min_time_ms=20)
    assert record["available"] is True, record.get("reason")
    assert record["tool"] == "copy-kernel" and record["source"] == "src/kernels/stream.c"
    assert [lv["level"] for lv in record["levels"]] == ["L1", "L2", "memory"]
    assert record["flags"].startswith("-O3")
    for lv in record["levels"]:
        assert len(lv["runs_copy_MBps"]) == 3 and lv["valid"] is True
        # The level's figure is its best variant's, named; every variant ran.
        assert lv["kernel"] == f"stream {lv['variant']}" and {"loop", "memcpy"} <= set(lv["variants_copy_MBps"])
        assert lv["copy_MBps"] == max(lv["variants_copy_MBps"].values())
        # MB/s of bytes copied by one core: positive and finite; the best run is the figure.
        assert all(math.isfinite(r) and r > 0 for r in lv["runs_copy_MBps"])
        assert lv["copy_MBps"] == max(lv["runs_copy_MBps"])
        assert lv["spread"] >= 0 and min(lv["runs_copy_MBps"]) <= lv["median_copy_MBps"] <= lv["copy_MBps"]
    assert record["levels"][-1]["working_set_bytes"] == 256 << 20
    # Built once: the second call reuses the cached binary.
    assert len(list((no_likwid / "cache" / "copy-kernel").glob("stream-*"))) == 1


def test_limits_without_likwid_bench_name_the_copy_kernel(no_likwid: Path) -> None:
    record = limits.measure(caches=SMALL_CACHES, cpuinfo="", hostname="n01")
    assert record["available"] is True and record["tool"] == "copy-kernel"
    assert "likwid-bench not found" in record["likwid_bench"]
    assert set(limits.level_limits(record)) == {"L1", "L2", "memory"}
    out = no_likwid / "limits.json"
    limits.write_records([record], out)
    loaded = load_limits(out)
    assert loaded.tools == ["copy-kernel"] and loaded.rates["memory"] > 0
    assert "stream.c" in TOOL_NAMES["copy-kernel"]


def test_limits_record_of_likwid_names_likwid() -> None:
    (record,) = json.loads((DATA / "limits.json").read_text())["nodes"]
    assert record["tool"] == "likwid-bench"
    assert load_limits(DATA / "limits.json").tools == ["likwid-bench"]


def test_no_compiler_and_no_likwid_is_unavailable_with_both_reasons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURM_JOB_NUM_NODES", raising=False)
    assert main(["limits", "--out-dir", str(tmp_path / "limits"), "--cache-dir", str(tmp_path / "lc")]) == 0
    (record,) = json.loads((tmp_path / "limits" / "limits.json").read_text())["nodes"]
    assert record["available"] is False
    assert "likwid-bench not found" in record["reason"] and "no C compiler" in record["reason"]


def test_spreads_of_both_tools() -> None:
    (likwid,) = json.loads((DATA / "limits.json").read_text())["nodes"]
    spreads = limits.level_spreads(likwid)
    # L1: runs 153880.65, 187769.22, 122687.25 MByte/s -> (max - min) / max.
    assert spreads["L1"] == pytest.approx((187769.22 - 122687.25) / 187769.22)
    _, records = copy_kernel.parse(RECORDED.read_text())
    entry = copy_kernel.level_entry({"level": "memory", "cache_bytes": None, "working_set_bytes": 268435456},
                                    records[2])
    assert limits.level_spreads({"levels": [entry]}) == {"memory": pytest.approx((7045.58 - 6286.97) / 7045.58)}


def test_a_copy_kernel_record_is_cached_per_node_and_boot(no_likwid: Path) -> None:
    sources = limits.KeySources(hostname=lambda: "n01", boot_id=lambda: "boot-1", cpuinfo=lambda: "",
                                caches=lambda: SMALL_CACHES)
    cache = no_likwid / "limits-cache"
    first = limits.measure_cached(cache, sources=sources)
    assert first["tool"] == "copy-kernel" and "cached_from" not in first
    assert first["cache_key"]["likwid_bench"].startswith("copy-kernel stream.c@")
    again = limits.measure_cached(cache, sources=sources)
    assert again["cached_from"].startswith(str(cache)) and again["levels"] == first["levels"]


def test_report_sets_shm_b_against_the_copy_kernel(no_likwid: Path) -> None:
    """A fresh machine's report: % of the limit from the copy kernel, named as such (not "likwid-bench not found")."""
    from test_limits import _shm_fit_entry

    from mpiatlas.report.blocks import Notice, Table, Text
    from mpiatlas.report.data import load_data
    from mpiatlas.report.formatting import fmt_num
    from mpiatlas.report.sections.parameters import section_parameters

    record = limits.measure(caches=SMALL_CACHES, cpuinfo="", hostname="n01")
    fits, out = no_likwid / "R" / "fits", no_likwid / "R" / "limits" / "limits.json"
    fits.mkdir(parents=True)
    entry = _shm_fit_entry()
    (fits / "hockney.json").write_text(json.dumps([entry]))
    limits.write_records([record], out)
    section = section_parameters(load_data(None, fits, limits=out))
    table = next(b for b in section.blocks if isinstance(b, Table) and b.caption == "Hockney parameters")
    col = {name: i for i, name in enumerate(table.columns)}
    (row,) = table.rows
    # The asymptotic B is read at 256 MiB, far past any cache: set against the memory copy rate.
    assert entry["asymptotic_bytes"] == 256 << 20
    want = 100 * entry["asymptotic_bandwidth_MBps"] / limits.level_limits(record)["memory"]
    assert row[col["Asymptotic B % of copy"]].text == f"{want:.1f} % (memory)"
    texts = [b.text for b in section.blocks if isinstance(b, Text)]
    assert any("mpiatlas copy kernel (src/kernels/stream.c; no likwid-bench) copy" in t for t in texts)
    # Each level's rate names the variant that measured it.
    kernels = limits.level_kernels(record)
    assert any(f"memory {fmt_num(limits.level_limits(record)['memory'])} ({kernels['memory']})" in t for t in texts)
    assert not [b for b in section.blocks if isinstance(b, Notice) and "copy bandwidth" in b.text]


def test_both_tools_count_bytes_copied() -> None:
    """"% of limit" sets a message bandwidth (message bytes per second, 10^6 B/s) against the copy rate:
    both tools' figures must count each byte copied once. likwid-bench's MByte/s counts the volume of
    both arrays (read + written), so the limits record halves it; the copy kernel counts one array per
    pass (``array_bytes`` = working set / 2)."""
    text = (DATA / "likwid_bench_copy_mem_avx_256MiB.txt").read_text()
    field = {k.strip(): v.split()[0] for k, _, v in (line.partition(":") for line in text.splitlines()) if v.strip()}
    size, iterations, seconds = int(field["Size (Byte)"]), int(field["Iterations"]), float(field["Time"])
    assert int(field["Data volume (Byte)"]) == size * iterations  # both arrays, every iteration
    assert limits.parse_mbytes(text) == pytest.approx(size * iterations / seconds / 1e6, rel=1e-4)
    copied_MBps = (size // 2) * iterations / seconds / 1e6  # one array's bytes per iteration
    assert copied_MBps == pytest.approx(11912.30 / 2, rel=1e-4)  # what level_limits reports for it
    _, records = copy_kernel.parse(VARIANTS.read_text())
    assert all(r["array_bytes"] == r["working_set_bytes"] // 2 for r in records)


def test_a_native_build_is_cached_per_cpu_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-march=native binaries in a home directory shared by nodes of several kinds: one per cpu kind."""
    epyc = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 avx512f\ncpu MHz\t\t: 2595.1\n\n" \
           "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 avx512f\n"
    older = epyc.replace(" avx512f", "").replace("cpu MHz\t\t: 2595.1", "cpu MHz\t\t: 1800.0")
    (tmp_path / "a").write_text(epyc)
    (tmp_path / "b").write_text(older)
    (tmp_path / "c").write_text(epyc.replace("2595.1", "3100.7"))  # only the clock differs: the same build
    a, b, c = (copy_kernel.cpu_identity(tmp_path / n) for n in "abc")
    assert a == "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 avx512f" and a == c and a != b
    cc = copy_kernel.compiler()
    assert cc is not None
    digests = set()
    for identity in (a, b):
        # The identity is read where every node tool is built (node.c_tool).
        monkeypatch.setattr(c_tool, "cpu_identity", lambda identity=identity: identity)
        digests.add(copy_kernel._digest(cc))
    assert len(digests) == 2
