"""The two IMB executors agree: the line-by-line one (one text, imb_lines) and the polars one
(many texts at once, imb.parse_imb_texts) give identical rows, or the identical first error, on
every file of the shared datasets (IMB captures, and the OSU / ReFrame / CSV files, which must fail
alike) and on seeded damaged variants of the IMB captures."""

from __future__ import annotations

import random
import re

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.parsers import imb_shapes as shapes
from mpiatlas.parsers.imb import SCHEMA, ImbParseError, parse_imb_text, parse_imb_texts

# Tokens polars and Python may read differently, or not at all, or beyond the column's type.
_ODD_TOKENS = ["N/A", "1e3", "-1", "+2", "nan", "0x1", "1_0", "time-out.", "3000000000", "99999999999999999999"]
# Lines that change the state machine, inserted anywhere.
_ODD_LINES = ["# Benchmarking PingPong", "#    Intel(R) MPI Benchmarks 4.1, MPI-1 part",
              "# All processes entering MPI_Finalize", "# #processes = 3", "# #processes = 99999999999",
              "#bytes #repetitions t[usec] Mbytes/sec", "Invalid benchmark name X"]  # fmt: skip
# Unusual whitespace and digits the executors must treat as Python's str.strip()/split()/isdigit() do.
_ODD = ["\t", "\x1f", "\x0b", "\u00a0", "\u2003", "\r", "\u2028", "\u00b2", "\u0663"]


def _dataset_texts() -> list[tuple[str, str]]:
    root = require_datasets()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md")
    return [(str(p.relative_to(root)), p.read_bytes().decode("utf-8", errors="replace")) for p in files]


def _damaged(text: str, rng: random.Random) -> str:
    """The text with one to three random line-level damages of the kinds real logs show."""
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
            lines[i] = lines[i].replace(" ", rng.choice(_ODD), 1)  # odd whitespace
        elif what == 4:
            lines[i] = rng.choice(_ODD) + lines[i]
        elif what == 5:
            tokens = lines[i].split()
            if tokens:
                tokens[rng.randrange(len(tokens))] = rng.choice(_ODD_TOKENS)
                lines[i] = "   ".join(tokens)
        elif what == 6:
            lines.insert(i, rng.choice(_ODD_LINES))
        else:
            lines[i] = lines[i] + rng.choice(["", " ", "\t", "  extra"])
    return rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])


def _line_by_line(source: str, text: str) -> pl.DataFrame | str:
    try:
        return parse_imb_text(text, source)
    except ImbParseError as exc:
        return str(exc)


def _assert_same(texts: list[tuple[str, str]]) -> tuple[int, int]:
    """Both executors on every text (the polars one on all of them in one batch): (parsed, failed)."""
    batch = parse_imb_texts(texts)
    parsed = failed = 0
    for i, (source, text) in enumerate(texts):
        one = _line_by_line(source, text)
        if i in batch.errors:
            assert one == str(batch.errors[i]), source
            failed += 1
        else:
            rows = batch.samples.filter(pl.col("file") == i).drop("file")
            assert isinstance(one, pl.DataFrame), (source, one)
            assert rows.schema == one.schema == pl.Schema(SCHEMA)
            assert rows.equals(one), source  # nulls and NaN in the same places, every value equal
            parsed += 1
    return parsed, failed


def test_executors_agree_on_every_dataset_file() -> None:
    texts = _dataset_texts()
    parsed, failed = _assert_same(texts)
    # 179 IMB captures; all the rest (OSU, CSV, ReFrame logs, the rejected IMB run) fail alike.
    assert parsed == 178 and failed == len(texts) - 178


@pytest.mark.parametrize("seed", range(4))
def test_executors_agree_on_damaged_captures(seed: int) -> None:
    rng = random.Random(seed)
    imb = [(s, t) for s, t in _dataset_texts() if "Intel(R) MPI Benchmarks" in t]
    texts = [(f"{s}#{k}", _damaged(t, rng)) for s, t in imb for k in range(3)]
    parsed, failed = _assert_same(texts)
    assert parsed > 50 and failed > 50  # both outcomes are exercised


def test_a_number_too_wide_for_its_column_is_a_clear_error() -> None:
    banner = ("#    Intel(R) MPI Benchmarks 2021.10, MPI-1 part\n# Benchmarking Multi-PingPong\n"
              "# ( 2 groups of 2 processes each running simultaneous )\n")
    cases = [("  3000000000    0    1000    0.5    1.0", "Group out of range (at most 2147483647)"),
             ("  0    99999999999999999999    1000    0.5    1.0", "#bytes out of range (at most 9223372036854775807)")]
    for row, what in cases:
        text = banner + "  Group  #bytes  #repetitions  t[usec]  Mbytes/sec\n" + row + "\n"
        with pytest.raises(ImbParseError, match=rf"w\.txt:5: value '\d+' in column {re.escape(what)}"):
            parse_imb_text(text, "w.txt")
        assert str(parse_imb_texts([("w.txt", text)]).errors[0]) == str(_line_by_line("w.txt", text))


def test_each_line_pattern_holds_its_pre_test_literal() -> None:
    """Both executors skip a pattern on lines without its literal: the literal must be a verbatim,
    mandatory piece of the pattern (no alternation or optional part around it)."""
    patterns = [shapes.BANNER, shapes.BENCHMARKING, shapes.FINALIZE, shapes.GROUPS, shapes.PROCESSES, shapes.MODE,
                shapes.HEADER]  # fmt: skip
    for pattern in patterns:
        assert pattern.literal in pattern.regex
        before, after = pattern.regex.split(pattern.literal, 1)
        assert "|" not in before.replace("(?:^|\\s)", "") and not after.startswith(("?", "*", "{", ")?"))


def test_one_text_is_parsed_fast() -> None:
    """A cell's output goes through the line-by-line executor: well under 5 ms CPU, where the batch
    executor spends ~30 ms on any single text (CPU time: the machine may be shared)."""
    import time

    text = (require_datasets() / "local-imb-samples" / "impi_np2_PingPong.txt").read_text()
    parse_imb_text(text, "warm-up")
    start = time.process_time()
    for _ in range(20):
        rows = parse_imb_text(text, "cell")
    per_call = (time.process_time() - start) / 20
    assert rows.height == 24
    assert per_call < 0.005, f"{per_call * 1e3:.1f} ms per text"
