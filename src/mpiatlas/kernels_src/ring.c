/*
 * ring.c - message ring on a periodic 1-D Cartesian topology.
 *
 * Every rank starts with msgleft = rank (travels to the left neighbour, rank-1) and
 * msgright = -rank (travels to the right neighbour, rank+1). On each of the P steps
 * a rank receives the value travelling left from its right neighbour, adds its own
 * rank and forwards it left; and receives the value travelling right from its left
 * neighbour, subtracts its own rank and forwards it right. The whole N-byte payload
 * is forwarded (the int value sits in the first 4 bytes, the rest is a fixed byte
 * pattern that must arrive intact).
 *
 * After P steps each message has visited every rank exactly once (the last visit
 * is its originator), so every rank holds its own messages back with the sum of all
 * ranks S = P(P-1)/2 accumulated:
 *     msgleft  = rank + P(P-1)/2
 *     msgright = -(rank + P(P-1)/2)
 *
 * Tags are proportional to the sender's rank: a left-going message sent by rank r
 * has tag 10*r, a right-going one 10*r+1 (so P-1 <= (MPI_TAG_UB-1)/10).
 *
 * Variants: blocking (MPI_Send/MPI_Recv, even ranks send first and odd ranks receive
 * first; the two directions are two such shifts one after the other), ssend (the
 * same with MPI_Ssend), nonblocking (MPI_Irecv + MPI_Isend of both directions, one
 * MPI_Waitall). With P = 1 a rank is its own neighbour: the blocking variants then
 * pre-post the receive with MPI_Irecv (a synchronous send to oneself cannot complete
 * before the receive is posted).
 */
#define _GNU_SOURCE
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_BLOCKING, V_SSEND, V_NONBLOCKING };
static const char *const variant_names[] = {"blocking", "ssend", "nonblocking"};

static const char usage[] =
    "Usage: ring [options]\n"
    "Message ring on a periodic 1-D Cartesian topology (MPI_Cart_create/MPI_Cart_shift).\n"
    "Each rank sends msgleft=rank to the left and msgright=-rank to the right; for P steps\n"
    "values from the right get +=rank and go left, values from the left get -=rank and go\n"
    "right. Closed form after P steps: msgleft = rank + P(P-1)/2, msgright = -msgleft.\n"
    "Tags: 10*sender (left-going), 10*sender+1 (right-going).\n\n"
    "Options:\n"
    "  -v, --variant V      blocking | ssend | nonblocking, a comma list or all (default blocking)\n"
    "  -s, --streams S      1 (left-going only) or 2 (both directions), or 1,2 (default 2)\n"
    "  -b, --bytes N        message size(s) in bytes, >= 4: the int value + padding; a comma\n"
    "                       list sweeps sizes (default 4)\n"
    "      --inject-fault   the last rank adds 1 to its message (tests that valid turns false)\n"
    KU_COMMON_USAGE
    "Defaults: --iterations 100 --warmup 10. Times: one full exchange = P steps.\n"
    "Lists run every (bytes, variant, streams) combination in one launch: one record each.\n"
    "Output: '#' header on rank 0, then one JSON object per rank with keys kernel, rank,\n"
    "size, host, cpu, left, right, variant, streams, bytes, iterations, time_us, time_min_us,\n"
    "time_max_us, step_us, msgleft, msgright, expected_left, expected_right, payload_intact, valid.\n";

typedef struct {
    MPI_Comm cart;
    int rank, size, left, right;
    int variant, streams, bytes;
    char *out_l, *in_l, *out_r, *in_r; /* payload buffers, swapped after each step */
    int msgleft, msgright;
    int values_ok; /* every exchange ended on the closed form */
    int inject;    /* --inject-fault */
} ring_t;

static int expected_left(const ring_t *r) { return r->rank + r->size * (r->size - 1) / 2; }

static void set_value(char *buf, int v) { memcpy(buf, &v, sizeof v); }
static int get_value(const char *buf)
{
    int v;
    memcpy(&v, buf, sizeof v);
    return v;
}

static unsigned char pattern(int stream, int i) { return (unsigned char)(stream ? i * 11 + 5 : i * 7 + 3); }

static void fill_padding(char *buf, int bytes, int stream)
{
    for (int i = (int)sizeof(int); i < bytes; i++)
        buf[i] = (char)pattern(stream, i);
}

static int padding_intact(const char *buf, int bytes, int stream)
{
    for (int i = (int)sizeof(int); i < bytes; i++)
        if ((unsigned char)buf[i] != pattern(stream, i))
            return 0;
    return 1;
}

