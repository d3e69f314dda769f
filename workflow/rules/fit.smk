# Performance models fitted to the tidy samples.


rule fit_hockney:
    input:
        "results/tidy/imb_samples.parquet",
    output:
        "results/fits/hockney.json",
    log:
        "results/logs/fit_hockney.log",
    localrule: True
    # Written aside and renamed: a failed fit never leaves a truncated file behind (the SLURM
    # profile keeps the outputs of failed jobs, see profiles/slurm/profile.yaml).
    shell:
        "mpiatlas fit results/tidy --model hockney --json > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"
