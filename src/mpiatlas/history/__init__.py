"""Campaign history: every campaign remembered in one SQLite file, trends, and regressions found
beyond the run-to-run variation the history itself shows.

:mod:`~mpiatlas.history.store` keeps the file, :mod:`~mpiatlas.history.entry` turns a results
directory into an entry, :mod:`~mpiatlas.history.check` judges the newest entry of each series, :mod:`~mpiatlas.history.record`
adds a finished campaign at the end of ``mpiatlas campaign`` (a failure said, never raised).
"""
