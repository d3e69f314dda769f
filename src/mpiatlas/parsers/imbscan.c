/* imbscan: the happy path of the IMB state machine in C, for `mpiatlas import` of many files.
 *
 * The reference is the plain-Python executor (parsers/imb_lines.py with the shapes of
 * parsers/imb_shapes.py). This scanner reads each file itself and either returns its rows, or
 * BAILS: the file is then read and parsed by the Python executor, which gives every error its
 * wording. It bails on anything outside the strict subset it implements: a byte outside
 * 0x20-0x7E and '\n' (so Python's str.strip()/split()/isdigit()/splitlines() and regex \s, \d, \b
 * mean plain ASCII here), a file holding "OSU" (that routing stays in Python), a line holding
 * "invalid benchmark name", any state-machine or row error, a token shape whose number it cannot
 * prove equal to Python's int()/float(), a banner-like line not in the strict form, no row at all.
 *
 * Loaded by ctypes (parsers/imb_scan.py; no Python.h): imbscan_files() returns a result the
 * caller frees with imbscan_free(). Thread-safe: no global state, the C locale is its own.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>

#define MAX_COLUMNS 32
#define MAX_TOKEN 64 /* longer number tokens bail (IMB prints at most 13 characters) */

/* Row fields (imb_shapes.HEADER_TOKENS); F_DROP: read as a float and dropped. */
enum { F_GROUP, F_BYTES, F_REPS, F_T, F_TMIN, F_TMAX, F_TAVG, F_TPURE, F_MBYTES, F_MSG, F_DROP, N_FIELDS };
static const struct { const char *token; int field; } HEADER_TOKENS[] = {
    {"Group", F_GROUP}, {"#bytes", F_BYTES}, {"#repetitions", F_REPS}, {"t[usec]", F_T},
    {"t_min[usec]", F_TMIN}, {"t_max[usec]", F_TMAX}, {"t_avg[usec]", F_TAVG}, {"Mbytes/sec", F_MBYTES},
    {"Msg/sec", F_MSG}, {"t_pure[usec]", F_TPURE}, {"t_ovrl[usec]", F_DROP}, {"t_CPU[usec]", F_DROP},
    {"overlap[%]", F_DROP}, {"defects", F_DROP},
};
#define IS_INT_FIELD(f) ((f) <= F_REPS)
/* Row status codes: 0 "ok", then imb_shapes.SPECIAL's words in this order. */
static const char *const SPECIAL[] = {"time-out.", "out-of-mem.", "int-overflow."};
static const double MIB_TO_MB = 1048576.0 / 1000000.0; /* correctly rounded, as Python's 1_048_576 / 1_000_000 */

/* -- the result (mirrored by ctypes Structures in imb_scan.py; imbscan_layout() checks the sizes) -- */
typedef struct {
    int32_t file, run, processes, benchmark, mode, version, rows; /* strings are ids; mode -1: null */
    int32_t reserved;
} imbscan_block;

typedef struct {
    /* the rows, one array per column */
    int64_t *bytes, *repetitions;                                     /* -1: null */
    double *t_usec, *t_min, *t_max, *t_avg, *bandwidth, *msg_per_sec; /* NaN: null (no digit token is NaN) */
    int32_t *file, *block, *line, *group, *status;                    /* group -1: null; status: 0 "ok", SPECIAL */
    int64_t n_rows, cap_rows;
    imbscan_block *blocks;
    int64_t n_blocks, cap_blocks;
    char *chars; /* the interned strings, back to back */
    int64_t n_chars, cap_chars;
    int64_t *offsets; /* string i is chars[offsets[i] : offsets[i + 1]] */
    int64_t n_strings, cap_strings;
    int8_t *bailed; /* per file: 1 = left to the Python executor */
    int64_t n_files;
    int32_t *hash; /* open addressing over string ids, -1 empty */
    int64_t cap_hash;
    int32_t out_of_memory; /* 1: the result is incomplete, take every file as bailed */
    int32_t reserved;
} imbscan_result;

void imbscan_layout(int64_t *sizes) {
    sizes[0] = sizeof(imbscan_block);
    sizes[1] = sizeof(imbscan_result);
}

