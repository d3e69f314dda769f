"""The ``mpiatlas`` command line: one subcommand per module in ``mpiatlas.commands``.

Every subcommand module is imported to register its arguments, so a module keeps its heavy
imports (polars, scipy, altair, snakemake) inside the functions that use them: ``mpiatlas
run-cell`` and ``mpiatlas --help`` must not pay for the report's libraries.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from mpiatlas import __version__, commands
from mpiatlas.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpiatlas", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mpiatlas {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Each register() sets ``func`` with set_defaults; it returns an exit code.
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"mpiatlas: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
