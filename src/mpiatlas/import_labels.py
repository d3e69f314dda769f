"""The label each imported file's rows get: one label is one system, so labels never merge files silently.

Rows with the same label are pooled as repetitions of one measurement (one Hockney fit, one
summary per size). Files from different machines often share a name — eight StackHPC partitions
each wrote ``rfm_IMB_PingPong_job.out`` — so a file's stem alone would fit eight clusters as one.
The rules, in order:

* ``label``: the user names one label for every file (they are one system, pooled on purpose);
* a ``labels.csv`` mapping (columns ``path,label``; paths relative to the CSV's directory) for
  the files it lists; files with the same label there are pooled, by the user's choice;
* ``pool``: the file stem, as before (``rep00/x.txt``, ``rep01/x.txt``: repetitions of ``x``);
* otherwise the shortest distinguishing path: the stem, and as many parent directories as it
  takes to tell the file from every other file with the same stem (``partA/rfm_job``).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path


class LabelError(ValueError):
    """A labels mapping or an input list that cannot give each file a label; the message names the file."""


def distinguishing_labels(paths: Sequence[Path]) -> list[str]:
    """Each file's stem, lengthened by parent directories until no two different files share it."""
    resolved = [p.resolve() for p in paths]
    by_stem: dict[str, list[int]] = defaultdict(list)
    for i, path in enumerate(resolved):
        by_stem[path.stem].append(i)
    labels = [path.stem for path in resolved]
    for stem, members in by_stem.items():
        if len({resolved[i] for i in members}) > 1:
            for i, label in zip(members, _shortest_unique([resolved[i] for i in members])):
                labels[i] = label
    return labels


def _shortest_unique(paths: list[Path]) -> list[str]:
    """Labels from the fewest parent directories that tell the paths apart, nearest first; a directory
    level every path shares (``imb/IMB_PingPong/``) tells nothing and is left out. The file name with
    its suffix where only the suffix differs."""
    distinct = len(set(paths))
    ups = [p.parent.parts[::-1] for p in paths]  # parent directories, nearest first
    chosen: list[int] = []
    for leaf in ("stem", "name"):
        for level in range(max(map(len, ups)) + 1):
            labels = ["/".join([*(up[j] for j in reversed(chosen) if j < len(up)), getattr(p, leaf)]).lstrip("/")
                      for p, up in zip(paths, ups)]  # fmt: skip
            if len(set(labels)) == distinct:
                return labels
            if len({up[level] if level < len(up) else "" for up in ups}) > 1:
                chosen.append(level)
        chosen = []
    raise AssertionError(f"paths {sorted(set(map(str, paths)))} cannot be told apart")  # distinct paths always can


def read_labels_csv(path: Path) -> dict[Path, str]:
    """``path,label`` rows -> {resolved file path: label}; paths are relative to the CSV's directory."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or not {"path", "label"} <= set(reader.fieldnames):
                raise LabelError(f"{path}: expected a header row with the columns 'path' and 'label', "
                                 f"got {reader.fieldnames}")  # fmt: skip
            mapping: dict[Path, str] = {}
            for row in reader:
                line = reader.line_num
                file, label = (row.get("path") or "").strip(), (row.get("label") or "").strip()
                if not file or not label:
                    raise LabelError(f"{path}:{line}: expected a path and a label, got {file!r}, {label!r}")
                key = (path.parent / file).resolve()
                if mapping.get(key, label) != label:
                    raise LabelError(f"{path}:{line}: {file} already has the label {mapping[key]!r}, not {label!r}")
                mapping[key] = label
    except OSError as exc:
        raise LabelError(f"{path}: cannot read the labels mapping: {exc.strerror or exc}") from None
    return mapping


def assign_labels(paths: Sequence[Path], *, label: str | None = None, mapping: Mapping[Path, str] | None = None,
                  pool: bool = False) -> list[str]:  # fmt: skip
    """The label of each file, by the module's rules."""
    if label is not None:
        if not label.strip():
            raise LabelError("--label: expected a non-empty label")
        return [label] * len(paths)
    labels = [p.stem for p in paths] if pool else distinguishing_labels(paths)
    if mapping:
        resolved = [p.resolve() for p in paths]
        mapped = {i: mapping[r] for i, r in enumerate(resolved) if r in mapping}
        for i, name in mapped.items():
            labels[i] = name
        # A label the mapping gives must not pool a file the mapping does not list (nobody asked).
        taken = {name: i for i, name in mapped.items()}
        for i, name in enumerate(labels):
            if i not in mapped and name in taken and resolved[taken[name]] != resolved[i]:
                raise LabelError(f"{paths[i]}: its label {name!r} is also the mapped label of {paths[taken[name]]}; "
                                 "list it in the mapping too, or rename one")
    return labels


def pooled_labels(paths: Sequence[Path], labels: Sequence[str]) -> dict[str, int]:
    """Labels given to several different files (their rows are pooled), with the file counts."""
    files: dict[str, set[Path]] = defaultdict(set)
    for path, label in zip(paths, labels):
        files[label].add(path.resolve())
    return {label: len(members) for label, members in files.items() if len(members) > 1}
