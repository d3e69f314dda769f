/*
 * util.h - shared helpers of the mpiatlas MPI kernels (OSU micro-benchmark shape).
 *
 * Every kernel:
 *   1. parses its options with ku_next_option (getopt_long; the common ones, --iterations,
 *      --warmup, --strict, --inject-fault, --help, and the sweep options are handled there);
 *   2. prints, on rank 0 only, a '#'-header: one "# key: value" line per parameter,
 *      including the MPI library version (MPI_Get_library_version);
 *   3. prints one JSON object per rank per record on stdout. Rank 0 gathers the
 *      lines of all ranks and prints them in rank order, so lines never interleave.
 *      Each object starts with "kernel", "rank", "size" (number of processes),
 *      "host" and "cpu" (sched_getcpu() when the record is emitted, i.e. at the end).
 *
 * Header values are bare text: integers are printed as digits, everything else
 * (lists such as "2,2,1", names, versions) is a string.
 */
#ifndef MPIATLAS_KERNEL_UTIL_H
#define MPIATLAS_KERNEL_UTIL_H

#include <mpi.h>
#include <stddef.h>

#define KU_FORMAT_VERSION 1

/* ---- options ----------------------------------------------------------- */

/* getopt_long codes of the common options (kernels use codes < 256 for their own). */
enum { KU_OPT_ITERATIONS = 1000, KU_OPT_WARMUP, KU_OPT_STRICT, KU_OPT_HELP, KU_OPT_INJECT_FAULT };

/* The common entries ku_next_option appends to a kernel's struct option table. Every kernel has
 * --inject-fault (its usage says what it corrupts): a check of the kernel's own validation. */
#define KU_COMMON_LONGOPTS                                             \
    {"iterations", required_argument, NULL, KU_OPT_ITERATIONS},        \
    {"warmup", required_argument, NULL, KU_OPT_WARMUP},                \
    {"strict", no_argument, NULL, KU_OPT_STRICT},                      \
    {"inject-fault", no_argument, NULL, KU_OPT_INJECT_FAULT},          \
    {"help", no_argument, NULL, KU_OPT_HELP}

/* Short forms of the common options, to put in a kernel's getopt optstring. */
#define KU_COMMON_SHORTOPTS "i:w:h"

#define KU_COMMON_USAGE                                                                  \
    "  -i, --iterations N   timed iterations (default: see below)\n"                      \
    "  -w, --warmup N       untimed warm-up iterations before the timed ones (default: see below)\n" \
    "      --strict         exit with status 3 when the result is not valid\n"           \
    "  -h, --help           print this help and exit\n"

/* Call first thing after MPI_Init: names the program in messages; silences getopt's
 * own error messages on ranks other than 0. */
void ku_init(int argc, char **argv);

typedef struct {
    int iterations;
    int warmup;
    int strict;
    int inject; /* --inject-fault */
} ku_common;

/* Handles the common option codes (and 'i', 'w', 'h'). Returns 1 when handled,
 * 0 when the code is not a common option. --help prints `usage` and exits. */
int ku_common_option(int code, const char *arg, ku_common *common, const char *usage);

/* Rank 0 prints "<prog>: <message>" and the usage to stderr; every rank exits(2). */
void ku_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse helpers: exit through ku_usage_error on bad input. */
int ku_parse_int(const char *opt, const char *arg, long min, long max, const char *usage);
/* "a,b,c" -> up to `max` ints >= min; returns how many were read. */
int ku_parse_int_list(const char *opt, const char *arg, int *out, int max, int min, const char *usage);

/* "a,b" of names from `names` (or "all") -> indices; returns how many were read. */
int ku_parse_name_list(const char *opt, const char *arg, const char *const *names, int nnames,
                       int *out, int max, const char *usage);

/* Terminates MPI and the process with `code`. */
void ku_exit(int code) __attribute__((noreturn));

/* The end of a run: exit status 3 under --strict when any rank's `valid` is 0, else 0
 * (collective on `comm`). */
void ku_finish(MPI_Comm comm, const ku_common *common, int valid) __attribute__((noreturn));

/* MPI_Abort with a message from any rank (for errors that cannot be agreed on). */
void ku_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Checked allocation (64-byte aligned, zeroed). */
void *ku_malloc(size_t bytes);

/* ---- message-size sweeps (pingpong, coll) ------------------------------- */

/* OSU's sweep knobs: sizes 0 and 2^lo..2^hi bytes; fewer iterations above `large_bytes`
 * (OSU's LARGE_MESSAGE_SIZE); an optional time budget per size that lowers the timed
 * iterations further from the warm-up's measured time per iteration. */
enum { KU_OPT_MSGLOG = 1100, KU_OPT_ITER_LARGE, KU_OPT_WARMUP_LARGE, KU_OPT_LARGE_SIZE, KU_OPT_BUDGET };

#define KU_SWEEP_LONGOPTS                                                   \
    {"msglog", required_argument, NULL, KU_OPT_MSGLOG},                     \
    {"iterations-large", required_argument, NULL, KU_OPT_ITER_LARGE},       \
    {"warmup-large", required_argument, NULL, KU_OPT_WARMUP_LARGE},         \
    {"large-size", required_argument, NULL, KU_OPT_LARGE_SIZE},             \
    {"time-budget-ms", required_argument, NULL, KU_OPT_BUDGET}

