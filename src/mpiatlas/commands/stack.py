"""``mpiatlas stack install``: install (PyPI) or check (system) one MPI stack."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mpiatlas.stacks import get_stack
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stack", help=COMMAND_HELP["stack"])
    p.add_argument("action", choices=["install"])
    p.add_argument("--kind", required=True)
    p.add_argument("--source", default="pypi", choices=["pypi", "system"])
    p.add_argument("--prefix", required=True)
    p.add_argument("--record", type=Path, help="write what was installed (JSON) here")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    stack = get_stack(args.kind, args.prefix, source=args.source)
    if not stack.is_installed():
        stack.install()
    record = {"kind": stack.kind, "source": stack.source, "prefix": str(stack.prefix), "version": stack.version(),
              "launcher": str(stack.launcher_path()), "imb": str(stack.imb_binary() or "")}
    print(json.dumps(record))
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=2) + "\n")
    return 0
