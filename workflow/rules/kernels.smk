# The C kernels of src/kernels (ring, matsum, jacobi, pingpong, coll) as campaign cells, with their models.
#
#   stack record --(kernels_build, once per stack)--> R/kernels/<stack>/{ring,matsum,jacobi,pingpong,coll,build.json}
#   --(kernel, one launch per cell)--> R/raw/kernel/<stack>/<transport>/<placement>/np<P>/<kernel>/<group>/rep<r>/
#   (placement: the mapping, or `node2` for the `node` mapping over 2 nodes: a batch job of 2 nodes, srun)
#   --(tidy)--> R/tidy/kernel_<name>.parquet --(fit_kernels)--> R/fits/kernels.json      (R = results/<campaign>)
#
# Config block `kernels:` (workflow/schemas/config.schema.yaml, mpiatlas.kernel_matrix). With
# containers.enabled the kernels run from the images instead (on their PATH as ring, matsum,
# jacobi; host launcher + apptainer exec, like IMB), so nothing is built on the host.

# Kernel cells and their helpers (kernel_cell_from_wildcards, kernel_spec_json, kernel_group,
# kernel_cell_inputs) are in rules/common.smk.
KERNEL_TABLE_NAMES = [layout.kernel_table(name) for name in kernel_matrix.KERNEL_NAMES]
KERNEL_SOURCES = [str(p) for p in _containers.kernel_sources("src/kernels")] or ["src/kernels/Makefile"]


rule kernels_build:
    input:
        stack=lambda wc: stack_record(wc.stack),
        sources=KERNEL_SOURCES,
    output:
        [f"{R}/kernels/{{stack}}/{name}" for name in (*kernel_matrix.KERNEL_NAMES, kernel_matrix.BUILD_RECORD)],
    params:
        kind=lambda wc: config["stacks"][wc.stack]["kind"],
        source=lambda wc: config["stacks"][wc.stack].get("source", "pypi"),
        prefix=lambda wc: matrix.stack_prefix(config, wc.stack),
        out=lambda wc: kernel_matrix.build_dir(config, wc.stack),
    log:
        f"{LOGS}/kernels/{{stack}}.build.log",
    conda:
        "../envs/mpiatlas.yaml"
    # Built where Snakemake runs (a cluster's login node shares the compute nodes' file system).
    localrule: True
    shell:
        "mpiatlas kernels build --stack-kind {params.kind:q} --prefix {params.prefix:q} --source {params.source:q}"
        " --source-dir src/kernels --out {params.out:q} > {log:q} 2>&1"


rule kernel:
    input:
        kernel_cell_inputs,
    output:
        directory(f"{R}/raw/kernel/{{stack}}/{{transport}}/{{mapping}}/np{{np}}/{{kernel}}/{{variant}}/rep{{rep}}"),
    params:
        spec=kernel_spec_json,
    log:
        f"{LOGS}/kernel/{{stack}}/{{transport}}/{{mapping}}/np{{np}}/{{kernel}}/{{variant}}/rep{{rep}}.log",
    conda:
        "../envs/mpiatlas.yaml"
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
