/* util.c - shared helpers of the mpiatlas MPI kernels; see util.h. */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *prog_name = "kernel";

static int world_rank(void)
{
    int rank = 0, initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

/* ---- options ----------------------------------------------------------- */

void ku_init(int argc, char **argv)
{
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        prog_name = slash ? slash + 1 : argv[0];
    }
    if (world_rank() != 0)
        opterr = 0;
}

void ku_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    exit(code);
}

void ku_finish(MPI_Comm comm, const ku_common *common, int valid)
{
    int all_valid = 0;
    MPI_Allreduce(&valid, &all_valid, 1, MPI_INT, MPI_LAND, comm);
    ku_exit(common->strict && !all_valid ? 3 : 0);
}

void ku_die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: rank %d: ", prog_name, world_rank());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* not reached */
}

void ku_usage_error(const char *usage, const char *fmt, ...)
{
    if (world_rank() == 0) {
        va_list ap;
        fprintf(stderr, "%s: ", prog_name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n\n%s", usage);
    }
    ku_exit(2);
}

int ku_common_option(int code, const char *arg, ku_common *common, const char *usage)
{
    switch (code) {
    case 'i':
    case KU_OPT_ITERATIONS:
        common->iterations = ku_parse_int("--iterations", arg, 1, 1000000000L, usage);
        return 1;
    case 'w':
    case KU_OPT_WARMUP:
        common->warmup = ku_parse_int("--warmup", arg, 0, 1000000000L, usage);
        return 1;
    case KU_OPT_STRICT:
        common->strict = 1;
        return 1;
    case KU_OPT_INJECT_FAULT:
        common->inject = 1;
        return 1;
    case 'h':
    case KU_OPT_HELP:
        if (world_rank() == 0)
            fputs(usage, stdout);
        ku_exit(0);
    default:
        return 0;
    }
}

int ku_parse_int(const char *opt, const char *arg, long min, long max, const char *usage)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end != '\0')
        ku_usage_error(usage, "%s: '%s' is not an integer", opt, arg);
    if (v < min || v > max)
        ku_usage_error(usage, "%s: %ld is out of range [%ld, %ld]", opt, v, min, max);
    return (int)v;
}

int ku_parse_int_list(const char *opt, const char *arg, int *out, int max, int min, const char *usage)
{
    int n = 0;
    const char *p = arg;
    while (1) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p)
            ku_usage_error(usage, "%s: '%s' is not a comma-separated list of integers", opt, arg);
        if (n == max)
            ku_usage_error(usage, "%s: '%s' has more than %d values", opt, arg, max);
        if (v < min || v > 1000000000L)
            ku_usage_error(usage, "%s: %ld is out of range (minimum %d)", opt, v, min);
        out[n++] = (int)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            ku_usage_error(usage, "%s: '%s' is not a comma-separated list of integers", opt, arg);
        p = end + 1;
    }
    return n;
}

int ku_parse_name_list(const char *opt, const char *arg, const char *const *names, int nnames,
                       int *out, int max, const char *usage)
{
    if (strcmp(arg, "all") == 0) {
        if (nnames > max)
            ku_usage_error(usage, "%s: too many values", opt);
        for (int i = 0; i < nnames; i++)
            out[i] = i;
        return nnames;
    }
    int n = 0;
    const char *p = arg;
    while (1) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0)
                found = i;
        if (found < 0 || n == max) {
            char choices[256] = "";
            for (int i = 0; i < nnames; i++) {
                strncat(choices, names[i], sizeof choices - strlen(choices) - 1);
                strncat(choices, i + 1 < nnames ? ", " : "", sizeof choices - strlen(choices) - 1);
            }
            ku_usage_error(usage, "%s: '%s' is not a list of %s (or all)", opt, arg, choices);
        }
        out[n++] = found;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    return n;
}