/* -- growth and string interning ---------------------------------------------------------------- */
static int grow(void **buf, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return 0;
    int64_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need) cap2 *= 2;
    void *p = realloc(*buf, (size_t)cap2 * item);
    if (!p) return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

/* Room for one more row in every column array. */
static int grow_rows(imbscan_result *r) {
    if (r->n_rows < r->cap_rows) return 0;
    int64_t cap = r->cap_rows ? 2 * r->cap_rows : 4096;
    void *p;
#define GROW(column) if (!(p = realloc(r->column, (size_t)cap * sizeof *r->column))) return -1; r->column = p;
    GROW(bytes) GROW(repetitions) GROW(t_usec) GROW(t_min) GROW(t_max) GROW(t_avg) GROW(bandwidth)
    GROW(msg_per_sec) GROW(file) GROW(block) GROW(line) GROW(group) GROW(status)
#undef GROW
    r->cap_rows = cap;
    return 0;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static int rehash(imbscan_result *r, int64_t cap) {
    int32_t *h = malloc((size_t)cap * sizeof *h);
    if (!h) return -1;
    memset(h, 0xff, (size_t)cap * sizeof *h);
    for (int64_t id = 0; id < r->n_strings; id++) {
        const char *s = r->chars + r->offsets[id];
        uint64_t i = fnv1a(s, (size_t)(r->offsets[id + 1] - r->offsets[id])) & (uint64_t)(cap - 1);
        while (h[i] >= 0) i = (i + 1) & (uint64_t)(cap - 1);
        h[i] = (int32_t)id;
    }
    free(r->hash);
    r->hash = h;
    r->cap_hash = cap;
    return 0;
}

/* The id of the string s[0:n] (added if new); -1 when out of memory. */
static int32_t intern(imbscan_result *r, const char *s, size_t n) {
    if (2 * (r->n_strings + 1) > r->cap_hash && rehash(r, r->cap_hash ? 2 * r->cap_hash : 256)) return -1;
    uint64_t mask = (uint64_t)(r->cap_hash - 1), i = fnv1a(s, n) & mask;
    for (; r->hash[i] >= 0; i = (i + 1) & mask) {
        int32_t id = r->hash[i];
        int64_t len = r->offsets[id + 1] - r->offsets[id];
        if ((size_t)len == n && memcmp(r->chars + r->offsets[id], s, n) == 0) return id;
    }
    if (r->n_strings >= INT32_MAX - 1 || grow((void **)&r->chars, &r->cap_chars, r->n_chars + (int64_t)n, 1) ||
        grow((void **)&r->offsets, &r->cap_strings, r->n_strings + 2, sizeof *r->offsets))
        return -1;
    if (r->n_strings == 0) r->offsets[0] = 0;
    memcpy(r->chars + r->n_chars, s, n);
    r->n_chars += (int64_t)n;
    int32_t id = (int32_t)r->n_strings++;
    r->offsets[id + 1] = r->n_chars;
    r->hash[i] = id;
    return id;
}

/* -- small matchers on a stripped line [p, end) ------------------------------------------------- */
enum { OK = 0, BAIL = 1, NOMEM = -1, HANDLED = 2 }; /* HANDLED: a global line, nothing more to do */
enum { LETTERS = 1, K = 2 };                        /* what a line may hold: printable() */

static const char *skip_spaces(const char *p, const char *end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (uint64_t x; end - p >= 8; p += 8) { /* IMB right-aligns its columns: runs of ~10 spaces */
        memcpy(&x, p, 8);
        if ((x ^= 0x2020202020202020ULL) != 0) return p + (__builtin_ctzll(x) >> 3);
    }
#endif
    while (p < end && *p == ' ') p++;
    return p;
}

static int starts(const char *p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* "benchmark" in any ASCII case: one pass for the rare 'k', then the 8 bytes before it. */
static int has_benchmark(const char *p, const char *end) {
    for (; end - p >= 9; p++) {
        if ((p[8] | 0x20) != 'k') continue;
        int k = 0;
        while (k < 8 && (p[k] | 0x20) == "benchmar"[k]) k++;
        if (k == 8) return 1;
    }
    return 0;
}

/* The ASCII case-insensitive search for IMB's "Invalid benchmark name" (imb_shapes.INVALID). */
static int has_invalid_name(const char *p, const char *end) {
    static const char lit[] = "invalid benchmark name";
    const size_t n = sizeof lit - 1;
    for (; (size_t)(end - p) >= n; p++) {
        if ((*p | 0x20) != 'i') continue;
        size_t k = 1;
        while (k < n && (p[k] >= 'A' && p[k] <= 'Z' ? p[k] | 0x20 : p[k]) == lit[k]) k++;
        if (k == n) return 1;
    }
    return 0;
}

/* Digits as a process count: 1 and *value if at most INT32_MAX, else 0 (the line is then no
 * count line for Python, which this scanner does not follow: the caller bails). */
static int count_value(const char *p, const char *end, int32_t *value) {
    int64_t v = 0;
    for (; p < end; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX) return 0;
    }
    *value = (int32_t)v;
    return 1;
}

/* The digits after a match, or NULL if none: [*d0, return). */
static const char *digits(const char *p, const char *end) {
    const char *q = p;
    while (q < end && is_digit(*q)) q++;
    return q > p ? q : NULL;
}

/* After p: \s+ then the literal: the position after it, or NULL. */
static const char *spaces_then(const char *p, const char *end, const char *lit) {
    const char *q = skip_spaces(p, end);
    return q > p && starts(q, end, lit) ? q + strlen(lit) : NULL;
}

/* imb_shapes.GROUPS, a search: "(" \s* \d+ \s+ "groups" \s+ "of" \s+ (\d+) \s+ "processes". Each
 * step is a maximal run of a class disjoint from the next, so the first try at each '(' decides. */
static int match_groups(const char *l, const char *end, const char **d0, const char **d1) {
    for (const char *p = l; (p = memchr(p, '(', (size_t)(end - p))) != NULL; p++) {
        const char *q = digits(skip_spaces(p + 1, end), end), *n0, *n1;
        if (!q || !(q = spaces_then(q, end, "groups")) || !(q = spaces_then(q, end, "of"))) continue;
        if ((n0 = skip_spaces(q, end)) == q || !(n1 = digits(n0, end)) || !spaces_then(n1, end, "processes")) continue;
        *d0 = n0;
        *d1 = n1;
        return 1;
    }
    return 0;
}

/* imb_shapes.PROCESSES, a search: "#processes" \s* "=" \s* (\d+). */
static int match_processes(const char *l, const char *end, const char **d0, const char **d1) {
    for (const char *p = l; (p = memmem(p, (size_t)(end - p), "#processes", 10)) != NULL; p++) {
        const char *q = skip_spaces(p + 10, end), *e;
        if (q == end || *q != '=') continue;
        q = skip_spaces(q + 1, end);
        if ((e = digits(q, end)) != NULL) {
            *d0 = q;
            *d1 = e;
            return 1;
        }
    }
    return 0;
}

/* "^#\s*<lit>" on a stripped line: the position after lit, or NULL. */
static const char *hash_prefix(const char *l, const char *end, const char *lit) {
    if (l == end || *l != '#') return NULL;
    const char *p = skip_spaces(l + 1, end);
    return starts(p, end, lit) ? p + strlen(lit) : NULL;
}

/* "\s*(\S+)" after a prefix (MODE) or "\s+(\S+)" (Benchmarking): the token, or 0. */
static int token_after(const char *p, const char *end, int need_space, const char **t0, const char **t1) {
    const char *q = skip_spaces(p, end);
    if ((need_space && q == p) || q == end) return 0;
    *t0 = q;
    while (q < end && *q != ' ') q++;
    *t1 = q;
    return 1;
}

/* -- numbers ------------------------------------------------------------------------------------ */
static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* Python's float() of the token at p (up to a space or end): [0-9]+ | [0-9]+.[0-9]* | .[0-9]+,
 * other shapes BAIL (NULL); else the token's end. glibc's strtod and Python are both correctly
 * rounded; the fast path is Clinger's: at most 15 digits are an exact integer m < 2^53 and 10^k
 * (k <= 15) an exact double, so m / 10^k is one correctly rounded IEEE division (where doubles
 * are evaluated as doubles, FLT_EVAL_METHOD 0). */
static const char *read_float(const char *p, const char *end, locale_t c_locale, double *out) {
    const char *t = p;
    int64_t m = 0;
    int ndigits = 0, frac = -1;
    for (; p < end && *p != ' '; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d < 10) {
            m = ndigits < 18 ? m * 10 + d : m;
            ndigits++;
            frac += frac >= 0;
        } else if (*p == '.' && frac < 0) {
            frac = 0;
        } else {
            return NULL;
        }
    }
    if (ndigits == 0 || p - t >= MAX_TOKEN) return NULL;
#if FLT_EVAL_METHOD == 0
    if (ndigits <= 15) {
        *out = (double)m / POW10[frac < 0 ? 0 : frac];
        return p;
    }
#endif
    char buf[MAX_TOKEN], *stop;
    memcpy(buf, t, (size_t)(p - t));
    buf[p - t] = '\0';
    *out = strtod_l(buf, &stop, c_locale);
    return *stop == '\0' ? p : NULL;
}

