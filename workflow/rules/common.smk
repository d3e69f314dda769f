# Small named helpers shared by every stage. Logic lives in the mpiatlas package; file names in
# mpiatlas.layout. Every output of a campaign lives under R = results/<campaign name>/.
import json
import os

from mpiatlas import config as mpiatlas_config
from mpiatlas import containers as _containers
from mpiatlas import kernel_matrix, layout, matrix

# Validate once, with defaults filled in; errors name the key and the allowed values.
if not config:
    config = mpiatlas_config.load("config/config.yaml")
else:
    config = mpiatlas_config.validate(config, source="campaign config (--configfile)")
CELLS = matrix.imb_cells(config)
CELLS_BY_ID = {c.id: c for c in CELLS}
KERNEL_CELLS = kernel_matrix.kernel_cells(config)
KERNEL_CELLS_BY_ID = {c.id: c for c in KERNEL_CELLS}
R = layout.results_dir(config["campaign"]["name"])
LOGS = layout.logs_dir(R)


wildcard_constraints:
    stack=r"[A-Za-z0-9_-]+",
    transport=r"[A-Za-z0-9_-]+",
    mapping=r"[a-z0-9]+",
    np=r"\d+",
    benchmark=r"[A-Za-z_]+",
    algorithm=r"[A-Za-z0-9_-]+",
    rep=r"\d+",


def raw_dir(cell):
    return layout.raw_dir(R, cell.id)


def cell_from_wildcards(wildcards):
    cell_id = (f"imb/{wildcards.stack}/{wildcards.transport}/{wildcards.mapping}/np{wildcards.np}/"
               f"{wildcards.benchmark}/{wildcards.algorithm}/rep{wildcards.rep}")
    try:
        return CELLS_BY_ID[cell_id]
    except KeyError:
        raise ValueError(f"{cell_id} is not a cell of this campaign") from None


def cell_spec_json(wildcards):
    return json.dumps(matrix.cell_spec(config, cell_from_wildcards(wildcards)), sort_keys=True)


def stack_record(label):
    return f"{R}/stacks/{label}.json"


def stack_records(wildcards):
    """The cell's stack, plus the Intel MPI stack whose IMB an MPICH stack borrows."""
    labels = [wildcards.stack, matrix.imb_provider(config, wildcards.stack)]
    return [stack_record(label) for label in labels if label]


def cell_container_inputs(wildcards):
    """The image, its build record and its preflight, for containerised cells."""
    image = matrix.container_spec(config, wildcards.stack)
    if image is None:
        return []
    return [image["image"], image["inspect"], image["preflight"]]


# -- batch-job resources of a cell (used by profiles/slurm; harmless locally) -------------------
# Cells needing the same allocation form one Snakemake group (matrix.job_group); Snakemake packs
# each group's cells that still have to run into batch jobs of campaign.cells_per_job cells
# (that group's --group-components; a value given on the command line wins). A resumed campaign
# is packed again from its missing cells only.


def register_job_group(group):
    """``group``, with campaign.cells_per_job as its --group-components (IMB and kernel cells)."""
    # Called while Snakemake builds the DAG, after it installed its group settings (the Snakefile
    # is parsed before that, so this cannot be set at the top level).
    settings = getattr(workflow, "group_settings", None)
    if settings is not None and group not in settings.group_components:
        components = dict(settings.group_components)
        components[group] = int(config["campaign"]["cells_per_job"])
        settings.group_components = type(settings.group_components)(components)
    return group


def imb_group(wildcards):
    return register_job_group(matrix.job_group(cell_from_wildcards(wildcards)))


def mpi_resource(wildcards):
    """The executor plugin's `mpi` flag: set for multi-rank cells only. The plugin refuses an MPI
    job of one task, and that refusal (in its submit thread) hangs the whole run instead of failing."""
    return "srun" if int(wildcards.np) > 1 else ""


def imb_nodes(wildcards):
    return matrix.nodes_for(cell_from_wildcards(wildcards))


def imb_slurm_extra(wildcards):
    return matrix.slurm_extra(config, cell_from_wildcards(wildcards))


def imb_runtime_min(wildcards, attempt):
    return matrix.estimate_runtime_min(matrix.cell_spec(config, cell_from_wildcards(wildcards)), attempt)


def imb_mem_mb(wildcards, attempt):
    return matrix.estimate_mem_mb(matrix.cell_spec(config, cell_from_wildcards(wildcards)))


# -- kernel cells (rules/kernels.smk) ------------------------------------------------------------


def kernel_cell_from_wildcards(wildcards):
    cell_id = (f"kernel/{wildcards.stack}/{wildcards.transport}/{wildcards.mapping}/np{wildcards.np}/"
               f"{wildcards.kernel}/{wildcards.variant}/rep{wildcards.rep}")
    try:
        return KERNEL_CELLS_BY_ID[cell_id]
    except KeyError:
        raise ValueError(f"{cell_id} is not a kernel cell of this campaign") from None


def kernel_spec_json(wildcards):
    return json.dumps(kernel_matrix.kernel_spec(config, kernel_cell_from_wildcards(wildcards)), sort_keys=True)


def kernel_group(wildcards):
    """Batch job group (profiles/slurm): kernel cells of one allocation, see kernel_matrix.job_group."""
    return register_job_group(kernel_matrix.job_group(kernel_cell_from_wildcards(wildcards)))


def kernel_cell_inputs(wildcards):
    """The stack record, and the host build of the stack's kernels or the image the cell runs in."""
    image = matrix.container_spec(config, wildcards.stack)
    if image is not None:
        return [stack_record(wildcards.stack), image["image"], image["inspect"], image["preflight"]]
    return [stack_record(wildcards.stack), *kernel_matrix.build_outputs(config, wildcards.stack)]


# -- Apptainer images (rules/images.smk; the config block is described there) --------------------
IMAGES_CONFIG = dict(config.get("containers") or {})
IMAGES_DIR = str(IMAGES_CONFIG.get("images_dir", "results/images")).rstrip("/")
IMAGE_STACKS = sorted((IMAGES_CONFIG.get("stacks") or {}) or _containers.STACK_KINDS)


def container_image_targets():
    """SIFs (+ inspect records) of every configured image, or [] when containers are disabled."""
    if not IMAGES_CONFIG.get("enabled", False):
        return []
    return [f"{IMAGES_DIR}/{s}.{ext}" for s in IMAGE_STACKS for ext in ("sif", "inspect.json")]


def image_render_json(wildcards):
    """Every rendering value of the stack's image (pinned versions, IMB origin, bootstrap), as one
    param: a change re-renders and rebuilds the image."""
    return json.dumps(_containers.render_params(wildcards.stack, IMAGES_CONFIG), sort_keys=True)


# mpiatlas campaign checks every prerequisite once before Snakemake starts (mpiatlas.preflight) and
# says so through MPIATLAS_PREFLIGHT_DONE; a plain `snakemake` run checks here, before its first job
# (Snakemake runs no onstart for a dry run, nor inside batch jobs).
onstart:
    from mpiatlas import preflight

    preflight.check_once(config, slurm=getattr(workflow.executor_plugin, "name", "") == "slurm")
