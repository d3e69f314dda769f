/*
 * jacobi.c - 3-D 7-point Jacobi sweeps, MPI + OpenMP (hybrid).
 *
 * Global grid Gx x Gy x Gz interior points with a Dirichlet boundary layer around it,
 * decomposed over a non-periodic 3-D Cartesian grid px x py x pz (MPI_Dims_create or
 * --procdims). --mode weak: every core owns L^3 points, so a configuration solves the grid
 * pure MPI solves on its P*T cores (G = c*L per axis, c = MPI_Dims_create(P*T), the rank grid
 * itself when T = 1): a rank of T threads owns T*L^3 points, and hybrid and pure MPI on the
 * same cores do the same work;
 * --mode strong: the global grid is N^3 and axis a is split into N/p_a blocks, the
 * first N%p_a one point larger.
 *
 * Each iteration: halo exchange of the 6 faces (MPI_Irecv/MPI_Isend of
 * MPI_Type_create_subarray face types, one MPI_Waitall; physical boundaries are
 * MPI_PROC_NULL neighbours whose ghost layer keeps the boundary values), the sweep
 *     u'(i,j,k) = (u(i-1)+u(i+1)+u(j-1)+u(j+1)+u(k-1)+u(k+1)) / 6
 * on all interior points (OpenMP over (i,j) lines, static schedule), and the
 * residual r = sum over all interior points of (u' - u)^2, summed per z-line, Kahan-
 * summed over lines per thread, thread partials added in thread order, and then
 * MPI_Allreduce(MPI_SUM) across ranks.
 *
 * Initial interior value u0 = ((31 i + 17 j + 7 k) mod 13) / 13 (global indices),
 * boundary g(x,y,z) = 1 + x^2 - y/2 + x*y*z/4 + z^2/2 with x = (i+1)/(Gx+1) etc.
 * Warm-up sweeps run from the initial condition, then the grid is re-initialised:
 * the residual sequence always starts from the same state.
 *
 * --check: rank 0 also runs the same global problem serially (one thread) for
 * min(K, iterations) sweeps and compares residuals: valid = max relative difference
 * <= 1e-12 (the stencil is bitwise identical; only the order of the residual sums
 * differs).
 */
#define _GNU_SOURCE
#include "util.h"

#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHECK_TOLERANCE 1e-12

enum { MODE_WEAK, MODE_STRONG };
static const char *const mode_names[] = {"weak", "strong"};

static const char usage[] =
    "Usage: jacobi [options]\n"
    "3-D 7-point Jacobi on a Cartesian decomposition, 6-face halo exchange with\n"
    "non-blocking point-to-point (subarray datatypes), residual by MPI_Allreduce each\n"
    "iteration, OpenMP threads inside each rank (MPI_THREAD_FUNNELED).\n\n"
    "Options:\n"
    "  -m, --mode M         weak (L^3 points per core: a rank of T threads owns T*L^3) or strong\n"
    "                       (fixed N^3 grid) (default weak)\n"
    "  -L, --L L            weak mode: points per core per axis, L or Lx,Ly,Lz (default 32)\n"
    "  -N, --N N            strong mode: global points per axis, N or Nx,Ny,Nz (default 128)\n"
    "  -p, --procdims a,b,c process grid (product = P) (default MPI_Dims_create)\n"
    "  -T, --threads T      OpenMP threads per rank (default $OMP_NUM_THREADS, else 1)\n"
    "  -K, --residuals K    residuals printed (first K iterations) (default 10)\n"
    "  -c, --check          rank 0 re-runs the global problem serially and compares residuals\n"
    "      --inject-fault   perturb one point on the last rank (tests that --check fails)\n"
    KU_COMMON_USAGE
    "Defaults: --iterations 100 --warmup 5. Times: mean per iteration, us.\n"
    "Output: '#' header on rank 0, then one JSON object per rank with keys kernel, rank,\n"
    "size, host, cpu, mode, threads, thread_cpus (after the timed sweeps), thread_cpus_start (before),\n"
    "thread_mask_cpus (cpus in each thread's affinity mask, the widest seen), thread_mask_first, thread_level, procdims, coords, local_dims,\n"
    "local_offset, global_dims, local_points, neighbours, iterations, compute_us, halo_us,\n"
    "allreduce_us, iteration_us, bytes_sent, messages, mlups_rank, mlups_total, residuals,\n"
    "residual_last, check_iterations, max_rel_diff, valid.\n";