/* Python's int() of the token at p: [0-9]{1,18} (always within Int64; Group must fit Int32), else NULL. */
static const char *read_int(const char *p, const char *end, int field, int64_t *out) {
    const char *t = p;
    int64_t v = 0;
    for (; p < end && *p != ' '; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d >= 10 || p - t == 18) return NULL;
        v = v * 10 + d;
    }
    if (p == t || (field == F_GROUP && v > INT32_MAX)) return NULL;
    *out = v;
    return p;
}

/* -- the state machine (imb_lines._Parser) ----------------------------------------------------- */
enum { OUTSIDE, RUN, BLOCK, TABLE };

typedef struct {
    imbscan_result *r;
    locale_t c_locale;
    int32_t file, run, version, block, processes, mode;
    int state, mebibytes, ncols;
    int8_t columns[MAX_COLUMNS];
} scan;

/* imb_shapes.BANNER: a search for Intel\s?\(R\)\s+MPI\s+Benchmarks\s+([^,]+?)\s*(?:,|$). Taken
 * only in the strict form from the line's first "Intel": then no earlier match can exist, and
 * with a version V not starting at ',' the lazy group is V up to the first ',' or the end, less
 * its trailing spaces. HANDLED: a banner (its version in s), OK: none possible, BAIL or NOMEM. */
