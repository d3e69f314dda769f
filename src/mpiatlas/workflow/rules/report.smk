# One static, offline HTML file with findings, data, fits, residuals and provenance, for both
# views (rules/tidy.smk): the partial report is built by exactly the same rule as the full one.
# Both take the campaign's R/limits/limits.json as a declared input (none when campaign.limits is
# off: rules/limits.smk, included before this file), and the full one R/tuning when tune.enabled
# (rules/tune.smk).

for VIEW, OUT in VIEWS.items():

    rule:
        name:
            f"report_{VIEW}"
        input:
            summary=f"{OUT}/tidy/{layout.IMB_SUMMARY}",
            cells=f"{OUT}/tidy/{layout.CELLS_TABLE}",
            provenance=f"{OUT}/tidy/{layout.PROVENANCE_TABLE}",
            hockney=f"{OUT}/fits/{layout.HOCKNEY_FIT}",
            kernels=f"{OUT}/fits/{layout.KERNELS_FIT}",
            alphabeta=f"{OUT}/fits/{layout.ALPHABETA_FIT}",
            limits=LIMITS_TARGETS,
            tuning=TUNE_TARGETS if VIEW == "full" else [],
        output:
            layout.report_path(R, partial=VIEW == "partial"),
        params:
            tidy=lambda wildcards, input: os.path.dirname(input.summary),
            fits=lambda wildcards, input: os.path.dirname(input.hockney),
            title=CAMPAIGN.campaign.name + (" (partial)" if VIEW == "partial" else ""),
            limits=lambda wildcards, input: " ".join(f"--limits {shlex.quote(p)}" for p in input.limits),
            tuning=lambda wildcards, input: f"--tuning {shlex.quote(os.path.dirname(input.tuning[0]))}" if input.tuning else "",
        log:
            f"{LOGS}/{VIEW}/report.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas report --tidy {params.tidy:q} --fits {params.fits:q} --out {output:q}"
            " --title {params.title:q} {params.limits} {params.tuning} > {log:q} 2>&1"
