/*
 * coll.c - MPI_Bcast, MPI_Allreduce and MPI_Alltoall over a message-size sweep
 * (OSU osu_bcast / osu_allreduce / osu_alltoall shape).
 *
 * Sizes: 0 and 2^lo..2^hi bytes, meaning
 *   bcast      bytes broadcast from rank 0 (MPI_BYTE);
 *   allreduce  bytes reduced with MPI_SUM: MPI_DOUBLE (bytes/8 of them) when bytes is a
 *              multiple of 8, else MPI_UNSIGNED_CHAR (1, 2, 4 bytes);
 *   alltoall   bytes each rank sends to every rank (MPI_BYTE; buffers of P x bytes).
 *
 * Timing, OSU's convention: per size `warmup` untimed calls, then per timed iteration
 * t_start = MPI_Wtime(); call; t_stop; MPI_Barrier (outside the timed span, so calls do
 * not pipeline across iterations). A rank's time is its mean per call; the ranks' times
 * are combined with MPI_Reduce on rank 0 into avg/min/max over ranks (OSU's Avg, Min and
 * Max Latency). Sizes above --large-size use the -large counts; --time-budget-ms lowers
 * the timed iterations to about that long (rank 0 decides from its warm-up, broadcast).
 *
 * Check, every (collective, size), after the timed loop: one more call on fresh data,
 * verified on every rank: bcast delivers rank 0's byte pattern; allreduce of
 * x_k = (rank+1)(k mod 7 + 1) gives (k mod 7 + 1) P(P+1)/2 exactly (doubles; bytes: 1 per
 * rank, k mod 3 + 1, so P (k mod 3 + 1) mod 256); alltoall's block from rank s holds s's
 * pattern for this rank. --inject-fault: the last rank corrupts its result before the
 * check (tests that valid turns false).
 *
 * Records: one per rank per (collective, size): the rank's own time, cpu and cpu set;
 * t_avg/min/max_usec over ranks on rank 0's record only (null elsewhere, as MPI_Reduce
 * leaves them).
 */
#define _GNU_SOURCE
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C_BCAST, C_ALLREDUCE, C_ALLTOALL, NCOLL };
static const char *const coll_names[] = {"bcast", "allreduce", "alltoall"};

static const char usage[] =
    "Usage: coll [options]\n"
    "MPI_Bcast (root 0), MPI_Allreduce (MPI_SUM; doubles, or unsigned chars below 8 bytes)\n"
    "and MPI_Alltoall (bytes per destination) over message sizes 0 and 2^LO..2^HI bytes;\n"
    "time = mean per call (OSU convention: barrier after each timed call, outside the timing),\n"
    "avg/min/max over ranks by MPI_Reduce on rank 0.\n\n"
    "Options:\n"
    "  -c, --collective C   bcast | allreduce | alltoall, a comma list or all (default all)\n"
    KU_SWEEP_USAGE
    "      --inject-fault   the last rank corrupts its checked result (tests that valid turns false)\n"
    KU_COMMON_USAGE
    "Defaults: --msglog 0:20 --iterations 1000 --warmup 100 --iterations-large 100\n"
    "--warmup-large 10 --large-size 8192 --time-budget-ms 0 (OSU's counts).\n"
    "Output: '#' header on rank 0, then per (collective, size) one JSON object per rank with\n"
    "keys kernel, rank, size, host, cpu, cpus, collective, bytes, datatype, count, root,\n"
    "iterations, warmup, budget_limited, t_usec, t_fastest_usec, t_avg_usec, t_min_usec,\n"
    "t_max_usec, mismatches, valid.\n";

typedef struct {
    MPI_Comm comm;
    int rank, size;
    int coll, bytes;
    MPI_Datatype type;
    const char *type_name;
    int count;
    unsigned char *sbuf, *rbuf;
    int inject;
} coll_t;

static void setup(coll_t *c)
{
    if (c->coll == C_ALLREDUCE && c->bytes >= 8 && c->bytes % 8 == 0) {
        c->type = MPI_DOUBLE;
        c->type_name = "double";
        c->count = c->bytes / 8;
    } else if (c->coll == C_ALLREDUCE) {
        c->type = MPI_UNSIGNED_CHAR; /* MPI_SUM is not defined on MPI_BYTE */
        c->type_name = "unsigned char";
        c->count = c->bytes;
    } else {
        c->type = MPI_BYTE;
        c->type_name = "byte";
        c->count = c->bytes;
    }
}

