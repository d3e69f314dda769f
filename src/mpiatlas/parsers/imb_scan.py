"""The C batch scanner of IMB output (``imbscan.c``), loaded with ctypes, for ``mpiatlas import``.

The scanner reads a chunk of files itself and takes the happy path of the IMB state machine only:
each file yields its rows or is *bailed*, and a bailed file is read and parsed by the Python lines
executor (:mod:`mpiatlas.parsers.imb_lines`, the reference), which also words every error. So the
scanner never needs error messages, Unicode or regex semantics; tests/test_imb_executors.py checks
that both give identical rows where the scanner does not bail.

The shared library is built on first use with the machine's C compiler (``CC``, else ``cc`` or
``gcc``) into the user cache, named by the hash of the source and of its header; no Python headers
are needed. The header (``imbscan_shapes.h``) is generated here from :mod:`mpiatlas.parsers.imb_shapes`
at each build: the scanner's tables have no copy of their own. Without a
compiler, or if the build fails, one warning is logged and every file goes through Python: slower,
never wrong.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from mpiatlas.files import user_cache_dir
from mpiatlas.parsers import imb_shapes as shapes
from mpiatlas.parsers.imb import SCHEMA

__all__ = ["ImbScan", "scan_imb_files", "scanner_available"]

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("imbscan.c")
HEADER_NAME = "imbscan_shapes.h"
_INT64, _INT32, _DOUBLE = ctypes.c_int64, ctypes.c_int32, ctypes.c_double


class _Block(ctypes.Structure):
    """imbscan_block: a table; benchmark, mode (-1: null) and version are string ids."""

    _fields_ = [("file", _INT32), ("run", _INT32), ("processes", _INT32), ("benchmark", _INT32), ("mode", _INT32),
                ("version", _INT32), ("rows", _INT32), ("reserved", _INT32)]  # fmt: skip


# imbscan_result's row columns: -1 stands for a null integer, NaN for a null float (no digit token is NaN).
_INT64_COLUMNS = ("bytes", "repetitions")
_FLOAT_COLUMNS = ("t_usec", "t_min_usec", "t_max_usec", "t_avg_usec", "bandwidth_MBps", "msg_per_sec")
_INT32_COLUMNS = ("file", "block", "line", "group", "status")


class _Result(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.POINTER(_INT64)) for name in _INT64_COLUMNS),
        *((name, ctypes.POINTER(_DOUBLE)) for name in _FLOAT_COLUMNS),
        *((name, ctypes.POINTER(_INT32)) for name in _INT32_COLUMNS),
        ("n_rows", _INT64), ("cap_rows", _INT64),
        ("blocks", ctypes.POINTER(_Block)), ("n_blocks", _INT64), ("cap_blocks", _INT64),
        ("chars", ctypes.c_void_p), ("n_chars", _INT64), ("cap_chars", _INT64),
        ("offsets", ctypes.POINTER(_INT64)), ("n_strings", _INT64), ("cap_strings", _INT64),
        ("bailed", ctypes.POINTER(ctypes.c_int8)), ("n_files", _INT64),
        ("hash", ctypes.c_void_p), ("cap_hash", _INT64),
        ("out_of_memory", _INT32), ("reserved", _INT32),
    ]  # fmt: skip


@dataclass
class ImbScan:
    """What the scanner made of some files.

    ``samples``: the rows of the files it read, in :data:`~mpiatlas.parsers.imb.SCHEMA` plus ``file``
    (the index of the input), by file then line; ``benchmarks``: per such file, its tables'
    benchmarks with rows, in order; ``bailed``: the indices of the files left to the Python executor.
    """

    samples: pl.DataFrame
    benchmarks: dict[int, list[str]]
    bailed: list[int]



_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failed = False  # a failed build is reported once per process, not per chunk


def _compiler() -> list[str] | None:
    if cc := os.environ.get("CC"):
        return shlex.split(cc)  # CC may carry flags ("gcc -m64"), as make reads it
    found = shutil.which("cc") or shutil.which("gcc")
    return [found] if found else None


def _cache_dir() -> Path:
    return user_cache_dir()


# -- the header, generated from imb_shapes ---------------------------------------------------------

# The patterns whose grammar imbscan.c implements by hand: their fingerprint is checked when it compiles.
_PATTERNS = (shapes.BANNER.regex, shapes.BENCHMARKING.regex, shapes.FINALIZE.regex, shapes.GROUPS.regex,
             shapes.PROCESSES.regex, shapes.MODE.regex, shapes.HEADER.regex, shapes.INVALID,
             shapes.SPECIAL_TEMPLATE)  # fmt: skip


def patterns_fingerprint() -> str:
    """60 bits of the patterns' hash, as the C integer literal imbscan.c compares with its own."""
    return "0x" + hashlib.sha256("\n".join(_PATTERNS).encode()).hexdigest()[:15] + "ULL"


