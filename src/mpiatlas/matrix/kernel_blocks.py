"""The ``kernels.<name>`` config blocks as typed records (the schema's ``kernels`` properties).

The campaign keeps the kernels block as validated (Campaign.kernels): a kernel registered from elsewhere
brings its own schema, so the campaign cannot name every block's type. Each shipped kernel program reads its
own block (KernelProgram.block, narrowed by each kernel), typed here after the schema that validated it (defaults filled:
keys with a default are always there; ``NotRequired`` marks those without one).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# A triple of positive integers as the config writes it ([X, Y, Z]); matsum dims and jacobi sizes may also be lists of them.
TripleValue = list[int]


class KernelBlock(TypedDict):
    """What every kernel's block has: its timed and warm-up rounds."""

    iterations: int
    warmup: int


class SweepBlock(KernelBlock):
    """The message-size sweep of pingpong, coll and loggp (util.h's KU_SWEEP_LONGOPTS)."""

    msglog: list[int]  # [lo, hi]: sizes 2^lo .. 2^hi
    iterations_large: int
    warmup_large: int
    large_size: int
    time_budget_ms: float
    # stack label -> transports this kernel runs over (else kernels.stacks, else every stack).
    stacks: NotRequired[dict[str, list[str]]]


class PingpongBlock(SweepBlock):
    pass


class LoggpBlock(SweepBlock):
    trials: int
    burst: int


class CollBlock(SweepBlock):
    collectives: list[str]
    forced_algorithms: bool | list[str]
    processes: list[int]


class RingBlock(KernelBlock):
    variants: list[str]
    streams: list[int]
    bytes: list[int]
    processes: list[int]


class MatsumBlock(KernelBlock):
    dims: TripleValue | list[TripleValue]
    procdims: NotRequired[list[list[int]]]
    topo: list[int]
    dist: list[str]
    processes: list[int]


class HybridBlock(TypedDict, total=False):
    processes: list[int]
    threads: list[int]
    cores: list[int]


class JacobiBlock(KernelBlock):
    mode: str | list[str]
    L: NotRequired[int | TripleValue | list[int | TripleValue]]
    N: NotRequired[int | TripleValue | list[int | TripleValue]]
    procdims: NotRequired[list[TripleValue]]
    processes: list[int]
    hybrid: NotRequired[HybridBlock]
    check: bool
