"""The C kernels (src/kernels) on real MPI stacks, and their output parser.

Infrastructure tests build ring/matsum/jacobi/pingpong/coll with each stack's compiler wrapper
(``mpiatlas.programs.build.build_kernels``), launch them for P = 1..4 (P = 4 oversubscribes
the 2 cores) and check the results against what the test computes independently:
the ring's closed form, a tiling of the matrix by the matsum blocks, a numpy
Jacobi on the same global grid, the ping-pong's echoed payload (and a Hockney λ and B
within physical bounds) and the collectives' closed forms. Parser tests read real captured outputs in
tests/data/kernels/ (see README there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import REPO, require_infra
from mpiatlas.matrix.kernel_sweeps import dims_create
from mpiatlas.programs import kernel_names
from mpiatlas.programs.build import KernelBuildError, build_kernels, mpicc_make_value
from mpiatlas.parsers.kernels import KernelParseError, parse_kernel_file, parse_kernel_output
from mpiatlas.stacks import Launch, LaunchSpec, get_stack

DATA = Path(__file__).parent / "data" / "kernels"
HOST_IMPI = REPO / ".stacks" / "intelmpi"
CORES = os.cpu_count() or 2
NPS = (1, 2, 3, 4)
STACKS = ("intelmpi", "openmpi")
# Hybrid runs put more threads than cores: block instead of spinning at OpenMP barriers.
OMP_ENV = {"OMP_WAIT_POLICY": "passive"}


# --------------------------------------------------------------------------- stacks
class DebianOpenMPI:
    """Debian's Open MPI 4.1 (``mpicc.openmpi``/``mpirun.openmpi``), launched directly.

    TODO(stacks): replace with ``get_stack("openmpi", "/usr", source="system")`` once
    src/mpiatlas/stacks/openmpi.py is registered in ``mpiatlas.stacks.STACK_KINDS``
    (being written by another engineer); build_kernels/launch only need mpicc(), env()
    and launch().
    """

    kind = "openmpi"

    def available(self) -> bool:
        # Looked up on PATH, as make and the launch will: a file under /usr/bin that PATH hides
        # (a fresh-machine PATH) must count as absent, or the build fails instead of skipping.
        return all(shutil.which(name) is not None for name in ("mpicc.openmpi", "mpirun.openmpi"))

    def mpicc(self) -> list[str]:
        return ["mpicc.openmpi"]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return dict(os.environ if base is None else base)

    def launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        argv = ["mpirun.openmpi", "--allow-run-as-root", "-np", str(spec.np),
                "--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
        if spec.oversubscribe:
            argv.append("--oversubscribe")
        return Launch(argv=[*argv, *program], env={})


class DebianMPICH(DebianOpenMPI):
    """Debian's MPICH 4.0 (compile check and a 2-rank run; oversubscribed it is unusable here).

    TODO(stacks): replace with ``get_stack("mpich", "/usr", source="system")`` once registered.
    """

    kind = "mpich"

    def available(self) -> bool:
        return all(shutil.which(name) is not None for name in ("mpicc.mpich", "mpiexec.mpich"))

    def mpicc(self) -> list[str]:
        return ["mpicc.mpich"]

    def launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        return Launch(argv=["mpiexec.mpich", "-n", str(spec.np), *program], env={})


def _installing(prefix: Path) -> bool:
    """Some process (another engineer's install) is working inside ``prefix``."""
    needle = str(prefix).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _intel_stack():
    stack = get_stack("intelmpi", HOST_IMPI)
    deadline = time.monotonic() + 900
    while not (stack.is_installed() and (stack.prefix / "bin" / "mpicc").exists()):
        if _installing(HOST_IMPI) and time.monotonic() < deadline:
            time.sleep(10)  # someone is installing it right now: wait
            continue
        stack.install()
    require_infra(stack.is_installed() and (stack.prefix / "bin" / "mpicc").exists(),
                  f"Intel MPI (impi-rt + impi-devel) at {HOST_IMPI}")
    return stack


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """stack kind -> (stack, {kernel: binary}); each stack is installed/built once per session."""
    cache: dict[str, tuple[object, dict[str, Path]]] = {}

    def get(kind: str):
        if kind not in cache:
            if kind == "intelmpi":
                stack = _intel_stack()
            else:
                stack = {"openmpi": DebianOpenMPI, "mpich": DebianMPICH}[kind]()
                require_infra(stack.available(), f"Debian {kind} (apt: {kind} dev packages)")
            cache[kind] = (stack, build_kernels(stack, tmp_path_factory.mktemp(f"kernels-{kind}")))
        return cache[kind]

    return get


def run_kernel(stack, binary: Path, args: list[str], np_: int, *, env: dict[str, str] | None = None,
               timeout: float = 120) -> pl.DataFrame:
    spec = LaunchSpec(np=np_, transport="shm", oversubscribe=np_ > CORES)
    launch = stack.launch([str(binary), *args], spec)
    proc = subprocess.run(launch.argv, env=stack.env() | launch.env | (env or {}), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{launch.argv} exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}"
    frames = parse_kernel_output(proc.stdout, f"{stack.kind}:{binary.name}:np{np_}")
    assert set(frames) == {binary.name}, proc.stdout[-2000:]
    frame = frames[binary.name]
    assert frame["size"].unique().to_list() == [np_]
    return frame


# --------------------------------------------------------------------------- ring
def ring_closed_form(rank: int, size: int) -> tuple[int, int]:
    """Each message visits every rank once; the receivers add (subtract) their ranks."""
    total = size * (size - 1) // 2
    return rank + total, -(rank + total)


@pytest.mark.infra
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("kind", STACKS)
def test_ring_closed_form_all_variants(built, kind: str, np_: int) -> None:
    stack, bins = built(kind)
    # 256 KiB forces the rendezvous protocol: the odd/even ordering must not deadlock.
    df = run_kernel(stack, bins["ring"], ["--variant", "all", "--streams", "1,2", "--bytes", "4,262144",
                                          "-i", "3", "-w", "1"], np_)
    assert df.height == np_ * 3 * 2 * 2  # ranks x variants x streams x sizes
    assert set(df["variant"]) == {"blocking", "ssend", "nonblocking"}
    for row in df.iter_rows(named=True):
        left, right = ring_closed_form(row["rank"], np_)
        assert row["msgleft"] == row["expected_left"] == left, row
        if row["streams"] == 2:
            assert row["msgright"] == row["expected_right"] == right, row
        else:
            assert row["msgright"] is None and row["expected_right"] is None
        assert row["payload_intact"] and row["valid"], row
        assert row["left"] == (row["rank"] - 1) % np_ and row["right"] == (row["rank"] + 1) % np_
        assert row["time_us"] > 0
    assert df["mpi_library"][0]  # the header (MPI_Get_library_version) reached every row


# --------------------------------------------------------------------------- matsum
def assert_tiles(df: pl.DataFrame, dims: tuple[int, int, int]) -> None:
    """Every (topo, dist) record set covers the global matrix exactly once."""
    for (topo, dist), part in df.group_by(["topo", "dist"]):
        cover = np.zeros(dims, dtype=np.int32)
        for row in part.iter_rows(named=True):
            (x0, y0, z0), (nx, ny, nz) = row["local_offset"], row["local_dims"]
            cover[x0:x0 + nx, y0:y0 + ny, z0:z0 + nz] += 1
            assert row["local_elements"] == nx * ny * nz
            if dist == "slab":
                assert (ny, nz) == dims[1:] or nx == 0
        assert (cover == 1).all(), f"topo {topo} {dist}: blocks do not tile {dims}"


@pytest.mark.infra
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("kind", STACKS)
def test_matsum_equals_serial(built, kind: str, np_: int) -> None:
    stack, bins = built(kind)
    df = run_kernel(stack, bins["matsum"], ["--dims", "30,20,10", "--topo", "1,2,3", "--dist", "all",
                                            "-i", "2", "-w", "1"], np_)
    assert df.height == np_ * 6
    assert df["valid"].all() and (df["mismatches"] == 0).all() and (df["max_abs_err"] == 0.0).all()
    assert_tiles(df, (30, 20, 10))
    if np_ >= 3:
        # Non-divisible on every split axis: 31 rows over P slabs, 13 z-planes over P blocks.
        df = run_kernel(stack, bins["matsum"], ["--dims", "31,22,13", "--topo", "3", "--procdims", f"1,1,{np_}",
                                                "--dist", "all", "-i", "2", "-w", "0"], np_)
        assert df.height == np_ * 2 and df["valid"].all() and (df["mismatches"] == 0).all()
        assert_tiles(df, (31, 22, 13))
        block = df.filter(pl.col("dist") == "block")
        assert len(set(map(tuple, block["local_dims"].to_list()))) > 1  # really uneven blocks


# --------------------------------------------------------------------------- jacobi
def numpy_jacobi_residuals(g: tuple[int, int, int], iterations: int) -> list[float]:
    """The kernel's problem, independently: same initial values, boundary and sweep."""
    gx, gy, gz = g
    i, j, k = np.meshgrid(np.arange(-1, gx + 1), np.arange(-1, gy + 1), np.arange(-1, gz + 1), indexing="ij")
    x, y, z = (i + 1.0) / (gx + 1.0), (j + 1.0) / (gy + 1.0), (k + 1.0) / (gz + 1.0)
    u = 1.0 + x * x - 0.5 * y + 0.25 * x * y * z + 0.5 * z * z
    inner = (slice(1, -1),) * 3
    u[inner] = ((31 * i + 17 * j + 7 * k) % 13)[inner] / 13.0
    residuals = []
    for _ in range(iterations):
        new = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
               + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]) / 6.0
        residuals.append(float(((new - u[inner]) ** 2).sum()))
        u[inner] = new
    return residuals