def _c_string(text: str) -> str:
    if not (text.isascii() and text.isprintable()):
        raise RuntimeError(f"imb_shapes: {text!r} is not printable ASCII, which imbscan.c cannot hold")
    return json.dumps(text)  # printable ASCII: JSON's escapes (\" and \\) are C's


def _field_enum(field: str | None) -> str:
    return "F_DROP" if field is None else f"F_{field.upper()}"


def c_header() -> str:
    """imbscan_shapes.h: imb_shapes' tables as C (fields are named F_<FIELD>; F_DROP: read and dropped)."""
    fields = list(dict.fromkeys(f for f, _ in shapes.HEADER_TOKENS.values() if f is not None))
    kinds = {f: kind for f, kind in shapes.HEADER_TOKENS.values() if f is not None}
    ints = [f for f in fields if kinds[f] is int]
    tokens = ", ".join(f"{{{_c_string(t)}, {_field_enum(f)}}}" for t, (f, _) in shapes.HEADER_TOKENS.items())
    return "\n".join([
        "/* Generated from mpiatlas/parsers/imb_shapes.py by imb_scan.py when it builds the scanner: do not edit. */",
        f"#define IMB_PATTERNS_FINGERPRINT {patterns_fingerprint()}",
        f"enum {{ {', '.join(map(_field_enum, fields))}, F_DROP, N_FIELDS }};",
        f"static const struct {{ const char *token; int field; }} HEADER_TOKENS[] = {{{tokens}}};",
        f"#define INT_FIELDS ({' | '.join(f'(1u << {_field_enum(f)})' for f in ints) or '0u'})",
        f"static const int64_t FIELD_MAX[N_FIELDS] = {{{', '.join(f'[{_field_enum(f)}] = {shapes.INT_MAX[f]}LL' for f in ints)}}};",
        f"#define PROCESS_MAX {shapes.INT_MAX['group']}LL",
        f"static const int T_USEC_FIELDS[] = {{{', '.join(map(_field_enum, shapes.T_USEC_FIELDS))}}};",
        "/* Row status codes: 0 \"ok\", then these words (each followed by '.' in a row), in imb_shapes.STATUSES' order. */",
        f"static const char *const SPECIAL[] = {{{', '.join(_c_string(w + '.') for w in shapes.SPECIAL_WORDS)}}};",
        f"static const double MIB_TO_MB = {shapes.MIB_TO_MB.hex()}; /* {shapes.MIB_TO_MB!r}, exactly */",
        f"#define METRIC_SINCE {shapes.METRIC_SINCE}",
        "",
    ])  # fmt: skip


# -- building and loading ------------------------------------------------------------------------


