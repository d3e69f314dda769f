"""The history store: one SQLite file (standard library), default ``results/history.sqlite``.

Tables: ``meta`` (the application tag and the schema version), ``entries`` (one per campaign or
import added), ``series`` (one per identity: system, stack + version, transport, mapping, benchmark,
algorithm, knobs, np, parameter) and ``figures`` (an entry's value of a series at a message size,
or at no size for a fitted parameter, with its 95 % interval).

Safety:

* An entry and all its figures are written in one transaction (``BEGIN IMMEDIATE``): a process
  killed in the middle (kill -9) leaves the entry out, never half in; SQLite's journal rolls it back
  on the next open.
* WAL mode and a busy timeout: two processes adding at once wait for each other, both land.
* A file that is not SQLite, is SQLite but not an mpiatlas history, or has a newer schema is
  refused with :class:`HistoryError` before anything is written to it (it is first opened
  read-only to be checked).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypedDict

from mpiatlas.matrix.layout import RESULTS_ROOT

DEFAULT_DB = f"{RESULTS_ROOT}/history.sqlite"
APPLICATION = "mpiatlas-history"
SCHEMA_VERSION = 1
# Seconds a writer waits for another one's transaction (a campaign adding thousands of figures).
BUSY_TIMEOUT_S = 60.0
# Figures inserted per executemany call; the progress callback runs between batches.
BATCH = 500


class SeriesIdentity(NamedTuple):
    """The identity of a series, in the series table's column order (its key is the JSON list of these
    values): where it ran (system, stack and version, transport, mapping), what (benchmark, algorithm,
    knobs, ranks) and which figure (``parameter``: a median time or a fitted λ or B)."""

    system: str | None
    stack: str | None
    stack_version: str | None
    transport: str | None
    mapping: str | None
    benchmark: str
    algorithm: str | None
    knobs: str | None
    np: int | None
    parameter: str


SERIES_FIELDS: tuple[str, ...] = SeriesIdentity._fields

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: an entry id names one entry for good
    source_key TEXT NOT NULL UNIQUE,
    label TEXT,
    source TEXT NOT NULL,
    date TEXT NOT NULL,
    added TEXT NOT NULL,
    partial INTEGER NOT NULL DEFAULT 0,
    config_hash TEXT,
    topology_hash TEXT,
    stack_versions TEXT NOT NULL,
    trust TEXT NOT NULL,
    notes TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    system TEXT, stack TEXT, stack_version TEXT, transport TEXT, mapping TEXT, benchmark TEXT,
    algorithm TEXT, knobs TEXT, np INTEGER, parameter TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS figures (
    entry_id INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    series_id INTEGER NOT NULL REFERENCES series(id),
    bytes INTEGER,
    value REAL NOT NULL,
    ci_low REAL,
    ci_high REAL,
    n INTEGER
);
CREATE INDEX IF NOT EXISTS figures_by_series ON figures(series_id, entry_id);
"""


class HistoryError(Exception):
    """A store that cannot be used (named, with what was expected), or an input that cannot be added."""


@dataclass(frozen=True)
class Figure:
    """One value of one series in one entry: at a message size, or (bytes None) a fitted parameter."""

    series: SeriesIdentity
    bytes: int | None
    value: float
    ci_low: float | None
    ci_high: float | None
    n: int | None


class EntryTrust(TypedDict, total=False):
    """How far an entry's figures can be trusted (the entries table's ``trust`` JSON): sizes left
    noisy, fits with a warning, and where the campaign has a cells table, its cells by status and
    its perturbed launches (None: the table has no such column)."""

    noisy_sizes: int | None
    fit_warnings: int
    cells: dict[str, int] | None
    perturbed: int | None


class StoredEntry(TypedDict):
    """One row of the entries table as :meth:`Store.entries` gives it (JSON columns decoded), with its figure count."""

    id: int
    label: str | None
    source: str
    date: str
    added: str
    partial: bool
    config_hash: str | None
    topology_hash: str | None
    stack_versions: dict[str, str | None]
    trust: EntryTrust
    notes: list[str]
    source_key: str
    figures: int


