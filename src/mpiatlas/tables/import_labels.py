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
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path


class LabelError(ValueError):
    """A labels mapping or an input list that cannot give each file a label; the message names the file."""


def resolve_paths(paths: Sequence[str | Path]) -> list[str]:
    """Absolute paths with symbolic links and ``..`` in the directories resolved: how files are told apart.

    Strings, and each directory resolved once: a campaign's files share a few directories, and
    resolving (and hashing) 25 k ``Path`` objects one by one costs seconds. The file name is kept as given."""
    directories: dict[str, str] = {}
    resolved = []
    sep = os.sep
    for path in paths:
        # str.rpartition, not os.path.split/join (~5 us a name): the directory is resolved anyway,
        # so "a//x" splitting as "a/" rather than "a" names the same directory.
        head, slash, name = os.fspath(path).rpartition(sep)
        head = head or slash  # "/x": the root; "x": no directory, the current one
        real = directories.get(head)
        if real is None:
            real = directories[head] = os.path.realpath(head or os.curdir)
        resolved.append(real + name if real.endswith(sep) else real + sep + name)
    return resolved


def distinguishing_labels(paths: Sequence[str | Path]) -> list[str]:
    """Each file's stem, lengthened by parent directories until no two different files share it."""
    labels = [file_stem(p) for p in paths]
    by_stem: dict[str, list[int]] = defaultdict(list)
    for i, stem in enumerate(labels):
        by_stem[stem].append(i)
    colliding = [members for members in by_stem.values() if len(members) > 1]
    if not colliding:  # the usual case: the stems already tell the files apart
        return labels
    resolved = resolve_paths(paths)
    heads, names = zip(*map(os.path.split, resolved))
    # Parent directories nearest first, split once per directory (files share a few).
    parts = {head: Path(head).parts[::-1] for head in set(heads)}
    for members in colliding:
        if len({resolved[i] for i in members}) > 1:
            stem = labels[members[0]]
            group = _shortest_unique(stem, [names[i] for i in members], [parts[heads[i]] for i in members])
            for i, label in zip(members, group):
                labels[i] = label
    # A lengthened label can still equal another stem's (d/x.out beside d/x.txt is "x.out", as is
    # e/x.out.txt's stem): those files get their absolute path, which no relative label can equal.
    for members in _shared_by_several(resolved, labels).values():
        for i in members:
            labels[i] = resolved[i]
    return labels


def _shared_by_several(resolved: Sequence[str], labels: Sequence[str]) -> dict[str, list[int]]:
    """Labels given to more than one different file, with the indices of their files."""
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    return {label: members for label, members in by_label.items() if len({resolved[i] for i in members}) > 1}


def _shortest_unique(stem: str, names: list[str], ups: list[tuple[str, ...]]) -> list[str]:
    """Labels of files with one stem (``names``, in directories ``ups``: their parts nearest first) from
    the fewest parent directories that tell them apart; a directory level every file shares
    (``imb/IMB_PingPong/``) tells nothing and is left out. The file name with its suffix where only the
    suffix differs."""
    distinct = len(set(zip(names, ups)))
    for leaves in ([stem] * len(names), names):
        chosen: list[int] = []
        for level in range(max(map(len, ups)) + 1):
            labels = ["/".join([*(up[j] for j in reversed(chosen) if j < len(up)), leaf]).lstrip("/")
                      for leaf, up in zip(leaves, ups)]  # fmt: skip
            if len(set(labels)) == distinct:
                return labels
            if len({up[level] if level < len(up) else "" for up in ups}) > 1:
                chosen.append(level)
    # Distinct files always can be told apart: by their directories, else by their names.
    raise AssertionError(f"{stem}: files {sorted(set(zip(ups, names)))} cannot be told apart")


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
                key = Path(resolve_paths([path.parent / file])[0])
                if mapping.get(key, label) != label:
                    raise LabelError(f"{path}:{line}: {file} already has the label {mapping[key]!r}, not {label!r}")
                mapping[key] = label
    except OSError as exc:
        raise LabelError(f"{path}: cannot read the labels mapping: {exc.strerror or exc}") from None
    return mapping


def file_stem(path: str | Path) -> str:
    """``Path(path).stem``, from the path's string: pathlib's own costs ~3 us a file, a tenth of a
    second over an import of 25 k files."""
    name = os.path.basename(os.fspath(path))
    if name in ("", "."):
        return Path(path).stem  # a root or "." : pathlib's rule, not basename's
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name


def assign_labels(paths: Sequence[str | Path], *, label: str | None = None, mapping: Mapping[Path, str] | None = None,
                  pool: bool = False) -> list[str]:  # fmt: skip
    """The label of each file, by the module's rules."""
    if label is not None:
        if not label.strip():
            raise LabelError("--label: expected a non-empty label")
        return [label] * len(paths)
    labels = [file_stem(p) for p in paths] if pool else distinguishing_labels(paths)
    if mapping:
        resolved = [Path(r) for r in resolve_paths(paths)]
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


def pooled_labels(paths: Sequence[str | Path], labels: Sequence[str]) -> dict[str, int]:
    """Labels given to several different files (their rows are pooled), with the file counts."""
    files: dict[str, set[str]] = defaultdict(set)
    for label, path in zip(labels, resolve_paths(paths), strict=True):
        files[label].add(path)
    return {label: len(paths_of) for label, paths_of in files.items() if len(paths_of) > 1}


def file_labels(paths: Sequence[str | Path], *, label: str | None = None, labels_csv: str | Path | None = None,
                pool: bool = False) -> list[str]:
    """Each file's label from the import's options (``--label``, ``--labels CSV``, ``--pool``); one label
    for all excludes the other two, which it would silently override."""
    if label is not None and (labels_csv is not None or pool):
        raise LabelError("--label gives every file one label: it cannot be combined with "
                         + ("--labels" if labels_csv is not None else "--pool"))  # fmt: skip
    mapping = read_labels_csv(Path(labels_csv)) if labels_csv is not None else None
    return assign_labels(paths, label=label, mapping=mapping, pool=pool)
