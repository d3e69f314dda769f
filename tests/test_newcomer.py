"""A newcomer's first run works on a fresh machine: the README's two commands, from a fresh clone.

CI's own machine is provisioned (hwloc, MPI, SLURM, ...), so a green CI could hide a missing
install step. This test runs the README's first command (venv + ``pip install -e .`` +
``mpiatlas campaign``, here on ``config/test/tiny.yaml``) inside an Apptainer image that is only
what a fresh machine has (tests/data/fresh-machine.def: Debian 12 + python3, python3-venv, gcc,
make, git), as a non-root user, from a fresh clone with no ``../shared`` beside it, with
``--containall --cleanenv`` so no host tool or variable leaks in. It then checks what a newcomer
would: the command succeeds, prints where the report is, the report is there, nearly every cell is
``ok``, and nothing on the terminal is a traceback. Then, in the same clone, the README's second
command (the tests): it exits 0 with no failure, and every test it skips (the infrastructure the
image lacks: hwloc, Debian MPI, SLURM, Apptainer, ...) says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jinja2
import pytest

from conftest import REPO, RESULTS_DIR_ENV, require_infra
from mpiatlas.stacks import apt_sources

DEF_FILE = REPO / "tests" / "data" / "fresh-machine.def"
OS_VERSION = "bookworm"  # Debian 12, the fresh machine
SIF_CACHE = REPO / ".cache"
ARTIFACTS = REPO / "results" / "ci-artifacts"
CONFIG = "config/test/tiny.yaml"

# The newcomer: nobody/nogroup, which every Debian base has; HOME and the clone are theirs.
NEWCOMER_UID = 65534
HOME = "/home/newcomer"
CLONE = f"{HOME}/mpiatlas"
# Tools a fresh machine does not have: finding one inside means the image is not fresh.
ABSENT_TOOLS = ("lstopo", "likwid-topology", "mpicc", "mpirun", "mpiexec", "sbatch", "srun")

MIN_OK_FRACTION = 0.90
BUILD_TIMEOUT_S = 1200
# The budget is ~10 min; a hang must fail the test, not eat CI's 90 minutes.
RUN_TIMEOUT_S = 1800
TAIL_LINES = 30


# --------------------------------------------------------------------------- the README command
def readme_first_command(readme: str) -> str:
    """The first command of the README's first ```sh block (the fresh-machine set-up and run)."""
    block = re.search(r"^```sh\n(.*?)^```", readme, flags=re.S | re.M)
    assert block, "README.md has no ```sh block: where is the newcomer's first command?"
    command = block.group(1).strip().splitlines()[0].strip()
    assert "mpiatlas campaign" in command, f"README's first command does not run a campaign: {command!r}"
    return command


def readme_test_command(readme: str) -> str:
    """The README's test command: the second command of its fresh-machine section (the line CI runs)."""
    found = re.findall(r"^python3 -m venv \.venv .*pytest.*$", readme, flags=re.M)
    assert found, "README.md has no test command (python3 -m venv .venv ... pytest)"
    return found[0].strip()


# What pytest adds to the README's command inside the image (environment, not the command): every
# skip with its reason in the summary, and a result file to count from.
# The command runs pytest twice (the unit tests on two workers, then the infrastructure tests):
# each run writes its own file there (conftest.RESULTS_DIR_ENV).
TEST_RESULTS = "/tmp/newcomer-tests"
TEST_ADDOPTS = "-rfEs -p no:cacheprovider"


def junit_counts(xml_paths: list[Path]) -> dict[str, int]:
    """The counts summed over the command's result files, one per pytest run."""
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for xml_path in xml_paths:
        suite = ET.parse(xml_path).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        assert suite is not None, f"{xml_path} has no testsuite"
        for k in counts:
            counts[k] += int(suite.get(k, 0))
    return counts


# How much of each failing test's traceback the assertion message carries (the CI log shows only it).
PROBLEM_LINES = 40


