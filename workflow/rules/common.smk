# Small named helpers shared by every stage. Logic lives in the mpiatlas package.
import json

from mpiatlas import config as mpiatlas_config
from mpiatlas import matrix

# Validate once, with defaults filled in; errors name the key and the allowed values.
config = mpiatlas_config.validate(config, source="campaign config")
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
