"""The two-level (hierarchical) bootstrap of a ratio of medians, for several runs per side.

Why two levels. The repetitions of one campaign run share that run's conditions (the VM's
neighbours, its clock, where the kernel put the pages): on a shared machine a whole campaign now
and then shifts by ~20 % at small sizes. A CI built from the repetitions of *one* run per side
does not contain that run-to-run variation, so two identical campaigns differ "significantly"
far more often than 5 % of the time. Replicating at the run level and resampling runs first,
then repetitions within each drawn run, puts it in (Kalibera & Jones, "Rigorous benchmarking in
reasonable time", ISMM 2013; Davison & Hinkley 1997, section 3.8: resample the top level with
replacement, the lower one within each drawn unit).

One resample of a side with runs of sizes (n_1 … n_R): draw R runs with replacement; from each
drawn run j draw n_j of its repetitions with replacement; pool them; take the median. The ratio
is median(B) / median(A) of independent resamples of the two sides; the CI is its percentile
interval.

Vectorised without sorting a resample: a resample is a multiset of *positions* of the side's
flat (run-major) values, so it is fully described by how often each position was drawn, which
does not depend on the values. Groups (matched sizes) whose runs have the same sizes share one
seeded (resamples x positions) count matrix. For a group, reorder the counts by the rank of
their values (a gather with the group's argsort), take the cumulative sum, and the median's rank
is the first position whose cumulative count passes the middle: a gather, a cumsum and a
comparison over ~15-40 positions instead of a sort of every resample. Pooled sizes stay below
2^15 (int16 counts): 3 runs x 10^4 repetitions would be refused by :func:`draw_counts`.
"""

from __future__ import annotations

import numpy as np

from mpiatlas.stats.aggregate import CONFIDENCE, N_RESAMPLES, SEED

# Bound on the (groups x positions x resamples) counts of one chunk: ~2 M cells (4 MB of int16),
# small enough to stay in cache-friendly sizes (larger chunks were slower, not faster).
CHUNK_CELLS = 2_000_000

Runs = list[np.ndarray]  # one side of one group: the finite repetition times of each run


def shape_of(runs: Runs) -> tuple[int, ...]:
    """The run sizes in canonical order (descending): runs are exchangeable, their order is not data."""
    return tuple(sorted((r.size for r in runs if r.size), reverse=True))


def canonical(runs: Runs) -> Runs:
    """The non-empty runs ordered as :func:`shape_of` lists their sizes (stable for equal sizes)."""
    return sorted((r for r in runs if r.size), key=lambda r: -r.size)


