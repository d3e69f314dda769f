/* Tiny MPI program for launch tests: each rank prints its rank, the world size,
 * the CPU it is running on (sched_getcpu) and its affinity mask, then all ranks
 * exchange one message so the selected transport is really exercised. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, i, token = 0, first = 1;
    char host[MPI_MAX_PROCESSOR_NAME];
    char mask[1024];
    int len = 0, pos = 0;
    cpu_set_t set;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);

    mask[0] = '\0';
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (i = 0; i < CPU_SETSIZE && pos < (int)sizeof(mask) - 16; i++) {
            if (CPU_ISSET(i, &set)) {
                pos += snprintf(mask + pos, sizeof(mask) - pos, first ? "%d" : ",%d", i);
                first = 0;
            }
        }
    }

    /* A ring exchange: rank 0 -> 1 -> ... -> 0, so point-to-point traffic flows. */
    if (size > 1) {
        if (rank == 0) {
            token = 42;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    printf("hello rank=%d size=%d cpu=%d affinity=%s token=%d host=%s\n",
           rank, size, sched_getcpu(), mask, token, host);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
