"""Section "Glossary": what each figure of the report is, by one fixed definition (issue #33).

The definitions are the modules' own (mpiatlas.models.asymptote, mpiatlas.models.hockney,
mpiatlas.stats.quality); the thresholds in the text are read from their constants, so the page and
the code cannot drift apart.
"""

from __future__ import annotations

from mpiatlas.models.asymptote import ASYMPTOTE_SIZES
from mpiatlas.models.hockney import MIN_LAUNCHES
from mpiatlas.models.hockney_trust import CI_REL_TOL
from mpiatlas.report.blocks import Cell, Section, Table, Text
from mpiatlas.report.data import ReportData
from mpiatlas.stats.quality import CI_HALFWIDTH, RESOLUTION_US, SERIES_SPLIT_SHARE, TYPICAL_FACTOR

TITLE = "Glossary"
SECTION_ID = "glossary"


def _largest() -> str:
    return "the largest measured size" if ASYMPTOTE_SIZES == 1 else f"the {ASYMPTOTE_SIZES} largest sizes (median)"


def entries() -> list[tuple[str, str]]:
    """(term, definition) of every figure the report names."""
    return [
        ("λ (latency)", "The Hockney fit's small-message latency: the intercept of its first segment, t(m) = λ + m/B, "
                        "fitted to the per-size median times (µs)."),
        ("asymptotic B", f"The effective bandwidth size/time at {_largest()}, from the per-size median time (MB/s = "
                         "10⁶ B/s): what the largest messages achieve. One definition for every curve: on shared "
                         "memory it is the memory-bound plateau, on a network link it trails the link's B by "
                         "1/(1 + λ·B/size)."),
        ("peak B", "The highest effective bandwidth size/time over the measured sizes, and the size where it is: on "
                   "shared memory an in-cache figure."),
        ("95 % interval", f"Over launches when a series has {MIN_LAUNCHES} or more: each figure is computed per "
                          "launch and the interval is Student's t over those values (bandwidths on the log scale), "
                          "so it includes the variation between launches (mapping, frequency, the hypervisor, the "
                          "library's choices at init). With fewer launches it is a bootstrap within them, and says so."),
        ("unreliable interval", f"An interval that reaches beyond ±{100 * CI_REL_TOL:.0f} % of its estimate, or "
                                "misses it, or λ on the fit's lower bound: the figure is not to be quoted alone."),
        ("perturbed launch", "A launch whose ranks waited for their cpus, lost them to the hypervisor, or shared them "
                             "with other processes beyond the limits (the machine's record of the launch). It is set "
                             "aside and measured again; a final launch still perturbed, or judged without evidence "
                             "(unknown), enters no median, fit, finding, model or tuning decision."),
        ("noisy point", f"A (series, size) whose repetitions split into two modes where its series otherwise "
                        f"agrees, or whose median's 95 % interval and the majority of its repetitions both reach "
                        f"beyond ±{100 * CI_HALFWIDTH:.0f} % or {TYPICAL_FACTOR:g} × its series' typical "
                        f"half-width, whichever is larger, plus the timer's {RESOLUTION_US:g} µs. A series that "
                        f"splits into two modes at {100 * SERIES_SPLIT_SHARE:.0f} % of its sizes or more has launches "
                        "that disagree as a whole: it is named once, and its fit's interval over launches carries "
                        "it."),
    ]


def section_glossary(data: ReportData) -> Section:
    rows = [[Cell(term), Cell(text, cls="wrap")] for term, text in entries()]
    return Section(TITLE, [Text("Every figure of this report has one fixed definition; a comparison always sets "
                                "the same figure on both sides and names it."),
                           Table(["Term", "Definition"], rows)], id=SECTION_ID)
