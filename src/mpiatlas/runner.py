"""Run one campaign cell: launch, keep the raw output, decide its status.

A cell always ends with a status (ok, failed, timeout, unavailable, invalid)
written next to its raw output, so one broken cell never stops a campaign.
The output directory appears atomically (written aside, then renamed) and
its files are made read-only: raw data is never edited after the fact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpiatlas import containers, provenance, topology
from mpiatlas.parsers.imb import ImbParseError, parse_imb_text
from mpiatlas.stacks import LaunchSpec, Stack, StackError, get_stack

STDOUT, STDERR, PROVENANCE, STATUS = "stdout.txt", "stderr.txt", "provenance.json", "status.json"


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | unavailable | invalid
    reason: str | None = None
    details: dict[str, Any] | None = None


def imb_args(benchmark: str, np: int, imb: dict[str, Any]) -> list[str]:
    lo, hi = imb["msglog"]
    args = [benchmark, "-msglog", f"{lo}:{hi}", "-npmin", str(np), "-time", str(imb["time_s"]), "-mem", str(imb["mem_gb"])]
    if imb.get("iterations"):
        args += ["-iter", str(imb["iterations"])]
    return args


def imb_program(stack: Stack, benchmark: str, np: int, imb: dict[str, Any]) -> list[str]:
    binary = stack.imb_binary("IMB-MPI1")
    if binary is None:
        raise StackError(f"unavailable: no IMB-MPI1 for {stack.kind} (IMB source not reachable or not built)")
    return [str(binary), *imb_args(benchmark, np, imb)]


def image_facts(container: dict[str, Any]) -> dict[str, Any]:
    """Digest and labels of a cell's image, from the record the image rule wrote at build time."""
    record = json.loads(Path(container["inspect"]).read_text())
    labels = record["inspect"]["data"]["attributes"].get("labels", {})
    return {"image": str(Path(container["image"]).resolve()), "digest": f"sha256:{record['sha256']}", "labels": labels}


def container_imb_program(container: dict[str, Any], facts: dict[str, Any], benchmark: str, np: int,
                          imb: dict[str, Any]) -> list[str]:
    """Hybrid model: the host launcher starts ``apptainer exec IMAGE IMB-MPI1 ...`` per rank."""
    status = facts["labels"].get("mpiatlas.imb", "")
    if status.startswith("unavailable"):
        raise StackError(f"unavailable: image {Path(facts['image']).name}: IMB {status}")
    return containers.exec_argv(facts["image"], ["IMB-MPI1", *imb_args(benchmark, np, imb)], container.get("binds", []))


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int | None, str, str, float]:
    """Run in its own process group so a timeout kills every rank, not just the launcher."""
    start = time.monotonic()
    with (cwd / STDOUT).open("w") as out, (cwd / STDERR).open("w") as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, (cwd / STDOUT).read_text(errors="replace"), (cwd / STDERR).read_text(errors="replace"), time.monotonic() - start


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def binding_problems(pins: list[int] | None, binding: dict[int, set[int]]) -> list[str]:
    if pins is None:
        return []
    if not binding:
        return ["the stack reported no binding, so pinning cannot be verified"]
    return topology.check_binding(pins, [binding.get(r, set()) for r in range(len(pins))])


def judge(stack: Stack, spec: dict[str, Any], pins: list[int] | None, rc: int | None,
          stdout: str, stderr: str) -> Outcome:
    """Decide a finished launch's status from its exit code, output and the evidence it printed."""
    if rc is None:
        return Outcome("timeout", f"no result within {spec['timeout_s']} s")
    if rc != 0:
        return Outcome("failed", f"exit code {rc}: {_last_line(stderr) or _last_line(stdout)}")
    try:
        rows = parse_imb_text(stdout, STDOUT)
    except ImbParseError as exc:
        return Outcome("failed", str(exc))
    output = stdout + "\n" + stderr
    details: dict[str, Any] = {"rows": rows.height}
    expected = stack.transport(spec["cell"]["transport"]).expect
    obtained = stack.obtained_transport(output)
    binding = stack.obtained_binding(output)
    problems = binding_problems(pins, binding)
    details.update(
        requested_transport=expected, obtained_transport=obtained,
        transport_ok=(obtained == expected) if expected else None,
        obtained_binding={str(r): sorted(c) for r, c in sorted(binding.items())},
        binding_ok=None if pins is None else not problems,
    )
    if details["transport_ok"] is False:
        return Outcome("invalid", f"requested transport {expected!r} but the stack used {obtained!r}", details)
    if problems:
        return Outcome("invalid", "; ".join(problems), details)
    return Outcome("ok", None, details)


