"""The command line imports only the subcommand it runs (a cell group job starts one process per
group: its start-up is harness cost), and its table of commands matches the command modules."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpiatlas import cli
from mpiatlas.commands import COMMAND_HELP

# Libraries of the analysis and the report: none of them has any business in a cell group's
# start-up. (polars is not listed for the runner itself: every program's output check uses it;
# nor jinja2, which mpiatlas.stacks.containers imports for the image definitions.)
HEAVY = ("altair", "vl_convert", "scipy", "rich", "snakemake")


def loaded_after(code: str) -> set[str]:
    """The modules loaded by ``code`` in a fresh interpreter."""
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_parsing_run_cell_imports_no_other_command_and_no_heavy_library() -> None:
    mods = loaded_after("from mpiatlas.cli import build_parser\n"
                       "build_parser(['run-cell', '--group', 'g']).parse_args(['run-cell', '--group', 'g'])")
    assert "mpiatlas.commands.run_cell" in mods
    others = {f"mpiatlas.commands.{m}" for m in cli.command_modules().values()} - {"mpiatlas.commands.run_cell"}
    assert not (mods & others), sorted(mods & others)
    for heavy in (*HEAVY, "polars", "numpy", "jsonschema", "yaml", "jinja2", "mpiatlas.matrix.config",
                  "mpiatlas.programs"):
        assert heavy not in mods, heavy


def test_the_runner_loads_no_report_or_fit_library() -> None:
    mods = loaded_after("import mpiatlas.runner, mpiatlas.runner.process\n"
                       "from mpiatlas.campaign.cell_groups import group_cells\n"
                       "import mpiatlas.matrix.config, mpiatlas.programs, mpiatlas.campaign.resources")
    assert "mpiatlas.runner.run" in mods
    for heavy in HEAVY:
        assert heavy not in mods, heavy


def test_every_command_module_registers_the_command_named_after_it() -> None:
    modules = cli.command_modules()
    assert modules["run-cell"] == "run_cell" and modules["import"] == "import_"
    for name in modules:
        parser = cli.build_parser([name])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert list(sub.choices) == [name]
    every = cli.build_parser([], load_all=True)
    sub = next(a for a in every._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(modules)
    assert all(choice.help for choice in sub._choices_actions)
    # Top-level help (no command named) lists every command with the help line its module registers.
    listed = cli.build_parser([])
    light = next(a for a in listed._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.dest: c.help for c in light._choices_actions} == {c.dest: c.help for c in sub._choices_actions}


def test_the_list_of_commands_imports_none_of_them() -> None:
    """``mpiatlas --help`` (and a mistyped command) print the list from mpiatlas.commands.COMMAND_HELP:
    every command module imports what its command runs, so importing them all would load every library."""
    assert set(COMMAND_HELP) == set(cli.command_modules())
    mods = loaded_after("from mpiatlas.cli import build_parser\nbuild_parser(['--help'])\nbuild_parser(['nonsense'])")
    assert not {m for m in mods if m.startswith("mpiatlas.commands.")}
    for heavy in (*HEAVY, "polars", "numpy"):
        assert heavy not in mods, heavy


@pytest.mark.parametrize("argv, expected", [
    (["run-cell", "--group", "x"], "run-cell"),
    (["--version"], None),
    (["-h"], None),
    (["nonsense", "run-cell"], "nonsense"),
    ([], None),
])
def test_requested_command(argv: list[str], expected: str | None) -> None:
    assert cli.requested_command(argv) == expected


def test_unknown_command_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["nonsense"])
    assert exc.value.code == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_config_error_is_reported_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("campaign: [not, a, mapping]\n")
    assert cli.main(["cells", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpiatlas: ") and str(bad) in err and "campaign" in err
