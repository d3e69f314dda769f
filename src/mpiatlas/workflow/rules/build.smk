# The C kernels (KERNELS_SRC, package data: mpiatlas/kernels_src), built once per stack against its compiler wrapper (the kernel
# list is mpiatlas.programs.kernel_names(): one module under programs/kernels per kernel):
#
#   stack record --(kernels_build)--> R/kernels/<stack>/{<every kernel>,build.json}
#
# With containers.enabled the kernels run from the images instead (on their PATH; host launcher
# + apptainer exec, like IMB), so nothing is built on the host.
# KERNEL_SOURCES (every source file, so an edit rebuilds) is in rules/common.smk.


rule kernels_build:
    input:
        stack=lambda wc: stack_record(wc.stack),
        sources=KERNEL_SOURCES,
    output:
        [f"{R}/kernels/{{stack}}/{name}" for name in (*programs.kernel_names(), kernel_build.BUILD_RECORD)],
    params:
        kind=lambda wc: CAMPAIGN.stacks[wc.stack].kind,
        source=lambda wc: CAMPAIGN.stacks[wc.stack].source,
        prefix=lambda wc: cell_model.stack_prefix(CAMPAIGN, wc.stack),
        out=lambda wc: layout.kernel_build_dir(R, wc.stack),
        # The sources' directory, from the input (a param naming it outright is a hard-coded path to lint).
        source_dir=lambda wildcards, input: os.path.dirname(input.sources[0]),
    log:
        f"{LOGS}/kernels/{{stack}}.build.log",
    conda:
        "../envs/mpiatlas.yaml"
    # Before any cell group (a group takes the whole machine): installs and builds then run side by side
    # while no launch is being timed.
    priority: 100
    # Built where Snakemake runs (a cluster's login node shares the compute nodes' file system).
    localrule: True
    shell:
        "mpiatlas kernels build --stack-kind {params.kind:q} --prefix {params.prefix:q} --source {params.source:q}"
        " --source-dir {params.source_dir:q} --out {params.out:q} > {log:q} 2>&1"
