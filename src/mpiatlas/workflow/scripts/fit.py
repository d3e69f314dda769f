"""fit: every model of one campaign view fitted and its fits files written (Snakemake ``script:``).

The library does the work (:func:`mpiatlas.models.fits.fit_all`, :func:`mpiatlas.models.fits.write_fits`:
one file per model, each validated against its schema and written aside and renamed, none when a
fit cannot be made). A script rather than ``mpiatlas fit --model all`` in a shell: the options go
in as values, not as a command line to quote; rather than a ``run:`` block: that would parse the
whole workflow again in a fresh Snakemake process.
"""

from pathlib import Path

from mpiatlas.models.fits import FitError, FitOptions, fit_all, write_fits
from mpiatlas.models.fits_files import FitsFileError

sm = snakemake  # noqa: F821 -- injected by Snakemake's script directive

with open(sm.log[0], "w") as log:
    options = FitOptions(bandwidth_gbit_s=sm.params.bandwidth, network_name=sm.params.network)
    try:
        fits = fit_all(sm.params.tidy, options)
        for problem in fits.problems:  # what was not fitted, and fallbacks: the log, not the terminal
            print(problem, file=log)
        written = write_fits(fits, Path(sm.output.hockney).parent)
    except (FitError, FitsFileError) as exc:
        print(f"fit: {exc}", file=log)
        raise SystemExit(f"fit: {exc}") from exc
    print(f"{len(written)} fits files: {', '.join(p.name for p in written)}", file=log)
