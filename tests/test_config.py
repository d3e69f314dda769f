"""Campaign config validation and matrix expansion."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from mpiatlas.spine.campaign import Campaign
from mpiatlas.campaign.auto_plan import load, plan
from mpiatlas.matrix.config import ConfigError, validate
from mpiatlas.matrix.cells import Cell
from mpiatlas.node.topology_synthetic import parse_synthetic
from mpiatlas.programs import cell_spec, cells_of_kind
from mpiatlas.programs.imb import unplanned_notes


def imb_cells(config: dict) -> list[Cell]:
    return cells_of_kind(config, "imb")

REPO = Path(__file__).resolve().parents[1]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def without_user_built_imb(config: Campaign, monkeypatch: pytest.MonkeyPatch, stacks_dir: Path) -> Campaign:
    """``config`` on a machine where Open MPI has no IMB: whether its IMB cells are planned depends
    on MPIATLAS_IMB_OPENMPI and <stacks_dir>/openmpi/imb, which a developer may have set up."""
    monkeypatch.delenv("MPIATLAS_IMB_OPENMPI", raising=False)
    return config.revised(campaign={"stacks_dir": str(stacks_dir)})


def test_full_config_expands_to_every_cell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # config/full.yaml is the former default campaign (the default is now a small first look).
    config = without_user_built_imb(load(REPO / "config" / "full.yaml"), monkeypatch, tmp_path)
    cells = imb_cells(config)
    # 2 stacks x 2 transports x 1 mapping x (10 benchmarks + Bcast, Allreduce x 4 algorithms) x 3 reps, np=2.
    # (It was 3 stacks: Open MPI's IMB cells are no longer planned, IMB cannot be built offline; the
    # note below says so instead.)
    assert len(cells) == 2 * 2 * (10 + 2 * 4) * 3
    assert {c.transport for c in cells} == {"shm", "ofi-tcp", "default"}
    assert not [c for c in cells if c.stack == "openmpi"]
    (note,) = unplanned_notes(config)
    assert note["what"] == "IMB cells of stack 'openmpi'"
    assert note["why"].startswith("Open MPI needs IMB built from source") and "pingpong and coll kernels" in note["why"]
    assert note["cells"] == 2 * (10 + 2 * 4) * 3  # the 108 Open MPI cells formerly planned as `unavailable`
    assert {c.algorithm for c in cells if c.stack == "mpich" and c.benchmark == "Bcast"} == {
        "default", "binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather"}
    assert {c.rep for c in cells} == {0, 1, 2}
    assert len({c.id for c in cells}) == len(cells)
    assert "imb/intelmpi/shm/core/np2/PingPong/default/rep0" in {c.id for c in cells}


def test_default_config_is_a_first_look(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `auto` planned for a node shaped like this 2-core machine (tests/test_auto_plan.py: other nodes).
    this_machine = parse_synthetic("pack:1 l3:1 core:2 pu:1")
    config = without_user_built_imb(load(REPO / "config" / "config.yaml", this_machine), monkeypatch, tmp_path)
    assert config.campaign.name == "first-look"
    cells = imb_cells(config)
    # 2 stacks x 2 transports x (PingPong, Allreduce, Alltoall + Bcast x 3 algorithms) x 3 reps, np=2;
    # Open MPI's IMB cells are not planned (see the note).
    assert len(cells) == 2 * 2 * (3 + 3) * 3
    assert {c.stack for c in cells} == {"intelmpi", "mpich"}
    notes = [(n["what"], n["cells"]) for n in unplanned_notes(config)]
    assert notes == [("IMB cells of stack 'openmpi'", 2 * (3 + 3) * 3)]


def test_defaults_are_filled_in() -> None:
    config = plan(default_config())
    assert config.campaign.stacks_dir == ".stacks"
    assert config.campaign.allow_oversubscribe is True


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["campaign"].update(bogus=1), "campaign: Additional properties are not allowed ('bogus'"),
        (lambda c: c.update(mappings=["corez"]), "mappings.0: 'corez' is not allowed; allowed values: core, l3, die, numa, socket, node, regions, same_core, same_l3, same_die, same_numa, same_socket, other_socket"),
        (lambda c: c["stacks"]["intelmpi"].update(kind="foompi"), "stacks.intelmpi.kind: 'foompi' is not allowed; allowed values: intelmpi, openmpi, mpich"),
        (lambda c: c["campaign"].update(repetitions=0), "campaign.repetitions: 0 is less than the minimum of 1"),
        (lambda c: c["imb"].update(benchmarks=["PingPang"]), "imb.benchmarks.0: 'PingPang' is not allowed"),
        (lambda c: c["imb"].update(msglog=[10, 2]), "imb.msglog: min 10 is larger than max 2"),
    ],
)
def test_bad_values_name_the_key_and_the_allowed_values(mutate, expected: str) -> None:
    config = copy.deepcopy(default_config())
    mutate(config)
    with pytest.raises(ConfigError) as err:
        plan(config, "my.yaml")
    assert expected in str(err.value)
    assert "my.yaml" in str(err.value)


def test_unknown_transport_is_rejected_before_anything_runs() -> None:
    config = default_config()
    # ofi-tcp stays: the kernels of config/config.yaml run over it (validate checks that)
    config["stacks"]["intelmpi"]["transports"] = ["shm", "ofi-tcp", "ucx-tcp"]
    with pytest.raises(ConfigError, match=r"stacks.intelmpi.transports: 'ucx-tcp' is not a transport of intelmpi; allowed values: .*ofi-tcp"):
        imb_cells(plan(config))


def test_algorithms_become_an_axis_for_collectives_only() -> None:
    config = default_config()
    config["stacks"]["intelmpi"]["algorithms"] = {"Bcast": ["default", "id1", "id2"]}
    cells = imb_cells(plan(config))
    bcast = {c.algorithm for c in cells if c.benchmark == "Bcast" and c.stack == "intelmpi"}
    assert bcast == {"default", "id1", "id2"}
    assert {c.algorithm for c in cells if c.benchmark == "PingPong"} == {"default"}


def test_cell_spec_carries_everything_the_runner_needs() -> None:
    config = load(REPO / "config" / "config.yaml")
    spec = cell_spec(config, imb_cells(config)[0])
    assert spec["stack"] == {"label": "intelmpi", "kind": "intelmpi", "source": "pypi", "prefix": ".stacks/intelmpi",
                             "imb_from": None}
    assert spec["imb"]["msglog"] == [0, 22]
    assert spec["timeout_s"] == 300


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load(bad)


def test_unknown_algorithm_names_are_rejected_with_the_valid_names() -> None:
    config = default_config()
    config["stacks"]["mpich"]["algorithms"]["Bcast"] = ["default", "binomail"]
    with pytest.raises(ConfigError, match=r"stacks.mpich.algorithms.Bcast: 'binomail' not known for mpich; allowed values: .*binomial"):
        imb_cells(plan(config))


def test_the_default_campaign_takes_a_profiles_config_values() -> None:
    """`snakemake -n --profile profiles/local` has no --configfile, but the profile sets
    `grouping: machine` through --config: that is no campaign, so the default one is read under it."""
    from mpiatlas.matrix.config import has_campaign, merged

    assert not has_campaign({"grouping": "machine"}) and has_campaign({"campaign": {"name": "x"}})
    assert merged({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"c": 4}, "e": 5}) == {"a": {"b": 1, "c": 4}, "d": 3, "e": 5}
    config = load(REPO / "config" / "config.yaml", overrides={"grouping": "machine", "campaign": {"timeout_s": 200}})
    default = load(REPO / "config" / "config.yaml")
    assert config.grouping == "machine" and config.campaign.timeout_s == 200
    assert config.campaign.name == default.campaign.name and config.imb == default.imb
    with pytest.raises(ConfigError, match="with --config campaign"):
        load(REPO / "config" / "config.yaml", overrides={"campaign": {"repetitions": "many"}})


def test_validate_only_validates_and_leaves_auto_to_the_plan() -> None:
    """``auto`` is planned for a node by a step of its own (mpiatlas.campaign.auto_plan.plan), after
    validation: validate() reads no topology and names the step instead of building an unplanned campaign."""
    with pytest.raises(ConfigError, match=r"my.yaml: mappings, processes: `auto` is planned for a node .*auto_plan.plan"):
        validate(default_config(), "my.yaml")
    concrete = default_config() | {"mappings": ["core"], "processes": [2]}
    assert validate(concrete).as_dict() == plan(concrete).as_dict()
