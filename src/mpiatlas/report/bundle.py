"""The Vega + Vega-Lite + vega-embed JavaScript the report inlines, from vl-convert, kept on disk.

``vl_convert.javascript_bundle`` bundles the libraries afresh in every process (~3 s of CPU), and
a campaign builds its report in a new process each time (full and partial views, every re-run).
The bundle depends only on the vl-convert release and the Vega-Lite version asked for, so it is
written once per (vl-convert, Vega-Lite) pair under the user's cache directory and read back
after that. Written aside and renamed: a reader never sees half a file. An unreadable or
unwritable cache only costs the time to bundle again.
"""

from __future__ import annotations

import re
from pathlib import Path

import vl_convert

from mpiatlas.files import user_cache_dir, write_text_atomic


def bundle_path(vl_convert_version: str, vl_version: str | None) -> Path:
    """Where the bundle of this vl-convert release and Vega-Lite version is kept."""
    name = f"vega-bundle_vl-convert-{vl_convert_version}_vega-lite-{vl_version or 'default'}.js"
    return user_cache_dir() / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def javascript_bundle(vl_version: str | None) -> str:
    """``vl_convert.javascript_bundle(vl_version=...)``, from the disk cache when it is there."""
    # vl-convert's stub lacks the module's __version__ and makes snippet required (the runtime defaults it).
    path = bundle_path(vl_convert.__version__, vl_version)  # type: ignore[attr-defined]
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    js = vl_convert.javascript_bundle(vl_version=vl_version)  # type: ignore[call-arg]
    _write_atomic(path, js)
    return js


def _write_atomic(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError:  # a cache that cannot be written costs time, not the report
        pass
