"""Each exported tuning file is loaded by its stack: a real 2-rank MPI_Bcast picks the file's algorithm.

* Open MPI (Debian 4.1, PyPI 5.0): the release builds compile coll_tuned's reader messages out
  (``OPAL_OUTPUT`` is debug-only), so ``coll_tuned``/``coll_base_verbose`` print nothing about the
  file. The evidence is the stack's own code path instead: the LD_PRELOAD probe of
  tests/data/ompi_bcast_probe names the ``ompi_coll_base_bcast_intra_*`` function coll/tuned called.
  The file picks binomial for 1 KiB..64 KiB at P=2, where the fixed rules run basic_linear.
* MPICH 5.0 (PyPI) and 4.0 (Debian): no MPIR algorithm prints its name. The files pick
  ``MPIR_Bcast_intra_smp`` for 1 KiB..2 KiB only (the CH4 tree hands that range to MPIR, device
  collectives on); on a flat communicator that algorithm asserts (``bcast_intra_smp.c``), so the
  1 KiB broadcast aborts naming it while 4 KiB (outside the range) runs: the file's choice, by size.
  That the CH4 tree keeps the device collectives outside its ranges shows on MPICH 5.0: with an MPIR
  tree asserting over a wider range and POSIX's release_gather from the first call
  (``MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD=0``; by default the first 5 calls fall back to MPIR), a
  size outside the CH4 ranges runs without reaching MPIR, while ``MPIR_CVAR_BCAST_DEVICE_COLLECTIVE=0``
  (the former export) reaches it. Debian's 4.0.2 (ch4:ucx) reaches MPIR there either way.
* Intel MPI 2021.16: ``I_MPI_DEBUG=6`` prints the I_MPI_ADJUST value it read, not the algorithm it
  ran (checked; no debug level names the preset): only the value read back is asserted here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, require_infra
from mpiatlas.tuning import intelmpi_env, mpich_json, openmpi_rules
from mpiatlas.tuning.decide import Block, Point, SeriesDecision, SizeRange

PROBE = Path(__file__).parent / "data" / "ompi_bcast_probe"
STACKS = REPO / ".stacks"


def _series(kind: str, version: str, alg: str, lo: int = 1024, hi: int = 65535) -> SeriesDecision:
    def pt(b: int, a: str) -> Point:
        return Point(2, b, a, a, 0.8, 0.78, 0.82, 10, 10, "x")
    ranges = (SizeRange(0, lo - 1, "default", (pt(0, "default"),)), SizeRange(lo, hi, alg, (pt(lo, alg),)),
              SizeRange(hi + 1, hi + 1, "default", (pt(hi + 1, "default"),)))
    return SeriesDecision(kind, kind, version, "shm", "bcast", "Bcast", [], [Block(2, 2, (2,), ranges)])


def _root_args() -> list[str]:
    return ["--allow-run-as-root"] if os.geteuid() == 0 else []


OPENMPI = {"4.1": (Path("/usr/bin/mpicc.openmpi"), Path("/usr/bin/mpirun.openmpi"), "4.1.4"),
           "5.0": (STACKS / "openmpi" / "bin" / "mpicc", STACKS / "openmpi" / "bin" / "mpirun", "5.0.11")}


@pytest.mark.infra
@pytest.mark.parametrize("series", sorted(OPENMPI))
def test_open_mpi_runs_the_rules_file_algorithm(series: str, tmp_path: Path) -> None:
    mpicc, mpirun, version = OPENMPI[series]
    require_infra(mpicc.exists() and mpirun.exists(), f"Open MPI {series} ({mpirun})")
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "probe.so"), str(PROBE / "probe.c"), "-ldl"], check=True)
    subprocess.run([str(mpicc), "-o", str(tmp_path / "bcast"), str(PROBE / "bcast_once.c")], check=True)
    rules = tmp_path / "tuned.rules"
    rules.write_text(openmpi_rules.rules_text([_series("openmpi", version, "binomial")]))

    def called(nbytes: int, with_file: bool) -> str:
        argv = [str(mpirun), *_root_args(), "-np", "2", "-x", f"LD_PRELOAD={tmp_path / 'probe.so'}"]
        if with_file:
            argv += openmpi_rules.mca_args(str(rules))
        proc = subprocess.run([*argv, str(tmp_path / "bcast"), str(nbytes)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        names = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("BCAST_ALGORITHM ")]
        assert len(names) == 1, proc.stderr[-2000:]
        return names[0]

    # Inside the file's range: binomial, which the fixed rules do not pick there; below it: the fixed rules' choice.
    assert called(4096, False) != "ompi_coll_base_bcast_intra_binomial"
    assert called(4096, True) == "ompi_coll_base_bcast_intra_binomial"
    assert called(512, True) == called(512, False)


MPICH = {"5.0": (STACKS / "mpich" / "bin" / "mpicc", STACKS / "mpich" / "bin" / "mpirun", STACKS / "mpich" / "lib",
                 "libmpi.so.*"),
         "4.0": (Path("/usr/bin/mpicc.mpich"), Path("/usr/bin/mpirun.mpich"), Path("/usr/lib/x86_64-linux-gnu"),
                 "libmpich.so.*")}


@pytest.mark.infra
@pytest.mark.parametrize("build", sorted(MPICH))
def test_mpich_runs_the_json_files_algorithm(build: str, tmp_path: Path) -> None:
    """Both exported trees loaded as the env file says, device collectives left on (the default)."""
    mpicc, mpirun, libdir, pattern = MPICH[build]
    libs = sorted((f for f in libdir.glob(pattern) if f.is_file()), key=lambda f: f.stat().st_size, reverse=True)
    require_infra(bool(libs) and mpicc.exists() and mpirun.exists(), f"MPICH {build} ({mpirun})")
    subprocess.run([str(mpicc), "-o", str(tmp_path / "bcast"), str(PROBE / "bcast_once.c")], check=True)
    series = [_series("mpich", "5.0.2", "smp", 1024, 2047)]
    trees = mpich_json.builtin_trees(libs[0])
    mpir, ch4 = tmp_path / "tuned.json", tmp_path / "tuned.ch4.json"
    mpir.write_text(mpich_json.json_text(series, trees["mpir"]))
    ch4.write_text(mpich_json.json_text(series, trees["ch4"], level="ch4"))
    env = {**os.environ, **mpich_json.env_vars(str(mpir), str(ch4))}
    assert not any("DEVICE_COLLECTIVE" in name for name in env)

    def run(nbytes: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(mpirun), "-np", "2", str(tmp_path / "bcast"), str(nbytes)],
                              capture_output=True, text=True, timeout=120, check=False, env=env)

    inside, outside = run(1024), run(4096)
    assert "bcast_intra_smp.c" in inside.stdout + inside.stderr, inside.stderr[-2000:]
    assert outside.returncode == 0 and "Assertion" not in outside.stdout + outside.stderr, outside.stderr[-2000:]
    # Each file is parsed at MPI_Init: a malformed one is refused by the selection parser.
    for path in (mpir, ch4):
        good = path.read_text()
        path.write_text('{"collective=bcast": {')
        broken = run(4096)
        assert broken.returncode != 0 and "csel.c" in broken.stdout + broken.stderr, broken.stderr[-2000:]
        path.write_text(good)


@pytest.mark.infra
def test_mpich_ch4_tree_keeps_device_collectives_outside_its_ranges(tmp_path: Path) -> None:
    mpicc, mpirun, libdir, pattern = MPICH["5.0"]
    libs = sorted((f for f in libdir.glob(pattern) if f.is_file()), key=lambda f: f.stat().st_size, reverse=True)
    require_infra(bool(libs) and mpicc.exists() and mpirun.exists(), f"MPICH 5.0 ({mpirun})")
    subprocess.run([str(mpicc), "-o", str(tmp_path / "bcast"), str(PROBE / "bcast_once.c")], check=True)
    trees = mpich_json.builtin_trees(libs[0])
    mpir, ch4 = tmp_path / "wide.json", tmp_path / "narrow.ch4.json"
    # MPIR: the asserting smp over 1 KiB..8 KiB; CH4: only 1 KiB..2 KiB handed to MPIR.
    mpir.write_text(mpich_json.json_text([_series("mpich", "5.0.2", "smp", 1024, 8191)], trees["mpir"]))
    ch4.write_text(mpich_json.json_text([_series("mpich", "5.0.2", "smp", 1024, 2047)], trees["ch4"], level="ch4"))
    first = {"MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD": "0"}

    def aborted_in_smp(nbytes: int, extra: dict[str, str]) -> bool:
        proc = subprocess.run([str(mpirun), "-np", "2", str(tmp_path / "bcast"), str(nbytes)], capture_output=True,
                              text=True, timeout=120, check=False, env={**os.environ, **first, **extra})
        smp = "bcast_intra_smp.c" in proc.stdout + proc.stderr
        assert smp or proc.returncode == 0, proc.stderr[-2000:]
        return smp

    both = mpich_json.env_vars(str(mpir), str(ch4))
    device_off = {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(mpir), "MPIR_CVAR_DEVICE_COLLECTIVES": "percoll",
                  "MPIR_CVAR_BCAST_DEVICE_COLLECTIVE": "0"}
    assert aborted_in_smp(1024, both) and aborted_in_smp(1024, device_off)
    # 4 KiB: outside the CH4 ranges the device collective runs (MPIR never searched), unlike device off.
    assert not aborted_in_smp(4096, both)
    assert aborted_in_smp(4096, device_off)


@pytest.mark.infra
def test_intel_mpi_reads_the_adjust_value(tmp_path: Path) -> None:
    root = STACKS / "intelmpi"
    require_infra((root / "bin" / "IMB-MPI1").exists(), f"Intel MPI with IMB under {root}")
    env_vars = intelmpi_env.env_vars([_series("intelmpi", "2021.16", "id3")])
    env = {**os.environ, **env_vars, "I_MPI_ROOT": str(root), "FI_PROVIDER_PATH": str(root / "lib"),
           "PATH": f"{root / 'bin'}:{os.environ['PATH']}", "LD_LIBRARY_PATH": str(root / "lib"),
           "I_MPI_FABRICS": "shm", "I_MPI_DEBUG": "6"}
    proc = subprocess.run(["mpirun", "-np", "2", "IMB-MPI1", "Bcast", "-msglog", "10:12", "-iter", "20"],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"I_MPI_ADJUST_BCAST={env_vars['I_MPI_ADJUST_BCAST']}" in proc.stdout + proc.stderr
