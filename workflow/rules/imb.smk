# One IMB launch per cell: all message sizes of one benchmark in one call (-msglog),
# repetitions as separate launches. A failed launch still ends the job successfully
# with status.json saying why, so one bad cell never stops the campaign.


rule imb:
    input:
        stack_records,
        cell_container_inputs,
    output:
        directory("results/raw/imb/{stack}/{transport}/{mapping}/np{np}/{benchmark}/{algorithm}/rep{rep}"),
    params:
        spec=cell_spec_json,
    log:
        "results/logs/imb/{stack}/{transport}/{mapping}/np{np}/{benchmark}/{algorithm}/rep{rep}.log",
    resources:
        tasks=lambda wc: int(wc.np),
    shell:
        "mpiatlas run-cell --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