def draw_counts(shape: tuple[int, ...], rng: np.random.Generator,
                n_resamples: int = N_RESAMPLES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-level resamples of a side with run sizes ``shape``.

    Returns ``runs`` (resamples x R, the drawn run per slot), ``picks`` (resamples x R x max n:
    the flat position drawn at each place of each slot, ``-1`` past that run's size) and
    ``counts`` (resamples x N: how often each flat position was drawn). ``runs`` and ``picks``
    are what a plain loop needs to rebuild the pooled resample; ``counts`` is what the
    vectorised median uses.
    """
    sizes = np.asarray(shape, dtype=np.int64)
    if sizes.size * sizes.max() >= 1 << 15:
        raise ValueError(f"runs of sizes {shape}: a two-level resample would pool 2^15 or more repetitions")
    n_runs, widest, total = sizes.size, int(sizes.max()), int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    runs = rng.integers(0, n_runs, (n_resamples, n_runs))
    u = rng.random((n_resamples, n_runs, widest))
    n_drawn = sizes[runs][:, :, None]  # (resamples, R, 1): the size of the run drawn in each slot
    inside = np.arange(widest)[None, None, :] < n_drawn
    picks = np.where(inside, offsets[runs][:, :, None] + np.minimum((u * n_drawn).astype(np.int64), n_drawn - 1), -1)
    counts = np.zeros((n_resamples, total + 1), dtype=np.int32)
    rows = np.broadcast_to(np.arange(n_resamples)[:, None, None], picks.shape)
    np.add.at(counts, (rows, np.where(picks >= 0, picks, total)), 1)
    return runs, picks, counts[:, :total]


def pooled_medians(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Median of each resample (``counts`` rows) of each group (``values`` rows, flat run-major).

    values: (groups, N); counts: (resamples, N). Returns (resamples, groups). The loop runs over
    the N positions (15-40), each step over (groups x resamples) small integers: a whole-array
    cumsum and comparison were 4-5x slower (int64 temporaries of groups x resamples x N).
    """
    order = np.argsort(values, axis=1, kind="stable")  # (G, N)
    ranked = np.take_along_axis(values, order, axis=1)
    size = counts.sum(axis=1)  # (B,): the pooled size of each resample
    lo, hi = ((size - 1) // 2).astype(np.int16), (size // 2).astype(np.int16)
    by_rank = np.ascontiguousarray(counts.T.astype(np.int16))[order]  # (G, N, B): counts in value order
    drawn = np.zeros((values.shape[0], counts.shape[0]), np.int16)  # drawn so far, in value order
    k_lo, k_hi = np.zeros_like(drawn), np.zeros_like(drawn)
    for n in range(values.shape[1]):
        drawn += by_rank[:, n, :]
        # The value at pooled rank k is the first ranked position whose cumulative count exceeds k.
        k_lo += drawn <= lo
        k_hi += drawn <= hi
    rows = np.arange(values.shape[0])[:, None]
    medians: np.ndarray = ((ranked[rows, k_lo] + ranked[rows, k_hi]) / 2).T
    return medians


def _flat(group: Runs) -> np.ndarray:
    return np.concatenate(canonical(group))


def two_level_percentiles(a: list[Runs], b: list[Runs], *, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Plain percentile CI of median(B) / median(A) per group, resampling runs, then repetitions in them.

    ``a[i]`` and ``b[i]`` are the runs of group i on each side (arrays of finite times; empty runs
    are ignored). Groups whose sides have the same run sizes share one draw seeded by (seed,
    shapes): a group's CI does not depend on which other groups are present. NaN where a side
    has fewer than two runs (use the one-level :func:`mpiatlas.stats.ratios.ratio_cis` there).
    """
    shapes = [(shape_of(x), shape_of(y)) for x, y in zip(a, b)]
    low, high = np.full(len(shapes), np.nan), np.full(len(shapes), np.nan)
    alpha = (1 - CONFIDENCE) / 2
    by_shape: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for i, s in enumerate(shapes):
        if len(s[0]) >= 2 and len(s[1]) >= 2:
            by_shape.setdefault(s, []).append(i)
    for (sa, sb), members in sorted(by_shape.items()):
        rng = np.random.default_rng([seed, len(sa), *sa, len(sb), *sb])
        ca, cb = draw_counts(sa, rng)[2], draw_counts(sb, rng)[2]
        step = max(1, CHUNK_CELLS // (N_RESAMPLES * max(sum(sa), sum(sb))))
        for start in range(0, len(members), step):
            idx = members[start:start + step]
            med_a = pooled_medians(np.stack([_flat(a[i]) for i in idx]), ca)
            med_b = pooled_medians(np.stack([_flat(b[i]) for i in idx]), cb)
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.quantile(med_b / med_a, [alpha, 1 - alpha], axis=0)
            low[idx], high[idx] = q[0], q[1]
    return low, high


def expansion(runs_a: np.ndarray, runs_b: np.ndarray) -> np.ndarray:
    """How much wider than the plain percentile interval the few-runs CI is, per group (>= 1).

    With R runs per side the run level has R samples, and the percentile bootstrap is too narrow
    for small R twice over: the bootstrap spread is the plug-in one (variance x (R-1)/R) and its
    quantiles are normal-like where a t with few degrees of freedom belongs (Hesterberg, "What
    teachers should know about the bootstrap", 2015: the expanded percentile interval). So the
    log-interval is stretched by sqrt(R/(R-1)) * t(0.975, R_a + R_b - 2) / z(0.975), R the
    harmonic mean of R_a and R_b: x1.73 with 3 runs per side, x1.13 with 10. Simulated for
    identical sides (600 sizes, run effect sd 10 %, repetition sd 2 %, 5 repetitions):
    plain percentile flags 13 % (3 runs), 8 % (4), 4 % (5), 5.5 % (8); expanded 4.2 %, 2.2 %,
    1.7 %, 4.2 %. No distribution-free statement does better with 3 runs per side: a rank test
    of 3 against 3 cannot go below p = 0.1.
    """
    from scipy import stats

    ra, rb = np.asarray(runs_a, dtype=float), np.asarray(runs_b, dtype=float)
    out = np.full(ra.size, np.nan)
    ok = (ra >= 2) & (rb >= 2)
    r = 2 / (1 / ra[ok] + 1 / rb[ok])
    z = stats.norm.ppf(1 - (1 - CONFIDENCE) / 2)
    out[ok] = np.sqrt(r / (r - 1)) * stats.t.ppf(1 - (1 - CONFIDENCE) / 2, ra[ok] + rb[ok] - 2) / z
    return out


def two_level_cis(a: list[Runs], b: list[Runs], ratio: np.ndarray, *,
                  seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The CI used for verdicts with several runs per side: :func:`two_level_percentiles`,
    stretched on the log scale about the point estimate ``ratio`` by :func:`expansion` (the
    bootstrap's asymmetry is kept)."""
    low, high = two_level_percentiles(a, b, seed=seed)
    k = expansion(np.array([len(shape_of(x)) for x in a]), np.array([len(shape_of(y)) for y in b]))
    ratio = np.asarray(ratio, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ratio * (low / ratio) ** k, ratio * (high / ratio) ** k
