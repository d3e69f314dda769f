# Physical limits of the campaign's nodes: memory copy bandwidth per cache level and memory, from
# likwid-bench or mpiatlas's copy kernel (mpiatlas.node.limits), one record per node in R/limits/<node>.json and all of them in
# R/limits/limits.json. The report sets shared-memory bandwidths against it (rules/report.smk).
#
# campaign.limits: cached (default) reuses a node's record of this boot (~/.cache/mpiatlas/limits:
# the copy rate does not change within a boot, and measuring costs ~20 s alone on the node every
# campaign); fresh measures anyway (and refreshes the cache); off leaves the rule out of the DAG.
#
# Its own job, before the cells (priority) and alone (the whole machine resource: no group runs
# beside it, as cell_group does): the copy rate of a node that is running benchmarks is not its limit. Under
# SLURM it asks for as many nodes as the widest cell spans and `mpiatlas limits` runs itself once
# per node with srun; likwid-bench missing -> mpiatlas's copy kernel (kernels_src/stream.c, needs cc) measures,
# and failing that the record says unavailable; the job still succeeds.

# YAML reads an unquoted `off` as false; the schema allows both.
LIMITS_MODE = "off" if CAMPAIGN.campaign.limits is False else CAMPAIGN.campaign.limits
# The campaign's limits file, [] when off: what rule all and the report rules ask for.
LIMITS_TARGETS = [] if LIMITS_MODE == "off" else [f"{R}/limits/limits.json"]
LIMITS_NODES = max((c.nodes for c in CELLS), default=1)
# The link inter-node traffic uses (mpiatlas.node.link_rate): the stacks' tcp_interface, the config's rate as fallback.
LIMITS_NETWORK = " ".join(
    [f"--tcp-interface {shlex.quote(i)}" for i in dict.fromkeys(
        s.tcp_interface for s in CAMPAIGN.stacks.values() if s.tcp_interface)]
    + [f"--bandwidth-gbit-s {CAMPAIGN.network.bandwidth_gbit_s}",
       f"--network-name {shlex.quote(CAMPAIGN.network.name)}"])


if LIMITS_TARGETS:

    rule limits:
        output:
            LIMITS_TARGETS[0],
        params:
            out_dir=lambda wildcards, output: os.path.dirname(output[0]),
            fresh="--fresh" if LIMITS_MODE == "fresh" else "",
            network=LIMITS_NETWORK,
        log:
            f"{LOGS}/limits.log",
        priority: 100
        resources:
            # The node to itself (a copy rate beside other jobs is not a limit): locally the whole
            # machine (profiles/local), under SLURM --exclusive (slurm_extra).
            machine=resources.MACHINE_WHOLE,
            nodes=LIMITS_NODES,
            tasks=LIMITS_NODES,
            # One likwid thread per node.
            cpus_per_task=1,
            slurm_extra="--ntasks-per-node=1 --exclusive",
            runtime=30,
        conda:
            "../envs/mpiatlas.yaml"
        shell:
            "mpiatlas limits --out-dir {params.out_dir:q} {params.fresh} {params.network} > {log:q} 2>&1"
