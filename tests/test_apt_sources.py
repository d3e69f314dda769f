"""The images' Debian mirror (mpiatlas.stacks.apt_sources): read from recorded apt sources trees
(tests/data/apt/<case>/etc/...), in both of apt's formats, or taken from the config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpiatlas.stacks import apt_sources, containers
from mpiatlas.stacks.containers import ContainerError

REPO = Path(__file__).resolve().parents[1]
APT = REPO / "tests" / "data" / "apt"
# Public Debian and Ubuntu archives: none may be written where the images get their mirror from
# the host (the recorded apt trees under tests/data/apt are the host's files, not mpiatlas's).
PUBLIC_ARCHIVE = re.compile(r"\b(?:deb|security|ftp|httpredir|cdn-fastly\.deb|ftp\.[a-z]{2})\.debian\.org"
                            r"|\b(?:archive|security|[a-z]{2}\.archive)\.ubuntu\.com")


def test_deb822_host_names_main_updates_and_security() -> None:
    """This machine's own debian.sources; the files apt ignores (*.save, *.disabled) are ignored."""
    root = APT / "deb822-host"
    assert [p.name for p in apt_sources.source_files(root)] == ["debian.sources"]
    recorded = root / "etc/apt/sources.list.d/debian.sources"
    # Its two paragraphs: the archive (bookworm, bookworm-updates), then the security archive.
    archive, security = re.findall(r"^URIs: (\S+)$", recorded.read_text(), re.M)
    mirror = apt_sources.image_mirror(None, "bookworm", root)
    assert (mirror.url, mirror.updates_url, mirror.security_url) == (archive, archive, security)
    assert mirror.origin == f"host apt sources ({recorded})"
    assert mirror.sources_list().splitlines() == [
        f"deb {archive} bookworm main", f"deb {archive} bookworm-updates main",
        f"deb {security} bookworm-security main"]


def test_one_line_site_mirror_skips_sources_and_other_archives() -> None:
    """Options in brackets, a deb-src line, a trailing comment and a vendor archive whose suite
    merely contains the release's name."""
    entries = apt_sources.host_sources(APT / "one-line-site")
    assert [(e.types, e.suites) for e in entries] == [
        (("deb",), ("bookworm",)), (("deb-src",), ("bookworm",)), (("deb",), ("bookworm-updates",)),
        (("deb",), ("bookworm-security",)), (("deb",), ("cloud-sdk-bookworm",))]
    assert entries[0].components == ("main", "contrib")
    mirror = apt_sources.image_mirror(None, "bookworm", APT / "one-line-site")
    assert mirror.url == "http://apt.site.example/debian"
    assert mirror.security_url == "http://apt.site.example/debian-security"


def test_host_of_another_release_lends_its_mirror() -> None:
    """A trixie host: its mirror serves bookworm too; a disabled paragraph and a multi-line field
    (an inline key) are read as apt reads them."""
    root = APT / "other-release"
    entries = apt_sources.host_sources(root)
    assert [e.enabled for e in entries] == [True, True, False]
    assert entries[0].types == ("deb", "deb-src") and entries[1].components == ("main",)
    mirror = apt_sources.image_mirror(None, "bookworm", root)
    assert mirror.sources_list().splitlines() == [
        "deb http://mirror.site.example/debian bookworm main",
        "deb http://mirror.site.example/debian bookworm-updates main",
        "deb http://mirror.site.example/debian-security bookworm-security main"]


def test_no_sources_and_no_config_names_both() -> None:
    root = APT / "not-debian"
    assert apt_sources.host_codename(root) is None
    with pytest.raises(apt_sources.NoDebianMirror, match=r"apt sources .* containers\.mirror_url"):
        apt_sources.image_mirror(None, "bookworm", root)
    configured = apt_sources.image_mirror("http://debian.site.example/debian/", "bookworm", root)
    assert configured.url == "http://debian.site.example/debian/"
    assert configured.origin == "config containers.mirror_url"
    assert configured.sources_list() == "deb http://debian.site.example/debian/ bookworm main\n"


def test_images_take_the_hosts_mirror_or_the_configs() -> None:
    params = containers.render_params("mpich", {}, host_root=APT / "one-line-site")
    assert params["mirror_url"] == "http://apt.site.example/debian"
    text = containers.render_def("mpich", **params)
    assert "MirrorURL: http://apt.site.example/debian\n" in text
    configured = containers.render_params("mpich", {"mirror_url": "http://debian.site.example/debian/"},
                                          host_root=APT / "not-debian")
    assert configured["mirror_url"] == "http://debian.site.example/debian/"
    with pytest.raises(ContainerError, match=r"containers\.mirror_url"):
        containers.render_params("mpich", {}, host_root=APT / "not-debian")
    with pytest.raises(ContainerError, match=r"containers\.mirror_url"):
        containers.render_def("mpich", host_root=APT / "not-debian")
    # A docker bootstrap needs no Debian mirror.
    docker = containers.render_params("mpich", {"bootstrap": "docker"}, host_root=APT / "not-debian")
    assert "Bootstrap: docker" in containers.render_def("mpich", **docker, host_root=APT / "not-debian")


def _project_files() -> list[Path]:
    """The code, the tests and the image definitions (and the workflow and configs that set them)."""
    patterns = ("src/**/*.py", "src/**/*.def", "src/**/*.smk", "src/**/*.yaml", "src/**/Snakefile",
                "workflow/**/*", "containers/*", "config/**/*.yaml", "tests/*.py", "tests/data/*.def")
    return sorted({p.resolve() for pattern in patterns for p in REPO.glob(pattern) if p.is_file()})


def test_no_package_mirror_is_written_down() -> None:
    found = [f"{p.relative_to(REPO.resolve())}: {m.group(0)}" for p in _project_files()
             for m in PUBLIC_ARCHIVE.finditer(p.read_text(errors="replace"))]
    assert not found, found
    for deffile in [*REPO.glob("containers/*.def"), REPO / "tests" / "data" / "fresh-machine.def"]:
        lines = [line for line in deffile.read_text().splitlines() if line.startswith("MirrorURL:")]
        assert lines and all("{{" in line for line in lines), f"{deffile}: {lines}"
