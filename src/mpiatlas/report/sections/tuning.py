"""Section "Tuning": what ``mpiatlas tune`` chose, whether the validation campaign confirmed it, the files.

Shown when the report was given the campaign's tuning directory (``mpiatlas report --tuning``, the
workflow's ``tune.enabled``). Per collective, a decision map (message size x P, one row of panels per
stack x transport): the algorithm chosen at every measured point, coloured by the claimed gain
over the stack's default (grey where the default stays). Then, per tuned point, the claimed gain
beside the validated one (the validation campaign's exported file against the default) and
whether the file ran the winner. The exported files are embedded as ``data:`` links: the page
loads nothing.
"""

from __future__ import annotations

import base64
from typing import Any

import altair as alt
import polars as pl

from mpiatlas.report.blocks import Block, Cell, ChartBlock, Details, Download, Heading, Notice, Section, Table, Text, cell
from mpiatlas.report.charts import chart_spec
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import fmt_bytes

TITLE = "Tuning"
SECTION_ID = "tuning"
DEFAULT = "default"
_ROW_HEADER = alt.Header(labelAngle=0, labelAlign="left", labelLimit=320)
_TYPES = {".rules": "text/plain", ".env": "text/plain", ".json": "application/json", ".md": "text/markdown"}


def decision_points(decision: dict[str, Any]) -> pl.DataFrame:
    """One row per measured point of every series: the choice and its claimed gain."""
    rows = [{"series": f"{s['stack']} · {s['transport']}", "collective": s["benchmark"], "np": p["np"],
             "bytes": p["bytes"], "size": fmt_bytes(p["bytes"]), "algorithm": p["algorithm"],
             "gain": None if p["algorithm"] == DEFAULT or p.get("ratio") is None else 1 - p["ratio"],
             "reason": p["reason"]}
            for s in decision.get("series", []) for p in s.get("points", [])]
    schema = {"series": pl.String, "collective": pl.String, "np": pl.Int64, "bytes": pl.Int64, "size": pl.String,
              "algorithm": pl.String, "gain": pl.Float64, "reason": pl.String}
    return pl.DataFrame(rows, schema=schema)


def _decision_map(collective: str, df: pl.DataFrame) -> ChartBlock:
    sizes = [fmt_bytes(b) for b in df.get_column("bytes").unique().sort().to_list()]
    base = alt.Chart(df.to_pandas()).encode(
        x=alt.X("size:O", sort=sizes, title="message size"),
        y=alt.Y("np:O", title="processes", sort="descending"),
    )
    rect = base.mark_rect().encode(
        color=alt.condition(alt.datum.algorithm == DEFAULT, alt.value("#e5e5e5"),
                            alt.Color("gain:Q", title="claimed gain", scale=alt.Scale(scheme="blues", domain=[0, 0.6]),
                                      legend=alt.Legend(format=".0%"))),
        tooltip=["series:N", "np:O", "size:N", "algorithm:N", alt.Tooltip("gain:Q", format=".1%"), "reason:N"],
    )
    text = base.mark_text(fontSize=9).encode(text="algorithm:N")
    chart = (rect + text).properties(width=max(160, 70 * len(sizes)), height=max(40, 24 * df["np"].n_unique())).facet(
        row=alt.Row("series:N", title=None, header=_ROW_HEADER)).properties(title=f"{collective}: the algorithm chosen")
    return ChartBlock(chart_spec(chart), f"{collective}: the algorithm chosen per size and P (grey: the default stays; "
                                         "blue: the claimed gain of the non-default choice).")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _validation_blocks(validation: dict[str, Any] | None) -> list[Block]:
    if validation is None:
        return [Notice("Not validated: run `mpiatlas tune --validate` (or tune.validate: true) to check that the "
                       "files take effect.", "info")]
    cells = validation.get("cells", [])
    summary = validation.get("summary", {})
    if not cells:
        return [Text("Nothing to validate: every series keeps the default.", cls="muted")]
    rows = []
    for c in cells:
        lo, hi = c["gain_ci"]
        mlo, mhi = c["match_ci"]
        rows.append([cell(f"{c['stack']} · {c['transport']}"), cell(c["collective"]), cell(c["np"]),
                     Cell(fmt_bytes(c["bytes"])), cell(c["algorithm"]), Cell(_pct(c["claimed_gain"])),
                     Cell(f"{_pct(c['gain'])} [{_pct(lo)}, {_pct(hi)}]" if lo is not None else _pct(c["gain"]),
                          title="validated gain: 1 − t_file / t_default, 95 % CI"),
                     Cell("–" if c["match_ratio"] is None else f"{c['match_ratio']:.3f} [{mlo:.3f}, {mhi:.3f}]"),
                     Cell("pass" if c["passed"] else "FAIL", title=c["reason"], cls=None if c["passed"] else "bad")])
    passed = summary.get("passed", sum(c["passed"] for c in cells))
    level = "info" if passed == len(cells) else "warn"
    blocks: list[Block] = [
        Notice(f"Validation campaign {validation.get('campaign')}: {passed} of {len(cells)} tuned cells pass (the "
               "exported file's time matches the forced winner's, 95 % CI of the ratio contains 1, and beats the "
               "default, CI below 1).", level),
        Table(["Stack", "Collective", "P", "Size", "Algorithm", "Claimed gain", "Validated gain [CI]",
               "t_file / t_winner [CI]", "Result"], rows, scroll=True),
    ]
    blocks += _untuned_blocks(validation)
    evidence = validation.get("evidence") or {}
    if evidence:
        blocks.append(Details("What each stack said about the file", [Text(f"{k}: {v}") for k, v in sorted(evidence.items())]))
    return blocks