void *ku_malloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 64;
    if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64) != 0 || p == NULL)
        ku_die("cannot allocate %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

/* ---- message-size sweeps ----------------------------------------------- */

int ku_sweep_option(int code, const char *arg, ku_sweep *sweep, const char *usage)
{
    switch (code) {
    case 'm':
    case KU_OPT_MSGLOG: {
        int range[2];
        /* "LO:HI" (IMB's -msglog form); "LO,HI" is accepted too */
        char text[64];
        snprintf(text, sizeof text, "%s", arg);
        char *colon = strchr(text, ':');
        if (colon)
            *colon = ',';
        if (ku_parse_int_list("--msglog", text, range, 2, 0, usage) != 2)
            ku_usage_error(usage, "--msglog: '%s' is not LO:HI", arg);
        if (range[0] > range[1] || range[1] > 30)
            ku_usage_error(usage, "--msglog: '%s' needs 0 <= LO <= HI <= 30", arg);
        sweep->lo = range[0];
        sweep->hi = range[1];
        return 1;
    }
    case KU_OPT_ITER_LARGE:
        sweep->iterations_large = ku_parse_int("--iterations-large", arg, 1, 1000000000L, usage);
        return 1;
    case KU_OPT_WARMUP_LARGE:
        sweep->warmup_large = ku_parse_int("--warmup-large", arg, 0, 1000000000L, usage);
        return 1;
    case KU_OPT_LARGE_SIZE:
        sweep->large_bytes = ku_parse_int("--large-size", arg, 0, 1 << 30, usage);
        return 1;
    case KU_OPT_BUDGET:
        sweep->budget_ms = ku_parse_int("--time-budget-ms", arg, 0, 3600000L, usage);
        return 1;
    default:
        return 0;
    }
}

int ku_sweep_sizes(const ku_sweep *sweep, int *sizes)
{
    int n = 0;
    sizes[n++] = 0;
    for (int e = sweep->lo; e <= sweep->hi && n < KU_MAX_SIZES; e++)
        sizes[n++] = 1 << e;
    return n;
}

void ku_sweep_counts(const ku_sweep *sweep, const ku_common *common, int bytes, int *iterations, int *warmup)
{
    int large = bytes > sweep->large_bytes;
    *iterations = large ? sweep->iterations_large : common->iterations;
    *warmup = large ? sweep->warmup_large : common->warmup;
}

int ku_budget_iterations(MPI_Comm comm, int root, double warm_us_per_iteration, int iterations,
                         const ku_sweep *sweep)
{
    int n = iterations, rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == root && sweep->budget_ms > 0 && warm_us_per_iteration > 0.0) {
        double fit = sweep->budget_ms * 1000.0 / warm_us_per_iteration;
        int floor_n = iterations < KU_MIN_ITERATIONS ? iterations : KU_MIN_ITERATIONS;
        if (fit < n)
            n = fit > floor_n ? (int)fit : floor_n;
    }
    /* every rank must run the root's count, or the timed loops would not match up */
    MPI_Bcast(&n, 1, MPI_INT, root, comm);
    return n;
}

void ku_header_sweep(const ku_sweep *sweep)
{
    char text[32];
    snprintf(text, sizeof text, "%d:%d", sweep->lo, sweep->hi);
    ku_header_str("msglog", text);
    ku_header_int("iterations_large", sweep->iterations_large);
    ku_header_int("warmup_large", sweep->warmup_large);
    ku_header_int("large_size", sweep->large_bytes);
    ku_header_int("time_budget_ms", sweep->budget_ms);
    ku_header_int("min_iterations", KU_MIN_ITERATIONS);
}

/* ---- the option loop ---------------------------------------------------- */

static const struct option common_longopts[] = {KU_COMMON_LONGOPTS};
static const struct option sweep_longopts[] = {KU_SWEEP_LONGOPTS};
#define N_OPTS(table) (sizeof table / sizeof *table)

/* own + common (+ sweep) + the terminator, built on the first call (one parse per process). */
static const struct option *merged_longopts(const struct option *own, int with_sweep)
{
    static struct option *merged = NULL;
    if (merged)
        return merged;
    size_t n = 0;
    while (own && own[n].name)
        n++;
    merged = ku_malloc((n + N_OPTS(common_longopts) + N_OPTS(sweep_longopts) + 1) * sizeof *merged);
    if (n)
        memcpy(merged, own, n * sizeof *merged);
    memcpy(merged + n, common_longopts, sizeof common_longopts);
    n += N_OPTS(common_longopts);
    if (with_sweep) {
        memcpy(merged + n, sweep_longopts, sizeof sweep_longopts);
        n += N_OPTS(sweep_longopts);
    }
    memset(merged + n, 0, sizeof *merged); /* the terminator */
    return merged;
}

int ku_next_option(int argc, char **argv, const char *shortopts, const struct option *longopts,
                   ku_common *common, ku_sweep *sweep, const char *usage)
{
    char opts[128];
    snprintf(opts, sizeof opts, "%s%s%s", shortopts, sweep ? "m:" : "", KU_COMMON_SHORTOPTS);
    const struct option *all = merged_longopts(longopts, sweep != NULL);
    for (;;) {
        int c = getopt_long(argc, argv, opts, all, NULL);
        if (c == -1) {
            if (optind < argc)
                ku_usage_error(usage, "unexpected argument '%s'", argv[optind]);
            return -1;
        }
        if (ku_common_option(c, optarg, common, usage) || (sweep && ku_sweep_option(c, optarg, sweep, usage)))
            continue;
        if (c == '?' || c == ':')
            ku_usage_error(usage, "invalid option or missing argument");
        return c;
    }
}

