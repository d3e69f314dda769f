# Raw cell outputs -> tidy parquet: every sample, every cell's status, provenance.


rule cells_manifest:
    # Every cell id of the campaign: tidy writes a `missing` row for any without a raw directory
    # (mpiatlas campaign's partial report after an interrupted or partly killed run).
    output:
        "results/cells.json",
    params:
        cells=[c.id for c in CELLS] + [c.id for c in KERNEL_CELLS],
    localrule: True
    run:
        with open(output[0], "w") as fh:
            json.dump(list(params.cells), fh, indent=0)
            fh.write("\n")


rule tidy:
    input:
        manifest="results/cells.json",
        cells=[raw_dir(c) for c in CELLS] + [raw_dir(c) for c in KERNEL_CELLS],
    output:
        samples="results/tidy/imb_samples.parquet",
        cells="results/tidy/cells.parquet",
        provenance="results/tidy/provenance.json",
        kernels=KERNEL_TABLES,
    log:
        "results/logs/tidy.log",
    localrule: True
    shell:
        "mpiatlas tidy --out results/tidy --expected {input.manifest:q} {input.cells:q} > {log:q} 2>&1"


rule aggregate:
    input:
        "results/tidy/imb_samples.parquet",
    output:
        "results/tidy/imb_summary.parquet",
    log:
        "results/logs/aggregate.log",
    localrule: True
    shell:
        "mpiatlas aggregate {input:q} --out {output:q} > {log:q} 2>&1"
