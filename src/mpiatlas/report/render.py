"""Sections -> one self-contained HTML page (Jinja2, autoescaped template ``templates/report.html.j2``).

Chart specs (Vega-Lite) are embedded as one JSON document whose ``<``, ``>`` and ``&`` are
``\\u``-escaped; their datasets go to one shared, packed store; the Vega/Vega-Lite/vega-embed
bundle (from vl-convert) is inlined exactly once, so the file needs no network.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, TypedDict

import altair as alt
import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
import vl_convert

from mpiatlas import __version__
from mpiatlas.models.fit_records import JsonValue
from mpiatlas.report.blocks import ChartBlock, Details, Notice, Pre, Section, Table
from mpiatlas.report.data import ReportData
from mpiatlas.report.sections import SectionFn, order
from mpiatlas.report.bundle import javascript_bundle

TEMPLATE = "report.html.j2"


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """The Vega + Vega-Lite + vega-embed JavaScript, from vl-convert (no network; kept on disk
    between processes, see mpiatlas.report.bundle)."""
    version = None
    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    if wanted in vl_convert.get_vegalite_versions():
        version = wanted
    js = javascript_bundle(version)
    # Inline-script safety: nothing may close the <script> element early.
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def library_versions() -> dict[str, str]:
    return {"vega": vl_convert.get_vega_version(), "vega-embed": vl_convert.get_vega_embed_version(),
            "vega-lite": alt.SCHEMA_VERSION, "altair": alt.__version__, "polars": pl.__version__}


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("mpiatlas", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "separators": (",", ":"), "allow_nan": False}
    return env


def _error_section(fn: SectionFn, exc: BaseException) -> Section:
    name = getattr(fn, "__name__", "section")
    title = name.removeprefix("section_").replace("_", " ").capitalize()
    return Section(title, [Notice(f"This section could not be built: {type(exc).__name__}: {exc}", "error"),
                           Details("Traceback", [Pre(traceback.format_exc())])], id=name)


def build_sections(data: ReportData, sections: Sequence[SectionFn] | None = None) -> list[Section]:
    """Each section of ``sections`` (default: :func:`~mpiatlas.report.sections.order`, the registry's programs included) that has something to show."""
    out: list[Section] = []
    for fn in sections if sections is not None else order():
        try:
            sec = fn(data)
        except Exception as exc:  # noqa: BLE001 - a broken section must not lose the rest of the report
            sec = _error_section(fn, exc)
        if sec is not None:
            out.append(sec)
    return out


# A chart spec (``dict[str, Any]`` below) is Vega-Lite as altair's ``to_dict`` types it: it stays altair's
# document. What this module adds to it, the packed datasets, is typed here.
DataRow = dict[str, JsonValue]


class PackedColumn(TypedDict, total=False):
    """One column of a packed dataset: its values (``v``), or its distinct strings (``d``) and each
    row's index into them (``i``, -1 for null)."""

    v: list[JsonValue]
    d: list[str]
    i: list[int]


class PackedDataset(TypedDict):
    """A chart's dataset by column (:func:`pack_dataset`): ``n`` rows, the columns by name."""

    n: int
    c: dict[str, PackedColumn]


def pack_dataset(records: list[JsonValue]) -> PackedDataset | None:
    """Records -> columnar form (``{"n": rows, "c": {col: {"v": [...]} | {"d": uniques, "i": codes}}}``);
    None when the dataset is not a list of records (then it stays as it is).

    Chart data repeats long labels on every row; stored by column, with repeated strings
    dictionary-encoded, it is several times smaller. The page's script (and
    :func:`unpack_dataset`) turns it back into records before Vega sees it.
    """
    rows = [r for r in records if isinstance(r, dict)]
    if not records or len(rows) != len(records):
        return None
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    out: dict[str, PackedColumn] = {}
    for k in cols:
        vals = [r.get(k) for r in rows]
        texts = [v for v in vals if isinstance(v, str)]
        if len(texts) == sum(v is not None for v in vals):
            uniq: dict[str, int] = {}
            codes = [uniq.setdefault(v, len(uniq)) if isinstance(v, str) else -1 for v in vals]
            if len(uniq) * 2 <= len(vals):
                out[k] = {"d": list(uniq), "i": codes}
                continue
        out[k] = {"v": vals}
    return {"n": len(rows), "c": out}


def unpack_dataset(packed: PackedDataset) -> list[DataRow]:
    """Inverse of :func:`pack_dataset` (the page does the same in JavaScript)."""
    rows: list[DataRow] = [{} for _ in range(packed["n"])]
    for k, col in packed["c"].items():
        vals: list[JsonValue] = (col["v"] if "v" in col else
                                 [None if j < 0 else col["d"][j] for j in col.get("i", [])])
        for row, v in zip(rows, vals):
            row[k] = v
    return rows


def full_spec(spec: dict[str, Any], store: dict[str, PackedDataset]) -> dict[str, Any]:
    """A chart spec with its datasets restored from the page's shared store."""
    out = dict(spec)
    if "datasets" in spec:
        out["datasets"] = {k: unpack_dataset(store[k]) if v is None else v for k, v in spec["datasets"].items()}
    return out


def _assign_ids(sections: list[Section]) -> tuple[dict[str, dict[str, Any]], dict[str, PackedDataset]]:
    """Give sections, charts and tables ids; move chart datasets into one shared, packed store."""
    specs: dict[str, dict[str, Any]] = {}
    store: dict[str, PackedDataset] = {}
    used: set[str] = set()
    n_tables = 0

    def walk(blocks: Sequence[object], prefix: str) -> None:
        nonlocal n_tables
        for b in blocks:
            if isinstance(b, ChartBlock):
                b.id = f"chart-{len(specs) + 1}"
                spec = dict(b.spec)
                if isinstance(spec.get("datasets"), dict):
                    refs: dict[str, list[JsonValue] | None] = {}
                    for name, records in spec["datasets"].items():
                        # altair names a dataset by its content hash: equal data is stored once.
                        packed = store.get(name) or pack_dataset(records)
                        if packed is None:
                            refs[name] = records
                        else:
                            store[name] = packed
                            refs[name] = None
                    spec["datasets"] = refs
                specs[b.id] = spec
            elif isinstance(b, Table):
                n_tables += 1
                b.id = b.id or f"table-{prefix}-{n_tables}"
            elif isinstance(b, Details):
                walk(b.blocks, prefix)

    for i, sec in enumerate(sections):
        sid = sec.id or f"section-{i + 1}"
        while sid in used:
            sid += "-x"
        sec.id = sid
        used.add(sid)
        walk(sec.blocks, sid)
    return specs, store


def render_html(data: ReportData, sections: list[Section] | None = None) -> str:
    sections = build_sections(data) if sections is None else sections
    specs, store = _assign_ids(sections)
    template = _environment().get_template(TEMPLATE)
    return template.render(
        title=data.title,
        generated=data.generated.strftime("%Y-%m-%d %H:%M:%S %Z"),
        version=__version__,
        sections=sections,
        specs=specs,
        store=store,
        vega_bundle=Markup(vega_bundle()) if specs else Markup(""),
        libs=library_versions(),
    )
