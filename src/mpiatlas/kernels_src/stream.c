/*
 * stream.c - one core's memory copy rate (STREAM copy, a[i] = b[i]) per working-set size.
 *
 * The node's copy limit where likwid-bench is not installed (mpiatlas.node.copy_kernel): no MPI,
 * only a C compiler, so a fresh machine measures it too. The OSU shape of the other kernels
 * (util.h), without MPI: '#'-header lines "# key: value", then one JSON object per working set.
 *
 *   stream --sizes 16384,262144,268435456 [--cpu 0] [--repeats 5] [--min-time-ms 50] [--variants loop,nt]
 *
 * Variants (all by default, one record each per working set): "loop", the plain loop as the build
 * vectorises it (mpiatlas builds -O3 -march=native); "memcpy", the C library's; "nt", non-temporal
 * vector stores (only where the build targets SSE2/AVX/AVX-512: chosen by the compiler's target
 * macros, not by CPU vendor). No single one is fastest everywhere: in cache the loop or memcpy,
 * beyond the caches often the non-temporal stores; mpiatlas.node.copy_kernel keeps the best per level.
 *
 * Per working set W (both arrays, W / 2 bytes each, as likwid-bench's -w counts it), each of
 * --repeats runs copies b into a as many times as last at least --min-time-ms (calibrated once by
 * doubling), and reports bytes *copied* per second (10^6 B/s: MB/s), the unit a message bandwidth
 * compares with. The record holds every run, so best-of-N and the spread are the reader's.
 * "valid": the destination holds the source after the runs (the copy was not optimised away).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 16
#define MAX_REPEATS 100

static const char *usage =
    "usage: stream --sizes W1,W2,... [--cpu C] [--repeats N] [--min-time-ms T] [--variants V,...]\n"
    "  --sizes W,...      working sets in bytes (both arrays together), at least 128 each\n"
    "  --cpu C            pin to cpu C first (default: where the process may run)\n"
    "  --repeats N        timed runs per working set (default 5, at most 100)\n"
    "  --min-time-ms T    each run lasts at least T ms (default 50)\n"
    "  --variants V,...   copy variants to run: loop, memcpy, nt (default: all this build has)\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "stream: %s%s%s\n%s", msg, arg ? ": " : "", arg ? arg : "", usage);
    exit(2);
}

static long parse_long(const char *arg, long min, long max) {
    char *end = NULL;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < min || v > max) die("bad number", arg);
    return v;
}

/* The copy variants. Each pass copies n doubles from b to a; the empty asm with a memory clobber
 * keeps the compiler from dropping or merging passes (it must assume the arrays are read and written
 * between them). */

/* A plain loop: vectorised by -O3 -march=native (the build keeps gcc from turning it into a memcpy
 * call with -fno-tree-loop-distribute-patterns, so it measures the loop the compiler made). */
static void copy_loop(double *restrict a, const double *restrict b, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = b[i];
    __asm__ __volatile__("" ::: "memory");
}

/* The C library's memcpy (glibc picks its own code per CPU at load time: rep movsb, AVX, ...). */
static void copy_memcpy(double *restrict a, const double *restrict b, size_t n) {
    memcpy(a, b, n * sizeof(double));
    __asm__ __volatile__("" ::: "memory");
}

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#define HAVE_NT 1
/* Non-temporal stores in the widest vectors the build targets: the destination bypasses the caches
 * (no read-for-ownership of a), which is what a copy much larger than the caches wants. The arrays
 * are 64-byte aligned; a tail shorter than one vector is copied plainly. */
static void copy_nt(double *restrict a, const double *restrict b, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 8 <= n; i += 8) _mm512_stream_pd(a + i, _mm512_load_pd(b + i));
#elif defined(__AVX__)
    for (; i + 4 <= n; i += 4) _mm256_stream_pd(a + i, _mm256_load_pd(b + i));
#else
    for (; i + 2 <= n; i += 2) _mm_stream_pd(a + i, _mm_load_pd(b + i));
#endif
    for (; i < n; i++) a[i] = b[i];
    _mm_sfence();
    __asm__ __volatile__("" ::: "memory");
}
#else
#define HAVE_NT 0
#endif

typedef void (*copy_fn)(double *restrict, const double *restrict, size_t);

struct variant {
    const char *name;
    copy_fn fn;
};