def run_cell(spec: dict[str, Any], out: Path) -> Outcome:
    """Run the IMB cell described by ``spec`` (see matrix.cell_spec) into directory ``out``."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: raw output already exists and is never overwritten")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    cell = spec["cell"]
    record: dict[str, Any] = {"cell": spec["id"], "coords": cell, "start": provenance.now(),
                              **provenance.host_facts(), "containerized": False, "image_digest": None,
                              "stack_kind": spec["stack"]["kind"]}
    stack = get_stack(spec["stack"]["kind"], spec["stack"]["prefix"], source=spec["stack"]["source"],
                      imb_from=_absolute(spec["stack"].get("imb_from")))
    outcome = Outcome("failed", "not run")
    try:
        topo = topology.detect()
        record["topology"] = topo.summary()
        ncores = len(topo.cores)
        oversubscribed = cell["np"] > ncores
        record["oversubscribed"] = oversubscribed
        if oversubscribed and not spec["allow_oversubscribe"]:
            raise topology.MappingUnavailable(cell["mapping"], f"{cell['np']} ranks > {ncores} cores and oversubscription is off")
        pins = topology.pin_list(topo, cell["mapping"], cell["np"], oversubscribe=oversubscribed)
        record["requested_pins"] = pins
        record["region"] = topology.region(topo, pins[0], pins[1]) if len(pins) > 1 else None
        record["stack_version"] = stack.version()
        container = spec.get("container")
        if container:
            facts = image_facts(container)
            record.update(containerized=True, image=facts["image"], image_digest=facts["digest"])
            program = container_imb_program(container, facts, cell["benchmark"], cell["np"], spec["imb"])
        else:
            program = imb_program(stack, cell["benchmark"], cell["np"], spec["imb"])
        collective = cell["benchmark"].lower() if cell["algorithm"] != "default" else None
        launch = stack.launch(program, LaunchSpec(
            np=cell["np"], transport=cell["transport"], pins=pins, oversubscribe=oversubscribed,
            collective=collective, algorithm=cell["algorithm"], workdir=work,
        ))
        env = stack.env() | launch.env
        record.update(argv=launch.argv, env=provenance.relevant_env(stack.runtime_env() | launch.env))
        rc, stdout, stderr, wall = _run(launch.argv, env, work, spec["timeout_s"])
        record.update(exit_code=rc, wall_s=round(wall, 3))
        outcome = judge(stack, spec, pins, rc, stdout, stderr)
    except topology.MappingUnavailable as exc:
        outcome = Outcome("unavailable", str(exc))
    except StackError as exc:
        text = str(exc)
        outcome = Outcome("unavailable", text.removeprefix("unavailable: ")) if text.startswith("unavailable") \
            else Outcome("failed", text)
    finally:
        record["end"] = provenance.now()
        for name in (STDOUT, STDERR):
            (work / name).touch()
        _write_json(work / PROVENANCE, record)
        _write_json(work / STATUS, {"cell": spec["id"], "status": outcome.status, "reason": outcome.reason,
                                    **(outcome.details or {})})
        _seal(work, out)
    return outcome


def _absolute(path: str | None) -> Path | None:
    # Launches run in a scratch directory: relative prefixes would point nowhere.
    return Path(path).resolve() if path else None


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _seal(work: Path, out: Path) -> None:
    """Make files read-only and move the finished directory into place in one rename."""
    for path in work.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    work.chmod(0o755)
    if out.exists():
        out.rmdir()  # empty: checked at start
    os.rename(work, out)


def read_status(cell_dir: Path) -> dict[str, Any]:
    return json.loads((Path(cell_dir) / STATUS).read_text())


__all__ = ["run_cell", "judge", "Outcome", "read_status", "imb_program"]
