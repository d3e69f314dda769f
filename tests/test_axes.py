"""IMB options and knob sets as campaign axes: ids, schema validation, expansion, specs, launch overlay."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mpiatlas.matrix.cells import Cell, parse_id
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.programs import cell_spec, expand
from mpiatlas.programs.imb import Imb, imb_args
from mpiatlas.programs.imb_options import argv, combinations, parse_segment
from mpiatlas.runner.knob_overlay import overlay_launch, shell_replaced
from mpiatlas.stacks import Launch
from mpiatlas.tables.tidy import missing_row

REPO = Path(__file__).resolve().parents[1]


def tiny() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config" / "test" / "tiny.yaml").read_text())


def two_kinds() -> dict[str, Any]:
    """tiny.yaml with an Open MPI stack beside Intel MPI (kernel cells only for Open MPI)."""
    config = tiny()
    config["stacks"]["ompi"] = {"kind": "openmpi", "transports": ["ob1-vader"]}
    config["kernels"]["stacks"] = {"intelmpi": ["shm"], "ompi": ["ob1-vader"]}
    config["imb"]["stacks"] = ["intelmpi"]
    return config


def error_of(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        validate(config, "my.yaml")
    return str(err.value)


# -- ids ------------------------------------------------------------------------------------------


def test_cells_without_options_or_knobs_keep_their_ids() -> None:
    cell = Cell("imb", "intelmpi", "shm", "core", 2, "PingPong", "default", 0)
    assert cell.id == "imb/intelmpi/shm/core/np2/PingPong/default/rep0"
    assert cell.label == "intelmpi/shm/core"
    assert "options" not in cell.coords() and "knobs" not in cell.coords()
    # The campaign's ids are today's ids when the config has neither axis.
    ids = {c.id for c in expand(validate(tiny()))}
    assert "imb/intelmpi/shm/core/np2/PingPong/default/rep0" in ids
    assert all(len(i.split("/")) == 8 for i in ids)


def test_option_and_knob_segments_round_trip() -> None:
    cell = Cell("imb", "intelmpi", "shm", "node", 4, "Alltoall", "default", 1, nodes=2,
                options="off_cache=-1,sync=off", knobs="tuning-auto")
    assert cell.id == "imb/intelmpi/shm/node2/np4/Alltoall/default/off_cache=-1,sync=off/knobs=tuning-auto/rep1"
    assert cell.label == "intelmpi/shm/node2 [off_cache=-1,sync=off] [knobs=tuning-auto]"
    parsed = parse_id(cell.id)
    assert parsed == {"kind": "imb", "stack": "intelmpi", "transport": "shm", "mapping": "node", "nodes": 2, "np": 4,
                      "benchmark": "Alltoall", "algorithm": "default", "rep": 1, "options": "off_cache=-1,sync=off",
                      "knobs": "tuning-auto", "pinner": "", "distribution": ""}
    assert parse_id(Cell("kernel", "i", "shm", "core", 2, "ring", "blocking", 0, knobs="k").id)["knobs"] == "k"
    assert parse_id(Cell("imb", "i", "shm", "core", 2, "PingPong", "default", 0, options="off_cache=4").id)[
        "options"] == "off_cache=4"
    assert parse_id("imb/i/shm/core/np2/PingPong/default/rep0")["options"] == ""
    with pytest.raises(ValueError, match="is not"):
        parse_id("imb/i/shm/core/np2/PingPong/default/junk/rep0")


def test_missing_row_of_a_new_axis_cell_carries_its_options_and_knobs() -> None:
    row = missing_row("imb/intelmpi/shm/core/np2/PingPong/default/off_cache=-1/knobs=eager/rep2")
    assert (row["options"], row["knobs"], row["rep"], row["status"]) == ("off_cache=-1", "eager", 2, "missing")


# -- imb.options ----------------------------------------------------------------------------------


def test_option_combinations_and_argv() -> None:
    assert combinations({"off_cache": ["off", -1, 2.5]}, collective=False) == ["", "off_cache=-1", "off_cache=2.5"]
    # YAML reads unquoted off/on as booleans: taken as the words.
    assert combinations({"off_cache": [False, 16]}, collective=True) == ["", "off_cache=16"]
    both = combinations({"off_cache": ["off", -1], "sync": [True, False]}, collective=True)
    assert both == ["sync=on", "sync=off", "off_cache=-1,sync=on", "off_cache=-1,sync=off"]
    # sync and root_shift act on collectives only: PingPong is not multiplied by them.
    assert combinations({"off_cache": ["off", -1], "sync": ["on", "off"]}, collective=False) == ["", "off_cache=-1"]
    assert argv(parse_segment("off_cache=-1,iter_policy=off,root_shift=on")) == [
        "-off_cache", "-1", "-iter_policy", "off", "-root_shift", "on"]
    with pytest.raises(ValueError, match="not an IMB options segment"):
        parse_segment("cache=1")


def test_options_make_cells_and_reach_the_imb_argv() -> None:
    config = tiny()
    config["imb"]["options"] = {"off_cache": ["off", -1]}
    config = validate(config)
    cells = [c for c in expand(config) if c.kind == "imb"]
    plain = [c for c in expand(validate(tiny())) if c.kind == "imb"]
    assert len(cells) == 2 * len(plain) and {c.options for c in cells} == {"", "off_cache=-1"}
    assert {c.id for c in plain} <= {c.id for c in cells}  # the in-cache cells keep their ids
    off = next(c for c in cells if c.options and c.benchmark == "PingPong")
    spec = cell_spec(config, off)
    assert spec["imb"]["options"] == {"off_cache": "-1"}
    assert imb_args("PingPong", 2, spec["imb"])[-2:] == ["-off_cache", "-1"]
    on = next(c for c in cells if not c.options and c.benchmark == "PingPong")
    assert "options" not in cell_spec(config, on)["imb"] and "-off_cache" not in imb_args("PingPong", 2, cell_spec(
        config, on)["imb"])
    # Off cache, IMB's buffers span the cache size: the memory request grows.
    assert Imb().mem_mb(config, off) > Imb().mem_mb(config, on)


@pytest.mark.parametrize(("options", "expected"), [
    ({"off_cache": [-2]}, "imb.options.off_cache.0: -2 is not allowed; expected off (flag not passed"),
    ({"off_cache": ["big"]}, "imb.options.off_cache.0: 'big' is not allowed"),
    ({"iter_policy": ["fast"]}, "imb.options.iter_policy.0: 'fast' is not allowed; allowed values: dynamic, "
                                "multiple_np, auto, off"),
    ({"sync": ["maybe"]}, "imb.options.sync.0: 'maybe' is not allowed; allowed values: on, off"),
    ({"cache": ["off"]}, "imb.options: Additional properties are not allowed ('cache'"),
    ({"off_cache": []}, "imb.options.off_cache: [] should be non-empty"),
])
def test_bad_imb_options_name_the_key(options: dict[str, Any], expected: str) -> None:
    config = tiny()
    config["imb"]["options"] = options
    message = error_of(config)
    assert expected in message and "my.yaml" in message


# -- knobs ----------------------------------------------------------------------------------------


def with_knobs(config: dict[str, Any], sets: dict[str, Any], selected: list[str] | None = None) -> dict[str, Any]:
    """``config`` with knob ``sets`` defined and, if given, ``campaign.knobs: selected``."""
    config = copy.deepcopy(config)
    config["knobs"] = sets
    if selected is not None:
        config["campaign"]["knobs"] = selected
    return config


def test_knob_sets_multiply_every_program_and_name_the_cells() -> None:
    config = validate(with_knobs(tiny(), {"tuning-auto": {"I_MPI_TUNING_MODE": "auto"},
                                          "omp": {"OMP_WAIT_POLICY": "passive"}}))
    plain = expand(validate(tiny()))
    cells = expand(config)
    assert len(cells) == 3 * len(plain)  # none + two sets, by default every defined set
    assert {c.kind for c in cells if c.knobs == "omp"} == {"imb", "kernel"}
    assert {c.id for c in plain} <= {c.id for c in cells}  # `none` keeps the ids
    knob_cell = next(c for c in cells if c.knobs == "tuning-auto" and c.kind == "kernel")
    assert "/knobs=tuning-auto/rep" in knob_cell.id
    assert cell_spec(config, knob_cell)["knobs"] == {"name": "tuning-auto", "env": {"I_MPI_TUNING_MODE": "auto"}}
    assert cell_spec(config, plain[0])["knobs"] is None


def test_campaign_selection_skips_sets_a_stack_kind_does_not_read() -> None:
    config = validate(with_knobs(two_kinds(), {"impi": {"I_MPI_TUNING_MODE": "auto"},
                                               "ucx": {"UCX_RNDV_THRESH": 65536}}, selected=["none", "impi", "ucx"]))
    sets = {(c.stack, c.knobs) for c in expand(config)}
    assert sets == {("intelmpi", ""), ("intelmpi", "impi"), ("ompi", ""), ("ompi", "ucx")}
    assert config.knobs["ucx"] == {"UCX_RNDV_THRESH": "65536"}  # integers become strings


def test_a_stack_own_selection_replaces_the_campaign_one() -> None:
    config = with_knobs(two_kinds(), {"impi": {"I_MPI_TUNING_MODE": "auto"}, "omp": {"OMP_PROC_BIND": "close"}},
                        selected=["none"])
    config["stacks"]["intelmpi"]["knobs"] = ["impi", "omp"]
    sets = {(c.stack, c.knobs) for c in expand(validate(config))}
    assert sets == {("intelmpi", "impi"), ("intelmpi", "omp"), ("ompi", "")}


@pytest.mark.parametrize(("knobs", "expected"), [
    ({"k": {"FOO_BAR": "1"}}, "knobs.k.FOO_BAR: 'FOO_BAR' is not a variable any stack reads; allowed prefixes:"),
    ({"k": {"I_MPI_X": "a;b"}}, "knobs.k.I_MPI_X: 'a;b' has characters with a shell meaning"),
    ({"k": {"I_MPI_X": "$HOME"}}, "knobs.k.I_MPI_X: '$HOME' has characters with a shell meaning or control "
                                  "characters ('$')"),
    ({"k": {"I_MPI_X": "a\nb"}}, "knobs.k.I_MPI_X: 'a\\nb' has characters"),
    ({"k": {"I_MPI_X": "a\0b"}}, "knobs.k.I_MPI_X: 'a\\x00b' has characters"),
    ({"k": {"I_MPI_X": "`id`"}}, "knobs.k.I_MPI_X: '`id`' has characters"),
    ({"k": {"I_MPI_X": "a b"}}, "knobs.k.I_MPI_X: 'a b' has characters"),
    ({"k": {"I_MPI_X": "a|b&c<d>e"}}, "('&', '<', '>', '|')"),
    ({"k": {"I_MPI_X": False}}, "knobs.k.I_MPI_X: False is not of type 'string', 'integer' (YAML reads unquoted "
                                "on/off/yes/no as true/false: quote the value)"),
    ({"k": {}}, "knobs.k: {} should be non-empty"),
    ({"none": {"I_MPI_X": "1"}}, "knobs: 'none' is not allowed; expected a knob set name of letters, digits and "
                                 "_ . -, other than none (which names no set)"),
    ({"a b": {"I_MPI_X": "1"}}, "knobs: 'a b' does not match"),
    ({"k": {"UCX_TLS": "sm"}}, "knobs.k: suits no stack of this campaign (intelmpi does not read UCX_TLS)"),
])
def test_bad_knobs_name_the_key(knobs: dict[str, Any], expected: str) -> None:
    message = error_of(with_knobs(tiny(), knobs))
    assert expected in message and "my.yaml" in message


def test_bad_knob_selections_name_the_key() -> None:
    assert "my.yaml: campaign.knobs.1: no knob set 'eager'; defined (top-level knobs): k, or 'none' for no set" in \
        error_of(with_knobs(tiny(), {"k": {"I_MPI_X": "1"}}, selected=["none", "eager"]))
    config = with_knobs(two_kinds(), {"impi": {"I_MPI_TUNING_MODE": "auto"}})
    config["stacks"]["ompi"]["knobs"] = ["none", "impi"]
    message = error_of(config)
    assert "stacks.ompi.knobs.1: knob set 'impi' sets I_MPI_TUNING_MODE, which openmpi does not read; openmpi " \
           "reads OMPI_MCA_*, PMIX_*, UCX_*, OMP_*, KMP_*" in message


def test_a_campaign_selection_leaving_a_stack_without_cells_is_refused() -> None:
    config = with_knobs(two_kinds(), {"impi": {"I_MPI_TUNING_MODE": "auto"}}, selected=["impi"])
    assert "my.yaml: campaign.knobs: selects no knob set that stack 'ompi' (openmpi) reads, so it would have no " \
           "cells; add 'none' or give stacks.ompi.knobs" in error_of(config)


def test_values_real_knobs_use_are_accepted() -> None:
    knobs = {"a": {"OMP_PLACES": "{0,1},{2,3}", "KMP_AFFINITY": "granularity=fine,compact,1,0"},
             "b": {"I_MPI_PIN_DOMAIN": "[0x3,0xc]", "I_MPI_ADJUST_ALLREDUCE": "2:0-1024", "FI_PROVIDER": "tcp"},
             "c": {"I_MPI_EAGER_THRESHOLD": 65536, "I_MPI_SHM_CELL_FWD_SIZE": "64k"}}
    config = validate(with_knobs(tiny(), knobs))
    assert config.knobs["c"]["I_MPI_EAGER_THRESHOLD"] == "65536"


# -- the launch: knobs over everything, as argv and environment ------------------------------------


def test_knobs_override_launcher_settings_and_environment_but_not_the_program() -> None:
    program = ["IMB-MPI1", "-x", "UCX_TLS=keep", "-genv", "I_MPI_X", "keep"]
    launch = Launch(argv=["mpirun", "--mca", "pml", "ucx", "-x", "UCX_TLS=sm,self", "-x", "UCX_LOG_LEVEL=info",
                          "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "2", *program],
                    env={"I_MPI_FABRICS": "shm", "I_MPI_DEBUG": "5"})
    knobs = {"UCX_TLS": "posix,self", "OMPI_MCA_pml": "ob1", "MPIR_CVAR_DEBUG_SUMMARY": "0",
             "I_MPI_FABRICS": "shm:ofi", "I_MPI_DEBUG": "5", "OMP_PROC_BIND": "close"}
    out = overlay_launch(launch, program, knobs)
    assert out.launch.argv == ["mpirun", "--mca", "pml", "ob1", "-x", "UCX_TLS=posix,self", "-x", "UCX_LOG_LEVEL=info",
                               "-genv", "MPIR_CVAR_DEBUG_SUMMARY", "0", *program]
    assert out.launch.env == {"I_MPI_FABRICS": "shm:ofi", "I_MPI_DEBUG": "5", "UCX_TLS": "posix,self",
                              "OMPI_MCA_pml": "ob1", "MPIR_CVAR_DEBUG_SUMMARY": "0", "OMP_PROC_BIND": "close"}
    # Only real changes are recorded (I_MPI_DEBUG already had the knob's value).
    assert out.replaced == {"OMPI_MCA_pml": "ucx", "UCX_TLS": "sm,self", "MPIR_CVAR_DEBUG_SUMMARY": "2",
                            "I_MPI_FABRICS": "shm"}
    assert shell_replaced({"OMP_PROC_BIND": "spread", "UCX_TLS": "all"}, knobs, out.replaced) == {
        "OMP_PROC_BIND": "spread"}
    assert overlay_launch(launch, program, {}).launch is launch


def test_tidy_rows_carry_the_knob_set_and_options_in_columns_and_label() -> None:
    import polars as pl

    from mpiatlas.programs.base import tag_columns

    row = {"cell": "c", "stack": "intelmpi", "transport": "shm", "mapping": "core", "nodes": 1, "ppn": 2, "np": 2,
           "rep": 0, "status": "ok", "options": "off_cache=-1", "knobs": "eager"}
    tagged = tag_columns(pl.DataFrame({"x": [1]}), row, {"options": (row["options"], pl.String())})
    assert {"label": "intelmpi/shm/core [off_cache=-1] [knobs=eager]", "knobs": "eager",
            "options": "off_cache=-1"}.items() <= tagged.row(0, named=True).items()
    plain = tag_columns(pl.DataFrame({"x": [1]}), {**row, "options": "", "knobs": ""}, {})
    assert plain["label"].item() == "intelmpi/shm/core" and plain["knobs"].item() == ""