static int banner(scan *s, const char *l, const char *end) {
    const char *p = memmem(l, (size_t)(end - l), "Intel", 5), *q;
    if (!p) return OK; /* the regex needs "Intel" */
    p += 5;
    if (p < end && *p == ' ') p++;
    if (!starts(p, end, "(R)")) return BAIL;
    if (!(p = spaces_then(p + 3, end, "MPI")) || !(p = spaces_then(p, end, "Benchmarks"))) return BAIL;
    if ((q = skip_spaces(p, end)) == p || q == end || *q == ',') return BAIL;
    const char *v_end = memchr(q, ',', (size_t)(end - q));
    if (!v_end) v_end = end;
    while (v_end[-1] == ' ') v_end--; /* q is no space: stops there at the latest */
    int32_t id = intern(s->r, q, (size_t)(v_end - q));
    if (id < 0) return NOMEM;
    /* imb_shapes.uses_mebibytes: the leading digits as an int < 2018. */
    int64_t major = 0;
    const char *d = q;
    for (; d < v_end && is_digit(*d); d++) major = major < 100000 ? major * 10 + (*d - '0') : major;
    s->mebibytes = d > q && major < 2018;
    s->version = id;
    return HANDLED;
}

/* Lines meaningful in any state: banner, invalid name, '# Benchmarking', finalize: HANDLED, OK (none
 * of them), BAIL or NOMEM. */
