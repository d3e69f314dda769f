# Every cell of the campaign (IMB and kernel cells, mpiatlas.programs), run a job group at a time.
#
# One job per group (mpiatlas.campaign.resources.job_groups: the cells of one allocation, up to
# campaign.cells_per_job of them): one `mpiatlas run-cell --group` process runs them one after
# another (imports, topology and stacks once), seals each cell on its own into R/raw/<cell id>,
# and writes R/groups/<group>.json once every cell of the group is sealed. Sealed cells are not
# Snakemake outputs: a killed group job loses only its unsealed cells, and its re-run skips the
# sealed ones. A failed launch still ends the job successfully, its status.json says why.

# An input function, not the list (common.smk all_group_done says why).
GROUP_DONE = all_group_done
VIEWS = {"full": R, "partial": f"{R}/{layout.PARTIAL}"}


rule cell_group:
    input:
        group_inputs,
        # The validated config the group's cells are expanded from (written by cells_manifest).
        campaign=f"{R}/{layout.CAMPAIGN_CONFIG}",
    output:
        layout.group_done(R, "{group}"),
    log:
        f"{LOGS}/groups/{{group}}.log",
    conda:
        "../envs/mpiatlas.yaml"
    resources:
        # The whole machine (profiles/local: resources machine=1000): two groups, or a group and
        # any other job, never run side by side skewing each other's timings. Under SLURM the
        # resource means nothing to sbatch, which gets cpus_per_task per rank.
        machine=resources.MACHINE_WHOLE,
        # How many cells the group holds: a plain count, shown by `snakemake -n` with the others.
        cells=group_resource("cells"),
        tasks=group_resource("tasks"),
        cpus_per_task=group_resource("cpus_per_task"),
        # The executor plugin only checks that `mpi` is set (sbatch --ntasks, no srun wrapper):
        # run-cell starts the ranks itself with campaign.launcher (auto: srun inside a job).
        mpi=group_resource("mpi"),
        nodes=group_resource("nodes"),
        slurm_extra=group_resource("slurm_extra"),
        runtime=group_resource("runtime"),
        mem_mb=group_resource("mem_mb"),
        # Declared so Snakemake's default (2 x input.size_mb, at least 1000) is not evaluated: that
        # stats every input in a fresh asyncio loop per job (a third of a 177k-cell dry run). A
        # group writes a few small files per cell; its inputs (stack records, builds, images) are
        # read in place. The SLURM executor passes no disk request.
        disk_mb=1000,
    params:
        # A later adaptive round's group: its cells are listed in the decision that created it.
        round_cells=round_cells_option if ROUNDS else "",
    shell:
        # The option only in an adaptive campaign: each field costs a format per job in a dry run.
        "mpiatlas run-cell --group {wildcards.group:q} --config {input.campaign:q}"
        + (" {params.round_cells}" if ROUNDS else "")
        + " --done {output:q} > {log:q} 2>&1"


if ROUNDS:

    # Adaptive repetitions and the later re-measure round (mpiatlas.campaign.adaptive_rounds): once a round's groups are done, decide from
    # the sealed cells which series need more repetitions and cut those into the next round's
    # groups. tidy_full's inputs walk the rounds (common.smk adaptive_walk) until a decision asks
    # for none. Local: it reads the raw cells, seconds of work, no allocation needed.
    checkpoint adaptive_round:
        input:
            groups=round_group_done,
            previous=previous_decision,
            campaign=f"{R}/{layout.CAMPAIGN_CONFIG}",
        output:
            decision=adaptive_rounds.decision_path(R, "{round}"),
            manifest=adaptive_rounds.manifest_path(R, "{round}"),
        params:
            # The sealed cells, beside the manifest (as tidy finds them).
            raw=lambda wildcards, output: os.path.join(os.path.dirname(output.manifest), "raw"),
        wildcard_constraints:
            round=r"\d+",
        log:
            f"{LOGS}/adaptive/round{{round}}.log",
        localrule: True
        conda:
            "../envs/mpiatlas.yaml"
        script:
            "../scripts/adaptive_round.py"
