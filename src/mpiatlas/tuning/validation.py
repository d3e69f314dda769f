"""Whether an exported tuning file takes effect: the validation campaign's three ways, per tuned cell.

For every (stack, transport, collective, P, size) the decision gave a non-default algorithm, from
the validation campaign (:mod:`mpiatlas.tuning.validation_config`):

* **matches**: the exported file's time equals the forced winner's, i.e. the 95 % bootstrap CI of
  t_exported / t_forced (:func:`mpiatlas.stats.ratios.size_table`, the ratio CI ``mpiatlas compare``
  reports) contains 1;
* **beats**: the file beats the stack's default, the CI of t_exported / t_default lies below 1 (a
  gain was claimed at every tuned point);
* passes when both hold, with at least :data:`mpiatlas.stats.ratios.MIN_REPS` repetitions per way.
  The validated gain is 1 - t_exported / t_default, beside the claimed one.

A file must also change only what it claims. At a sample of the sizes it leaves to the library
(:func:`mpiatlas.tuning.validation_config.untuned_points`: one or two per untuned range, at the tuned
process counts), the exported file against the default: the size fails when the file is
significantly slower, the 95 % CI of t_file / t_default lies wholly above 1 + :data:`UNTUNED_TOLERANCE`
(5 %, ``--min-gain``'s default: no rule is written for a gain smaller than that, so a cost smaller
than that elsewhere is within the decision's own resolution), or when it has fewer than
:data:`~mpiatlas.stats.ratios.MIN_REPS` repetitions per side. One failing size fails the validation.

Evidence from the stack itself, where it gives any (:func:`evidence`): Intel MPI's ``I_MPI_DEBUG``
echo of the ``I_MPI_ADJUST_*`` value it read. MPICH 5.x's ``MPIR_CVAR_DEBUG_SUMMARY`` (the
runner sets it) names the selection trees it loaded, file or built-in, but no MPIR algorithm. Open
MPI release builds print nothing about the rules file or the algorithm (coll_tuned's messages are
``OPAL_OUTPUT``, compiled out of non-debug builds, so ``coll_tuned_verbose`` stays silent). For
the algorithm the timing match is the evidence here, and tests/test_tune_loaded.py checks it out of
band.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import polars as pl

from mpiatlas.matrix import layout
from mpiatlas.stats.ratios import FASTER, MIN_REPS, RatioRow, grouped_times, ratio_rows, size_table
from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning import intelmpi_env, mpich_json, samples
from mpiatlas.tuning.decide import Point, SeriesDecision, TuneError
from mpiatlas.tuning.validation_config import knob_set, tuned_points, untuned_points

KEYS: tuple[str, ...] = ("stack", "transport", "benchmark", "np", "bytes")
UNTUNED_TOLERANCE = 0.05
SILENT = {
    "openmpi": "none: release builds compile coll_tuned's OPAL_OUTPUT messages out, coll_tuned_verbose prints "
               "nothing about the rules file or the algorithm (tests/test_tune_loaded.py checks it with an "
               "LD_PRELOAD probe)",
    "mpich": "none: MPICH prints no MPIR algorithm name (tests/test_tune_loaded.py checks the JSON by an "
             "algorithm that asserts)",
}


@dataclass(frozen=True)
class CheckedCell:
    """Which cell a check speaks of."""

    stack: str
    kind: str
    transport: str
    collective: str
    np: int
    bytes: int


class CheckedCellRecord(TypedDict):
    stack: str
    kind: str
    transport: str
    collective: str
    np: int
    bytes: int


class CellCheckRecord(CheckedCellRecord):
    """A tuned cell's check as ``validation.json`` keeps it (``cells``)."""

    algorithm: str
    claimed_gain: float | None
    n: list[int]
    gain: float | None
    gain_ci: list[float | None]
    match_ratio: float | None
    match_ci: list[float | None]
    matches: bool
    beats: bool
    reason: str
    passed: bool


class UntunedCheckRecord(CheckedCellRecord):
    """An untuned size's check as ``validation.json`` keeps it (``untuned``)."""

    n: list[int]
    ratio: float | None
    ratio_ci: list[float | None]
    slower: bool
    reason: str
    passed: bool