typedef struct {
    int n[3];      /* local interior points per axis */
    int off[3];    /* global index of the first local interior point */
    int g[3];      /* global interior points per axis */
    size_t sx, sy; /* strides of axis 0 and 1 (axis 2 is contiguous) */
    size_t total;  /* (nx+2)(ny+2)(nz+2) */
    double *u, *un;
} grid_t;

static double initial_value(int i, int j, int k) { return (double)((31 * i + 17 * j + 7 * k) % 13) / 13.0; }

static double boundary_value(const int g[3], int i, int j, int k)
{
    const double x = (i + 1.0) / (g[0] + 1.0), y = (j + 1.0) / (g[1] + 1.0), z = (k + 1.0) / (g[2] + 1.0);
    return 1.0 + x * x - 0.5 * y + 0.25 * x * y * z + 0.5 * z * z;
}

static void grid_alloc(grid_t *d)
{
    d->sy = (size_t)d->n[2] + 2;
    d->sx = ((size_t)d->n[1] + 2) * d->sy;
    d->total = ((size_t)d->n[0] + 2) * d->sx;
    d->u = ku_malloc(d->total * sizeof(double));
    d->un = ku_malloc(d->total * sizeof(double));
}

/* Fill both arrays (ghost layers included) from global indices. */
static void grid_init(grid_t *d)
{
    for (int i = 0; i < d->n[0] + 2; i++)
        for (int j = 0; j < d->n[1] + 2; j++)
            for (int k = 0; k < d->n[2] + 2; k++) {
                const int gi = d->off[0] + i - 1, gj = d->off[1] + j - 1, gk = d->off[2] + k - 1;
                const int outside = gi < 0 || gi >= d->g[0] || gj < 0 || gj >= d->g[1] || gk < 0 || gk >= d->g[2];
                const size_t p = (size_t)i * d->sx + (size_t)j * d->sy + (size_t)k;
                d->u[p] = d->un[p] = outside ? boundary_value(d->g, gi, gj, gk) : initial_value(gi, gj, gk);
            }
}

/* Where each OpenMP thread of this rank runs: its cpu now (sched_getcpu) and, from its own
 * affinity mask, how many cpus it may run on and the lowest of them. A thread bound by
 * OMP_PLACES=threads has a mask of one cpu; more is an unbound thread the OS may move. */
static void sample_threads(int nthreads, int *cpu, int *mask_count, int *mask_first)
{
    for (int t = 0; t < nthreads; t++)
        cpu[t] = mask_count[t] = mask_first[t] = -1;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        cpu_set_t mask;
        cpu[t] = sched_getcpu();
        if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
            mask_count[t] = CPU_COUNT(&mask);
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &mask)) {
                    mask_first[t] = c;
                    break;
                }
        }
    }
}

/* One sweep u -> un over the interior; returns the local sum of squared updates. */
static double sweep(const grid_t *d, int nthreads, double *partial)
{
    const double *restrict u = d->u;
    double *restrict un = d->un;
    const int nx = d->n[0], ny = d->n[1], nz = d->n[2];
    const size_t sx = d->sx, sy = d->sy;
    for (int t = 0; t < nthreads; t++)
        partial[t] = 0.0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
#endif
    {
        double s = 0.0, comp = 0.0;
#ifdef _OPENMP
#pragma omp for collapse(2) schedule(static)
#endif
        for (int i = 1; i <= nx; i++)
            for (int j = 1; j <= ny; j++) {
                const size_t base = (size_t)i * sx + (size_t)j * sy;
                double line = 0.0;
                for (int k = 1; k <= nz; k++) {
                    const size_t p = base + (size_t)k;
                    const double v = (u[p - sx] + u[p + sx] + u[p - sy] + u[p + sy] + u[p - 1] + u[p + 1]) / 6.0;
                    const double diff = v - u[p];
                    un[p] = v;
                    line += diff * diff;
                }
                /* Kahan summation of the line sums */
                const double y = line - comp, t = s + y;
                comp = (t - s) - y;
                s = t;
            }
#ifdef _OPENMP
        partial[omp_get_thread_num()] = s;
#else
        partial[0] = s;
#endif
    }
    double sum = 0.0;
    for (int t = 0; t < nthreads; t++)
        sum += partial[t];
    return sum;
}

