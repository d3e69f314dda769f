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
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from mpiatlas.commands.compare import threshold

if TYPE_CHECKING:
    from mpiatlas.tuning.decide import Decision, SeriesDecision

HELP = "export the significantly faster collective algorithms as Open MPI / Intel MPI / MPICH tuning files"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("tune", help=HELP, description=__doc__)
    p.add_argument("results", type=Path, metavar="RESULTS", help="a campaign's results directory (results/<name>)")
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
    from mpiatlas.tuning import intelmpi_env, mpich_json, openmpi_rules
    from mpiatlas.tuning.decide import TuneError

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
    from mpiatlas.tuning.decide import TuneError, decide
    from mpiatlas.tuning.markdown import tuning_markdown

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
    from mpiatlas.tuning import validate_run

    try:
        return validate_run.validate(decision, files, args.out, repetitions=args.repetitions,
                                     results=args.validation_results, inside_workflow=args.inside_workflow)
    except TuneError as exc:
        print(f"mpiatlas tune: {exc}", file=sys.stderr)
        return 2
