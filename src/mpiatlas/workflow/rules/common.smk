# Small named helpers shared by every stage. Logic lives in the mpiatlas package; file names in
# mpiatlas.matrix.layout. Every output of a campaign lives under R = results/<campaign name>/.
import json
import os
import shlex

from mpiatlas.matrix import cells as cell_model
from mpiatlas.matrix import config as mpiatlas_config
from mpiatlas.stacks import containers as _containers
from mpiatlas import programs
from mpiatlas.campaign import adaptive_rounds, auto_plan, resources
from mpiatlas.matrix import adaptive, layout
from mpiatlas.programs import build as kernel_build
from mpiatlas.programs import unplanned_notes

# Validate once, with the schema's defaults filled in (errors name the key and the allowed values), and plan
# `auto` lists for the node (mpiatlas.campaign.auto_plan; campaign.json holds concrete lists, planned already).
# Every rule reads the typed campaign (mpiatlas.spine.campaign.Campaign), never Snakemake's raw config.
if not mpiatlas_config.has_campaign(config):
    # No --configfile: the default campaign, under what a profile or --config set (profiles/local: grouping).
    CAMPAIGN = auto_plan.load("config/config.yaml", overrides=config)
else:
    CAMPAIGN = auto_plan.plan(config, source="campaign config (--configfile)")
CELLS = programs.expand(CAMPAIGN)
# Job groups (mpiatlas.campaign.resources): the cells of one allocation, cells_per_job at a time; one
# Snakemake job and one `mpiatlas run-cell --group` process each.
CELL_COSTS = resources.CellCosts(CAMPAIGN)
GROUPS = resources.job_groups(CAMPAIGN, CELLS, CELL_COSTS, presorted=True)  # expand's cells are sorted
R = layout.results_dir(CAMPAIGN.campaign.name)
# Adaptive repetitions (mpiatlas.matrix.adaptive; None: a fixed count, and none of what follows is used):
# CELLS hold min repetitions of every series (round 0); later rounds' groups (ids r<round>.<id>)
# resolve through the decision that created them (mpiatlas.campaign.adaptive_rounds).
ADAPTIVE = adaptive.spec_of(CAMPAIGN)
# Rounds after the campaign's own groups: adaptive repetitions, or the later re-measure round
# (campaign.remeasure_later) of a campaign of fixed repetitions, through the same checkpoint.
ROUNDS = adaptive_rounds.has_rounds(CAMPAIGN)
ALL_GROUPS = GROUPS if not ROUNDS else adaptive_rounds.RoundGroups(R, GROUPS)
LOGS = layout.logs_dir(R)
KERNEL_TABLE_NAMES = [layout.kernel_table(name) for name in programs.kernel_names()]
# What mpiatlas ships beside this workflow (package data, mpiatlas.files.shipped): the kernels' C
# sources and the image templates, wherever mpiatlas is installed; the campaign runs in its own directory.
KERNELS_SRC = str(kernel_build.KERNELS_DIR)
KERNEL_SOURCES = [str(p) for p in _containers.kernel_sources(KERNELS_SRC)] or [f"{KERNELS_SRC}/Makefile"]
IMAGE_TEMPLATES_DIR = str(_containers.TEMPLATES_DIR)


wildcard_constraints:
    stack=r"[A-Za-z0-9_-]+",
    group=r"[A-Za-z0-9_.+-]+",


def stack_record(label):
    return f"{R}/stacks/{label}.json"


def group_cells(wildcards):
    try:
        return ALL_GROUPS[wildcards.group]
    except KeyError:
        raise ValueError(f"{wildcards.group} is not a job group of this campaign") from None


def round_decision(group):
    """The decision file that created an adaptive round's group (None for the campaign's own groups)."""
    round_ = adaptive_rounds.round_of_group(group) if ROUNDS else None
    return None if round_ is None else adaptive_rounds.decision_path(R, round_ - 1)


@resources.fixed_signature
def round_cells_option(wildcards):
    """run-cell's --round-cells FILE for a later round's group (its cells are listed there), else ""."""
    decision = round_decision(wildcards.group)
    return "" if decision is None else f"--round-cells {shlex.quote(decision)}"


