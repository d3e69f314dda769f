"""The campaign matrix: a validated config expanded into cells, and where their files live (config → cells).

* :mod:`.config` — loads a campaign, validates it against workflow/schemas/config.schema.yaml and
  returns the typed ``Campaign`` (:mod:`mpiatlas.spine.campaign`);
* :mod:`.cells` — the one Cell (kind, stack, transport, mapping, np, benchmark, algorithm, rep, threads,
  nodes) and its id;
* :mod:`.knobs` — named knob sets: environment / MCA variables per stack, an axis of every cell;
* :mod:`.kernel_sweeps` — matsum/jacobi knob lists → variant groups, and their checks;
* :mod:`.kernel_blocks` — the ``kernels.<name>`` config blocks as typed records;
* :mod:`.adaptive` — how many launches a series needs for a narrow enough median;
* :mod:`.layout` — names every path and file of a campaign; atomic writes.
"""
