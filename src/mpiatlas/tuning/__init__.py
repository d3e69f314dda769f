"""``mpiatlas tune``: the winning collective algorithms as each MPI stack's own tuning file.

:mod:`.decide` makes the decision (significant gain over the default, merged into ranges);
:mod:`.openmpi_rules`, :mod:`.intelmpi_env` and :mod:`.mpich_json` write it in each stack's format;
:mod:`.markdown` explains it (tuning.md). :mod:`.samples` reads what the decision is made from (IMB samples,
else the coll kernel's rank-0 times). The validation campaign: :mod:`.validation_config` builds it (default,
exported file as a knob set, forced winner), :mod:`.validate_run` runs it, :mod:`.validation` judges each cell.
For process counts and sizes never measured: :mod:`.extrapolate` predicts each algorithm's time with an interval
(the project's models + a learned correction; where the default runs a forced algorithm, :mod:`.same_code`
predicts it as that algorithm) and chooses, :mod:`.guided` turns that into decisions.csv, the
stack's file and tuning.md, :mod:`.regret` scores rules on held-out measurements, :mod:`.adaptive_tune` measures
only the cells whose decision is uncertain, round by round.
"""
