"""The report's sections, one module each, and :func:`order`: the order they appear in the page.

A section is a function ``section_<name>(data: ReportData) -> Section | None`` (None: nothing to
show, e.g. a kernel the campaign did not run). A program's own sections are named by its registry
entry (``Program.report_sections``, "module:function") and placed, in registry order, between the
IMB sections and the closing ones; any other section's function goes in ``BEFORE_PROGRAMS`` or
``AFTER_PROGRAMS``. Sections import only the shared modules of :mod:`mpiatlas.report` (blocks, charts,
data, formatting, cells, imb, findings, kernel_blocks), never each other.

The sections: header, findings, history, parameters, p2p, regions, collectives, predicted, alphabeta, other (the other IMB
benchmarks), kernel_ring, kernel_matsum, kernel_jacobi, kernel_jacobi_nodes, kernel_p2p_coll, knobs, tuning, off_cache,
adaptive, glossary (the definition of every figure),
cell_table (every cell and its status), provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import cast

from mpiatlas.programs import REGISTRY
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

BEFORE_PROGRAMS: list[SectionFn] = [
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
]
# Here the programs' own sections, in registry order (the kernels' before the cell list): ring, matsum,
# jacobi and jacobi over nodes (hybrid vs pure MPI at equal cores), pingpong and coll (Open MPI's only
# p2p/collective data).
AFTER_PROGRAMS: list[SectionFn] = [
    section_adaptive,  # how many repetitions each series needed (adaptive campaigns only), beside the cells
    section_glossary,  # the one definition of every figure
    section_cells,
    section_provenance,
]



def program_section(name: str) -> SectionFn:
    """The section function a program names as ``"module:function"``."""
    module, _, function = name.partition(":")
    return cast(SectionFn, getattr(import_module(module), function))


def program_sections() -> list[SectionFn]:
    """The sections the registry's programs declare, in registry order, each once."""
    names = dict.fromkeys(name for program in REGISTRY.values() for name in program.report_sections)
    return [program_section(name) for name in names]


def order() -> list[SectionFn]:
    """Every section, in the order the page shows them, with the programs registered now."""
    return [*BEFORE_PROGRAMS, *program_sections(), *AFTER_PROGRAMS]


# The order with the shipped programs (resolving their sections here: a misspelt name fails at import).
ORDER: list[SectionFn] = order()

__all__ = ["AFTER_PROGRAMS", "BEFORE_PROGRAMS", "ORDER", "SectionFn", "order"]
