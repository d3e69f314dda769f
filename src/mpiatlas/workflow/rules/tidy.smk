# Raw cell outputs -> tidy parquet: every sample, every cell's status, provenance.
#
# The analysis (tidy -> fits -> report) is defined once for two views of the raw cells:
#   full     R/tidy, R/fits, R/report.html           needs every planned cell
#   partial  R/partial/{tidy,fits}, R/partial/report.html
#            the cells sealed so far, the others listed as `missing` (mpiatlas campaign builds it
#            when cells failed to run or the run was stopped; it depends on no cell, so it never
#            runs one)
# Both read the cell list from the manifest and the raw cells from R/raw, so the command line
# stays short for any number of cells.


rule cells_manifest:
    # Every cell id of the campaign (tidy writes a `missing` row for any that has no raw directory)
    # the notes on what was left out before the run (mpiatlas.programs.unplanned_notes), and the
    # validated config the cell groups expand their cells from.
    output:
        manifest=f"{R}/{layout.CELLS_MANIFEST}",
        notes=f"{R}/{layout.NOTES}",
        campaign=f"{R}/{layout.CAMPAIGN_CONFIG}",
    params:
        # Not the cell ids: the script expands them from the validated config, once per run. As a
        # param they would be computed by every `snakemake -n` and pickled into the script's preamble.
        notes=unplanned_notes(CAMPAIGN),
        campaign=CAMPAIGN.as_dict(),
    log:
        f"{LOGS}/cells_manifest.log",
    localrule: True
    # Before the cells: it runs beside the stack installs and kernel builds, not between cell groups.
    priority: 100
    conda:
        "../envs/mpiatlas.yaml"
    script:
        "../scripts/cells_manifest.py"


for VIEW, OUT in VIEWS.items():

    rule:
        name:
            f"tidy_{VIEW}"
        input:
            # The campaign's cell ids (adaptive repetitions: every round's, common.smk expected_manifest).
            manifest=expected_manifest(VIEW),
            notes=rules.cells_manifest.output.notes,
            groups=GROUP_DONE if VIEW == "full" else [],
        output:
            samples=f"{OUT}/tidy/{layout.IMB_SAMPLES}",
            cells=f"{OUT}/tidy/{layout.CELLS_TABLE}",
            provenance=f"{OUT}/tidy/{layout.PROVENANCE_TABLE}",
            notes=f"{OUT}/tidy/{layout.NOTES}",
            kernels=[f"{OUT}/tidy/{name}" for name in KERNEL_TABLE_NAMES],
            # The per-size summary (`mpiatlas aggregate`'s table) in the same process and job.
            summary=f"{OUT}/tidy/{layout.IMB_SUMMARY}",
        params:
            # Derived from the rule's files (the campaign directory holds the manifest and raw/).
            tidy=lambda wildcards, output: os.path.dirname(output.samples),
            raw=lambda wildcards, input: f"{os.path.dirname(input.manifest)}/raw",
        log:
            f"{LOGS}/{VIEW}/tidy.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas tidy --raw {params.raw:q} --expected {input.manifest:q} --notes {input.notes:q}"
            " --out {params.tidy:q} --summary {output.summary:q} > {log:q} 2>&1"
