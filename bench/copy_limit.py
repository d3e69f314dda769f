#!/usr/bin/env python3
"""The copy limit beside the machine: mpiatlas's copy kernel, glibc memcpy and likwid-bench per level.

On the working sets ``mpiatlas limits`` measures (:func:`mpiatlas.node.copy_kernel.working_sets`: half of
each cache level of this node, read from sysfs, and a memory set past the largest cache), one core
pinned to the same cpu, it sets side by side:

  copy kernel   src/kernels/stream.c as ``mpiatlas limits`` builds it (-O3 -march=native), best variant
                per level (loop / memcpy / nt), named;
  memcpy        glibc memcpy from the same source built plain ``cc -O2`` (``--variants memcpy``): the
                reference the issue measured (issue 33);
  likwid-bench  ``copy<simd>`` (and ``copy_mem<simd>``, non-temporal stores, for memory), where installed.

Every figure is MB/s of bytes *copied* (likwid-bench's ``MByte/s`` counts read + write and is halved, as
:mod:`mpiatlas.node.limits` does), best over ``--rounds`` rounds of ``--repeats`` runs each, the tools interleaved level by level:
the machine is shared, and other work only ever lowers a copy rate. Ratios are of these bests. The
target (issue 33): copy kernel ≥ 0.8 × memcpy at every level.

  .venv/bin/python bench/copy_limit.py [--rounds 5] [--repeats 5] [--cpu 0] [--json out.json]

Measured 2026-12-04 on the 2-core AMD EPYC VM (KVM, AVX-512; L1d 32 KiB, L2 1 MiB, L3 32 MiB per sysfs; gcc 12.2,
likwid-bench 5.2.2 from Debian), 5 rounds x 5 runs, other sessions' work on the node (load 6-20, cpu pressure
~80 %). GB/s copied:

  level   working set  copy kernel (variant)  memcpy -O2  likwid-bench          kern/memcpy  kern/likwid
  L1      16 KiB       116.8 (loop)           104.7       115.3 copy_avx512        1.12         1.01
  L2      512 KiB       57.2 (loop)            57.1        56.5 copy_avx512        1.00         1.01
  L3      16 MiB        33.0 (loop)            29.7        31.2 copy_avx512        1.11         1.06
  memory  256 MiB       16.3 (nt)              10.0        15.4 copy_mem_avx512    1.63         1.06

  every variant: L1 loop 116.8 / memcpy 104.7 / nt 22.3; L2 57.2 / 57.0 / 28.1; L3 33.0 / 32.1 / 28.0; memory
  10.7 / 10.2 / 16.3. The old scalar -O2 loop measured 13.4 / 12.2 / 13.1 / 13.2 GB/s here (issue 33). No variant
  wins everywhere: the loop (or memcpy) in cache, non-temporal stores from memory. On this machine the load swings
  within seconds: an earlier version of this bench that ran each tool over all levels in turn once gave 0.61 for
  kernel/memcpy in L1 and L2, with the kernel's own memcpy variant at half the -O2 build's (the same glibc
  function), which is why the tools now alternate level by level and round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mpiatlas.node import copy_kernel, limits

TARGET = 0.8


def run_stream(binary: Path, sets: list[dict[str, Any]], cpu: int, repeats: int,
               variants: list[str] | None) -> dict[str, dict[str, Any]]:
    """level -> its best-variant entry (copy_kernel.best_level_entry) from one run of the kernel."""
    command = copy_kernel.argv(binary, [s["working_set_bytes"] for s in sets], cpu, repeats, variants=variants)
    done = subprocess.run(command, capture_output=True, text=True, timeout=copy_kernel.RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise copy_kernel.CopyKernelError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-300:]}")
    _, records = copy_kernel.parse(done.stdout)
    out = {}
    for s in sets:
        mine = [r for r in records if r["working_set_bytes"] == s["working_set_bytes"]]
        out[s["level"]] = copy_kernel.best_level_entry(s, mine)
    return out


def build_o2(cc: str, into: Path) -> Path:
    """stream.c built plain ``-O2``: its memcpy variant is glibc's memcpy called as -O2 code calls it."""
    binary = into / "stream-O2"
    command = [cc, "-O2", '-DBUILD_FLAGS="-O2"', "-o", str(binary), str(copy_kernel.source_path())]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise copy_kernel.CopyKernelError(f"{' '.join(command)} failed: {done.stderr[-300:]}")
    return binary


