"""The README says what the code is: its two fresh-machine commands are the ones CI runs, and its
Layout section names every module and every subcommand.

A README that drifts is how a newcomer ends up running a command nobody tests; these read the
README and the tree and compare them, no infrastructure needed.
"""

from __future__ import annotations

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
    assert second.startswith("python3 -m venv .venv") and second.endswith(".venv/bin/python -m pytest -q"), second
    assert "\n" not in first and "\n" not in second


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run greps the README for its command: that grep finds exactly the second command."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pattern = re.search(r'grep -E "(.+?)" README\.md', ci)
    assert pattern, ".ci/run no longer greps the README for the test command"
    hits = [line for line in README.splitlines() if re.search(pattern.group(1).replace("\\.", r"\."), line)]
    assert hits and hits[0] == _sh_blocks(_section("Two commands on a fresh machine"))[1]


def test_layout_names_every_module() -> None:
    layout = _section("Layout")
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py" or path.parent.name == "commands":
            continue
        # Listed as `name.py`, or inside a brace list such as kernels/{ring,matsum}.py.
        if not re.search(rf"(?<![\w.]){re.escape(path.stem)}(\.py`|[,}}])", layout):
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, f"README Layout does not name: {missing}"


def test_layout_names_every_subcommand() -> None:
    layout = _section("Layout")
    listed = set(re.findall(r"`([a-z-]+)`", layout[layout.index("one module per") :]))
    assert set(command_modules()) <= listed, sorted(set(command_modules()) - listed)
