# One static, offline HTML file with data, fits, residuals and provenance.


rule report:
    input:
        "results/tidy/imb_summary.parquet",
        "results/tidy/cells.parquet",
        "results/tidy/provenance.json",
        "results/fits/hockney.json",
        "results/fits/kernels.json",
        "results/fits/alphabeta.json",
    output:
        "results/report.html",
    params:
        title=config["campaign"]["name"],
    log:
        "results/logs/report.log",
    localrule: True
    shell:
        "mpiatlas report --tidy results/tidy --fits results/fits --out {output:q} --title {params.title:q} > {log:q} 2>&1"
