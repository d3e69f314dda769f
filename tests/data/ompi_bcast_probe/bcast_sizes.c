/* One MPI_Bcast (MPI_CHAR, root 0) per size given on the command line; rank 0 names each size on
 * stderr just before its call, so the probe's line that follows belongs to that size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, i, n, max = 1;
    char *buf;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (i = 1; i < argc; i++) {
        n = atoi(argv[i]);
        if (n > max) max = n;
    }
    buf = calloc((size_t)max, 1);
    for (i = 1; i < argc; i++) {
        n = atoi(argv[i]);
        if (rank == 0) fprintf(stderr, "BCAST_BYTES %d\n", n);
        MPI_Bcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
