"""Files mpiatlas writes, at the ground floor: atomic replacement (a reader never sees half a file) and
the user cache directory. Every package writes through these; :mod:`mpiatlas.matrix.layout` names the files."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path


# Overrides the user cache (tests; a shared cluster home that must not be written to).
CACHE_ENV = "MPIATLAS_CACHE_DIR"


def user_cache_dir(*parts: str) -> Path:
    """$MPIATLAS_CACHE_DIR, else $XDG_CACHE_HOME/mpiatlas, else ~/.cache/mpiatlas (then ``parts``)."""
    base = os.environ.get(CACHE_ENV) or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpiatlas")
    return Path(base).joinpath(*parts)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """``text`` written aside and renamed over ``path``: a reader never sees half a file, and two
    writers of one path (two campaigns on a node, a re-run beside a stale one) each replace it whole,
    because each writes under a name of its own (pid + random, created exclusively, so the umask
    sets its mode as for any other file). A failed write leaves no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: object) -> None:
    """``data`` as JSON, through :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=0) + "\n")
