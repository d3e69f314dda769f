# Small named helpers shared by every stage. Logic lives in the mpiatlas package.
import json

from mpiatlas import config as mpiatlas_config
from mpiatlas import matrix

# Validate once, with defaults filled in; errors name the key and the allowed values.
if not config:
    config = mpiatlas_config.load("config/config.yaml")
else:
    config = mpiatlas_config.validate(config, source="campaign config (--configfile)")
CELLS = matrix.imb_cells(config)
CELLS_BY_ID = {c.id: c for c in CELLS}


wildcard_constraints:
    stack=r"[A-Za-z0-9_-]+",
    transport=r"[A-Za-z0-9_-]+",
    mapping=r"[a-z0-9]+",
    np=r"\d+",
    benchmark=r"[A-Za-z_]+",
    algorithm=r"[A-Za-z0-9_-]+",
    rep=r"\d+",


def raw_dir(cell):
    return f"results/raw/{cell.id}"


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
    return f"results/stacks/{label}.json"


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