static const struct variant variants[] = {
    {"loop", copy_loop},
    {"memcpy", copy_memcpy},
#if HAVE_NT
    {"nt", copy_nt},
#endif
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static double timed_passes(copy_fn fn, double *a, const double *b, size_t n, long passes) {
    double t0 = now_s();
    for (long p = 0; p < passes; p++) fn(a, b, n);
    return now_s() - t0;
}

static void measure(const struct variant *v, size_t ws, int repeats, double min_time_s) {
    size_t n = ws / 2 / sizeof(double);
    double *a = NULL, *b = NULL;
    if (posix_memalign((void **)&a, 64, n * sizeof(double)) || posix_memalign((void **)&b, 64, n * sizeof(double))) {
        fprintf(stderr, "stream: cannot allocate 2 x %zu bytes\n", n * sizeof(double));
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = (double)(i % 1000) + 0.5;
    }
    /* Calibrate: double the passes until one run lasts min_time_s (the pages are touched by now). */
    long passes = 1;
    while (timed_passes(v->fn, a, b, n, passes) < min_time_s && passes < (1L << 40)) passes *= 2;
    double runs[MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        double t = timed_passes(v->fn, a, b, n, passes);
        runs[r] = (double)passes * (double)(n * sizeof(double)) / t / 1e6;
    }
    int valid = 1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) { valid = 0; break; }
    printf("{\"kernel\": \"stream\", \"variant\": \"%s\", \"cpu\": %d, \"working_set_bytes\": %zu, "
           "\"array_bytes\": %zu, \"passes\": %ld, \"copy_MBps_runs\": [",
           v->name, sched_getcpu(), ws, n * sizeof(double), passes);
    for (int r = 0; r < repeats; r++) printf("%s%.6g", r ? ", " : "", runs[r]);
    printf("], \"valid\": %s}\n", valid ? "true" : "false");
    fflush(stdout);
    free(a);
    free(b);
}

/* The variants named in a comma-separated list (all when NULL); exits naming an unknown one. */
static int select_variants(const char *list, const struct variant **chosen) {
    int count = 0;
    if (!list) {
        for (size_t i = 0; i < N_VARIANTS; i++) chosen[count++] = &variants[i];
        return count;
    }
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < N_VARIANTS && strcmp(variants[i].name, tok) != 0) i++;
        if (i == N_VARIANTS) die("unknown or not built variant (loop, memcpy, nt where the build has SIMD)", tok);
        if (count < (int)N_VARIANTS) chosen[count++] = &variants[i];
    }
    free(copy);
    return count;
}

#ifndef BUILD_FLAGS
#define BUILD_FLAGS "unknown"
#endif

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 's'},
        {"cpu", required_argument, NULL, 'c'},
        {"repeats", required_argument, NULL, 'r'},
        {"min-time-ms", required_argument, NULL, 't'},
        {"variants", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    size_t sizes[MAX_SIZES];
    int nsizes = 0, repeats = 5, cpu = -1;
    long min_time_ms = 50;
    const char *variant_list = NULL;
    int code;
    while ((code = getopt_long(argc, argv, "s:c:r:t:v:h", longopts, NULL)) != -1) {
        switch (code) {
        case 's': {
            char *list = strdup(optarg), *save = NULL;
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (nsizes == MAX_SIZES) die("too many sizes", optarg);
                sizes[nsizes++] = (size_t)parse_long(tok, 128, 1L << 40);
            }
            free(list);
            break;
        }
        case 'c': cpu = (int)parse_long(optarg, 0, CPU_SETSIZE - 1); break;
        case 'r': repeats = (int)parse_long(optarg, 1, MAX_REPEATS); break;
        case 't': min_time_ms = parse_long(optarg, 1, 60000); break;
        case 'v': variant_list = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: die("unknown option", NULL);
        }
    }
    if (optind < argc) die("unexpected argument", argv[optind]);
    if (nsizes == 0) die("--sizes is required", NULL);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "stream: cannot pin to cpu %d: %s\n", cpu, strerror(errno));
            return 1;
        }
    }
    const struct variant *chosen[N_VARIANTS];
    int nchosen = select_variants(variant_list, chosen);
    printf("# kernel: stream\n# format_version: 2\n# operation: copy a[i] = b[i] (double)\n");
    printf("# repeats: %d\n# min_time_ms: %ld\n# compiler: %s\n# flags: %s\n# variants: ", repeats, min_time_ms,
           __VERSION__, BUILD_FLAGS);
    for (int i = 0; i < nchosen; i++) printf("%s%s", i ? "," : "", chosen[i]->name);
    printf("\n");
    for (int i = 0; i < nsizes; i++)
        for (int k = 0; k < nchosen; k++) measure(chosen[k], sizes[i], repeats, (double)min_time_ms / 1e3);
    return 0;
}
