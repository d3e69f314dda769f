/*
 * stream.c - one core's memory copy rate (STREAM copy, a[i] = b[i]) per working-set size.
 *
 * The node's copy limit where likwid-bench is not installed (mpiatlas.node.copy_kernel): no MPI,
 * only a C compiler, so a fresh machine measures it too. The OSU shape of the other kernels
 * (util.h), without MPI: '#'-header lines "# key: value", then one JSON object per working set.
 *
 *   stream --sizes 16384,262144,268435456 [--cpu 0] [--repeats 5] [--min-time-ms 50]
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
    "usage: stream --sizes W1,W2,... [--cpu C] [--repeats N] [--min-time-ms T]\n"
    "  --sizes W,...      working sets in bytes (both arrays together), at least 128 each\n"
    "  --cpu C            pin to cpu C first (default: where the process may run)\n"
    "  --repeats N        timed runs per working set (default 5, at most 100)\n"
    "  --min-time-ms T    each run lasts at least T ms (default 50)\n";

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

/* One pass of the copy; the empty asm with a memory clobber keeps the compiler from dropping or
 * merging passes (it must assume the arrays are read and written between them). */
static void copy_pass(double *restrict a, const double *restrict b, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = b[i];
    __asm__ __volatile__("" ::: "memory");
}

static double timed_passes(double *a, const double *b, size_t n, long passes) {
    double t0 = now_s();
    for (long p = 0; p < passes; p++) copy_pass(a, b, n);
    return now_s() - t0;
}

static void measure(size_t ws, int repeats, double min_time_s) {
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
    while (timed_passes(a, b, n, passes) < min_time_s && passes < (1L << 40)) passes *= 2;
    double runs[MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        double t = timed_passes(a, b, n, passes);
        runs[r] = (double)passes * (double)(n * sizeof(double)) / t / 1e6;
    }
    int valid = 1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) { valid = 0; break; }
    printf("{\"kernel\": \"stream\", \"cpu\": %d, \"working_set_bytes\": %zu, \"array_bytes\": %zu, "
           "\"passes\": %ld, \"copy_MBps_runs\": [", sched_getcpu(), ws, n * sizeof(double), passes);
    for (int r = 0; r < repeats; r++) printf("%s%.6g", r ? ", " : "", runs[r]);
    printf("], \"valid\": %s}\n", valid ? "true" : "false");
    fflush(stdout);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 's'},
        {"cpu", required_argument, NULL, 'c'},
        {"repeats", required_argument, NULL, 'r'},
        {"min-time-ms", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    size_t sizes[MAX_SIZES];
    int nsizes = 0, repeats = 5, cpu = -1;
    long min_time_ms = 50;
    int code;
    while ((code = getopt_long(argc, argv, "s:c:r:t:h", longopts, NULL)) != -1) {
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
    printf("# kernel: stream\n# format_version: 1\n# operation: copy a[i] = b[i] (double)\n");
    printf("# repeats: %d\n# min_time_ms: %ld\n# compiler: %s\n", repeats, min_time_ms, __VERSION__);
    for (int i = 0; i < nsizes; i++) measure(sizes[i], repeats, (double)min_time_ms / 1e3);
    return 0;
}
