"""``mpiatlas regions``: a campaign's per-region λ and B, as a table or as ``mpiatlas predict``'s CSV.

Each region's λ (first-segment latency) and B (asymptotic bandwidth) come from the PingPong
Hockney fit of the cells that placed ranks 0 and 1 in that region (the region mappings, or any
mapping whose pair sits in one region; where two mappings measured one region, the lower λ):
:func:`mpiatlas.models.ring_regions.region_pingpong_fits`, the same table the region-aware ring
model prices hops with. The fits are read from RESULTS/fits/hockney.json (or partial/), else
fitted from the tidy samples. One table per stack, transport and knob set (a series).

``--csv [FILE]`` writes one series as ``region,latency_us,bandwidth_MBps``
(:func:`mpiatlas.models.region_latency.format_region_table`), the file ``mpiatlas predict`` and
``mpiatlas fit --regions`` read; the 95 % CIs go in its ``#`` comment lines. Where the campaign ran
loggp kernel cells (tidy/kernel_loggp.parquet) of the series' regions, the table gains LogGP's
``overhead_us,gap_us`` (:mod:`mpiatlas.stats.region_loggp`: medians over trials, their CIs in the
comments); without such cells it is exactly the λ/B table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mpiatlas.models.fits import FitError, FitOptions, fit_all
from mpiatlas.models.fits_files import FitsFileError, read
from mpiatlas.models.region_latency import RegionTable, RegionTableError, format_region_table, with_loggp
from mpiatlas.matrix.layout import CELLS_TABLE, HOCKNEY_FIT, PARTIAL, kernel_table
from mpiatlas.models.ring_regions import pingpong_regions, region_pingpong_fits
from mpiatlas.stats.region_loggp import LoggpRegion, loggp_by_series, region_loggp
from mpiatlas.models.fit_records import HockneyRecord, Interval, hockney_records
from mpiatlas.stats.regions import region_rank
from mpiatlas.commands import COMMAND_HELP

Series = tuple[str, str, str]  # stack, transport, knobs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("regions", description=__doc__,
                              help=COMMAND_HELP["regions"])
    p.add_argument("results", type=Path, metavar="RESULTS",
                   help="a campaign's results directory (results/<name>: tidy/, fits/)")
    p.add_argument("--csv", nargs="?", const="-", default=None, metavar="FILE",
                   help="write one series as mpiatlas predict's region table (to FILE, default stdout)")
    p.add_argument("--series", default=None, metavar="STACK/TRANSPORT[/KNOBS]",
                   help="the series to write with --csv when the campaign has several")
    p.set_defaults(func=run)


class RegionsError(ValueError):
    """The campaign gives no region table for these arguments; the message says why."""


def run(args: argparse.Namespace) -> int:
    try:
        fits = campaign_region_fits(args.results)
        if args.csv is None:
            _print_table(fits, campaign_loggp(args.results))
            return 0
        series = _choose(fits, args.series)
        text = region_csv(series, fits[series], args.results, campaign_loggp(args.results).get(series))
    except (RegionsError, FitError, FitsFileError, RegionTableError) as exc:
        print(f"mpiatlas regions: {exc}", file=sys.stderr)
        return 2
    if args.csv == "-":
        print(text, end="")
    else:
        Path(args.csv).write_text(text)
        print(f"{args.csv}: {len(fits[series])} regions of {_name(series)}")
    return 0


def _dirs(results: Path) -> tuple[Path, Path]:
    """(tidy, fits) of a campaign: the full ones, else the partial ones."""
    for base in (results, results / PARTIAL):
        if (base / "tidy").is_dir():
            return base / "tidy", base / "fits"
    raise RegionsError(f"{results}: no tidy/ (nor {PARTIAL}/tidy/): not a campaign's results directory "
                       "(run the campaign, or mpiatlas tidy, first)")


def campaign_region_fits(results: Path) -> dict[Series, dict[str, HockneyRecord]]:
    """Per series and region, the PingPong Hockney fit that prices the region."""
    tidy, fits_dir = _dirs(Path(results))
    if not (tidy / CELLS_TABLE).is_file():
        raise RegionsError(f"{tidy / CELLS_TABLE}: missing (the cells say which region each PingPong measured)")
    region_of = pingpong_regions(pl.read_parquet(tidy / CELLS_TABLE))
    if not region_of:
        raise RegionsError(f"{tidy / CELLS_TABLE}: no ok PingPong cell recorded a region "
                           "(a campaign with `mappings: [regions]` measures one per region)")
    hockney: list[HockneyRecord]
    if (fits_dir / HOCKNEY_FIT).is_file():
        hockney = hockney_records(read(fits_dir / HOCKNEY_FIT, "hockney"), str(fits_dir / HOCKNEY_FIT))
    else:  # fitted here, as the fit rule would
        hockney = fit_all(tidy, FitOptions(models=("hockney",), hockney_benchmarks=("PingPong",))).hockney or []
    found = region_pingpong_fits(hockney, region_of)
    if not found:
        raise RegionsError(f"{results}: no PingPong Hockney fit of a region's cells "
                           f"(regions measured: {', '.join(sorted({m.region for m in region_of.values()}))})")
    return found


def campaign_loggp(results: Path) -> dict[Series, dict[str, LoggpRegion]]:
    """Per series and region, LogGP's o and g from the campaign's loggp cells ({} without any)."""
    tidy, _ = _dirs(Path(results))
    path = tidy / kernel_table("loggp")
    if not path.is_file():
        return {}
    return loggp_by_series(region_loggp(pl.read_parquet(path)))


def _name(series: Series) -> str:
    return "/".join(series[:2]) + (f"/{series[2]}" if series[2] else "")


def _choose(fits: Mapping[Series, Any], wanted: str | None) -> Series:
    names = {_name(s): s for s in fits}
    if wanted is None:
        if len(names) == 1:
            return next(iter(fits))
        raise RegionsError(f"{len(names)} series have region fits; choose one with --series: {', '.join(sorted(names))}")
    if wanted not in names:
        raise RegionsError(f"--series {wanted}: no region fits; the campaign has {', '.join(sorted(names))}")
    return names[wanted]


def _ci(ci: Interval, unit: str, digits: int) -> str:
    lo, hi = ci
    return f"95 % CI {lo:.{digits}f}–{hi:.{digits}f} {unit}" if lo is not None and hi is not None else "no CI"


def region_csv(series: Series, fits: Mapping[str, HockneyRecord], results: Path,
               loggp: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The series' region table as predict's CSV, each region's CIs and fit in a comment; with
    ``loggp`` (region -> :func:`mpiatlas.stats.region_loggp.region_loggp` row), its o and g too."""
    source = f"mpiatlas regions {results} --series {_name(series)}"
    # region_pingpong_fits keeps only fits with a λ.
    table = RegionTable({r: float(f.latency_us or 0.0) for r, f in fits.items()},
                        {r: bw for r, f in fits.items() if (bw := f.model_bandwidth_MBps)}, source)
    comments = [f"{source}: PingPong Hockney fits, λ (µs) and the model's B (MB/s: its last segment's 1/slope) "
                "per region; B∞ below is the asymptotic bandwidth, s/t at the largest size"]
    comments += [f"{r}: λ {float(f.latency_us or 0.0):.3f} µs ({_ci(f.latency_ci_us, 'µs', 3)}), "
                 f"B∞ {_bw(f)} ({_ci(f.asymptotic_bandwidth_ci_MBps, 'MB/s', 0)}), from {f.label}"
                 for r, f in fits.items()]
    measured = {r: v for r, v in (loggp or {}).items() if r in fits}
    if measured:
        table = with_loggp(table, measured)
        comments.append("overhead_us, gap_us: LogGP o = (o_s + o_r) / 2 and g of the loggp kernel (Kielmann's PRTT), "
                        "median over trials at the size given")
        comments += [f"{r}: o {_og(v, 'overhead')}, g {_og(v, 'gap')} (o_s {_og(v, 'o_s')}, o_r {_og(v, 'o_r')}) "
                     f"at {v['bytes']} B, {v['n_trials']} trials of {v['n_cells']} cell(s)" for r, v in measured.items()]
    return format_region_table(table, comments)