def _build() -> Path:
    """The shared library of the source and the header generated now, compiled unless cached;
    raises RuntimeError saying why not."""
    source, header = SOURCE.read_bytes(), c_header().encode()
    target = _cache_dir() / f"imbscan-{hashlib.sha256(source + header).hexdigest()[:12]}.so"
    if target.exists():
        return target
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (set CC, or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private name, then an atomic rename: concurrent first uses each build and the last one wins.
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        with tempfile.TemporaryDirectory(prefix="imbscan-") as include:
            Path(include, HEADER_NAME).write_bytes(header)
            argv = [*compiler, "-O2", "-shared", "-fPIC", "-I", include, "-o", tmp, str(SOURCE)]
            proc = _compile(argv)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
            raise RuntimeError(f"{' '.join(compiler)} failed (exit {proc.returncode}): {first}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _compile(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise RuntimeError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.imbscan_files.restype = ctypes.POINTER(_Result)
    lib.imbscan_files.argtypes = [ctypes.c_char_p, ctypes.c_int64]
    lib.imbscan_free.restype = None
    lib.imbscan_free.argtypes = [ctypes.POINTER(_Result)]
    sizes = (ctypes.c_int64 * 2)()
    lib.imbscan_layout(sizes)
    expected = [ctypes.sizeof(t) for t in (_Block, _Result)]
    if list(sizes) != expected:
        raise RuntimeError(f"{path}: structure sizes {list(sizes)}, imb_scan.py expects {expected}")
    return lib


def _scanner() -> ctypes.CDLL | None:
    """The loaded scanner, built on first use; None (and one warning) if it cannot be had."""
    global _library, _failed
    with _lock:
        if _library is None and not _failed:
            try:
                _library = _load(_build())
            except (OSError, RuntimeError) as exc:
                _failed = True
                log.warning("IMB C scanner unavailable, parsing every IMB file in Python (slower): %s", exc)
        return _library


def scanner_available() -> bool:
    return _scanner() is not None


# -- scanning ------------------------------------------------------------------------------------


def _strings(result: _Result) -> pl.Series:
    """The interned strings (benchmarks, modes, versions): pure ASCII, the scanner bails on the rest."""
    n = result.n_strings
    if n == 0:
        return pl.Series("strings", [], dtype=pl.String)
    chars = ctypes.string_at(result.chars, result.n_chars).decode("ascii")
    offsets = np.ctypeslib.as_array(result.offsets, shape=(n + 1,)).tolist()
    return pl.Series("strings", [chars[a:b] for a, b in itertools.pairwise(offsets)], dtype=pl.String)


def _blocks(result: _Result, strings: pl.Series) -> pl.DataFrame:
    n = result.n_blocks
    raw = np.ctypeslib.as_array(result.blocks, shape=(n,)) if n else np.zeros(0, dtype=np.dtype(_Block))
    ids = {name: pl.Series(raw[name].copy()) for name in ("benchmark", "mode", "version")}
    return pl.DataFrame({
        "file": raw["file"].copy(), "run": raw["run"].copy(), "processes": raw["processes"].copy(),
        "rows": raw["rows"].copy(),
        "benchmark": strings.gather(ids["benchmark"]),
        # mode -1 is null: gathering a null index gives a null string.
        "mode": strings.gather(pl.select(pl.when(ids["mode"] >= 0).then(ids["mode"])).to_series()),
        "imb_version": strings.gather(ids["version"]),
    })  # fmt: skip


def _column(result: _Result, name: str) -> np.ndarray:
    """A row column, copied: the scanner's memory is freed after the call."""
    return np.ctypeslib.as_array(getattr(result, name), shape=(result.n_rows,)).copy()


def _no_rows() -> pl.DataFrame:
    return pl.DataFrame(schema={**SCHEMA, "file": pl.Int32})


def _rows(result: _Result, blocks: pl.DataFrame, sources: Sequence[str]) -> pl.DataFrame:
    if result.n_rows == 0:
        return _no_rows()
    file = pl.Series("file", _column(result, "file"))
    block = pl.Series(_column(result, "block"))
    per_block = blocks.select("run", "imb_version", "benchmark", "mode", "processes")[block]
    null_if_negative = {name: pl.Series(name, _column(result, name)) for name in ("group", *_INT64_COLUMNS)}
    frame = pl.DataFrame([
        pl.Series("source", sources, dtype=pl.String).gather(file),
        *per_block.get_columns(),
        *null_if_negative.values(),
        *(pl.Series(name, _column(result, name), nan_to_null=True) for name in _FLOAT_COLUMNS),
        pl.Series("status", shapes.STATUSES, dtype=pl.String).gather(pl.Series(_column(result, "status"))),
        pl.Series("line", _column(result, "line")),
        file,
    ])  # fmt: skip
    return frame.select(
        *(pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) if c in null_if_negative else pl.col(c) for c in SCHEMA),
        "file",
    ).cast(pl.Schema(SCHEMA))


def _benchmarks(blocks: pl.DataFrame) -> dict[int, list[str]]:
    per_file = blocks.filter(pl.col("rows") > 0).group_by("file", maintain_order=True).agg(
        pl.col("benchmark").unique(maintain_order=True)
    )
    return dict(per_file.iter_rows())


def _c_names(sources: list[str]) -> bytes:
    """The names NUL-terminated, back to back; a name holding a NUL (no file has it) becomes "",
    which open() fails. One encode for all (os.fsencode's codec and errors), not one per name."""
    joined = "\0".join(sources) + "\0"
    if joined.count("\0") != len(sources):
        joined = "".join((s if "\0" not in s else "") + "\0" for s in sources)
    return joined.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def scan_imb_files(paths: Sequence[str | Path]) -> ImbScan:
    """Scan the files in C (releasing the GIL: threads scan chunks in parallel); without the
    scanner, every file is bailed."""
    lib = _scanner()
    every_file = list(range(len(paths)))
    if lib is None or not paths:
        return ImbScan(_no_rows(), {}, every_file)
    sources = [os.fspath(p) for p in paths]
    names = _c_names(sources)
    pointer = lib.imbscan_files(names, len(paths))
    if not pointer:  # out of memory: let Python try, file by file
        return ImbScan(_no_rows(), {}, every_file)
    try:
        result = pointer.contents
        if result.out_of_memory:
            return ImbScan(_no_rows(), {}, every_file)
        bailed = np.flatnonzero(np.ctypeslib.as_array(result.bailed, shape=(len(paths),))).tolist()
        blocks = _blocks(result, _strings(result))
        samples = _rows(result, blocks, sources)
    finally:
        lib.imbscan_free(pointer)
    return ImbScan(samples, _benchmarks(blocks), bailed)
