"""The import graph of :mod:`mpiatlas`, read from the source (issue #37, "no cycles, visible or hidden").

An import inside a function hides a cycle from ``python -c "import mpiatlas.x"``: the cycle only bites
when that function runs. So the graph here counts every ``import`` statement wherever it stands, at
module level or inside a function; only the ones under ``if TYPE_CHECKING:`` are left out, because they
never run. Imports inside functions are kept for heavy third-party dependencies only, so that
``mpiatlas --help`` and a cell's run start fast; our own modules are imported at module level.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "src" / "mpiatlas"

# Third-party modules worth importing late, where a process that does not use them would pay for them:
# each costs a noticeable share of a short command's start, and a cell group job or a workflow rule
# starts many (issue #38). Measured on the 2-core machine, best of 5 fresh interpreters, 0.011 s for
# `pass`: scipy.stats 0.74 s, altair 0.33 s, polars 0.17 s, jsonschema 0.10 s, jinja2 0.06 s, rich
# 0.06 s, and snakemake.api 9.9 s when the SLURM executor plugin finds no controller. vl_convert (0.014 s)
# is not here. Snakemake's executor plugin interface comes with Snakemake. Nothing of mpiatlas is here:
# our modules import ours at module level.
HEAVY_OPTIONAL = frozenset({
    "polars", "numpy", "scipy", "sklearn", "altair", "jinja2", "snakemake", "snakemake_interface_executor_plugins",
    "jsonschema", "rich",
})

# Issue #37's target for `import` statements whose enclosing scope is a function.
MAX_IMPORTS_IN_FUNCTIONS = 20


@dataclass(frozen=True)
class ImportSite:
    """One imported module as one ``import`` statement names it."""

    importer: str
    target: str
    line: int
    in_function: bool
    type_checking_only: bool


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` in the package whose directory is ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root``, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def _is_type_checking_test(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _absolute_base(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a ``from … import`` statement reads from, with its leading dots resolved."""
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _named_modules(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules one statement names: ``from a import b`` names ``a.b`` when that is a module, else ``a``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = _absolute_base(node, importer, is_package)
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    attributes = [alias for alias in node.names if f"{base}.{alias.name}" not in known]
    return submodules + ([base] if attributes else [])


def _walk(node: ast.AST, in_function: bool, type_checking: bool) -> list[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement under ``node`` with whether a function encloses it and whether it is typing-only."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append((child, in_function, type_checking))
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found.extend(_walk(child, True, type_checking))
        elif isinstance(child, ast.If) and _is_type_checking_test(child.test):
            for statement in child.body:
                found.extend(_walk(ast.Module(body=[statement], type_ignores=[]), in_function, True))
            for statement in child.orelse:
                found.extend(_walk(ast.Module(body=[statement], type_ignores=[]), in_function, type_checking))
        else:
            found.extend(_walk(child, in_function, type_checking))
    return found


def import_sites(root: Path) -> list[ImportSite]:
    """Every module named by every import statement in the package at ``root``."""
    modules = package_modules(root)
    known = set(modules)
    sites: list[ImportSite] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, in_function, type_checking in _walk(tree, False, False):
            for target in _named_modules(node, importer, is_package, known):
                sites.append(ImportSite(importer, target, node.lineno, in_function, type_checking))
    return sites


def runtime_graph(root: Path) -> dict[str, set[str]]:
    """Our modules and the ones of ours each imports when it runs (functions included, typing-only blocks not)."""
    known = set(package_modules(root))
    graph: dict[str, set[str]] = {module: set() for module in known}
    for site in import_sites(root):
        if site.target in known and not site.type_checking_only and site.target != site.importer:
            graph[site.importer].add(site.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = lowlink[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            if successors:
                successor = successors.pop()
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, sorted(graph[successor])))
                elif successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def function_level_imports(root: Path) -> list[ImportSite]:
    """The import statements (one site per statement) whose enclosing scope is a function."""
    seen: set[tuple[str, int]] = set()
    statements: list[ImportSite] = []
    for site in import_sites(root):
        if site.in_function and (site.importer, site.line) not in seen:
            seen.add((site.importer, site.line))
            statements.append(site)
    return statements


def rule_breaks(root: Path) -> list[str]:
    """Every break of the import rules in the package at ``root``, one line each (none: []).

    The rules: no cycle among its modules, imports inside functions counted; imports inside functions
    only of :data:`HEAVY_OPTIONAL` libraries, at most :data:`MAX_IMPORTS_IN_FUNCTIONS` of them; no module
    of its ``stats`` package imports one of its ``models`` package (models read statistics, never the
    other way)."""
    package = root.name
    breaks = [f"cycle: {' -> '.join(component)}" for component in cycles(runtime_graph(root))]
    late = function_level_imports(root)
    breaks += [f"import inside a function of a module that is not a heavy optional library: "
               f"{site.importer}:{site.line} {site.target}"
               for site in late if site.target.split(".")[0] not in HEAVY_OPTIONAL]
    if len(late) > MAX_IMPORTS_IN_FUNCTIONS:
        breaks.append(f"{len(late)} imports inside functions (at most {MAX_IMPORTS_IN_FUNCTIONS})")
    breaks += [f"stats imports models: {site.importer}:{site.line} {site.target}"
               for site in import_sites(root)
               if site.importer.startswith(f"{package}.stats") and site.target.startswith(f"{package}.models")]
    return breaks


def test_mpiatlas_keeps_the_import_rules() -> None:
    assert rule_breaks(PACKAGE_ROOT) == []


def _write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "toy"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_a_cycle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    package = _write_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/limits.py": "def read():\n    from toy.high import copy\n    return copy.run\n",
        "high/__init__.py": "",
        "high/copy.py": "from ..low import limits\n\ndef run():\n    return limits.read\n",
    })
    assert cycles(runtime_graph(package)) == [["toy.high.copy", "toy.low.limits"]]
    late = function_level_imports(package)
    assert [(site.importer, site.target) for site in late] == [("toy.low.limits", "toy.high.copy")]
    assert rule_breaks(package) == [
        "cycle: toy.high.copy -> toy.low.limits",
        "import inside a function of a module that is not a heavy optional library: toy.low.limits:2 toy.high.copy",
    ]