static int global_line(scan *s, const char *l, const char *end, int maybe_k) {
    if (maybe_k && has_benchmark(l, end)) { /* the banner and the invalid name both hold it */
        if (memmem(l, (size_t)(end - l), "Benchmarks", 10)) {
            int b = banner(s, l, end);
            if (b == HANDLED) {
                s->run++;
                s->block = -1;
                s->state = RUN;
            }
            if (b != OK) return b;
        }
        if (has_invalid_name(l, end)) return BAIL;
    }
    const char *p, *t0, *t1;
    if ((p = hash_prefix(l, end, "Benchmarking")) && token_after(p, end, 1, &t0, &t1)) {
        if (s->state == OUTSIDE) return BAIL;
        imbscan_result *r = s->r;
        int32_t name = intern(r, t0, (size_t)(t1 - t0));
        if (name < 0 || r->n_blocks >= INT32_MAX ||
            grow((void **)&r->blocks, &r->cap_blocks, r->n_blocks + 1, sizeof *r->blocks))
            return NOMEM;
        imbscan_block *b = &r->blocks[r->n_blocks];
        *b = (imbscan_block){s->file, s->run, -1, name, -1, s->version, 0, 0};
        s->block = (int32_t)r->n_blocks++;
        s->processes = -1;
        s->mode = -1;
        s->state = BLOCK;
        return HANDLED;
    }
    if (hash_prefix(l, end, "All processes entering MPI_Finalize")) {
        s->state = OUTSIDE;
        return HANDLED;
    }
    return OK;
}

/* The column header: every token known, a process count before it. */
static int header(scan *s, const char *l, const char *end) {
    s->ncols = 0;
    for (const char *p = skip_spaces(l, end); p < end; p = skip_spaces(p, end)) {
        const char *t = p;
        while (p < end && *p != ' ') p++;
        size_t n = (size_t)(p - t), k = 0, known = sizeof HEADER_TOKENS / sizeof *HEADER_TOKENS;
        while (k < known && !(strlen(HEADER_TOKENS[k].token) == n && memcmp(HEADER_TOKENS[k].token, t, n) == 0)) k++;
        if (k == known || s->ncols == MAX_COLUMNS) return BAIL;
        s->columns[s->ncols++] = (int8_t)HEADER_TOKENS[k].field;
    }
    if (s->processes < 0) return BAIL;
    s->r->blocks[s->block].processes = s->processes;
    s->r->blocks[s->block].mode = s->mode;
    s->state = TABLE;
    return OK;
}

static int block_line(scan *s, const char *l, const char *end) {
    const char *d0, *d1, *p, *t0, *t1;
    if (memmem(l, (size_t)(end - l), "groups", 6) && match_groups(l, end, &d0, &d1))
        return count_value(d0, d1, &s->processes) ? OK : BAIL;
    if (memmem(l, (size_t)(end - l), "#processes", 10) && match_processes(l, end, &d0, &d1))
        return count_value(d0, d1, &s->processes) ? OK : BAIL;
    if ((p = hash_prefix(l, end, "MODE:")) && token_after(p, end, 0, &t0, &t1)) {
        int32_t id = intern(s->r, t0, (size_t)(t1 - t0));
        if (id < 0) return NOMEM;
        s->mode = id;
        return OK;
    }
    for (p = l; (p = memmem(p, (size_t)(end - p), "#repetitions", 12)) != NULL; p++)
        if ((p == l || p[-1] == ' ') && (p + 12 == end || p[12] == ' ')) return header(s, l, end);
    return is_digit(*l) ? BAIL : OK; /* a row before the column header */
}

