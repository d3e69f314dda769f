# Raw cell outputs -> tidy parquet: every sample, every cell's status, provenance.


rule tidy:
    input:
        [raw_dir(c) for c in CELLS],
    output:
        samples="results/tidy/imb_samples.parquet",
        cells="results/tidy/cells.parquet",
        provenance="results/tidy/provenance.json",
    log:
        "results/logs/tidy.log",
    shell:
        "mpiatlas tidy --out results/tidy {input:q} > {log:q} 2>&1"


rule aggregate:
    input:
        "results/tidy/imb_samples.parquet",
    output:
        "results/tidy/imb_summary.parquet",
    log:
        "results/logs/aggregate.log",
    shell:
        "mpiatlas aggregate {input:q} --out {output:q} > {log:q} 2>&1"
