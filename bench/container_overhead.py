#!/usr/bin/env python3
"""Container overhead of the hybrid model: 4-byte IMB PingPong latency, native vs hybrid.

Same MPI (Intel MPI 2021.16 from impi-rt), same transport (I_MPI_FABRICS=shm), same pinning
(ranks on cores 0 and 1), same IMB binary release; only the way the ranks start differs:

  native      <host mpirun> -n 2 <host>/bin/IMB-MPI1 PingPong -msglog 2:2
  hybrid      <host mpirun> -n 2 apptainer exec intelmpi.sif IMB-MPI1 PingPong -msglog 2:2
  container   apptainer exec intelmpi.sif mpirun -n 2 IMB-MPI1 ...   (with --container-only)

The machine is shared and noisy: every mode is launched ``--launches`` times per round
(modes interleaved, order alternating), the per-round minimum is kept, and the
median over ``--rounds`` of those minima is reported ("median of min"), with the ratio
hybrid / native measured in this one run.

  .venv/bin/python bench/container_overhead.py [--image results/images/intelmpi.sif] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mpiatlas.stacks import containers
from mpiatlas.stacks import LaunchSpec, get_stack

REPO = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s*$")
PINS = [0, 1]


def default_image() -> Path:
    for candidate in (REPO / "results/images/intelmpi.sif", Path("/tmp/mpiatlas-images/intelmpi.sif")):
        if candidate.is_file():
            return candidate
    return REPO / "results/images/intelmpi.sif"


def latency_4b(output: str) -> float:
    if "Benchmarking PingPong" not in output or "Invalid benchmark name" in output:
        raise RuntimeError(f"no IMB PingPong output:\n{output[-2000:]}")
    for line in output.splitlines():
        m = _ROW.match(line)
        if m and int(m[1]) == 4:
            return float(m[3])
    raise RuntimeError(f"no 4-byte row in IMB output:\n{output[-2000:]}")


def run(argv: list[str], env: dict[str, str], timeout: float = 120) -> str:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}:\n{text[-2000:]}")
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", type=Path, default=default_image())
    ap.add_argument("--host-prefix", type=Path, default=REPO / ".stacks/intelmpi")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--launches", type=int, default=3, help="launches per mode per round (min kept)")
    ap.add_argument("--no-container-only", action="store_true", help="skip the MPI-inside-the-image mode")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    args = ap.parse_args()

    host = get_stack("intelmpi", args.host_prefix)
    if not host.is_installed():
        print(f"installing the Intel MPI host stack into {args.host_prefix}", file=sys.stderr)
        host.install()
    host_version = host.version()
    info = containers.preflight("intelmpi", host_version, args.image, host_stack=host)
    imb = ["PingPong", "-msglog", "2:2"]
    spec = LaunchSpec(np=2, transport="shm", pins=PINS)

    native = host.launch([str(host.imb_binary()), *imb], spec)
    hybrid = host.launch(containers.exec_argv(args.image, ["IMB-MPI1", *imb]), spec)
    host_env_native = host.env(dict(os.environ) | native.env)
    host_env_hybrid = host.env(dict(os.environ) | hybrid.env)
    modes: dict[str, tuple[list[str], dict[str, str]]] = {
        "native": (native.argv, host_env_native),
        "hybrid": (hybrid.argv, host_env_hybrid),
    }
    if not args.no_container_only:
        # Same knobs, but the image's own mpirun (hydra) starts the ranks inside one container.
        env = dict(os.environ) | native.env
        modes["container"] = (containers.exec_argv(args.image, ["mpirun", "-n", "2", "IMB-MPI1", *imb]), env)

    # The knobs really applied: shm, ranks on cores 0 and 1 (I_MPI_DEBUG=5 evidence).
    for name, (argv, env) in modes.items():
        out = run(argv, env)
        binding, transport = host.obtained_binding(out), host.obtained_transport(out)
        if binding != {0: {0}, 1: {1}} or transport != "shm":
            raise SystemExit(f"{name}: expected shm on cores 0,1; got transport {transport}, binding {binding}")

    per_round: dict[str, list[float]] = {m: [] for m in modes}
    every: dict[str, list[float]] = {m: [] for m in modes}
    start = time.monotonic()
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        samples: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(args.launches):
            for name in order:
                argv, env = modes[name]
                samples[name].append(latency_4b(run(argv, env)))
        for name in modes:
            per_round[name].append(min(samples[name]))
            every[name].extend(samples[name])
    result = {m: statistics.median(v) for m, v in per_round.items()}

    print(f"image      {args.image} (sha256 {containers.image_digest(args.image)[:16]}..., "
          f"{info.kind} {info.version})")
    print(f"host       {host_version} at {host.prefix}")
    print(f"transport  I_MPI_FABRICS=shm, pinned to cores {PINS}; {args.rounds} rounds x {args.launches} "
          f"launches per mode ({time.monotonic() - start:.0f} s)")
    print(f"{'mode':<10} {'median of min [us]':>18} {'min':>7} {'max':>7}  per-round minima")
    for name, value in result.items():
        mins = " ".join(f"{x:.2f}" for x in per_round[name])
        print(f"{name:<10} {value:>18.3f} {min(every[name]):>7.2f} {max(every[name]):>7.2f}  {mins}")
    ratio = result["hybrid"] / result["native"]
    print(f"hybrid / native = {ratio:.3f}")
    if "container" in result:
        print(f"container / native = {result['container'] / result['native']:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"image": str(args.image), "host_version": host_version,
                                         "per_round_min_us": per_round, "all_us": every,
                                         "median_of_min_us": result, "ratio_hybrid_native": ratio},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
