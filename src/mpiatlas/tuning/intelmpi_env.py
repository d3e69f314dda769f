"""Intel MPI: the decision as ``I_MPI_ADJUST_<COLL>`` variables, one env file per stack x transport.

Syntax (Intel MPI Developer Reference, "I_MPI_ADJUST Family"):
``I_MPI_ADJUST_<opname>="<presetid>[:<conditions>][;<presetid>:<conditions>[...]]"``, the
conditions a comma-separated list of ``<l>-<m>@<p>-<q>``: message sizes l..m and process counts
p..q, inclusive. Sizes and counts outside every condition keep the library's own choice (the
default), so only the non-default ranges are written. Preset ids come from the same table the
campaign forced them with (``id3`` -> 3). The message size is per rank (count x type size, the
receive count for allgather), as IMB reports it.

The values hold ``;``, so each is double-quoted: ``set -a; . FILE; set +a`` exports them.
"""

from __future__ import annotations

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.stacks import collectives
from mpiatlas.stacks.base import StackError
from mpiatlas.tuning.decide import SeriesDecision, TuneError

SUPPORTED = frozenset({"allgather", "allreduce", "alltoall", "barrier", "bcast", "gather", "reduce", "scatter"})


def preset_id(series: SeriesDecision, name: str) -> int:
    try:
        return int(collectives.resolve("intelmpi", series.version, series.collective, name))
    except StackError as exc:
        raise TuneError(f"{series.stack}/{series.transport}/{series.benchmark}: {exc}") from exc


def adjust_value(series: SeriesDecision) -> str:
    """``3:1024-65535@2-7,...;5:...`` for one collective (presets in order of first use)."""
    conditions: dict[int, list[str]] = {}
    for block in series.blocks:
        for r in block.ranges:
            if r.algorithm != DEFAULT:
                conditions.setdefault(preset_id(series, r.algorithm), []).append(
                    f"{r.lo}-{r.hi}@{block.p_lo}-{block.p_hi}")
    return ";".join(f"{ident}:{','.join(conds)}" for ident, conds in conditions.items())


def env_text(series_list: list[SeriesDecision]) -> str:
    tuned = sorted((s for s in series_list if s.tuned), key=lambda s: s.collective)
    lines = ["# mpiatlas tune: Intel MPI collective presets; load with: set -a; . THIS_FILE; set +a"]
    for s in tuned:
        if s.collective not in SUPPORTED:
            raise TuneError(f"{s.stack}/{s.transport}: {s.benchmark} is not exported for Intel MPI "
                            f"(supported: {', '.join(sorted(SUPPORTED))})")
        lines.append(f'I_MPI_ADJUST_{s.collective.upper()}="{adjust_value(s)}"')
    return "\n".join(lines) + "\n"


def env_vars(series_list: list[SeriesDecision]) -> dict[str, str]:
    """The same as a mapping (for a launch environment)."""
    return {f"I_MPI_ADJUST_{s.collective.upper()}": adjust_value(s) for s in series_list if s.tuned}
