/* LD_PRELOAD probe: which ompi_coll_base_bcast_intra_* function Open MPI's coll/tuned calls.
 *
 * coll/tuned (a separate DSO) calls the coll/base algorithms in libmpi through the PLT, so a
 * preloaded definition of the same name runs first: it prints the name on rank 0 and calls the
 * real one. All arguments are integers or pointers, so eight register/stack words cover every
 * variant (basic_linear has 6 arguments, knomial 8). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long (*fn8)(long, long, long, long, long, long, long, long);

static void report(const char *name) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank && strcmp(rank, "0") == 0) fprintf(stderr, "BCAST_ALGORITHM %s\n", name);
}

#define WRAP(name)                                                                        \
    long name(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8) {   \
        static fn8 real;                                                                  \
        if (!real) real = (fn8)dlsym(RTLD_NEXT, #name);                                   \
        report(#name);                                                                    \
        return real(a1, a2, a3, a4, a5, a6, a7, a8);                                      \
    }

WRAP(ompi_coll_base_bcast_intra_basic_linear)
WRAP(ompi_coll_base_bcast_intra_chain)
WRAP(ompi_coll_base_bcast_intra_pipeline)
WRAP(ompi_coll_base_bcast_intra_split_bintree)
WRAP(ompi_coll_base_bcast_intra_bintree)
WRAP(ompi_coll_base_bcast_intra_binomial)
WRAP(ompi_coll_base_bcast_intra_knomial)
WRAP(ompi_coll_base_bcast_intra_scatter_allgather)
WRAP(ompi_coll_base_bcast_intra_scatter_allgather_ring)