class FigureRow(NamedTuple):
    """One stored figure with its entry's id, date and label and its series' identity (the columns of
    :func:`mpiatlas.history.check.figures_frame`, in order).

    The series' fields are SeriesIdentity's written again: a NamedTuple takes no fields from another (no
    multiple inheritance, a subclass adds none, and mypy reads only a literal field list), and a row must
    stay one flat tuple, as SQLite gives it and polars reads it. tests/test_history.py holds the two together.
    """

    entry_id: int
    date: str
    label: str | None
    system: str | None
    stack: str | None
    stack_version: str | None
    transport: str | None
    mapping: str | None
    benchmark: str
    algorithm: str | None
    knobs: str | None
    np: int | None
    parameter: str
    bytes: int | None
    value: float
    ci_low: float | None
    ci_high: float | None
    n: int | None


@dataclass
class Entry:
    """What one campaign (or import) adds: its identity, what it ran on, and its figures."""

    source_key: str  # sha256 of the measured data: the same campaign added twice has the same key
    source: str
    date: str  # ISO 8601
    label: str | None = None
    partial: bool = False
    config_hash: str | None = None
    topology_hash: str | None = None
    stack_versions: dict[str, str | None] | None = None
    trust: EntryTrust | None = None
    notes: list[str] | None = None
    figures: list[Figure] | None = None


@dataclass(frozen=True)
class AddResult:
    entry_id: int
    added: bool  # False: the same data was already there (a no-op)
    figures: int
    replaced_partial: int = 0  # partial entries of the same source replaced by this one


def series_key(values: SeriesIdentity) -> str:
    return json.dumps(list(values), separators=(",", ":"))