@dataclass(frozen=True)
class CellCheck(CheckedCell):
    algorithm: str  # the winner the file names
    claimed_gain: float | None
    n: tuple[int, int, int]  # repetitions: default, exported, forced
    gain: float | None  # validated: 1 - t_exported / t_default
    gain_ci: tuple[float | None, float | None]
    match_ratio: float | None  # t_exported / t_forced
    match_ci: tuple[float | None, float | None]
    matches: bool
    beats: bool
    reason: str

    @property
    def passed(self) -> bool:
        return self.matches and self.beats

    def to_json(self) -> CellCheckRecord:
        return {"stack": self.stack, "kind": self.kind, "transport": self.transport, "collective": self.collective,
                "np": self.np, "bytes": self.bytes, "algorithm": self.algorithm, "claimed_gain": self.claimed_gain,
                "n": list(self.n), "gain": self.gain, "gain_ci": list(self.gain_ci), "match_ratio": self.match_ratio,
                "match_ci": list(self.match_ci), "matches": self.matches, "beats": self.beats, "reason": self.reason,
                "passed": self.passed}


@dataclass(frozen=True)
class UntunedCheck(CheckedCell):
    """A size the file leaves to the library: the exported file against the default."""

    n: tuple[int, int]  # repetitions: default, exported
    ratio: float | None  # median t_exported / t_default
    ratio_ci: tuple[float | None, float | None]
    slower: bool  # the CI lies wholly above 1 + UNTUNED_TOLERANCE
    reason: str

    @property
    def passed(self) -> bool:
        return not self.slower and min(self.n) >= MIN_REPS

    def to_json(self) -> UntunedCheckRecord:
        return {"stack": self.stack, "kind": self.kind, "transport": self.transport, "collective": self.collective,
                "np": self.np, "bytes": self.bytes, "n": list(self.n), "ratio": self.ratio,
                "ratio_ci": list(self.ratio_ci), "slower": self.slower, "reason": self.reason, "passed": self.passed}


def _rows(df: pl.DataFrame, series: SeriesDecision) -> pl.DataFrame:
    return df.filter((pl.col("stack") == series.stack) & (pl.col("transport") == series.transport)
                     & (pl.col("benchmark") == series.benchmark))


def _usable(df: pl.DataFrame, series: SeriesDecision) -> pl.DataFrame:
    return _rows(df, series).select(*KEYS, "algorithm", "knobs", "t_usec", "run").filter(pl.col("t_usec").is_finite())


def _file_vs_default(rows: pl.DataFrame, series: SeriesDecision) -> pl.DataFrame:
    """Size table of the exported file (B) against the default (A), every measured point."""
    keys = list(KEYS)
    default = grouped_times(rows.filter((pl.col("algorithm") == DEFAULT) & (pl.col("knobs") == "")), keys)
    exported = grouped_times(rows.filter((pl.col("algorithm") == DEFAULT)
                                         & (pl.col("knobs") == knob_set(series.stack, series.transport))), keys)
    return size_table(default, exported, keys)


def _tables(df: pl.DataFrame, series: SeriesDecision) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(exported vs default, exported vs forced) size tables of one series' tuned points."""
    keys = list(KEYS)
    rows = _usable(df, series)
    winners = pl.DataFrame([{"np": p, "bytes": b, "algorithm": a} for p, b, a in tuned_points(series)],
                           schema={"np": pl.Int64, "bytes": pl.Int64, "algorithm": pl.String})
    plain = rows.filter(pl.col("knobs") == "")
    exported = grouped_times(rows.filter((pl.col("algorithm") == DEFAULT) & (pl.col("knobs") == knob_set(series.stack, series.transport))),
                             keys)
    forced = grouped_times(plain.join(winners, on=["np", "bytes", "algorithm"], how="semi"), keys)
    return _file_vs_default(rows, series), size_table(forced, exported, keys)


def _lookup(table: pl.DataFrame, np_: int, nbytes: int) -> RatioRow | None:
    rows = ratio_rows(table.filter((pl.col("np") == np_) & (pl.col("bytes") == nbytes)))
    return rows[0] if rows else None


