/*
 * loggp.c - LogGP parameters between rank 0 and rank 1, per message size (the parameterised
 * round trip, PRTT, of Kielmann, Bal and Verstoep, "Fast measurement of LogP parameters for
 * message passing platforms", IPDPS workshops 2000; the method Netgauge's LogGP module uses).
 *
 * PRTT(n, d, s): rank 0 sends n messages of s bytes back to back, waiting d between them; rank 1
 * receives all n, then replies with one message of s bytes; the time is rank 0's, from the first
 * send to the reply's arrival. In LogGP, with o_s and o_r the sender's and receiver's busy time
 * per message, L the wire latency and g the gap (the least time between consecutive messages):
 *
 *   PRTT(1, 0, s) = 2 (o_s + L + o_r)              the plain round trip
 *   PRTT(n, 0, s) = PRTT(1, 0, s) + (n - 1) g      n back to back: the gap paces them
 *
 * so, per message size s, one trial measures (each over --iterations repetitions, mean):
 *
 *   rtt   = PRTT(1, 0, s): `iterations` round trips;
 *   g     = (PRTT(n, 0, s) - PRTT(1, 0, s)) / (n - 1) with n = --burst; PRTT(n, 0, s) is the mean
 *           over max(1, iterations / n) bursts;
 *   o_s   = the time rank 0 spends in MPI_Send of one message (the call returns once the message
 *           is handed over: its send overhead as the sender sees it); rank 1 acknowledges each
 *           message with 0 bytes so that sends never queue behind one another;
 *   o_r   = the time rank 0 spends in MPI_Recv of a message that has already arrived: rank 0
 *           sends rank 1 a 0-byte "go", busy-waits d = 2 rtt + 2 us (far longer than the go and
 *           the reply need to travel), then times the MPI_Recv of rank 1's reply of s bytes;
 *   L     = rtt / 2 - o_s - o_r (from the round trip; may come out <= 0 where the overheads are
 *           the whole round trip, as on shared memory).
 *
 * Above the stack's eager limit a send cannot complete before the receiver matches it, so there
 * o_s and o_r include the transfer (Kielmann's caveat too): the small-message o and g are LogGP's.
 * The --trials repetitions of all four give each parameter its spread.
 *
 * Payload check, every size: rank 0's burst messages carry a pattern that rank 1 checks in the
 * last one it received; rank 1's o_r replies carry a second pattern that rank 0 checks
 * (--inject-fault: rank 1 corrupts one reply, so rank 0's check must fail). `valid` = the
 * checks passed on this rank and every measured value is finite.
 *
 * Records: one per rank per size (rank 0 gathers them, util.h); rank 0's holds the per-trial
 * lists, rank 1's (the echoing side) the same keys with null lists.
 */
#define _GNU_SOURCE
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_RTT = 1, TAG_BURST, TAG_OS, TAG_OR, TAG_ACK };
enum { OPT_TRIALS = 't', OPT_BURST = 'b' };
#define MAX_TRIALS 1000

static const char usage[] =
    "Usage: loggp [options]\n"
    "LogGP parameters between ranks 0 and 1 per message size (0 and 2^LO..2^HI bytes), by\n"
    "Kielmann's parameterised round trip PRTT(n, d, s): rtt = PRTT(1,0,s), gap g =\n"
    "(PRTT(n,0,s) - rtt) / (n - 1), send overhead o_s = time in MPI_Send, receive overhead\n"
    "o_r = time in MPI_Recv of a message that has already arrived, L = rtt/2 - o_s - o_r.\n"
    "Exactly 2 ranks.\n\n"
    "Options:\n"
    "  -t, --trials T       repetitions of every measurement per size (the spread; default 10)\n"
    "  -b, --burst N        messages per back-to-back burst for the gap (default 32, >= 2)\n"
    KU_SWEEP_USAGE
    "      --inject-fault   rank 1 corrupts one o_r reply (tests that valid turns false)\n"
    KU_COMMON_USAGE
    "Defaults: --msglog 0:16 --iterations 200 --warmup 20 --iterations-large 50\n"
    "--warmup-large 5 --large-size 8192 --time-budget-ms 0; --iterations counts the round trips\n"
    "(and sends, receives) of each measurement of one trial.\n"
    "Output: '#' header on rank 0, then per size one JSON object per rank with keys kernel,\n"
    "rank, size, host, cpu, cpus, peer, bytes, trials, burst, iterations, bursts, warmup,\n"
    "budget_limited, rtt_usec, prtt_burst_usec, g_usec, o_s_usec, o_r_usec, L_usec, delay_usec\n"
    "(lists, one value per trial, rank 0 only), payload_ok, valid.\n";

typedef struct {
    MPI_Comm comm;
    int rank, bytes, burst, iterations;
    unsigned char *sbuf, *rbuf;
    int inject, corrupted;
} loggp_t;

static unsigned char pattern(int bytes, int salt, size_t i)
{
    return (unsigned char)((i * 151u + (unsigned)bytes * 13u + (unsigned)salt * 31u + 7u) & 0xffu);
}

