"""Open MPI: the decision as a ``coll_tuned`` dynamic rules file.

Loaded with ``--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename FILE``.
The classic numeric format of ``ompi_coll_tuned_read_rules_config_file``, which Debian's 4.1.4 and
the PyPI 5.0.x both parse (5.0 also accepts an optional ``rule-file-version-N`` first line, 4.1 then
falls back to its fixed rules: so none is written)::

    <number of collectives>
    <collective id>                      (COLLTYPE: allgather 0, allreduce 2, alltoall 3, barrier 6, bcast 7, reduce 11)
    <number of communicator sizes>
    <comm size> <number of message sizes>
    <message size> <algorithm id> <fan in/out> <segment size>    (first message size 0)

A rule holds from its communicator / message size up to the next rule's; the first communicator
rule also holds below its size, so a default rule at size 0 leads. Algorithm 0 falls back to the
fixed decision, i.e. the stack's default. ``#`` starts a comment.

The message size looked up is the datatype size times the count, times the communicator size for
allgather and alltoall (checked on both installed versions with an LD_PRELOAD probe naming the
coll/base function called: 1000 B per rank on 2 ranks hits a rule at 1500 B). IMB's sizes are per
rank, so those thresholds are scaled by P, and each measured P gets its own communicator rule.
"""

from __future__ import annotations

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.stacks import collectives
from mpiatlas.stacks.base import StackError
from mpiatlas.tuning.decide import Block, SeriesDecision, TuneError

# ompi/mca/coll/base/coll_base_functions.h, enum COLLTYPE (the same in 4.1 and 5.0).
COLL_IDS: dict[str, int] = {
    "allgather": 0, "allgatherv": 1, "allreduce": 2, "alltoall": 3, "alltoallv": 4, "alltoallw": 5,
    "barrier": 6, "bcast": 7, "exscan": 8, "gather": 9, "gatherv": 10, "reduce": 11,
    "reduce_scatter": 12, "reduce_scatter_block": 13, "scan": 14, "scatter": 15, "scatterv": 16,
}
# Collectives whose lookup size is known per IMB size: count x type size, x P for these two.
TIMES_P = frozenset({"allgather", "alltoall"})
SUPPORTED = frozenset({"allreduce", "bcast", "reduce", "barrier"}) | TIMES_P
# A forced algorithm runs with coll_tuned's chain fanout (ompi_coll_tuned_*_intra_dec_dynamic passes
# user_forced[...].chain_fanout, whose default is ompi_coll_tuned_init_chain_fanout = 4), a file rule with the
# rule's own fan in/out. Only the chain algorithms read it, and a chain of fanout 0 is raised to 1 (the
# pipeline: coll_base_topo.c), so a chain rule written with 0 would run another algorithm than the one measured.
FORCED_CHAIN_FANOUT = 4

Rule = tuple[int, int, str]  # (size, algorithm id, name for the comment)


def algorithm_id(series: SeriesDecision, name: str) -> int:
    """The coll_tuned id of ``name`` from the same tables the campaign forced it with."""
    if name == DEFAULT:
        return 0
    try:
        return int(collectives.resolve("openmpi", series.version, series.collective, name))
    except StackError as exc:
        raise TuneError(f"{series.stack}/{series.transport}/{series.benchmark}: {exc}") from exc


def _msg_rules(series: SeriesDecision, block: Block, scale: int) -> list[Rule]:
    """Message size rules of one communicator rule: each range from its lower end, default after."""
    rules: list[Rule] = [(0, 0, DEFAULT)]
    for r in block.ranges:
        rules.append((r.lo * scale, algorithm_id(series, r.algorithm), r.algorithm))
        rules.append(((r.hi + 1) * scale, 0, DEFAULT))
    return _merged(rules)


def _merged(rules: list[Rule]) -> list[Rule]:
    """Later rules at the same size win; a rule equal to the one before it is dropped."""
    by_size: dict[int, Rule] = {}
    for rule in rules:
        by_size[rule[0]] = rule
    out: list[Rule] = []
    for size in sorted(by_size):
        if not out or out[-1][1:] != by_size[size][1:]:
            out.append(by_size[size])
    return out


def comm_rules(series: SeriesDecision) -> list[tuple[int, list[Rule]]]:
    """(comm size, message rules) for one collective, default below, between and above the blocks."""
    default: list[Rule] = [(0, 0, DEFAULT)]
    out: list[tuple[int, list[Rule]]] = [(0, default)]
    for block in series.blocks:
        if series.collective in TIMES_P:
            # One rule per measured P: the thresholds are scaled by that P.
            for p in block.nps:
                out.append((p, _msg_rules(series, block, p)))
        else:
            out.append((block.p_lo, _msg_rules(series, block, 1)))
        out.append((block.p_hi + 1, default))
    merged: dict[int, list[Rule]] = {}
    for size, rules in out:
        merged[size] = rules
    result: list[tuple[int, list[Rule]]] = []
    for size in sorted(merged):
        if not result or result[-1][1] != merged[size]:
            result.append((size, merged[size]))
    return result


def rules_text(series_list: list[SeriesDecision]) -> str:
    """The rules file for the collectives of one stack x transport (only those with a tuned range)."""
    tuned = [s for s in series_list if s.tuned]
    for s in tuned:
        if s.collective not in SUPPORTED:
            raise TuneError(f"{s.stack}/{s.transport}: {s.benchmark} is not exported for Open MPI "
                            f"(supported: {', '.join(sorted(SUPPORTED))})")
    tuned.sort(key=lambda s: COLL_IDS[s.collective])
    head = tuned[0] if tuned else None
    lines = [f"# mpiatlas tune: coll_tuned dynamic rules for {head.stack if head else '?'} "
             f"over {head.transport if head else '?'}",
             f"{len(tuned)}  # collectives"]
    for s in tuned:
        rules = comm_rules(s)
        lines += [f"{COLL_IDS[s.collective]}  # {s.collective}", f"{len(rules)}  # communicator sizes"]
        for size, msgs in rules:
            lines.append(f"{size} {len(msgs)}  # from comm size {size}: message sizes")
            lines += [f"{m} {alg} {_fanout(name)} 0  # {name}" for m, alg, name in msgs]
    return "\n".join(lines) + "\n"


def _fanout(algorithm: str) -> int:
    """The fan in/out a rule needs to run ``algorithm`` as it ran when forced."""
    return FORCED_CHAIN_FANOUT if algorithm == "chain" else 0


def mca_args(path: str) -> list[str]:
    """The mpirun arguments that load the file."""
    return ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_dynamic_rules_filename", path]
