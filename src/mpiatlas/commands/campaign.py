"""``mpiatlas campaign``: check, run the whole Snakemake DAG with a live progress line, report.

1. One campaign per checkout at a time (mpiatlas.campaign.runlock); a lock left by a killed run is cleared.
2. Every prerequisite is checked once (mpiatlas.campaign.preflight): a missing one stops everything with
   one message, before any cell runs.
3. Snakemake runs with its log in results/<campaign>/logs/snakemake.log (``--verbose``: on the
   terminal); the terminal shows cells done / ok / failed / remaining, the current cell and an ETA.
4. When the first cells all fail for one reason, the campaign stops and says it once.
5. It always leaves a report: results/<campaign>/report.html, or, when cells are missing,
   results/<campaign>/partial/report.html built by the same rules (listing what never ran).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
import compileall
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

from rich.console import Console
from rich.live import Live
import polars as pl

from mpiatlas.campaign import adaptive_rounds, auto_plan, preflight, runlock, snakemake_start
from mpiatlas.matrix import adaptive, layout
from mpiatlas.campaign.auto_plan import load
from mpiatlas.campaign.resources import estimate
from mpiatlas.programs import expand
from mpiatlas.campaign.progress import Progress, format_eta
from mpiatlas.history.record import record_campaign
from mpiatlas.history.store import DEFAULT_DB
from mpiatlas.report.formatting import DASH, fmt_bytes, fmt_ci, fmt_num, interval_scope
from mpiatlas.models.hockney_trust import LATENCY_FLOOR_US, latency_on_floor
from mpiatlas.commands import COMMAND_HELP
from mpiatlas.files import shipped

if TYPE_CHECKING:
    from mpiatlas.spine.campaign import Campaign

POLL_S = 1.0
LOG_TAIL_LINES = 12


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("campaign", help=COMMAND_HELP["campaign"])
    p.add_argument("--config", default="config/config.yaml", type=Path, help="campaign config (default: %(default)s)")
    p.add_argument("--profile", default="profiles/local", help="Snakemake profile (default: %(default)s)")
    p.add_argument("--directory", default=".", type=Path,
                   help="where the campaign runs and writes results/ (default: current directory)")
    p.add_argument("--verbose", action="store_true", help="show Snakemake's own output instead of the progress line")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="extra Snakemake arguments after --")
    p.set_defaults(func=_main)


def snakemake_argv(args: argparse.Namespace, *targets: str) -> list[str]:
    extra = [a for a in args.snakemake_args if a != "--"]
    return snakemake_start.workflow_argv(args.config, args.profile, args.directory.resolve(), *extra, *targets)


def is_dry_run(args: argparse.Namespace) -> bool:
    return any(a in ("-n", "--dry-run", "--dryrun") for a in args.snakemake_args)


def is_slurm(profile: str) -> bool:
    return "slurm" in Path(profile).name


class Run:
    """Snakemake in its own session; SIGINT/SIGTERM/SIGHUP to this command reach that session
    exactly once, as SIGINT: Snakemake ignores SIGTERM while jobs run, and on SIGINT it cancels its batch jobs
    (scancel) and marks unfinished outputs incomplete."""

    def __init__(self, argv: list[str], root: Path, env: dict[str, str], log: Path | None) -> None:
        self.log_fh = log.open("a") if log else None
        out = self.log_fh if self.log_fh else None
        self.proc = subprocess.Popen(argv, cwd=root, env=env, start_new_session=True, stdout=out,
                                     stderr=subprocess.STDOUT if out else None, stdin=subprocess.DEVNULL)
        self.stopped: str | None = None
        self._previous = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGINT, signal.SIGTERM,
                                                                               signal.SIGHUP)}

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stop(f"received {signal.Signals(signum).name}")

    def stop(self, why: str) -> None:
        # To Snakemake's whole session, as Ctrl-C in a terminal would: Snakemake does not stop its
        # running local jobs, and a cell group may hold a whole stack's cells. A group's run-cell
        # discards the cell it is in (CellInterrupted) and stops; its launch gets the signal too.
        if self.stopped is None:
            self.stopped = why
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def exited_within(self, seconds: float) -> bool:
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def wait(self) -> int:
        try:
            return self.proc.wait()
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            if self.log_fh:
                self.log_fh.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Rules call the `mpiatlas` entry point of this very environment.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def _main(args: argparse.Namespace) -> int:
    root = args.directory.resolve()
    config = load(root / args.config)  # a bad config fails here, with the key and what was expected
    if is_dry_run(args):
        return Run(snakemake_argv(args), root, _env(), None).wait()
    try:
        lock = runlock.acquire(root, config.campaign.name)
    except runlock.CampaignRunning as exc:
        print(f"mpiatlas: {exc}", file=sys.stderr)
        return 3
    try:
        return _run_campaign(args, root, config)
    finally:
        lock.release()


def plan_lines(config: Campaign) -> list[str]:
    """What the campaign will run, before it runs: what ``auto`` planned (when it did) and the time estimate."""
    note = auto_plan.note(config.auto)
    return [*([note] if note else []), estimate(config, expand(config)).line()]


def precompile_package() -> None:
    """Byte-compile mpiatlas's own modules where they are missing or stale (the package's usual
    __pycache__). A campaign starts a dozen and more mpiatlas processes (a run-cell per group, tidy,
    fit, report): where bytecode is not written on import (PYTHONDONTWRITEBYTECODE, as some
    clusters' module systems set it) and an editable install never compiled it, each of them
    compiled every module it imports from source, ~0.15 s for run-cell and ~0.5 s for the report.
    A package directory the user cannot write is left as it is."""
    package = shipped()
    if os.access(package, os.W_OK):
        compileall.compile_dir(package, quiet=2)


def _run_campaign(args: argparse.Namespace, root: Path, config: Campaign) -> int:
    precompile_package()
    console = Console(stderr=False, highlight=False, soft_wrap=True)
    results = root / layout.results_dir(config.campaign.name)
    for note in runlock.clear_stale(root):
        console.print(f"note: {note}")
    os.chdir(root)  # preflight installs stacks and reads paths relative to the checkout
    with console.status("checking prerequisites (stacks, compiler, topology, disk)…"):
        try:
            checks = preflight.require(config, slurm=is_slurm(args.profile))
        except preflight.PreflightFailed as exc:
            console.print(str(exc), markup=False)
            return 2
    console.print(f"prerequisites ok: {len(checks)} checks (`mpiatlas doctor` lists them)")
    for line in plan_lines(config):
        console.print(line, markup=False)
    env = _env() | {preflight.DONE_ENV: config.campaign.name}
    log = None if args.verbose else results / "logs" / layout.SNAKEMAKE_LOG
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        console.print(f"snakemake log: {log}")
    rc, stop_reason, tracker = _run_with_progress(args, root, config, env, log, console)
    return _finish(args, root, config, env, rc, stop_reason, tracker, log, console)


def _run_with_progress(args: argparse.Namespace, root: Path, config: Campaign, env: dict[str, str],
                       log: Path | None, console: Console) -> tuple[int, str | None, Progress]:
    results = root / layout.results_dir(config.campaign.name)
    tracker = Progress(results / "raw", campaign_cell_ids(config))
    later_rounds = _later_rounds(config, results)
    run = Run(snakemake_argv(args), root, env, log)
    threshold = int(config.campaign.fail_fast)
    if args.verbose:
        rc = run.wait()
        later_rounds(tracker)
        tracker.poll(limit=None)
        return rc, run.stopped, tracker
    with _live_display(console, tracker) as refresh:
        # Woken by Snakemake's exit as well as every POLL_S: the report is ready the moment it ends.
        while not run.exited_within(POLL_S):
            later_rounds(tracker)
            tracker.poll()
            refresh()
            failure = tracker.same_failure(threshold)
            if failure is not None and run.stopped is None:
                reason, cell = failure
                run.stop("fail-fast")
                console.print(f"stopped: the first {threshold} cells all failed with: {reason}\n"
                              f"  one cell's output: {results / 'raw' / cell}", markup=False, soft_wrap=True)
    rc = run.wait()
    later_rounds(tracker)
    tracker.poll(limit=None)
    return rc, run.stopped, tracker


def _later_rounds(config: Campaign, results: Path) -> Callable[[Progress], None]:
    """tracker -> None: adds the cells an adaptive campaign's rounds have planned so far (the last
    round's manifest lists every cell planned through it, mpiatlas.campaign.adaptive_rounds), so that the
    progress line and the closing count include the repetitions added after the first round. A
    campaign of fixed repetitions plans everything up front: nothing to add."""
    if adaptive.spec_of(config) is None:
        return lambda tracker: None
    read: list[Path | None] = [None]

    def add(tracker: Progress) -> None:
        manifest = adaptive_rounds.latest_manifest(results)
        if manifest is None or manifest == read[0]:
            return
        try:
            tracker.plan_more(json.loads(manifest.read_text()))
        except (OSError, json.JSONDecodeError):
            return  # written atomically: a manifest is there whole or not at all
        read[0] = manifest

    return add


def _live_display(console: Console, tracker: Progress) -> AbstractContextManager[Callable[[], None]]:
    """A context manager yielding refresh(): one live line on a terminal, a line per tenth of the
    cells elsewhere (CI logs, pipes)."""

    def line() -> str:
        current = tracker.finished_now[-1][0] if tracker.finished_now else "starting"
        again = f", {tracker.remeasured} re-measured" if tracker.remeasured else ""
        return (f"{tracker.done}/{tracker.total} cells done ({tracker.statuses.get('ok', 0)} ok, "
                f"{sum(n for s, n in tracker.statuses.items() if s != 'ok')} not ok{again}), {tracker.remaining} to go, "
                f"ETA {format_eta(tracker.eta_s())} · last: {current}")

    @contextmanager
    def terminal() -> Iterator[Callable[[], None]]:
        with Live(line(), console=console, refresh_per_second=2, transient=False) as live:
            yield lambda: live.update(line())

    @contextmanager
    def plain() -> Iterator[Callable[[], None]]:
        step = max(1, tracker.total // 10)
        shown = [tracker.done // step]

        def refresh() -> None:
            if tracker.done // step > shown[0]:
                shown[0] = tracker.done // step
                console.print(line(), markup=False, soft_wrap=True)

        yield refresh

    return terminal() if console.is_terminal else plain()


def campaign_cell_ids(config: Campaign) -> list[str]:
    return [c.id for c in expand(config)]


def _finish(args: argparse.Namespace, root: Path, config: Campaign, env: dict[str, str], rc: int,
            stop_reason: str | None, tracker: Progress, log: Path | None, console: Console) -> int:
    results = layout.results_dir(config.campaign.name)
    full = root / layout.report_path(results)
    if rc == 0 and full.exists() and tracker.remaining == 0:
        _summary(console, tracker, root / results, config)
        _record_history(console, root / results, root)
        console.print(f"report: {full}", markup=False)  # the last line, always (the README's promise)
        return 0
    if rc != 0 and log is not None and stop_reason is None:
        console.print(f"snakemake ended with exit code {rc}; the end of its log ({log}):", markup=False)
        console.print(_log_tail(log), markup=False)
    partial = _partial_report(args, root, results, env, log)
    _summary(console, tracker, root / results / layout.PARTIAL, config)
    if partial is None:
        console.print("no report could be built (see the log above)", markup=False)
        return rc or 1
    _record_history(console, root / results, root)
    console.print(f"partial report: {partial} ({tracker.remaining} of {tracker.total} cells not run; "
                  "run the same command again to run them)", markup=False)
    return rc or 1


def _record_history(console: Console, results: Path, root: Path) -> None:
    """Add the campaign (its partial view when cells are missing) to the checkout's history store;
    a failure is said, never raised (mpiatlas.history.record)."""
    for line in record_campaign(results, root / DEFAULT_DB):
        console.print(line, markup=False)


def _partial_report(args: argparse.Namespace, root: Path, results: str, env: dict[str, str],
                    log: Path | None) -> Path | None:
    """The partial report, by the same rules as the full one (rules/tidy.smk's `partial` view)."""
    runlock.clear_stale(root)  # a killed Snakemake leaves its lock behind
    target = layout.report_path(results, partial=True)
    # The campaign's profile too: its config (grouping) must be the run's, or Snakemake would see the
    # manifest's params changed and rewrite it.
    argv = snakemake_start.workflow_argv(args.config, args.profile, root, "--cores", "1", "--forcerun", "tidy_partial",
                                         "--nolock", target)
    with (log or Path(os.devnull)).open("a") as out:
        done = subprocess.run(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    path = root / target
    return path if done.returncode == 0 and path.exists() else None


def _summary(console: Console, tracker: Progress, out: Path, config: Campaign) -> None:
    """Cells by status, then latency λ and bandwidth B of the campaign's first stack with their 95 %
    intervals, and that fit's warning when it has one."""
    console.print(tracker.summary_line(), markup=False)
    still = still_perturbed(out / "tidy" / layout.CELLS_TABLE)
    if still:
        console.print(f"{still} launch(es) still perturbed after their re-measures: left out of medians and fits "
                      "(the report's Cells section lists them)", markup=False)
    order = [(label, transport) for label, stack in config.stacks.items() for transport in stack.transports]
    for line in headline(out / "fits" / layout.HOCKNEY_FIT, order, out / "tidy" / layout.CELLS_TABLE):
        console.print(line, markup=False)


def still_perturbed(cells_table: Path) -> int:
    """How many cells of the campaign's cells table end with a perturbed launch (0 without the table)."""
    try:
        cells = pl.read_parquet(cells_table, columns=["quality"])
    except (OSError, pl.exceptions.PolarsError):
        return 0
    return cells.filter(pl.col("quality") == "perturbed").height


def headline(fits: Path, order: list[tuple[str, str]], cells: Path | None = None) -> list[str]:
    """λ and B of the PingPong fit of the first (stack, transport) of the config that has one, each
    with its 95 % interval, and the fit's warning (:func:`mpiatlas.models.hockney_trust.trust_warnings`)
    on a third line when it has one. When the first (stack, transport) whose IMB PingPong ran has no
    trusted launch (every one perturbed, after its re-measures: the cells table ``cells``), that is
    the headline, in words: another stack's series is not silently put in its place."""
    untrusted = no_trusted_launch(cells, order) if cells is not None else None
    if untrusted is not None:
        return [f"latency: {untrusted}", f"bandwidth: {untrusted}"]
    try:
        data = json.loads(fits.read_text())
    except (OSError, json.JSONDecodeError):
        return ["latency: no Hockney fit was made", "bandwidth: no Hockney fit was made"]
    pingpong = [f for f in data if f.get("benchmark") in ("PingPong", "pingpong") and f.get("latency_us")]
    if not pingpong:
        return ["latency: no PingPong fit", "bandwidth: no PingPong fit"]

    rank = {key: i for i, key in enumerate(order)}
    first = min(pingpong, key=lambda f: rank.get((str(f.get("stack")), str(f.get("transport"))), len(rank)))
    label = first.get("label") or f"{first.get('stack')}/{first.get('transport')}"
    lines = [f"latency: {label} PingPong {_latency_text(first)}",
             f"bandwidth: {label} PingPong {_bandwidth_text(first)}",
             f"intervals: 95 %, {interval_scope(first.get('ci_method'), first.get('n_launches'))}"]
    if first.get("ci_warning"):
        lines.append(f"warning: {label} PingPong: {first['ci_warning']}")
    return lines


def no_trusted_launch(cells_table: Path, order: list[tuple[str, str]]) -> str | None:
    """"intelmpi/shm PingPong: no trusted launch (3 perturbed after 3 re-measures)" when the first
    (stack, transport) of ``order`` whose IMB PingPong cells ran ok has none that was not perturbed
    (mpiatlas.stats.quality); None when it has one, or without the table."""
    try:
        cells = pl.read_parquet(cells_table)
    except (OSError, pl.exceptions.PolarsError):
        return None
    needed = {"stack", "transport", "benchmark", "status", "quality"}
    if not needed <= set(cells.columns):
        return None
    ran = cells.filter((pl.col("benchmark") == "PingPong") & (pl.col("status") == "ok"))
    if "kind" in ran.columns:
        ran = ran.filter(pl.col("kind").fill_null("imb") == "imb")
    for stack, transport in order:
        series = ran.filter((pl.col("stack") == stack) & (pl.col("transport") == transport))
        if series.height == 0:
            continue
        perturbed = series.filter(pl.col("quality") == "perturbed")
        if perturbed.height < series.height:
            return None
        again = sorted({int(n or 0) for n in perturbed.get_column("remeasured")}) if "remeasured" in perturbed.columns else [0]
        spent = str(again[0]) if len(again) == 1 else f"{again[0]}-{again[-1]}"
        return (f"{stack}/{transport} PingPong: no trusted launch ({perturbed.height} perturbed after {spent} "
                f"re-measure{'' if spent == '1' else 's'}; the report's Cells section lists them)")
    return None


def _with_ci(value: str, ci: Any, unbounded: str | None = None) -> str:
    text = fmt_ci(ci, 3 if unbounded is None else 4, unbounded=unbounded)
    return f"{value} {text}" if text != DASH else f"{value} (no interval)"


def _latency_text(fit: dict[str, Any]) -> str:
    # Imported here: the campaign's start (and --help) need neither numpy nor the models.

    lam = fit["latency_us"]
    if latency_on_floor(lam):
        return f"λ not resolved: pinned on its {LATENCY_FLOOR_US:g} µs lower bound (Hockney fit)"
    return f"λ = {_with_ci(f'{fmt_num(lam)} µs', fit.get('latency_ci_us'))} (Hockney fit)"


def _bandwidth_text(fit: dict[str, Any]) -> str:
    """Both bandwidth estimands with their intervals: the asymptotic B (s/t at the largest size)
    and the peak B (the highest s/t), each named (mpiatlas.models.asymptote)."""
    def one(figure: str, where: str) -> str:
        value = fit.get(f"{figure}_MBps")
        if value is None:
            return f"{figure.replace('_', ' ')} unbounded"
        return f"{_with_ci(f'{fmt_num(value, 4)} MB/s', fit.get(f'{figure}_ci_MBps'), unbounded='∞')} {where}"

    asymptotic = one("asymptotic_bandwidth", f"(asymptotic: at {fmt_bytes(fit.get('asymptotic_bytes'))})")
    peak = one("peak_bandwidth", f"(peak: at {fmt_bytes(fit.get('peak_bytes'))})")
    return f"B = {asymptotic}; {peak}"


def _log_tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    keep = [ln for ln in lines if ln.strip()][-LOG_TAIL_LINES:]
    return "\n".join("  " + ln for ln in keep)
