# Performance models fitted to the tidy samples.


rule fit_hockney:
    input:
        "results/tidy/imb_samples.parquet",
    output:
        "results/fits/hockney.json",
    log:
        "results/logs/fit_hockney.log",
    shell:
        "mpiatlas fit results/tidy --model hockney --json > {output:q} 2> {log:q}"
