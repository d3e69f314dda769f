"""Apptainer images of the campaign's MPI stacks, and the hybrid launch model.

* ``render_def`` turns a Jinja2 template ``containers/<stack>.def`` (package data) into a real
  Apptainer definition file (the DAG writes it to ``results/images/<stack>.def``).
* ``build_image`` runs ``apptainer build`` (zstd squashfs) into a SIF, logging to a file.
* ``exec_argv`` is what a cell runs under the *host* launcher in the hybrid model:
  ``mpirun -n 2 apptainer exec img.sif IMB-MPI1 PingPong``.
* ``preflight`` refuses a host launcher whose MPI does not match the image's
  (labels), and proves it by a real 2-rank hybrid hello: the classic failure is
  every process reporting "rank 0 of 1" (N independent singletons).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

import jinja2

from mpiatlas import __version__
from mpiatlas.files import IMAGE_TEMPLATES, shipped, shipped_kernel_sources, write_text_atomic
from mpiatlas.stacks import LaunchSpec, Stack, apt_sources

if TYPE_CHECKING:
    from mpiatlas.models.fit_records import JsonValue  # the type of a JSON document only

TEMPLATES_DIR = shipped(IMAGE_TEMPLATES)
KERNELS_DIR = shipped_kernel_sources()

STACK_KINDS = ("openmpi", "mpich", "intelmpi")
BOOTSTRAPS = ("debootstrap", "docker")
IMB_MODES = ("build", "skip")

# The one Intel MPI the project uses (2021.19 needs a libfabric wheel no registry has).
IMPI_VERSION = "2021.16.1"
# The IMB release shipped in impi-rt 2021.16.1 and the upstream tag the Open MPI image compiles.
IMB_VERSION = "2021.10"
IMB_UPSTREAM_URL = "https://github.com/intel/mpi-benchmarks/archive/refs/tags/IMB-v2021.10.tar.gz"

# `apptainer build` compresses the SIF with zstd: ~6 s instead of 40-60 s of gzip.
MKSQUASHFS_ARGS = "-comp zstd -Xcompression-level 3"

class ImageDefaults(TypedDict):
    """The rendering parameters every image has (a ``containers:`` block may set each)."""

    bootstrap: str
    os_version: str
    mirror_url: str | None  # None: the Debian mirror the host's apt sources name
    docker_from: str
    impi_version: str
    imb_version: str


class StackImageDefaults(TypedDict):
    """A stack's own rendering parameters (``containers.stacks.<kind>`` may set each)."""

    mpi_version: str
    imb: str  # IMB_MODES
    imb_url: NotRequired[str]  # only the Open MPI image compiles IMB from upstream
    imb_sha256: NotRequired[str]
    imb_skip_reason: str


class ImageParams(ImageDefaults, StackImageDefaults):
    """The full set of one image's rendering parameters (:func:`render_params`): the keyword arguments
    of :func:`render_def`, and the DAG's ``params`` of the image rules."""


DEFAULTS: ImageDefaults = {
    "bootstrap": "debootstrap",
    "os_version": "bookworm",
    # None: the Debian mirror the host's apt sources name (mpiatlas.stacks.apt_sources).
    "mirror_url": None,
    "docker_from": "debian:bookworm",
    "impi_version": IMPI_VERSION,
    "imb_version": IMB_VERSION,
}

# Per stack: the MPI version the image must contain (checked in %post) and IMB's origin.
STACK_DEFAULTS: dict[str, StackImageDefaults] = {
    "openmpi": {"mpi_version": "4.1.4", "imb": "build", "imb_url": IMB_UPSTREAM_URL, "imb_sha256": "",
                "imb_skip_reason": "IMB source not reachable at build time"},
    "mpich": {"mpi_version": "4.0.2", "imb": "build",
              "imb_skip_reason": "excluded by config (imb: skip)"},
    "intelmpi": {"mpi_version": IMPI_VERSION, "imb": "build",
                 "imb_skip_reason": "excluded by config (imb: skip)"},
}

