"""``mpiatlas tune RESULTS --out DIR``: the winning collective algorithms as each stack's own tuning file.

Per stack x transport x collective of a campaign that forced algorithms: a non-default algorithm
where it beats the default significantly (95 % CI of the time ratio below 1, gain >= --min-gain),
merged into size and process-count ranges (:mod:`mpiatlas.tuning.decide`). Written to DIR: an Open
MPI coll_tuned rules file, an Intel MPI I_MPI_ADJUST env file, MPICH's MPIR and CH4 selection JSON
(+ their env file) per stack x transport, decision.json, and tuning.md explaining every choice.

--validate proves the files take effect: a validation campaign of exactly the tuned cells
(DIR/validate.yaml, run by the same workflow as any campaign into results/<campaign>-validate), each
run three ways -- the stack's default, the exported file (a knob set), the forced winner (the
algorithm axis) -- judged per cell (mpiatlas.tuning.validation) into validation.json and
validation.md; and a sample of the sizes each file leaves untuned, default vs file, which fail when
the file is significantly slower there. A flag, not a subcommand: the validation is of the decision
and files this very run writes, and `tune validate` would read as a results directory named "validate".
Exit status 0, 1 when a tuned cell or a sampled untuned size fails validation, 2 on bad input.

Model-guided mode (a CSV of measurements ``collective, algorithm, np, bytes, latency_us``, or --np /
--bytes given): decisions for the target process counts and sizes, measured or not, from a model
that knows the placement's regions and the algorithms' structure (mpiatlas.tuning.extrapolate):
DIR/decisions.csv, the --stack's tuning file over those ranges, and DIR/tuning.md. The default
stays wherever a forced algorithm is not faster with 90 % confidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from mpiatlas.commands.compare import threshold
from mpiatlas.tuning import adaptive_tune, guided, intelmpi_env, mpich_json, openmpi_rules, samples, validate_run
from mpiatlas.tuning.decide import TuneError, decide, numeric_version, Decision, SeriesDecision
from mpiatlas.tuning.markdown import tuning_markdown
from mpiatlas.node.topology import TopologyError, detect
from mpiatlas.node.topology_synthetic import read_topology
from mpiatlas.tuning.guided import Target, campaign_placement, parse_counts
from mpiatlas.commands import COMMAND_HELP


HELP = COMMAND_HELP["tune"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("tune", help=HELP, description=__doc__)
    p.add_argument("results", type=Path, metavar="MEASURED",
                   help="a campaign's results directory (results/<name>), or a CSV with the columns collective, "
                   "algorithm, np, bytes, latency_us (algorithm names the stack's own, 'default' its decision)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the tuning files")
    p.add_argument("--min-gain", type=threshold, default=0.05, metavar="PCT",
                   help="smallest median gain over the default worth a rule (default 5%%)")
    p.add_argument("--stacks-dir", type=Path, default=Path(".stacks"), metavar="DIR",
                   help="where `mpiatlas stack install` put the stacks (MPICH's built-in selection tree is read "
                   "from its libmpi; default .stacks)")
    p.add_argument("--validate", action="store_true",
                   help="run the validation campaign of the tuned cells (default, exported file, forced winner) and "
                   "judge it: DIR/validation.json, DIR/validation.md")
    p.add_argument("--repetitions", type=int, default=5, metavar="N",
                   help="launches per validation cell (at least 5; default 5)")
    p.add_argument("--validation-results", type=Path, default=None, metavar="DIR",
                   help="judge this finished validation campaign instead of running one")
    p.add_argument("--inside-workflow", action="store_true",
                   help="run the validation campaign with Snakemake directly (the workflow's rule: the enclosing "
                   "`mpiatlas campaign` holds the checkout's lock)")
    guided_args = p.add_argument_group("model-guided decisions for process counts and sizes never measured")
    guided_args.add_argument("--np", nargs="+", metavar="N", help="target process counts: N, A..B, A..B:STEP, A..B*FACTOR")
    guided_args.add_argument("--bytes", nargs="+", metavar="B", help="target message sizes, same forms as --np")
    guided_args.add_argument("--topology", metavar="XML|SYNTHETIC",
                        help="the target node (default: this host), e.g. 'pack:2 numa:4 die:2 l3:2 core:4 pu:1'")
    guided_args.add_argument("--nodes", type=int, default=None, help="target nodes (default: the campaign's, else 1)")
    guided_args.add_argument("--mapping", choices=("core", "socket", "node"), default=None,
                        help="target mapping (default: the campaign's, else core)")
    guided_args.add_argument("--stack", metavar="KIND-VERSION",
                        help="the stack whose tuning file to write, e.g. openmpi-4.1 (default: the campaign's)")
    guided_args.add_argument("--regions", type=Path, metavar="CSV",
                        help="per-region latencies (region,latency_us[,...]) of the target node")
    guided_args.add_argument("--next", type=int, default=0, metavar="N",
                        help="also write DIR/next_cells.csv: the cells to measure next (the default and the predicted "
                        "candidate) at the N points whose decision is least certain; measure them, add them to "
                        "MEASURED and run again (one adaptive round)")
    p.set_defaults(func=run)


def _mpich_lib(stacks_dir: Path, stack: str) -> Path | None:
    """The MPICH library whose built-in tree the JSON extends: the installed stack's, else Debian's."""
    # The versioned file: libmpi.so may be a stub of the ABI wrapper.
    for pattern, where in (("libmpi.so.*", stacks_dir / stack / "lib"), ("libmpich.so.*", Path("/usr/lib/x86_64-linux-gnu"))):
        found = sorted((f for f in where.glob(pattern) if f.is_file()), key=lambda f: f.stat().st_size, reverse=True)
        if found:
            return found[0]
    return None


def write_files(decision: Decision, out: Path, stacks_dir: Path
                ) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], str]]:
    """Every stack x transport's file(s); returns (files, usage) keyed by (stack, transport)."""
    groups: dict[tuple[str, str], list[SeriesDecision]] = {}
    for s in decision.series:
        groups.setdefault((s.stack, s.transport), []).append(s)
    files: dict[tuple[str, str], list[str]] = {}
    usage: dict[tuple[str, str], str] = {}
    for (stack, transport), series in groups.items():
        if not any(s.tuned for s in series):
            continue
        kind, stem = series[0].kind, f"{stack}.{transport}"
        if kind == "openmpi":
            path = out / f"{stem}.rules"
            path.write_text(openmpi_rules.rules_text(series))
            files[(stack, transport)] = [path.name]
            usage[(stack, transport)] = "`mpirun " + " ".join(openmpi_rules.mca_args(str(path.resolve()))) + " ...`"
        elif kind == "intelmpi":
            path = out / f"{stem}.env"
            path.write_text(intelmpi_env.env_text(series))
            files[(stack, transport)] = [path.name]
            usage[(stack, transport)] = f"`set -a; . {path.resolve()}; set +a` before mpirun"
        elif kind == "mpich":
            lib = _mpich_lib(stacks_dir, stack)
            if lib is None:
                raise TuneError(f"{stack}: no MPICH libmpi under {stacks_dir / stack / 'lib'} to read the built-in "
                                "selection tree from (pass --stacks-dir)")
            trees = mpich_json.builtin_trees(lib)
            names = mpich_json.file_names(stem)
            for name, level in zip(names[:2], ("mpir", "ch4")):
                (out / name).write_text(mpich_json.json_text(series, trees[level], str(lib), level))
            env = out / names[2]
            header = "# mpiatlas tune: MPICH selection trees (MPIR + CH4; device collectives stay on for untuned sizes)\n"
            env.write_text(header + "".join(f'{k}="{v}"\n' for k, v in mpich_json.env_vars(
                str((out / names[0]).resolve()), str((out / names[1]).resolve())).items()))
            files[(stack, transport)] = list(names)
            usage[(stack, transport)] = (f"`set -a; . {env.resolve()}; set +a` before mpirun (the MPIR tree `{names[0]}` "
                                         f"names the algorithms; the CH4 tree `{names[1]}` hands only the tuned ranges "
                                         "to MPIR, so every other size keeps MPICH's device collectives)")
        else:
            raise TuneError(f"{stack}: stack kind {kind!r} has no tuning format (openmpi, intelmpi, mpich)")
    return files, usage


