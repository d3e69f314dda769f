"""Model-guided tuning: decisions for (np, bytes) never measured, the stack's file and tuning.md.

``mpiatlas tune MEASURED --np ... --bytes ...``: the measurements (a CSV ``collective, algorithm,
np, bytes, latency_us`` or a campaign's results) train :class:`.extrapolate.Predictor` with the
target placement's structure; every target (np, bytes) gets the algorithm :func:`.extrapolate.choose`
picks (the default unless a forced algorithm is faster with confidence), written to
``decisions.csv``, to the stack's tuning file over those ranges (a target P or size stands for the
values up to the next one, as in :mod:`.decide`) and to ``tuning.md``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.models.loggp_fit import MeasuredError, read_measured
from mpiatlas.models.region_latency import RegionTable, place, read_region_table
from mpiatlas.node.topology import REGIONS, Topology
from mpiatlas.tuning import samples
from mpiatlas.tuning.decide import Point, SeriesDecision, TuneError, blocks, numeric_version
from mpiatlas.tuning.extrapolate import KEYS, LEVEL, Predictor, Structure, choose, measured_frame

DECISION_COLUMNS = ("collective", "np", "bytes", "algorithm", "predicted_us", "predicted_lo_us", "predicted_hi_us",
                    "measured")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)(?:([:*])(\d+))?$")
# Without a region table the structure keeps its shape (tree depths, P - 1 sends) at one latency everywhere.
SHAPE_ONLY_US = 1.0


def parse_counts(values: list[str], what: str) -> list[int]:
    """``32 64``, ``2..256`` (every integer), ``16..256:16`` (step 16), ``2..262144*2`` (times 2)."""
    out: set[int] = set()
    for text in values:
        for item in text.replace(",", " ").split():
            if item.isdigit():
                out.add(int(item))
                continue
            m = _RANGE.match(item)
            if not m or int(m.group(1)) > int(m.group(2)) or (m.group(4) is not None and int(m.group(4)) < (
                    2 if m.group(3) == "*" else 1)) or (m.group(3) == "*" and int(m.group(1)) < 1):
                raise TuneError(f"--{what}: {item!r} is not a count or a range (N, A..B, A..B:STEP, A..B*FACTOR)")
            lo, hi, op, k = int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4) or 1)
            v = lo
            while v <= hi:
                out.add(v)
                v = v * k if op == "*" else v + k
    if not out:
        raise TuneError(f"--{what}: no value given")
    return sorted(out)


def load_measured(path: Path) -> pl.DataFrame:
    """One row per (collective, algorithm, np, bytes) with the median ``latency_us``."""
    if path.is_file():
        try:
            return measured_frame(read_measured(path))
        except MeasuredError as exc:
            raise TuneError(str(exc)) from exc
    try:
        rows = samples.load(path)
    except samples.SamplesError as exc:
        raise TuneError(str(exc)) from exc
    frame = rows.filter(pl.col("t_usec").is_finite() & (pl.col("t_usec") > 0)).select(
        pl.col("benchmark").str.to_lowercase().alias("collective"), "algorithm", "np", "bytes",
        pl.col("t_usec").alias("latency_us"))
    return frame.group_by(list(KEYS)).agg(pl.col("latency_us").median()).sort(list(KEYS))


def campaign_placement(path: Path) -> tuple[str | None, int | None]:
    """(mapping, nodes) of a campaign's samples when they hold one value each."""
    if path.is_file():
        return None, None
    rows = samples.load(path)
    mapping = rows["mapping"].unique().to_list() if "mapping" in rows.columns else []
    nodes = rows["nodes"].unique().to_list() if "nodes" in rows.columns else []
    return (str(mapping[0]) if len(mapping) == 1 else None), (int(nodes[0]) if len(nodes) == 1 and nodes[0] else None)


def region_table(path: Path | None) -> tuple[RegionTable, str]:
    """The per-region latencies, and a sentence on where they come from."""
    if path is not None:
        try:
            return read_region_table(path), f"region latencies from `{path}`"
        except ValueError as exc:
            raise TuneError(str(exc)) from exc
    table = RegionTable(dict.fromkeys(REGIONS, SHAPE_ONLY_US), source="shape only")
    return table, ("no region table (--regions): the structure keeps each algorithm's shape at one latency "
                   "for every region, the measurements set the scale")


@dataclass(frozen=True)
class Target:
    topology: Topology
    description: str  # the --topology text, or where it was read from
    nodes: int
    mapping: str
    nps: list[int]
    sizes: list[int]


def decisions(measured: pl.DataFrame, target: Target, table: RegionTable) -> tuple[pl.DataFrame, Predictor]:
    """Per collective x target (np, bytes): the choice, its prediction and interval, and whether measured."""
    if DEFAULT not in set(measured["algorithm"]):
        raise TuneError("no measurements of algorithm 'default': it is the baseline every choice is judged against")
    top = max(target.nps + measured["np"].to_list())
    try:
        full = place(target.topology, top, nodes=target.nodes, mapping=target.mapping)
    except ValueError as exc:
        raise TuneError(f"--topology/--nodes/--mapping: {exc}") from exc
    predictor = Predictor(mpi=True, structure=Structure(full, table)).fit(measured)
    chosen = choose(predictor.predict(grid(measured, target)))
    seen = measured.select(*KEYS).with_columns(pl.lit(True).alias("measured"))
    chosen = chosen.join(seen, on=list(KEYS), how="left").with_columns(pl.col("measured").fill_null(False))
    return chosen, predictor