def junit_problems(xml_paths: list[Path]) -> list[str]:
    """Each failed or errored test of the result file: its id, pytest's message and the last
    PROBLEM_LINES lines of its traceback. The terminal's short summary cuts the message off where a
    long test id fills the line, so without this a failure in the image is a name without a cause."""
    problems = []
    for case in (case for xml_path in xml_paths for case in ET.parse(xml_path).getroot().iter("testcase")):
        for bad in (*case.findall("failure"), *case.findall("error")):
            text = "\n".join((bad.text or "").splitlines()[-PROBLEM_LINES:])
            problems.append(f"{case.get('classname')}::{case.get('name')} ({bad.tag}): "
                            f"{bad.get('message', '')}\n{text}")
    return problems


def skips_without_reason(output: str) -> list[str]:
    """The summary's SKIPPED lines (pytest -rs) that give no reason after the location."""
    lines = [ln for ln in output.splitlines() if ln.startswith("SKIPPED [")]
    return [ln for ln in lines if not re.match(r"SKIPPED \[\d+\] [^:]+:\d+: \S", ln)]


# --------------------------------------------------------------------------- the image
def fresh_machine_def(host_root: Path = apt_sources.HOST_ROOT) -> str:
    """The fresh-machine def, rendered with the Debian archives the host's apt sources name."""
    mirror = apt_sources.image_mirror(None, OS_VERSION, host_root)
    template = jinja2.Template(DEF_FILE.read_text(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return template.render(os_version=OS_VERSION, mirror_url=mirror.url, sources_list=mirror.sources_list())


def fresh_machine_image() -> Path:
    """The fresh-machine SIF, built once per rendering of its def file (~1.5-3 min)."""
    from mpiatlas.stacks.containers import build_image

    text = fresh_machine_def()
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    sif = SIF_CACHE / f"fresh-machine-{digest}.sif"
    if not sif.is_file():
        deffile = SIF_CACHE / f"fresh-machine-{digest}.def"
        deffile.parent.mkdir(parents=True, exist_ok=True)
        deffile.write_text(text)
        build_image(deffile, sif, SIF_CACHE / f"fresh-machine-{digest}.log", timeout=BUILD_TIMEOUT_S)
        for stale in SIF_CACHE.glob("fresh-machine-*"):  # images of older def files (~150 MB each)
            if not stale.name.startswith(sif.stem):
                stale.unlink()
    return sif


def test_fresh_machine_installs_from_the_hosts_archives() -> None:
    """The def names no mirror: a (recorded) site host's archive, -updates and -security are rendered in."""
    text = fresh_machine_def(REPO / "tests" / "data" / "apt" / "one-line-site")
    assert "{{" not in text and "{%" not in text
    assert "MirrorURL: http://apt.site.example/debian\n" in text
    listed = text.split("cat > /etc/apt/sources.list <<'EOF'\n", 1)[1].split("EOF\n", 1)[0].splitlines()
    assert listed == ["deb http://apt.site.example/debian bookworm main",
                      "deb http://apt.site.example/debian bookworm-updates main",
                      "deb http://apt.site.example/debian-security bookworm-security main"]


def in_image(sif: Path, work: Path, program: list[str], cwd: str = HOME) -> list[str]:
    """argv running ``program`` in the image as the newcomer: contained (no host /tmp, HOME or
    environment; the image's default PATH), with only the newcomer's home and a disk-backed /tmp
    (a real machine's /tmp is not a RAM tmpfs) bound in. Root inside the container is the host's
    root, so setpriv (util-linux, in every Debian base) drops to nobody with no capabilities."""
    return ["apptainer", "exec", "--containall", "--cleanenv",
            "--bind", f"{work / 'home'}:{HOME}", "--bind", f"{work / 'tmp'}:/tmp", "--pwd", cwd,
            str(sif),
            "setpriv", f"--reuid={NEWCOMER_UID}", f"--regid={NEWCOMER_UID}", "--clear-groups",
            "env", f"HOME={HOME}", "USER=nobody", "LOGNAME=nobody", *program]


def run_as_newcomer(sif: Path, work: Path, program: list[str]) -> tuple[str, int | None, float]:
    """``program`` in the clone, in the image, as the newcomer: (terminal output, exit code or None
    when it hit RUN_TIMEOUT_S, wall seconds, recorded for the closing note)."""
    start = time.monotonic()
    try:
        run = subprocess.run(in_image(sif, work, program, cwd=CLONE), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
        output, returncode = run.stdout, run.returncode
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        returncode = None
    return output, returncode, round(time.monotonic() - start, 1)


# --------------------------------------------------------------------------- the clone
def git(*args: str, cwd: Path = REPO, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True).stdout


def fresh_clone(dest: Path) -> None:
    """``git clone`` of this repository, plus the working tree's uncommitted changes (tracked
    diff and untracked, non-ignored files) so a developer tests what they have; in CI the tree is
    clean and this is the plain clone."""
    git("clone", "--quiet", str(REPO), str(dest))
    diff = git("diff", "HEAD", "--binary")
    if diff:
        git("apply", "--binary", "--whitespace=nowarn", "-", cwd=dest, stdin=diff)
    for name in git("ls-files", "--others", "--exclude-standard", "-z").decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def newcomer_workdir(work: Path) -> None:
    """home/ (HOME, with the clone) and tmp/ (/tmp), owned by the newcomer as on their machine."""
    (work / "home").mkdir(parents=True)
    (work / "tmp").mkdir()
    fresh_clone(work / "home" / "mpiatlas")
    for root, dirs, files in os.walk(work):
        for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            os.lchown(name, NEWCOMER_UID, NEWCOMER_UID)
    (work / "tmp").chmod(0o1777)


# --------------------------------------------------------------------------- what the run left
def reported_path(output: str, work: Path) -> Path | None:
    """The host path of the last ``report: <path>`` line (a path inside the image's HOME)."""
    lines = [ln[len("report: "):].strip() for ln in output.splitlines() if ln.startswith("report: ")]
    if not lines:
        return None
    inside = Path(lines[-1])
    assert inside.is_relative_to(HOME), f"report path {inside} is outside the newcomer's home {HOME}"
    return work / "home" / inside.relative_to(HOME)


def cells_table(report: Path) -> Path | None:
    """cells.parquet of the report's campaign: <report dir>/tidy/, else anywhere under the
    report's directory (not a partial report's)."""
    beside = report.parent / "tidy" / "cells.parquet"
    if beside.is_file():
        return beside
    found = sorted(p for p in report.parent.rglob("cells.parquet") if "partial" not in p.parts)
    return found[0] if found else None


def cell_status(cells_path: Path) -> tuple[int, int, str]:
    """(cells, ok cells, a listing of the cells that are not ok with their reasons)."""
    import polars as pl

    cells = pl.read_parquet(cells_path)
    not_ok = cells.filter(pl.col("status") != "ok").select("cell", "status", "reason")
    with pl.Config(tbl_rows=40, fmt_str_lengths=120):
        return cells.height, cells.height - not_ok.height, str(not_ok)


def record_figures(figures: dict[str, object], output: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's closing note wants the wall time and the terminal line count: keep them (and
    the terminal output) next to the test and, where possible, as CI artifacts."""
    text = json.dumps(figures, indent=2) + "\n"
    (tmp / "newcomer.json").write_text(text)
    (tmp / "terminal.txt").write_text(output)
    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "newcomer.json").write_text(text)
        (ARTIFACTS / "newcomer-terminal.txt").write_text(output)
    except OSError as exc:
        print(f"could not write {ARTIFACTS}: {exc}")
    with capsys.disabled():  # shown in CI's log even when the test passes (pytest -q captures)
        print(f"\nnewcomer first run: {json.dumps(figures)}", flush=True)


def tail(output: str, n: int = TAIL_LINES) -> str:
    return "\n".join(output.splitlines()[-n:])


# --------------------------------------------------------------------------- the test
@pytest.mark.infra
def test_readme_commands_on_a_fresh_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_infra(shutil.which("apptainer") is not None, "Apptainer")
    require_infra(os.geteuid() == 0, "root (apptainer build from debootstrap, setpriv to the newcomer)")
    sif = fresh_machine_image()
    work = tmp_path / "machine"
    newcomer_workdir(work)

    # The machine is fresh and the newcomer is not root.
    probe = subprocess.run(
        in_image(sif, work, ["bash", "-c", 'id -u; for t in "$@"; do command -v "$t" || true; done',
                             "probe", *ABSENT_TOOLS]),
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert probe.returncode == 0, f"probing the image failed:\n{probe.stdout}{probe.stderr}"
    uid, *found = probe.stdout.split()
    assert uid == str(NEWCOMER_UID), f"the command would run as uid {uid}, not the non-root newcomer"
    assert not found, f"the fresh-machine image is not fresh, it has: {found}"

    command = f"{readme_first_command((work / 'home' / 'mpiatlas' / 'README.md').read_text())} --config {CONFIG}"
    output, returncode, wall_s = run_as_newcomer(sif, work, ["bash", "-c", command])
    figures: dict[str, object] = {"command": command, "wall_s": wall_s,
                                  "terminal_lines": len(output.splitlines()), "exit_code": returncode,
                                  "image": sif.name}
    last = f"{command}\n--- last {TAIL_LINES} terminal lines ---\n{tail(output)}"

    report = reported_path(output, work)
    cells_path = cells_table(report) if report is not None and report.is_file() else None
    total, ok, not_ok = cell_status(cells_path) if cells_path is not None else (0, 0, "")
    figures.update(cells=total, ok_cells=ok)
    record_figures(figures, output, tmp_path, capsys)

    assert returncode == 0, f"the first command exited {returncode} after {wall_s} s:\n{last}"
    assert "Traceback (most recent call last)" not in output, f"a traceback on the terminal:\n{last}"
    assert report is not None, f"the first command printed no 'report: <path>' line:\n{last}"
    assert report.is_file(), f"the printed report {report} does not exist:\n{last}"
    assert cells_path is not None, f"no cells.parquet next to or under {report.parent}"
    assert total > 0, f"{cells_path} lists no cells"
    assert ok >= MIN_OK_FRACTION * total, (
        f"only {ok} of {total} cells are ok (need {MIN_OK_FRACTION:.0%}); not ok:\n{not_ok}")

    # The README's second command, in the same clone, as the newcomer would run it next.
    tests = readme_test_command((work / "home" / "mpiatlas" / "README.md").read_text())
    test_output, test_rc, tests_wall_s = run_as_newcomer(
        sif, work, ["env", f"PYTEST_ADDOPTS={TEST_ADDOPTS}", f"{RESULTS_DIR_ENV}={TEST_RESULTS}",
                    "bash", "-c", tests])
    results = sorted((work / "tmp" / Path(TEST_RESULTS).name).glob("junit-*.xml"))
    counts = junit_counts(results) if results else {}
    figures.update(tests_command=tests, tests_wall_s=tests_wall_s, tests_exit_code=test_rc,
                   **{f"tests_{k}": v for k, v in counts.items()})
    record_figures(figures, output + "\n--- tests ---\n" + test_output, tmp_path, capsys)
    last = f"{tests}\n--- last {TAIL_LINES} terminal lines ---\n{tail(test_output)}"
    failed = [ln for ln in test_output.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    problems = junit_problems(results)
    assert test_rc == 0 and not failed, "\n".join([f"the README's test command exited {test_rc}:", *failed,
                                                     *problems, last])
    assert counts and counts["failures"] == counts["errors"] == 0 and counts["tests"] > 0, (counts, last)
    assert not skips_without_reason(test_output), skips_without_reason(test_output)
    # Passed: the clone's venv, stacks and results are ~1 GB; a failure keeps them to inspect.
    shutil.rmtree(work, ignore_errors=True)