def run(args: argparse.Namespace) -> int:
    if args.results.is_file() or args.np or args.bytes:
        try:
            return run_guided(args)
        except TuneError as exc:
            print(f"mpiatlas tune: {exc}", file=sys.stderr)
            return 2

    try:
        decision = decide(args.results, args.min_gain)
        args.out.mkdir(parents=True, exist_ok=True)
        files, usage = write_files(decision, args.out, args.stacks_dir)
    except TuneError as exc:
        print(f"mpiatlas tune: {exc}", file=sys.stderr)
        return 2
    (args.out / "tuning.md").write_text(tuning_markdown(decision, files, usage))
    record = {"source": str(decision.source), "min_gain": decision.min_gain,
              "series": [asdict(s) for s in decision.series]}
    (args.out / "decision.json").write_text(json.dumps(record, indent=1, default=str, allow_nan=False))
    for s in decision.series:
        chosen = sorted({r.algorithm for b in s.blocks for r in b.ranges} - {"default"})
        print(f"{s.stack} {s.transport} {s.collective}: {', '.join(chosen) if chosen else 'default everywhere'}")
    print(f"tuning files in {args.out}: {', '.join(n for v in files.values() for n in v) or 'none (nothing beat the default)'}")
    if not (args.validate or args.validation_results):
        return 0

    try:
        return validate_run.validate(decision, files, args.out, repetitions=args.repetitions,
                                     results=args.validation_results, inside_workflow=args.inside_workflow)
    except TuneError as exc:
        print(f"mpiatlas tune: {exc}", file=sys.stderr)
        return 2