@pytest.mark.infra
@pytest.mark.parametrize("threads", (1, 2), ids=("mpi", "hybrid2"))
@pytest.mark.parametrize("mode", ("weak", "strong"))
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("kind", STACKS)
def test_jacobi_matches_serial(built, kind: str, np_: int, mode: str, threads: int) -> None:
    stack, bins = built(kind)
    size = ["--L", "10"] if mode == "weak" else ["--N", "21"]
    df = run_kernel(stack, bins["jacobi"], ["--mode", mode, *size, "--threads", str(threads),
                                            "-i", "12", "-w", "2", "--check"], np_, env=OMP_ENV)
    assert df.height == np_
    assert df["valid"].all(), df.select("rank", "max_rel_diff")
    assert (df["max_rel_diff"] <= 1e-12).all() and (df["check_iterations"] == 10).all()
    assert (df["threads"] == threads).all() and df["thread_cpus"].list.len().to_list() == [threads] * np_
    g = tuple(df["global_dims"][0])
    if mode == "strong":
        assert g == (21, 21, 21)
    else:
        # Equal work (issue #34): every core owns L^3 points, so the grid is L times the core grid
        # MPI_Dims_create(P*T) (the rank grid itself for T = 1); a rank of T threads owns T*L^3.
        px, py, pz = df["procdims"][0]
        cx, cy, cz = dims_create(np_ * threads)
        assert g == (10 * cx, 10 * cy, 10 * cz) and px * py * pz == np_
    assert sum(df["local_points"]) == g[0] * g[1] * g[2]
    reference = numpy_jacobi_residuals(g, 10)
    for row in df.iter_rows(named=True):
        assert row["residuals"] == df["residuals"][0].to_list()  # one global value per iteration
        rel = np.abs(np.array(row["residuals"]) - reference) / np.array(reference)
        assert rel.max() <= 1e-12, (row["rank"], rel.max())
        assert row["residuals"][0] > row["residuals"][-1] > 0  # non-trivial, decreasing
        assert row["messages"] == sum(n >= 0 for n in row["neighbours"])
        assert row["mlups_rank"] > 0 and row["mlups_total"] > 0