/* ---- header ------------------------------------------------------------ */

#define KU_MAX_HEADER 64
#define KU_HEADER_VALUE 4096

static struct {
    char key[48];
    char value[KU_HEADER_VALUE];
} header[KU_MAX_HEADER];
static int header_n = 0;

void ku_header_str(const char *key, const char *value)
{
    if (header_n == KU_MAX_HEADER)
        ku_die("too many header entries");
    snprintf(header[header_n].key, sizeof header[header_n].key, "%s", key);
    /* one line per entry: control characters become spaces */
    char *dst = header[header_n].value;
    size_t i = 0;
    for (; value[i] && i < KU_HEADER_VALUE - 1; i++)
        dst[i] = (value[i] == '\n' || value[i] == '\r' || value[i] == '\t') ? ' ' : value[i];
    dst[i] = '\0';
    header_n++;
}

void ku_header_int(const char *key, long value)
{
    char text[32];
    snprintf(text, sizeof text, "%ld", value);
    ku_header_str(key, text);
}

void ku_header_ints(const char *key, const int *values, int n)
{
    char text[256];
    size_t len = 0;
    text[0] = '\0';
    for (int i = 0; i < n && len < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, i ? ",%d" : "%d", values[i]);
    ku_header_str(key, text);
}

/* MPI_Get_library_version text on one line: lines trimmed and joined with "; ". */
static void library_version(char *out, size_t cap)
{
    char raw[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    MPI_Get_library_version(raw, &len);
    raw[len < 0 ? 0 : (len > MPI_MAX_LIBRARY_VERSION_STRING ? MPI_MAX_LIBRARY_VERSION_STRING : len)] = '\0';
    size_t o = 0;
    char *save = NULL;
    out[0] = '\0';
    for (char *line = strtok_r(raw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t' || *line == '\r')
            line++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (!n)
            continue;
        if (o + n + 3 >= cap)
            break;
        if (o) {
            memcpy(out + o, "; ", 2);
            o += 2;
        }
        memcpy(out + o, line, n);
        o += n;
        out[o] = '\0';
    }
}

void ku_header_begin(const char *kernel, int argc, char **argv)
{
    ku_init(argc, argv);
    header_n = 0;

    ku_header_str("kernel", kernel);
    ku_header_int("format_version", KU_FORMAT_VERSION);

    char text[KU_HEADER_VALUE];
    size_t len = 0;
    text[0] = '\0';
    for (int i = 0; i < argc && len < sizeof text - 1; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, i ? " %s" : "%s", i ? argv[i] : prog_name);
    ku_header_str("command", text);

    library_version(text, sizeof text);
    ku_header_str("mpi_library", text);
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    snprintf(text, sizeof text, "%d.%d", major, minor);
    ku_header_str("mpi_version", text);

    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    ku_header_str("date", text);

    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ku_header_int("nprocs", size);
}

void ku_header_common(const ku_common *common)
{
    ku_header_int("iterations", common->iterations);
    ku_header_int("warmup", common->warmup);
}

void ku_header_print(MPI_Comm comm, const ku_common *common)
{
    if (common->inject)
        ku_header_int("inject_fault", 1);
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        printf("# mpiatlas %s kernel (OSU-style; JSON lines follow, one per rank)\n", header[0].value);
        for (int i = 0; i < header_n; i++)
            printf("# %s: %s\n", header[i].key, header[i].value);
        fflush(stdout);
    }
}

/* ---- timing ------------------------------------------------------------ */

ku_timing ku_timed_loop(MPI_Comm comm, int warmup, int iterations, ku_body_fn fn, void *ctx)
{
    ku_timing t = {0.0, INFINITY, 0.0};
    MPI_Barrier(comm);
    for (int i = 0; i < warmup; i++)
        fn(ctx, i);
    MPI_Barrier(comm);
    double start = MPI_Wtime(), prev = start;
    for (int i = 0; i < iterations; i++) {
        fn(ctx, i);
        double now = MPI_Wtime();
        double us = (now - prev) * 1e6;
        if (us < t.min_us)
            t.min_us = us;
        if (us > t.max_us)
            t.max_us = us;
        prev = now;
    }
    t.mean_us = iterations > 0 ? (prev - start) * 1e6 / iterations : 0.0;
    if (iterations == 0)
        t.min_us = 0.0;
    return t;
}

/* ---- JSON records ------------------------------------------------------ */

static void json_reserve(ku_json *j, size_t extra)
{
    if (j->len + extra + 1 <= j->cap)
        return;
    size_t cap = j->cap ? j->cap : 1024;
    while (cap < j->len + extra + 1)
        cap *= 2;
    char *buf = realloc(j->buf, cap);
    if (!buf)
        ku_die("out of memory building a JSON record");
    j->buf = buf;
    j->cap = cap;
}

static void json_raw(ku_json *j, const char *text)
{
    size_t n = strlen(text);
    json_reserve(j, n);
    memcpy(j->buf + j->len, text, n + 1);
    j->len += n;
}

static void json_string(ku_json *j, const char *s)
{
    char esc[8];
    json_raw(j, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            esc[2] = '\0';
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
        } else {
            esc[0] = (char)*p;
            esc[1] = '\0';
        }
        json_raw(j, esc);
    }
    json_raw(j, "\"");
}