def likwid_level(run: dict[str, Any], suffix: str, repeats: int) -> tuple[float, str]:
    """(best MB/s copied, kernel) of likwid-bench on the level's working set; memory: the better of
    ``copy`` and ``copy_mem`` (non-temporal stores), as the limits record takes it."""
    kernels = [f"copy{suffix}"] + ([f"copy_mem{suffix}"] if run["level"] == limits.MEMORY else [])
    best = (0.0, "")
    for kernel in kernels:
        argv = limits.bench_argv(kernel, run["working_set_bytes"])
        # likwid counts read + write: bytes copied are half its MByte/s.
        rate = max(limits.parse_mbytes(limits.run_command(argv)) for _ in range(repeats)) / 2
        best = max(best, (rate, kernel))
    return best


def measure(rounds: int, repeats: int, cpu: int) -> list[dict[str, Any]]:
    caches = limits.cache_sizes()
    sets = copy_kernel.working_sets(caches, copy_kernel.memory_available())
    cc = copy_kernel.compiler()
    if cc is None:
        raise SystemExit("no C compiler on PATH: nothing to measure the copy kernel with")
    kernel_bin = copy_kernel.build()
    suffix = limits.simd_suffix(limits.read_cpuinfo())
    has_likwid = shutil.which(limits.LIKWID_BENCH) is not None
    rows = {s["level"]: {"level": s["level"], "cache_bytes": s["cache_bytes"], "working_set_bytes": s["working_set_bytes"],
                         "kernel_MBps": 0.0, "kernel_variant": "", "variants_MBps": {}, "memcpy_MBps": 0.0,
                         "likwid_MBps": None, "likwid_kernel": None} for s in sets}
    with tempfile.TemporaryDirectory(prefix="copy-limit-") as tmp:
        o2_bin = build_o2(cc, Path(tmp))
        # Interleaved level by level, round after round: on a shared machine the load changes within
        # seconds, and each tool should meet the same moments on each working set.
        for _ in range(rounds):
            for s in sets:
                row = rows[s["level"]]
                entry = run_stream(kernel_bin, [s], cpu, repeats, None)[s["level"]]
                for variant, rate in entry["variants_copy_MBps"].items():
                    row["variants_MBps"][variant] = max(row["variants_MBps"].get(variant, 0.0), rate)
                row["kernel_variant"], row["kernel_MBps"] = max(row["variants_MBps"].items(), key=lambda kv: kv[1])
                memcpy = run_stream(o2_bin, [s], cpu, repeats, ["memcpy"])[s["level"]]
                row["memcpy_MBps"] = max(row["memcpy_MBps"], memcpy["copy_MBps"])
                if has_likwid:
                    rate, kernel = likwid_level(s, suffix, repeats)
                    if row["likwid_MBps"] is None or rate > row["likwid_MBps"]:
                        row["likwid_MBps"], row["likwid_kernel"] = rate, kernel
    return list(rows.values())


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'level':<7} {'working set':>11} {'copy kernel':>12} {'variant':<7} {'memcpy -O2':>11} "
            f"{'likwid-bench':>13} {'likwid kernel':<18} {'kern/memcpy':>11} {'kern/likwid':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        likwid = r["likwid_MBps"]
        ratio_l = f"{r['kernel_MBps'] / likwid:.2f}" if likwid else "-"
        lines.append(
            f"{r['level']:<7} {_mib(r['working_set_bytes']):>11} {r['kernel_MBps'] / 1e3:>9.1f} GB/s {r['kernel_variant']:<7} "
            f"{r['memcpy_MBps'] / 1e3:>6.1f} GB/s {(f'{likwid / 1e3:.1f} GB/s' if likwid else '-'):>13} "
            f"{(r['likwid_kernel'] or '-'):<18} {r['kernel_MBps'] / r['memcpy_MBps']:>11.2f} {ratio_l:>11}")
    variants = "; ".join(f"{r['level']}: " + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in r["variants_MBps"].items())
                         for r in rows)
    lines.append(f"every variant of the copy kernel (GB/s copied): {variants}")
    worst = min(r["kernel_MBps"] / r["memcpy_MBps"] for r in rows)
    lines.append(f"lowest copy kernel / memcpy: {worst:.2f} (target >= {TARGET})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the best of all is kept")
    p.add_argument("--repeats", type=int, default=5, help="runs per tool, level and round")
    p.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)),
                   help="cpu the kernels are pinned to (likwid-bench -w S0 takes the first of socket 0)")
    p.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = p.parse_args(argv)
    rows = measure(args.rounds, args.repeats, args.cpu)
    print(table(rows))
    with open("/proc/loadavg") as f:
        print(f"load average during the bench: {' '.join(f.read().split()[:3])}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
