"""Each OpenMP thread's cpu against the plan (issue #34, part 6), on recorded Jacobi runs
(tests/data/kernels): a thread whose affinity mask holds more than its planned cpu is unbound and the
launch ``perturbed``, with the evidence; a launch without per-thread evidence is ``unknown`` (not
judged good, and said); threads bound each to its planned cpu are ``ok``."""

from __future__ import annotations

from pathlib import Path

from mpiatlas.parsers.kernels import parse_kernel_file
from mpiatlas.programs.base import Checked
from mpiatlas.programs.kernels.jacobi import Jacobi
from mpiatlas.programs.kernels.thread_quality import NO_EVIDENCE, UNKNOWN, thread_quality
from mpiatlas.runner.lifecycle import Trust, launch_quality

DATA = Path(__file__).parent / "data" / "kernels"
ONE_RANK_TWO_CPUS = [(0, 1)]  # the plan of a 1 x 2 rank on this 2-core machine: thread 0 on cpu 0, 1 on 1


def frame(name: str):
    return parse_kernel_file(DATA / name)["jacobi"]


def test_threads_bound_each_to_its_planned_cpu_are_ok() -> None:
    # --map-by slot:PE=2 --bind-to core, OMP_PLACES=threads OMP_PROC_BIND=close: masks of one cpu, 0 and 1
    recorded = frame("jacobi_openmpi_np1_t2_bound.txt")
    assert recorded["thread_mask_cpus"].to_list() == [[1, 1]] and recorded["thread_cpus"].to_list() == [[0, 1]]
    assert thread_quality(recorded, ONE_RANK_TWO_CPUS, 2) == ("ok", None)


def test_an_unbound_thread_perturbs_the_launch_with_its_evidence() -> None:
    # --bind-to none, no OMP_PLACES: each thread may run on both cpus (both sat on cpu 1 when sampled)
    recorded = frame("jacobi_openmpi_np1_t2_unbound.txt")
    judged, why = thread_quality(recorded, ONE_RANK_TWO_CPUS, 2)
    assert judged == "perturbed"
    assert why == ("rank 0 (vm): OpenMP thread 0 unbound (its mask holds 2 cpus from cpu 0; planned cpu 0 only), "
                   "ran on cpu 1 then 1; rank 0 (vm): OpenMP thread 1 unbound (its mask holds 2 cpus from cpu 0; "
                   "planned cpu 1 only), ran on cpu 1 then 1")


def test_no_evidence_is_unknown_and_said() -> None:
    # Recorded before the kernel reported its threads' masks (Intel MPI, 2 ranks x 2 threads).
    recorded = frame("jacobi_intelmpi_np2_hybrid.txt")
    assert "thread_mask_cpus" not in recorded.columns
    assert thread_quality(recorded, [(0,), (1,)], 2) == (UNKNOWN, NO_EVIDENCE)
    # One thread per rank, or ranks the stack did not bind to a set: no thread has a planned cpu.
    assert thread_quality(recorded, None, 2) == (None, None)
    assert thread_quality(frame("jacobi_openmpi_np2_weak.txt"), [(0,), (1,)], 1) == (None, None)


def test_the_kernel_check_and_the_sealed_quality_carry_the_verdict() -> None:
    spec = {"kernel": {"name": "jacobi", "threads": 2}, "cell": {"np": 1}}
    for name, expected in (("jacobi_openmpi_np1_t2_unbound.txt", "perturbed"),
                           ("jacobi_openmpi_np1_t2_bound.txt", "ok")):
        checked = Jacobi().check(spec, (DATA / name).read_text(), None, ONE_RANK_TWO_CPUS)
        assert isinstance(checked, Checked) and checked.failure is None
        assert checked.details["thread_quality"] == expected
        # The bound threads ran on their planned cpus: no binding problem; the unbound ones sat on cpu 1
        # (thread 0 planned on cpu 0), which the per-thread check also names.
        assert bool(checked.binding_problems) == (expected == "perturbed")
    # Without a machine record the threads' verdict alone is the launch's quality, unknown included.
    unknown = launch_quality({"perturbation": {}}, None, False, (UNKNOWN, NO_EVIDENCE))
    assert unknown == Trust("unknown", NO_EVIDENCE)
    assert launch_quality({"perturbation": {}}, None, False, (None, None)) is None


def test_the_report_says_which_launches_are_of_unknown_quality() -> None:
    import polars as pl

    from mpiatlas.report.blocks import Notice
    from mpiatlas.report.sections.cell_table import unknown_quality_blocks

    cells = pl.DataFrame({"cell": ["kernel/intelmpi/shm/core/np2/jacobi/strong-N16-t2/rep0",
                                   "kernel/intelmpi/shm/core/np2/jacobi/strong-N16-t1/rep0"],
                          "quality": [UNKNOWN, "ok"], "quality_reason": [NO_EVIDENCE, None]})
    (notice,) = unknown_quality_blocks(cells)
    assert isinstance(notice, Notice) and notice.text.startswith("1 launch(es) of quality unknown")
    assert notice.items == [NO_EVIDENCE]
    assert unknown_quality_blocks(cells.filter(pl.col("quality") == "ok")) == []
