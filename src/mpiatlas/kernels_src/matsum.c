/*
 * matsum.c - C = A + B for 3-D double matrices (row-major, index (x*Y + y)*Z + z)
 * distributed over a 1-, 2- or 3-D Cartesian topology.
 *
 * Rank 0 initialises A and B deterministically, scatters them, every rank adds its
 * part, rank 0 gathers C and (after the last iteration) checks it against a serial
 * sum. Element-wise addition is exact and identical in both, so `valid` requires
 * exact equality (max_abs_err == 0, mismatches == 0).
 *
 * --dist slab:  contiguous slabs along the first axis (x), MPI_Scatterv/MPI_Gatherv
 *               of "plane" datatypes (Y*Z doubles), any P: the first X%P ranks get
 *               one plane more; ranks beyond X get none. The Cartesian grid only
 *               orders the ranks.
 * --dist block: true 3-D sub-blocks of the process grid (a) or (a,b) or (a,b,c)
 *               (missing axes are not split); block extents n/p, the first n%p
 *               coordinates one more. Rank 0 sends each rank its block described by
 *               an MPI_Type_create_subarray of the global array (point-to-point
 *               MPI_Isend/MPI_Irecv: blocks of different sizes cannot share one
 *               Scatterv type); each rank receives it contiguously; the gather is the
 *               reverse.
 *
 * Times per rank (us): mean over the timed iterations of each phase (scatter,
 * compute, gather, total) and the maximum over the timed iterations (_max_us).
 * Each iteration starts with an MPI_Barrier.
 */
#define _GNU_SOURCE
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DIST_SLAB, DIST_BLOCK };
static const char *const dist_names[] = {"slab", "block"};

static const char usage[] =
    "Usage: matsum [options]\n"
    "C = A + B for 3-D double matrices over a Cartesian topology; rank 0 initialises,\n"
    "scatters, gathers and checks against a serial sum.\n\n"
    "Options:\n"
    "  -d, --dims X,Y,Z     global matrix dimensions (default 240,100,100)\n"
    "  -t, --topo T         Cartesian topology dimensions: 1, 2 or 3, or a list 1,2,3 (default 1)\n"
    "  -p, --procdims a,b,c process grid, T values whose product is P (single --topo only;\n"
    "                       default MPI_Dims_create)\n"
    "  -D, --dist D         slab (first-axis slabs, Scatterv/Gatherv) or block (3-D sub-blocks,\n"
    "                       subarray datatypes, point-to-point), a list or all (default slab)\n"
    "      --inject-fault   the last rank corrupts one element of C (tests that valid turns false)\n"
    KU_COMMON_USAGE
    "Defaults: --iterations 10 --warmup 1. Times: mean and max over timed iterations, us.\n"
    "Lists run every (topo, dist) combination in one launch: one record per rank each.\n"
    "Output: '#' header on rank 0, then one JSON object per rank with keys kernel, rank,\n"
    "size, host, cpu, dist, topo, procdims, decomposition, coords, local_dims,\n"
    "local_offset, local_elements, iterations, scatter_us, compute_us, gather_us, total_us,\n"
    "scatter_max_us, compute_max_us, gather_max_us, total_max_us, max_abs_err, mismatches, valid.\n";

typedef struct {
    int X, Y, Z;
    int dist, topo;
    int inject; /* --inject-fault */
    MPI_Comm cart;
    int rank, size;
    int grid[3]; /* decomposition of x, y, z */
    /* this rank's block */
    int coords[3], ldims[3], loff[3];
    size_t nlocal;
    double *a, *b, *c;          /* local blocks */
    double *ga, *gb, *gc;       /* global arrays (rank 0 only) */
    /* slab */
    MPI_Datatype plane;
    int *rows, *rowdispl;
    /* block (rank 0): one subarray type per rank; MPI_DATATYPE_NULL if empty */
    MPI_Datatype *blocktype;
    MPI_Request *req;
    MPI_Status *status;
} matsum_t;

static void split(int n, int p, int c, int *len, int *off)
{
    int base = n / p, rem = n % p;
    *len = base + (c < rem ? 1 : 0);
    *off = c * base + (c < rem ? c : rem);
}

/* Block of rank r in the (padded) 3-D grid. */
static void block_of(const matsum_t *m, int r, int coords[3], int len[3], int off[3])
{
    int tc[3] = {0, 0, 0};
    if (m->dist == DIST_SLAB) {
        tc[0] = r;
    } else {
        MPI_Cart_coords(m->cart, r, m->topo, tc);
    }
    const int n[3] = {m->X, m->Y, m->Z};
    for (int a = 0; a < 3; a++) {
        coords[a] = tc[a];
        split(n[a], m->grid[a], tc[a], &len[a], &off[a]);
    }
}

