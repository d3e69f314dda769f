"""MPICH: Debian 4.0 (``source: system``, ch4:ucx) and the PyPI ``mpich`` 5.0 wheel (ch4:ucx,ofi).

Debian's MPICH 4.0.2 is built with the UCX netmod only and routes intra-node
traffic through UCX, so ``UCX_TLS`` picks the transport. MPICH 5 uses its own
POSIX shared memory on one node (``default``); ``MPIR_CVAR_NOLOCAL=1`` plus
``MPIR_CVAR_CH4_NETMOD`` force a netmod instead.

Evidence the launch prints:

* binding: ``HYDRA_TOPO_DEBUG=1`` makes hydra print ``process <local rank> binding: 0100``
  (one character per OS cpu, on stdout, one line per rank);
* UCX: ``UCX_LOG_LEVEL=info UCX_LOG_FILE=stderr`` -> ``ep_cfg[1]: tag(tcp/lo tcp/eth0)``; the InfiniBand
  ``ucx-rc``/``ucx-dc``/``ucx-ud`` are judged per pair class from the same log (stacks.fabrics);
* OFI (5.x): ``MPIR_CVAR_DEBUG_SUMMARY=1`` -> ``libfabric provider: tcp - 192.0.2.0/24`` (rank 0, stdout);
* default (5.x): ``MPIR_CVAR_DEBUG_SUMMARY=2`` -> a ``====== POSIX Topo Dist ======`` block listing
  several local ranks, printed only when the ranks share MPICH's POSIX shared memory.
* shm+ofi-tcp (5.x, mixed: MPICH's POSIX shared memory within a node, the OFI netmod's tcp provider
  between nodes): ``MPIR_CVAR_DEBUG_SUMMARY=2`` prints both, per rank ``Rank: 2, Local_rank: 0 [ 0, 0 ]``
  (one distance per rank of its node sharing the shm) and ``libfabric provider: tcp - 10.81.0.0/24``
  (measured with the 5.0.2 wheel over the namespace cluster, tests/data/mixed/). Without
  ``MPIR_CVAR_CH4_NETMOD`` the wheel's netmod is UCX (its "UCX netmod Capability" block), so
  ``default`` stays a one-node transport here.

Under SLURM (launcher ``srun``) the ranks start with ``srun --mpi=pmi2``: MPICH's built-in
"simple" PMI client finds slurm's pmi2 plugin through ``PMI_FD``/``PMI_RANK``/``PMI_SIZE`` (the
plugin speaks the PMI-1 wire protocol too). Measured on slurm 22.05 with a 2-rank IMB PingPong
in one job: Debian 4.0.2 and the 5.0.2 wheel both get one 2-rank world with ``--mpi=pmi2``;
with ``--mpi=pmix`` Debian 4.0.2 silently starts two 1-rank worlds (two rank 0s, no PMIx
client) and 5.0.2 aborts ("unsupported PMI version PMIx"); ``--mpi=none`` gives singletons too.
srun binds (``--cpu-bind=verbose``, its mask lines are the binding evidence), and the transport
knobs hydra would pass with ``-genv`` go in the environment srun hands to every rank.

Intel's ``IMB-MPI1`` (from ``impi-rt``) runs on MPICH through the MPICH ABI
(``libmpi.so.12``): the wheel ships that name; Debian ships ``libmpich.so.12``,
so a directory with a ``libmpi.so.12`` symlink goes first on ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cached_property
from pathlib import Path
from typing import ClassVar

from mpiatlas.files import user_cache_dir
from mpiatlas.stacks import collectives, fabrics
from mpiatlas.stacks.base import Launch, CROSS_NODE, ON_NODE, LaunchSpec, PairEvidence, Stack, StackError, Transport
from mpiatlas.stacks.base import hydra_hosts, mpmd_contexts, per_node_local, run_tool, series_of, srun_argv
from mpiatlas.stacks.base import srun_binding
from mpiatlas.stacks.openmpi import _imb_in, ucx_transport

MPICH_PYPI_VERSION = "5.0.2"

_DEFAULT_SERIES = {"system": "4.0", "pypi": "5.0"}
# Netmods each build has when it cannot be asked (mpichversion "MPICH Device").
_DEFAULT_NETMODS = {"4": {"ucx"}, "5": {"ucx", "ofi"}}

_UCX_LOG = {"UCX_LOG_LEVEL": "info", "UCX_LOG_FILE": "stderr"}
_NETMOD_ONLY = {"MPIR_CVAR_NOLOCAL": "1"}


def _transports(major: int) -> dict[str, Transport]:
    if major < 5:
        table = [
            Transport("ucx-sm", {"UCX_TLS": "sm,self"}, description="UCX shared-memory transports", expect="ucx:sm"),
            Transport("ucx-posix", {"UCX_TLS": "posix,self"}, description="UCX posix shared memory", expect="ucx:posix"),
            Transport("ucx-tcp", {"UCX_TLS": "tcp,self"}, description="UCX tcp", expect="ucx:tcp"),
            *fabrics.ucx_ib_transports({}, what="ch4:ucx"),
        ]
    else:
        table = [
            Transport("default", {}, description="MPICH's own POSIX shared memory on one node (UCX between nodes)",
                      expect="shm"),
            Transport("shm+ofi-tcp", {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"},
                      description="MPICH's POSIX shared memory within a node, OFI netmod (tcp) between nodes",
                      expect="shm", expect_inter="ofi:tcp"),
            Transport("ofi-tcp", {**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"},
                      description="OFI netmod, libfabric tcp provider, for all traffic", expect="ofi:tcp"),
            Transport("ofi-shm", {**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "shm"},
                      description="OFI netmod, libfabric shm provider", expect="ofi:shm"),
            Transport("ucx-sm", {**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "sm,self"},
                      description="UCX netmod, UCX shared-memory transports", expect="ucx:sm"),
            Transport("ucx-posix", {**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "posix,self"},
                      description="UCX netmod, posix shared memory", expect="ucx:posix"),
            Transport("ucx-tcp", {**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp,self"},
                      description="UCX netmod, tcp", expect="ucx:tcp"),
            # All traffic through UCX (NOLOCAL), so that on-node pairs show UCX's shared memory.
            *fabrics.ucx_ib_transports({**_NETMOD_ONLY, "MPIR_CVAR_CH4_NETMOD": "ucx"}, what="UCX netmod"),
        ]
    return {t.name: t for t in table}


def _netmod(name: str) -> str | None:
    name = name.split("+", 1)[-1]  # a mixed transport's netmod is its inter-node part
    return name.split("-", 1)[0] if name.startswith(("ucx-", "ofi-")) else None


_BINDING = re.compile(r"^process (\d+) binding: ([01]+)\s*$", re.MULTILINE)
# configure options that replace MPICH's built-in simple PMI client (mpichversion "MPICH configure").
_PMI_OPTION = re.compile(r"--with-pmi=(\S+)|--with-pmix(?:=\S*)?(?=\s|$)")
# --with-pmi values that keep the simple client, whose PMI_FD wire protocol slurm's pmi2 plugin serves.
_SIMPLE_PMI = frozenset({"simple", "pmi1", "pmi2", "pmi2/simple", "default", "yes"})
_OFI = re.compile(r"libfabric provider:\s*([^\s;]+)")
_POSIX_RANK = re.compile(r"^Rank: \d+, Local_rank: \d+ \[([^\]]*)\]", re.MULTILINE)
_POSIX_LINE = re.compile(r"^Rank: (\d+), Local_rank: \d+ \[([^\]]*)\]", re.MULTILINE)
_OFI_LINE = re.compile(r"^libfabric provider:\s*([^\s;]+).*$", re.MULTILINE)


class MPICH(Stack):
    kind = "mpich"
    pypi_packages = (f"mpich=={MPICH_PYPI_VERSION}",)
    transports: ClassVar[dict[str, Transport]] = _transports(5)
    # srun --mpi=pmi2 direct launch inside a SLURM allocation (see the module docstring).
    launchers = ("mpirun", "srun")
    # hydra's `-bind-to user:0+1,2+3`, srun's `--cpu-bind=mask_cpu:0x3,0xc`: several cpus per
    # rank (hybrid ranks).
    multi_core_pins = ("mpirun", "srun")

    def __init__(self, prefix: Path, *, source: str = "pypi", version: str | None = None,
                 imb_from: Path | None = None, abi_dir: Path | None = None) -> None:
        super().__init__(prefix, source=source, version=version)
        self.imb_from = Path(imb_from) if imb_from else None
        self._abi_dir = Path(abi_dir) if abi_dir else None
        self.transports = _transports(self.major)  # type: ignore[misc]

    # -- what is installed -----------------------------------------------------
    def _bin(self, name: str) -> Path:
        if self.source == "system":
            name = {"mpiexec": "mpiexec.mpich", "mpicc": "mpicc.mpich"}.get(name, name)
        elif name == "mpiexec":
            name = "mpiexec.hydra"  # the wheel also ships mpiexec.gforker
        return self.prefix / "bin" / name

    def launcher_path(self) -> Path:
        return self._bin("mpiexec")

    def mpicc(self) -> list[str]:
        return [str(self._bin("mpicc"))]

    def libmpi(self) -> Path | None:
        """The MPICH-ABI library (libmpi.so.12 in the wheel, libmpich.so.12 on Debian)."""
        candidates = [self.prefix / "lib" / "libmpi.so.12", *sorted(self.prefix.glob("lib/*-linux-gnu*/libmpich.so.12")),
                      self.prefix / "lib" / "libmpich.so.12", self.prefix / "lib64" / "libmpich.so.12"]
        return next((p for p in candidates if p.exists()), None)

    def libmpi_files(self) -> set[str]:
        """The MPICH-ABI library (what Intel's IMB loads through abi_dir) and the wheel's standard-ABI
        libmpi_abi.so (MPICH 5), by real path."""
        lib = self.libmpi()
        own = {os.path.realpath(p) for p in self.prefix.glob("lib/libmpi_abi.so.*") if p.is_file()}
        return own | ({os.path.realpath(lib)} if lib is not None else set())

    def abi_dir(self) -> Path | None:
        """A directory whose ``libmpi.so.12`` is this MPICH (created on first use)."""
        lib = self.libmpi()
        if lib is None:
            return None
        if lib.name == "libmpi.so.12":
            return lib.parent
        directory = self._abi_dir or user_cache_dir("mpich-abi-" + hashlib.sha1(str(lib).encode()).hexdigest()[:10])
        link = directory / "libmpi.so.12"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not (link.is_symlink() and Path(os.readlink(link)) == lib):
                tmp = directory / f".libmpi.so.12.{os.getpid()}"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(lib)
                os.replace(tmp, link)
        except OSError as exc:
            raise StackError(f"mpich: cannot create the MPICH-ABI directory {directory}: {exc}") from exc
        return directory

    def runtime_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.source != "system":
            env["PATH"] = str(self.prefix / "bin")
        abi = self.abi_dir()
        if abi is not None:
            env["LD_LIBRARY_PATH"] = str(abi)
        return env

    def _probe_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.source != "system":
            env["PATH"] = f"{self.prefix / 'bin'}:{env.get('PATH', '')}"
        return env

    def _tool_output(self, name: str) -> str | None:
        """The stdout of this stack's tool ``name`` (no arguments), None if absent or failing."""
        out = run_tool(self._bin(name), env=self._probe_env())
        return out.stdout if out is not None and out.returncode == 0 else None

    @cached_property
    def _mpichversion(self) -> str | None:
        return self._tool_output("mpichversion")

    def version(self) -> str:
        text = self._mpichversion
        match = re.search(r"MPICH Version:\s*(\S+)", text or "")
        return f"MPICH {match[1]}" if match else super().version()

    @cached_property
    def series(self) -> str:
        """'4.0' / '5.0': the requested version, else the installed one, else the source's default."""
        installed = re.search(r"MPICH Version:\s*(\d+\.\d+)", self._mpichversion or "")
        return series_of(self.requested_version, installed[1] if installed else None, _DEFAULT_SERIES, self.source)

    @property
    def major(self) -> int:
        return int(self.series.split(".")[0])

    def netmods(self) -> set[str]:
        """CH4 netmods of this build: ``MPICH Device: ch4:ucx ofi`` -> {ucx, ofi}."""
        match = re.search(r"MPICH Device:\s*ch4:(.+)", self._mpichversion or "")
        if match:
            return set(re.split(r"[\s,]+", match[1].strip())) - {""}
        return set(_DEFAULT_NETMODS.get(str(self.major), {"ucx"}))

    @cached_property
    def _mpivars(self) -> str | None:
        return self._tool_output("mpivars")

    def algorithm_table(self, collective: str) -> collectives.AlgorithmIds:
        """name -> name: read from ``mpivars``, else the packaged table."""
        if self._mpivars:
            live = collectives.parse_mpivars(self._mpivars).get(collective.lower())
            if live:
                return {name: name for name in live}
        return collectives.algorithms(self.kind, self.series, collective)

    def imb_binary(self, name: str = "IMB-MPI1") -> Path | None:
        """Intel's IMB (impi-rt), run through the MPICH ABI.

        From ``imb_from`` (an Intel MPI prefix, a directory or the binary), else
        ``$MPIATLAS_IMB_IMPI``, else an ``intelmpi`` stack beside a PyPI prefix.
        """
        env = os.environ.get("MPIATLAS_IMB_IMPI")
        candidates = [self.imb_from, Path(env) if env else None]
        if self.source == "pypi":
            candidates.append(self.prefix.parent / "intelmpi")
        return _imb_in(candidates, name)

    # -- launching -----------------------------------------------------------------
    def transport(self, name: str) -> Transport:
        if name not in self.transports:
            raise StackError(
                f"mpich {self.series} ({self.source}): unknown transport {name!r}; supported: {sorted(self.transports)}"
                + (" (Debian's MPICH 4 is ch4:ucx only: choose the transport with UCX_TLS)" if self.major < 5 else "")
            )
        netmod = _netmod(name)
        have = self.netmods()
        if netmod and netmod not in have:
            raise StackError(
                f"mpich {self.series} at {self.prefix}: transport {name!r} needs the ch4 {netmod} netmod, "
                f"but this build has only {', '.join(sorted(have))} (mpichversion)"
            )
        return self.transports[name]

    def srun_mpi(self) -> str:
        """The ``srun --mpi=`` plugin that starts this build's ranks as one world: ``pmi2`` for
        MPICH's built-in simple PMI client. A build configured with another PMI client (e.g.
        ``--with-pmi=pmix`` or ``--with-pmi=slurm``) is refused: srun launch was only measured
        with the simple client, and a wrong plugin starts every rank as its own 1-rank world."""
        configure = re.search(r"MPICH configure:\s*(.*)", self._mpichversion or "")
        for match in _PMI_OPTION.finditer(configure[1] if configure else ""):
            value = match[1]
            # MPICH 5 chooses its PMI at run time from the environment; its simple client stays in.
            if (value is None and self.major >= 5) or (value is not None and value in _SIMPLE_PMI):
                continue
            raise StackError(
                f"unavailable: srun launch of mpich {self.series} at {self.prefix}: the build is configured with "
                f"{match[0]} (mpichversion), not MPICH's simple PMI client that srun --mpi=pmi2 serves; "
                "use campaign.launcher: mpirun for this stack")
        return "pmi2"

    def launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        self.check_launcher(spec.launcher)
        self.check_rank_argvs(spec)
        transport = self.transport(spec.transport)
        knobs = dict(transport.env)
        if spec.transport.startswith("ucx"):
            knobs.update(_UCX_LOG)
            if self.major >= 5:  # the summary's "MPICH 5.0.2 - ..." line names the library run (mpi_library)
                knobs["MPIR_CVAR_DEBUG_SUMMARY"] = "1"
        elif spec.transport.startswith("ofi"):
            knobs["MPIR_CVAR_DEBUG_SUMMARY"] = "1"
        elif spec.transport == "default" or transport.mixed:
            knobs["MPIR_CVAR_DEBUG_SUMMARY"] = "2"  # level 2 prints the POSIX shm topology block
        if spec.oversubscribe and self.major >= 5:
            # Device-level collectives busy-wait badly when ranks share cores (100x slower).
            knobs["MPIR_CVAR_DEVICE_COLLECTIVES"] = "none"
        knobs.update(self._collective_env(spec))
        if spec.launcher == "srun":
            return self._srun_launch(program, spec, knobs)

        if spec.rank_argvs is not None:
            # One context per rank (hydra's MPMD form), bound to nothing: each rank's argv pins it;
            # -genv is global and must come before the first context.
            argv = [str(self.launcher_path()), "-bind-to", "none"]
            argv += [arg for key, value in knobs.items() for arg in ("-genv", key, value)]
            return Launch(argv=[*argv, *mpmd_contexts("-n", spec.rank_argvs)], env={"HYDRA_TOPO_DEBUG": "1"})
        argv = [str(self.launcher_path()), "-n", str(spec.np), *hydra_hosts(spec)]
        if spec.pins is not None:
            argv += ["-bind-to", "user:" + ",".join(str(c) for c in self._local_pins(spec))]
        elif spec.pin_sets is not None:
            self.check_pin_sets(spec)
            local_sets = per_node_local(spec.pin_sets, spec.nodes, spec.distribution, spec.ppn)  # one list for every host
            argv += ["-bind-to", "user:" + ",".join("+".join(str(c) for c in sorted(s)) for s in local_sets)]
        launcher_env = {"HYDRA_TOPO_DEBUG": "1"}  # read by mpiexec itself: prints each rank's binding mask (stdout)
        if spec.rsh_agent:
            # mpirun over ssh: hydra's proxies start on the hosts through this agent; MPICH's hydra takes
            # the agent's options from its environment only.
            argv += ["-launcher", "ssh", "-launcher-exec", spec.rsh_agent]
            launcher_env |= {"HYDRA_LAUNCHER_EXTRA_ARGS": " ".join(spec.rsh_args)} if spec.rsh_args else {}
        for key, value in knobs.items():
            argv += ["-genv", key, value]
        return Launch(argv=[*argv, *program], env=launcher_env)

    def _srun_launch(self, program: list[str], spec: LaunchSpec, knobs: dict[str, str]) -> Launch:
        """``srun --mpi=pmi2``; the knobs are environment (srun exports it to every rank), srun binds."""
        if spec.pins is not None and spec.nodes <= 1 and len(spec.pins) != spec.np:
            raise StackError(f"mpich: {spec.np} ranks but {len(spec.pins)} pins")
        self.check_pin_sets(spec)
        return Launch(argv=[*srun_argv(spec, mpi=self.srun_mpi()), *program], env=knobs)

    def _local_pins(self, spec: LaunchSpec) -> list[int]:
        """Hydra's user binding lists one cpu per *local* rank; ranks beyond the list stay unbound."""
        assert spec.pins is not None
        if spec.nodes <= 1:
            if len(spec.pins) != spec.np:
                raise StackError(f"mpich: {spec.np} ranks but {len(spec.pins)} pins")
            return list(spec.pins)
        try:
            return per_node_local(spec.pins, spec.nodes, spec.distribution, spec.ppn)
        except StackError:
            raise StackError("mpich: hydra applies one binding list to every node; pins differ between nodes") from None

    def _collective_env(self, spec: LaunchSpec) -> dict[str, str]:
        if not spec.collective or spec.algorithm in (None, "default"):
            return {}
        coll = spec.collective.lower()
        name = collectives.resolve(self.kind, self.series, coll, str(spec.algorithm),
                                   table=self.algorithm_table(coll), np=spec.np, nodes=spec.nodes)
        return {
            f"MPIR_CVAR_{coll.upper()}_INTRA_ALGORITHM": str(name),
            # Without these an inapplicable choice silently falls back / the device bypasses it.
            "MPIR_CVAR_COLLECTIVE_FALLBACK": "error",
            "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
        }

    # -- evidence ---------------------------------------------------------------------
    def obtained_binding(self, output: str) -> dict[int, set[int]]:
        """rank -> OS cpus from hydra's ``process N binding: 0101`` lines.

        N is the local process index on its node (= rank on one node). Ranks hydra did
        not bind print no line, so they are absent (unknown), never guessed. Launched by srun:
        srun's ``--cpu-bind=verbose`` mask lines (task = rank) instead.
        """
        binding: dict[int, set[int]] = {}
        for match in _BINDING.finditer(output):
            binding[int(match[1])] = {i for i, bit in enumerate(match[2]) if bit == "1"}
        return binding or srun_binding(output)

    def pair_evidence(self, output: str, rank_hosts: dict[int, str]) -> list[PairEvidence]:
        """A rank's POSIX topology line listing more than itself speaks for the pairs it forms with
        the ranks of its node (MPICH's shared memory); the OFI provider line for every cross-node pair."""
        evidence = fabrics.ucx_pair_evidence(output, rank_hosts)  # ucx-rc/dc/ud: UCX's endpoint configurations
        for match in _POSIX_LINE.finditer(output):
            rank, distances = int(match[1]), [x for x in match[2].split(",") if x.strip()]
            if len(distances) > 1:
                ranks = tuple(sorted(r for r, h in rank_hosts.items() if h == rank_hosts.get(rank))) or (rank,)
                evidence.append(PairEvidence(ON_NODE, "shm", match[0].strip(), ranks=ranks))
        for match in _OFI_LINE.finditer(output):
            evidence.append(PairEvidence(CROSS_NODE, f"ofi:{match[1].lower()}", match[0].strip()))
        return evidence

    def obtained_transport(self, output: str) -> str | None:
        ofi = _OFI.search(output)
        if ofi:
            return f"ofi:{ofi[1].lower()}"
        # MPICH's own shared memory: DEBUG_SUMMARY=2 lists each rank's distance to >1 local ranks.
        for match in _POSIX_RANK.finditer(output):
            if len([x for x in match[1].split(",") if x.strip()]) > 1:
                return "shm"
        return ucx_transport(output)
