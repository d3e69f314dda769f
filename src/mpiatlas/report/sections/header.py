"""Section "Campaign": where and when it ran, cells by status, the cells without results, the inputs."""

from __future__ import annotations


from mpiatlas import __version__
from mpiatlas.matrix import layout
from mpiatlas.report.blocks import Block, Cell, Details, Heading, KeyValues, Notice, Section, Table, cell, table
from mpiatlas.report.cells import cell_desc, has_columns, status_cls, status_rank, suspect_results
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, distinct

TITLE = "Campaign"
SECTION_ID = "header"


def _identity(data: ReportData) -> KeyValues:
    prov = data.provenance or []
    imb = distinct(p.get("imb_version") for p in prov)
    if not imb and has_columns(data.samples, "imb_version"):
        assert data.samples is not None
        imb = distinct(data.samples.get_column("imb_version").unique(maintain_order=True).to_list())
    starts = [str(p["start"]) for p in prov if p.get("start")]
    ends = [str(p["end"]) for p in prov if p.get("end")]
    unknown = "unknown (no provenance)" if not prov else DASH
    items = [
        ("Generated", Cell(data.generated.strftime("%Y-%m-%d %H:%M:%S %Z"))),
        ("Host(s)", Cell(", ".join(map(str, distinct(p.get("host") for p in prov))) or unknown)),
        ("CPU", Cell("; ".join(map(str, distinct(p.get("cpu_model") for p in prov))) or unknown)),
        ("mpiatlas (campaign)", Cell(", ".join(map(str, distinct(p.get("mpiatlas_version") for p in prov)))
                                     or unknown)),
        ("mpiatlas (report)", Cell(__version__)),
        ("IMB version(s)", Cell(", ".join(map(str, imb)) or unknown)),
    ]
    if starts or ends:
        items.append(("Campaign span", Cell(f"{min(starts) if starts else '?'} → {max(ends) if ends else '?'}")))
    return KeyValues(items)


def problem_blocks(data: ReportData) -> list[Block]:
    """Every cell that did not produce trustworthy data, with its reason."""
    cells = data.cells
    assert cells is not None
    blocks: list[Block] = []
    rows = list(cells.iter_rows(named=True))
    bad = sorted((r for r in rows if r.get("status") != "ok"),
                 key=lambda r: (status_rank(r.get("status")), str(r.get("cell"))))
    if bad:
        blocks.append(Notice(
            f"{len(bad)} of {len(rows)} cells did not produce results. They are listed here and excluded "
            "from the charts.", "error"))
        blocks.append(Table(
            ["Status", "Cell", "What", "Reason"],
            [[Cell(str(r.get("status")), cls=status_cls(r.get("status"))), cell(r.get("cell")),
              Cell(cell_desc(r)), Cell(r.get("reason") or "no reason recorded")] for r in bad],
            caption="Missing, failed, timed-out, invalid and unavailable cells",
            scroll=len(bad) > 25, filterable=len(bad) > 25,
        ))
    else:
        blocks.append(Notice(f"All {len(rows)} cells completed with status ok.", "info"))
    warn = suspect_results(cells, data.samples_all, data.kernels_all)  # rows of every launch, perturbed too
    if warn:
        blocks.append(Notice(f"{len(warn)} cells completed but their results are suspect:", "warn", warn))
    return blocks


def _status_blocks(data: ReportData) -> list[Block]:
    cells = data.cells
    if cells is None:
        return [Notice(f"{layout.CELLS_TABLE} is missing: the status of campaign cells (failed, timed out, "
                       "unavailable, invalid) is unknown.", "error")]
    if "status" not in cells.columns:
        return [Notice(f"{layout.CELLS_TABLE} has no status column.", "error")]
    counts = sorted(cells.group_by("status").len().iter_rows(), key=lambda r: (status_rank(r[0]), str(r[0])))
    return [Heading("Cells by status"), Table(
        ["Status", "Cells"],
        [[Cell(str(s) if s is not None else "(none)", cls=status_cls(s)), Cell(str(n))] for s, n in counts]
        + [[Cell("total"), Cell(str(cells.height))]],
    ), *problem_blocks(data)]


def _input_blocks(data: ReportData) -> list[Block]:
    blocks: list[Block] = []
    missing = [f for f in data.inputs if f.state != "ok"]
    if data.notes or missing:
        blocks.append(Notice(
            "Some inputs are missing or unusable; the sections that depend on them say so.",
            "warn",
            [f"{f.name}: {f.state} ({f.path}){' – ' + f.detail if f.detail else ''}" for f in missing] + data.notes,
        ))
    blocks.append(Details("Input files", [table(
        ["Input", "Path", "State", "Detail"],
        [[f.name, f.path, Cell(f.state, cls="st-ok" if f.state == "ok" else "st-failed"), f.detail or DASH]
         for f in data.inputs],
    )]))
    return blocks


def section_header(data: ReportData) -> Section:
    return Section(TITLE, [_identity(data), *_status_blocks(data), *_input_blocks(data)], id=SECTION_ID)
