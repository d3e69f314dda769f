"""Where the library's default runs one of the forced algorithms: the same code, one offset apart.

Open MPI's default Bcast is not an algorithm of its own: its fixed decision
(:mod:`mpiatlas.models.ompi_decision`) runs one of the algorithms a campaign also forces, chosen by P and
size (e.g. binary_tree for 128 <= P < 256 and 2 B <= size < 16 KiB in 4.1). At such a point the default
and that forced algorithm execute the same code, so their times differ only by the decision's own cost
and by run-to-run noise, not by anything a model of the algorithm could tell apart. Predicting the two
separately (each scaled by its own measured/model ratio at the nearest measured P, where the default may
have run another algorithm) invents a gap between identical code: on the ORFEO core Bcast it predicted
binary_tree 20 % faster than the default that runs binary_tree.

The offset of one from the other is measured, not assumed: per forced algorithm X, the median over the
training points where the default ran X of log(t_default / t_X) (0 where there is none: same code,
same time). The predictor then gives the default, where it runs X, X's prediction times that offset.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from mpiatlas.models.best_algorithm import DEFAULT

# (collective, algorithm, np, bytes) -> the algorithm that runs (the default resolved; others as named).
Resolve = Callable[[str, str, int, int], str]
POINT = ("collective", "np", "bytes")


@dataclass(frozen=True)
class Offset:
    """t_default / t_X where the default ran X: the median log ratio over ``points`` training points."""

    algorithm: str
    points: int
    log_offset: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_offset)


def paired(train: pl.DataFrame, resolve: Resolve) -> pl.DataFrame:
    """Training points where the default ran a forced algorithm that was measured there too:
    POINT, ``runs`` (that algorithm), ``log_ratio`` = log(t_default / t_runs)."""
    default = train.filter(pl.col("algorithm") == DEFAULT)
    if default.height == 0:
        return pl.DataFrame(schema={**{k: train.schema[k] for k in POINT}, "runs": pl.String, "log_ratio": pl.Float64})
    runs = [resolve(r["collective"], DEFAULT, r["np"], r["bytes"]) for r in default.iter_rows(named=True)]
    default = default.with_columns(pl.Series("runs", runs, dtype=pl.String)).filter(pl.col("runs") != DEFAULT)
    forced = train.filter(pl.col("algorithm") != DEFAULT).select(*POINT, pl.col("algorithm").alias("runs"),
                                                                  pl.col("latency_us").alias("forced_us"))
    both = default.join(forced, on=[*POINT, "runs"])
    return both.select(*POINT, "runs", (pl.col("latency_us") / pl.col("forced_us")).log().alias("log_ratio"))


def offsets(train: pl.DataFrame, resolve: Resolve) -> dict[str, Offset]:
    """Per forced algorithm of ``train``: the default's offset from it where the default ran it (0 if never)."""
    pairs = paired(train, resolve)
    out = {}
    for alg in sorted(set(train["algorithm"]) - {DEFAULT}):
        logs = pairs.filter(pl.col("runs") == alg)["log_ratio"].to_numpy()
        out[alg] = Offset(alg, int(logs.size), float(np.median(logs)) if logs.size else 0.0)
    return out
