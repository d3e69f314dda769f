"""Multi-node cells without a scheduler: ``mpirun`` over ssh to the hosts of a ``hosts:`` list or a
``hostfile:`` (issue 13, part 3).

Each stack starts its ranks with its own launcher (Open MPI ``--host`` + ``plm_rsh_agent``; hydra,
Intel MPI and MPICH, ``-hosts`` + an ssh bootstrap), through the ssh agent of the config's ``ssh:``
block (default ``ssh``; ``ssh.config`` adds ``-F <file>``). Before a cell launches, every host it
uses answers the same node probe as under SLURM (hostname, kernel boot id, cpus), through the very
same ssh path; after it, every rank's host is read from the stack's own output (Open MPI's
``--report-bindings`` lines name the host, Intel MPI's pin table too) and judged against the plan
(block | cyclic over the hosts, ppn ranks on each) by mpiatlas.node.multinode, as for SLURM.

A cell over m nodes runs on the first m hosts of the list, in order: host i is "node i" of the plan.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from mpiatlas.spine.cell_spec import CellSpec, HostSpec, SshSpec
    from mpiatlas.spine.campaign import Campaign

from mpiatlas.node import multinode
from mpiatlas.stacks.base import StackError

# What a host name may be: no whitespace, no leading '-' (ssh would take it for an option).
HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


# Open MPI --report-bindings (printed by each host's daemon): "[node1:17684] MCW rank 0 bound to ..."
# or "... MCW rank 0 is not bound"; 5.x: "[node1:17684] Rank 0 bound to package[0]...".
_OMPI_REPORT = re.compile(r"^\[([^\]:\s]+):\d+\] (?:MCW )?[Rr]ank (\d+) (?:bound|is not bound)", re.MULTILINE)
# Intel MPI's pin table (I_MPI_DEBUG >= 4): "[0] MPI startup(): 2       18216    node1      {1}".
_IMPI_PIN = re.compile(r"^\[0\] MPI startup\(\):\s+(\d+)\s+\d+\s+(\S+)\s+\{[\d,\s-]+\}\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Host:
    name: str
    slots: int | None = None  # ranks the host takes at most (None: as many as a cell puts there)


class SshRecord(TypedDict):
    """The remote shell as provenance.json keeps it (``ssh``)."""

    agent: str
    args: list[str]


@dataclass(frozen=True)
class Ssh:
    """The remote shell every launcher and the probe use: ``agent`` (a program) and its options."""

    agent: str
    args: tuple[str, ...] = ()

    def record(self) -> SshRecord:
        return {"agent": self.agent, "args": list(self.args)}


def remote_probe() -> str:
    """The node probe srun runs on every node (multinode: hostname, boot id, cpus, RDMA ports), as the
    one command string ssh hands the host's login shell: this python (the hosts share its path, as
    under SLURM) and the probe's code, quoted for that shell (no config value is in it)."""
    return shlex.join([sys.executable, "-c", multinode.PROBE_CODE])


# -- configuration ------------------------------------------------------------------------------


def parse_hostfile(text: str, path: str = "<hostfile>") -> list[Host]:
    """Hosts of a hostfile in Open MPI's (``node1 slots=2``) or hydra's (``node1:2``) form, one per
    line; ``#`` starts a comment."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([^\s:]+)(?::(\d+)|\s+slots\s*=\s*(\d+))?(?:\s+max[_-]slots\s*=\s*\d+)?", line)
        if match is None or not HOST_NAME.match(match[1]):
            raise StackError(f"{path}:{number}: expected 'HOST', 'HOST slots=N' or 'HOST:N', got {raw.strip()!r}")
        slots = match[2] or match[3]
        hosts.append(Host(match[1], int(slots) if slots else None))
    if not hosts:
        raise StackError(f"{path}: names no host")
    return hosts


def config_hosts(config: Campaign, source: str = "<config>") -> list[Host] | None:
    """The hosts of ``hosts:`` (names, or ``{name, slots}``) or of the file ``hostfile:`` names;
    None when the config has neither. Raises StackError naming the key and what was expected."""
    if config.hosts and config.hostfile:
        raise StackError(f"{source}: hosts and hostfile: give one of them, not both")
    if config.hostfile:
        path = Path(config.hostfile)
        try:
            text = path.read_text()
        except OSError as exc:
            raise StackError(f"{source}: hostfile: cannot read {path}: {exc.strerror}") from None
        hosts = parse_hostfile(text, str(path))
    elif config.hosts:
        hosts = [Host(h) if isinstance(h, str) else Host(h["name"], h.get("slots")) for h in config.hosts]
    else:
        return None
    names = [h.name for h in hosts]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise StackError(f"{source}: hosts: {doubled} listed more than once (give a host's ranks as its slots)")
    return hosts


def check_config(config: Campaign, source: str) -> list[str]:
    """Problems of the hosts/ssh keys that the schema cannot see (config.validate reports them)."""
    problems = []
    try:
        config_hosts(config, source)
    except StackError as exc:
        problems.append(str(exc))
    if (config.hosts or config.hostfile) and config.campaign.launcher == "srun":
        problems.append(f"{source}: hosts: mpirun over ssh needs campaign.launcher mpirun (or auto outside SLURM), "
                        "not srun (srun places ranks on the allocation's nodes)")
    return problems


def spec_fields(config: Campaign) -> tuple[list[HostSpec], SshSpec] | None:
    """What a cell's spec carries of the hosts/ssh keys (None without hosts: the spec has no such keys)."""
    hosts = config_hosts(config)
    if hosts is None:
        return None
    return ([{"name": h.name, "slots": h.slots} for h in hosts],
            {"agent": config.ssh.agent, "config": _absolute(config.ssh.config)})


