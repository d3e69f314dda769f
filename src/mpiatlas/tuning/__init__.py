"""``mpiatlas tune``: the winning collective algorithms as each MPI stack's own tuning file.

:mod:`.decide` makes the decision (significant gain over the default, merged into ranges);
:mod:`.openmpi_rules`, :mod:`.intelmpi_env` and :mod:`.mpich_json` write it in each stack's format;
:mod:`.markdown` explains it (tuning.md).
"""