# --------------------------------------------------------------------------- pingpong
def pingpong_rank0(df: pl.DataFrame) -> pl.DataFrame:
    return df.filter(pl.col("rank") == 0).sort("bytes")


@pytest.mark.infra
def test_pingpong_openmpi_real_latency_and_bandwidth(built) -> None:
    """A real 2-rank sweep to 4 MiB with Debian Open MPI (shared memory): the Hockney fit of rank 0's
    half round trips gives λ > 0, and bandwidths stay within what one node can do."""
    from mpiatlas.models.hockney import fit_hockney

    stack, bins = built("openmpi")
    df = run_kernel(stack, bins["pingpong"], ["-m", "0:22", "-i", "200", "-w", "20", "--iterations-large", "20",
                                              "--warmup-large", "3", "--time-budget-ms", "30"], 2)
    sizes = [0] + [2**k for k in range(23)]
    assert df.height == 2 * len(sizes)
    assert df["valid"].all() and df["payload_ok"].all()  # every size's payload arrived intact, both ways
    r0 = pingpong_rank0(df)
    assert r0["bytes"].to_list() == sizes and (r0["peer"] == 1).all()
    assert (r0["t_usec"] > 0).all() and (r0["t_min_usec"] <= r0["t_usec"]).all()
    assert (r0["t_usec"] <= r0["t_max_usec"]).all()
    # bandwidth is bytes per half round trip (MB/s = bytes/µs), 0 bytes has none
    pos = r0.filter(pl.col("bytes") > 0)
    assert np.allclose(pos["MBps"].to_numpy(), (pos["bytes"] / pos["t_usec"]).to_numpy(), rtol=1e-12)
    assert r0["MBps"][0] is None
    # OSU's counts: fewer iterations above 8 KiB, and the time budget may lower them further (>= 5)
    assert (r0.filter(pl.col("bytes") <= 8192)["iterations"] <= 200).all()
    assert (r0.filter(pl.col("bytes") > 8192)["iterations"].is_between(5, 20)).all()
    # each rank reports its cpu set; the cpu it ran on is in it
    for row in df.iter_rows(named=True):
        assert row["cpus"] and row["cpu"] in row["cpus"]
    fit = fit_hockney(r0["bytes"].to_list(), r0["t_usec"].to_list())
    assert 0 < fit.latency_us < 200, fit.latency_us  # shared memory on one node: µs, not ms
    # above a slow disk, below DRAM: the asymptotic B (s/t at 4 MiB) and the peak B
    assert 10 < fit.asymptotic_bandwidth_MBps <= fit.peak_bandwidth_MBps < 100_000, fit.to_dict()
    bw_4mib = pos.filter(pl.col("bytes") == 2**22)["MBps"][0]
    assert 10 < bw_4mib < 100_000
    assert r0.filter(pl.col("bytes") == 2**22)["t_usec"][0] > r0.filter(pl.col("bytes") == 4)["t_usec"][0]