# The program behind preflight's hybrid hello and the images' %test.
HELLO_C = r"""/* mpiatlas-hello: one line per rank; "rank 0 of 1" from every process means the
   launcher and this MPI do not share a process-management interface. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, len, one = 1, sum = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\r\n")] = '\0';
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    printf("mpiatlas-hello rank %d of %d sum %d pid %d host %s lib %s\n",
           rank, size, sum, (int)getpid(), host, lib);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}"""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SAFE_URL = re.compile(r"^(https?|ftp|file)://[^\s'\"`$\\]+$")
_HELLO = re.compile(r"^mpiatlas-hello rank (\d+) of (\d+) sum (\d+) pid (\d+) host (\S+) lib (.*)$")
_VERSION = re.compile(r"\d+(?:\.\d+)+")


class ContainerError(RuntimeError):
    """An image cannot be rendered, built or used as asked."""


# --------------------------------------------------------------------------- rendering
def _environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["shquote"] = shlex.quote
    return env


def render_params(stack_kind: str, containers_cfg: Mapping[str, Any] | None = None,
                  host_root: Path = apt_sources.HOST_ROOT) -> ImageParams:
    """The full set of rendering parameters of one stack from a ``containers:`` config block.

    Used as the DAG's ``params`` (a change of any value re-renders and rebuilds): the debootstrap
    mirror is resolved here (the config's, else the host's), so a new host mirror rebuilds too.
    """
    if stack_kind not in STACK_KINDS:
        raise ContainerError(f"unknown stack kind {stack_kind!r}; images exist for {list(STACK_KINDS)}")
    cfg = dict(containers_cfg or {})
    stack_cfg = dict((cfg.get("stacks") or {}).get(stack_kind) or {})
    own = STACK_DEFAULTS[stack_kind]
    unknown = set(stack_cfg) - set(own) - set(DEFAULTS)
    if unknown:
        raise ContainerError(f"containers.stacks.{stack_kind}: unknown keys {sorted(unknown)}")
    # A stack's value, else (a global parameter) the block's, else the default: per-stack overrides of
    # global values (e.g. impi_version) win.
    params: ImageParams = {
        "bootstrap": stack_cfg.get("bootstrap", cfg.get("bootstrap", DEFAULTS["bootstrap"])),
        "os_version": stack_cfg.get("os_version", cfg.get("os_version", DEFAULTS["os_version"])),
        "mirror_url": stack_cfg.get("mirror_url", cfg.get("mirror_url", DEFAULTS["mirror_url"])),
        "docker_from": stack_cfg.get("docker_from", cfg.get("docker_from", DEFAULTS["docker_from"])),
        "impi_version": stack_cfg.get("impi_version", cfg.get("impi_version", DEFAULTS["impi_version"])),
        "imb_version": stack_cfg.get("imb_version", cfg.get("imb_version", DEFAULTS["imb_version"])),
        "mpi_version": stack_cfg.get("mpi_version", own["mpi_version"]),
        "imb": stack_cfg.get("imb", own["imb"]),
        "imb_skip_reason": stack_cfg.get("imb_skip_reason", own["imb_skip_reason"]),
    }
    if "imb_url" in own:
        params["imb_url"] = stack_cfg.get("imb_url", own["imb_url"])
    if "imb_sha256" in own:
        params["imb_sha256"] = stack_cfg.get("imb_sha256", own["imb_sha256"])
    if params["bootstrap"] == "debootstrap":
        params["mirror_url"] = _mirror(params["mirror_url"], params["os_version"], host_root)
    return params


