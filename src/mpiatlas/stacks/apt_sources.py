"""The Debian mirror an image is built from: the one the host's own apt sources name, else the config's.

No mirror address is written in mpiatlas: a site with a local or air-gapped mirror has already pointed
its hosts' apt at it, and the images follow without an edit. ``containers.mirror_url`` in a campaign
config overrides the host (a host that is not Debian, or an image of another mirror).

apt reads two formats (man 5 sources.list), both read here: one-line entries
(``/etc/apt/sources.list``, ``sources.list.d/*.list``) and deb822 paragraphs (``sources.list.d/*.sources``).
Other files in ``sources.list.d`` (``*.save``, ``*.disabled``) are ignored, as apt ignores them.
python-debian parses deb822, but it is not installed with mpiatlas and the two fields' grammar is small.

The main archive is the ``deb`` entry that serves the image's suite (``bookworm``), else, on a Debian
host of another release, the entry of the host's own suite (os-release ``VERSION_CODENAME``): a Debian
mirror serves every release. The ``-updates`` and ``-security`` archives come from the entries of the
same suite with those suffixes, when the host names them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# The host's file system root: tests read recorded trees (tests/data/apt/<case>/etc/...).
HOST_ROOT = Path("/")
APT_DIR = Path("etc/apt")
OS_RELEASE = Path("etc/os-release")
_OPTIONS = re.compile(r"^\[[^\]]*\]$")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(.*)$")


class NoDebianMirror(RuntimeError):
    """Neither the host's apt sources nor the config name a Debian mirror for the image's suite."""


@dataclass(frozen=True)
class AptSource:
    """One entry of the host's apt sources (a one-line entry, or a deb822 paragraph)."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    file: Path
    enabled: bool = True

    def serves(self, suite: str) -> bool:
        return self.enabled and "deb" in self.types and suite in self.suites


@dataclass(frozen=True)
class DebianMirror:
    """The archives of one Debian suite an image installs from, and where that choice came from."""

    url: str
    suite: str
    origin: str
    updates_url: str | None = None
    security_url: str | None = None

    def sources_list(self) -> str:
        """The image's /etc/apt/sources.list (one-line format, component main)."""
        lines = [f"deb {self.url} {self.suite} main"]
        if self.updates_url:
            lines.append(f"deb {self.updates_url} {self.suite}-updates main")
        if self.security_url:
            lines.append(f"deb {self.security_url} {self.suite}-security main")
        return "\n".join(lines) + "\n"


def parse_one_line(text: str, file: Path) -> list[AptSource]:
    """``deb [options] URI SUITE [COMPONENT...]`` lines; comments and blank lines skipped."""
    entries = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3:
            continue
        kind, rest = words[0], words[1:]
        # Options: `[arch=amd64 signed-by=...]`, possibly split over several words.
        while rest and rest[0].startswith("["):
            option = rest.pop(0)
            while not _OPTIONS.match(option) and rest:
                option += " " + rest.pop(0)
        if len(rest) >= 2:
            entries.append(AptSource((kind,), (rest[0],), (rest[1],), tuple(rest[2:]), file))
    return entries


def _paragraphs(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs as {lower-case field: value}; continuation lines join their field."""
    paragraphs: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, last = {}, ""
        elif line[0] in " \t" and last:
            fields[last] += " " + line.strip()
        elif match := _FIELD.match(line):
            last = match.group(1).lower()
            fields[last] = match.group(2).strip()
    if fields:
        paragraphs.append(fields)
    return paragraphs


def parse_deb822(text: str, file: Path) -> list[AptSource]:
    """The paragraphs of a ``.sources`` file (fields Types, URIs, Suites, Components, Enabled)."""
    return [AptSource(tuple(p.get("types", "").split()), tuple(p.get("uris", "").split()),
                      tuple(p.get("suites", "").split()), tuple(p.get("components", "").split()), file,
                      enabled=p.get("enabled", "yes").strip().lower() != "no")
            for p in _paragraphs(text)]


def source_files(root: Path = HOST_ROOT) -> list[Path]:
    """The files apt reads, in apt's order: sources.list, then sources.list.d by name."""
    apt = root / APT_DIR
    listed = sorted(p for p in (apt / "sources.list.d").glob("*") if p.suffix in (".list", ".sources"))
    return [p for p in [apt / "sources.list", *listed] if p.is_file()]


def host_sources(root: Path = HOST_ROOT) -> list[AptSource]:
    entries = []
    for path in source_files(root):
        parse = parse_deb822 if path.suffix == ".sources" else parse_one_line
        entries += parse(path.read_text(errors="replace"), path)
    return entries


def host_codename(root: Path = HOST_ROOT) -> str | None:
    """The Debian release of the host (os-release VERSION_CODENAME), None on another distribution."""
    try:
        text = (root / OS_RELEASE).read_text()
    except OSError:
        return None
    values = {key: value for key, sep, value in (line.partition("=") for line in text.splitlines()) if sep}
    if values.get("ID", "").strip('"') != "debian":
        return None
    return values.get("VERSION_CODENAME", "").strip('"') or None


def _first_uri(entries: list[AptSource], suite: str) -> AptSource | None:
    return next((e for e in entries if e.serves(suite) and e.uris), None)


def host_mirror(suite: str, root: Path = HOST_ROOT) -> DebianMirror | None:
    """The Debian archives of ``suite`` the host's apt sources name, None when they name none."""
    entries = host_sources(root)
    codename = host_codename(root)
    for host_suite in dict.fromkeys(s for s in (suite, codename) if s):
        main = _first_uri(entries, host_suite)
        if main is None:
            continue
        updates = _first_uri(entries, f"{host_suite}-updates")
        security = _first_uri(entries, f"{host_suite}-security")
        return DebianMirror(main.uris[0], suite, f"host apt sources ({main.file})",
                            updates.uris[0] if updates else None, security.uris[0] if security else None)
    return None


def image_mirror(configured: str | None, suite: str, root: Path = HOST_ROOT) -> DebianMirror:
    """The config's ``containers.mirror_url`` when set, else the host's mirror for ``suite``."""
    if configured:
        return DebianMirror(configured, suite, "config containers.mirror_url")
    found = host_mirror(suite, root)
    if found is None:
        files = ", ".join(str(p) for p in source_files(root)) or "none found"
        raise NoDebianMirror(
            f"no Debian mirror for the image's suite {suite!r}: the host's apt sources "
            f"({root / APT_DIR}/sources.list and sources.list.d/*.list, *.sources; read: {files}) name none, "
            "and the campaign config sets no containers.mirror_url (set it to your site's Debian mirror)")
    return found
