# Physical limits of the campaign's nodes: memory copy bandwidth per cache level and memory, from
# likwid-bench (mpiatlas.limits), once per campaign, one record per node in R/limits/<node>.json
# and all of them in R/limits/limits.json. The report sets shared-memory bandwidths against it.
#
# Its own job, before the cells (priority) and alone (every core: no group runs beside it, as
# cell_group does): the copy rate of a node that is running benchmarks is not its limit. Under
# SLURM it asks for as many nodes as the widest cell spans and `mpiatlas limits` runs itself once
# per node with srun; likwid-bench missing -> records that say unavailable, the job still succeeds.

LIMITS_NODES = max((c.nodes for c in CELLS), default=1)


rule limits:
    output:
        f"{R}/limits/limits.json",
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output[0]),
    log:
        f"{LOGS}/limits.log",
    threads: 4096
    priority: 100
    resources:
        nodes=LIMITS_NODES,
        tasks=LIMITS_NODES,
        # One likwid thread per node; the node to itself (a copy rate beside other jobs is not a limit).
        # Set so sbatch does not take threads (4096, the local "alone" device) as --cpus-per-task.
        cpus_per_task=1,
        slurm_extra="--ntasks-per-node=1 --exclusive",
        runtime=30,
    conda:
        "../envs/mpiatlas.yaml"
    shell:
        "mpiatlas limits --out-dir {params.out_dir:q} > {log:q} 2>&1"