static void fill(unsigned char *buf, int bytes, int salt)
{
    for (size_t i = 0; i < (size_t)bytes; i++)
        buf[i] = pattern(bytes, salt, i);
}

static int holds(const unsigned char *buf, int bytes, int salt)
{
    for (size_t i = 0; i < (size_t)bytes; i++)
        if (buf[i] != pattern(bytes, salt, i))
            return 0;
    return 1;
}

static void spin_us(double us)
{
    double until = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < until)
        ;
}

/* PRTT(1, 0, s): `n` round trips, us per round trip on rank 0. */
static double prtt_one(loggp_t *p, int n)
{
    MPI_Barrier(p->comm);
    double start = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        if (p->rank == 0) {
            MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 1, TAG_RTT, p->comm);
            MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 1, TAG_RTT, p->comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 0, TAG_RTT, p->comm, MPI_STATUS_IGNORE);
            MPI_Send(p->rbuf, p->bytes, MPI_BYTE, 0, TAG_RTT, p->comm);
        }
    }
    return (MPI_Wtime() - start) * 1e6 / n;
}

/* PRTT(burst, 0, s): `nb` bursts of `burst` sends and one reply, us per burst on rank 0. */
static double prtt_burst(loggp_t *p, int nb)
{
    MPI_Barrier(p->comm);
    double start = MPI_Wtime();
    for (int i = 0; i < nb; i++) {
        if (p->rank == 0) {
            for (int k = 0; k < p->burst; k++)
                MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 1, TAG_BURST, p->comm);
            MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 1, TAG_BURST, p->comm, MPI_STATUS_IGNORE);
        } else {
            for (int k = 0; k < p->burst; k++)
                MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 0, TAG_BURST, p->comm, MPI_STATUS_IGNORE);
            MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 0, TAG_BURST, p->comm);
        }
    }
    return (MPI_Wtime() - start) * 1e6 / nb;
}

/* o_s: mean us rank 0 spends in MPI_Send; each message is acknowledged with 0 bytes. */
static double send_overhead(loggp_t *p, int n)
{
    double busy = 0.0;
    MPI_Barrier(p->comm);
    for (int i = 0; i < n; i++) {
        if (p->rank == 0) {
            double t = MPI_Wtime();
            MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 1, TAG_OS, p->comm);
            busy += MPI_Wtime() - t;
            MPI_Recv(NULL, 0, MPI_BYTE, 1, TAG_ACK, p->comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 0, TAG_OS, p->comm, MPI_STATUS_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_ACK, p->comm);
        }
    }
    return busy * 1e6 / n;
}

/* o_r: mean us rank 0 spends in MPI_Recv of a reply that arrived during its wait of `delay` us.
 * Rank 1's replies carry pattern 2; rank 0 checks the last one (returned in *ok). */
static double recv_overhead(loggp_t *p, int n, double delay, int *ok)
{
    const int salt = 2;
    double busy = 0.0;
    if (p->rank == 1)
        fill(p->sbuf, p->bytes, salt);
    MPI_Barrier(p->comm);
    for (int i = 0; i < n; i++) {
        if (p->rank == 0) {
            MPI_Send(NULL, 0, MPI_BYTE, 1, TAG_ACK, p->comm);
            spin_us(delay);
            double t = MPI_Wtime();
            MPI_Recv(p->rbuf, p->bytes, MPI_BYTE, 1, TAG_OR, p->comm, MPI_STATUS_IGNORE);
            busy += MPI_Wtime() - t;
        } else {
            MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_ACK, p->comm, MPI_STATUS_IGNORE);
            if (p->inject && !p->corrupted && p->bytes > 0 && i == n - 1) {
                p->sbuf[p->bytes / 2] ^= 0x5a;
                p->corrupted = 1;
            }
            MPI_Send(p->sbuf, p->bytes, MPI_BYTE, 0, TAG_OR, p->comm);
        }
    }
    if (p->rank == 0)
        *ok = holds(p->rbuf, p->bytes, salt);
    return busy * 1e6 / n;
}

typedef struct {
    double rtt[MAX_TRIALS], burst[MAX_TRIALS], g[MAX_TRIALS], os[MAX_TRIALS], orr[MAX_TRIALS];
    double L[MAX_TRIALS], delay[MAX_TRIALS];
} series_t;

