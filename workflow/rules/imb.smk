# One IMB launch per cell: all message sizes of one benchmark in one call (-msglog),
# repetitions as separate launches. A failed launch still ends the job successfully
# with status.json saying why, so one bad cell never stops the campaign.


rule imb:
    input:
        stack_records,
        cell_container_inputs,
    output:
        directory(f"{R}/raw/imb/{{stack}}/{{transport}}/{{mapping}}/np{{np}}/{{benchmark}}/{{algorithm}}/rep{{rep}}"),
    params:
        spec=cell_spec_json,
    log:
        f"{LOGS}/imb/{{stack}}/{{transport}}/{{mapping}}/np{{np}}/{{benchmark}}/{{algorithm}}/rep{{rep}}.log",
    conda:
        "../envs/mpiatlas.yaml"
    # Batch jobs (profiles/slurm): up to campaign.cells_per_job cells with the same allocation
    # run one after another in one job (Snakemake group; the `cell_slot` limit of 1 per job in
    # the profile makes Snakemake stack them: runtime summed, tasks/mem the maximum).
    group:
        imb_group
    # A cell takes every core Snakemake has (threads are capped at --cores), so the cells of one
    # batch job run one after another, never side by side skewing each other's timings; sbatch
    # still gets one CPU per rank (cpus_per_task below).
    threads: 4096
    resources:
        tasks=lambda wc: int(wc.np),
        cpus_per_task=1,
        # The executor plugin only checks that `mpi` is set (sbatch --ntasks, no srun wrapper):
        # run-cell starts the ranks itself with campaign.launcher (auto: srun inside a job).
        mpi=mpi_resource,
        nodes=imb_nodes,
        slurm_extra=imb_slurm_extra,
        runtime=imb_runtime_min,
        mem_mb=imb_mem_mb,
        cell_slot=1,
    shell:
        "mpiatlas run-cell --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
