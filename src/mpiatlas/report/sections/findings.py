"""Section "Findings": how far the campaign can be trusted, then what it shows, in plain sentences,
and what it did not plan."""

from __future__ import annotations


from mpiatlas.models.kernel_p2p import coll_medians, pingpong_medians
from mpiatlas.report.blocks import Block, Bullets, Notice, Section, Text
from mpiatlas.report.data import PlannedNote, ReportData
from mpiatlas.report.findings import findings
from mpiatlas.report.trust import trust

TITLE = "Findings"
SECTION_ID = "findings"


def planned_notice(notes: list[PlannedNote]) -> Notice:
    """One neutral notice, each note once: cells the campaign knew beforehand it could not run."""
    items = [f"{n.what}: {n.why} ({n.cells} cell{'s' if n.cells != 1 else ''} not planned)" for n in notes]
    return Notice("Not planned: these cells were left out of the campaign before it ran, so their absence below "
                  "is expected.", "neutral", items)


def section_findings(data: ReportData) -> Section:
    sentences = findings(data.summary, pingpong_medians(data.kernel_table("pingpong")),
                         coll_medians(data.kernel_table("coll")), data.cells, hockney=data.hockney,
                         kernel_fits=data.kernel_hockney_fits("pingpong"))
    blocks: list[Block] = []
    trusted = trust(data.cells, data.summary, [*(data.hockney or []), *(data.kernel_hockney_fits("pingpong") or [])])
    if trusted:
        # First: how far the numbers below can be trusted (issue #23).
        blocks.append(Text("Trust: " + " ".join(trusted)))
    if sentences:
        blocks.append(Text("Computed from this campaign's tables (medians over repetitions); the sections below "
                           "hold the details.", cls="muted"))
        blocks.append(Bullets(sentences, cls="findings"))
    else:
        blocks.append(Text("No findings: the campaign has no measurements or cell statuses to summarise.",
                           cls="muted"))
    if data.planned:
        blocks.append(planned_notice(data.planned))
    return Section(TITLE, blocks, id=SECTION_ID)
