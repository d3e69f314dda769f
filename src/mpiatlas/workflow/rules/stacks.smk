# Install each PyPI MPI stack into its own venv (no root), or check a system one.


rule stack:
    output:
        f"{R}/stacks/{{stack}}.json",
    params:
        kind=lambda wc: CAMPAIGN.stacks[wc.stack].kind,
        source=lambda wc: CAMPAIGN.stacks[wc.stack].source,
        prefix=lambda wc: cell_model.stack_prefix(CAMPAIGN, wc.stack),
    log:
        f"{LOGS}/stacks/{{stack}}.log",
    conda:
        "../envs/mpiatlas.yaml"
    # Before any cell group (a group takes the whole machine): installs and builds then run side by side
    # while no launch is being timed.
    priority: 100
    # pip needs a package registry: on a cluster that is the login node, not a compute node.
    localrule: True
    shell:
        "mpiatlas stack install --kind {params.kind:q} --source {params.source:q}"
        " --prefix {params.prefix:q} --record {output:q} > {log:q} 2>&1"