def _check(series: SeriesDecision, point: Point, gain_row: RatioRow | None, match_row: RatioRow | None
           ) -> CellCheck:
    n_def = gain_row.n_a if gain_row else 0
    n_exp = gain_row.n_b if gain_row else (match_row.n_b if match_row else 0)
    n_for = match_row.n_a if match_row else 0
    gain = None if gain_row is None else 1 - gain_row.ratio
    gain_ci = (None, None) if gain_row is None else (1 - gain_row.ratio_ci_high, 1 - gain_row.ratio_ci_low)
    match_ci = (None, None) if match_row is None else (match_row.ratio_ci_low, match_row.ratio_ci_high)
    if min(n_def, n_exp, n_for) < MIN_REPS:
        matches = beats = False
        reason = f"too few repetitions (default {n_def}, exported {n_exp}, forced {n_for}; need {MIN_REPS})"
    else:
        # Repetitions on all three sides (MIN_REPS >= 1): both rows are there.
        assert gain_row is not None and match_row is not None
        matches = bool(match_row.ratio_ci_low <= 1 <= match_row.ratio_ci_high)
        beats = gain_row.verdict == FASTER
        parts = [f"t_file/t_{point.algorithm} {match_row.ratio:.3f} [{match_ci[0]:.3f}, {match_ci[1]:.3f}]"
                 + ("" if matches else " (CI excludes 1: the file did not run the winner)"),
                 f"gain over default {gain:.1%} [{gain_ci[0]:.1%}, {gain_ci[1]:.1%}]"
                 + ("" if beats else " (not significantly faster than the default)")]
        reason = "; ".join(parts)
    return CellCheck(series.stack, series.kind, series.transport, series.benchmark, point.np, point.bytes,
                     point.algorithm, point.gain, (n_def, n_exp, n_for), gain, gain_ci,
                     None if match_row is None else match_row.ratio, match_ci, matches, beats, reason)


def _load(results: Path) -> pl.DataFrame:
    try:
        df = samples.load(results)
    except samples.SamplesError as exc:
        raise TuneError(f"validation campaign: {exc}") from exc
    return df.with_columns(pl.col("knobs").fill_null(""))


def _untuned(series: SeriesDecision, np_: int, nbytes: int, row: RatioRow | None) -> UntunedCheck:
    n = (row.n_a, row.n_b) if row else (0, 0)
    ratio = row.ratio if row else None
    ci = (row.ratio_ci_low, row.ratio_ci_high) if row else (None, None)
    if min(n) < MIN_REPS:
        slower, reason = False, f"too few repetitions (default {n[0]}, exported {n[1]}; need {MIN_REPS})"
    else:
        assert row is not None  # repetitions on both sides (MIN_REPS >= 1): the row is there
        slower = bool(row.ratio_ci_low > 1 + UNTUNED_TOLERANCE)
        reason = (f"t_file/t_default {ratio:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
                  + (f" (significantly slower: CI above 1 + {UNTUNED_TOLERANCE:.0%})" if slower else ""))
    return UntunedCheck(series.stack, series.kind, series.transport, series.benchmark, np_, nbytes, n, ratio, ci,
                        slower, reason)


def check_untuned(results: Path, series: list[SeriesDecision]) -> list[UntunedCheck]:
    """Every sampled untuned size of ``series`` (the file against the default) on the validation campaign."""
    df = _load(results)
    out: list[UntunedCheck] = []
    for s in (s for s in series if s.tuned):
        table = _file_vs_default(_usable(df, s), s)
        out += [_untuned(s, p, b, _lookup(table, p, b)) for p, b in untuned_points(s)]
    return out


def check(results: Path, series: list[SeriesDecision]) -> list[CellCheck]:
    """Every tuned point of ``series`` judged on the validation campaign at ``results``."""
    df = _load(results)
    out: list[CellCheck] = []
    for s in (s for s in series if s.tuned):
        gain_t, match_t = _tables(df, s)
        for p in sorted((p for p in s.points if p.algorithm != DEFAULT), key=lambda p: (p.np, p.bytes)):
            out.append(_check(s, p, _lookup(gain_t, p.np, p.bytes), _lookup(match_t, p.np, p.bytes)))
    return out


