"""mpiatlas: measure, model and report how MPI performs on a cluster."""

__version__ = "0.1.0"
