"""``mpiatlas import`` on many files, as a command: nothing per file off a terminal, one summary with
the right counts, every problem named on a line of its own, a line per file with --verbose, a bar
on a terminal."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.tables.importer import SAMPLES_FILE

PINGPONG = "local-imb-samples/impi_np2_PingPong.txt"  # 24 rows: 0 B and 2^0..2^22
COLLS = "local-imb-samples/impi_np4_npmin2_colls.txt"  # 140 rows


def _repetitions(tmp_path: Path, cells: int, reps: int) -> list[Path]:
    """rep<r>/cell<c>.txt: ``cells`` systems of ``reps`` repetitions each (copies of real captures)."""
    sources = [require_datasets() / PINGPONG, require_datasets() / COLLS]
    files = []
    for rep in range(reps):
        for cell in range(cells):
            path = tmp_path / "imb" / f"rep{rep}" / f"cell{cell:02d}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sources[cell % 2], path)
            files.append(path)
    return files


def _damaged(tmp_path: Path) -> Path:
    """The PingPong capture with a value replaced by 'N/A' on the 2048-byte row."""
    lines = (require_datasets() / PINGPONG).read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if line.split()[:1] == ["2048"])
    lines[n] = "         2048         1000         1.2      N/A"
    path = tmp_path / "damaged.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """The real command line in its own process: stdout and stderr are pipes, not a terminal."""
    return subprocess.run([sys.executable, "-m", "mpiatlas.cli", *argv], capture_output=True, text=True,
                          check=False, **kwargs)  # fmt: skip


def test_off_a_terminal_only_the_summary_and_one_pooling_note(tmp_path: Path) -> None:
    """24 files of 12 systems (2 repetitions each), piped: no line per file, one note for the 12 pooled
    labels, one summary whose counts are the table's."""
    files = _repetitions(tmp_path, cells=12, reps=2)
    out = tmp_path / "out"
    proc = _run(["import", *map(str, files), "--pool", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    rows = 2 * (6 * 24 + 6 * 140)
    assert proc.stdout == f"wrote {out / SAMPLES_FILE}: {rows} rows, 12 labels from 24 of 24 files; 0 problems\n"
    assert proc.stderr == ("note: 12 labels pool 2 files each (as --pool asked): each label's rows are repetitions "
                           "of one system (--verbose names them)\n")  # fmt: skip
    df = pl.read_parquet(out / SAMPLES_FILE)
    assert df.height == rows and df["label"].n_unique() == 12


def test_a_damaged_and_a_missing_file_are_listed_by_name_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _repetitions(tmp_path, cells=2, reps=3)
    damaged, missing = _damaged(tmp_path), tmp_path / "gone.txt"
    out = tmp_path / "out"
    assert main(["import", str(files[0]), str(damaged), *map(str, files[1:]), str(missing), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    problems = captured.err.splitlines()
    n = next(i for i, line in enumerate(damaged.read_text().splitlines(), start=1) if line.split()[:1] == ["2048"])
    assert len(problems) == 2  # one line each, in the order given
    assert problems[0].startswith(f"failed {damaged}:{n}: non-numeric value 'N/A' in column Mbytes/sec")
    assert problems[1] == f"failed {missing}: cannot read: No such file or directory"
    # Default labels keep rep0/cell00 and rep1/cell00 apart: 6 labels, nothing pooled.
    assert captured.out == (f"wrote {out / SAMPLES_FILE}: {3 * (24 + 140)} rows, 6 labels from 6 of 8 files; "
                            "2 problems (listed above)\n")  # fmt: skip
    assert pl.read_parquet(out / SAMPLES_FILE).height == 3 * (24 + 140)


def test_verbose_lists_every_imported_file_and_pooled_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _repetitions(tmp_path, cells=10, reps=2)
    damaged = _damaged(tmp_path)
    out = tmp_path / "out"
    assert main(["import", *map(str, files), str(damaged), "--pool", "--verbose", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == len(files) + 1  # a line per imported file, then the summary
    for path, line in zip(files, lines):
        rows, benchmarks = (24, "PingPong") if path.stem in {f"cell{c:02d}" for c in range(0, 10, 2)} else (
            140, "Bcast, Scatter, Allreduce, Alltoall")  # fmt: skip
        assert line == f"ok {path}: {rows} rows, {benchmarks} (label {path.stem!r})"
    assert lines[-1].endswith("10 labels from 20 of 21 files; 1 problem (listed above)")
    err = captured.err.splitlines()
    assert err[0].startswith(f"failed {damaged}:")
    assert err[1:] == [f"note: label 'cell{c:02d}' pools 2 files (as --pool asked): their rows are repetitions of "
                       "one system" for c in range(10)]  # fmt: skip


def test_every_file_failing_writes_nothing_and_says_so(tmp_path: Path) -> None:
    damaged = _damaged(tmp_path)
    out = tmp_path / "out"
    proc = _run(["import", str(damaged), str(tmp_path / "gone.txt"), "--out", str(out)])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == "nothing imported: every file failed (2 problems listed above)"
    assert not (out / SAMPLES_FILE).exists()


def test_on_a_terminal_a_bar_and_the_summary(tmp_path: Path) -> None:
    """stderr a terminal (a pseudo-terminal): the bar is drawn there, and the summary still comes."""
    files = _repetitions(tmp_path, cells=4, reps=2)
    out = tmp_path / "out"
    leader, follower = pty.openpty()
    try:
        env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
        proc = subprocess.run([sys.executable, "-m", "mpiatlas.cli", "import", *map(str, files), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=follower, text=True, check=False, env=env)  # fmt: skip
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all of it was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert "files" in drawn.decode(errors="replace") and "8/8" in drawn.decode(errors="replace")
    assert proc.stdout == f"wrote {out / SAMPLES_FILE}: {2 * (2 * 24 + 2 * 140)} rows, 8 labels from 8 of 8 files; 0 problems\n"
