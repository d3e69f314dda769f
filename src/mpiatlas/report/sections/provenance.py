"""Section "Provenance": versions, hosts, topology, and each cell's command line and environment."""

from __future__ import annotations

import json
import shlex
from typing import Any

from mpiatlas.matrix import layout
from mpiatlas.models.fit_records import JsonValue
from mpiatlas.report.blocks import Block, Cell, Details, Heading, KeyValues, Notice, Pre, Section, Table, Text, cell
from mpiatlas.report.cells import has_columns, status_cls
from mpiatlas.report.data import ReportData
from mpiatlas.report.formatting import DASH, distinct, fmt_bytes, shorten

TITLE = "Provenance"
SECTION_ID = "provenance"


def _topology_items(topo: dict[str, Any]) -> list[tuple[str, Cell]]:
    items: list[tuple[str, Cell]] = []
    for k, v in topo.items():
        if k == "cache_sizes" and isinstance(v, dict):
            text = ", ".join(f"{lvl} {fmt_bytes(sz)}" for lvl, sz in v.items()) or DASH
        elif isinstance(v, (dict, list)):
            text = shorten(json.dumps(v, sort_keys=True, default=str), 300)
        else:
            text = DASH if v is None else str(v)
        items.append((str(k), Cell(text)))
    return items


_PROV_FIRST = ("host", "cpu_model", "stack_version", "imb_version", "start", "end", "containerized", "image_digest",
               "mpiatlas_version")
_PROV_SEPARATE = ("cell", "argv", "env", "topology", "nics")


def _prov_value(v: JsonValue) -> str:
    if v is None:
        return DASH
    if isinstance(v, (dict, list)):
        return shorten(json.dumps(v, sort_keys=True, default=str), 400)
    return str(v)


def _argv_text(argv: JsonValue) -> str:
    if isinstance(argv, list):
        return shlex.join(str(a) for a in argv)
    return str(argv) if argv is not None else "(no command line recorded)"


# cell id -> its stack, and its status, from the cells table (None: the table has no value).
CellFacts = dict[str, str | None]


