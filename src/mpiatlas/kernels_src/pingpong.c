/*
 * pingpong.c - two-rank ping-pong over a message-size sweep (OSU osu_latency shape).
 *
 * Rank 0 sends `bytes` to rank 1 (MPI_Send), rank 1 receives them (MPI_Recv) and sends
 * the same buffer back, rank 0 receives: one iteration is one round trip. The reported
 * time is half a round trip, mean over the timed iterations (IMB PingPong's t[usec],
 * OSU's latency); bandwidth = bytes / t in MB/s (10^6 B/s, bytes per us).
 *
 * Sizes: 0 and 2^lo..2^hi bytes. Per size: `warmup` untimed round trips, MPI_Barrier,
 * then the timed loop (ku_timed_loop); sizes above --large-size use the -large counts
 * (OSU: 8192 bytes), and --time-budget-ms lowers the timed iterations to about that
 * long, estimated by rank 0 from its warm-up and broadcast (both ranks run one count).
 *
 * Payload check, every size: rank 0 sends a size-specific byte pattern; after the
 * timed loop rank 1's buffer (the last message it received) and rank 0's receive
 * buffer (the last echo, filled with the complement of the pattern beforehand) must
 * both hold it. Then one untimed round trip with a second pattern is checked on
 * arrival at each rank (--inject-fault: rank 1 corrupts one byte before echoing it, so
 * rank 0's check must fail). `valid` = both checks passed on this rank.
 *
 * Records: one per rank per size (rank 0 gathers them, util.h); each rank reports its
 * own loop (rank 0's is the OSU/IMB number), its cpu and its cpu set ("cpus").
 */
#define _GNU_SOURCE
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG 1

static const char usage[] =
    "Usage: pingpong [options]\n"
    "Two-rank ping-pong (MPI_Send/MPI_Recv, rank 1 echoes the message) over message sizes\n"
    "0 and 2^LO..2^HI bytes; time = half a round trip (IMB PingPong convention), mean over\n"
    "the timed iterations; bandwidth = bytes / time (MB/s = 10^6 B/s). Exactly 2 ranks.\n\n"
    "Options:\n"
    KU_SWEEP_USAGE
    "      --inject-fault   rank 1 corrupts the checked echo (tests that valid turns false)\n"
    KU_COMMON_USAGE
    "Defaults: --msglog 0:22 --iterations 1000 --warmup 100 --iterations-large 100\n"
    "--warmup-large 10 --large-size 8192 --time-budget-ms 0 (OSU's counts).\n"
    "Output: '#' header on rank 0, then per size one JSON object per rank with keys kernel,\n"
    "rank, size, host, cpu, cpus, peer, bytes, iterations, warmup, budget_limited, t_usec,\n"
    "t_min_usec, t_max_usec, MBps, payload_ok, valid.\n";

typedef struct {
    MPI_Comm comm;
    int rank, peer, bytes;
    unsigned char *sbuf, *rbuf; /* rank 1 receives into and echoes rbuf */
    int inject;
} pingpong_t;

static unsigned char pattern(int bytes, int salt, size_t i)
{
    return (unsigned char)((i * 131u + (unsigned)bytes * 7u + (unsigned)salt * 29u + 1u) & 0xffu);
}

static void fill(unsigned char *buf, int bytes, int salt, int complement)
{
    for (size_t i = 0; i < (size_t)bytes; i++)
        buf[i] = (unsigned char)(complement ? ~pattern(bytes, salt, i) : pattern(bytes, salt, i));
}

static int holds(const unsigned char *buf, int bytes, int salt)
{
    for (size_t i = 0; i < (size_t)bytes; i++)
        if (buf[i] != pattern(bytes, salt, i))
            return 0;
    return 1;
}

/* One round trip. */
static void round_trip(void *ctx, int iteration)
{
    (void)iteration;
    pingpong_t *p = ctx;
    if (p->rank == 0) {
        MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 1, TAG, p->comm);
        MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 1, TAG, p->comm, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 0, TAG, p->comm, MPI_STATUS_IGNORE);
        MPI_Send(p->rbuf, p->bytes, MPI_BYTE, 0, TAG, p->comm);
    }
}

