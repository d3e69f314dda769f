"""cells_manifest: write the campaign's cell ids, its notes and its validated config (Snakemake ``script:``).

A script rather than a ``run:`` block: Snakemake executes a ``run:`` block in a fresh Snakemake process that
parses the whole workflow (and so expands every cell) again; a script starts only an interpreter.
"""

from mpiatlas import programs
from mpiatlas.matrix import layout
from mpiatlas.matrix.config import validate
from mpiatlas.spine.campaign import Campaign

sm = snakemake  # noqa: F821 -- injected by Snakemake's script directive

with open(sm.log[0], "w") as log:
    # The same cells as the workflow's (programs.expand of the same validated config, sorted).
    campaign = Campaign.of(sm.params.campaign, validate)
    cell_ids = [cell.id for cell in programs.expand(campaign)]
    layout.write_manifest(sm.output.manifest, sm.output.notes, cell_ids, sm.params.notes,
                          sm.output.campaign, campaign)
    print(f"{len(cell_ids)} cells -> {sm.output.manifest}", file=log)
