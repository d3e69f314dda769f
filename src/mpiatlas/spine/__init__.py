"""The types the data's way is built on, at the ground floor: they import nothing of mpiatlas, so every package
may name them without an arrow running back up.

* :mod:`.campaign` — the typed ``Campaign``: a validated config as frozen dataclasses per section
  (built by :func:`mpiatlas.matrix.config.validate`);
* :mod:`.cell_coords` — a cell's coordinates, defined once: ``CellAxes`` and the records built on them (an id's
  fields, a Cell as JSON, the spec's and provenance's ``Coords``);
* :mod:`.cell_spec` — ``CellSpec``, the TypedDict of what one launch needs (JSON between processes);
* :mod:`.cell_row` — ``CellRow``, a cells-table row as tidy builds it and every program tags its rows with;
* :mod:`.series` — ``SeriesKey``, what tells one series from another, and the one render of its label.
"""
