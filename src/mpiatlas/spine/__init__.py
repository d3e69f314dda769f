"""The types the data's way is built on, at the ground floor: they import nothing of mpiatlas, so every package
may name them without an arrow running back up.

* :mod:`.campaign` — the typed ``Campaign``: a validated config as frozen dataclasses per section
  (built by :func:`mpiatlas.matrix.config.validate`);
* :mod:`.cell_spec` — ``CellSpec``, the TypedDict of what one launch needs (JSON between processes).
"""
