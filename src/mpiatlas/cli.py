"""The ``mpiatlas`` command line: one subcommand per module in ``mpiatlas.commands``.

Only the module of the subcommand being run is imported: a cell group job (``mpiatlas run-cell``)
starts one process per group, so it must not pay for the report's, the fits' or the other
commands' imports. A command's module is found by its name (``run-cell`` is ``run_cell``,
``import`` is ``import_``), listed without importing anything; ``mpiatlas --help`` and an unknown
command list every command with its help line from :data:`mpiatlas.commands.COMMAND_HELP`, importing
none of them (each command's module imports what the command runs, at module level).

A command whose module must stay light to parse (``run-cell``: a cell group job parses it) names the
function that runs it as ``"module:function"`` (:func:`command_function` imports it when it runs). With
the discovery above, this is the one place where the command line imports lazily.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mpiatlas import __version__, commands


def command_modules() -> dict[str, str]:
    """Subcommand name -> its module in mpiatlas.commands (module ``run_cell`` registers
    ``run-cell``; a trailing ``_`` avoids a keyword: ``import_`` registers ``import``)."""
    return {info.name.rstrip("_").replace("_", "-"): info.name for info in pkgutil.iter_modules(commands.__path__)}


def requested_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` asks for: its first word that is not an option (the top-level
    parser's own options, --help and --version, take no value), or None."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None, *, load_all: bool = False) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the subcommand it names is imported and registered (every one
    with ``load_all``); when it names none or one that does not exist, every command is listed with its
    help line and none is imported (the parser can then only print the list or refuse the command)."""
    modules = command_modules()
    wanted = requested_command(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="mpiatlas", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mpiatlas {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    if load_all:
        registered = sorted(modules)
    elif wanted is not None and wanted in modules:
        registered = [wanted]
    else:
        for name in sorted(modules):
            sub.add_parser(name, help=commands.COMMAND_HELP[name])
        return parser
    for name in registered:
        importlib.import_module(f"{commands.__name__}.{modules[name]}").register(sub)
    return parser


def command_function(func: Callable[[argparse.Namespace], Any] | str) -> Callable[[argparse.Namespace], Any]:
    """The function a command's parser set as ``func``: itself, or the one a ``"module:function"`` string names."""
    if not isinstance(func, str):
        return func
    module, _, name = func.partition(":")
    found: Callable[[argparse.Namespace], Any] = getattr(importlib.import_module(module), name)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    as_program = argv is None  # the console script (or python -m): the process ends with this call
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    # Each register() sets ``func`` with set_defaults; it returns an exit code.
    try:
        code = int(command_function(args.func)(args) or 0)
        if as_program:
            skip_teardown_collection()
        return code
    except Exception as exc:
        # A ConfigError can only come from mpiatlas.matrix.config once something imported it; looked up
        # here so that commands which never read a config do not import its validator (jsonschema).
        config = sys.modules.get("mpiatlas.matrix.config")
        if config is None or not isinstance(exc, config.ConfigError):
            raise
        print(f"mpiatlas: {exc}", file=sys.stderr)
        return 2


def skip_teardown_collection() -> None:
    """Let the exiting interpreter skip its cyclic collections over every object alive (gc.freeze):
    with polars and numpy loaded, the teardown's collections took 0.1-0.25 s of each command, paid
    by every cell group, tidy, fit and report job of a campaign. Objects are still released (by
    reference count; the OS takes the rest) and atexit handlers still run. Only when the process
    is ending: an in-process caller (a test) keeps a collector that collects."""
    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
