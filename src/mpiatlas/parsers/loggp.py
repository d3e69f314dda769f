"""The loggp kernel's records (src/kernels/loggp.c) as one row per trial: L, o_s, o_r and g per size.

The kernel measures, between ranks 0 and 1 and for each message size s, Kielmann's parameterised
round trip PRTT(n, d, s) (Kielmann, Bal, Verstoep 2000; the method of Netgauge's LogGP module):
rank 0 sends n messages of s bytes back to back with a delay d between them, rank 1 replies with
one message once all n have arrived, and rank 0 times the whole. In LogGP

* ``PRTT(1, 0, s) = 2 (o_s + L + o_r)`` — the plain round trip (``rtt_usec``);
* ``PRTT(n, 0, s) = PRTT(1, 0, s) + (n − 1) g`` — a burst of n = ``burst`` messages
  (``prtt_burst_usec``), so the gap is ``g = (PRTT(n, 0, s) − PRTT(1, 0, s)) / (n − 1)`` (``g_usec``);
* ``o_s`` (``o_s_usec``): the time rank 0 spends in MPI_Send of one message, each acknowledged
  with 0 bytes so that sends never queue;
* ``o_r`` (``o_r_usec``): the time rank 0 spends in MPI_Recv of a message that arrived while it
  busy-waited ``delay_usec`` = 2 rtt + 2 µs after asking for it;
* ``L = rtt / 2 − o_s − o_r`` (``L_usec``; ≤ 0 where the overheads are the whole round trip).

Each measurement is a mean over the kernel's iterations; the kernel repeats all of them ``trials``
times per size, so each parameter has a spread. Above the stack's eager limit a send cannot end
before its receive is matched, so there o_s and o_r include the transfer: LogGP's o and g are the
small-message ones (:mod:`mpiatlas.stats.region_loggp` takes them at 4 B).

Rank 0's record of a size holds one list entry per trial; rank 1 (the echoing side) times nothing.
:func:`loggp_trials` turns a kernel table (the tidy ``kernel_loggp.parquet``, or
:func:`mpiatlas.parsers.kernels.parse_kernel_output`'s ``loggp`` frame) into one row per (record,
trial); :func:`parse_loggp_output` does the same from the kernel's stdout.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mpiatlas.parsers.kernels import parse_kernel_output

__all__ = ["PARAMETERS", "TRIAL_COLUMNS", "LoggpParseError", "loggp_trials", "parse_loggp_output"]

# The per-trial lists of rank 0's records, in the kernel's order.
PARAMETERS = ("rtt_usec", "prtt_burst_usec", "g_usec", "o_s_usec", "o_r_usec", "L_usec", "delay_usec")
# The cell's coordinates kept on every trial row where the table has them (tidy's tag columns).
_CELL_COLUMNS = ("cell", "label", "stack", "stack_kind", "transport", "mapping", "region", "knobs", "rep",
                 "cell_status", "cell_quality", "source")
TRIAL_COLUMNS = ("bytes", "trial", "trials", "burst", "iterations", *PARAMETERS, "valid")


class LoggpParseError(ValueError):
    """Records that are not what the loggp kernel prints (the message names the source and the problem)."""


def loggp_trials(records: pl.DataFrame, source: str = "kernel_loggp") -> pl.DataFrame:
    """One row per (rank 0 record, trial): the cell's coordinates present, then :data:`TRIAL_COLUMNS`.

    Raises :class:`LoggpParseError` naming ``source`` when a column is missing or a record's lists
    do not hold ``trials`` values each."""
    needed = ("rank", "bytes", "trials", "burst", "iterations", "valid", *PARAMETERS)
    lacking = [c for c in needed if c not in records.columns]
    if lacking:
        raise LoggpParseError(f"{source}: lacks column(s) {', '.join(lacking)}; expected the loggp kernel's records "
                              f"({', '.join(needed)})")
    rank0 = records.filter(pl.col("rank") == 0)
    for row in rank0.select("bytes", "trials", *PARAMETERS).iter_rows(named=True):
        bad = [p for p in PARAMETERS if row[p] is None or len(row[p]) != row["trials"]]
        if bad:
            raise LoggpParseError(f"{source}: the record of {row['bytes']} B has {', '.join(bad)} without one value "
                                  f"per trial ({row['trials']} trials expected)")
    keep = [c for c in _CELL_COLUMNS if c in rank0.columns]
    if rank0.height == 0:
        return pl.DataFrame(schema={**{c: records.schema[c] for c in keep}, **_trial_schema()})
    exploded = (rank0.select(*keep, "bytes", "trials", "burst", "iterations", "valid",
                             *[pl.col(p).cast(pl.List(pl.Float64)) for p in PARAMETERS],
                             pl.int_ranges(0, pl.col("trials")).alias("trial"))
                .explode("trial", *PARAMETERS))
    return exploded.select(*keep, pl.col("bytes").cast(pl.Int64), pl.col("trial").cast(pl.Int64),
                           *[pl.col(c).cast(pl.Int64) for c in ("trials", "burst", "iterations")],
                           *PARAMETERS, pl.col("valid").cast(pl.Boolean))


def _trial_schema() -> dict[str, pl.DataType]:
    ints = dict.fromkeys(("bytes", "trial", "trials", "burst", "iterations"), pl.Int64())
    return {**ints, **dict.fromkeys(PARAMETERS, pl.Float64()), "valid": pl.Boolean()}


def parse_loggp_output(text: str, source: str | Path = "<string>") -> pl.DataFrame:
    """The loggp kernel's stdout as :func:`loggp_trials` rows (``source``: the file, for messages)."""
    frames = parse_kernel_output(text, source)
    if "loggp" not in frames:
        raise LoggpParseError(f"{source}: no loggp records (kernels in it: {', '.join(frames) or 'none'})")
    return loggp_trials(frames["loggp"], str(source))