def grid(measured: pl.DataFrame, target: Target) -> pl.DataFrame:
    """Every measured (collective, algorithm) at every target (np, bytes): the cells to predict."""
    points = pl.DataFrame({"np": target.nps}).join(pl.DataFrame({"bytes": target.sizes}), how="cross")
    algs = measured.select("collective", "algorithm").unique()
    return points.join(algs, how="cross").select(*KEYS).sort(list(KEYS))


def series(chosen: pl.DataFrame, stack: str) -> list[SeriesDecision]:
    """The decisions as :class:`.decide.SeriesDecision` per collective, for the existing file writers."""
    kind = stack.split("-")[0].lower()
    out = []
    for (coll,), part in chosen.group_by(["collective"], maintain_order=True):
        pts = [Point(np=r["np"], bytes=r["bytes"], algorithm=r["algorithm"], candidate=r["candidate"],
                     ratio=r["ratio"], ci_low=None, ci_high=r["ratio_hi"], n_default=0, n_candidate=0,
                     reason=r["reason"]) for r in part.iter_rows(named=True)]
        name = str(coll)
        out.append(SeriesDecision(stack, kind, numeric_version(stack), "target", name, name.capitalize(), pts,
                                  blocks(pts), source="model"))
    return sorted(out, key=lambda s: s.collective)


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def markdown(chosen: pl.DataFrame, predictor: Predictor, source: Path, target: Target, table_note: str,
             files: list[str], usage: str) -> str:
    """tuning.md: the model, then per collective each chosen range with its gain and bound, and why the
    default stayed elsewhere."""
    params = predictor.structure.params if predictor.structure else {}
    fitted = "; ".join(f"{c}: o = {p.overhead_us:.3g} µs, g = {p.gap_us:.3g} µs, h = {p.level_us:.3g} µs"
                       for c, p in params.items()) or "none (the latency-only rules)"
    lines = ["# Collective tuning for unmeasured process counts and sizes", "",
             f"From `{source}`, for {target.nodes} node(s) of `{target.description}` "
             f"under mapping `{target.mapping}`: P {target.nps[0]}..{target.nps[-1]} ({len(target.nps)} values), "
             f"{_size(target.sizes[0])}..{_size(target.sizes[-1])} ({len(target.sizes)} sizes).", "",
             "How each time is predicted: the project's collective models over this placement "
             f"({table_note}; LogGP scalars calibrated on the measurements: {fitted}; Open MPI's default Bcast "
             "resolved to the algorithm its fixed decision runs), scaled by the measured/modelled ratio at the nearest "
             "measured P, times a random-forest correction learned on the measurements. The interval "
             f"({LEVEL:.0%}) comes from predicting, inside the measurements, larger P from smaller ones.", "",
             "How each choice is made: a forced algorithm replaces the default only where the upper end of the "
             f"{LEVEL:.0%} interval of its time / the default's (paired at the same point) lies below 1. "
             "Elsewhere the default stays. Every point with its prediction is in `decisions.csv`.", ""]
    if usage:
        lines += [f"Load it: {usage}", ""]
    for (coll,), part in chosen.group_by(["collective"], maintain_order=True):
        forced = part.filter(pl.col("algorithm") != DEFAULT)
        lines += [f"## {coll}", "",
                  f"{part.height} points: {forced.height} forced, {part.height - forced.height} default; "
                  f"{int(part['measured'].sum())} of the chosen (algorithm, P, size) were measured.", ""]
        if forced.height:
            lines += ["| P | size | algorithm | predicted gain | gain at least | predicted µs [interval] |",
                      "|---|---|---|---|---|---|"]
            for r in forced.sort("np", "bytes").iter_rows(named=True):
                lines.append(f"| {r['np']} | {_size(r['bytes'])} | {r['algorithm']} | {1 - r['ratio']:.1%} | "
                             f"{1 - r['ratio_hi']:.1%} | {r['predicted_us']:.3g} [{r['predicted_lo_us']:.3g}, "
                             f"{r['predicted_hi_us']:.3g}] |")
            lines.append("")
        kept = Counter(_why_kept(r) for r in part.filter(pl.col("algorithm") == DEFAULT).iter_rows(named=True))
        if kept:
            lines.append("Default kept at " + "; ".join(f"{n} point(s): {why}" for why, n in kept.most_common()) + ".")
            lines.append("")
    if files:
        lines += [f"Exported in: {', '.join(f'`{n}`' for n in files)}", ""]
    return "\n".join(lines).rstrip() + "\n"


def _why_kept(row: dict[str, object]) -> str:
    if row["predicted_hi_us"] == float("inf"):
        return ("no interval: the measurements hold too few process counts to check an extrapolation on, so no "
                "choice is sure")
    if row["candidate"] == DEFAULT:
        return "the default is predicted fastest"
    return f"{row['candidate']} predicted faster, but not with {LEVEL:.0%} confidence"


def write(chosen: pl.DataFrame, out: Path) -> None:
    chosen.select(DECISION_COLUMNS).write_csv(out / "decisions.csv", float_precision=4)