class Store:
    """An open history file. Use :func:`open_store`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE (the write lock up front: no deadlock between two adders) ... COMMIT;
        any exception rolls the whole transaction back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def add(self, entry: Entry, progress: Callable[[int], None] | None = None) -> AddResult:
        """Add ``entry`` with its figures in one transaction; an entry whose data is already
        there is left as it is (``added`` False). A complete entry replaces the partial entries
        of the same source directory. ``progress(n)``: called inside the transaction after each
        batch of figures (n written so far)."""
        figures = entry.figures or []
        with self.transaction() as db:
            known = db.execute("SELECT id FROM entries WHERE source_key = ?", (entry.source_key,)).fetchone()
            if known is not None:
                return AddResult(int(known[0]), added=False, figures=0)
            replaced = 0
            if not entry.partial:
                replaced = db.execute("DELETE FROM entries WHERE source = ? AND partial = 1",
                                      (entry.source,)).rowcount
            cur = db.execute(
                "INSERT INTO entries (source_key, label, source, date, added, partial, config_hash, topology_hash,"
                " stack_versions, trust, notes) VALUES (?, ?, ?, ?, datetime('now'), ?, ?, ?, ?, ?, ?)",
                (entry.source_key, entry.label, entry.source, entry.date, int(entry.partial), entry.config_hash,
                 entry.topology_hash, json.dumps(entry.stack_versions or {}), json.dumps(entry.trust or {}),
                 json.dumps(entry.notes or [])))
            entry_id = int(cur.lastrowid or 0)
            ids = self._series_ids(db, {f.series for f in figures})
            for start in range(0, len(figures), BATCH):
                db.executemany(
                    "INSERT INTO figures (entry_id, series_id, bytes, value, ci_low, ci_high, n) VALUES (?,?,?,?,?,?,?)",
                    [(entry_id, ids[f.series], f.bytes, f.value, f.ci_low, f.ci_high, f.n)
                     for f in figures[start:start + BATCH]])
                if progress is not None:
                    progress(min(start + BATCH, len(figures)))
        return AddResult(entry_id, added=True, figures=len(figures), replaced_partial=replaced)

    @staticmethod
    def _series_ids(db: sqlite3.Connection, identities: set[SeriesIdentity]) -> dict[SeriesIdentity, int]:
        placeholders = ", ".join("?" * (len(SERIES_FIELDS) + 1))
        db.executemany(f"INSERT OR IGNORE INTO series (key, {', '.join(SERIES_FIELDS)}) VALUES ({placeholders})",
                       [(series_key(s), *s) for s in identities])
        return {s: int(db.execute("SELECT id FROM series WHERE key = ?", (series_key(s),)).fetchone()[0])
                for s in identities}

    def entries(self) -> list[StoredEntry]:
        """Every entry, oldest first (by date, then by when it was added), with its figure count."""
        rows = self.conn.execute(
            "SELECT e.id, e.label, e.source, e.date, e.added, e.partial, e.config_hash, e.topology_hash,"
            " e.stack_versions, e.trust, e.notes, e.source_key, (SELECT count(*) FROM figures f WHERE f.entry_id = e.id)"
            " FROM entries e ORDER BY e.date, e.id").fetchall()
        return [StoredEntry(id=int(row[0]), label=row[1], source=str(row[2]), date=str(row[3]), added=str(row[4]),
                            partial=bool(row[5]), config_hash=row[6], topology_hash=row[7],
                            stack_versions=json.loads(row[8]), trust=json.loads(row[9]), notes=json.loads(row[10]),
                            source_key=str(row[11]), figures=int(row[12]))
                for row in rows]

    def figures(self) -> list[FigureRow]:
        """(entry id, entry date, entry label, series fields…, bytes, value, ci_low, ci_high, n) of every figure."""
        return [FigureRow(*row) for row in self.conn.execute(
            f"SELECT e.id, e.date, e.label, {', '.join('s.' + f for f in SERIES_FIELDS)},"
            " f.bytes, f.value, f.ci_low, f.ci_high, f.n"
            " FROM figures f JOIN entries e ON e.id = f.entry_id JOIN series s ON s.id = f.series_id").fetchall()]


def open_store(path: str | Path, *, create: bool = True) -> Store:
    """Open (or, with ``create``, start) the history file at ``path``; raises HistoryError for a file
    that is not an mpiatlas history of a schema this version reads, without writing to it."""
    path = Path(path)
    if path.exists():
        _check_existing(path)
    elif not create:
        raise HistoryError(f"{path}: no history store (an entry is added by `mpiatlas history add` or a campaign)")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=FULL")
        # One transaction: two processes starting the same new file create its tables once.
        conn.executescript(f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;")
    except sqlite3.Error as exc:
        conn.close()
        raise HistoryError(f"{path}: cannot be opened as a history store ({exc})") from exc
    store = Store(path, conn)
    with store.transaction() as db:
        db.executemany("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                       [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))])
    return store


def _check_existing(path: Path) -> None:
    """Raise HistoryError unless ``path`` is an mpiatlas history this version reads (opened read-only)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise HistoryError(f"{path}: cannot be opened ({exc})") from exc
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: not an SQLite database ({exc}); expected an mpiatlas history store. "
                           "It was left as it is: pass another --db") from exc
    finally:
        conn.close()
    if not tables:
        return  # an empty file (or an empty database): started here
    if meta.get("application") != APPLICATION:
        raise HistoryError(f"{path}: an SQLite database, but not an mpiatlas history store (no meta application "
                           f"= {APPLICATION!r}; tables: {', '.join(sorted(tables))}). It was left as it is")
    version = meta.get("schema_version", "")
    if not version.isdigit():
        raise HistoryError(f"{path}: meta schema_version {version!r} is not a number")
    if int(version) > SCHEMA_VERSION:
        raise HistoryError(f"{path}: written by a newer mpiatlas (history schema {version}; this version reads up "
                           f"to {SCHEMA_VERSION}). It was left as it is: upgrade mpiatlas to read it")