def _per_cell_provenance(prov: list[dict[str, Any]], stack_of: CellFacts,
                         status_of: CellFacts) -> list[Heading | Text | KeyValues | Details]:
    """Each cell's command line and environment, collapsible and grouped by stack.

    Fields and environment variables identical in every cell are shown once, above the
    per-cell entries, so a campaign of thousands of cells stays a reasonable file.
    """
    fields = sorted({k for p in prov for k in p if k not in _PROV_SEPARATE})
    common_fields = [k for k in fields if len({_prov_value(p.get(k)) for p in prov}) == 1]
    envs: list[dict[str, JsonValue]] = [env if isinstance(env := p.get("env"), dict) else {} for p in prov]
    env_keys = sorted({str(k) for e in envs for k in e})
    common_env = {k: str(envs[0][k]) for k in env_keys
                  if envs and all(k in e for e in envs) and len({str(e[k]) for e in envs}) == 1}

    out: list[Heading | Text | KeyValues | Details] = [Heading(f"Command lines and environment of the {len(prov)} cells", 3)]
    if common_fields:
        out.append(Text("Common to every cell:", cls="muted"))
        out.append(KeyValues([(k, Cell(_prov_value(prov[0].get(k)))) for k in
                              [k for k in _PROV_FIRST if k in common_fields]
                              + [k for k in common_fields if k not in _PROV_FIRST]]))
    if common_env:
        out.append(Details(f"Environment common to every cell ({len(common_env)} variables)", [
            Pre("\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(common_env.items())))], open=False))
    varying = [k for k in fields if k not in common_fields and k not in ("host", "start", "end")]
    varying = [k for k in _PROV_FIRST if k in varying] + [k for k in varying if k not in _PROV_FIRST]
    groups: dict[str, list[list[Cell]]] = {}
    for p, env in sorted(zip(prov, envs), key=lambda pe: str(pe[0].get("cell"))):
        own_env = {str(k): str(v) for k, v in env.items() if str(k) not in common_env}
        env_text = "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(own_env.items()))
        if not env:
            env_text = "(no environment recorded)"
        other = "\n".join(f"{k}: {_prov_value(p.get(k))}" for k in varying if k in p)
        status = status_of.get(str(p.get("cell")))
        groups.setdefault(str(stack_of.get(str(p.get("cell"))) or "unknown stack"), []).append([
            cell(p.get("cell")), Cell(str(status) if status else "unknown", cls=status_cls(status)),
            cell(p.get("host")), Cell(f"{p.get('start') or '?'}\n{p.get('end') or '?'}", cls="code"),
            Cell(_argv_text(p.get("argv")), cls="code"), Cell(env_text or DASH, cls="code"),
            Cell(other or DASH, cls="code"),
        ])
    cols = ["Cell", "Status", "Host", "Start / end", "Command line",
            "Environment" + (" (besides the common one)" if common_env else ""), "Other recorded fields"]
    for stack, rows in sorted(groups.items()):
        out.append(Details(f"{stack} — {len(rows)} cells", [
            Table(cols, rows, filterable=len(rows) > 10, scroll=len(rows) > 10)]))
    return out


def _stack_versions(prov: list[dict[str, Any]], stack_of: CellFacts) -> str:
    versions: dict[str, list[str]] = {}
    for p in prov:
        if p.get("stack_version"):
            seen = versions.setdefault(str(stack_of.get(str(p.get("cell")), "?")), [])
            if str(p["stack_version"]) not in seen:
                seen.append(str(p["stack_version"]))
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(versions.items())) or DASH


def _overview(prov: list[dict[str, Any]], stack_of: CellFacts) -> KeyValues:
    def listed(key: str, sep: str = ", ") -> Cell:
        return Cell(sep.join(map(str, distinct(p.get(key) for p in prov))) or DASH)

    return KeyValues([
        ("Cells with provenance", Cell(str(len(prov)))),
        ("mpiatlas", listed("mpiatlas_version")),
        ("MPI stacks", Cell(_stack_versions(prov, stack_of))),
        ("IMB", listed("imb_version")),
        ("Hosts", listed("host")),
        ("CPU models", listed("cpu_model", "; ")),
        ("Containerized cells", Cell(f"{sum(1 for p in prov if p.get('containerized'))} of {len(prov)}")),
        ("Image digests", listed("image_digest")),
    ])


def _topology_blocks(prov: list[dict[str, Any]]) -> list[Heading | KeyValues | Notice]:
    """Topology per host (distinct topologies only)."""
    blocks: list[Heading | KeyValues | Notice] = []
    seen: list[tuple[str, str]] = []
    for p in prov:
        topo = p.get("topology")
        if not isinstance(topo, dict):
            continue
        key = (str(p.get("host")), json.dumps(topo, sort_keys=True, default=str))
        if key in seen:
            continue
        seen.append(key)
        blocks.append(Heading(f"Topology of {p.get('host') or 'unknown host'}", 3))
        blocks.append(KeyValues(_topology_items(topo)))
    return blocks or [Notice("No topology recorded in the provenance.", "warn")]


def _nic_rate(nic: dict[str, Any]) -> str:
    """The interface's rate as the node reported it (sysfs speed, Mbit/s); a VM's unknown speed is a dash."""
    speed = nic.get("speed_mbit_s")
    return f"{speed / 1000:g} Gbit/s" if isinstance(speed, (int, float)) and speed > 0 else DASH


def _rdma_text(nic: dict[str, Any]) -> str:
    """Each RDMA port behind the interface: its id, rate text, link layer and state."""
    ports = nic.get("rdma_ports")
    if not isinstance(ports, list) or not ports:
        return DASH
    return "; ".join(f"{p.get('id')}: {p.get('rate') or '?'}, {p.get('link_layer') or '?'}, {p.get('state') or '?'}"
                     for p in ports if isinstance(p, dict))


def _nic_blocks(prov: list[dict[str, Any]]) -> list[Heading | Table | Notice]:
    """The NICs of each host the cells ran on (mpiatlas.node.link_rate.node_nics, recorded in every cell's
    provenance): one row per host and interface record, so an interface whose record changed during the
    campaign (a link that went down, a rate renegotiated) shows each state it was recorded in."""
    rows: list[list[Cell]] = []
    seen: set[tuple[str, str]] = set()
    for p in prov:
        nics = p.get("nics")
        if not isinstance(nics, list):
            continue
        host = str(p.get("host") or "unknown host")
        for nic in (n for n in nics if isinstance(n, dict)):
            key = (host, json.dumps(nic, sort_keys=True, default=str))
            if key in seen:
                continue
            seen.add(key)
            rows.append([cell(host), cell(nic.get("name")), cell(nic.get("kind")), cell(nic.get("operstate")),
                         Cell(_nic_rate(nic), cls="num"), cell(nic.get("link_layer")), Cell(_rdma_text(nic))])
    if not rows:
        return [Notice("No NICs recorded in the provenance (cells recorded before mpiatlas read the node's NICs).",
                       "info")]
    return [Heading("Network interfaces of the nodes", 3),
            Table(["Host", "Interface", "Kind", "State", "Rate", "Link layer",
                   "RDMA ports (id: rate, link layer, state)"], rows, caption="As each cell recorded its node (/sys/class/net and /sys/class/infiniband); rate: the "
                                "interface's reported speed, a dash where the node reports none (a VM's virtual NIC).")]


def section_provenance(data: ReportData) -> Section:
    prov = data.provenance
    if prov is None:
        return Section(TITLE, [Notice(f"{layout.PROVENANCE_TABLE} is missing: no versions, hosts or command "
                                      "lines.", "error")], id=SECTION_ID)
    stack_of: CellFacts = {}
    status_of: CellFacts = {}
    cells = data.cells if has_columns(data.cells, "cell") else None
    if cells is not None:
        for facts, key in ((stack_of, "stack"), (status_of, "status")):
            values = cells[key].to_list() if key in cells.columns else [None] * cells.height
            facts.update({str(c): None if v is None else str(v) for c, v in zip(cells["cell"].to_list(), values)})
    blocks: list[Block] = [_overview(prov, stack_of)]
    if cells is not None:
        have = {p.get("cell") for p in prov}
        lacking = [str(c) for c in cells.get_column("cell").to_list() if c not in have]
        if lacking:
            blocks.append(Notice(f"{len(lacking)} cells have no provenance record:", "warn", lacking))
    blocks += _topology_blocks(prov)
    blocks += _nic_blocks(prov)
    blocks += _per_cell_provenance(prov, stack_of, status_of)
    return Section(TITLE, blocks, id=SECTION_ID)
