"""Apptainer images (mpiatlas.stacks.containers): rendering (unit) and real images (infra).

The infra tests build the Intel MPI and the Open MPI (imb: skip) images once per
session -- ~1.5 min each -- into /tmp/mpiatlas-images (MPIATLAS_IMAGE_CACHE), or reuse
an up-to-date SIF there or in results/images/ (same rendered def + kernel sources,
recorded as ``inputs_digest`` in <stack>.inspect.json). MPIATLAS_IMAGE_FRESH=1 skips results/images/.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, require_infra
from mpiatlas.stacks import containers
from mpiatlas.stacks.containers import ContainerError

HOST_IMPI = REPO / ".stacks" / "intelmpi"
IMAGE_CACHE = Path(os.environ.get("MPIATLAS_IMAGE_CACHE", "/tmp/mpiatlas-images"))
# What the session builds: stack -> render_def keyword arguments.
TEST_IMAGES = {"intelmpi": {}, "openmpi": {"imb": "skip"}}
# Rendering tests read a recorded host's apt sources (a site mirror), not this machine's.
SITE = REPO / "tests" / "data" / "apt" / "one-line-site"


# ============================================================================ unit: rendering
@pytest.mark.parametrize("bootstrap", containers.BOOTSTRAPS)
@pytest.mark.parametrize("stack", containers.STACK_KINDS)
def test_render_def_header_and_sections(stack: str, bootstrap: str) -> None:
    text = containers.render_def(stack, bootstrap, imb="skip", host_root=SITE)
    header = [line for line in text.splitlines() if line and not line.startswith("#")][:3]
    if bootstrap == "debootstrap":
        # The mirror the recorded host's apt sources name (tests/test_apt_sources.py).
        assert header == ["Bootstrap: debootstrap", "OSVersion: bookworm", "MirrorURL: http://apt.site.example/debian"]
    else:
        assert header[:2] == ["Bootstrap: docker", "From: debian:bookworm"]
    for section in ("%labels", "%help", "%environment", "%setup", "%files", "%post", "%runscript", "%test"):
        assert re.search(rf"^{section}$", text, re.M), section
    assert "{{" not in text and "{%" not in text
    assert f"mpiatlas.mpi.kind {stack}" in text
    assert f"{containers.KERNELS_DIR} /opt/mpiatlas/src/kernels" in text
    mpicc = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich", "intelmpi": "/opt/impi/bin/mpicc"}[stack]
    assert f'make -C "$K" MPICC={mpicc} OUT=/opt/mpiatlas/bin' in text
    assert "update-ca-certificates" in text and 'Acquire::Check-Valid-Until "false";' in text
    assert "/usr/local/share/ca-certificates" in text.split("%setup", 1)[1].split("%files", 1)[0]
    assert "export PATH=/opt/mpiatlas/bin:" in text
    assert "mpiatlas-hello" in text.split("%test", 1)[1]


def test_render_openmpi_imb_build_downloads_and_verifies() -> None:
    sha = "a" * 64
    text = containers.render_def("openmpi", imb="build", imb_sha256=sha, host_root=SITE)
    post = text.split("%post", 1)[1].split("%runscript", 1)[0]
    assert f"IMB_URL={containers.IMB_UPSTREAM_URL}" in post
    assert f"IMB_SHA256={sha}" in post
    assert 'sha256sum -c -' in post
    assert "IMB source not reachable: $IMB_URL; set imb: skip for this stack to build without IMB" in post
    assert "make -j\"$(nproc)\" IMB-MPI1 CC=mpicc.openmpi CXX=mpicxx.openmpi" in post
    assert "unavailable" not in text
    assert "IMB-MPI1 PingPong" in text.split("%test", 1)[1]
    # An empty sha256 renders, but the build refuses the unverified download.
    unpinned = containers.render_def("openmpi", imb="build", host_root=SITE)
    assert "IMB_SHA256=''" in unpinned and "imb_sha256 is not set" in unpinned


def test_render_openmpi_imb_skip_has_no_imb() -> None:
    text = containers.render_def("openmpi", imb="skip", host_root=SITE)
    assert "mpiatlas.imb unavailable: IMB source not reachable at build time" in text
    assert "curl" not in text and "sha256sum" not in text and "IMB-MPI1 CC=" not in text
    assert "imb: skip but an IMB-MPI1 is on PATH" in text.split("%test", 1)[1]


@pytest.mark.parametrize("imb", containers.IMB_MODES)
def test_render_mpich_imb_from_wheel(imb: str) -> None:
    text = containers.render_def("mpich", imb=imb, host_root=SITE)
    assert "ln -sf \"$libmpich\" /opt/mpiatlas/mpich-abi/libmpi.so.12" in text
    assert "LD_LIBRARY_PATH=/opt/mpiatlas/mpich-abi:" in text
    if imb == "build":
        assert 'pip download --no-deps' in text and f'"impi-rt=={containers.IMPI_VERSION}"' in text
        assert "mpiexec.mpich -n 2 IMB-MPI1 PingPong" in text.split("%test", 1)[1]
        assert "mpiatlas.imb 2021.10" in text
    else:
        assert "pip download" not in text and "mpiatlas.imb unavailable" in text
        assert "IMB-MPI1 PingPong" not in text


@pytest.mark.parametrize("imb", containers.IMB_MODES)
def test_render_intelmpi(imb: str) -> None:
    text = containers.render_def("intelmpi", imb=imb, host_root=SITE)
    assert f'"impi-rt=={containers.IMPI_VERSION}" "impi-devel=={containers.IMPI_VERSION}"' in text
    assert "python3 -m venv /opt/impi" in text
    assert ("mpirun -n 2 IMB-MPI1 PingPong" in text) == (imb == "build")
    assert ("imb: skip but an IMB-MPI1 is on PATH" in text) == (imb == "skip")
    assert ("rm -f /opt/impi/bin/IMB-*" in text) == (imb == "skip")


def test_render_rejects_bad_values() -> None:
    with pytest.raises(ContainerError, match="64 hex"):
        containers.render_def("openmpi", imb="build", imb_sha256="1234", host_root=SITE)
    with pytest.raises(ContainerError, match="imb_url"):
        containers.render_def("openmpi", imb="build", imb_url="https://x/'; rm -rf /", host_root=SITE)
    with pytest.raises(ContainerError, match="bootstrap"):
        containers.render_def("openmpi", "yum", host_root=SITE)
    with pytest.raises(ContainerError, match="unknown stack"):
        containers.render_def("lam", host_root=SITE)


def test_render_params_from_config_block() -> None:
    cfg = {"bootstrap": "docker", "stacks": {"openmpi": {"imb": "skip", "imb_sha256": "b" * 64},
                                             "intelmpi": {"impi_version": "2021.16.1"}}}
    params = containers.render_params("openmpi", cfg, host_root=SITE)
    assert params["bootstrap"] == "docker" and params["imb"] == "skip" and params["imb_sha256"] == "b" * 64
    assert params["mpi_version"] == "4.1.4"
    text = containers.render_def("openmpi", **params)
    assert "Bootstrap: docker" in text
    with pytest.raises(ContainerError, match="unknown keys"):
        containers.render_params("mpich", {"stacks": {"mpich": {"imb_sah256": "x"}}}, host_root=SITE)


def test_exec_argv() -> None:
    argv = containers.exec_argv(Path("/tmp/i.sif"), ["IMB-MPI1", "PingPong"], ["/work", "/data:/data:ro"])
    assert argv == ["apptainer", "exec", "--bind", "/work", "--bind", "/data:/data:ro", "/tmp/i.sif",
                    "IMB-MPI1", "PingPong"]


def test_check_hello_names_the_singleton_failure() -> None:
    lines = "\n".join(f"mpiatlas-hello rank 0 of 1 sum 1 pid {p} host vm lib Open MPI v4.1.4" for p in (1, 2))
    with pytest.raises(ContainerError, match=r"every rank reports rank 0 of 1 \(2 copies of rank 0\)"):
        containers.check_hello(lines, 2)
    good = "noise\nmpiatlas-hello rank 1 of 2 sum 2 pid 3 host vm lib X\nmpiatlas-hello rank 0 of 2 sum 2 pid 4 host vm lib X"
    assert [r.rank for r in containers.check_hello(good, 2)] == [1, 0]


def test_versions_match() -> None:
    assert containers.versions_match("Intel(R) MPI Library for Linux* OS, Version 2021.16 Build 20250722", "2021.16.1")
    assert containers.versions_match("mpirun (Open MPI) 4.1.4", "4.1.4")
    assert not containers.versions_match("mpirun (Open MPI) 5.0.11", "4.1.4")
    assert not containers.versions_match("no version here", "4.1.4")


# ============================================================================ infra: real images
def _apptainer() -> str:
    require_infra(shutil.which("apptainer") is not None, "apptainer")
    return shutil.which("apptainer") or "apptainer"


def _up_to_date(sif: Path, digest: str) -> bool:
    record = sif.with_name(sif.name.replace(".sif", ".inspect.json"))
    if not (sif.is_file() and record.is_file()):
        return False
    try:
        data = json.loads(record.read_text())
    except ValueError:
        return False
    return data.get("inputs_digest") == digest and data.get("size_bytes") == sif.stat().st_size


def _image(stack: str, kwargs: dict) -> Path:
    text = containers.render_def(stack, **kwargs)
    digest = containers.inputs_digest(text)
    # MPIATLAS_IMAGE_FRESH=1: ignore the DAG's results/images (exercise the session build).
    reuse = [] if os.environ.get("MPIATLAS_IMAGE_FRESH") == "1" else [REPO / "results" / "images"]
    for directory in (*reuse, IMAGE_CACHE):
        if _up_to_date(directory / f"{stack}.sif", digest):
            return directory / f"{stack}.sif"
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_CACHE / f".{stack}.lock", "w") as lock:  # a concurrent session builds it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        sif = IMAGE_CACHE / f"{stack}.sif"
        if _up_to_date(sif, digest):
            return sif
        deffile = IMAGE_CACHE / f"{stack}.def"
        deffile.write_text(text)
        result = containers.build_image(deffile, sif, IMAGE_CACHE / f"{stack}.build.log")
        containers.write_inspect(sif, IMAGE_CACHE / f"{stack}.inspect.json", build=result,
                                 extra={"inputs_digest": digest})
    return sif


@pytest.fixture(scope="session")
def images() -> dict[str, Path]:
    _apptainer()
    return {stack: _image(stack, kwargs) for stack, kwargs in TEST_IMAGES.items()}


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


@pytest.fixture(scope="session")
def host_impi():
    from mpiatlas.stacks import get_stack

    stack = get_stack("intelmpi", HOST_IMPI)
    deadline = time.monotonic() + 900
    while not (stack.is_installed() and stack.imb_binary()):
        if _installing(HOST_IMPI) and time.monotonic() < deadline:
            time.sleep(10)  # someone is installing it right now: wait
            continue
        stack.install()
    require_infra(stack.is_installed() and stack.imb_binary() is not None, f"Intel MPI host stack at {HOST_IMPI}")
    return stack


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> str:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{text[-3000:]}"
    return text


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s*$")


def pingpong_rows(output: str) -> dict[int, float]:
    """bytes -> t[usec] of an IMB PingPong table (minimal parse)."""
    assert "Benchmarking PingPong" in output, output[-2000:]
    assert "Invalid benchmark name" not in output
    return {int(m[1]): float(m[3]) for m in map(_ROW.match, output.splitlines()) if m}


@pytest.mark.infra
@pytest.mark.parametrize("stack", sorted(TEST_IMAGES))
def test_apptainer_test_passes(images: dict[str, Path], stack: str) -> None:
    out = _run([_apptainer(), "test", str(images[stack])], timeout=300)
    assert f"mpiatlas {stack} image: test passed" in out


@pytest.mark.infra
@pytest.mark.parametrize("stack", sorted(TEST_IMAGES))
def test_image_tells_what_is_inside(images: dict[str, Path], stack: str) -> None:
    usage = _run([_apptainer(), "exec", str(images[stack]), "ring", "--help"])
    assert "Usage: ring" in usage
    helptext = _run([_apptainer(), "run-help", str(images[stack])])
    assert "mpiatlas image" in helptext and "Hybrid" in helptext
    assert "mpiatlas image" in _run([_apptainer(), "run", str(images[stack])])
    labels = containers.image_labels(images[stack])
    assert labels["mpiatlas.mpi.kind"] == stack
    assert {"ring", "matsum", "jacobi", "mpiatlas-hello"} <= set(labels["mpiatlas.kernels"].split())
    record = json.loads(images[stack].with_name(f"{stack}.inspect.json").read_text())
    assert record["sha256"] == containers.image_digest(images[stack])


@pytest.mark.infra
def test_openmpi_image_without_imb_says_so(images: dict[str, Path]) -> None:
    labels = containers.image_labels(images["openmpi"])
    assert labels["mpiatlas.imb"] == "unavailable: IMB source not reachable at build time"
    assert labels["mpiatlas.mpi.version"] == "4.1.4"
    probe = subprocess.run([_apptainer(), "exec", str(images["openmpi"]), "sh", "-c", "command -v IMB-MPI1"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert probe.returncode != 0


@pytest.mark.infra
def test_imb_pingpong_inside_container(images: dict[str, Path]) -> None:
    env = dict(os.environ, I_MPI_FABRICS="shm")
    out = _run([*containers.exec_argv(images["intelmpi"], ["mpirun", "-n", "2", "IMB-MPI1", "PingPong",
                                                           "-msglog", "0:3"])], env=env)
    rows = pingpong_rows(out)
    assert 0 in rows and rows[0] > 0 and set(rows) == {0, 1, 2, 4, 8}


@pytest.mark.infra
def test_imb_pingpong_hybrid_host_launcher(images: dict[str, Path], host_impi) -> None:
    from mpiatlas.stacks import LaunchSpec

    program = containers.exec_argv(images["intelmpi"], ["IMB-MPI1", "PingPong", "-msglog", "0:3"])
    launch = host_impi.launch(program, LaunchSpec(np=2, transport="shm", pins=[0, 1]))
    assert launch.argv[0] == str(host_impi.launcher_path())  # the host's mpirun starts apptainer per rank
    out = _run(launch.argv, env=host_impi.env(dict(os.environ) | launch.env))
    rows = pingpong_rows(out)
    assert 0 in rows and rows[0] > 0
    assert host_impi.obtained_transport(out) == "shm"
    assert set(host_impi.obtained_binding(out)) == {0, 1}


@pytest.mark.infra
def test_preflight_accepts_matching_host(images: dict[str, Path], host_impi) -> None:
    info = containers.preflight("intelmpi", host_impi.version(), images["intelmpi"], host_stack=host_impi)
    assert info.kind == "intelmpi" and sorted(r.rank for r in info.hello) == [0, 1]
    assert all(r.size == 2 for r in info.hello)


@pytest.mark.infra
def test_preflight_rejects_mismatched_host(images: dict[str, Path], host_impi) -> None:
    with pytest.raises(ContainerError, match=r"MPI mismatch: image openmpi.sif holds openmpi 4\.1\.4 .* intelmpi"):
        containers.preflight("intelmpi", host_impi.version(), images["openmpi"], host_stack=host_impi)
    with pytest.raises(ContainerError, match="version mismatch"):
        containers.preflight("intelmpi", "Intel(R) MPI Library, Version 2021.19", images["intelmpi"], hello=False)


@pytest.mark.infra
def test_hybrid_with_wrong_launcher_reports_rank_0_of_1(images: dict[str, Path], host_impi) -> None:
    # Skip the label check to show what the hello itself detects: Intel's hydra starting
    # Open MPI ranks -- each initialises as a singleton.
    with pytest.raises(ContainerError, match="every rank reports rank 0 of 1"):
        containers.hybrid_hello(images["openmpi"], [str(host_impi.launcher_path())], np=2,
                                env=host_impi.env(dict(os.environ, I_MPI_FABRICS="shm")), timeout=120)


@pytest.mark.infra
def test_openmpi_hybrid_with_debian_launcher(images: dict[str, Path]) -> None:
    require_infra(shutil.which("mpirun.openmpi") is not None, "Debian Open MPI (mpirun.openmpi)")
    version = subprocess.run(["mpirun.openmpi", "--version"], capture_output=True, text=True).stdout
    info = containers.preflight("openmpi", version, images["openmpi"])
    assert sorted(r.rank for r in info.hello) == [0, 1]
    assert all("Open MPI v4.1.4" in r.lib for r in info.hello)