/* imb_shapes.parse_row on a stripped table row, then imb_lines._Parser._row. */
static int row(scan *s, const char *l, const char *end, int32_t lineno, int letters) {
    int status = 0;
    if (letters) { /* SPECIAL = \b(time-out|out-of-mem|int-overflow)\. , leftmost */
        for (const char *p = l; p < end && !status; p++) {
            if (p > l && is_word(p[-1])) continue;
            for (int k = 0; k < 3; k++) {
                if (starts(p, end, SPECIAL[k])) {
                    status = k + 1;
                    end = p;
                    break;
                }
            }
        }
    }
    int64_t ints[N_FIELDS];
    double floats[N_FIELDS];
    unsigned present = 0;
    int ntok = 0;
    for (const char *p = skip_spaces(l, end); p < end; p = skip_spaces(p, end), ntok++) {
        if (ntok == s->ncols) return BAIL; /* more tokens than columns */
        int f = s->columns[ntok];
        p = IS_INT_FIELD(f) ? read_int(p, end, f, &ints[f]) : read_float(p, end, s->c_locale, &floats[f]);
        if (!p) return BAIL;
        present |= 1u << f; /* a repeated column: the last value wins, as in the dict */
    }
    if (status ? ntok == 0 : ntok != s->ncols) return BAIL;

    imbscan_result *r = s->r;
    if (grow_rows(r)) return NOMEM;
    int64_t i = r->n_rows++;
#define F(f) ((present >> (f)) & 1u)
    r->bytes[i] = F(F_BYTES) ? ints[F_BYTES] : -1;
    r->repetitions[i] = F(F_REPS) ? ints[F_REPS] : -1;
    r->t_usec[i] = F(F_T) ? floats[F_T] : F(F_TAVG) ? floats[F_TAVG] : F(F_TPURE) ? floats[F_TPURE] : NAN;
    r->t_min[i] = F(F_TMIN) ? floats[F_TMIN] : NAN;
    r->t_max[i] = F(F_TMAX) ? floats[F_TMAX] : NAN;
    r->t_avg[i] = F(F_TAVG) ? floats[F_TAVG] : NAN;
    r->bandwidth[i] = F(F_MBYTES) ? (s->mebibytes ? floats[F_MBYTES] * MIB_TO_MB : floats[F_MBYTES]) : NAN;
    r->msg_per_sec[i] = F(F_MSG) ? floats[F_MSG] : NAN;
    r->file[i] = s->file;
    r->block[i] = s->block;
    r->line[i] = lineno;
    r->group[i] = F(F_GROUP) ? (int32_t)ints[F_GROUP] : -1;
    r->status[i] = status;
#undef F
    r->blocks[s->block].rows++;
    return OK;
}

/* One stripped line; flags: printable()'s. */
static int line(scan *s, const char *l, const char *end, int32_t lineno, int flags) {
    int letters = flags & LETTERS;
    if (letters) {
        int g = global_line(s, l, end, flags & K);
        if (g != OK) return g == HANDLED ? OK : g;
    }
    if (l == end) return OK;
    switch (s->state) {
    case BLOCK:
        return letters ? block_line(s, l, end) : is_digit(*l) ? BAIL : OK;
    case TABLE:
        if (*l == '#') s->state = RUN; /* the '#---' rule of the next block */
        else if (is_digit(*l)) return row(s, l, end, lineno, letters);
        return OK; /* blank (-multi) or foreign ("[0] MPI startup(): ...") */
    case RUN:
        return is_digit(*l) ? BAIL : OK; /* a row outside a table */
    default:
        return OK;
    }
}

/* Every byte of [p, end) in 0x20-0x7E (no tab, \r, other control or non-ASCII byte); *flags:
 * LETTERS if a byte is >= 0x40 (every pattern needs a letter), K if maybe a 'k' or 'K' ("benchmark").
 * Eight bytes at a time: with no byte >= 0x80, (x - 0x20..) & ~x has a byte's high bit set iff
 * some byte is < 0x20; likewise (y - 0x01..) & ~y finds a zero byte of y = x ^ 0x7f.. (a 0x7f). */
static int printable(const char *p, const char *end, int *flags) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x80 * ones;
    uint64_t bits = 0, bad = 0, k = 0, x, y;
    for (const char *w = p; end - p >= 8; w += 8) {
        if (w > end - 8) w = end - 8; /* the last word overlaps the one before: no byte-wise tail */
        memcpy(&x, w, 8);
        bits |= x;
        y = x ^ (0x7f * ones);
        bad |= ((x - 0x20 * ones) & ~x) | ((y - ones) & ~y);
        y = (x | 0x20 * ones) ^ (0x6b * ones);
        k |= (y - ones) & ~y;
        if (w == end - 8) p = end;
    }
    bad = (bad | bits) & high;
    for (; p < end; p++) { /* lines shorter than a word */
        unsigned c = (unsigned char)*p;
        bits |= c;
        bad |= c - 0x20u >= 0x5fu;
        k |= (c | 0x20) == 'k' ? high : 0;
    }
    *flags = ((bits & 0x40 * ones) ? LETTERS : 0) | ((k & high) ? K : 0);
    return bad == 0;
}

