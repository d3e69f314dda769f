"""Import labels: one label is one system, so different files never share a label unless asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import require_datasets
from mpiatlas.tables.import_labels import (
    LabelError,
    assign_labels,
    distinguishing_labels,
    pooled_labels,
    read_labels_csv,
    resolve_paths,
)


def test_stackhpc_logs_of_eight_partitions_get_eight_labels() -> None:
    root = require_datasets()
    paths = sorted(root.rglob("rfm_IMB_PingPong_job.out"))
    assert len(paths) == 8
    labels = distinguishing_labels(paths)
    assert len(set(labels)) == 8
    # The levels every log shares (imb/IMB_PingPong/) tell nothing and are left out.
    assert "roce-gcc9-impi-verbs/rfm_IMB_PingPong_job" in labels
    assert "cclake-ib-icc19-impi19-ucx/rfm_IMB_PingPong_job" in labels
    assert not pooled_labels(paths, labels)


def test_unique_stems_stay_stems_and_only_colliding_ones_grow(tmp_path: Path) -> None:
    paths = [tmp_path / "r1" / "x.txt", tmp_path / "r2" / "x.txt", tmp_path / "r2" / "z.txt"]
    assert distinguishing_labels(paths) == ["r1/x", "r2/x", "z"]


def test_files_differing_only_in_suffix_keep_their_suffix(tmp_path: Path) -> None:
    assert distinguishing_labels([tmp_path / "x.out", tmp_path / "x.txt"]) == ["x.out", "x.txt"]


def test_deeper_difference_and_uneven_depths(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "run" / "log.out", tmp_path / "b" / "run" / "log.out", tmp_path / "log.out"]
    labels = distinguishing_labels(paths)
    assert len(set(labels)) == 3
    assert labels[:2] == ["a/run/log", "b/run/log"]  # the nearest level already differs from the third file


def test_the_same_file_twice_is_one_label(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    paths = [tmp_path / "d" / "x.txt", tmp_path / "d" / ".." / "d" / "x.txt"]
    assert distinguishing_labels(paths) == ["x", "x"]
    assert not pooled_labels(paths, ["x", "x"])  # one file, not a pool


def test_pool_uses_stems_and_reports_the_pool(tmp_path: Path) -> None:
    paths = [tmp_path / f"rep{r:02d}" / "cell.txt" for r in range(3)]
    labels = assign_labels(paths, pool=True)
    assert labels == ["cell"] * 3
    assert pooled_labels(paths, labels) == {"cell": 3}


def test_one_label_for_all(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "x.txt", tmp_path / "b" / "x.txt"]
    assert assign_labels(paths, label="mycluster") == ["mycluster", "mycluster"]
    with pytest.raises(LabelError, match="non-empty"):
        assign_labels(paths, label=" ")


def test_labels_csv_maps_listed_files_relative_to_the_csv(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "x.txt", tmp_path / "b" / "x.txt", tmp_path / "c" / "y.txt"]
    mapping_file = tmp_path / "labels.csv"
    mapping_file.write_text("path,label\na/x.txt,alaska-ib\nb/x.txt,alaska-ib\n")
    mapping = read_labels_csv(mapping_file)
    labels = assign_labels(paths, mapping=mapping)
    assert labels == ["alaska-ib", "alaska-ib", "y"]  # pooled: the user asked for it
    assert pooled_labels(paths, labels) == {"alaska-ib": 2}


def test_labels_csv_errors_name_file_and_line(tmp_path: Path) -> None:
    bad_header = tmp_path / "h.csv"
    bad_header.write_text("file,name\nx,y\n")
    with pytest.raises(LabelError, match=r"h\.csv: expected a header row with the columns 'path' and 'label'"):
        read_labels_csv(bad_header)
    empty_label = tmp_path / "e.csv"
    empty_label.write_text("path,label\nx.txt,\n")
    with pytest.raises(LabelError, match=r"e\.csv:2: expected a path and a label"):
        read_labels_csv(empty_label)
    conflict = tmp_path / "c.csv"
    conflict.write_text("path,label\nx.txt,a\nx.txt,b\n")
    with pytest.raises(LabelError, match=r"c\.csv:3: x\.txt already has the label 'a', not 'b'"):
        read_labels_csv(conflict)
    with pytest.raises(LabelError, match=r"missing\.csv: cannot read"):
        read_labels_csv(tmp_path / "missing.csv")


def test_a_mapped_label_never_pools_an_unlisted_file(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "x.txt", tmp_path / "b" / "y.txt"]
    with pytest.raises(LabelError, match=r"y\.txt: its label 'y' is also the mapped label of .*x\.txt"):
        assign_labels(paths, mapping={paths[0].resolve(): "y"})


def test_a_lengthened_label_never_equals_another_files_stem(tmp_path: Path) -> None:
    """d/x.out beside d/x.txt needs its suffix, "x.out", which is e/x.out.txt's stem: both get their
    absolute path rather than one label for two files."""
    paths = [tmp_path / "d" / "x.out", tmp_path / "d" / "x.txt", tmp_path / "e" / "x.out.txt"]
    labels = distinguishing_labels(paths)
    assert labels == [str(paths[0]), "x.txt", str(paths[2])]
    assert not pooled_labels(paths, labels)


def test_symlinked_and_dotted_directories_are_one_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    paths = [tmp_path / "real" / "x.txt", tmp_path / "link" / "x.txt", tmp_path / "real" / ".." / "real" / "x.txt"]
    assert distinguishing_labels(paths) == ["x", "x", "x"]  # one file, three spellings
    assert resolve_paths(paths) == [str(tmp_path.resolve() / "real" / "x.txt")] * 3


def test_resolved_names_as_os_path_gives_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resolve_paths splits names with str.rpartition: the root, bare names, doubled and trailing
    slashes and '..' resolve as os.path.split + realpath + join resolve them."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    names = ["x.txt", "/x.txt", "b//y.txt", "./z", "../a/b/w", "/", "b/", "//y", "b/../c", str(tmp_path / "a" / "v")]
    for order in (names, names[::-1]):  # a bare name first or a rooted one first: no shared cache entry
        expected = [os.path.join(os.path.realpath(os.path.split(n)[0] or os.curdir), os.path.split(n)[1])
                    for n in order]
        assert resolve_paths(order) == expected
    assert resolve_paths(["/x.txt", "x.txt"]) == ["/x.txt", str(tmp_path.resolve() / "a" / "x.txt")]