def _guided_target(args: argparse.Namespace, measured_nps: list[int], measured_sizes: list[int]) -> Target:
    mapping, nodes = campaign_placement(args.results)
    try:
        topology = read_topology(args.topology) if args.topology else detect()
    except TopologyError as exc:
        raise TuneError(f"--topology: {exc}") from exc
    nps = parse_counts(args.np, "np") if args.np else measured_nps
    sizes = parse_counts(args.bytes, "bytes") if args.bytes else measured_sizes
    if min(nps) < 2:
        raise TuneError(f"--np: a collective needs at least 2 ranks, got {min(nps)}")
    return Target(topology, args.topology or "this host", args.nodes or nodes or 1, args.mapping or mapping or "core",
                  nps, sizes)


def _guided_stack(args: argparse.Namespace) -> str | None:
    """KIND-VERSION of the file to write: --stack, else the campaign's one stack."""
    if args.stack or args.results.is_file():
        return str(args.stack) if args.stack else None

    rows = samples.load(args.results).select("stack_kind", "stack_version").unique()
    if rows.height != 1:
        return None
    return f"{rows['stack_kind'][0]}-{numeric_version(str(rows['stack_version'][0]))}"


def run_guided(args: argparse.Namespace) -> int:
    """The model-guided mode: decisions.csv, the stack's file, tuning.md."""
    measured = guided.load_measured(args.results)
    target = _guided_target(args, sorted(set(measured["np"])), sorted(set(measured["bytes"])))
    table, note = guided.region_table(args.regions)
    chosen, predictor = guided.decisions(measured, target, table)
    args.out.mkdir(parents=True, exist_ok=True)
    guided.write(chosen, args.out)
    stack = _guided_stack(args)
    files: list[str] = []
    usage = ""
    if stack is not None:
        series = guided.series(chosen, stack)
        kind = series[0].kind if series else ""
        if any(s.tuned for s in series):
            if kind == "openmpi":
                path = args.out / f"{stack}.rules"
                path.write_text(openmpi_rules.rules_text(series))
                usage = "`mpirun " + " ".join(openmpi_rules.mca_args(str(path.resolve()))) + " ...`"
            elif kind == "intelmpi":
                path = args.out / f"{stack}.env"
                path.write_text(intelmpi_env.env_text(series))
                usage = f"`set -a; . {path.resolve()}; set +a` before mpirun"
            else:
                raise TuneError(f"--stack {stack}: the model-guided mode writes Open MPI rules or Intel MPI env "
                                "files (openmpi-X.Y, intelmpi-X.Y)")
            files.append(path.name)
    (args.out / "tuning.md").write_text(guided.markdown(chosen, predictor, args.results, target, note, files, usage))
    if args.next > 0:
        grid = guided.grid(measured, target)
        current = adaptive_tune.decisions(predictor.predict(grid), measured)
        cells = adaptive_tune.next_cells(current, measured, args.next)
        cells.write_csv(args.out / "next_cells.csv")
        print(f"{int((current['uncertainty'] > 0).sum())} uncertain decisions; {cells.height} cells to measure next in "
              f"{args.out / 'next_cells.csv'}")
    forced = chosen.filter(chosen["algorithm"] != "default")
    print(f"{chosen.height} decisions ({forced.height} forced, {chosen.height - forced.height} default) in "
          f"{args.out / 'decisions.csv'}; {', '.join(files) or 'no tuning file (nothing beat the default with confidence)'}"
          f"{'' if stack else ' (no --stack: no tuning file)'}")
    return 0