static void json_key(ku_json *j, const char *key)
{
    if (!j->first)
        json_raw(j, ", ");
    j->first = 0;
    json_string(j, key);
    json_raw(j, ": ");
}

static void json_number(ku_json *j, double v)
{
    char text[40];
    if (isfinite(v)) {
        snprintf(text, sizeof text, "%.17g", v);
        if (!strpbrk(text, ".eE")) /* keep it a JSON float: 0 -> 0.0 */
            strncat(text, ".0", sizeof text - strlen(text) - 1);
    } else
        snprintf(text, sizeof text, "null");
    json_raw(j, text);
}

void ku_json_begin(ku_json *j, const char *kernel, MPI_Comm comm)
{
    int rank, size, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME + 1];
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Get_processor_name(host, &len);
    host[len] = '\0';
    j->buf = NULL;
    j->len = j->cap = 0;
    j->first = 1;
    json_raw(j, "{");
    ku_json_str(j, "kernel", kernel);
    ku_json_int(j, "rank", rank);
    ku_json_int(j, "size", size);
    ku_json_str(j, "host", host);
    ku_json_int(j, "cpu", sched_getcpu());
}

void ku_json_int(ku_json *j, const char *key, long long value)
{
    char text[32];
    json_key(j, key);
    snprintf(text, sizeof text, "%lld", value);
    json_raw(j, text);
}

void ku_json_double(ku_json *j, const char *key, double value)
{
    json_key(j, key);
    json_number(j, value);
}

void ku_json_bool(ku_json *j, const char *key, int value)
{
    json_key(j, key);
    json_raw(j, value ? "true" : "false");
}

void ku_json_null(ku_json *j, const char *key)
{
    json_key(j, key);
    json_raw(j, "null");
}

void ku_json_str(ku_json *j, const char *key, const char *value)
{
    json_key(j, key);
    json_string(j, value);
}

void ku_json_ints(ku_json *j, const char *key, const int *values, int n)
{
    char text[32];
    json_key(j, key);
    json_raw(j, "[");
    for (int i = 0; i < n; i++) {
        snprintf(text, sizeof text, i ? ", %d" : "%d", values[i]);
        json_raw(j, text);
    }
    json_raw(j, "]");
}

void ku_json_doubles(ku_json *j, const char *key, const double *values, int n)
{
    json_key(j, key);
    json_raw(j, "[");
    for (int i = 0; i < n; i++) {
        if (i)
            json_raw(j, ", ");
        json_number(j, values[i]);
    }
    json_raw(j, "]");
}

void ku_json_affinity(ku_json *j, const char *key)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    json_key(j, key);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        json_raw(j, "null");
        return;
    }
    char text[16];
    int first = 1;
    json_raw(j, "[");
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        snprintf(text, sizeof text, first ? "%d" : ", %d", cpu);
        json_raw(j, text);
        first = 0;
    }
    json_raw(j, "]");
}

void ku_json_emit(ku_json *j, MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    json_raw(j, "}");

    int len = (int)j->len;
    int *lens = NULL, *displs = NULL;
    char *all = NULL;
    if (rank == 0) {
        lens = ku_malloc(sizeof(int) * (size_t)size);
        displs = ku_malloc(sizeof(int) * (size_t)size);
    }
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, comm);
    if (rank == 0) {
        long total = 0;
        for (int r = 0; r < size; r++) {
            displs[r] = (int)total;
            total += lens[r];
        }
        if (total > 2000000000L)
            ku_die("records too large to gather");
        all = ku_malloc((size_t)total + 1);
    }
    MPI_Gatherv(j->buf, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, comm);
    if (rank == 0) {
        for (int r = 0; r < size; r++) {
            fwrite(all + displs[r], 1, (size_t)lens[r], stdout);
            fputc('\n', stdout);
        }
        fflush(stdout);
        free(all);
        free(lens);
        free(displs);
    }
    free(j->buf);
    j->buf = NULL;
    j->len = j->cap = 0;
}
