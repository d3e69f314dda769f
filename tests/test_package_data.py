"""What an installed mpiatlas runs from is package data (mpiatlas.files.shipped): every file of the
workflow, its profiles, the image templates and the kernels' sources is named by pyproject.toml's
package-data (a file left out would be missing only from a wheel, never from a checkout), and a
campaign outside a checkout gets the shipped profiles. The install itself: tests/test_package_install.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

from mpiatlas import files
from mpiatlas.campaign.snakemake_start import profile_dir, workflow_argv

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "mpiatlas"
SHIPPED_DIRS = (files.WORKFLOW, files.PROFILES, files.IMAGE_TEMPLATES, files.KERNEL_SOURCES)


def _package_data_patterns() -> list[str]:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns: list[str] = settings["tool"]["setuptools"]["package-data"]["mpiatlas"]
    return patterns


def test_every_shipped_file_is_package_data() -> None:
    # setuptools expands each pattern with glob, relative to the package directory.
    packaged = {p for pattern in _package_data_patterns() for p in PACKAGE.glob(pattern) if p.is_file()}
    on_disk = {p for name in SHIPPED_DIRS for p in (PACKAGE / name).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert {files.snakefile(), files.shipped_profile("local") / "profile.yaml",
            files.shipped_kernel_sources() / "Makefile"} <= on_disk
    missing = sorted(str(p.relative_to(PACKAGE)) for p in on_disk - packaged)
    assert not missing, f"not in pyproject.toml's package-data, so not in a wheel: {missing}"


def test_the_checkout_links_its_old_paths_to_the_package_data() -> None:
    for old, shipped in (("workflow", files.WORKFLOW), ("profiles", files.PROFILES),
                         ("containers", files.IMAGE_TEMPLATES), ("src/kernels", files.KERNEL_SOURCES)):
        assert (REPO / old).resolve() == files.shipped(shipped).resolve(), old


def test_profiles_resolve_to_a_directory_of_that_path_else_the_shipped_one(tmp_path: Path) -> None:
    local = str(files.shipped_profile("local"))
    assert profile_dir("profiles/local", tmp_path) == local
    assert profile_dir("slurm", tmp_path) == str(files.shipped_profile("slurm"))
    (tmp_path / "profiles" / "local").mkdir(parents=True)  # a site's own profile of that path wins
    assert profile_dir("profiles/local", tmp_path) == "profiles/local"
    assert profile_dir("site", tmp_path) == "site"  # neither: Snakemake looks it up by name itself
    argv = workflow_argv("c.yaml", "profiles/slurm", tmp_path, "-n")
    assert argv[argv.index("--snakefile") + 1] == str(files.snakefile())
    assert argv[argv.index("--profile") + 1] == str(files.shipped_profile("slurm")) and argv[-1] == "-n"