static void swap(grid_t *d)
{
    double *t = d->u;
    d->u = d->un;
    d->un = t;
}

static int parse_triplet(const char *opt, const char *arg, int out[3])
{
    int n = ku_parse_int_list(opt, arg, out, 3, 1, usage);
    if (n == 1)
        out[1] = out[2] = out[0];
    else if (n != 3)
        ku_usage_error(usage, "%s takes one value or three (a,b,c)", opt);
    return n;
}

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
    }
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE;
#ifdef _OPENMP
    /* Form the OpenMP team (OMP_NUM_THREADS, which the runner sets to --threads) before MPI starts
     * its own helper threads: likwid-pin pins threads in the order they are created, and how many
     * helpers MPI_Init_thread starts differs between stacks, transports and even ranks (measured:
     * 0 to 3). Created first, team thread i gets the i-th cpu of the rank's list on every stack;
     * the runtime keeps the team's threads for every later parallel region of the same size. */
    if (getenv("OMP_NUM_THREADS")) {
        /* A region with no effect is compiled away (measured with gcc 12): this one counts the team. */
        volatile int formed = 0;
        int members = 0;
#pragma omp parallel reduction(+ : members)
        members += 1;
        formed = members;
        (void)formed;
    }
#endif
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    ku_init(argc, argv);
    ku_common common = {100, 5, 0, 0};
    int mode = MODE_WEAK, L[3] = {32, 32, 32}, N[3] = {128, 128, 128};
    int procdims[3] = {0, 0, 0}, have_procdims = 0, threads = 0, K = 10, check = 0;

    static struct option longopts[] = {
        {"mode", required_argument, NULL, 'm'},
        {"L", required_argument, NULL, 'L'},
        {"N", required_argument, NULL, 'N'},
        {"procdims", required_argument, NULL, 'p'},
        {"threads", required_argument, NULL, 'T'},
        {"residuals", required_argument, NULL, 'K'},
        {"check", no_argument, NULL, 'c'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = ku_next_option(argc, argv, "m:L:N:p:T:K:c", longopts, &common, NULL, usage)) != -1) {
        switch (c) {
        case 'm':
            if (strcmp(optarg, "weak") == 0)
                mode = MODE_WEAK;
            else if (strcmp(optarg, "strong") == 0)
                mode = MODE_STRONG;
            else
                ku_usage_error(usage, "--mode: '%s' is not weak or strong", optarg);
            break;
        case 'L':
            parse_triplet("--L", optarg, L);
            break;
        case 'N':
            parse_triplet("--N", optarg, N);
            break;
        case 'p':
            if (ku_parse_int_list("--procdims", optarg, procdims, 3, 1, usage) != 3)
                ku_usage_error(usage, "--procdims needs three values a,b,c");
            have_procdims = 1;
            break;
        case 'T':
            threads = ku_parse_int("--threads", optarg, 1, 1024, usage);
            break;
        case 'K':
            K = ku_parse_int("--residuals", optarg, 1, 100000, usage);
            break;
        case 'c':
            check = 1;
            break;
        }
    }
#ifdef _OPENMP
    /* Pure MPI unless asked: --threads, else OMP_NUM_THREADS, else 1 (not the runtime's
     * default of one thread per core, which oversubscribes every rank's cores). */
    if (!threads && !getenv("OMP_NUM_THREADS"))
        threads = 1;
    if (threads)
        omp_set_num_threads(threads);
    threads = omp_get_max_threads();
