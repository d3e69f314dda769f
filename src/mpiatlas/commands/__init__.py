"""CLI subcommands: every module here exposes ``register(subparsers)``.

cli.py discovers them, so parallel work adds a command by adding a module.
"""