/* The untimed checked round trip: each side checks what arrived. */
static int checked_round_trip(pingpong_t *p)
{
    const int salt = 2;
    if (p->rank == 0) {
        fill(p->sbuf, p->bytes, salt, 0);
        fill(p->rbuf, p->bytes, salt, 1);
        MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 1, TAG, p->comm);
        MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 1, TAG, p->comm, MPI_STATUS_IGNORE);
        return holds(p->rbuf, p->bytes, salt);
    }
    fill(p->rbuf, p->bytes, salt, 1);
    MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 0, TAG, p->comm, MPI_STATUS_IGNORE);
    int ok = holds(p->rbuf, p->bytes, salt);
    if (p->inject && p->bytes > 0)
        p->rbuf[p->bytes / 2] ^= 0x5a;
    MPI_Send(p->rbuf, p->bytes, MPI_BYTE, 0, TAG, p->comm);
    return ok;
}

/* Measures one size and emits one record per rank; returns 1 when this rank's checks passed. */
static int run_size(pingpong_t *p, const ku_common *common, const ku_sweep *sweep)
{
    int iterations, warmup;
    ku_sweep_counts(sweep, common, p->bytes, &iterations, &warmup);
    const int salt = 1;
    if (p->rank == 0)
        fill(p->sbuf, p->bytes, salt, 0);
    fill(p->rbuf, p->bytes, salt, 1);

    /* rank 0's time per round trip over the warm-up's second half (the first calls of a
     * size pay for connection set-up and page faults) sizes the time budget */
    double warm_us = 0.0;
    if (warmup > 0)
        warm_us = ku_timed_loop(p->comm, warmup / 2, warmup - warmup / 2, round_trip, p).mean_us;
    int n = ku_budget_iterations(p->comm, 0, warm_us, iterations, sweep);
    ku_timing t = ku_timed_loop(p->comm, 0, n, round_trip, p);

    int payload_ok = holds(p->rbuf, p->bytes, salt); /* the last message / echo arrived whole */
    int checked = checked_round_trip(p);
    int valid = payload_ok && checked;

    double half = t.mean_us / 2.0;
    ku_json j;
    ku_json_begin(&j, "pingpong", p->comm);
    ku_json_affinity(&j, "cpus");
    ku_json_int(&j, "peer", p->peer);
    ku_json_int(&j, "bytes", p->bytes);
    ku_json_int(&j, "iterations", n);
    ku_json_int(&j, "warmup", warmup);
    ku_json_bool(&j, "budget_limited", n < iterations);
    ku_json_double(&j, "t_usec", half);
    ku_json_double(&j, "t_min_usec", t.min_us / 2.0);
    ku_json_double(&j, "t_max_usec", t.max_us / 2.0);
    if (p->bytes > 0 && half > 0.0)
        ku_json_double(&j, "MBps", p->bytes / half);
    else
        ku_json_null(&j, "MBps");
    ku_json_bool(&j, "payload_ok", payload_ok);
    ku_json_bool(&j, "valid", valid);
    ku_json_emit(&j, p->comm);
    return valid;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {1000, 100, 0, 0};
    ku_sweep sweep = {0, 22, 100, 10, 8192, 0};
    pingpong_t p;
    memset(&p, 0, sizeof p);

    /* pingpong has only the common and sweep options: nothing is left for a switch */
    while (ku_next_option(argc, argv, "", NULL, &common, &sweep, usage) != -1)
        ;
    p.inject = common.inject;

    p.comm = MPI_COMM_WORLD;
    int size;
    MPI_Comm_rank(p.comm, &p.rank);
    MPI_Comm_size(p.comm, &size);
    if (size != 2)
        ku_usage_error(usage, "needs exactly 2 ranks, got %d", size);
    p.peer = 1 - p.rank;

    int sizes[KU_MAX_SIZES];
    int nsizes = ku_sweep_sizes(&sweep, sizes);
    p.sbuf = ku_malloc((size_t)sizes[nsizes - 1]);
    p.rbuf = ku_malloc((size_t)sizes[nsizes - 1]);

    ku_header_begin("pingpong", argc, argv);
    ku_header_sweep(&sweep);
    ku_header_common(&common);
    ku_header_str("pattern", "MPI_Send/MPI_Recv; rank 1 echoes the received buffer");
    ku_header_str("time_unit", "us, half a round trip (IMB PingPong t[usec]), mean over timed iterations");
    ku_header_str("bandwidth_unit", "MB/s = 10^6 bytes/s = bytes / t_usec");
    ku_header_str("records", "one per rank per size, in size order; rank 0's is the OSU/IMB number");
    ku_header_print(p.comm, &common);

    int valid = 1;
    for (int s = 0; s < nsizes; s++) {
        p.bytes = sizes[s];
        valid &= run_size(&p, &common, &sweep);
    }

    free(p.sbuf);
    free(p.rbuf);
    ku_finish(p.comm, &common, valid);
}
