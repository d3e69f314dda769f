# Performance models fitted to the tidy samples, for both views (rules/tidy.smk): Hockney (p2p),
# the kernel models (λ and B from the Hockney fits) and the α-β models over nodes (Alltoall /
# Allgather against the config's nominal link bandwidth; a single-node campaign gets a valid file
# with no fits).
#
# One job and one process for all three (mpiatlas.models.fits.fit_all, the library `mpiatlas fit --model
# all` calls too): a process per model paid an interpreter and the polars/numpy imports each, and the
# kernel fits waited for the Hockney job, all on the path between the last cell and the report. Each
# file follows its schema (src/mpiatlas/data/schemas/fits-<model>.schema.json, checked before any is
# written) and is written aside and renamed: a failed fit never leaves a truncated file behind (the
# SLURM profile keeps the outputs of failed jobs, see profiles/slurm/profile.yaml).

for VIEW, OUT in VIEWS.items():

    rule:
        name:
            f"fit_{VIEW}"
        input:
            samples=f"{OUT}/tidy/{layout.IMB_SAMPLES}",
            tables=[f"{OUT}/tidy/{name}" for name in KERNEL_TABLE_NAMES],
        output:
            hockney=f"{OUT}/fits/{layout.HOCKNEY_FIT}",
            kernels=f"{OUT}/fits/{layout.KERNELS_FIT}",
            alphabeta=f"{OUT}/fits/{layout.ALPHABETA_FIT}",
        params:
            tidy=lambda wildcards, input: os.path.dirname(input.samples),
            bandwidth=CAMPAIGN.network.bandwidth_gbit_s,
            network=CAMPAIGN.network.name,
        log:
            f"{LOGS}/{VIEW}/fit.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        script:
            "../scripts/fit.py"