def render_def(
    stack_kind: str,
    bootstrap: str = "debootstrap",
    *,
    imb: str | None = None,
    imb_url: str | None = None,
    imb_sha256: str | None = None,
    imb_skip_reason: str | None = None,
    imb_version: str = IMB_VERSION,
    mpi_version: str | None = None,
    impi_version: str = IMPI_VERSION,
    os_version: str = DEFAULTS["os_version"],
    mirror_url: str | None = None,
    docker_from: str = DEFAULTS["docker_from"],
    kernels_src: str | Path | None = None,
    template: str | Path | None = None,
    host_root: Path = apt_sources.HOST_ROOT,
) -> str:
    """Render ``containers/<stack_kind>.def`` into an Apptainer definition file (text)."""
    if stack_kind not in STACK_KINDS:
        raise ContainerError(f"unknown stack kind {stack_kind!r}; images exist for {list(STACK_KINDS)}")
    if bootstrap not in BOOTSTRAPS:
        raise ContainerError(f"bootstrap must be one of {list(BOOTSTRAPS)}, got {bootstrap!r}")
    defaults = STACK_DEFAULTS[stack_kind]
    imb = defaults["imb"] if imb is None else imb
    if imb not in IMB_MODES:
        raise ContainerError(f"imb must be one of {list(IMB_MODES)}, got {imb!r}")
    imb_url = defaults.get("imb_url", "") if imb_url is None else imb_url
    imb_sha256 = (defaults.get("imb_sha256", "") if imb_sha256 is None else imb_sha256) or ""
    imb_sha256 = imb_sha256.strip().lower()
    if stack_kind == "openmpi" and imb == "build":
        if not imb_url or not _SAFE_URL.match(imb_url):
            raise ContainerError(f"openmpi: imb: build needs a plain imb_url (http/https/ftp/file), got {imb_url!r}")
        if imb_sha256 and not _SHA256.match(imb_sha256):
            raise ContainerError(f"openmpi: imb_sha256 must be 64 hex digits, got {imb_sha256!r}")
    if bootstrap == "debootstrap":
        mirror_url = _mirror(mirror_url, os_version, host_root)
    for name, value in (("os_version", os_version), ("docker_from", docker_from),
                        ("impi_version", impi_version), ("imb_version", imb_version),
                        *((("mirror_url", mirror_url),) if bootstrap == "debootstrap" else ())):
        if not value or re.search(r"[\s'\"`$\\]", str(value)):
            raise ContainerError(f"{name} must be a plain word, got {value!r}")
    kernels = Path(kernels_src) if kernels_src is not None else KERNELS_DIR
    kernels = kernels.resolve()
    if re.search(r"\s", str(kernels)):
        raise ContainerError(f"kernel sources path may not contain spaces: {kernels}")
    tpl = Path(template) if template is not None else TEMPLATES_DIR / f"{stack_kind}.def"
    if not tpl.is_file():
        raise ContainerError(f"no image template {tpl}")
    os_label = (f"docker {docker_from}" if bootstrap == "docker"
                else f"debian {os_version} (debootstrap {mirror_url})")
    values = {
        "stack": stack_kind,
        "bootstrap": bootstrap,
        "os_version": os_version,
        "os_label": os_label,
        "mirror_url": mirror_url or "",
        "docker_from": docker_from,
        "imb": imb,
        "imb_url": imb_url or "",
        "imb_sha256": imb_sha256,
        "imb_skip_reason": imb_skip_reason or defaults["imb_skip_reason"],
        "imb_version": imb_version,
        "mpi_version": mpi_version or defaults["mpi_version"],
        "impi_version": impi_version,
        "mpiatlas_version": __version__,
        "kernels_src": str(kernels),
        "hello_c": HELLO_C,
    }
    try:
        return _environment(tpl.parent).get_template(tpl.name).render(**values)
    except jinja2.TemplateError as exc:
        raise ContainerError(f"cannot render {tpl}: {exc}") from exc


def _mirror(configured: str | None, suite: str, host_root: Path) -> str:
    """The debootstrap mirror: ``configured``, else the one the host's apt sources name for ``suite``."""
    try:
        return apt_sources.image_mirror(configured, suite, host_root).url
    except apt_sources.NoDebianMirror as exc:
        raise ContainerError(str(exc)) from exc


def write_def(stack_kind: str, out: str | Path, **params: Unpack[ImageParams]) -> Path:
    return write_text_atomic(out, render_def(stack_kind, **params))


def kernel_sources(kernels_dir: str | Path = KERNELS_DIR) -> list[Path]:
    """The files of the kernels' sources an image is built from (sources, headers, Makefile)."""
    root = Path(kernels_dir)
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and (p.suffix in (".c", ".h", ".mk") or p.name == "Makefile"))


def inputs_digest(def_text: str, kernels_dir: str | Path = KERNELS_DIR) -> str:
    """sha256 over a rendered def and the kernel sources: equal digest = the image is up to date."""
    h = hashlib.sha256(def_text.encode())
    root = Path(kernels_dir)
    for path in kernel_sources(root):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- building
