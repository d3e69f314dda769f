/* pair_latency: the cache-line round trip between two cpus, for each pair given.
 *
 * Not an MPI program: a node probe (mpiatlas.node.pair_latency) run before and after a launch on
 * the cpus its ranks use. Two threads, one pinned to each cpu of a pair, hand one cache line back
 * and forth; a batch times PER_BATCH round trips, and the figure is the median batch (robust to a
 * batch that an interrupt or another process stretched). Why: on a VM the hypervisor may move two
 * vCPUs onto cores that share no cache (an AMD EPYC guest here: 52-67 ns within one L3, 305-366 ns
 * apart); a launch run in that state measures another machine, and nothing in /proc shows it.
 *
 * Usage: pair_latency BATCHES PER_BATCH BUDGET_MS CPU_A CPU_B [CPU_A CPU_B ...]
 * Prints one line per pair:
 *   pair A B median_ns P25_ns P75_ns BATCHES_DONE
 *   pair A B error WHY
 * A pair stops after BUDGET_MS (a busy cpu must not hold the launch up): its line then counts the
 * batches it finished, and says error when it finished none.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Alignas(64) atomic_long ball;  /* odd: the pinger served; even: the ponger returned */
static _Alignas(64) atomic_int stop;

struct pong_args { int cpu; int pinned; };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int pin_self(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *pong(void *arg) {
    struct pong_args *a = arg;
    a->pinned = pin_self(a->cpu) == 0;
    long seen = 0;
    while (!atomic_load_explicit(&stop, memory_order_acquire)) {
        long v = atomic_load_explicit(&ball, memory_order_acquire);
        if (v != seen && (v & 1)) {
            atomic_store_explicit(&ball, v + 1, memory_order_release);
            seen = v + 1;
        }
    }
    return NULL;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void measure(int a, int b, int batches, int per_batch, double budget_s, double *times) {
    if (pin_self(a) != 0) {
        printf("pair %d %d error cannot run on cpu %d\n", a, b, a);
        return;
    }
    atomic_store(&ball, 0);
    atomic_store(&stop, 0);
    struct pong_args args = {b, 0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, pong, &args) != 0) {
        printf("pair %d %d error cannot start a thread\n", a, b);
        return;
    }
    long v = 0;
    int done = 0;
    double deadline = now_s() + budget_s;
    /* The first batch warms the line and the threads up: not counted. */
    for (int j = -1; j < batches && now_s() < deadline; j++) {
        double t0 = now_s();
        for (int k = 0; k < per_batch; k++) {
            atomic_store_explicit(&ball, ++v, memory_order_release);
            /* A partner that never answers (its cpu busy elsewhere) is given up at the deadline. */
            for (unsigned spins = 1; atomic_load_explicit(&ball, memory_order_acquire) != v + 1; spins++)
                if ((spins & 4095) == 0 && now_s() > deadline) goto out;
            v++;
        }
        if (j >= 0) times[done++] = (now_s() - t0) / per_batch * 1e9;
    }
out:
    atomic_store_explicit(&stop, 1, memory_order_release);
    pthread_join(thread, NULL);
    if (!args.pinned) {
        printf("pair %d %d error cannot run on cpu %d\n", a, b, b);
    } else if (done == 0) {
        printf("pair %d %d error no batch within %.0f ms\n", a, b, budget_s * 1e3);
    } else {
        qsort(times, (size_t)done, sizeof *times, by_value);
        printf("pair %d %d %.1f %.1f %.1f %d\n", a, b, times[done / 2], times[done / 4], times[(3 * done) / 4], done);
    }
}

int main(int argc, char **argv) {
    if (argc < 6 || (argc - 4) % 2 != 0) {
        fprintf(stderr, "usage: %s BATCHES PER_BATCH BUDGET_MS CPU_A CPU_B [CPU_A CPU_B ...]\n", argv[0]);
        return 2;
    }
    int batches = atoi(argv[1]), per_batch = atoi(argv[2]);
    double budget_s = atof(argv[3]) / 1e3;
    if (batches < 1 || per_batch < 1 || budget_s <= 0) {
        fprintf(stderr, "%s: BATCHES, PER_BATCH and BUDGET_MS must be positive\n", argv[0]);
        return 2;
    }
    double *times = malloc((size_t)batches * sizeof *times);
    if (!times) return 1;
    for (int i = 4; i + 1 < argc; i += 2) {
        measure(atoi(argv[i]), atoi(argv[i + 1]), batches, per_batch, budget_s, times);
        fflush(stdout);
    }
    free(times);
    return 0;
}