#else
    if (threads > 1)
        ku_usage_error(usage, "--threads %d: built without OpenMP", threads);
    threads = 1;
#endif

    int world_size;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0};
    if (have_procdims) {
        if ((long)procdims[0] * procdims[1] * procdims[2] != world_size)
            ku_usage_error(usage, "--procdims %d,%d,%d: product != number of processes %d",
                           procdims[0], procdims[1], procdims[2], world_size);
        memcpy(dims, procdims, sizeof dims);
    } else {
        MPI_Dims_create(world_size, 3, dims);
    }

    grid_t d;
    memset(&d, 0, sizeof d);
    /* Weak mode: the work is per core, not per rank. With T threads the global grid is the one
     * P*T pure MPI ranks solve (their default grid times L), split over this run's rank grid
     * like strong mode; pure MPI (T = 1) keeps its own grid, explicit ones included. */
    int cores_dims[3] = {0, 0, 0};
    if (threads > 1)
        MPI_Dims_create(world_size * threads, 3, cores_dims);
    else
        memcpy(cores_dims, dims, sizeof cores_dims);
    for (int a = 0; a < 3; a++) {
        if (mode == MODE_WEAK) {
            d.g[a] = cores_dims[a] * L[a];
            if (d.g[a] < dims[a])
                ku_usage_error(usage, "--L %d: the global grid has %d points on axis %d, fewer than its %d processes",
                               L[a], d.g[a], a, dims[a]);
        } else {
            d.g[a] = N[a];
            if (N[a] < dims[a])
                ku_usage_error(usage, "--N %d on axis %d is smaller than its %d processes", N[a], a, dims[a]);
        }
    }
    if ((double)(d.g[0] + 2) * (d.g[1] + 2) * (d.g[2] + 2) > 4e9)
        ku_usage_error(usage, "global grid too large");

    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    int rank, size, coords[3];
    MPI_Comm_rank(cart, &rank);
    MPI_Comm_size(cart, &size);
    MPI_Cart_coords(cart, rank, 3, coords);
    for (int a = 0; a < 3; a++) {
        const int base = d.g[a] / dims[a], rem = d.g[a] % dims[a];
        d.n[a] = base + (coords[a] < rem ? 1 : 0);
        d.off[a] = coords[a] * base + (coords[a] < rem ? coords[a] : rem);
    }
    const int nres = K < common.iterations ? K : common.iterations;

    ku_header_begin("jacobi", argc, argv);
    ku_header_str("mode", mode_names[mode]);
    if (mode == MODE_WEAK) {
        ku_header_ints("L", L, 3);
        ku_header_int("cores", (long)world_size * threads);
    }
    else
        ku_header_ints("N", N, 3);
    ku_header_ints("global_dims", d.g, 3);
    ku_header_ints("procdims", dims, 3);
    ku_header_int("threads", threads);
    ku_header_str("thread_level", thread_level_name(provided));
    ku_header_common(&common);
    ku_header_int("residuals_k", K);
    ku_header_int("check", check);
    ku_header_str("stencil", "7-point Jacobi, u' = (sum of 6 neighbours)/6, Dirichlet boundary");
    ku_header_str("residual", "sum over interior of (u'-u)^2, MPI_Allreduce every iteration");
    ku_header_str("halo", "6 faces, MPI_Irecv/MPI_Isend of subarray datatypes, MPI_Waitall");
    ku_header_str("time_unit", "us, mean per timed iteration");
    ku_header_print(cart, &common);

    /* neighbours and face datatypes (relative to the start of the array) */
    int lo[3], hi[3];
    for (int a = 0; a < 3; a++)
        MPI_Cart_shift(cart, a, 1, &lo[a], &hi[a]);
    grid_alloc(&d);
    const int full[3] = {d.n[0] + 2, d.n[1] + 2, d.n[2] + 2};
    const size_t stride[3] = {d.sx, d.sy, 1};
    MPI_Datatype face[3];
    long long bytes_sent = 0;
    int messages = 0;
    for (int a = 0; a < 3; a++) {
        int sub[3] = {d.n[0], d.n[1], d.n[2]}, start[3] = {1, 1, 1};
        sub[a] = 1;
        start[a] = 0;
        MPI_Type_create_subarray(3, full, sub, start, MPI_ORDER_C, MPI_DOUBLE, &face[a]);
        MPI_Type_commit(&face[a]);
        const long long face_bytes = 8LL * sub[0] * sub[1] * sub[2];
        if (lo[a] != MPI_PROC_NULL) {
            bytes_sent += face_bytes;
            messages++;
        }
        if (hi[a] != MPI_PROC_NULL) {
            bytes_sent += face_bytes;
            messages++;
        }
    }

    /* The threads' places before the timed sweeps; sampled again after them (a thread that moved
     * between the two migrated while it was timed). */
    int *thread_cpus_start = ku_malloc(sizeof(int) * (size_t)threads);
    int *thread_mask_counts = ku_malloc(sizeof(int) * (size_t)threads);
    int *thread_mask_first = ku_malloc(sizeof(int) * (size_t)threads);
    sample_threads(threads, thread_cpus_start, thread_mask_counts, thread_mask_first);
    double *partial = ku_malloc(sizeof(double) * (size_t)threads);
    double *residuals = ku_malloc(sizeof(double) * (size_t)(nres > 0 ? nres : 1));
    double t_halo = 0.0, t_compute = 0.0, t_allreduce = 0.0, t_loop = 0.0, residual = 0.0;

    for (int phase = 0; phase < 2; phase++) { /* 0: warm-up, 1: timed */
        const int iters = phase ? common.iterations : common.warmup;
        grid_init(&d);
        if (phase == 1 && common.inject && rank == size - 1)
            d.u[d.sx + d.sy + 1] += 1e-3;
        MPI_Barrier(cart);
        const double start = MPI_Wtime();
        for (int it = 0; it < iters; it++) {
            const double t0 = MPI_Wtime();
            MPI_Request req[12];
            MPI_Status status[12];
            int nr = 0;
            for (int a = 0; a < 3; a++) {
                const size_t last = (size_t)d.n[a] * stride[a], ghost_hi = ((size_t)d.n[a] + 1) * stride[a];
                /* tag 2a: message travelling towards -a; 2a+1: towards +a */
                MPI_Irecv(d.u, 1, face[a], lo[a], 2 * a + 1, cart, &req[nr++]);
                MPI_Irecv(d.u + ghost_hi, 1, face[a], hi[a], 2 * a, cart, &req[nr++]);
                MPI_Isend(d.u + stride[a], 1, face[a], lo[a], 2 * a, cart, &req[nr++]);
                MPI_Isend(d.u + last, 1, face[a], hi[a], 2 * a + 1, cart, &req[nr++]);
            }
            MPI_Waitall(nr, req, status);
            const double t1 = MPI_Wtime();
            const double local = sweep(&d, threads, partial);
            const double t2 = MPI_Wtime();
            MPI_Allreduce(&local, &residual, 1, MPI_DOUBLE, MPI_SUM, cart);
            const double t3 = MPI_Wtime();
            swap(&d);
            if (phase == 1) {
                t_halo += t1 - t0;
                t_compute += t2 - t1;
                t_allreduce += t3 - t2;
                if (it < nres)
                    residuals[it] = residual;
            }
        }
        if (phase == 1)
            t_loop = MPI_Wtime() - start;
    }

    double t_loop_max = 0.0;
    MPI_Allreduce(&t_loop, &t_loop_max, 1, MPI_DOUBLE, MPI_MAX, cart);
    const double local_points = (double)d.n[0] * d.n[1] * d.n[2];
    const double global_points = (double)d.g[0] * d.g[1] * d.g[2];
    const double iters = common.iterations;

    /* serial reference on rank 0 */
    double check_result[2] = {NAN, 0.0}; /* max relative difference, valid */
    if (check && rank == 0) {
        grid_t s;
        memset(&s, 0, sizeof s);
        for (int a = 0; a < 3; a++) {
            s.n[a] = s.g[a] = d.g[a];
            s.off[a] = 0;
        }
        grid_alloc(&s);
        grid_init(&s);
        double worst = 0.0, one = 0.0;
        for (int it = 0; it < nres; it++) {
            const double ref = sweep(&s, 1, &one);
            swap(&s);
            const double rel = fabs(residuals[it] - ref) / fmax(fabs(ref), 1e-300);
            if (!(rel <= worst))
                worst = isnan(rel) ? INFINITY : rel;
        }
        check_result[0] = worst;
        check_result[1] = worst <= CHECK_TOLERANCE ? 1.0 : 0.0;
        free(s.u);
        free(s.un);
    }
    if (check)
        MPI_Bcast(check_result, 2, MPI_DOUBLE, 0, cart);

    int *thread_cpus = ku_malloc(sizeof(int) * (size_t)threads);
    int *end_mask_counts = ku_malloc(sizeof(int) * (size_t)threads);
    int *end_mask_first = ku_malloc(sizeof(int) * (size_t)threads);
    sample_threads(threads, thread_cpus, end_mask_counts, end_mask_first);
    for (int t = 0; t < threads; t++) /* the widest mask a thread had at either sample */
        if (end_mask_counts[t] > thread_mask_counts[t])
            thread_mask_counts[t] = end_mask_counts[t];

    ku_json j;
    ku_json_begin(&j, "jacobi", cart);
    ku_json_str(&j, "mode", mode_names[mode]);
    ku_json_int(&j, "threads", threads);
    ku_json_ints(&j, "thread_cpus", thread_cpus, threads);
    ku_json_ints(&j, "thread_cpus_start", thread_cpus_start, threads);
    ku_json_ints(&j, "thread_mask_cpus", thread_mask_counts, threads);
    ku_json_ints(&j, "thread_mask_first", thread_mask_first, threads);
    ku_json_str(&j, "thread_level", thread_level_name(provided));
    ku_json_ints(&j, "procdims", dims, 3);
    ku_json_ints(&j, "coords", coords, 3);
    ku_json_ints(&j, "local_dims", d.n, 3);
    ku_json_ints(&j, "local_offset", d.off, 3);
    ku_json_ints(&j, "global_dims", d.g, 3);
    ku_json_int(&j, "local_points", (long long)local_points);
    ku_json_ints(&j, "neighbours", (int[]){lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]}, 6);
    ku_json_int(&j, "iterations", common.iterations);
    ku_json_double(&j, "compute_us", t_compute * 1e6 / iters);
    ku_json_double(&j, "halo_us", t_halo * 1e6 / iters);
    ku_json_double(&j, "allreduce_us", t_allreduce * 1e6 / iters);
    ku_json_double(&j, "iteration_us", t_loop * 1e6 / iters);
    ku_json_int(&j, "bytes_sent", bytes_sent);
    ku_json_int(&j, "messages", messages);
    ku_json_double(&j, "mlups_rank", local_points * iters / t_loop / 1e6);
    ku_json_double(&j, "mlups_total", global_points * iters / t_loop_max / 1e6);
    ku_json_doubles(&j, "residuals", residuals, nres);
    ku_json_double(&j, "residual_last", residual);
    ku_json_int(&j, "check_iterations", check ? nres : 0);
    if (check) {
        ku_json_double(&j, "max_rel_diff", check_result[0]);
        ku_json_bool(&j, "valid", check_result[1] != 0.0);
    } else {
        ku_json_null(&j, "max_rel_diff");
        ku_json_null(&j, "valid");
    }
    ku_json_emit(&j, cart);

    const int ok = !check || check_result[1] != 0.0;
    for (int a = 0; a < 3; a++)
        MPI_Type_free(&face[a]);
    free(d.u);
    free(d.un);
    free(partial);
    free(residuals);
    free(thread_cpus);
    free(thread_cpus_start);
    free(thread_mask_counts);
    free(thread_mask_first);
    free(end_mask_counts);
    free(end_mask_first);
    MPI_Comm_free(&cart);
    ku_exit(common.strict && !ok ? 3 : 0);
}