/* "OSU" anywhere (the OSU-vs-IMB routing stays in Python): memchr for the rare 'U' is vectorised,
 * unlike memmem for a 3-byte needle (a tenth of the scan when it was). */
static int has_osu(const char *p, const char *end) {
    if (end - p < 3) return 0;
    for (const char *u = p + 2; u < end && (u = memchr(u, 'U', (size_t)(end - u))) != NULL; u++)
        if (u[-2] == 'O' && u[-1] == 'S') return 1;
    return 0;
}

/* One file's text: OK (rows appended), BAIL or NOMEM (the caller rolls back). */
static int scan_text(scan *s, const char *buf, size_t len) {
    if (len == 0 || has_osu(buf, buf + len)) return BAIL;
    const char *p = buf, *end = buf + len;
    for (int64_t lineno = 1; p < end; lineno++) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) q = end;
        int flags;
        if (!printable(p, q, &flags) || lineno > INT32_MAX) return BAIL;
        const char *l = skip_spaces(p, q), *e = q;
        while (e > l && e[-1] == ' ') e--;
        int rc = line(s, l, e, (int32_t)lineno, flags);
        if (rc) return rc;
        p = q + 1;
    }
    return OK;
}

/* The whole file into *buf (kept and grown across files: no fstat, no allocation per file); 0, or
 * -1 on any open/read error (Python reads the file again and reports it). */
static int read_file(const char *path, char **buf, size_t *cap, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    int rc = 0;
    for (;;) {
        if (n == *cap) {
            char *b = realloc(*buf, *cap ? 2 * *cap : 1 << 16);
            if (!b) { rc = -1; break; }
            *buf = b;
            *cap = *cap ? 2 * *cap : 1 << 16;
        }
        ssize_t got = read(fd, *buf + n, *cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) { rc = got < 0 ? -1 : 0; break; }
        n += (size_t)got;
    }
    close(fd);
    *len = n;
    return rc;
}

/* Scan n_files files named in `paths` (each NUL-terminated, back to back). */
imbscan_result *imbscan_files(const char *paths, int64_t n_files) {
    imbscan_result *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->n_files = n_files;
    r->bailed = calloc(n_files > 0 ? (size_t)n_files : 1, 1);
    scan s = {.r = r, .c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0)};
    if (!r->bailed || s.c_locale == (locale_t)0) r->out_of_memory = 1;
    char *buf = NULL;
    size_t cap = 0, len;
    for (int64_t i = 0; i < n_files && !r->out_of_memory; i++, paths += strlen(paths) + 1) {
        int64_t rows0 = r->n_rows, blocks0 = r->n_blocks;
        s.file = (int32_t)i;
        s.run = s.version = s.block = s.processes = s.mode = -1;
        s.state = OUTSIDE;
        s.mebibytes = s.ncols = 0;
        int rc = read_file(paths, &buf, &cap, &len) ? BAIL : scan_text(&s, buf, len);
        if (rc == OK && r->n_rows == rows0) rc = BAIL; /* no rows: the end-of-file error */
        if (rc == NOMEM) r->out_of_memory = 1;
        if (rc != OK) {
            r->bailed[i] = 1;
            r->n_rows = rows0;
            r->n_blocks = blocks0;
        }
    }
    free(buf);
    if (s.c_locale != (locale_t)0) freelocale(s.c_locale);
    return r;
}

void imbscan_free(imbscan_result *r) {
    if (!r) return;
    void *columns[] = {r->bytes, r->repetitions, r->t_usec, r->t_min, r->t_max, r->t_avg, r->bandwidth,
                       r->msg_per_sec, r->file, r->block, r->line, r->group, r->status};
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++) free(columns[i]);
    free(r->blocks);
    free(r->chars);
    free(r->offsets);
    free(r->bailed);
    free(r->hash);
    free(r);
}