static void call(coll_t *c)
{
    switch (c->coll) {
    case C_BCAST:
        MPI_Bcast(c->rbuf, c->count, c->type, 0, c->comm);
        break;
    case C_ALLREDUCE:
        MPI_Allreduce(c->sbuf, c->rbuf, c->count, c->type, MPI_SUM, c->comm);
        break;
    default:
        MPI_Alltoall(c->sbuf, c->count, c->type, c->rbuf, c->count, c->type, c->comm);
        break;
    }
}

static unsigned char byte_pattern(int a, int b, size_t k)
{
    return (unsigned char)((k * 131u + (unsigned)a * 31u + (unsigned)b * 7u + 3u) & 0xffu);
}

/* Input data of the checked call (also what the timed calls move). */
static void fill_inputs(coll_t *c)
{
    size_t n = (size_t)c->count;
    if (c->coll == C_BCAST) {
        for (size_t k = 0; k < n; k++)
            c->rbuf[k] = c->rank == 0 ? byte_pattern(0, c->bytes, k) : (unsigned char)~byte_pattern(0, c->bytes, k);
    } else if (c->coll == C_ALLREDUCE && c->type == MPI_DOUBLE) {
        double *x = (double *)(void *)c->sbuf, *y = (double *)(void *)c->rbuf;
        for (size_t k = 0; k < n; k++) {
            x[k] = (double)(c->rank + 1) * (double)(k % 7 + 1);
            y[k] = -1.0;
        }
    } else if (c->coll == C_ALLREDUCE) {
        for (size_t k = 0; k < n; k++) {
            c->sbuf[k] = (unsigned char)(k % 3 + 1);
            c->rbuf[k] = 0;
        }
    } else {
        for (int d = 0; d < c->size; d++)
            for (size_t k = 0; k < n; k++) {
                c->sbuf[(size_t)d * n + k] = byte_pattern(c->rank, d, k);
                c->rbuf[(size_t)d * n + k] = (unsigned char)~byte_pattern(d, c->rank, k);
            }
    }
}

/* Elements of this rank's result that differ from the closed form. */
static long mismatches(const coll_t *c)
{
    size_t n = (size_t)c->count;
    long bad = 0;
    if (c->coll == C_BCAST) {
        for (size_t k = 0; k < n; k++)
            bad += c->rbuf[k] != byte_pattern(0, c->bytes, k);
    } else if (c->coll == C_ALLREDUCE && c->type == MPI_DOUBLE) {
        const double *y = (const double *)(const void *)c->rbuf;
        const double ranks = (double)c->size * (c->size + 1) / 2.0;
        for (size_t k = 0; k < n; k++)
            bad += y[k] != (double)(k % 7 + 1) * ranks; /* small integers: exact in any order */
    } else if (c->coll == C_ALLREDUCE) {
        for (size_t k = 0; k < n; k++)
            bad += c->rbuf[k] != (unsigned char)((unsigned)c->size * (k % 3 + 1));
    } else {
        for (int s = 0; s < c->size; s++)
            for (size_t k = 0; k < n; k++)
                bad += c->rbuf[(size_t)s * n + k] != byte_pattern(s, c->rank, k);
    }
    return bad;
}

/* Warm-up calls; returns this rank's time per call (with its barrier) over the second half,
 * us (the first calls of a size pay for set-up the timed ones do not). */
static double warm_up(coll_t *c, int warmup)
{
    MPI_Barrier(c->comm);
    double start = MPI_Wtime();
    for (int i = 0; i < warmup; i++) {
        if (i == warmup / 2)
            start = MPI_Wtime();
        call(c);
        MPI_Barrier(c->comm);
    }
    return warmup > 0 ? (MPI_Wtime() - start) * 1e6 / (warmup - warmup / 2) : 0.0;
}