def test_stats_importing_models_and_too_many_late_imports_break_the_rules(tmp_path: Path) -> None:
    late_polars = "".join(f"def f{i}():\n    import polars\n" for i in range(MAX_IMPORTS_IN_FUNCTIONS + 1))
    package = _write_package(tmp_path, {
        "__init__.py": "", "models/__init__.py": "", "models/fit.py": "",
        "stats/__init__.py": "", "stats/medians.py": "from toy.models import fit\n",
        "report.py": late_polars,
    })
    assert rule_breaks(package) == [f"{MAX_IMPORTS_IN_FUNCTIONS + 1} imports inside functions "
                                    f"(at most {MAX_IMPORTS_IN_FUNCTIONS})",
                                    "stats imports models: toy.stats.medians:1 toy.models.fit"]


def test_typing_only_imports_make_no_cycle(tmp_path: Path) -> None:
    package = _write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy import b\n",
        "b.py": "import toy.a\n",
    })
    assert cycles(runtime_graph(package)) == []
    assert [site.type_checking_only for site in import_sites(package) if site.target.startswith("toy")] == [True, False]


@pytest.mark.parametrize("statement, expected", [
    ("from . import b", "toy.pkg.b"),
    ("from .b import thing", "toy.pkg.b"),
    ("from .. import top", "toy.top"),
    ("from ..pkg import thing", "toy.pkg"),
])
def test_relative_imports_resolve_to_modules(tmp_path: Path, statement: str, expected: str) -> None:
    package = _write_package(tmp_path, {
        "__init__.py": "", "top.py": "", "pkg/__init__.py": "thing = 1\n", "pkg/b.py": "thing = 1\n",
        "pkg/a.py": statement + "\n",
    })
    assert [site.target for site in import_sites(package) if site.importer == "toy.pkg.a"] == [expected]