/* One blocking shift: send `out` to `dest`, receive `in` from `src`. */
static void shift_blocking(ring_t *r, char *out, int dest, int stag, char *in, int src, int rtag)
{
    int ssend = r->variant == V_SSEND;
    if (r->size == 1) {
        MPI_Request req;
        MPI_Irecv(in, r->bytes, MPI_BYTE, src, rtag, r->cart, &req);
        if (ssend)
            MPI_Ssend(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
        else
            MPI_Send(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (r->rank % 2 == 0) {
        if (ssend)
            MPI_Ssend(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
        else
            MPI_Send(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
        MPI_Recv(in, r->bytes, MPI_BYTE, src, rtag, r->cart, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(in, r->bytes, MPI_BYTE, src, rtag, r->cart, MPI_STATUS_IGNORE);
        if (ssend)
            MPI_Ssend(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
        else
            MPI_Send(out, r->bytes, MPI_BYTE, dest, stag, r->cart);
    }
}

static void swap(char **a, char **b)
{
    char *t = *a;
    *a = *b;
    *b = t;
}

/* One full exchange: P steps. */
static void exchange(void *ctx, int iteration)
{
    (void)iteration;
    ring_t *r = ctx;
    const int tag_l_out = 10 * r->rank, tag_l_in = 10 * r->right;         /* left-going  */
    const int tag_r_out = 10 * r->rank + 1, tag_r_in = 10 * r->left + 1;  /* right-going */

    r->msgleft = r->rank;
    r->msgright = -r->rank;
    if (r->inject && r->rank == r->size - 1)
        r->msgleft += 1;
    for (int step = 0; step < r->size; step++) {
        set_value(r->out_l, r->msgleft);
        if (r->streams == 2)
            set_value(r->out_r, r->msgright);
        if (r->variant == V_NONBLOCKING) {
            MPI_Request req[4];
            MPI_Status status[4]; /* not MPI_STATUSES_IGNORE: GCC 12 -Wstringop-overflow false positive with MPICH */
            int n = 0;
            MPI_Irecv(r->in_l, r->bytes, MPI_BYTE, r->right, tag_l_in, r->cart, &req[n++]);
            if (r->streams == 2)
                MPI_Irecv(r->in_r, r->bytes, MPI_BYTE, r->left, tag_r_in, r->cart, &req[n++]);
            MPI_Isend(r->out_l, r->bytes, MPI_BYTE, r->left, tag_l_out, r->cart, &req[n++]);
            if (r->streams == 2)
                MPI_Isend(r->out_r, r->bytes, MPI_BYTE, r->right, tag_r_out, r->cart, &req[n++]);
            MPI_Waitall(n, req, status);
        } else {
            shift_blocking(r, r->out_l, r->left, tag_l_out, r->in_l, r->right, tag_l_in);
            if (r->streams == 2)
                shift_blocking(r, r->out_r, r->right, tag_r_out, r->in_r, r->left, tag_r_in);
        }
        /* forward what was received: the received buffer becomes the next outgoing one */
        swap(&r->out_l, &r->in_l);
        r->msgleft = get_value(r->out_l) + r->rank;
        if (r->streams == 2) {
            swap(&r->out_r, &r->in_r);
            r->msgright = get_value(r->out_r) - r->rank;
        }
    }
    if (r->msgleft != expected_left(r) || (r->streams == 2 && r->msgright != -expected_left(r)))
        r->values_ok = 0;
}

static void names_of(const int *idx, int n, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(out, variant_names[idx[i]], cap - strlen(out) - 1);
        if (i + 1 < n)
            strncat(out, ",", cap - strlen(out) - 1);
    }
}

/* Runs one configuration (variant, streams, bytes) and emits one record per rank.
 * Returns 1 when this rank's result is valid. */
static int run_config(ring_t *r, const ku_common *common)
{
    r->values_ok = 1;
    r->out_l = ku_malloc((size_t)r->bytes);
    r->in_l = ku_malloc((size_t)r->bytes);
    r->out_r = ku_malloc((size_t)r->bytes);
    r->in_r = ku_malloc((size_t)r->bytes);
    fill_padding(r->out_l, r->bytes, 0);
    fill_padding(r->out_r, r->bytes, 1);

    ku_timing t = ku_timed_loop(r->cart, common->warmup, common->iterations, exchange, r);

    int intact = padding_intact(r->out_l, r->bytes, 0) && (r->streams == 1 || padding_intact(r->out_r, r->bytes, 1));
    int valid = r->values_ok && intact;

    ku_json j;
    ku_json_begin(&j, "ring", r->cart);
    ku_json_int(&j, "left", r->left);
    ku_json_int(&j, "right", r->right);
    ku_json_str(&j, "variant", variant_names[r->variant]);
    ku_json_int(&j, "streams", r->streams);
    ku_json_int(&j, "bytes", r->bytes);
    ku_json_int(&j, "iterations", common->iterations);
    ku_json_double(&j, "time_us", t.mean_us);
    ku_json_double(&j, "time_min_us", t.min_us);
    ku_json_double(&j, "time_max_us", t.max_us);
    ku_json_double(&j, "step_us", t.mean_us / r->size);
    ku_json_int(&j, "msgleft", r->msgleft);
    if (r->streams == 2)
        ku_json_int(&j, "msgright", r->msgright);
    else
        ku_json_null(&j, "msgright");
    ku_json_int(&j, "expected_left", expected_left(r));
    if (r->streams == 2)
        ku_json_int(&j, "expected_right", -expected_left(r));
    else
        ku_json_null(&j, "expected_right");
    ku_json_bool(&j, "payload_intact", intact);
    ku_json_bool(&j, "valid", valid);
    ku_json_emit(&j, r->cart);

    free(r->out_l);
    free(r->in_l);
    free(r->out_r);
    free(r->in_r);
    return valid;
}

#define MAX_LIST 64

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {100, 10, 0, 0};
    ring_t r;
    memset(&r, 0, sizeof r);
    int variants[3] = {V_BLOCKING}, nvariants = 1;
    int streams[2] = {2}, nstreams = 1;
    int bytes[MAX_LIST] = {4}, nbytes = 1;

    static struct option longopts[] = {
        {"variant", required_argument, NULL, 'v'},
        {"streams", required_argument, NULL, 's'},
        {"bytes", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = ku_next_option(argc, argv, "v:s:b:", longopts, &common, NULL, usage)) != -1) {
        switch (c) {
        case 'v':
            nvariants = ku_parse_name_list("--variant", optarg, variant_names, 3, variants, 3, usage);
            break;
        case 's':
            nstreams = ku_parse_int_list("--streams", optarg, streams, 2, 1, usage);
            for (int i = 0; i < nstreams; i++)
                if (streams[i] > 2)
                    ku_usage_error(usage, "--streams: %d is not 1 or 2", streams[i]);
            break;
        case 'b':
            nbytes = ku_parse_int_list("--bytes", optarg, bytes, MAX_LIST, (int)sizeof(int), usage);
            break;
        }
    }
    r.inject = common.inject;

    int world_size;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int dims[1] = {world_size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &r.cart);
    MPI_Comm_rank(r.cart, &r.rank);
    MPI_Comm_size(r.cart, &r.size);
    MPI_Cart_shift(r.cart, 0, 1, &r.left, &r.right);

    int *tag_ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    if (flag && 10L * (r.size - 1) + 1 > (long)*tag_ub)
        ku_usage_error(usage, "P=%d needs tag %d > MPI_TAG_UB=%d", r.size, 10 * (r.size - 1) + 1, *tag_ub);

    char text[128];
    ku_header_begin("ring", argc, argv);
    names_of(variants, nvariants, text, sizeof text);
    ku_header_str("variant", text);
    ku_header_ints("streams", streams, nstreams);
    ku_header_ints("bytes", bytes, nbytes);
    ku_header_common(&common);
    ku_header_str("topology", "periodic 1-D MPI_Cart_create, reorder=0");
    ku_header_str("tag_left", "10*sender_rank");
    ku_header_str("tag_right", "10*sender_rank+1");
    ku_header_str("closed_form", "msgleft=rank+P(P-1)/2, msgright=-(rank+P(P-1)/2)");
    ku_header_str("time_unit", "us per full exchange (P steps), mean over iterations");
    ku_header_str("records", "one per rank per (bytes, variant, streams), in that loop order");
    ku_header_print(r.cart, &common);

    int valid = 1;
    for (int b = 0; b < nbytes; b++)
        for (int v = 0; v < nvariants; v++)
            for (int s = 0; s < nstreams; s++) {
                r.bytes = bytes[b];
                r.variant = variants[v];
                r.streams = streams[s];
                valid &= run_config(&r, &common);
            }

    MPI_Comm_free(&r.cart);
    ku_finish(MPI_COMM_WORLD, &common, valid); /* the cart's ranks, not reordered */
}
