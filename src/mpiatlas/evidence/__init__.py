"""What a launch leaves besides its numbers: how it ended, where it ran, which MPI library it really used.

* :mod:`.outcome` — a cell's status, why, and the evidence (status.json);
* :mod:`.provenance` — host and software facts of where and how a number was measured;
* :mod:`.mpi_library` — the MPI library a cell's ranks ran: their banner and the libmpi the loader resolved.
"""
