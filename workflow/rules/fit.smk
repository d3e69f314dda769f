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


rule fit_alphabeta:
    input:
        "results/tidy/imb_samples.parquet",
    output:
        "results/fits/alphabeta.json",
    params:
        bandwidth=config["network"]["bandwidth_gbit_s"],
        network=config["network"]["name"],
    log:
        "results/logs/fit_alphabeta.log",
    localrule: True
    # Alltoall/Allgather over nodes against the config's nominal link bandwidth; a single-node
    # campaign gets a valid file with no fits. Written aside and renamed, as fit_hockney.
    shell:
        "mpiatlas fit results/tidy --model alphabeta --bandwidth-gbit-s {params.bandwidth} "
        "--network-name {params.network:q} --json > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"
