"""Intel MPI from the PyPI ``impi-rt`` wheel (it ships IMB-MPI1 and friends).

The mixed transport ``shm+ofi-tcp`` (``I_MPI_FABRICS=shm:ofi``: shared memory within a node, the
libfabric tcp provider between nodes) is judged per class of pairs from ``I_MPI_DEBUG=10`` (measured
on 2021.16 over the namespace cluster, tests/data/mixed/): each node's first rank prints
``[2] MPI startup(): shm segment size (1068 MB per rank) * (2 local ranks) = 2136 MB total`` (its
node's ranks share one shm segment) and rank 0 ``libfabric provider: tcp``. Intel MPI names no path
per pair of ranks, so the evidence is per node (on-node pairs) and per job (cross-node pairs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar

from mpiatlas.stacks import collectives
from mpiatlas.stacks.base import Launch, CROSS_NODE, ON_NODE, LaunchSpec, PairEvidence, Stack, StackError, Transport
from mpiatlas.stacks.base import cpu_list, hydra_hosts, mpmd_contexts, per_node_local, srun_argv, srun_binding
from mpiatlas.stacks.fabrics import core_provider

IMPI_VERSION = "2021.16.1"  # 2021.19 needs a libfabric wheel no registry has

# Collectives whose algorithm Intel MPI lets us force with I_MPI_ADJUST_<COLL>.
ADJUSTABLE = ("allgather", "allreduce", "alltoall", "barrier", "bcast", "gather", "reduce", "scatter")

_PIN_ROW = re.compile(r"^\[0\] MPI startup\(\):\s+(\d+)\s+\d+\s+(\S+)\s+\{([\d,\s-]+)\}\s*$")
_PROVIDER = re.compile(r"libfabric provider:\s*(\S+)")
_FABRICS = re.compile(r"I_MPI_FABRICS=(\S+)")
_SHM_SEGMENT = re.compile(r"^\[(\d+)\] MPI startup\(\): shm segment size .*\((\d+) local ranks?\)", re.MULTILINE)
_PROVIDER_LINE = re.compile(r"^\[\d+\] MPI startup\(\): libfabric provider:\s*(\S+).*$", re.MULTILINE)
# Where a PMIx client library usually is (Debian/Ubuntu libpmix2, RHEL pmix, a site's /opt build).
PMIX_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/libpmix.so.2",
    "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
    "/usr/lib/aarch64-linux-gnu/libpmix.so.2",
    "/usr/lib64/libpmix.so.2",
    "/usr/lib64/pmix/lib/libpmix.so.2",
    "/opt/pmix/lib/libpmix.so.2",
)


class IntelMPI(Stack):
    kind = "intelmpi"
    # srun: direct launch inside a SLURM allocation through PMIx (`srun --mpi=pmix`, Intel MPI's
    # I_MPI_PMI=pmix client). Measured on slurm 22.05 + OpenPMIx 4.2: under srun Intel MPI does not
    # pin (I_MPI_PIN is ignored), srun does (--cpu-bind=map_cpu, in rank order), and the
    # I_MPI_DEBUG=5 pin table shows the affinity each rank really has.
    launchers = ("mpirun", "srun")
    # I_MPI_PIN_DOMAIN=[mask,...]: one cpu mask per rank, in rank order (hybrid ranks). Measured on
    # 2021.16: the pin table then shows each rank's whole set, e.g. "{0-1}". Under srun:
    # --cpu-bind=mask_cpu:<mask>,... (measured: the pin table shows the same sets).
    multi_core_pins = ("mpirun", "srun")
    pypi_packages = (f"impi-rt=={IMPI_VERSION}", f"impi-devel=={IMPI_VERSION}")
    transports: ClassVar[dict[str, Transport]] = {
        t.name: t
        for t in (
            Transport("shm", {"I_MPI_FABRICS": "shm"}, description="shared memory only (one node)", expect="shm"),
            Transport("ofi-tcp", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "tcp"},
                      description="libfabric tcp provider for all traffic", expect="tcp"),
            Transport("shm+ofi-tcp", {"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "tcp"},
                      description="shared memory within a node, libfabric tcp between nodes",
                      expect="shm", expect_inter="tcp"),
            Transport("ofi-shm", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "shm"},
                      description="libfabric shm provider", expect="shm"),
            Transport("ofi-verbs", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "verbs"},
                      description="libfabric verbs (InfiniBand/RoCE clusters)", expect="verbs"),
            Transport("ofi-mlx", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "mlx"},
                      description="libfabric mlx (UCX-based, Mellanox clusters)", expect="mlx"),
            Transport("ofi-psm3", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "psm3"},
                      description="libfabric psm3 (Intel Ethernet/Omni-Path)", expect="psm3"),
        )
    }

    def _root(self) -> Path:
        # The same layout (bin/, lib/) under the prefix for the PyPI wheels and a system install.
        return self.prefix

    def launcher_path(self) -> Path:
        return self._root() / "bin" / "mpirun"

    def runtime_env(self) -> dict[str, str]:
        root = self._root()
        return {
            "I_MPI_ROOT": str(root),
            "PATH": str(root / "bin"),
            "LD_LIBRARY_PATH": str(root / "lib"),
            "FI_PROVIDER_PATH": str(root / "lib"),
        }

    def mpicc(self) -> list[str]:
        # The impi-devel wrapper defaults to gcc through I_MPI_CC.
        return [str(self._root() / "bin" / "mpicc")]

    def imb_binary(self, name: str = "IMB-MPI1") -> Path | None:
        path = self._root() / "bin" / name
        return path if path.exists() else None

    def launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        self.check_launcher(spec.launcher)
        self.check_rank_argvs(spec)
        transport = self.transport(spec.transport)
        env = dict(transport.env)
        # Level 5 prints the pin table and the libfabric provider: our evidence; level 10 also each
        # node's shm segment, the on-node evidence of a mixed transport.
        env["I_MPI_DEBUG"] = "10" if transport.mixed else "5"
        if spec.pins is not None and len(spec.pins) != spec.np and spec.nodes == 1:
            raise StackError(f"intelmpi: {spec.np} ranks but {len(spec.pins)} pins")
        if spec.pins is not None and spec.launcher == "mpirun":
            env["I_MPI_PIN"] = "1"
            # Intel MPI sorts this list itself (order is ignored): pins are a set, the same on every host.
            env["I_MPI_PIN_PROCESSOR_LIST"] = ",".join(str(c) for c in per_node_local(spec.pins, spec.nodes,
                                                                                      spec.distribution, spec.ppn))
        if spec.pin_sets is not None:
            self.check_pin_sets(spec)
        if spec.pin_sets is not None and spec.launcher == "mpirun":  # under srun, srun binds (_srun)
            env["I_MPI_PIN"] = "1"
            # One mask per rank *of a host* (measured over ssh: more masks than local ranks is an error).
            local_sets = per_node_local(spec.pin_sets, spec.nodes, spec.distribution, spec.ppn)
            env["I_MPI_PIN_DOMAIN"] = "[" + ",".join(hex(sum(1 << c for c in cpus)) for cpus in local_sets) + "]"
        if spec.oversubscribe:
            # Wait mode: ranks block instead of busy-polling when there are more ranks than cores.
            env["I_MPI_WAIT_MODE"] = "1"
        if spec.collective and spec.algorithm not in (None, "default"):
            coll = spec.collective.lower()
            if coll not in ADJUSTABLE:
                raise StackError(f"intelmpi: cannot force an algorithm for {coll!r}; adjustable: {ADJUSTABLE}")
            # Ids are opaque presets: "id3" (or "3"), validated against the ids measured to take
            # effect in this version (an inapplicable id falls back silently).
            name = str(spec.algorithm)
            name = f"id{name}" if name.isdigit() else name
            ident = collectives.resolve(self.kind, self.requested_version or IMPI_VERSION, coll, name, np=spec.np)
            env[f"I_MPI_ADJUST_{coll.upper()}"] = str(ident)
        if spec.launcher == "srun":
            argv, pmi_env = self._srun(spec)
            return Launch(argv=[*argv, *program], env=env | pmi_env)
        if spec.rank_argvs is not None:
            # One context per rank (hydra's MPMD form); Intel MPI pins by default, and each rank's
            # argv pins it here: I_MPI_PIN=0. Its pin table (I_MPI_DEBUG=5) then shows the affinity each
            # rank's main thread has in MPI_Init (measured: the first cpu of its likwid-pin list).
            env["I_MPI_PIN"] = "0"
            return Launch(argv=[str(self.launcher_path()), *mpmd_contexts("-n", spec.rank_argvs)], env=env)
        argv = [str(self.launcher_path()), "-n", str(spec.np), *hydra_hosts(spec)]
        if spec.rsh_agent:
            # mpirun over ssh: hydra's proxies start on the hosts through this agent (and its options).
            argv += ["-bootstrap", "ssh", "-bootstrap-exec", spec.rsh_agent]
            argv += ["-bootstrap-exec-args", " ".join(spec.rsh_args)] if spec.rsh_args else []
        return Launch(argv=[*argv, *program], env=env)

    def _srun(self, spec: LaunchSpec) -> tuple[list[str], dict[str, str]]:
        """``srun --mpi=pmix`` inside the job's allocation; srun binds (Intel MPI does not under srun)."""
        pmix = os.environ.get("I_MPI_PMI_LIBRARY") or next((p for p in PMIX_LIBRARIES if Path(p).exists()), None)
        if pmix is None:
            raise StackError("unavailable: srun launch of Intel MPI needs a PMIx client library (libpmix.so.2; "
                             "Debian: libpmix-dev) or I_MPI_PMI_LIBRARY set to one")
        argv = srun_argv(spec)
        return argv, {"I_MPI_PMI": "pmix", "I_MPI_PMI_LIBRARY": pmix}

    def obtained_binding(self, output: str) -> dict[int, set[int]]:
        binding: dict[int, set[int]] = {}
        for line in output.splitlines():
            match = _PIN_ROW.match(line.strip())
            if match:
                binding[int(match.group(1))] = cpu_list(match.group(3))
        if not binding:
            # No Intel pin table (e.g. MPI_Init never completed): srun's --cpu-bind=verbose masks.
            binding = srun_binding(output)
        return binding

    def pair_evidence(self, output: str, rank_hosts: dict[int, str]) -> list[PairEvidence]:
        """Each node's shm segment line speaks for the pairs of its ranks (the ranks on the host of
        the rank that printed it; ``rank_hosts`` falls back on the pin table), the provider line for
        every cross-node pair."""
        hosts = dict(rank_hosts) or dict(self._pin_hosts(output))
        evidence = []
        for match in _SHM_SEGMENT.finditer(output):
            leader = int(match[1])
            ranks = tuple(sorted(r for r, h in hosts.items() if h == hosts.get(leader))) or (leader,)
            evidence.append(PairEvidence(ON_NODE, "shm", match[0].strip(), ranks=ranks))
        for match in _PROVIDER_LINE.finditer(output):
            evidence.append(PairEvidence(CROSS_NODE, core_provider(match[1]), match[0].strip()))
        return evidence

    @staticmethod
    def _pin_hosts(output: str) -> dict[int, str]:
        hosts = {}
        for line in output.splitlines():
            match = _PIN_ROW.match(line.strip())
            if match:
                hosts[int(match.group(1))] = match.group(2)
        return hosts

    def obtained_transport(self, output: str) -> str | None:
        provider = _PROVIDER.search(output)
        if provider:
            # "verbs;ofi_rxm" (core;utility provider, Intel MPI 2019-2021) is the verbs provider.
            return core_provider(provider.group(1))
        fabrics = _FABRICS.search(output)
        if fabrics and fabrics.group(1) == "shm":
            return "shm"
        return None
