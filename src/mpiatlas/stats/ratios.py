"""Per matched cell and size, the ratio B/A of medians of two sample sets, its bootstrap CI and verdict.

Used by the campaign comparison (:mod:`mpiatlas.compare.campaigns`), the tuning decisions and the report.

Statistics. Per matched key the repetitions of each side are its samples (one row per repetition
in a campaign; one per run in imported logs). The ratio is median(B) / median(A); its 95 % CI is a
percentile bootstrap that resamples the repetitions of A and of B independently (999 resamples,
seeded), vectorised as :mod:`mpiatlas.stats.aggregate` does it: groups with the same (n_A, n_B) share
one seeded set of index rows, and the median of a resample of sorted values is a gather at the
middle positions of the sorted index row.

A size is *significant* when the CI excludes 1, and only judged with at least
:data:`MIN_REPS` repetitions per side. Why: with n = 3 the percentile bootstrap cannot produce an
interval wider than [min B / max A, max B / min A], so it "excludes 1" whenever the samples do not
overlap, which happens 10 % of the time for identical distributions (2 / C(6, 3)); no
distribution-free 95 % statement exists for 3 vs 3. Simulated false-positive rates of this CI for
identical lognormal samples (4000 sizes): n = 3: 9.7 %, 4: 8.3 %, 5: 2.8 %, 6: 3.7 %, 10: 3.6 %.

Several runs per side. The repetitions of one run do not carry the run-to-run variation of a
shared machine (a whole campaign shifts by ~20 % at small sizes now and then), so with one run
per side two identical campaigns were flagged at 0-97 % of sizes on a 2-vCPU VM. A side may
therefore be several results directories of the same campaign (its *runs*); with at least two
runs on each side the CI is the two-level bootstrap of :mod:`mpiatlas.stats.two_level` (runs, then
repetitions within each drawn run), widened for few runs, and judged with at least
:data:`MIN_RUNS` runs and :data:`MIN_REPS` repetitions in all per side. With one run on a side
the one-level CI above is used, and the summary says run-to-run variation is not in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import polars as pl

from mpiatlas.stats.aggregate import CONFIDENCE, N_RESAMPLES, SEED
from mpiatlas.stats.two_level import two_level_cis

MIN_REPS = 5
MIN_RUNS = 2
TIME = "t_usec"
# Groups per bootstrap chunk: bounds the (groups x resamples) float arrays to ~16 MB each.
CHUNK = 2048

SLOWER, FASTER, SAME, TOO_FEW = "slower", "faster", "no significant change", "too few repetitions"
TOO_FEW_RUNS = "too few runs"
NOT_JUDGED = (TOO_FEW, TOO_FEW_RUNS)


def grouped_times(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per key: the sorted finite times (``t``) of its repetitions (all runs pooled), their
    number and median, the number of runs with data and the times per run (``t_runs``)."""
    per_run = df.group_by([*keys, "run"]).agg(pl.col(TIME).sort().alias("t_run"))
    runs = per_run.group_by(keys).agg(pl.col("t_run").sort_by("run").alias("t_runs"),
                                      pl.len().cast(pl.Int32).alias("runs"))
    pooled = df.group_by(keys).agg(pl.col(TIME).sort().alias("t"), pl.len().cast(pl.Int32).alias("n"),
                                   pl.col(TIME).median().alias("median"))
    return pooled.join(runs, on=keys, how="left", nulls_equal=True)


# -- the bootstrap ratio -------------------------------------------------------------------------


