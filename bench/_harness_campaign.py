"""bench/harness.py helpers: run a real ``mpiatlas campaign`` in a throw-away work directory and
read back how long its launches took.

The work directory is made like tests/conftest.py ``campaign_workdir`` does it: the repository's
workflow, profiles, containers and src/kernels symlinked, the campaign config written as
config/campaign.yaml with ``campaign.stacks_dir`` pointing at the checkout's ``.stacks`` (installing
the MPI stacks again would cost minutes and is not what is measured).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN_CONFIG = "config/campaign.yaml"


class BenchError(RuntimeError):
    """A measurement could not be taken; the message says which and why."""


@dataclass
class CampaignRun:
    """One timed campaign: the whole command's wall time and every sealed cell's launch."""

    name: str
    work: Path
    wall_s: float
    returncode: int
    launches: list[dict[str, Any]] = field(default_factory=list)  # provenance.json of each cell

    @property
    def launch_wall_s(self) -> float:
        return sum(float(p.get("wall_s") or 0.0) for p in self.launches)

    @property
    def ratio(self) -> float:
        if self.launch_wall_s <= 0:
            raise BenchError(f"campaign {self.name}: no cell recorded a launch wall time (wall_s) "
                             f"under {self.work}/results/{self.name}/raw")
        return self.wall_s / self.launch_wall_s


def load_config(path: Path) -> dict[str, Any]:
    """The campaign config as written (not defaults-filled: the campaign validates it itself)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no such campaign config") from None
    if not isinstance(data, dict) or not isinstance(data.get("campaign"), dict):
        raise BenchError(f"{path}: expected a campaign config with a `campaign:` mapping at the top level")
    return data


def with_repetitions(config: dict[str, Any], reps: int | None) -> dict[str, Any]:
    config = copy.deepcopy(config)
    if reps is not None:
        config["campaign"]["repetitions"] = reps
    return config


def make_workdir(work: Path, config: dict[str, Any], tree: Path = REPO) -> Path:
    """A throw-away checkout for ``config`` (see the module docstring); its workflow, profiles,
    containers and kernels from ``tree`` (another commit's ``git archive``), the stacks from this one."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("workflow", "profiles", "containers"):
        (work / name).symlink_to(tree / name)
    (work / "src").mkdir()
    (work / "src" / "kernels").symlink_to(tree / "src" / "kernels")
    config = copy.deepcopy(config)
    config["campaign"]["stacks_dir"] = str(REPO / ".stacks")
    if "containers" in config:
        config["containers"]["images_dir"] = str(REPO / "results" / "images")
    (work / "config").mkdir()
    (work / CAMPAIGN_CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    return work


def venv_env() -> dict[str, str]:
    """This interpreter's bin first on PATH: the workflow's rules call the `mpiatlas` entry point."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


def run_campaign(work: Path, name: str, timeout_s: float) -> CampaignRun:
    """``mpiatlas campaign`` in ``work``, timed from start to exit, then its cells' provenance."""
    argv = [sys.executable, "-m", "mpiatlas.cli", "campaign", "--config", CAMPAIGN_CONFIG, "--directory", str(work)]
    log = work / "campaign.out"
    start = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(argv, cwd=work, env=venv_env(), stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BenchError(f"campaign {name} did not finish within {timeout_s:.0f} s (output: {log})") from None
    wall = time.monotonic() - start
    run = CampaignRun(name, work, wall, done.returncode, sealed_launches(work / "results" / name / "raw"))
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BenchError(f"campaign {name} exited {done.returncode} after {wall:.1f} s; end of {log}:\n{tail}")
    return run


def sealed_launches(raw: Path) -> list[dict[str, Any]]:
    """provenance.json of every sealed cell under ``raw`` (any depth: the cell layout may change)."""
    records = []
    for path in sorted(raw.rglob("provenance.json")):
        if any(part.startswith(".") for part in path.relative_to(raw).parts):
            continue  # an unsealed scratch directory (.repN.*) is no result
        record = json.loads(path.read_text())
        record["_path"] = str(path)
        records.append(record)
    return records


def pingpong_launches(run: CampaignRun) -> list[dict[str, Any]]:
    """The PingPong launches of a campaign that ended ``ok`` and recorded argv, env and wall_s."""
    chosen = []
    for record in run.launches:
        coords = record.get("coords") or {}
        status_path = Path(record["_path"]).with_name("status.json")
        status = json.loads(status_path.read_text()).get("status") if status_path.is_file() else None
        if coords.get("benchmark") == "PingPong" and status == "ok" and record.get("argv") and record.get("wall_s"):
            chosen.append(record)
    if not chosen:
        raise BenchError(f"campaign {run.name}: no PingPong cell ended ok with argv and wall_s in its provenance")
    return chosen