def _og(row: Mapping[str, Any], name: str) -> str:
    """``0.123 µs (95 % CI 0.110–0.131 µs)`` of one LogGP figure of a region_loggp row."""
    lo, hi = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    ci = f"95 % CI {lo:.3f}–{hi:.3f} µs" if lo is not None and hi is not None else "no CI"
    return f"{float(row[f'{name}_us']):.3f} µs ({ci})"


def _bw(fit: HockneyRecord) -> str:
    bw = fit.asymptotic_bandwidth_MBps
    return f"{float(bw):.0f} MB/s" if bw else "no bandwidth (latency-bound fit)"


def _ci_text(v: float | None, ci: Interval, digits: int) -> str:
    lo, hi = ci
    if v is None:
        return "-"
    return f"{float(v):.{digits}f}" + (f" ({lo:.{digits}f}–{hi:.{digits}f})" if lo is not None and hi is not None else "")


def _og_text(row: Mapping[str, Any], name: str) -> str:
    return _ci_text(row[f"{name}_us"], (row[f"{name}_ci_low"], row[f"{name}_ci_high"]), 3)


def _print_table(fits: Mapping[Series, Mapping[str, HockneyRecord]],
                 loggp: Mapping[Series, Mapping[str, Mapping[str, Any]]] | None = None) -> None:
    table = Table(title="Per-region PingPong Hockney fits, 95 % CI (B∞: the asymptotic bandwidth, s/t at the "
                        "largest size)")
    table.add_column("series", no_wrap=True)
    table.add_column("region", no_wrap=True)
    table.add_column("λ µs (CI)", justify="right", no_wrap=True)
    table.add_column("B∞ MB/s (CI)", justify="right", no_wrap=True)
    table.add_column("from", overflow="fold")
    for series in sorted(fits):
        for region in sorted(fits[series], key=region_rank):
            f = fits[series][region]
            table.add_row(escape(_name(series)), region, _ci_text(f.latency_us, f.latency_ci_us, 3),
                          _ci_text(f.asymptotic_bandwidth_MBps, f.asymptotic_bandwidth_ci_MBps, 0), escape(str(f.label)))
    Console().print(table)
    if loggp:  # a table of its own: beside λ and B it would not fit a terminal's width
        sizes = sorted({f"{r['bytes']} B" for regions in loggp.values() for r in regions.values()})
        og = Table(title=f"Per-region LogGP o = (o_s + o_r)/2 and g at {', '.join(sizes)} (loggp kernel), 95 % CI")
        for name in ("series", "region", "o µs (CI)", "g µs (CI)"):
            text = name in ("series", "region")  # these may fold; the figures stay whole
            og.add_column(name, no_wrap=not text, overflow="fold" if text else "ellipsis",
                          justify="left" if text else "right")
        for series in sorted(loggp):
            for region in sorted(loggp[series], key=region_rank):
                r = loggp[series][region]
                og.add_row(escape(_name(series)), region, _og_text(r, "overhead"), _og_text(r, "gap"))
        Console().print(og)
