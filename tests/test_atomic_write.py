"""files.write_text_atomic: the one way mpiatlas replaces a file that others may read."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mpiatlas.files import write_json_atomic, write_text_atomic


def test_concurrent_writers_of_one_path_each_replace_it_whole(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.html"
    texts = {name: name * 50_000 for name in "ab"}  # large enough that a write takes several syscalls
    seen: set[str] = set()
    stop = threading.Event()

    def write(name: str) -> None:
        for _ in range(100):
            write_text_atomic(target, texts[name])

    def read() -> None:
        # At least one read after the writers are done: on a loaded machine this thread may not get
        # a core while they run, and an empty `seen` would then prove nothing either way.
        while True:
            done = stop.is_set()
            if target.exists():
                seen.add(target.read_text())
            if done:
                return

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(name,)) for name in texts]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen and seen <= set(texts.values())  # never half of one, never a mix
    assert target.read_text() in texts.values()
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "fits.json"
    write_json_atomic(target, {"lambda_us": 1.5})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"not json": object()})
    with pytest.raises(TypeError):
        write_text_atomic(target, b"bytes are no text")  # type: ignore[arg-type]
    assert target.read_text() == '{\n"lambda_us": 1.5\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["fits.json"]


def test_the_file_gets_the_umask_mode_like_any_other(tmp_path: Path) -> None:
    import os

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "report.html", "<html></html>")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
