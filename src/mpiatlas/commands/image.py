"""``mpiatlas image``: render, build, inspect and preflight Apptainer images of the MPI stacks.

  mpiatlas image render openmpi --imb skip --out results/images/openmpi.def
  mpiatlas image build results/images/openmpi.def results/images/openmpi.sif --log build.log --inspect openmpi.inspect.json
  mpiatlas image inspect results/images/openmpi.sif
  mpiatlas image preflight results/images/intelmpi.sif --host-kind intelmpi --host-prefix .stacks/intelmpi
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from mpiatlas.stacks import containers, get_stack
from mpiatlas.stacks.base import first_version_line
from mpiatlas.commands import COMMAND_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("image", help=COMMAND_HELP["image"])
    actions = p.add_subparsers(dest="image_action", required=True)

    r = actions.add_parser("render", help="render containers/<stack>.def into an Apptainer definition file")
    r.add_argument("stack", choices=containers.STACK_KINDS)
    r.add_argument("--params-json", help="rendering parameters (JSON object, as containers.render_params gives)")
    r.add_argument("--bootstrap", choices=containers.BOOTSTRAPS)
    r.add_argument("--imb", choices=containers.IMB_MODES)
    r.add_argument("--imb-url")
    r.add_argument("--imb-sha256")
    r.add_argument("--template", type=Path, help="default: the containers/<stack>.def mpiatlas ships")
    r.add_argument("--kernels", type=Path, help="kernel sources copied into the image (default: those mpiatlas ships)")
    r.add_argument("--out", type=Path, help="write here (default: stdout)")
    r.set_defaults(func=_render)

    b = actions.add_parser("build", help="apptainer build (zstd) a SIF from a rendered def")
    b.add_argument("deffile", type=Path)
    b.add_argument("sif", type=Path)
    b.add_argument("--log", type=Path, required=True, help="the whole build output goes here")
    b.add_argument("--inspect", type=Path, help="write apptainer inspect --json + sha256 + build time here")
    b.add_argument("--kernels", type=Path, default=containers.KERNELS_DIR,
                   help="kernel sources the def copies (for the inputs digest)")
    b.set_defaults(func=_build)

    i = actions.add_parser("inspect", help="labels, sha256 and size of a SIF (JSON)")
    i.add_argument("sif", type=Path)
    i.add_argument("--out", type=Path)
    i.set_defaults(func=_inspect)

    f = actions.add_parser("preflight", help="check a host MPI launcher can run this image (labels + 2-rank hello)")
    f.add_argument("sif", type=Path)
    f.add_argument("--host-kind", required=True, choices=containers.STACK_KINDS)
    f.add_argument("--host-prefix", help="prefix of an mpiatlas host stack (e.g. .stacks/intelmpi)")
    f.add_argument("--host-source", default="pypi", choices=["pypi", "system"])
    f.add_argument("--host-version", help="default: asked from the host launcher")
    f.add_argument("--launcher", help="host launcher without -n (default: the kind's Debian launcher)")
    f.add_argument("--bind", action="append", default=[])
    f.add_argument("--np", type=int, default=2)
    f.add_argument("--no-hello", action="store_true", help="only compare labels")
    f.set_defaults(func=_preflight)


def _render(args: argparse.Namespace) -> int:
    params = json.loads(args.params_json) if args.params_json else containers.render_params(args.stack)
    for key in ("bootstrap", "imb", "imb_url", "imb_sha256"):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    text = containers.render_def(args.stack, template=args.template, kernels_src=args.kernels, **params)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def _build(args: argparse.Namespace) -> int:
    try:
        result = containers.build_image(args.deffile, args.sif, args.log)
    except containers.ContainerError as exc:
        print(f"mpiatlas image build: {exc}", file=sys.stderr)
        return 1
    print(f"built {result.sif} in {result.seconds:.0f} s, {result.size_bytes / 2**20:.0f} MiB (log {args.log})")
    if args.inspect:
        digest = containers.inputs_digest(args.deffile.read_text(), args.kernels)
        record = containers.write_inspect(result.sif, args.inspect, build=result, extra={"inputs_digest": digest})
        print(f"sha256 {record['sha256']} -> {args.inspect}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    record = {"image": str(args.sif), "sha256": containers.image_digest(args.sif),
              "size_bytes": args.sif.stat().st_size, "labels": containers.image_labels(args.sif)}
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _launcher_version(argv: list[str]) -> str:
    exe = shutil.which(argv[0]) or argv[0]
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    return " ".join(first_version_line((out.stdout + out.stderr).strip()).split())


def _preflight(args: argparse.Namespace) -> int:
    host_stack = None
    launcher = args.launcher.split() if args.launcher else None
    if args.host_prefix:
        host_stack = get_stack(args.host_kind, args.host_prefix, source=args.host_source)
        version = args.host_version or host_stack.version()
    else:
        launcher = launcher or containers.SYSTEM_LAUNCHERS[args.host_kind]
        version = args.host_version or _launcher_version(launcher)
    try:
        info = containers.preflight(args.host_kind, version, args.sif, host_stack=host_stack, launcher=launcher,
                                    binds=args.bind, np=args.np, hello=not args.no_hello)
    except containers.ContainerError as exc:
        print(f"preflight FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"preflight ok: host {args.host_kind} {version!r} runs {info.image} ({info.kind} {info.version})")
    for rank in info.hello:
        print(f"  rank {rank.rank} of {rank.size} pid {rank.pid} host {rank.host}: {rank.lib}")
    return 0
