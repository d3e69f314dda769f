/* One MPI_Bcast or MPI_Allreduce (MPI_SUM) of argv[2] bytes of MPI_CHAR / MPI_INT on MPI_COMM_WORLD. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *coll = argc > 1 ? argv[1] : "bcast";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    char *buf = calloc(n > 0 ? (size_t)n : 1, 1);
    char *out = calloc(n > 0 ? (size_t)n : 1, 1);
    MPI_Init(&argc, &argv);
    if (strcmp(coll, "allreduce") == 0)
        MPI_Allreduce(buf, out, n / (int)sizeof(int), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    else
        MPI_Bcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    free(buf);
    free(out);
    return 0;
}
