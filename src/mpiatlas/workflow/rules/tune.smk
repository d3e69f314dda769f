# Collective tuning (mpiatlas tune, src/mpiatlas/tuning/): the significantly faster forced
# algorithms as each stack's own tuning file in R/tuning/, and with tune.validate the proof that the
# files take effect, a validation campaign of the tuned cells (default, exported file, forced
# winner) into results/<campaign>-validate/, judged in R/tuning/validation/validation.json.
#
# tune.enabled: false (default) leaves both rules out of the DAG. The report takes R/tuning as a
# declared input (rules/report.smk, included after this file).

TUNE = CAMPAIGN.tune
TUNE_DIR = f"{R}/tuning"
# What rule all and the report ask for, [] when off.
TUNE_TARGETS = (
    [f"{TUNE_DIR}/decision.json"] + ([f"{TUNE_DIR}/validation/validation.json"] if TUNE.validate else [])
    if TUNE.enabled
    else []
)


if TUNE_TARGETS:

    rule tune:
        input:
            samples=f"{R}/tidy/{layout.IMB_SAMPLES}",
            kernels=[f"{R}/tidy/{name}" for name in KERNEL_TABLE_NAMES],
            campaign=f"{R}/{layout.CAMPAIGN_CONFIG}",
        output:
            decision=f"{TUNE_DIR}/decision.json",
            markdown=f"{TUNE_DIR}/tuning.md",
        params:
            results=lambda wildcards, input: os.path.dirname(input.campaign),
            out_dir=lambda wildcards, output: os.path.dirname(output.decision),
            min_gain=TUNE.min_gain,
            stacks_dir=CAMPAIGN.campaign.stacks_dir,
        log:
            f"{LOGS}/tune.log",
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas tune {params.results:q} --out {params.out_dir:q} --min-gain {params.min_gain}"
            " --stacks-dir {params.stacks_dir:q} > {log:q} 2>&1"

    # The validation campaign is a campaign of its own, run by this workflow from inside this
    # job (mpiatlas.tuning.validate_run): alone on the machine, as rule limits (the whole machine
    # resource), since its cells time collectives. A failing cell fails no job:
    # validation.json says which, and the report shows it.
    rule tune_validate:
        input:
            decision=rules.tune.output.decision,
            campaign=f"{R}/{layout.CAMPAIGN_CONFIG}",
        output:
            f"{TUNE_DIR}/validation/validation.json",
        params:
            results=lambda wildcards, input: os.path.dirname(input.campaign),
            out_dir=lambda wildcards, output: os.path.dirname(output[0]),
            min_gain=TUNE.min_gain,
            stacks_dir=CAMPAIGN.campaign.stacks_dir,
        log:
            f"{LOGS}/tune_validate.log",
        resources:
            machine=resources.MACHINE_WHOLE,
        conda:
            "../envs/mpiatlas.yaml"
        localrule: True
        shell:
            "mpiatlas tune {params.results:q} --out {params.out_dir:q} --min-gain {params.min_gain}"
            " --stacks-dir {params.stacks_dir:q} --validate --inside-workflow > {log:q} 2>&1 || test -s {output:q}"