static int all_finite(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

/* Measures one size, `trials` times, and emits one record per rank; returns 1 when valid here. */
static int run_size(loggp_t *p, int trials, const ku_common *common, const ku_sweep *sweep, series_t *s)
{
    int iterations, warmup;
    ku_sweep_counts(sweep, common, p->bytes, &iterations, &warmup);
    const int salt = 1;
    fill(p->sbuf, p->bytes, salt);
    memset(p->rbuf, 0, (size_t)p->bytes);

    /* the warm-up round trips (connection set-up, page faults) size the time budget: one trial
     * costs about 4 measurements of `iterations` round trips (o_r's wait adds 2 rtt each) */
    double warm_rtt = warmup > 0 ? prtt_one(p, warmup) : 0.0;
    int n = ku_budget_iterations(p->comm, 0, warm_rtt * 6.0 * trials, iterations, sweep);
    int nb = n / p->burst > 0 ? n / p->burst : 1;

    int payload_ok = 1;
    for (int t = 0; t < trials; t++) {
        double rtt = prtt_one(p, n);
        /* rank 0's round trip decides the wait before each timed receive */
        MPI_Bcast(&rtt, 1, MPI_DOUBLE, 0, p->comm);
        double burst = prtt_burst(p, nb);
        if (p->rank == 1)
            payload_ok &= holds(p->rbuf, p->bytes, salt); /* the burst's last message, whole */
        fill(p->sbuf, p->bytes, salt);                    /* rank 1's reply pattern was written over it */
        double os = send_overhead(p, n);
        double delay = 2.0 * rtt + 2.0;
        int ok = 1;
        double orr = recv_overhead(p, n, delay, &ok);
        fill(p->sbuf, p->bytes, salt);
        payload_ok &= ok;
        s->rtt[t] = rtt;
        s->burst[t] = burst;
        s->g[t] = (burst - rtt) / (p->burst - 1);
        s->os[t] = os;
        s->orr[t] = orr;
        s->L[t] = rtt / 2.0 - os - orr;
        s->delay[t] = delay;
    }
    int valid = payload_ok;
    if (p->rank == 0)
        valid &= all_finite(s->rtt, trials) && all_finite(s->g, trials) && all_finite(s->os, trials) &&
                 all_finite(s->orr, trials);

    ku_json j;
    ku_json_begin(&j, "loggp", p->comm);
    ku_json_affinity(&j, "cpus");
    ku_json_int(&j, "peer", 1 - p->rank);
    ku_json_int(&j, "bytes", p->bytes);
    ku_json_int(&j, "trials", trials);
    ku_json_int(&j, "burst", p->burst);
    ku_json_int(&j, "iterations", n);
    ku_json_int(&j, "bursts", nb);
    ku_json_int(&j, "warmup", warmup);
    ku_json_bool(&j, "budget_limited", n < iterations);
    const char *keys[] = {"rtt_usec", "prtt_burst_usec", "g_usec", "o_s_usec", "o_r_usec", "L_usec", "delay_usec"};
    const double *values[] = {s->rtt, s->burst, s->g, s->os, s->orr, s->L, s->delay};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (p->rank == 0)
            ku_json_doubles(&j, keys[k], values[k], trials);
        else
            ku_json_null(&j, keys[k]); /* the echoing side times nothing */
    }
    ku_json_bool(&j, "payload_ok", payload_ok);
    ku_json_bool(&j, "valid", valid);
    ku_json_emit(&j, p->comm);
    return valid;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {200, 20, 0, 0};
    ku_sweep sweep = {0, 16, 50, 5, 8192, 0};
    loggp_t p;
    memset(&p, 0, sizeof p);
    int trials = 10;
    p.burst = 32;

    static struct option longopts[] = {
        {"trials", required_argument, NULL, OPT_TRIALS},
        {"burst", required_argument, NULL, OPT_BURST},
        {NULL, 0, NULL, 0},
    };
    int code;
    while ((code = ku_next_option(argc, argv, "t:b:", longopts, &common, &sweep, usage)) != -1) {
        if (code == OPT_TRIALS)
            trials = ku_parse_int("--trials", optarg, 1, MAX_TRIALS, usage);
        else if (code == OPT_BURST)
            p.burst = ku_parse_int("--burst", optarg, 2, 1 << 20, usage);
    }
    p.inject = common.inject;

    p.comm = MPI_COMM_WORLD;
    int size;
    MPI_Comm_rank(p.comm, &p.rank);
    MPI_Comm_size(p.comm, &size);
    if (size != 2)
        ku_usage_error(usage, "needs exactly 2 ranks, got %d", size);

    int sizes[KU_MAX_SIZES];
    int nsizes = ku_sweep_sizes(&sweep, sizes);
    p.sbuf = ku_malloc((size_t)sizes[nsizes - 1]);
    p.rbuf = ku_malloc((size_t)sizes[nsizes - 1]);
    series_t *series = ku_malloc(sizeof *series);

    ku_header_begin("loggp", argc, argv);
    ku_header_sweep(&sweep);
    ku_header_common(&common);
    ku_header_int("trials", trials);
    ku_header_int("burst", p.burst);
    ku_header_str("method", "Kielmann PRTT(n,d,s): g = (PRTT(burst,0,s) - PRTT(1,0,s)) / (burst - 1); "
                            "o_s = time in MPI_Send; o_r = time in MPI_Recv after a wait of 2 rtt + 2 us; "
                            "L = rtt/2 - o_s - o_r");
    ku_header_str("time_unit", "us; rtt and prtt_burst per round trip / burst, g, o_s, o_r, L per message");
    ku_header_str("records", "one per rank per size, in size order; rank 0's holds one value per trial");
    ku_header_print(p.comm, &common);

    int valid = 1;
    for (int s = 0; s < nsizes; s++) {
        p.bytes = sizes[s];
        valid &= run_size(&p, trials, &common, &sweep, series);
    }

    free(series);
    free(p.sbuf);
    free(p.rbuf);
    ku_finish(p.comm, &common, valid);
}
