"""The test suite itself: no test may pass or fail by accident of the machine it runs on.

* A test skips only through ``conftest.require_infra`` (infrastructure: a skip fails CI) or
  ``conftest.require_datasets`` (the shared datasets: likewise). A bare ``pytest.skip``, ``skipif``
  or ``importorskip`` elsewhere would let CI go green without running the test.
* No test bounds wall-clock or CPU time: how fast this machine is today is the machine's business,
  and bench/ measures speed as ratios taken side by side in one run.

The scan reads the test modules as Python (ast), so a comment or a string that mentions these words
is not a hit, and each hit names the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The only places allowed to skip: the helpers that fail instead of skipping under CI=true.
SKIP_HELPERS = {("conftest.py", "_skip_or_fail_unless")}
CLOCKS = {"time", "perf_counter", "perf_counter_ns", "process_time", "process_time_ns", "monotonic",
          "monotonic_ns", "thread_time", "time_ns", "clock_gettime"}
ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.glob("*.py") if p.name != Path(__file__).name)


def _attr_chain(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _enclosing_functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node -> the name of the innermost function around it ('' at module level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "")
    return owner


def skips(path: Path, source: str) -> list[str]:
    """Every skip that does not go through the conftest helpers, as 'file:line what'."""
    tree = ast.parse(source, filename=str(path))
    owner = _enclosing_functions(tree)
    found = []
    for node in ast.walk(tree):
        chain = _attr_chain(node.func) if isinstance(node, ast.Call) else _attr_chain(node)
        if not chain.endswith(("pytest.skip", "mark.skipif", "mark.skip", "pytest.importorskip", "unittest.skip")):
            continue
        if isinstance(node, ast.Attribute) and isinstance(owner.get(node), str) and _is_call_target(tree, node):
            continue  # counted once, as the Call
        if (path.name, owner.get(node, "")) in SKIP_HELPERS:
            continue
        found.append(f"{path.name}:{node.lineno} {chain}")
    return sorted(set(found))


def _is_call_target(tree: ast.AST, attr: ast.Attribute) -> bool:
    return any(isinstance(n, ast.Call) and n.func is attr for n in ast.walk(tree))


def _clock_names(func: ast.AST) -> set[str]:
    """Names in ``func`` assigned from a clock reading (``t0 = time.perf_counter()``), or from an
    expression over such names (``elapsed = time.monotonic() - t0``)."""
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign) or not _reads_clock(node.value, names):
                continue
            for target in node.targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and leaf.id not in names:
                        names.add(leaf.id)
                        changed = True
    return names


def _reads_clock(expr: ast.AST, names: set[str]) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and _attr_chain(node.func).split(".")[-1] in CLOCKS \
                and _attr_chain(node.func).startswith(("time.", "perf_counter", "process_time", "monotonic")):
            return True
        if isinstance(node, ast.Name) and node.id in names:
            return True
    return False


def _constant(expr: ast.AST, names: set[str]) -> bool:
    """An expression of literals (and clock readings) only: ``30``, ``5e-3 * 2``, ``LIMIT_S`` (an
    upper-case module constant)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id not in names and not node.id.isupper():
            return False
        if isinstance(node, ast.Call) and not _reads_clock(node, names):
            return False
    return True


def timing_bounds(path: Path, source: str) -> list[str]:
    """Every assert that orders a clock reading against a constant: a bound on the machine's speed.
    (One clock reading against another, e.g. the launches' own walls within a group's wall, is an
    invariant of the timeline, not a bound.)"""
    tree = ast.parse(source, filename=str(path))
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _clock_names(func)
        for node in ast.walk(func):
            if not isinstance(node, ast.Assert):
                continue
            for cmp in ast.walk(node.test):
                sides = (cmp.left, *cmp.comparators) if isinstance(cmp, ast.Compare) else ()
                if any(isinstance(op, ORDERS) for op in getattr(cmp, "ops", ())) \
                        and any(_reads_clock(side, names) for side in sides) \
                        and any(_constant(side, names) and not _reads_clock(side, names) for side in sides):
                    found.append(f"{path.name}:{node.lineno} in {func.name}")
                    break
    return found


def test_no_test_skips_outside_the_infra_and_dataset_helpers() -> None:
    found = [hit for path in _modules() for hit in skips(path, path.read_text())]
    assert not found, "skips that CI would not notice (use conftest.require_infra / require_datasets):\n" + \
        "\n".join(found)


def test_no_test_bounds_wall_clock_or_cpu_time() -> None:
    found = [hit for path in _modules() for hit in timing_bounds(path, path.read_text())]
    assert not found, "asserts on how long something took (bench/ measures speed):\n" + "\n".join(found)


# -- the scanners find what they are for (on snippets, so that they cannot pass by finding nothing) ----------

@pytest.mark.parametrize("snippet", [
    "import pytest\npytestmark = pytest.mark.skipif(True, reason='x')\n",
    "import pytest\n@pytest.mark.skipif(True, reason='x')\ndef test_a():\n    pass\n",
    "import pytest\ndef test_a():\n    pytest.skip('no')\n",
    "import pytest\ndef test_a():\n    pytest.importorskip('numpy')\n",
    "import pytest\n@pytest.mark.skip\ndef test_a():\n    pass\n",
])
def test_the_skip_scanner_finds_each_form(snippet: str) -> None:
    assert len(skips(Path("test_x.py"), snippet)) == 1


def test_the_skip_scanner_allows_the_conftest_helper() -> None:
    helper = "import pytest\ndef _skip_or_fail_unless(ok, what):\n    pytest.skip(what)\n"
    assert skips(Path("conftest.py"), helper) == []
    assert len(skips(Path("test_x.py"), helper)) == 1
    assert skips(Path("test_x.py"), "def test_a():\n    '''pytest.skip is not called here'''\n") == []


@pytest.mark.parametrize("snippet", [
    "import time\ndef test_a():\n    t = time.perf_counter()\n    f()\n    assert time.perf_counter() - t < 1\n",
    "import time\ndef test_a():\n    s = time.process_time()\n    f()\n    per = (time.process_time() - s) / 20\n"
    "    assert per < 0.005\n",
    "import time\ndef test_a():\n    a = time.monotonic()\n    f()\n    el = time.monotonic() - a\n"
    "    assert done.rc == 2 and el < 30\n",
])
def test_the_timing_scanner_finds_a_bound(snippet: str) -> None:
    assert len(timing_bounds(Path("test_x.py"), snippet)) == 1


def test_the_timing_scanner_allows_deadlines_and_records() -> None:
    # A deadline that ends a wait, and a wall time that is recorded, bound nothing.
    snippet = ("import time\ndef test_a():\n    deadline = time.monotonic() + 30\n"
               "    while time.monotonic() < deadline and not done():\n        pass\n"
               "    wall = time.monotonic()\n    figures = {'wall_s': wall}\n    assert figures\n")
    assert timing_bounds(Path("test_x.py"), snippet) == []
    invariant = ("import time\ndef test_a():\n    t = time.perf_counter()\n    f()\n"
                 "    elapsed = time.perf_counter() - t\n    assert sum(walls) < elapsed\n")
    assert timing_bounds(Path("test_x.py"), invariant) == []