def _absolute(path: str | None) -> str | None:
    # Launches run in a scratch directory: a relative ssh config would point nowhere.
    return str(Path(path).resolve()) if path else None


# -- one cell -------------------------------------------------------------------------------------


def cell_hosts(spec: CellSpec, nodes: int, ppn: int) -> list[Host]:
    """The first ``nodes`` hosts of the spec, each able to take ``ppn`` ranks; StackError (unavailable)
    when there are too few or a host has fewer slots."""
    hosts = [Host(h["name"], h.get("slots")) for h in spec.get("hosts") or []]
    if not hosts:
        raise StackError(f"unavailable: a cell over {nodes} nodes needs a SLURM allocation (launcher srun) or a "
                         "hosts: list / hostfile: for mpirun over ssh")
    if len(hosts) < nodes:
        raise StackError(f"unavailable: a cell over {nodes} nodes, but hosts lists {len(hosts)}: "
                         f"{[h.name for h in hosts]}")
    small = [f"{h.name} ({h.slots})" for h in hosts[:nodes] if h.slots is not None and h.slots < ppn]
    if small:
        raise StackError(f"unavailable: {ppn} ranks per node, but host(s) {', '.join(small)} have fewer slots")
    return hosts[:nodes]


def spec_ssh(spec: CellSpec) -> Ssh:
    """The spec's ssh agent, found on PATH (StackError when it is not), and its ``-F`` option."""
    ssh = spec.get("ssh")
    agent = (ssh["agent"] if ssh else None) or "ssh"
    found = shutil.which(agent)
    if found is None:
        raise StackError(f"unavailable: ssh agent {agent!r} (config ssh.agent) not found")
    config = ssh["config"] if ssh else None
    return Ssh(found, ("-F", config) if config else ())


def probe_hosts(hosts: Sequence[Host], ssh: Ssh, timeout_s: float = 60) -> list[multinode.NodeFacts]:
    """Each host's hostname, boot id and cpus, asked through ``ssh`` (the path the launchers take).
    A host that does not answer, or answers with another name, fails the cell."""
    facts = []
    for host in hosts:
        argv = [ssh.agent, *ssh.args, host.name, remote_probe()]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise StackError(f"failed: probing host {host.name} over {ssh.agent} took over {timeout_s} s") from None
        found = multinode.parse_probe(out.stdout)
        if out.returncode != 0 or len(found) != 1:
            raise StackError(f"failed: probing host {host.name} with {' '.join(argv[:-1])} (exit {out.returncode}): "
                             f"{(out.stderr.strip() or out.stdout.strip())[-300:]}")
        facts.append(found[0])
    return facts


def rank_hosts(output: str) -> dict[int, str]:
    """rank -> host from a launch's output: srun's ``--cpu-bind=verbose`` lines, else the stack's own
    (Open MPI's ``--report-bindings``, Intel MPI's pin table); {} when none names a host."""
    hosts = multinode.srun_hosts(output)
    if hosts:
        return hosts
    hosts = {int(rank): host for host, rank in _OMPI_REPORT.findall(output)}
    if hosts:
        return hosts
    return {int(rank): host for rank, host in _IMPI_PIN.findall(output)}


# A line that starts with two or more rank prefixes: "[0] [2] MPI startup(): shm segment ...".
_SPLIT_PREFIX = re.compile(r"^((?:\[\d+\] )+)(\[\d+\] .*)$")


def rejoin_split_lines(text: str) -> str:
    """Undo hydra's chunk-wise merging of the ranks' output over ssh: a rank's ``[2] `` prefix and the
    rest of its line reach mpiexec in two pieces, another host's whole line in between (measured with
    Intel MPI 2021.16 on the namespace cluster, 2 of 6 launches; ``-ordered-output`` does not help;
    srun forwards whole lines). ``[0] [2] MPI startup(): A`` followed by ``MPI startup(): B`` is
    ``[2] MPI startup(): A`` (the whole line) and ``[0] MPI startup(): B`` (the prefix waiting for its
    text, which comes next without one). Other lines are left as they are."""
    pending: list[str] = []
    lines = []
    for line in text.split("\n"):
        match = _SPLIT_PREFIX.match(line)
        if match:
            pending += re.findall(r"\[\d+\] ", match[1])
            lines.append(match[2])
        elif pending and line and not line.startswith("["):
            lines.append(pending.pop(0) + line)
        else:
            lines.append(line)
    return "\n".join(lines)