def _untuned_blocks(validation: dict[str, Any]) -> list[Block]:
    """The sampled sizes the files leave to the library: file against default (absent in older records)."""
    untuned = validation.get("untuned") or []
    if not untuned:
        return []
    tol = (validation.get("summary", {}).get("untuned") or {}).get("tolerance", 0.05)
    rows = []
    for c in untuned:
        lo, hi = c["ratio_ci"]
        rows.append([cell(f"{c['stack']} · {c['transport']}"), cell(c["collective"]), cell(c["np"]),
                     Cell(fmt_bytes(c["bytes"])),
                     Cell("–" if c["ratio"] is None else f"{c['ratio']:.3f} [{lo:.3f}, {hi:.3f}]",
                          title="t_file / t_default, 95 % CI"),
                     Cell("pass" if c["passed"] else "FAIL", title=c["reason"], cls=None if c["passed"] else "bad")])
    passed = sum(c["passed"] for c in untuned)
    return [Notice(f"Untuned sizes: {passed} of {len(untuned)} sampled sizes the files leave to the library are not "
                   f"significantly slower than the default (a size fails when the 95 % CI of t_file / t_default lies "
                   f"above {1 + tol:.2f}).", "info" if passed == len(untuned) else "warn"),
            Table(["Stack", "Collective", "P", "Size", "t_file / t_default [CI]", "Result"], rows, scroll=True)]


def _downloads(files: dict[str, str]) -> list[Block]:
    out: list[Block] = []
    for name, text in sorted(files.items()):
        kind = next((t for suffix, t in _TYPES.items() if name.endswith(suffix)), "text/plain")
        href = f"data:{kind};base64,{base64.b64encode(text.encode()).decode()}"
        out.append(Download(name, href, f"{len(text.encode())} bytes"))
    return out


def section_tuning(data: ReportData) -> Section | None:
    tuning = data.tuning
    if not tuning:
        return None
    decision = tuning.decision
    points = decision_points(decision)
    blocks: list[Block] = [Text(
        f"`mpiatlas tune` on {decision.get('source')}: a non-default algorithm replaces the stack's default at a "
        "(P, size) only where the 95 % bootstrap CI of t_algorithm / t_default lies below 1 and the gain reaches "
        f"{decision.get('min_gain', 0.05):.0%}.")]
    if points.height == 0:
        blocks.append(Text("The decision holds no measured point.", cls="muted"))
    for collective in sorted(points.get_column("collective").unique().to_list()):
        blocks += [Heading(collective), _decision_map(collective, points.filter(pl.col("collective") == collective))]
    blocks.append(Heading("Validation"))
    blocks += _validation_blocks(tuning.validation)
    blocks.append(Heading("Files"))
    blocks += _downloads(tuning.files) or [Text("No tuning file: nothing beat the default.", cls="muted")]
    return Section(TITLE, blocks, id=SECTION_ID)