#define KU_SWEEP_USAGE                                                                           \
    "  -m, --msglog LO:HI        message sizes 0 and 2^LO..2^HI bytes (default: see below)\n"          \
    "      --iterations-large N  timed iterations for sizes > --large-size (default: see below)\n"     \
    "      --warmup-large N      warm-up iterations for sizes > --large-size (default: see below)\n"   \
    "      --large-size N        bytes above which the -large counts apply (default 8192, as OSU)\n"  \
    "      --time-budget-ms T    per size: lower the timed iterations to about T ms, estimated\n"     \
    "                            from the warm-up (never below 5; 0 = off, default)\n"

/* Fewest timed iterations the time budget may leave for one size. */
#define KU_MIN_ITERATIONS 5
#define KU_MAX_SIZES 64

typedef struct {
    int lo, hi;           /* log2 of the smallest and largest non-zero size */
    int iterations_large; /* timed iterations above large_bytes */
    int warmup_large;
    int large_bytes;
    int budget_ms; /* 0: no time budget */
} ku_sweep;

/* Handles the sweep option codes (and 'm'). Returns 1 when handled, else 0. */
int ku_sweep_option(int code, const char *arg, ku_sweep *sweep, const char *usage);

/* 0 then 2^lo..2^hi into `sizes` (at most KU_MAX_SIZES); returns how many. */
int ku_sweep_sizes(const ku_sweep *sweep, int *sizes);

/* Timed and warm-up iterations of one size (the -large counts above large_bytes). */
void ku_sweep_counts(const ku_sweep *sweep, const ku_common *common, int bytes, int *iterations, int *warmup);

/* The timed iterations after the time budget: `root` decides from its warm-up time per
 * iteration (us) and broadcasts, so every rank runs the same count (collective on comm). */
int ku_budget_iterations(MPI_Comm comm, int root, double warm_us_per_iteration, int iterations,
                         const ku_sweep *sweep);

/* Sweep header entries (msglog, iterations_large, warmup_large, large_size, time_budget_ms). */
void ku_header_sweep(const ku_sweep *sweep);

/* ---- the option loop ---------------------------------------------------- */

struct option;

/* The next of the kernel's own options (`shortopts`, `longopts` ending in a NULL name, or NULL
 * for none), for its switch: the common options (and, with a `sweep`, the sweep options) are
 * handled here; an unknown option, a missing argument or an argument left over after the
 * options exits through ku_usage_error. -1 when all are read. */
int ku_next_option(int argc, char **argv, const char *shortopts, const struct option *longopts,
                   ku_common *common, ku_sweep *sweep, const char *usage);

/* ---- header ------------------------------------------------------------ */

/* Starts the header of `kernel`; records argv and the MPI library. */
void ku_header_begin(const char *kernel, int argc, char **argv);
void ku_header_int(const char *key, long value);
void ku_header_str(const char *key, const char *value);
void ku_header_ints(const char *key, const int *values, int n); /* "a,b,c" */
/* The common options' entries: iterations, warmup. */
void ku_header_common(const ku_common *common);
/* Rank 0 prints the header, "inject_fault: 1" last under --inject-fault (collective: call on
 * every rank). */
void ku_header_print(MPI_Comm comm, const ku_common *common);

/* ---- timing ------------------------------------------------------------ */

typedef void (*ku_body_fn)(void *ctx, int iteration);

typedef struct {
    double mean_us; /* (t_end - t_start) / iterations, OSU style */
    double min_us;  /* fastest single iteration on this rank */
    double max_us;  /* slowest single iteration on this rank */
} ku_timing;

/* Runs `warmup` untimed then `iterations` timed calls of fn(ctx, i). MPI_Barrier on
 * `comm` before the warm-up and before the timed loop; no barrier inside the loop. */
ku_timing ku_timed_loop(MPI_Comm comm, int warmup, int iterations, ku_body_fn fn, void *ctx);

/* ---- JSON records ------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t len, cap;
    int first;
} ku_json;

/* Opens an object with "kernel", "rank", "size", "host", "cpu". */
void ku_json_begin(ku_json *j, const char *kernel, MPI_Comm comm);
void ku_json_int(ku_json *j, const char *key, long long value);
void ku_json_double(ku_json *j, const char *key, double value); /* %.17g; null if not finite */
void ku_json_bool(ku_json *j, const char *key, int value);
void ku_json_null(ku_json *j, const char *key);
void ku_json_str(ku_json *j, const char *key, const char *value);
void ku_json_ints(ku_json *j, const char *key, const int *values, int n);
void ku_json_doubles(ku_json *j, const char *key, const double *values, int n);
/* The cpus this rank may run on (sched_getaffinity), as a list: its binding. */
void ku_json_affinity(ku_json *j, const char *key);
/* Closes the object; rank 0 gathers every rank's line and prints them in rank order
 * (collective on `comm`). Frees the buffer. */
void ku_json_emit(ku_json *j, MPI_Comm comm);

#endif
