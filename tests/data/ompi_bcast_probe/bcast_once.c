/* One MPI_Bcast of argv[1] bytes (MPI_CHAR, root 0), as osu_bcast sends them. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    char *buf = calloc(n > 0 ? (size_t)n : 1, 1);
    MPI_Init(&argc, &argv);
    MPI_Bcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    free(buf);
    return 0;
}
