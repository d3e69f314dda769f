"""Did every OpenMP thread of a hybrid rank stay where the plan put it, for the whole timed run?

A hybrid rank bound with :data:`mpiatlas.programs.kernels.OMP_BINDING` has each thread on one cpu:
thread i on the i-th cpu of its rank's set. The Jacobi kernel reports, per thread, its cpu before
and after the timed sweeps (``thread_cpus_start``, ``thread_cpus``) and its affinity mask (how many
cpus it may run on, ``thread_mask_cpus``, the widest seen at either sample, and the lowest,
``thread_mask_first``). The launch's rank-level binding report cannot show an unbound thread when the
plan happens to equal where the OS or OpenMP put it by default; the masks can:

* a thread whose mask holds more than one cpu is unbound, one whose cpu changed between the samples
  migrated: the launch is ``perturbed`` (its times may include the thread's moves), with the evidence;
* a hybrid launch without that evidence (an older kernel, or a mask it could not read) is
  ``unknown``: not judged good, and said so.

A thread bound but on the wrong cpu is a wrong binding, not a perturbation: :func:`thread_problems`
makes that cell ``invalid``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpiatlas.stats.quality import OK, PERTURBED, UNKNOWN

if TYPE_CHECKING:
    import polars as pl

EVIDENCE_COLUMNS = ("thread_cpus", "thread_cpus_start", "thread_mask_cpus")
NO_EVIDENCE = ("no per-thread binding evidence (the kernel reported no thread affinity masks), so whether "
               "the OpenMP threads stayed on their planned cpus is unknown: not trusted")


def _planned(cpus: tuple[int, ...], threads: int) -> list[int | None]:
    """Thread i's planned cpu: the i-th of its rank's set in ascending order (None past the set)."""
    ordered = sorted(cpus)
    return [ordered[t] if t < len(ordered) else None for t in range(threads)]


def _rank_findings(row: dict[str, Any], sets: list[tuple[int, ...]]) -> tuple[list[str], bool]:
    """(what perturbed this rank's threads, whether some thread's evidence is missing)."""
    rank = int(row["rank"])
    where = f"rank {rank}" + (f" ({row['host']})" if row.get("host") else "")
    end, start, masks = (list(row.get(c) or []) for c in EVIDENCE_COLUMNS)
    firsts = list(row.get("thread_mask_first") or [None] * len(masks))
    if not (len(end) == len(start) == len(masks)) or not masks:
        return [], True
    planned = _planned(sets[rank] if rank < len(sets) else (), len(masks))
    found, missing = [], False
    for t, (before, after, width, first, want) in enumerate(zip(start, end, masks, firsts, planned)):
        if width is None or width < 1 or before < 0 or after < 0:
            missing = True
        elif width > 1:
            found.append(f"{where}: OpenMP thread {t} unbound (its mask holds {width} cpus from cpu {first}; "
                         f"planned cpu {want} only), ran on cpu {before} then {after}")
        elif before != after:
            found.append(f"{where}: OpenMP thread {t} migrated from cpu {before} to cpu {after} during the timed "
                         f"sweeps (planned cpu {want})")
    return found, missing


def thread_quality(frame: pl.DataFrame, sets: list[tuple[int, ...]] | None,
                   threads: int) -> tuple[str | None, str | None]:
    """(quality, reason) of a launch's OpenMP threads: ``perturbed`` with the evidence, ``unknown``
    without evidence, ``ok``; (None, None) where no thread has a planned cpu (one thread per rank,
    or a rank the stack did not bind to a set)."""
    if threads <= 1 or sets is None:
        return None, None
    if any(c not in frame.columns for c in EVIDENCE_COLUMNS):
        return UNKNOWN, NO_EVIDENCE
    columns = [c for c in ("rank", "host", *EVIDENCE_COLUMNS, "thread_mask_first") if c in frame.columns]
    found: list[str] = []
    missing = False
    for row in frame.select(columns).iter_rows(named=True):
        rank_found, rank_missing = _rank_findings(row, sets)
        found += rank_found
        missing = missing or rank_missing
    if found:
        return PERTURBED, "; ".join(found)
    return (UNKNOWN, NO_EVIDENCE) if missing else (OK, None)
