# The C kernels of src/kernels (ring, matsum, jacobi, pingpong, coll) as campaign cells, with their models.
#
#   stack record --(kernels_build, once per stack)--> results/kernels/<stack>/{ring,matsum,jacobi,pingpong,coll,build.json}
#   --(kernel, one launch per cell)--> results/raw/kernel/<stack>/<transport>/<placement>/np<P>/<kernel>/<group>/rep<r>/
#   (placement: the mapping, or `node2` for the `node` mapping over 2 nodes: a batch job of 2 nodes, srun)
#   --(tidy)--> results/tidy/kernel_<name>.parquet --(fit_kernels)--> results/fits/kernels.json
#
# Config block `kernels:` (workflow/schemas/config.schema.yaml, mpiatlas.kernel_matrix). With
# containers.enabled the kernels run from the images instead (on their PATH as ring, matsum,
# jacobi; host launcher + apptainer exec, like IMB), so nothing is built on the host.
from mpiatlas import containers as _kernel_containers
from mpiatlas import kernel_matrix

KERNEL_CELLS = kernel_matrix.kernel_cells(config)
KERNEL_CELLS_BY_ID = {c.id: c for c in KERNEL_CELLS}
KERNEL_TABLES = [f"results/tidy/kernel_{name}.parquet" for name in kernel_matrix.KERNEL_NAMES]
KERNEL_SOURCES = [str(p) for p in _kernel_containers.kernel_sources("src/kernels")] or ["src/kernels/Makefile"]


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
    return [stack_record(wildcards.stack), *kernel_matrix.build_outputs(wildcards.stack)]


rule kernels_build:
    input:
        stack=lambda wc: stack_record(wc.stack),
        sources=KERNEL_SOURCES,
    output:
        ring=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/ring",
        matsum=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/matsum",
        jacobi=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/jacobi",
        pingpong=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/pingpong",
        coll=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/coll",
        record=kernel_matrix.KERNEL_BUILD_DIR + "/{stack}/" + kernel_matrix.BUILD_RECORD,
    params:
        kind=lambda wc: config["stacks"][wc.stack]["kind"],
        source=lambda wc: config["stacks"][wc.stack].get("source", "pypi"),
        prefix=lambda wc: matrix.stack_prefix(config, wc.stack),
        out=lambda wc: kernel_matrix.build_dir(wc.stack),
    log:
        "results/logs/kernels/{stack}.build.log",
    # Built where Snakemake runs (a cluster's login node shares the compute nodes' file system).
    localrule: True
    shell:
        "mpiatlas kernels build --stack-kind {params.kind:q} --prefix {params.prefix:q} --source {params.source:q}"
        " --source-dir src/kernels --out {params.out:q} > {log:q} 2>&1"


rule kernel:
    input:
        kernel_cell_inputs,
    output:
        directory("results/raw/kernel/{stack}/{transport}/{mapping}/np{np}/{kernel}/{variant}/rep{rep}"),
    params:
        spec=kernel_spec_json,
    log:
        "results/logs/kernel/{stack}/{transport}/{mapping}/np{np}/{kernel}/{variant}/rep{rep}.log",
    wildcard_constraints:
        kernel="ring|matsum|jacobi|pingpong|coll",
        variant=r"[A-Za-z0-9_.+-]+",
    # Batch jobs (profiles/slurm), as for IMB cells (rules/imb.smk): up to campaign.cells_per_job
    # cells of one allocation (stack x transport x placement x ranks x threads) per job, one
    # after another (cell_slot=1 per job; threads take every core Snakemake has), so a killed
    # job loses only its unfinished cells and a re-run packs just the missing ones again.
    group:
        kernel_group
    threads: 4096
    resources:
        tasks=lambda wc: int(wc.np),
        # A hybrid rank owns its OpenMP threads' cores (OMP_NUM_THREADS comes from the cell spec).
        cpus_per_task=lambda wc: kernel_cell_from_wildcards(wc).threads,
        mpi=mpi_resource,
        nodes=lambda wc: kernel_matrix.kernel_nodes(kernel_cell_from_wildcards(wc)),
        slurm_extra=lambda wc: kernel_matrix.slurm_extra(config, kernel_cell_from_wildcards(wc)),
        runtime=lambda wc, attempt: kernel_matrix.estimate_runtime_min(config, kernel_cell_from_wildcards(wc), attempt),
        mem_mb=lambda wc: kernel_matrix.estimate_mem_mb(config, kernel_cell_from_wildcards(wc)),
        cell_slot=1,
    # Like IMB cells: a failed launch still ends the job successfully, status.json says why.
    shell:
        "mpiatlas run-cell --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


rule fit_kernels:
    input:
        tables=KERNEL_TABLES,
        hockney="results/fits/hockney.json",
    output:
        "results/fits/kernels.json",
    log:
        "results/logs/fit_kernels.log",
    localrule: True
    shell:
        "mpiatlas fit results/tidy --model kernels --hockney {input.hockney:q} --json"
        " > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"
