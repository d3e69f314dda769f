"""Snakemake started for a local run never asks a SLURM controller anything (the SLURM executor
plugin runs ``scontrol show config`` when imported: up to 10 s per start with slurmctld down),
and a run whose executor is a plugin's still gets that plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


from conftest import REPO, campaign_workdir
from mpiatlas.campaign import snakemake_start

# The SLURM client tools, as they are on a login node whose controller is down: sinfo, squeue and
# sacct exist; scontrol appends its arguments to a file, then fails as an unreachable controller does.
SCONTROL = """#!/bin/sh
echo "$*" >> "{calls}"
echo 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2
exit 1
"""


def slurm_client_path(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH starts with SLURM client tools, and the file scontrol records its calls in."""
    tools, calls = tmp_path / "slurm-client", tmp_path / "scontrol-calls"
    tools.mkdir()
    for name in ("sinfo", "squeue", "sacct"):
        (tools / name).write_text("#!/bin/sh\nexit 0\n")
    (tools / "scontrol").write_text(SCONTROL.format(calls=calls))
    for tool in tools.iterdir():
        tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    return env, calls


def write_profile(tmp_path: Path, text: str) -> Path:
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "profile.yaml").write_text(text)
    return profile


def test_the_executor_is_the_command_lines_then_the_profiles_then_local(tmp_path: Path) -> None:
    slurm = write_profile(tmp_path, "executor: slurm\njobs: 50\n")
    assert snakemake_start.executor_of(["--profile", str(REPO / "profiles" / "local")]) == "local"
    assert snakemake_start.executor_of(["--profile", str(REPO / "profiles" / "slurm")]) == "mpiatlas-slurm"
    assert snakemake_start.executor_of(["-n", f"--profile={slurm}"]) == "slurm"
    assert snakemake_start.executor_of(["--profile", str(slurm), "--executor", "local"]) == "local"
    assert snakemake_start.executor_of(["-e", "slurm"]) == "slurm"
    assert snakemake_start.executor_of(["--cores", "1"]) == "local"


def test_a_local_dry_run_never_calls_scontrol_and_a_plain_snakemake_start_does(tmp_path: Path) -> None:
    # The plugin is installed by the README's test command ('.[slurm]'): no skip.
    env, calls = slurm_client_path(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    campaign_workdir(work, "config/test/tiny.yaml")
    args = ["-n", "--snakefile", "workflow/Snakefile", "--configfile", "config/campaign.yaml", "--profile",
            "profiles/local"]
    ours = subprocess.run(snakemake_start.argv(*args), cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert ours.returncode == 0, (ours.stdout + ours.stderr)[-3000:]
    # The DAG is the campaign's: its cell groups and the report are planned.
    assert "cell_group" in ours.stdout and "report_full" in ours.stdout, ours.stdout[-3000:]
    assert not calls.exists(), f"scontrol was called: {calls.read_text()}"
    # The same tools make a plain Snakemake start ask the controller: what the test above guards against.
    plain = subprocess.run([sys.executable, "-m", "snakemake", "--version"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert calls.read_text().splitlines() == ["show config"]


def test_a_slurm_profile_still_gets_the_slurm_executor(tmp_path: Path) -> None:
    env, _ = slurm_client_path(tmp_path)
    profile = write_profile(tmp_path, "executor: slurm\nslurm-status-command: squeue\n")
    # The plugin's own option is accepted only when the plugin is registered.
    out = subprocess.run(snakemake_start.argv("--profile", str(profile), "--help"), cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--slurm-status-command" in out.stdout