static double init_a(int x, int y, int z) { return (double)((x * 131 + y * 17 + z * 7) % 1000) / 8.0 + x; }
static double init_b(int x, int y, int z) { return 1.0 / (1.0 + x + 2.0 * y + 3.0 * z); }

static void scatter(matsum_t *m)
{
    if (m->dist == DIST_SLAB) {
        MPI_Scatterv(m->ga, m->rows, m->rowdispl, m->plane, m->a, m->ldims[0], m->plane, 0, m->cart);
        MPI_Scatterv(m->gb, m->rows, m->rowdispl, m->plane, m->b, m->ldims[0], m->plane, 0, m->cart);
        return;
    }
    int n = 0;
    if (m->nlocal) {
        MPI_Irecv(m->a, (int)m->nlocal, MPI_DOUBLE, 0, 0, m->cart, &m->req[n++]);
        MPI_Irecv(m->b, (int)m->nlocal, MPI_DOUBLE, 0, 1, m->cart, &m->req[n++]);
    }
    if (m->rank == 0) {
        for (int r = 0; r < m->size; r++) {
            if (m->blocktype[r] == MPI_DATATYPE_NULL)
                continue;
            MPI_Isend(m->ga, 1, m->blocktype[r], r, 0, m->cart, &m->req[n++]);
            MPI_Isend(m->gb, 1, m->blocktype[r], r, 1, m->cart, &m->req[n++]);
        }
    }
    MPI_Waitall(n, m->req, m->status);
}

static void compute(matsum_t *m)
{
    double *restrict c = m->c;
    const double *restrict a = m->a, *restrict b = m->b;
    for (size_t i = 0; i < m->nlocal; i++)
        c[i] = a[i] + b[i];
    if (m->inject && m->rank == m->size - 1 && m->nlocal)
        c[0] += 1.0;
}

static void gather(matsum_t *m)
{
    if (m->dist == DIST_SLAB) {
        MPI_Gatherv(m->c, m->ldims[0], m->plane, m->gc, m->rows, m->rowdispl, m->plane, 0, m->cart);
        return;
    }
    int n = 0;
    if (m->rank == 0) {
        for (int r = 0; r < m->size; r++) {
            if (m->blocktype[r] == MPI_DATATYPE_NULL)
                continue;
            MPI_Irecv(m->gc, 1, m->blocktype[r], r, 2, m->cart, &m->req[n++]);
        }
    }
    if (m->nlocal)
        MPI_Isend(m->c, (int)m->nlocal, MPI_DOUBLE, 0, 2, m->cart, &m->req[n++]);
    MPI_Waitall(n, m->req, m->status);
}

/* One (topo, dist) configuration: topology, distribution, timed loop, check, one record
 * per rank. Returns 1 when valid. */