@pytest.mark.infra
@pytest.mark.parametrize("kind", ("intelmpi", "openmpi", "mpich"))
def test_pingpong_checks_the_payload(built, kind: str) -> None:
    stack, bins = built(kind)
    df = run_kernel(stack, bins["pingpong"], ["-m", "0:17", "-i", "20", "-w", "2", "--iterations-large", "5"], 2)
    assert df["valid"].all() and df["payload_ok"].all() and df.height == 2 * 19
    # --inject-fault: rank 1 corrupts the checked echo, so rank 0's check fails for every size > 0
    bad = run_kernel(stack, bins["pingpong"], ["-m", "0:4", "-i", "3", "-w", "1", "--inject-fault"], 2)
    r0, r1 = pingpong_rank0(bad), bad.filter(pl.col("rank") == 1)
    assert r0["valid"].to_list() == [True, False, False, False, False, False]  # 0 bytes: nothing to corrupt
    assert r0["payload_ok"].all() and r1["valid"].all()


@pytest.mark.infra
def test_pingpong_needs_two_ranks(built) -> None:
    stack, bins = built("openmpi")
    for np_ in (1, 3):
        launch = stack.launch([str(bins["pingpong"]), "-m", "0:2"], LaunchSpec(np=np_, transport="shm",
                                                                             oversubscribe=np_ > CORES))
        proc = subprocess.run(launch.argv, env=stack.env() | launch.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and f"needs exactly 2 ranks, got {np_}" in proc.stderr


# --------------------------------------------------------------------------- coll
@pytest.mark.infra
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("kind", STACKS)
def test_coll_results_are_checked(built, kind: str, np_: int) -> None:
    """Bcast, Allreduce and Alltoall give their closed-form results on every rank, at every size."""
    stack, bins = built(kind)
    df = run_kernel(stack, bins["coll"], ["-m", "0:12", "-i", "5", "-w", "1"], np_)
    assert df.height == np_ * 3 * 14  # ranks x collectives x sizes (0, 1 .. 4096)
    assert df["valid"].all() and (df["mismatches"] == 0).all(), df.filter(~pl.col("valid"))
    assert (df["iterations"] == 5).all()
    allreduce = df.filter(pl.col("collective") == "allreduce")
    assert set(allreduce.filter(pl.col("bytes") >= 8)["datatype"]) == {"double"}
    assert set(allreduce.filter(pl.col("bytes").is_between(1, 4))["datatype"]) == {"unsigned char"}
    doubles = allreduce.filter(pl.col("bytes") >= 8)
    assert (doubles["count"] * 8 == doubles["bytes"]).all()
    assert set(df.filter(pl.col("collective") == "bcast")["root"]) == {0}
    # OSU's avg/min/max over ranks sit on rank 0's record (MPI_Reduce), null on the others
    r0 = df.filter(pl.col("rank") == 0)
    assert (r0["t_min_usec"] <= r0["t_avg_usec"]).all() and (r0["t_avg_usec"] <= r0["t_max_usec"]).all()
    assert (r0["t_min_usec"] <= r0["t_usec"]).all() and (r0["t_usec"] <= r0["t_max_usec"]).all()
    others = df.filter(pl.col("rank") > 0)
    assert others["t_avg_usec"].null_count() == others.height
    assert (df["t_fastest_usec"] <= df["t_usec"] * (1 + 1e-9)).all()


@pytest.mark.infra
def test_coll_fault_is_caught(built) -> None:
    stack, bins = built("openmpi")
    df = run_kernel(stack, bins["coll"], ["-m", "0:3", "-i", "2", "-w", "0", "--inject-fault"], 3)
    last = df.filter(pl.col("rank") == 2)
    assert last.filter(pl.col("bytes") == 0)["valid"].all()  # nothing to corrupt
    assert not last.filter(pl.col("bytes") > 0)["valid"].any()
    assert (last.filter(pl.col("bytes") > 0)["mismatches"] == 1).all()
    assert df.filter(pl.col("rank") < 2)["valid"].all()
    one = run_kernel(stack, bins["coll"], ["--collective", "allreduce", "-m", "3:3", "-i", "2"], 2)
    assert one["collective"].unique().to_list() == ["allreduce"] and sorted(set(one["bytes"])) == [0, 8]


@pytest.mark.infra
def test_check_catches_injected_faults(built) -> None:
    stack, bins = built("openmpi")
    ring = run_kernel(stack, bins["ring"], ["--inject-fault", "-i", "2"], 2)
    assert ring.filter(pl.col("rank") == 1)["valid"].to_list() == [False]
    assert ring.filter(pl.col("rank") == 0)["valid"].to_list() == [True]
    matsum = run_kernel(stack, bins["matsum"], ["--dims", "8,4,4", "--inject-fault", "-i", "1"], 2)
    assert not matsum["valid"].any() and (matsum["mismatches"] == 1).all()
    jacobi = run_kernel(stack, bins["jacobi"], ["--L", "6", "-i", "10", "--check", "--inject-fault"], 2)
    assert not jacobi["valid"].any() and (jacobi["max_rel_diff"] > 1e-12).all()
    # --strict turns an invalid result into exit status 3
    launch = stack.launch([str(bins["matsum"]), "--dims", "8,4,4", "--inject-fault", "-i", "1", "--strict"],
                          LaunchSpec(np=2, transport="shm"))
    proc = subprocess.run(launch.argv, env=stack.env() | launch.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3


@pytest.mark.infra
def test_mpich_builds_warning_clean_and_runs(built) -> None:
    """The third compiler wrapper: -Werror build and a 2-rank run of each kernel."""
    stack, bins = built("mpich")
    assert set(bins) == set(kernel_names())
    ring = run_kernel(stack, bins["ring"], ["--variant", "all", "-i", "2", "-w", "0"], 2)
    assert ring["valid"].all() and ring.height == 6
    matsum = run_kernel(stack, bins["matsum"], ["--dims", "9,5,3", "--topo", "1,2,3", "--dist", "all", "-i", "1"], 2)
    assert matsum["valid"].all()
    jacobi = run_kernel(stack, bins["jacobi"], ["--mode", "strong", "--N", "9", "-i", "10", "--check"], 2)
    assert jacobi["valid"].all()
    coll = run_kernel(stack, bins["coll"], ["-m", "0:10", "-i", "3", "-w", "1"], 2)
    assert coll["valid"].all() and coll.height == 2 * 3 * 12


@pytest.mark.infra
def test_help_and_bad_options(built) -> None:
    stack, bins = built("openmpi")
    for name, binary in bins.items():
        out = subprocess.run([str(binary), "--help"], env=stack.env(), capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60)
        assert out.returncode == 0 and out.stdout.startswith(f"Usage: {name}"), out.stderr
        assert "--iterations" in out.stdout and '"valid"' not in out.stdout
        bad = subprocess.run([str(binary), "--no-such-option"], env=stack.env(), capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60)
        assert bad.returncode == 2 and f"{name}: invalid option" in bad.stderr


def test_build_errors_are_reported(tmp_path: Path) -> None:
    class Broken(DebianOpenMPI):
        def mpicc(self) -> list[str]:
            return ["/nonexistent/mpicc"]

    with pytest.raises(KernelBuildError, match="kernel build failed"):
        build_kernels(Broken(), tmp_path / "out")
    with pytest.raises(KernelBuildError, match="whitespace"):
        build_kernels(Broken(), tmp_path / "with space")
    assert mpicc_make_value(["/opt/x/mpicc", "-cc=gcc"]) == "/opt/x/mpicc -cc=gcc"


# --------------------------------------------------------------------------- parser
def test_parse_real_ring_output_with_launcher_noise() -> None:
    path = DATA / "ring_intelmpi_np3.txt"
    text = path.read_text()
    assert "[0] MPI startup():" in text  # Intel MPI's I_MPI_DEBUG lines are in the capture
    df = parse_kernel_file(path)["ring"]
    assert df.height == 3 * 6
    assert df["valid"].all()
    assert df["mpi_library"][0].startswith("Intel(R) MPI Library")
    assert (df["nprocs"] == 3).all() and (df["warmup"] == 1).all()
    assert df["source"][0] == str(path) and df["run"].unique().to_list() == [0]
    # record counter per rank, and `line` points at the JSON line in the file
    assert sorted(df.filter(pl.col("rank") == 2)["record"].to_list()) == list(range(6))
    lines = text.splitlines()
    for row in df.head(3).iter_rows(named=True):
        assert lines[row["line"] - 1].startswith(f'{{"kernel": "ring", "rank": {row["rank"]}')
    for row in df.iter_rows(named=True):
        assert (row["msgleft"], row["msgright"] if row["streams"] == 2 else -row["msgleft"]) == \
            ring_closed_form(row["rank"], 3)


def test_parse_real_matsum_and_jacobi_types() -> None:
    matsum = parse_kernel_file(DATA / "matsum_openmpi_np4.txt")["matsum"]
    assert matsum.height == 4 * 6 and matsum["valid"].all()
    assert matsum.schema["max_abs_err"] == pl.Float64 and matsum.schema["local_dims"] == pl.List(pl.Int64)
    assert matsum["mpi_library"][0].startswith("Open MPI v4.1")
    assert_tiles(matsum, (30, 20, 10))
    jacobi = parse_kernel_file(DATA / "jacobi_intelmpi_np2_hybrid.txt")["jacobi"]
    assert jacobi.height == 2 and jacobi["valid"].all()
    assert jacobi.schema["residuals"] == pl.List(pl.Float64)
    assert (jacobi["threads"] == 2).all() and jacobi["thread_level"][0] == "MPI_THREAD_FUNNELED"
    assert jacobi["mode"][0] == "strong" and jacobi["N"][0] == "16,16,16"  # header values stay text
    reference = numpy_jacobi_residuals(tuple(jacobi["global_dims"][0]), 10)
    assert np.allclose(jacobi["residuals"][0].to_list(), reference, rtol=1e-12, atol=0)


def test_invalid_rows_are_kept() -> None:
    frames = parse_kernel_file(DATA / "faults_openmpi_np2.txt")
    assert set(frames) == {"ring", "matsum", "jacobi"}
    assert frames["ring"]["valid"].to_list() == [True, False]
    assert frames["matsum"]["valid"].to_list() == [False, False]
    assert frames["jacobi"]["valid"].to_list() == [False, False]
    assert frames["jacobi"]["run"].to_list() == [2, 2]  # third run in the concatenated file


def _broken(path: Path, lineno: int, replacement: str | None) -> str:
    lines = path.read_text().splitlines()
    if replacement is None:
        del lines[lineno - 1]
    else:
        lines[lineno - 1] = replacement
    return "\n".join(lines) + "\n"


def test_malformed_lines_name_file_and_line() -> None:
    path = DATA / "ring_intelmpi_np3.txt"
    text = path.read_text()
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("{"))
    truncated = _broken(path, first, lines[first - 1][:40])
    with pytest.raises(KernelParseError, match=rf"^ring\.txt:{first}: malformed JSON") as info:
        parse_kernel_output(truncated, "ring.txt")
    assert isinstance(info.value, ValueError) and info.value.line == first
    with pytest.raises(KernelParseError, match=rf"x:{first}: record lacks 'cpu'"):
        parse_kernel_output(_broken(path, first, lines[first - 1].replace('"cpu"', '"cpux"')), "x")
    with pytest.raises(KernelParseError, match=rf"x:{first}: rank 7 outside"):
        parse_kernel_output(_broken(path, first, lines[first - 1].replace('"rank": 0', '"rank": 7')), "x")
    with pytest.raises(KernelParseError, match=rf"x:{first}: record does not start the line"):
        parse_kernel_output(_broken(path, first, "[1] noise" + lines[first - 1]), "x")
    with pytest.raises(KernelParseError, match=r"x:1: record before any '# kernel:' header"):
        parse_kernel_output(lines[first - 1] + "\n", "x")
    with pytest.raises(KernelParseError, match=rf"x:{first}: record of kernel 'matsum'"):
        parse_kernel_output(_broken(path, first, lines[first - 1].replace('"ring"', '"matsum"', 1)), "x")
    # a truncated run (the last rank's line is missing) is reported at the run's header
    header = next(n for n, line in enumerate(lines, 1) if line.startswith("# kernel:"))
    with pytest.raises(KernelParseError, match=rf"x:{header}: incomplete ring run"):
        parse_kernel_output(_broken(path, len(lines), None), "x")
    assert parse_kernel_output(_broken(path, len(lines), None), "x", require_complete=False)["ring"].height == 17


def test_parse_real_pingpong_output() -> None:
    df = parse_kernel_file(DATA / "pingpong_openmpi_np2.txt")["pingpong"]
    sizes = [0] + [2**k for k in range(17)]
    assert df.height == 2 * len(sizes) and df["valid"].all() and df["payload_ok"].all()
    assert df.schema["cpus"] == pl.List(pl.Int64) and df.schema["t_usec"] == pl.Float64
    assert df.schema["MBps"] == pl.Float64 and df["MBps"].null_count() == 2  # 0 bytes, both ranks
    r0 = pingpong_rank0(df)
    assert r0["bytes"].to_list() == sizes and r0["record"].to_list() == list(range(len(sizes)))
    assert df["mpi_library"][0].startswith("Open MPI v4.1") and df["msglog"][0] == "0:16"
    assert df["large_size"][0] == 8192 and df["time_budget_ms"][0] == 0
    # OSU's counts: 100 timed round trips up to 8 KiB, the -large 20 above
    assert set(r0.filter(pl.col("bytes") <= 8192)["iterations"]) == {100}
    assert set(r0.filter(pl.col("bytes") > 8192)["iterations"]) == {20}
    pos = r0.filter(pl.col("bytes") > 0)
    assert np.allclose(pos["MBps"].to_numpy(), (pos["bytes"] / pos["t_usec"]).to_numpy(), rtol=1e-12)
    assert [sorted(c) for c in df.filter(pl.col("bytes") == 0).sort("rank")["cpus"].to_list()] == [[0], [1]]


def test_parse_real_coll_output_with_launcher_noise() -> None:
    path = DATA / "coll_intelmpi_np3.txt"
    assert "[0] MPI startup():" in path.read_text()
    df = parse_kernel_file(path)["coll"]
    assert df.height == 3 * 3 * 12 and df["valid"].all() and (df["mismatches"] == 0).all()
    assert df["collective"].unique(maintain_order=True).to_list() == ["bcast", "allreduce", "alltoall"]
    assert df["collectives"][0] == "bcast,allreduce,alltoall" and (df["nprocs"] == 3).all()
    # rank 0 carries the MPI_Reduce'd avg/min/max; the others null, typed as floats
    assert df.schema["t_avg_usec"] == pl.Float64 and df.schema["root"] == pl.Int64
    r0 = df.filter(pl.col("rank") == 0)
    assert r0["t_avg_usec"].null_count() == 0 and df.filter(pl.col("rank") > 0)["t_avg_usec"].null_count() == 72
    assert (r0["t_min_usec"] <= r0["t_avg_usec"]).all() and (r0["t_avg_usec"] <= r0["t_max_usec"]).all()
    assert set(df.filter(pl.col("collective") == "alltoall")["datatype"]) == {"byte"}
    assert df.filter((pl.col("collective") == "allreduce") & (pl.col("bytes") == 1024))["count"].to_list() == [128] * 3


def test_concatenated_runs_and_noise() -> None:
    text = (DATA / "ring_intelmpi_np3.txt").read_text() + "random launcher line\n" + \
        (DATA / "matsum_openmpi_np4.txt").read_text()
    frames = parse_kernel_output(text, "both")
    assert frames["ring"]["run"].unique().to_list() == [0]
    assert frames["matsum"]["run"].unique().to_list() == [1]
    assert "variant" not in frames["matsum"].columns  # headers do not leak across runs
    assert parse_kernel_output("", "empty") == {}
