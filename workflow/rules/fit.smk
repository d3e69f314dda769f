# Performance models fitted to the tidy samples, for both views (rules/tidy.smk). Each fit is
# written aside and renamed: a failed fit never leaves a truncated file behind (the SLURM profile
# keeps the outputs of failed jobs, see profiles/slurm/profile.yaml).

for VIEW, OUT in VIEWS.items():

    rule:
        name:
            f"fit_hockney_{VIEW}"
        input:
            samples=f"{OUT}/tidy/{layout.IMB_SAMPLES}",
        output:
            f"{OUT}/fits/{layout.HOCKNEY_FIT}",
        params:
            tidy=lambda wildcards, input: os.path.dirname(input.samples),
        log:
            f"{LOGS}/{VIEW}/fit_hockney.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas fit {params.tidy:q} --model hockney --json > {output:q}.tmp 2> {log:q}"
            " && mv {output:q}.tmp {output:q}"

    rule:
        name:
            f"fit_alphabeta_{VIEW}"
        # Alltoall/Allgather over nodes against the config's nominal link bandwidth; a single-node
        # campaign gets a valid file with no fits.
        input:
            samples=f"{OUT}/tidy/{layout.IMB_SAMPLES}",
        output:
            f"{OUT}/fits/{layout.ALPHABETA_FIT}",
        params:
            tidy=lambda wildcards, input: os.path.dirname(input.samples),
            bandwidth=config["network"]["bandwidth_gbit_s"],
            network=config["network"]["name"],
        log:
            f"{LOGS}/{VIEW}/fit_alphabeta.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas fit {params.tidy:q} --model alphabeta --bandwidth-gbit-s {params.bandwidth}"
            " --network-name {params.network:q} --json > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"

    rule:
        name:
            f"fit_kernels_{VIEW}"
        input:
            tables=[f"{OUT}/tidy/{name}" for name in KERNEL_TABLE_NAMES],
            hockney=f"{OUT}/fits/{layout.HOCKNEY_FIT}",
        output:
            f"{OUT}/fits/{layout.KERNELS_FIT}",
        params:
            tidy=lambda wildcards, input: os.path.dirname(input.tables[0]),
        log:
            f"{LOGS}/{VIEW}/fit_kernels.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas fit {params.tidy:q} --model kernels --hockney {input.hockney:q} --json"
            " > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"
