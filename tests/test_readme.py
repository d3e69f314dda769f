"""The README says what the code is: its two fresh-machine commands are the ones CI runs, and its
Layout section names every subpackage and subcommand, and every package names its modules.

A README that drifts is how a newcomer ends up running a command nobody tests; these read the
README and the tree and compare them, no infrastructure needed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mpiatlas.cli import command_modules

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PACKAGE = ROOT / "src" / "mpiatlas"


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 3)
    return README[start:end if end > 0 else None]


def _sh_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)]


def test_exactly_two_fresh_machine_commands_set_up_and_test() -> None:
    blocks = _sh_blocks(_section("Two commands on a fresh machine"))
    assert len(blocks) == 2, blocks
    first, second = blocks
    assert first.startswith("python3 -m venv .venv") and first.endswith(".venv/bin/mpiatlas campaign"), first
    assert second.startswith("python3 -m venv .venv") and second.endswith(
        '.venv/bin/python -m pytest -q -m "not infra" -n 2 && .venv/bin/python -m pytest -q -m infra'), second
    assert "\n" not in first and "\n" not in second


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run greps the README for its command: that grep finds exactly the second command."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pattern = re.search(r'grep -E "(.+?)" README\.md', ci)
    assert pattern, ".ci/run no longer greps the README for the test command"
    hits = [line for line in README.splitlines() if re.search(pattern.group(1).replace("\\.", r"\."), line)]
    assert hits and hits[0] == _sh_blocks(_section("Two commands on a fresh machine"))[1]


def _packages() -> list[Path]:
    return sorted(d for d in PACKAGE.rglob("*") if (d / "__init__.py").is_file() and "__pycache__" not in d.parts)


def test_layout_names_every_subpackage() -> None:
    """The README's Layout is the index of subpackages; the modules are indexed by their packages."""
    layout = _section("Layout")
    missing = [str(d.relative_to(PACKAGE)) for d in _packages()
               if d != PACKAGE and d.parent == PACKAGE and f"`{d.name}/`" not in layout]
    root_modules = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    missing += [name for name in root_modules if f"`{name}`" not in layout]
    assert not missing, f"README Layout does not name: {missing}"


def test_every_package_docstring_names_its_modules() -> None:
    """A package's face (its __init__ docstring) names each of its modules, so the tree explains itself."""
    missing = []
    for package in _packages():
        if package.name == "commands":  # one module per subcommand: the Layout lists the subcommands
            continue
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py" and not re.search(rf"(?<![\w]){re.escape(module.stem)}(?![\w])", doc):
                missing.append(str(module.relative_to(PACKAGE)))
        for sub in sorted(d for d in package.iterdir() if (d / "__init__.py").is_file()):
            if not re.search(rf"(?<![\w]){re.escape(sub.name)}(?![\w])", doc):
                missing.append(str(sub.relative_to(PACKAGE)) + "/")
    assert not missing, f"package docstrings do not name: {missing}"


def test_root_holds_no_module_but_the_cli() -> None:
    """The flat root is gone: a new module goes into the subpackage of its stage. Besides the CLI, the root
    holds only the ground floor every package writes files through."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "cli.py", "files.py"]


def test_layout_names_every_subcommand() -> None:
    layout = _section("Layout")
    listed = set(re.findall(r"`([a-z-]+)`", layout[layout.index("one module per") :]))
    assert set(command_modules()) <= listed, sorted(set(command_modules()) - listed)
