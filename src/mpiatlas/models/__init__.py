"""Performance models fitted to the tidy tables; :func:`fit_all` fits every one of a campaign."""

from mpiatlas.models.fits import FitError, FitOptions, Fits, TidyTables, fit_all, read_fits, write_fits

__all__ = ["FitError", "FitOptions", "Fits", "TidyTables", "fit_all", "read_fits", "write_fits"]