def _middle_positions(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per resample of ``n`` values, the positions (in the sorted values) its median is the mean of."""
    drawn = np.sort(rng.integers(0, n, (N_RESAMPLES, n)), axis=1)
    return drawn[:, (n - 1) // 2], drawn[:, n // 2]


def ratio_cis(a: list[np.ndarray], b: list[np.ndarray], *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap CI of median(b_i) / median(a_i) for each pair of sorted sample arrays.

    The repetitions of each side are resampled independently. Pairs with the same sizes share one
    index draw seeded by (seed, n_a, n_b): results do not depend on which other pairs are present.
    NaN where a side has fewer than two samples (nothing to resample).
    """
    na = np.array([x.size for x in a], dtype=np.int64)
    nb = np.array([x.size for x in b], dtype=np.int64)
    low, high = np.full(na.size, np.nan), np.full(na.size, np.nan)
    alpha = (1 - CONFIDENCE) / 2
    for n_a, n_b in sorted(set(zip(na.tolist(), nb.tolist()))):
        if n_a < 2 or n_b < 2:
            continue
        rng = np.random.default_rng([seed, n_a, n_b])
        pa, pb = _middle_positions(n_a, rng), _middle_positions(n_b, rng)
        members = np.flatnonzero((na == n_a) & (nb == n_b))
        for start in range(0, members.size, CHUNK):
            idx = members[start:start + CHUNK]
            va = np.stack([a[i] for i in idx])  # (groups, n_a), rows ascending
            vb = np.stack([b[i] for i in idx])
            med_a = (va[:, pa[0]] + va[:, pa[1]]) / 2  # (groups, resamples)
            med_b = (vb[:, pb[0]] + vb[:, pb[1]]) / 2
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.quantile(med_b / med_a, [alpha, 1 - alpha], axis=1)
            low[idx], high[idx] = q[0], q[1]
    return low, high


def verdicts(n_a: np.ndarray, n_b: np.ndarray, low: np.ndarray, high: np.ndarray,
             runs: tuple[np.ndarray, np.ndarray] | None = None) -> list[str]:
    """Per size: slower/faster/no change, or why it is not judged. ``runs`` (runs with data per
    side) only in the several-runs comparison, where fewer than :data:`MIN_RUNS` is not judged."""
    out: list[str] = []
    ra, rb = runs if runs is not None else (np.full(len(n_a), MIN_RUNS), np.full(len(n_a), MIN_RUNS))
    for na, nb, lo, hi, r_a, r_b in zip(n_a, n_b, low, high, ra, rb):
        if min(r_a, r_b) < MIN_RUNS:
            out.append(TOO_FEW_RUNS)
        elif min(na, nb) < MIN_REPS or not (np.isfinite(lo) and np.isfinite(hi)):
            out.append(TOO_FEW)
        elif lo > 1:
            out.append(SLOWER)
        elif hi < 1:
            out.append(FASTER)
        else:
            out.append(SAME)
    return out


def _arrays(lists: pl.Series) -> list[np.ndarray]:
    """A list column as numpy arrays, split from one flat array (no per-row Python conversion)."""
    flat = lists.explode().to_numpy().astype(float)
    ends = np.cumsum(lists.list.len().to_numpy())
    return np.split(flat, ends[:-1]) if len(ends) else []


def _run_arrays(lists: pl.Series) -> list[list[np.ndarray]]:
    """A list-of-lists column (times per run) as lists of numpy arrays."""
    return [[np.asarray(r, dtype=float) for r in row] for row in lists.to_list()]


def size_table(ga: pl.DataFrame, gb: pl.DataFrame, keys: list[str], *, seed: int = SEED,
               two_level: bool = False) -> pl.DataFrame:
    """Matched keys of two :func:`grouped_times` frames: n, runs, medians, ratio B/A, its CI, verdict.

    ``two_level``: the sides are several runs each; the CI resamples runs, then repetitions."""
    joined = ga.join(gb, on=keys, how="inner", suffix="_b", nulls_equal=True).sort(keys)
    if two_level:
        ratio = (joined["median_b"] / joined["median"]).to_numpy()
        low, high = two_level_cis(_run_arrays(joined["t_runs"]), _run_arrays(joined["t_runs_b"]), ratio, seed=seed)
        runs = (joined["runs"].to_numpy(), joined["runs_b"].to_numpy())
    else:
        ta, tb = (_arrays(joined.get_column(c)) for c in ("t", "t_b"))
        low, high = ratio_cis(ta, tb, seed=seed)
        runs = None
    verdict = verdicts(joined["n"].to_numpy(), joined["n_b"].to_numpy(), low, high, runs)
    return joined.select(
        *keys, pl.col("n").alias("n_a"), "n_b", pl.col("runs").alias("runs_a"), "runs_b",
        pl.col("median").alias("median_a_usec"),
        pl.col("median_b").alias("median_b_usec"), (pl.col("median_b") / pl.col("median")).alias("ratio"),
    ).with_columns(
        pl.Series("ratio_ci_low", low), pl.Series("ratio_ci_high", high),
        pl.Series("verdict", verdict, dtype=pl.String),
        pl.Series("significant", [v in (SLOWER, FASTER) for v in verdict], dtype=pl.Boolean),
    )


@dataclass(frozen=True)
class RatioRow:
    """The comparison figures of one :func:`size_table` row (side A against side B at one key):
    repetitions per side, the ratio B/A of the medians, its 95 % CI and the verdict. A CI bound the
    table holds as null is NaN here."""

    n_a: int
    n_b: int
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    verdict: str


RATIO_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RatioRow))


def _figure(value: float | None) -> float:
    return math.nan if value is None else float(value)


def ratio_rows(table: pl.DataFrame) -> list[RatioRow | None]:
    """Each row's :class:`RatioRow` (``table``: a :func:`size_table`, possibly left-joined to other
    keys); None where the row has no comparison (no repetitions of side A)."""
    return [None if n_a is None else RatioRow(int(n_a), int(n_b or 0), _figure(ratio), _figure(low), _figure(high),
                                              str(verdict))
            for n_a, n_b, ratio, low, high, verdict in table.select(RATIO_FIELDS).iter_rows()]


def regressions(sizes: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """Sizes significantly slower by more than ``threshold`` (0.05 = 5 %): the CI's lower end above 1 + threshold."""
    return sizes.filter((pl.col("verdict") == SLOWER) & (pl.col("ratio_ci_low") > 1 + threshold))