/* Runs one (collective, size) and emits one record per rank; returns 1 when this rank's check passed. */
static int run_size(coll_t *c, const ku_common *common, const ku_sweep *sweep)
{
    int iterations, warmup;
    ku_sweep_counts(sweep, common, c->bytes, &iterations, &warmup);
    setup(c);
    fill_inputs(c);

    double warm_us = warm_up(c, warmup);
    int n = ku_budget_iterations(c->comm, 0, warm_us, iterations, sweep);
    double total = 0.0, fastest = INFINITY;
    MPI_Barrier(c->comm);
    for (int i = 0; i < n; i++) {
        double start = MPI_Wtime();
        call(c);
        double dt = MPI_Wtime() - start;
        total += dt;
        if (dt < fastest)
            fastest = dt;
        MPI_Barrier(c->comm);
    }
    double mean_us = total * 1e6 / n, sum_us = 0.0, min_us = 0.0, max_us = 0.0;
    MPI_Reduce(&mean_us, &sum_us, 1, MPI_DOUBLE, MPI_SUM, 0, c->comm);
    MPI_Reduce(&mean_us, &min_us, 1, MPI_DOUBLE, MPI_MIN, 0, c->comm);
    MPI_Reduce(&mean_us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, c->comm);

    /* the checked call, on fresh data */
    fill_inputs(c);
    call(c);
    if (c->inject && c->rank == c->size - 1 && c->count > 0)
        c->rbuf[0] ^= 0x5a;
    long bad = mismatches(c);

    ku_json j;
    ku_json_begin(&j, "coll", c->comm);
    ku_json_affinity(&j, "cpus");
    ku_json_str(&j, "collective", coll_names[c->coll]);
    ku_json_int(&j, "bytes", c->bytes);
    ku_json_str(&j, "datatype", c->type_name);
    ku_json_int(&j, "count", c->count);
    if (c->coll == C_BCAST)
        ku_json_int(&j, "root", 0);
    else
        ku_json_null(&j, "root");
    ku_json_int(&j, "iterations", n);
    ku_json_int(&j, "warmup", warmup);
    ku_json_bool(&j, "budget_limited", n < iterations);
    ku_json_double(&j, "t_usec", mean_us);
    ku_json_double(&j, "t_fastest_usec", fastest * 1e6);
    if (c->rank == 0) {
        ku_json_double(&j, "t_avg_usec", sum_us / c->size);
        ku_json_double(&j, "t_min_usec", min_us);
        ku_json_double(&j, "t_max_usec", max_us);
    } else {
        ku_json_null(&j, "t_avg_usec");
        ku_json_null(&j, "t_min_usec");
        ku_json_null(&j, "t_max_usec");
    }
    ku_json_int(&j, "mismatches", bad);
    ku_json_bool(&j, "valid", bad == 0);
    ku_json_emit(&j, c->comm);
    return bad == 0;
}

static void names_of(const int *idx, int n, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(out, coll_names[idx[i]], cap - strlen(out) - 1);
        if (i + 1 < n)
            strncat(out, ",", cap - strlen(out) - 1);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {1000, 100, 0, 0};
    ku_sweep sweep = {0, 20, 100, 10, 8192, 0};
    coll_t c;
    memset(&c, 0, sizeof c);
    int colls[NCOLL] = {C_BCAST, C_ALLREDUCE, C_ALLTOALL}, ncolls = NCOLL;

    static struct option longopts[] = {
        {"collective", required_argument, NULL, 'c'},
        {NULL, 0, NULL, 0},
    };
    while (ku_next_option(argc, argv, "c:", longopts, &common, &sweep, usage) == 'c')
        ncolls = ku_parse_name_list("--collective", optarg, coll_names, NCOLL, colls, NCOLL, usage);
    c.inject = common.inject;

    c.comm = MPI_COMM_WORLD;
    MPI_Comm_rank(c.comm, &c.rank);
    MPI_Comm_size(c.comm, &c.size);

    int sizes[KU_MAX_SIZES];
    int nsizes = ku_sweep_sizes(&sweep, sizes);
    /* alltoall moves P blocks of the largest size; the others one */
    size_t cap = (size_t)sizes[nsizes - 1] * (size_t)c.size;
    c.sbuf = ku_malloc(cap);
    c.rbuf = ku_malloc(cap);

    char text[64];
    ku_header_begin("coll", argc, argv);
    names_of(colls, ncolls, text, sizeof text);
    ku_header_str("collectives", text);
    ku_header_sweep(&sweep);
    ku_header_common(&common);
    ku_header_str("timing", "OSU: MPI_Wtime around each call, MPI_Barrier after it (untimed)");
    ku_header_str("time_unit", "us per call; t_usec this rank's mean, t_avg/min/max_usec over ranks (rank 0)");
    ku_header_str("records", "one per rank per (collective, size), in that loop order");
    ku_header_print(c.comm, &common);

    int valid = 1;
    for (int k = 0; k < ncolls; k++)
        for (int s = 0; s < nsizes; s++) {
            c.coll = colls[k];
            c.bytes = sizes[s];
            valid &= run_size(&c, &common, &sweep);
        }

    free(c.sbuf);
    free(c.rbuf);
    ku_finish(c.comm, &common, valid);
}
