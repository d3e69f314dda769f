"""Where a campaign's files live: the only place that names them.

    results/<campaign name>/
      raw/<cell id>/{stdout.txt,stderr.txt,provenance.json,status.json,topology.json}   sealed, read-only
                                        (topology.json: the node the runner pinned the ranks on)
      lost/<cell id>/job<N>/            a cell sealed `failed` because SLURM job N lost a node, set
                                        aside (whole, still read-only) when the cell runs again
      perturbed/<cell id>/attempt<k>/   the k-th launch of a cell judged `perturbed` (status.json
                                        quality), set aside whole when the group re-measures it
      tidy/{cells.parquet,imb_samples.parquet,imb_summary.parquet,kernel_<name>.parquet,provenance.json,notes.json,
           topologies.json}             (topologies.json: {host: node topology} of the cells' hosts)
      fits/{hockney.json,kernels.json,alphabeta.json}
      report.html                       the full report (every planned cell has run)
      partial/{tidy,fits}/, partial/report.html   what exists, when cells are missing
      campaign.json                     the campaign's validated config, as the cell groups read it
      groups/<group id>.json            a job group's cells and statuses, written once all are sealed
      logs/                             one log per rule, snakemake.log of `mpiatlas campaign`
      kernels/<stack>/                  the C kernels built against each stack
    results/images/                     Apptainer images (shared: they depend on the stack kind only)
    ~/.cache/mpiatlas/ (files.user_cache_dir) the compiled IMB scanner, the report's Vega bundle, the node's
                                        limits per boot, kernel builds by source and compiler

Each campaign has its own directory so that two configs in one checkout never mix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

from mpiatlas.files import write_json_atomic
from mpiatlas.spine.campaign import Campaign


class UnplannedNote(TypedDict):
    """Cells left out before the run (mpiatlas.programs.unplanned_notes), as the notes file holds them."""

    what: str
    why: str
    cells: int

RESULTS_ROOT = "results"
IMAGES_DIR = f"{RESULTS_ROOT}/images"

# Files of one sealed cell directory.
STDOUT, STDERR, PROVENANCE, STATUS = "stdout.txt", "stderr.txt", "provenance.json", "status.json"
# The node topology the runner pinned the cell's ranks on (mpiatlas.node.topology_record).
TOPOLOGY = "topology.json"
# status.json key of a cell sealed `failed` because its batch job lost a node: it runs again.
NODE_LOST = "node_lost"

# Tidy tables.
CELLS_TABLE = "cells.parquet"
IMB_SAMPLES = "imb_samples.parquet"
IMB_SUMMARY = "imb_summary.parquet"
PROVENANCE_TABLE = "provenance.json"
NOTES = "notes.json"
# {hostname: topology record}: one per host the cells ran on (the fits place ranks with it).
TOPOLOGIES_TABLE = "topologies.json"
KERNEL_TABLE = "kernel_{name}.parquet"

# Fits.
HOCKNEY_FIT, KERNELS_FIT, ALPHABETA_FIT = "hockney.json", "kernels.json", "alphabeta.json"

REPORT = "report.html"
PARTIAL = "partial"
LOST = "lost"
PERTURBED = "perturbed"
# status.json key of a cell re-measured after perturbed launches: [{path, quality_reason}] of the
# attempts set aside, paths relative to the campaign's results directory.
REMEASURED = "remeasured"
# What a later re-measure waited for before its launch (runner.quiet; provenance and status.json).
QUIET_WAIT = "quiet_wait"
CELLS_MANIFEST = "cells.json"
CAMPAIGN_CONFIG = "campaign.json"
GROUPS = "groups"
SNAKEMAKE_LOG = "snakemake.log"


def results_dir(campaign_name: str) -> str:
    """``results/<campaign name>``, relative to the checkout (Snakemake's working directory)."""
    return f"{RESULTS_ROOT}/{campaign_name}"


def raw_dir(results: str, cell_id: str) -> str:
    return f"{results}/raw/{cell_id}"


def tidy_dir(results: str) -> str:
    return f"{results}/tidy"


def fits_dir(results: str) -> str:
    return f"{results}/fits"


def logs_dir(results: str) -> str:
    return f"{results}/logs"


def kernel_build_dir(results: str, stack_label: str) -> str:
    return f"{results}/kernels/{stack_label}"


def kernel_table(name: str) -> str:
    return KERNEL_TABLE.format(name=name)


def report_path(results: str, partial: bool = False) -> str:
    return f"{results}/{PARTIAL}/{REPORT}" if partial else f"{results}/{REPORT}"


def is_sealed(cell_dir: Path) -> bool:
    """A cell has a result once its status is written (the directory appears whole, by rename)."""
    return (cell_dir / STATUS).is_file()


def results_of(cell_dir: Path, cell_id: str) -> Path:
    """The campaign's results directory of ``cell_dir`` (``<results>/raw/<cell id>``)."""
    return Path(cell_dir).parents[len(Path(cell_id).parts)]


def lost_attempt(cell_dir: Path, cell_id: str, job_id: str) -> Path:
    """Where the node-lost attempt sealed in ``cell_dir`` (``<results>/raw/<cell id>``) is kept
    when the cell runs again: ``<results>/lost/<cell id>/job<job id>``."""
    return results_of(cell_dir, cell_id) / LOST / cell_id / f"job{job_id}"


def perturbed_attempt(cell_dir: Path, cell_id: str, attempt: int) -> Path:
    """Where the ``attempt``-th perturbed launch of the cell sealed in ``cell_dir`` is kept when the
    cell is measured again: ``<results>/perturbed/<cell id>/attempt<attempt>``."""
    return results_of(cell_dir, cell_id) / PERTURBED / cell_id / f"attempt{attempt}"


def perturbed_attempts(cell_dir: Path, cell_id: str) -> list[Path]:
    """The cell's perturbed attempts set aside so far, in the order they ran (attempt1, attempt2, ...)."""
    found = perturbed_attempt(cell_dir, cell_id, 0).parent
    attempts = [(int(p.name.removeprefix("attempt")), p) for p in found.glob("attempt*")
                if p.name.removeprefix("attempt").isdigit()] if found.is_dir() else []
    return [p for _, p in sorted(attempts)]


def count_perturbed_attempts(results: Path) -> int:
    """How many perturbed attempts the campaign under ``results`` has set aside (re-measured
    launches). Walks ``<results>/perturbed`` only, which holds just those attempts."""
    count = 0
    for _parent, dirs, _ in os.walk(Path(results) / PERTURBED):
        attempts = [d for d in dirs if d.startswith("attempt") and d.removeprefix("attempt").isdigit()]
        count += len(attempts)
        dirs[:] = [d for d in dirs if d not in attempts]  # an attempt's own files are not walked
    return count


def group_done(results: str, group_id: str) -> str:
    """The file a job group writes once every one of its cells is sealed."""
    return f"{results}/{GROUPS}/{group_id}.json"


def write_manifest(manifest: str | Path, notes: str | Path, cell_ids: list[str], unplanned: list[UnplannedNote],
                   config: str | Path | None = None, campaign: Campaign | None = None) -> None:
    """The campaign's cell ids (one JSON list), its notes on what was not planned and, for the cell
    groups, its validated config."""
    write_json_atomic(manifest, cell_ids)
    write_json_atomic(notes, unplanned)
    if config is not None and campaign is not None:
        write_json_atomic(config, campaign.as_dict())
