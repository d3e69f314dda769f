"""The report's sections, one module each, and ``ORDER``: the order they appear in the page.

A section is a function ``section_<name>(data: ReportData) -> Section | None`` (None: nothing to
show, e.g. a kernel the campaign did not run). To add one, write its module and put its function
in ``ORDER``. Sections import only the shared modules of :mod:`mpiatlas.report` (blocks, charts,
data, formatting, cells, imb, findings, kernel_blocks), never each other.

The sections: header, findings, history, parameters, p2p, regions, collectives, predicted, alphabeta, other (the other IMB
benchmarks), kernel_ring, kernel_matsum, kernel_jacobi, kernel_jacobi_nodes, kernel_p2p_coll, knobs, tuning, off_cache,
adaptive, glossary (the definition of every figure),
cell_table (every cell and its status), provenance.
"""

from __future__ import annotations

from collections.abc import Callable

from mpiatlas.report.blocks import Section
from mpiatlas.report.data import ReportData
from mpiatlas.report.sections.adaptive import section_adaptive
from mpiatlas.report.sections.alphabeta import section_alphabeta
from mpiatlas.report.sections.cell_table import section_cells
from mpiatlas.report.sections.collectives import section_collectives
from mpiatlas.report.sections.findings import section_findings
from mpiatlas.report.sections.glossary import section_glossary
from mpiatlas.report.sections.header import section_header
from mpiatlas.report.sections.history import section_history
from mpiatlas.report.sections.kernel_jacobi import section_kernel_jacobi
from mpiatlas.report.sections.kernel_jacobi_nodes import section_kernel_jacobi_nodes
from mpiatlas.report.sections.kernel_matsum import section_kernel_matsum
from mpiatlas.report.sections.kernel_p2p_coll import section_kernel_p2p_coll
from mpiatlas.report.sections.kernel_ring import section_kernel_ring
from mpiatlas.report.sections.knobs import section_knobs
from mpiatlas.report.sections.off_cache import section_off_cache
from mpiatlas.report.sections.other import section_other
from mpiatlas.report.sections.p2p import section_p2p
from mpiatlas.report.sections.parameters import section_parameters
from mpiatlas.report.sections.predicted import section_predicted
from mpiatlas.report.sections.provenance import section_provenance
from mpiatlas.report.sections.regions import section_p2p_regions
from mpiatlas.report.sections.tuning import section_tuning

SectionFn = Callable[[ReportData], Section | None]

ORDER: list[SectionFn] = [
    section_findings,  # what the campaign shows, first
    section_header,  # where and when it ran, what failed
    section_history,  # this campaign beside the earlier ones of the checkout's history store
    section_p2p,
    section_parameters,
    section_p2p_regions,
    section_collectives,
    section_predicted,  # measured against the region model and LogGP calibrated leave-one-algorithm-out
    section_off_cache,  # IMB -off_cache: in and out of cache, cache-size rules
    section_knobs,  # knob sets compared like algorithms
    section_tuning,  # mpiatlas tune: the chosen algorithms, their validation, the files (given --tuning)
    section_alphabeta,
    section_other,
    section_kernel_ring,  # kernels before the cell list
    section_kernel_matsum,
    section_kernel_jacobi,
    section_kernel_jacobi_nodes,  # hybrid vs pure MPI over 1..N nodes at equal cores
    section_kernel_p2p_coll,  # the own pingpong/coll kernels: Open MPI's only p2p/collective data
    section_adaptive,  # how many repetitions each series needed (adaptive campaigns only), beside the cells
    section_glossary,  # the one definition of every figure
    section_cells,
    section_provenance,
]

__all__ = ["ORDER", "SectionFn"]
