"""cells_manifest: write the campaign's cell ids, its notes and its validated config (Snakemake ``script:``).

A script rather than a ``run:`` block: Snakemake executes a ``run:`` block in a fresh Snakemake process that
parses the whole workflow (and so expands every cell) again; a script starts only an interpreter.
"""

from mpiatlas import layout

sm = snakemake  # noqa: F821 -- injected by Snakemake's script directive

with open(sm.log[0], "w") as log:
    layout.write_manifest(sm.output.manifest, sm.output.notes, sm.params.cells, sm.params.notes,
                          sm.output.campaign, sm.params.campaign)
    print(f"{len(sm.params.cells)} cells -> {sm.output.manifest}", file=log)