def evidence(results: Path, series: list[SeriesDecision]) -> dict[str, str]:
    """Per ``stack/transport``: what the stack itself said about the file (see the module doc)."""
    out: dict[str, str] = {}
    try:
        df = samples.load(results).with_columns(pl.col("knobs").fill_null(""))
    except samples.SamplesError:
        return out
    for s in (s for s in series if s.tuned):
        key = f"{s.stack}/{s.transport}"
        # The exported cells: the file's knob set on the default algorithm (a forced one overrides the file).
        cells = _rows(df, s).filter((pl.col("knobs") == knob_set(s.stack, s.transport))
                                    & (pl.col("algorithm") == DEFAULT))["cell"].unique().sort().to_list()
        if s.kind == "mpich":
            out[key] = _mpich_sources(results, cells[:1], s) or SILENT["mpich"]
            continue
        if s.kind != "intelmpi":
            out.setdefault(key, SILENT.get(s.kind, "none"))
            continue
        name, value = f"I_MPI_ADJUST_{s.collective.upper()}", intelmpi_env.adjust_value(s)
        echoed = _echo(results, cells[:1], name)
        said = (f"I_MPI_DEBUG echoed {name}={echoed}" + (" (the file's value)" if echoed == value else
                f" but the file says {value}")) if echoed is not None else f"I_MPI_DEBUG did not echo {name}"
        out[key] = "; ".join(filter(None, [out.get(key), said]))
    return out


def _stdout_lines(results: Path, cell: str) -> list[str]:
    path = Path(layout.raw_dir(str(results), cell)) / "stdout.txt"
    return path.read_text(errors="replace").splitlines() if path.is_file() else []


def _mpich_sources(results: Path, cells: list[str], series: SeriesDecision) -> str | None:
    """Which selection trees MPICH loaded, as rank 0 prints them at any ``MPIR_CVAR_DEBUG_SUMMARY``
    (5.x: ``MPIR: <file or built-in>``, ``MPID: ...``, ``MPID/shm: ...``); None when it did not."""
    wanted = dict(zip(("MPIR", "MPID"), mpich_json.file_names(f"{series.stack}.{series.transport}")))
    for cell in cells:
        said = {}
        for line in _stdout_lines(results, cell):
            head, sep, value = line.partition(": ")
            if sep and head in ("MPIR", "MPID", "MPID/shm", "MPIR_CVAR_DEVICE_COLLECTIVES"):
                said[head] = value.strip()
        if "MPIR" in said and "MPID" in said:
            parts = [f"{level} tree {said[level]}" + (" (the file's)" if said[level].endswith("/" + wanted[level])
                                                      else " (not the file's)") for level in ("MPIR", "MPID")]
            parts += [f"MPID/shm tree {said.get('MPID/shm', '?')}",
                      f"MPIR_CVAR_DEVICE_COLLECTIVES {said.get('MPIR_CVAR_DEVICE_COLLECTIVES', '?')}"]
            return ("MPIR_CVAR_DEBUG_SUMMARY: " + ", ".join(parts) + "; MPICH names no MPIR algorithm "
                    "(tests/test_tune_loaded.py checks it by one that asserts)")
    return None


def _echo(results: Path, cells: list[str], name: str) -> str | None:
    """The value of ``name`` an Intel MPI launch printed at I_MPI_DEBUG >= 5 (``MPI startup(): NAME=VALUE``)."""
    for cell in cells:
        raw = Path(layout.raw_dir(str(results), cell))
        for part in ("stdout.txt", "stderr.txt"):
            path = raw / part
            if not path.is_file():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if f"{name}=" in line and "MPI startup" in line:
                    return line.split(f"{name}=", 1)[1].strip()
    return None


class UntunedSummary(TypedDict):
    """The sampled untuned sizes of a validation: how many, how many passed, the failures, the tolerance."""

    cells: int
    passed: int
    failed: list[str]
    tolerance: float


class ValidationSummary(TypedDict):
    """``summary`` of ``validation.json``, written as-is: the tuned cells' counts and failures, the
    untuned sizes', and ``ok`` when every one passes."""

    cells: int
    passed: int
    failed: list[str]
    untuned: UntunedSummary
    ok: bool


def summary(checks: list[CellCheck], untuned: list[UntunedCheck] | None = None) -> ValidationSummary:
    """Counts and failures; ``ok`` when every tuned cell and every sampled untuned size passes."""
    untuned = untuned or []

    def failed(items: Sequence[CellCheck | UntunedCheck]) -> list[str]:
        return [f"{c.stack}/{c.transport}/{c.collective} P={c.np} {c.bytes} B: {c.reason}" for c in items if not c.passed]

    passed, untuned_passed = sum(c.passed for c in checks), sum(c.passed for c in untuned)
    return {"cells": len(checks), "passed": passed, "failed": failed(checks),
            "untuned": {"cells": len(untuned), "passed": untuned_passed, "failed": failed(untuned),
                        "tolerance": UNTUNED_TOLERANCE},
            "ok": passed == len(checks) and untuned_passed == len(untuned)}