static int run_config(matsum_t *m, const ku_common *common, const int *procdims, int nprocdims)
{
    int world_size;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0};
    if (nprocdims)
        memcpy(dims, procdims, sizeof dims);
    else
        MPI_Dims_create(world_size, m->topo, dims);
    MPI_Cart_create(MPI_COMM_WORLD, m->topo, dims, periods, 0, &m->cart);
    MPI_Comm_rank(m->cart, &m->rank);
    MPI_Comm_size(m->cart, &m->size);
    for (int a = 0; a < 3; a++)
        m->grid[a] = 1;
    if (m->dist == DIST_SLAB)
        m->grid[0] = m->size;
    else
        for (int a = 0; a < m->topo; a++)
            m->grid[a] = dims[a];

    block_of(m, m->rank, m->coords, m->ldims, m->loff);
    m->nlocal = (size_t)m->ldims[0] * m->ldims[1] * m->ldims[2];
    m->a = ku_malloc(m->nlocal * sizeof(double));
    m->b = ku_malloc(m->nlocal * sizeof(double));
    m->c = ku_malloc(m->nlocal * sizeof(double));
    for (size_t i = 0; i < m->nlocal; i++)
        m->c[i] = NAN;
    m->req = ku_malloc(sizeof(MPI_Request) * (2 * (size_t)m->size + 2));
    m->status = ku_malloc(sizeof(MPI_Status) * (2 * (size_t)m->size + 2));

    const size_t total = (size_t)m->X * m->Y * m->Z;
    if (m->rank == 0)
        for (size_t i = 0; i < total; i++)
            m->gc[i] = NAN; /* every element must be overwritten by the gather */
    if (m->dist == DIST_SLAB) {
        MPI_Type_contiguous(m->Y * m->Z, MPI_DOUBLE, &m->plane);
        MPI_Type_commit(&m->plane);
        m->rows = ku_malloc(sizeof(int) * (size_t)m->size);
        m->rowdispl = ku_malloc(sizeof(int) * (size_t)m->size);
        for (int r = 0; r < m->size; r++)
            split(m->X, m->size, r, &m->rows[r], &m->rowdispl[r]);
    } else if (m->rank == 0) {
        m->blocktype = ku_malloc(sizeof(MPI_Datatype) * (size_t)m->size);
        const int sizes[3] = {m->X, m->Y, m->Z};
        for (int r = 0; r < m->size; r++) {
            int rc[3], len[3], off[3];
            block_of(m, r, rc, len, off);
            m->blocktype[r] = MPI_DATATYPE_NULL;
            if (len[0] && len[1] && len[2]) {
                MPI_Type_create_subarray(3, sizes, len, off, MPI_ORDER_C, MPI_DOUBLE, &m->blocktype[r]);
                MPI_Type_commit(&m->blocktype[r]);
            }
        }
    }

    double sum[4] = {0, 0, 0, 0}, max[4] = {0, 0, 0, 0};
    for (int it = 0; it < common->warmup + common->iterations; it++) {
        MPI_Barrier(m->cart);
        double t0 = MPI_Wtime();
        scatter(m);
        double t1 = MPI_Wtime();
        compute(m);
        double t2 = MPI_Wtime();
        gather(m);
        double t3 = MPI_Wtime();
        if (it < common->warmup)
            continue;
        const double t[4] = {(t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6, (t3 - t0) * 1e6};
        for (int k = 0; k < 4; k++) {
            sum[k] += t[k];
            if (t[k] > max[k])
                max[k] = t[k];
        }
    }

    /* serial reference on rank 0; result shared with every rank */
    double check[2] = {0.0, 0.0}; /* max_abs_err, mismatches */
    if (m->rank == 0) {
        for (size_t i = 0; i < total; i++) {
            double ref = m->ga[i] + m->gb[i];
            if (!(m->gc[i] == ref)) {
                double err = fabs(m->gc[i] - ref);
                check[0] = isnan(err) ? INFINITY : fmax(check[0], err);
                check[1] += 1.0;
            }
        }
    }
    MPI_Bcast(check, 2, MPI_DOUBLE, 0, m->cart);
    int valid = check[1] == 0.0;

    ku_json j;
    ku_json_begin(&j, "matsum", m->cart);
    ku_json_str(&j, "dist", dist_names[m->dist]);
    ku_json_int(&j, "topo", m->topo);
    ku_json_ints(&j, "procdims", dims, m->topo);
    ku_json_ints(&j, "decomposition", m->grid, 3);
    ku_json_ints(&j, "coords", m->coords, 3);
    ku_json_ints(&j, "local_dims", m->ldims, 3);
    ku_json_ints(&j, "local_offset", m->loff, 3);
    ku_json_int(&j, "local_elements", (long long)m->nlocal);
    ku_json_int(&j, "iterations", common->iterations);
    static const char *const names[4] = {"scatter", "compute", "gather", "total"};
    char key[32];
    for (int k = 0; k < 4; k++) {
        snprintf(key, sizeof key, "%s_us", names[k]);
        ku_json_double(&j, key, sum[k] / common->iterations);
    }
    for (int k = 0; k < 4; k++) {
        snprintf(key, sizeof key, "%s_max_us", names[k]);
        ku_json_double(&j, key, max[k]);
    }
    if (isinf(check[0]))
        ku_json_null(&j, "max_abs_err"); /* an element was never written (NaN) */
    else
        ku_json_double(&j, "max_abs_err", check[0]);
    ku_json_int(&j, "mismatches", (long long)check[1]);
    ku_json_bool(&j, "valid", valid);
    ku_json_emit(&j, m->cart);

    if (m->dist == DIST_SLAB) {
        MPI_Type_free(&m->plane);
        free(m->rows);
        free(m->rowdispl);
    } else if (m->rank == 0) {
        for (int r = 0; r < m->size; r++)
            if (m->blocktype[r] != MPI_DATATYPE_NULL)
                MPI_Type_free(&m->blocktype[r]);
        free(m->blocktype);
    }
    free(m->a);
    free(m->b);
    free(m->c);
    free(m->req);
    free(m->status);
    MPI_Comm_free(&m->cart);
    return valid;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ku_init(argc, argv);
    ku_common common = {10, 1, 0, 0};
    matsum_t m;
    memset(&m, 0, sizeof m);
    m.X = 240;
    m.Y = 100;
    m.Z = 100;
    int topos[3] = {1}, ntopos = 1, dists[2] = {DIST_SLAB}, ndists = 1;
    int procdims[3] = {0, 0, 0}, nprocdims = 0;

    static struct option longopts[] = {
        {"dims", required_argument, NULL, 'd'},
        {"topo", required_argument, NULL, 't'},
        {"procdims", required_argument, NULL, 'p'},
        {"dist", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = ku_next_option(argc, argv, "d:t:p:D:", longopts, &common, NULL, usage)) != -1) {
        switch (c) {
        case 'd': {
            int d[3];
            if (ku_parse_int_list("--dims", optarg, d, 3, 1, usage) != 3)
                ku_usage_error(usage, "--dims needs three values X,Y,Z");
            m.X = d[0];
            m.Y = d[1];
            m.Z = d[2];
            break;
        }
        case 't':
            ntopos = ku_parse_int_list("--topo", optarg, topos, 3, 1, usage);
            for (int i = 0; i < ntopos; i++)
                if (topos[i] > 3)
                    ku_usage_error(usage, "--topo: %d is not 1, 2 or 3", topos[i]);
            break;
        case 'p':
            nprocdims = ku_parse_int_list("--procdims", optarg, procdims, 3, 1, usage);
            break;
        case 'D':
            ndists = ku_parse_name_list("--dist", optarg, dist_names, 2, dists, 2, usage);
            break;
        }
    }
    m.inject = common.inject;

    int world_size;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (nprocdims) {
        if (ntopos != 1 || nprocdims != topos[0])
            ku_usage_error(usage, "--procdims needs a single --topo with as many values (%d given)", nprocdims);
        long prod = 1;
        for (int i = 0; i < nprocdims; i++)
            prod *= procdims[i];
        if (prod != world_size)
            ku_usage_error(usage, "--procdims product %ld != number of processes %d", prod, world_size);
    }
    if ((double)m.X * m.Y * m.Z > 2e9 || (double)m.Y * m.Z > 2e9)
        ku_usage_error(usage, "--dims too large (more than 2e9 elements)");

    char text[64] = "";
    ku_header_begin("matsum", argc, argv);
    ku_header_ints("dims", (int[]){m.X, m.Y, m.Z}, 3);
    ku_header_ints("topo", topos, ntopos);
    if (nprocdims)
        ku_header_ints("procdims", procdims, nprocdims);
    else
        ku_header_str("procdims", "MPI_Dims_create");
    for (int i = 0; i < ndists; i++) {
        strncat(text, dist_names[dists[i]], sizeof text - strlen(text) - 1);
        strncat(text, i + 1 < ndists ? "," : "", sizeof text - strlen(text) - 1);
    }
    ku_header_str("dist", text);
    ku_header_common(&common);
    ku_header_str("layout", "row-major double A[X][Y][Z]; C = A + B");
    ku_header_str("slab", "MPI_Scatterv/MPI_Gatherv of Y*Z-double planes along the first axis");
    ku_header_str("block", "MPI_Isend/MPI_Irecv of MPI_Type_create_subarray blocks from/to rank 0");
    ku_header_str("time_unit", "us; *_us = mean over timed iterations, *_max_us = max over timed iterations");
    ku_header_str("records", "one per rank per (topo, dist), in that loop order");
    ku_header_print(MPI_COMM_WORLD, &common);

    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        const size_t total = (size_t)m.X * m.Y * m.Z;
        m.ga = ku_malloc(total * sizeof(double));
        m.gb = ku_malloc(total * sizeof(double));
        m.gc = ku_malloc(total * sizeof(double));
        for (int x = 0; x < m.X; x++)
            for (int y = 0; y < m.Y; y++)
                for (int z = 0; z < m.Z; z++) {
                    size_t i = ((size_t)x * m.Y + y) * m.Z + z;
                    m.ga[i] = init_a(x, y, z);
                    m.gb[i] = init_b(x, y, z);
                }
    }

    int valid = 1;
    for (int t = 0; t < ntopos; t++)
        for (int d = 0; d < ndists; d++) {
            m.topo = topos[t];
            m.dist = dists[d];
            valid &= run_config(&m, &common, procdims, nprocdims);
        }

    free(m.ga);
    free(m.gb);
    free(m.gc);
    ku_finish(MPI_COMM_WORLD, &common, valid);
}
