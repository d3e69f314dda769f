/* toy: the test-only kernel of tests/toy_program.py (one MPI_Barrier per iteration). It is
 * never shipped: tests/test_registry.py copies it beside the kernels' util.h to show that a
 * registered kernel's C file is all the Makefile needs. */
#include <mpi.h>

#include "util.h"

static void barrier(void *ctx, int iteration)
{
    (void)iteration;
    MPI_Barrier(*(MPI_Comm *)ctx);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {100, 10, 0, 0};
    const char *usage = "usage: toy [options]\n" KU_COMMON_USAGE;
    while (ku_next_option(argc, argv, "", NULL, &common, NULL, usage) != -1)
        ;
    MPI_Comm comm = MPI_COMM_WORLD;
    ku_header_begin("toy", argc, argv);
    ku_header_common(&common);
    ku_header_print(comm, &common);
    ku_timing t = ku_timed_loop(comm, common.warmup, common.iterations, barrier, &comm);
    ku_json j;
    ku_json_begin(&j, "toy", comm);
    ku_json_double(&j, "t_usec", t.mean_us);
    ku_json_bool(&j, "valid", 1);
    ku_json_emit(&j, comm);
    ku_finish(comm, &common, 1);
}