def apptainer_binary() -> str:
    found = shutil.which("apptainer")
    if not found:
        raise ContainerError("apptainer not found on PATH (provision it: /work/shared/tools/provision-apptainer.sh)")
    return found


def build_command(def_path: str | Path, sif: str | Path, *, apptainer: str = "apptainer",
                  extra: Sequence[str] = ()) -> list[str]:
    """``apptainer build --force --mksquashfs-args '-comp zstd -Xcompression-level 3' SIF DEF``."""
    return [apptainer, "build", "--force", "--mksquashfs-args", MKSQUASHFS_ARGS, *extra, str(sif), str(def_path)]


@dataclass
class BuildResult:
    sif: Path
    seconds: float
    size_bytes: int
    command: list[str] = field(default_factory=list)


def build_image(def_path: str | Path, sif: str | Path, log: str | Path, *, apptainer: str | None = None,
                extra: Sequence[str] = (), timeout: float | None = 3600) -> BuildResult:
    """Build ``sif`` from ``def_path`` as plain root; the whole build output goes to ``log``.

    The SIF is written under a temporary name and renamed on success, so a failed
    build never leaves a SIF that looks complete. Raises ContainerError with the
    reason (e.g. "IMB source not reachable: ...") and the log's tail.
    """
    def_path, sif, log = Path(def_path).resolve(), Path(sif).resolve(), Path(log).resolve()
    if not def_path.is_file():
        raise ContainerError(f"no definition file {def_path}")
    sif.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    partial = sif.with_name(sif.stem + ".partial.sif")
    cmd = build_command(def_path, partial, apptainer=apptainer or apptainer_binary(), extra=extra)
    start = time.monotonic()
    with open(log, "w") as fh:
        fh.write(f"# {shlex.join(cmd)}\n# def: {def_path}\n# started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  cwd=def_path.parent, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
        seconds = time.monotonic() - start
        fh.write(f"\n# exit {rc} after {seconds:.1f} s\n")
    if rc != 0:
        partial.unlink(missing_ok=True)
        text = log.read_text(errors="replace")
        reasons = [line.strip() for line in text.splitlines()
                   if not line.startswith("+") and re.search(r"IMB source not reachable|IMB tarball|expected .* installed|"
                                r"cannot build the kernels|FAIL:|FATAL:", line)]
        tail = "\n".join(text.splitlines()[-25:])
        what = "timed out" if rc is None else f"failed (exit {rc})"
        head = "; ".join(dict.fromkeys(reasons)) or "see the log"
        raise ContainerError(f"apptainer build of {sif.name} {what}: {head}\nlog: {log}\n--- log tail ---\n{tail}")
    os.replace(partial, sif)
    return BuildResult(sif=sif, seconds=seconds, size_bytes=sif.stat().st_size, command=cmd)


def image_digest(sif: str | Path) -> str:
    """sha256 (hex) of the SIF file: the identity of an image in results and reports."""
    h = hashlib.sha256()
    with open(sif, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def inspect_image(sif: str | Path, *, apptainer: str | None = None) -> JsonValue:
    """``apptainer inspect --all --json`` (labels, help, environment, runscript, test, deffile)."""
    cmd = [apptainer or apptainer_binary(), "inspect", "--all", "--json", str(sif)]
    out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if out.returncode != 0:
        raise ContainerError(f"{shlex.join(cmd)} failed: {out.stderr.strip()}")
    inspected: JsonValue = json.loads(out.stdout)  # apptainer's own document, kept as it is
    return inspected


def image_labels(sif: str | Path, *, apptainer: str | None = None) -> dict[str, str]:
    cmd = [apptainer or apptainer_binary(), "inspect", "--labels", "--json", str(sif)]
    out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if out.returncode != 0:
        raise ContainerError(f"{shlex.join(cmd)} failed: {out.stderr.strip()}")
    data = json.loads(out.stdout)
    return dict(data.get("data", {}).get("attributes", {}).get("labels", {}) or {})


class InspectExtra(TypedDict, total=False):
    """What a caller adds to ``<stack>.inspect.json``."""

    inputs_digest: str  # inputs_digest() of the def and kernel sources the image was built from


class InspectRecord(InspectExtra):
    """``<stack>.inspect.json``: the image, its sha256 and size, apptainer's inspect output, and the
    build's time and command when it was built here."""

    image: str
    sha256: str
    size_bytes: int
    inspect: JsonValue
    build_seconds: NotRequired[float]
    build_command: NotRequired[list[str]]


def write_inspect(sif: str | Path, out: str | Path, *, build: BuildResult | None = None,
                  extra: InspectExtra | None = None) -> InspectRecord:
    """Write ``<stack>.inspect.json``: apptainer's inspect output + sha256 + size (+ build time)."""
    sif = Path(sif)
    record: InspectRecord = {
        "image": str(sif),
        "sha256": image_digest(sif),
        "size_bytes": sif.stat().st_size,
        "inspect": inspect_image(sif),
    }
    if build is not None:
        record["build_seconds"] = round(build.seconds, 1)
        record["build_command"] = build.command
    if extra and "inputs_digest" in extra:
        record["inputs_digest"] = extra["inputs_digest"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


# --------------------------------------------------------------------------- hybrid launch
def exec_argv(image: str | Path, program: Sequence[str], binds: Iterable[str] = (), *,
              apptainer: str = "apptainer") -> list[str]:
    """What the host launcher starts per rank: ``apptainer exec [--bind B]... IMAGE PROGRAM...``.

    The caller prepends the host launcher (``mpirun -n 2``). The host environment
    (PMI variables, I_MPI_*/OMPI_* knobs) passes into the container; the image's
    ``%environment`` sets its own PATH/LD_LIBRARY_PATH.
    """
    argv = [apptainer, "exec"]
    for bind in binds:
        argv += ["--bind", str(bind)]
    return [*argv, str(image), *program]


@dataclass(frozen=True)
class HelloRank:
    rank: int
    size: int
    total: int
    pid: int
    host: str
    lib: str


def parse_hello(output: str) -> list[HelloRank]:
    ranks = []
    for line in output.splitlines():
        m = _HELLO.match(line.strip())
        if m:
            ranks.append(HelloRank(int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5], m[6].strip()))
    return ranks


def check_hello(output: str, np: int, what: str = "hybrid hello") -> list[HelloRank]:
    """Raise ContainerError unless ``np`` processes formed one job of ``np`` ranks."""
    ranks = parse_hello(output)
    if len(ranks) == np and all(r.rank == 0 and r.size == 1 for r in ranks) and np > 1:
        raise ContainerError(
            f"{what}: every rank reports rank 0 of 1 ({np} copies of rank 0): the {np} processes did not "
            "join one MPI job -- each ran as a singleton. The host launcher and the image's MPI do not "
            "share a process-management interface (PMI/PMIx): use the host launcher of the image's MPI "
            f"(kind and version, see `apptainer inspect`). Image MPI reports: {ranks[0].lib}"
        )
    if sorted(r.rank for r in ranks) != list(range(np)) or any(r.size != np or r.total != np for r in ranks):
        seen = ", ".join(f"rank {r.rank} of {r.size}" for r in ranks) or "no hello lines"
        tail = "\n".join(output.splitlines()[-20:])
        raise ContainerError(f"{what}: expected ranks 0..{np - 1} of {np}, got: {seen}\n--- output tail ---\n{tail}")
    return ranks


def _version_key(text: str) -> tuple[int, ...] | None:
    m = _VERSION.search(text or "")
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def versions_match(host_version: str, image_version: str) -> bool:
    """Equal on every component both give (host "2021.16" matches image "2021.16.1"; at least major.minor)."""
    a, b = _version_key(host_version), _version_key(image_version)
    if a is None or b is None:
        return False
    n = min(len(a), len(b))
    return n >= 2 and a[:n] == b[:n]


# Host launchers of the system (Debian) stacks, when the caller gives none.
SYSTEM_LAUNCHERS = {"openmpi": ["mpirun.openmpi"], "mpich": ["mpiexec.mpich"], "intelmpi": ["mpirun"]}


def hybrid_hello(image: str | Path, launcher: Sequence[str], *, np: int = 2, env: Mapping[str, str] | None = None,
                 binds: Iterable[str] = (), timeout: float = 180) -> list[HelloRank]:
    """Run ``launcher -n np apptainer exec IMAGE mpiatlas-hello`` and check the ranks formed one job."""
    argv = [*launcher, "-n", str(np), *exec_argv(image, ["mpiatlas-hello"], binds)]
    return run_hello(argv, np=np, env=env, timeout=timeout)


def run_hello(argv: Sequence[str], *, np: int, env: Mapping[str, str] | None = None,
              timeout: float = 180) -> list[HelloRank]:
    """Run a complete hello launch command line; raise ContainerError unless np ranks formed one job."""
    argv = list(argv)
    run_env = dict(os.environ if env is None else env)
    if os.geteuid() == 0:  # Open MPI refuses root otherwise; harmless for the others
        run_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        run_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    try:
        out = subprocess.run(argv, env=run_env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        if parse_hello(partial):
            check_hello(partial, np)
        raise ContainerError(f"hybrid hello timed out after {timeout:.0f} s: {shlex.join(argv)}") from None
    text = out.stdout + out.stderr
    if out.returncode != 0:
        # The singleton failure may also exit non-zero: name it when it is what happened.
        if parse_hello(text):
            check_hello(text, np)
        tail = "\n".join(text.splitlines()[-20:])
        raise ContainerError(f"hybrid hello failed (exit {out.returncode}): {shlex.join(argv)}\n{tail}")
    return check_hello(text, np)


@dataclass(frozen=True)
class ImageInfo:
    image: Path
    kind: str
    version: str
    labels: dict[str, str]
    hello: tuple[HelloRank, ...] = ()


def preflight(host_stack_kind: str, host_version: str, image: str | Path, *, host_stack: Stack | None = None,
              launcher: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
              binds: Iterable[str] = (), np: int = 2, hello: bool = True, timeout: float = 180) -> ImageInfo:
    """Check that ``image`` can run under the host's MPI launcher before a campaign uses it.

    1. The image's labels (``mpiatlas.mpi.kind``/``mpiatlas.mpi.version``) must name the host's
       MPI kind and version (compared on the components both give).
    2. Unless ``hello=False``: a real ``np``-rank hybrid hello through the host launcher
       (``host_stack`` -- a ``mpiatlas.stacks`` Stack --, else ``launcher``, else the Debian
       launcher of the kind) must form one job; N copies of "rank 0 of 1" is reported as such.
    Raises ContainerError; returns what was checked.
    """
    image = Path(image)
    if not image.is_file():
        raise ContainerError(f"image {image} does not exist (build it: snakemake results/images/<stack>.sif)")
    labels = image_labels(image)
    kind = labels.get("mpiatlas.mpi.kind", "")
    version = labels.get("mpiatlas.mpi.version", "")
    if not kind or not version:
        raise ContainerError(f"{image}: no mpiatlas.mpi.kind/mpiatlas.mpi.version labels -- not an mpiatlas image?")
    if kind != host_stack_kind:
        raise ContainerError(
            f"MPI mismatch: image {image.name} holds {kind} {version} but the host launcher is "
            f"{host_stack_kind} {host_version}. In the hybrid model the host launcher starts the image's "
            f"ranks, so both must be the same MPI: use the {kind} host stack or the {host_stack_kind} image."
        )
    if not versions_match(host_version, version):
        raise ContainerError(
            f"MPI version mismatch: image {image.name} holds {kind} {version} but the host launcher is "
            f"{kind} {host_version!r}; hybrid launches need the same version on both sides."
        )
    ranks: list[HelloRank] = []
    if hello:
        if host_stack is not None:
            transport = next(iter(host_stack.transports))
            launch = host_stack.launch(exec_argv(image, ["mpiatlas-hello"], binds),
                                       LaunchSpec(np=np, transport=transport))
            run_env = host_stack.env(dict(os.environ if env is None else env) | launch.env)
            ranks = run_hello(launch.argv, np=np, env=run_env, timeout=timeout)
        else:
            ranks = hybrid_hello(image, launcher or SYSTEM_LAUNCHERS[host_stack_kind], np=np, env=env,
                                 binds=binds, timeout=timeout)
    return ImageInfo(image=image, kind=kind, version=version, labels=labels, hello=tuple(ranks))