@resources.fixed_signature
def group_inputs(wildcards):
    """Every stack record the group's cells need (an MPICH stack's IMB comes from the Intel MPI
    stack), and the host build of the kernels or the image they run in. A group's cells share
    their kind and stack (resources.allocation), so its first cell says it all."""
    first = group_cells(wildcards)[0]
    labels = {first.stack, cell_model.imb_provider(CAMPAIGN, first.stack) if first.kind == "imb" else None}
    inputs = [stack_record(name) for name in sorted(filter(None, labels))]
    decision = round_decision(wildcards.group)
    if decision is not None:
        inputs.append(decision)  # a later round's group: run after the decision that asked for it
    image = cell_model.container_spec(CAMPAIGN, first.stack)
    if image is not None:
        return inputs + [image["image"], image["inspect"], image["preflight"]]
    if first.kind == "kernel":
        inputs += kernel_build.build_outputs(CAMPAIGN, first.stack)
    return inputs


# Each group's resources, computed once per group and attempt (resources.GroupResources); runtime
# and memory from the budgets job_groups added up already.
GROUP_RESOURCES = resources.GroupResources(CAMPAIGN, ALL_GROUPS, CELL_COSTS, GROUPS.budgets)


def group_resource(name):
    """A resource of a group job (resources.group_resources), for the `resources:` directive."""
    return GROUP_RESOURCES.resource(name)


@resources.fixed_signature
def all_group_done(wildcards):
    """Every group's done file, as an input function (tidy_full's input): for a rule that also
    names another rule's output, Snakemake hashes the input item each file came from once per
    file, and a list item of n files hashes all n each time (quadratic: 8,855 groups took a fifth
    of a 177k-cell dry run); a function hashes in O(1). An adaptive campaign's: those of every
    round, walked through the rounds' checkpoints until a decision asks for no more cells."""
    if not ROUNDS:
        return _GROUP_DONE_FILES
    return adaptive_walk()[0]


def adaptive_walk():
    """(every group's done file through the last round, the last round): the recursive-checkpoint
    pattern; each checkpoints.adaptive_round.get raises until that round's decision exists."""
    files, round_ = list(_GROUP_DONE_FILES), 0
    while True:
        checkpoints.adaptive_round.get(round=round_)
        groups = ALL_GROUPS.decision(round_)["groups"]
        if not groups:
            return files, round_
        files += [layout.group_done(R, group) for group in groups]
        round_ += 1


def round_group_done(wildcards):
    """The adaptive_round checkpoint's input: the done files of the round's groups (round 0: the
    campaign's own; round r: those round r - 1 decided)."""
    round_ = int(wildcards.round)
    if round_ == 0:
        return _GROUP_DONE_FILES
    checkpoints.adaptive_round.get(round=round_ - 1)
    return [layout.group_done(R, g) for g in ALL_GROUPS.decision(round_ - 1)["groups"]]


def previous_decision(wildcards):
    """Round r - 1's decision (the series it left at `more`), for round r > 0."""
    round_ = int(wildcards.round)
    return [] if round_ == 0 else [adaptive_rounds.decision_path(R, round_ - 1)]


def expected_manifest(view):
    """The cell ids tidy expects: the campaign's manifest, or for the full view of an adaptive
    campaign every cell its last round planned (an input function: it walks the rounds)."""
    if not ROUNDS or view != "full":
        return f"{R}/{layout.CELLS_MANIFEST}"
    return lambda wildcards: adaptive_rounds.manifest_path(R, adaptive_walk()[1])


_GROUP_DONE_FILES = [layout.group_done(R, group) for group in GROUPS]


# -- Apptainer images (rules/images.smk; the config block is described there) --------------------
IMAGES_CONFIG = CAMPAIGN.as_dict().get("containers") or {}  # the block as written: the images' render params
IMAGES_DIR = CAMPAIGN.containers.images_dir.rstrip("/")
IMAGE_STACKS = sorted(CAMPAIGN.containers.stacks or _containers.STACK_KINDS)


def container_image_targets():
    """SIFs (+ inspect records) of every configured image, or [] when containers are disabled."""
    if not CAMPAIGN.containers.enabled:
        return []
    return [f"{IMAGES_DIR}/{s}.{ext}" for s in IMAGE_STACKS for ext in ("sif", "inspect.json")]


def image_render_json(wildcards):
    """Every rendering value of the stack's image (pinned versions, IMB origin, bootstrap), as one
    param: a change re-renders and rebuilds the image."""
    return json.dumps(_containers.render_params(wildcards.stack, IMAGES_CONFIG), sort_keys=True)


# mpiatlas campaign checks every prerequisite once before Snakemake starts (mpiatlas.campaign.preflight) and
# says so through MPIATLAS_PREFLIGHT_DONE; a plain `snakemake` run checks here, before its first job
# (Snakemake runs no onstart for a dry run, nor inside batch jobs).
onstart:
    from mpiatlas.campaign import preflight

    preflight.check_once(CAMPAIGN, slurm=preflight.submits_to_slurm(getattr(workflow.executor_plugin, "name", "")))
