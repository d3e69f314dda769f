"""What a report section is made of: plain-data blocks the Jinja template turns into HTML.

Blocks carry plain strings only: all HTML is produced by the template with autoescaping on, so a
label or hostname taken from the inputs can never inject markup. ``kind`` tells the template
which markup to use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from mpiatlas.report.formatting import DASH, fmt_bool, fmt_num

# Notice levels, from the template's styles: neutral (grey: context, nothing wrong), info (blue),
# warn (yellow: look at this) and error (red: data is missing or wrong).
NOTICE_LEVELS = ("neutral", "info", "warn", "error")


@dataclass
class Cell:
    """A table cell: text, optional hover title and a CSS class from a fixed set."""

    text: str
    title: str | None = None
    cls: str | None = None
    colspan: int = 1


@dataclass
class Text:
    kind: ClassVar[str] = "text"
    text: str
    cls: str | None = None


@dataclass
class Heading:
    kind: ClassVar[str] = "heading"
    text: str
    level: int = 3


@dataclass
class Notice:
    """A highlighted message with optional items; ``level`` is one of :data:`NOTICE_LEVELS`."""

    kind: ClassVar[str] = "notice"
    text: str
    level: str = "warn"
    items: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.level not in NOTICE_LEVELS:
            raise ValueError(f"notice level must be one of {', '.join(NOTICE_LEVELS)}, got {self.level!r}")


@dataclass
class Bullets:
    """A plain list of sentences (the findings)."""

    kind: ClassVar[str] = "bullets"
    items: list[str]
    cls: str | None = None


@dataclass
class Table:
    kind: ClassVar[str] = "table"
    columns: list[str]
    rows: list[list[Cell]]
    caption: str | None = None
    filterable: bool = False
    scroll: bool = False
    id: str = ""


@dataclass
class KeyValues:
    kind: ClassVar[str] = "kv"
    items: list[tuple[str, Cell]]


@dataclass
class Pre:
    kind: ClassVar[str] = "pre"
    text: str


@dataclass
class Download:
    """A file to download, embedded in the page as a ``data:`` URI (the report loads nothing)."""

    kind: ClassVar[str] = "download"
    name: str
    href: str  # data:<type>;base64,...
    caption: str = ""


@dataclass
class ChartBlock:
    """A Vega-Lite spec (a dict, see :func:`mpiatlas.report.charts.chart_spec`) and its caption."""

    kind: ClassVar[str] = "chart"
    spec: dict[str, Any]
    caption: str | None = None
    id: str = ""


@dataclass
class Details:
    kind: ClassVar[str] = "details"
    summary: str
    blocks: list[Block]
    open: bool = False


@dataclass
class Section:
    title: str
    blocks: list[Block]
    id: str = ""
    lead: str | None = None


# What a section is made of: the template renders each by its ``kind``.
Block: TypeAlias = Text | Heading | Notice | Bullets | Table | KeyValues | Pre | Download | ChartBlock | Details


def cell(value: object, *, title: str | None = None, cls: str | None = None) -> Cell:
    """A table cell from a plain value: None a dash, bools yes/no, floats :func:`fmt_num`."""
    if isinstance(value, Cell):
        return value
    if value is None:
        text = DASH
    elif isinstance(value, bool):
        text = fmt_bool(value)
    elif isinstance(value, float):
        text = fmt_num(value)
    else:
        text = str(value)
    return Cell(text, title, cls)


def num_cell(value: object, digits: int = 3, *, title: str | None = None) -> Cell:
    """A right-aligned figure."""
    return Cell(fmt_num(value, digits), title=title, cls="num")


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, caption: str | None = None,
          filterable: bool = False, scroll: bool = False, id: str = "") -> Table:
    return Table(list(columns), [[cell(v) for v in row] for row in rows], caption=caption, filterable=filterable,
                 scroll=scroll, id=id)
