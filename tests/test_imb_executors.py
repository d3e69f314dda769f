"""The two IMB executors agree: the Python lines executor (imb_lines, the reference, one text) and
the import path (the C batch scanner of imb_scan, every file it bails on parsed by the lines
executor) give identical rows (every column, nulls, floats bit for bit), or the identical first
error, on every file of the shared datasets and on seeded damaged variants of the IMB captures.
The scanner must also take real output (it may bail on anything it does not know, so a scanner
that bails on everything would agree too), build once under concurrency, and be optional."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import REPO, require_datasets
from mpiatlas.tables.importer import import_files
from mpiatlas.parsers import imb_shapes as shapes
from mpiatlas.parsers.imb import COLUMNS, SCHEMA, ImbParseError, parse_imb_text, read_imb_file
from mpiatlas.parsers.imb_scan import scan_imb_files, scanner_available
from mpiatlas.parsers.osu_input import osu_kind

# Tokens Python and C may read differently, or not at all, or beyond the column's type.
_ODD_TOKENS = ["N/A", "1e3", "-1", "+2", "nan", "0x1", "1_0", "time-out.", "3000000000", "99999999999999999999",
               ".5", "5.", "00012", "1.2.3", "0.12345678901234567890", "123456789012345678.25", "1" * 70]  # fmt: skip
# Lines that change the state machine, inserted anywhere.
_ODD_LINES = ["# Benchmarking PingPong", "#    Intel(R) MPI Benchmarks 4.1, MPI-1 part",
              "#    Intel (R) MPI Benchmarks 2018 Update 1, MPI-1 part", "# Intel(R) MPI Benchmarks  , x",
              "# All processes entering MPI_Finalize", "# #processes = 3", "# #processes = 99999999999",
              "# ( 2 groups of 2 processes each running simultaneous )", "# MODE: AGGREGATE",
              "#bytes #repetitions t[usec] Mbytes/sec", "Invalid benchmark name X", "INVALID BENCHMARK NAME y",
              "      1024 out-of-mem.; needed X=   0.126 GB", "[0] MPI startup(): OSU"]  # fmt: skip
# Unusual whitespace and digits the executors must treat as Python's str.strip()/split()/isdigit() do.
_ODD = ["\t", "\x1f", "\x0b", "\u00a0", "\u2003", "\r", "\u2028", "\u00b2", "\u0663"]


def _dataset_files() -> list[Path]:
    root = require_datasets()
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md")


def _damaged(text: str, rng: random.Random, ascii_only: bool) -> str:
    """The text with one to three random line-level damages of the kinds real logs show;
    ``ascii_only``: printable ASCII and "\\n" only, the subset the C scanner reads itself."""
    odd = [" "] if ascii_only else _ODD
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        what = rng.randrange(8)
        if what == 0:
            del lines[i]  # a lost line (header, banner, '#processes', row)
        elif what == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])  # a line repeated elsewhere
        elif what == 2:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]  # truncated (killed job)
        elif what == 3:
            lines[i] = lines[i].replace(" ", rng.choice(odd), 1)  # odd whitespace
        elif what == 4:
            lines[i] = rng.choice(odd) + lines[i]
        elif what == 5:
            tokens = lines[i].split()
            if tokens:
                tokens[rng.randrange(len(tokens))] = rng.choice(_ODD_TOKENS)
                lines[i] = "   ".join(tokens)
        elif what == 6:
            lines.insert(i, rng.choice(_ODD_LINES))
        else:
            lines[i] = lines[i] + rng.choice(["", " ", "  extra"] if ascii_only else ["", " ", "\t", "  extra"])
    newline = "\n" if ascii_only else rng.choice(["\n", "\r\n"])
    return newline.join(lines) + rng.choice(["", "\n"])


def _lines_executor(path: Path) -> pl.DataFrame | str:
    try:
        return parse_imb_text(read_imb_file(path), str(path))
    except ImbParseError as exc:
        return str(exc)


_FLOATS = [c for c, dtype in SCHEMA.items() if dtype == pl.Float64()]


def _assert_identical(pairs: list[tuple[pl.DataFrame, pl.DataFrame, str]]) -> None:
    """For each (got, want, source): every column equal, nulls in the same places, and every float
    the same bits (not just ==). The bits of all pairs are compared in one numpy call (per frame and
    column, the conversions cost seconds over the damaged captures); a mismatch names its source."""
    for got, want, source in pairs:
        assert got.schema == want.schema == pl.Schema(SCHEMA), source
        assert got.equals(want), source
    if not pairs:
        return
    bits = [pl.concat([frame.select(_FLOATS) for frame in frames]).fill_null(0.0).to_numpy().view(np.uint64)
            for frames in ([g for g, _, _ in pairs], [w for _, w, _ in pairs])]
    if not np.array_equal(*bits):
        row, column = np.argwhere(bits[0] != bits[1])[0]
        ends = np.cumsum([g.height for g, _, _ in pairs])
        raise AssertionError((pairs[int(np.searchsorted(ends, row, side="right"))][2], _FLOATS[column]))


def _assert_same(paths: list[Path]) -> tuple[int, int, int]:
    """The scanner, the whole import and the lines executor on every file: (parsed, failed, parsed
    by the scanner itself). Files the importer routes to an OSU reader are not IMB output: the
    scanner must leave them to Python."""
    scan = scan_imb_files(paths)
    bailed = set(scan.bailed)
    assert set(scan.benchmarks) == set(range(len(paths))) - bailed == set(scan.samples["file"])
    imported = import_files(paths)
    # Each file's rows cut out once (a select or filter per file costs a second over the damaged captures).
    rows = {} if imported.samples is None else \
        imported.samples.select(COLUMNS).partition_by("source", as_dict=True)
    scanned_rows = scan.samples.partition_by("file", as_dict=True, include_key=False)
    parsed = failed = scanned = 0
    same: list[tuple[pl.DataFrame, pl.DataFrame, str]] = []
    for i, (path, result) in enumerate(zip(paths, imported.files)):
        if osu_kind(path, read_imb_file(path)) is not None:
            assert i in bailed, path
            continue
        reference = _lines_executor(path)
        if isinstance(reference, str):
            assert i in bailed and result.error == reference, path
            failed += 1
            continue
        assert result.error is None and result.rows == reference.height, (path, result.error)
        assert result.benchmarks == reference["benchmark"].unique(maintain_order=True).to_list()
        same.append((rows[(str(path),)], reference, str(path)))
        if i not in bailed:
            same.append((scanned_rows[(i,)], reference, str(path)))
            scanned += 1
        parsed += 1
    _assert_identical(same)
    return parsed, failed, scanned


def test_import_path_agrees_on_every_dataset_file() -> None:
    paths = _dataset_files()
    parsed, failed, scanned = _assert_same(paths)
    # 178 IMB captures parse (and the rejected IMB run, the ReFrame logs, ... fail alike); the
    # scanner must read real IMB output itself, not leave it to Python.
    assert parsed == 178 and failed > 100
    assert scanned / parsed >= 0.9, f"the C scanner took only {scanned} of {parsed} IMB captures"


@pytest.mark.parametrize(("seed", "ascii_only"), [(0, False), (1, False), (2, True), (3, True)])
def test_import_path_agrees_on_damaged_captures(tmp_path: Path, seed: int, ascii_only: bool) -> None:
    rng = random.Random(seed)
    imb = [p for p in _dataset_files() if "Intel(R) MPI Benchmarks" in p.read_text(errors="replace")]
    paths = []
    for n, source in enumerate(imb):
        for k in range(3):
            path = tmp_path / f"{n:03d}_{k}_{source.name}"
            path.write_bytes(_damaged(source.read_text(), rng, ascii_only).encode())
            paths.append(path)
    parsed, failed, scanned = _assert_same(paths)
    assert parsed > 50 and failed > 50  # both outcomes are exercised
    if ascii_only:  # ... and the scanner's own reading of damaged input
        assert scanned > 50


_BANNER = "#    Intel(R) MPI Benchmarks 2021.10, MPI-1 part"
# Texts inside the scanner's subset, each at a corner of the shared semantics: the scanner must
# read them itself (not bail) and give the lines executor's rows.
_CORNERS = {
    "both_t_and_t_avg": "# Benchmarking X\n# #processes = 2\n#bytes #repetitions t_avg[usec] t[usec]\n0 10 1.5 2.5\n",
    "repeated_column": "# Benchmarking X\n# #processes = 2\n#bytes #bytes #repetitions t[usec]\n1 2 10 0.5\n",
    "overlap_and_defects": "# Benchmarking Ibcast\n# #processes = 4\n"
                           "#bytes #repetitions t_ovrl[usec] t_pure[usec] t_CPU[usec] overlap[%] defects\n"
                           "4 1000 9.1 7.25 3.3 40.12 0.00\n",
    "number_shapes": "# Benchmarking X\n# #processes = 2\n#bytes #repetitions t[usec] Mbytes/sec Msg/sec\n"
                     "00012 7 .5 5. 0.1234567890123456789\n13 7 123456789012345678.25 8 1\n"
                     # 17 digits: m / 10^k would round twice and miss these by an ulp
                     "14 7 29.141777631706690 4.3915000806360837 812865707.04999622\n",
    "multi_and_mode": "# Benchmarking Multi-PingPong\n# ( 3 groups of 2 processes each running simultaneous )\n"
                      "# MODE: NON-AGGREGATE\n  Group  #bytes #repetitions  t[usec]  Mbytes/sec\n\n"
                      "      0   8   100   1.0   8.0\n      1   8   100   1.5   5.3\n\n"
                      "# Benchmarking PingPong\n# #processes = 2\n#bytes #repetitions t[usec]\n 1 2 3.0\n",  # no MODE
    "special_rows": "# Benchmarking PingPong\n# #processes = 2\n#bytes #repetitions t[usec] Mbytes/sec\n"
                    "   0   1000   0.37   0.00\n   1048576 time-out.; use \"-time X\" (IMB_settings.h)\n"
                    "   67108864 out-of-mem.; needed X=   0.126 GB\n 2 3 int-overflow.\n",
    "foreign_lines_in_a_table": "# Benchmarking PingPong\n# #processes = 2\n#bytes #repetitions t[usec]\n"
                                "[0] MPI startup(): Intel(R) MPI Library\n\n 1 2 3.0\n",
}
_VERSIONS = ["#    Intel (R) MPI Benchmarks 4.1, MPI-1 part    ", "# Intel(R) MPI Benchmarks 2017", "x Intel(R)  MPI  "
             "Benchmarks   2018 Update 1   , y", "#Intel(R) MPI Benchmarks 0x2017,", "# Intel(R) MPI Benchmarks v2"]


def test_the_scanner_reads_the_corners_of_its_subset(tmp_path: Path) -> None:
    paths = []
    for name, body in _CORNERS.items():
        paths.append(tmp_path / f"{name}.txt")
        paths[-1].write_text(f"{_BANNER}\n{body}# All processes entering MPI_Finalize\n")
    for n, banner in enumerate(_VERSIONS):  # the version and its MiB rule; a second run after the first
        paths.append(tmp_path / f"version{n}.txt")
        paths[-1].write_text(f"[0] MPI startup()\n{_BANNER}\n{_CORNERS['special_rows']}# All processes entering "
                             f"MPI_Finalize\n{banner}\n{_CORNERS['number_shapes']}")  # fmt: skip
    scan = scan_imb_files(paths)
    assert scan.bailed == []
    same = []
    for i, path in enumerate(paths):
        reference = _lines_executor(path)
        assert isinstance(reference, pl.DataFrame), reference
        same.append((scan.samples.filter(pl.col("file") == i).drop("file"), reference, path.name))
    _assert_identical(same)
    versions = scan.samples.filter(pl.col("run") == 1)["imb_version"].unique(maintain_order=True).to_list()
    assert versions == ["4.1", "2017", "2018 Update 1", "0x2017", "v2"]


def test_a_number_too_wide_for_its_column_is_a_clear_error(tmp_path: Path) -> None:
    banner = ("#    Intel(R) MPI Benchmarks 2021.10, MPI-1 part\n# Benchmarking Multi-PingPong\n"
              "# ( 2 groups of 2 processes each running simultaneous )\n")  # fmt: skip
    cases = [("  3000000000    0    1000    0.5    1.0", "Group out of range (at most 2147483647)"),
             ("  0    99999999999999999999    1000    0.5    1.0", "#bytes out of range (at most 9223372036854775807)")]
    for n, (row, what) in enumerate(cases):
        path = tmp_path / f"w{n}.txt"
        path.write_text(banner + "  Group  #bytes  #repetitions  t[usec]  Mbytes/sec\n" + row + "\n")
        with pytest.raises(ImbParseError, match=rf"w{n}\.txt:5: value '\d+' in column {re.escape(what)}"):
            parse_imb_text(path.read_text(), str(path))
        assert import_files([path]).files[0].error == _lines_executor(path)


def test_the_bench_generator_output_goes_entirely_through_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/parse_aggregate.py's files (every table shape of the local captures, IMB's own
    time-out./out-of-mem. rows, Intel MPI's startup lines): a bail there costs the bench seconds."""
    require_datasets()
    spec = importlib.util.spec_from_file_location("parse_aggregate", REPO / "bench" / "parse_aggregate.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    files, rows = bench.generate(tmp_path, 3000, seed=7)
    scan = scan_imb_files(files)
    assert scan.bailed == [] and scan.samples.height == rows > 3000
    assert set(scan.samples["status"].unique()) == {"ok", "time-out", "out-of-mem"}
    same = []
    for i in range(0, len(files), 7):
        reference = _lines_executor(files[i])
        assert isinstance(reference, pl.DataFrame)
        same.append((scan.samples.filter(pl.col("file") == i).drop("file"), reference, str(files[i])))
    _assert_identical(same)


# -- building the scanner --------------------------------------------------------------------------

# A child process: waits for the go file (both children build at the same moment), then imports.
_CHILD = """
import json, sys, time
from pathlib import Path
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
from mpiatlas.tables.importer import import_files
from mpiatlas.parsers.imb_scan import scan_imb_files, scanner_available
paths = sys.argv[2:]
result = import_files(paths)
print(json.dumps({"scanner": scanner_available(), "bailed": scan_imb_files(paths).bailed,
                  "errors": [f.error for f in result.files], "rows": result.samples.height}))
"""


def _children(tmp_path: Path, paths: list[Path], env: dict[str, str], n: int) -> list[tuple[dict[str, object], str]]:
    go = tmp_path / "go"
    argv = [sys.executable, "-c", _CHILD, str(go), *map(str, paths)]
    procs = [subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(n)]  # fmt: skip
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
    return [(json.loads(out.strip().splitlines()[-1]), err) for out, err in outs]


def _capture_files() -> list[Path]:
    local = require_datasets() / "local-imb-samples"
    return [local / "impi_np2_PingPong.txt", local / "edge_timeout.txt", local / "impi_np4_npmin2_colls.txt"]


def test_concurrent_first_builds_both_succeed(tmp_path: Path) -> None:
    assert scanner_available()  # gcc is on every machine here
    cache = tmp_path / "cache"
    paths = _capture_files()
    for report, err in _children(tmp_path, paths, {"XDG_CACHE_HOME": str(cache)}, n=2):
        assert report == {"scanner": True, "bailed": [], "errors": [None, None, None], "rows": 24 + 2 + 140}, err
    # One library, named by the source's hash; no temporary left behind.
    assert [p.name for p in (cache / "mpiatlas").iterdir()] == [next((cache / "mpiatlas").glob("imbscan-*.so")).name]


@pytest.mark.parametrize("cc", ["/nonexistent", "false"])
def test_without_a_compiler_the_import_goes_through_python(tmp_path: Path, cc: str) -> None:
    """No compiler, or one that fails: one warning, and every file is parsed by the lines executor."""
    cache = tmp_path / "cache"
    paths = [*_capture_files(), require_datasets() / "local-imb-samples" / "edge_invalid_option.txt"]
    [(report, err)] = _children(tmp_path, paths, {"XDG_CACHE_HOME": str(cache), "CC": cc}, n=1)
    references = [_lines_executor(p) for p in paths]
    assert report["scanner"] is False and report["bailed"] == [0, 1, 2, 3]
    assert report["errors"] == [None, None, None, references[3]]
    assert report["rows"] == sum(r.height for r in references[:3] if isinstance(r, pl.DataFrame))
    assert err.count("IMB C scanner unavailable") == 1 and cc in err
    assert not list(cache.rglob("*.so"))


def test_each_line_pattern_holds_its_pre_test_literal() -> None:
    """The lines executor skips a pattern on lines without its literal: the literal must be a
    verbatim, mandatory piece of the pattern (no alternation or optional part around it)."""
    patterns = [shapes.BANNER, shapes.BENCHMARKING, shapes.FINALIZE, shapes.GROUPS, shapes.PROCESSES, shapes.MODE,
                shapes.HEADER]  # fmt: skip
    for pattern in patterns:
        assert pattern.literal in pattern.regex
        before, after = pattern.regex.split(pattern.literal, 1)
        assert "|" not in before.replace("(?:^|\\s)", "") and not after.startswith(("?", "*", "{", ")?"))
    assert all(shapes.SPECIAL_LITERAL in word for word in shapes.SPECIAL_WORDS)


def test_one_cell_text_is_parsed_by_the_lines_executor() -> None:
    """A cell's output goes through the lines executor; parsing it twice gives the same table (what it
    costs is bench/parse_aggregate.py's business, not a unit test's)."""
    text = (require_datasets() / "local-imb-samples" / "impi_np2_PingPong.txt").read_text()
    first, again = parse_imb_text(text, "cell"), parse_imb_text(text, "cell")
    assert first.height == 24 and first.equals(again)


# -- one source for the shapes ---------------------------------------------------------------------


def test_a_table_changed_in_imb_shapes_alone_reaches_the_c_scanner(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner's tables are generated from imb_shapes when it is built: a new column token and a
    new failure word added there alone are read by C as by Python (and not bailed)."""
    from mpiatlas.parsers import imb_scan

    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(shapes.HEADER_TOKENS, "t_wait[usec]", (None, float))
    monkeypatch.setattr(shapes, "SPECIAL_WORDS", (*shapes.SPECIAL_WORDS, "out-of-order"))
    words = "|".join(map(re.escape, shapes.SPECIAL_WORDS))
    monkeypatch.setattr(shapes, "SPECIAL", re.compile(shapes.SPECIAL_TEMPLATE.format(words=words)))
    monkeypatch.setattr(shapes, "STATUSES", ("ok", *shapes.SPECIAL_WORDS))
    monkeypatch.setattr(imb_scan, "_library", imb_scan._load(imb_scan._build()))
    path = tmp_path / "new_shapes.txt"
    path.write_text(f"{_BANNER}\n# Benchmarking Ibarrier\n# #processes = 4\n#bytes #repetitions t_pure[usec] "
                    "t_wait[usec] Mbytes/sec\n 0 1000 2.25 0.5 0.0\n 8 1000 2.75 0.5 1.5\n 16 out-of-order.\n"
                    "# All processes entering MPI_Finalize\n")  # fmt: skip
    scan = imb_scan.scan_imb_files([path])
    reference = _lines_executor(path)
    assert isinstance(reference, pl.DataFrame) and scan.bailed == []
    assert reference["t_usec"].to_list() == [2.25, 2.75, None]
    assert reference["status"].to_list() == ["ok", "ok", "out-of-order"]
    _assert_identical([(scan.samples.drop("file"), reference, path.name)])


def test_a_pattern_changed_in_imb_shapes_alone_stops_the_c_build(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The patterns' grammar is hand-written in C: one changed in imb_shapes alone must not let C read
    it the old way; the build refuses (the import then parses in Python), naming what to do."""
    from mpiatlas.parsers import imb_scan

    assert "IMB_PATTERNS_FINGERPRINT != " + imb_scan.patterns_fingerprint() in imb_scan.SOURCE.read_text()
    monkeypatch.setenv("MPIATLAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(imb_scan, "_PATTERNS", (*imb_scan._PATTERNS[:-1], r"\b(?P<status>{words})!"))
    with pytest.raises(RuntimeError, match=r"line patterns changed: port them to the matchers of imbscan\.c"):
        imb_scan._build()
    assert not list((tmp_path / "cache").rglob("*.so"))
