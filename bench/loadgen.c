/*
 * loadgen.c - ping-pong load generator for Varlink-style Unix sockets
 * (NUL-terminated JSON messages), used to benchmark tokend against a floor.
 *
 *   loadgen --socket PATH --connections C (--requests N | --duration S)
 *           --message-file F [options]
 *
 * Each connection is one thread doing strictly: send request (file content +
 * NUL) -> read until the reply's NUL -> next request.  Latency of every round
 * trip is taken with CLOCK_MONOTONIC and stored in one preallocated array
 * (threads claim blocks of slots from a shared atomic counter, so --requests
 * is an exact total across connections and no two threads write the same
 * cache line).  Every run is bounded: by --requests and/or --duration, by a
 * sample cap (--max-samples, default 10M), by a hard wall-clock cap
 * (--max-seconds, default 300) and by per-socket I/O timeouts.
 *
 * Each reply is checked: a reply with an "error" key (Varlink error) counts
 * as an error, not a success; --expect-substring S counts replies lacking S
 * as mismatches.  Percentiles are over all completed round trips.
 * Exit status: 0 all replies ok, 1 usage/setup failure, 2 some replies were
 * errors/mismatches or some requests failed at the transport level.
 *
 * Build: gcc -O2 -Wall -Wextra -pthread -o loadgen loadgen.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define EMPTY_SLOT UINT64_MAX
#define MAX_REPLY (64u << 20)

/* ------------------------------------------------------------- settings */
static const char *o_socket;
static long o_connections = 1;
static uint64_t o_requests;      /* 0 = not given */
static double o_duration;        /* 0 = not given */
static const char *o_message_file;
static int o_cpr;                /* connection per request */
static int o_json;
static const char *o_expect;
static size_t o_expect_len;
static uint64_t o_max_samples = 10000000;
static double o_max_seconds = 300;
static long o_warmup;            /* per connection, not recorded */
static long o_wait_ms;           /* retry first connect for this long */
static long o_io_timeout_ms = 10000;
static const char *o_label;
static int o_print_reply;
static int o_quiet;
/* How a message ends: a NUL (Varlink), or where its top-level JSON object closes (raw JSON
 * IPC such as oidc-agent's plain-JSON API, where the request carries no terminator). */
static int o_json_framing;

/* ---------------------------------------------------------------- state */
static char *g_msg; /* request + NUL */
static size_t g_msg_len;
static struct sockaddr_un g_addr;
static socklen_t g_addr_len;

static uint64_t *g_samples; /* ns per round trip, EMPTY_SLOT if unused */
static uint64_t g_cap;      /* slots in g_samples */
static uint64_t g_chunk;
static _Atomic uint64_t g_next; /* next unclaimed slot */
static atomic_int g_reply_printed;
static uint64_t g_deadline_ns; /* absolute CLOCK_MONOTONIC */
static pthread_barrier_t g_barrier;

struct worker {
    int id;
    pthread_t thread;
    int fd;
    char *buf;
    size_t buf_size, have;
    /* results */
    uint64_t round_trips, ok, errors, mismatches, io_failures, connects;
    uint64_t reply_bytes_total, reply_bytes_min, reply_bytes_max;
    int stopped_reason; /* see reason_names */
    char last_err[160];
};

enum { R_NONE, R_DONE, R_DEADLINE, R_SAMPLE_CAP, R_FAILURE, R_COUNT };
static const char *reason_names[] = {"none", "requests", "deadline", "sample_cap", "failure"};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen --socket PATH --connections C (--requests N | --duration S)\n"
            "               --message-file F [options]\n"
            "  --requests N            total round trips across all connections\n"
            "  --duration S            run for S seconds (with --requests: whichever first)\n"
            "  --connection-per-request  open/close a connection for every request\n"
            "  --expect-substring S    a reply lacking S is counted as a mismatch\n"
            "  --json                  also print one JSON object on stdout\n"
            "  --label L               label copied into the JSON\n"
            "  --warmup N              unrecorded requests per connection before timing\n"
            "  --max-samples N         cap on recorded round trips (default 10000000)\n"
            "  --max-seconds S         hard wall-clock cap on the timed part (default 300)\n"
            "  --io-timeout-ms M       per-socket send/receive timeout (default 10000)\n"
            "  --wait-ms M             retry the first connect for up to M ms (default 0)\n"
            "  --print-reply           print the first reply to stderr\n"
            "  --quiet                 no human-readable line\n"
            "  --framing nul|json      nul (default): NUL-terminated messages (Varlink);\n"
            "                          json: the request as is, a reply ends where its JSON object closes\n");
    exit(1);
}

/* ------------------------------------------------------------- socket io */

static void set_err(struct worker *w, const char *what) {
    snprintf(w->last_err, sizeof w->last_err, "%s: %s", what, strerror(errno));
}

static int open_conn(struct worker *w) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_err(w, "socket");
        return -1;
    }
    if (o_io_timeout_ms > 0) {
        struct timeval tv = {.tv_sec = o_io_timeout_ms / 1000, .tv_usec = (o_io_timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    for (;;) {
        if (connect(fd, (struct sockaddr *)&g_addr, g_addr_len) == 0) break;
        if (errno == EINTR) continue;
        set_err(w, "connect");
        close(fd);
        return -1;
    }
    w->connects++;
    w->have = 0;
    return fd;
}

static int send_all(struct worker *w, int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t s = send(fd, p, n, MSG_NOSIGNAL);
        if (s < 0) {
            if (errno == EINTR) continue;
            set_err(w, "send");
            return -1;
        }
        p += s;
        n -= (size_t)s;
    }
    return 0;
}

/* --framing json: the length of the complete top-level JSON object at the start of buf (strings
 * and their escapes skipped), or 0 when it is not complete yet. */
static size_t json_object_end(const char *buf, size_t n) {
    int depth = 0, in_string = 0, escaped = 0, started = 0;
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (in_string) {
            if (escaped) escaped = 0;
            else if (c == '\\') escaped = 1;
            else if (c == '"') in_string = 0;
        } else if (c == '"') in_string = 1;
        else if (c == '{' || c == '[') { depth++; started = 1; }
        else if (c == '}' || c == ']') {
            if (--depth == 0 && started) return i + 1;
        }
    }
    return 0;
}

/* Read until a NUL (or, --framing json, the reply's closing brace); returns the reply's length
 * without its terminator, reply at w->buf. */
static long read_reply(struct worker *w, int fd) {
    size_t scanned = 0;
    for (;;) {
        if (o_json_framing) {
            size_t end = w->have ? json_object_end(w->buf, w->have) : 0;
            if (end) return (long)end;
        } else {
            char *z = scanned < w->have ? memchr(w->buf + scanned, 0, w->have - scanned) : NULL;
            if (z) return (long)(z - w->buf);
        }
        scanned = w->have;
        if (w->have == w->buf_size) {
            if (w->buf_size >= MAX_REPLY) {
                snprintf(w->last_err, sizeof w->last_err, "reply larger than %u bytes", MAX_REPLY);
                return -1;
            }
            size_t ns = w->buf_size * 2;
            char *nb = realloc(w->buf, ns);
            if (!nb) {
                snprintf(w->last_err, sizeof w->last_err, "out of memory");
                return -1;
            }
            w->buf = nb;
            w->buf_size = ns;
        }
        ssize_t r = recv(fd, w->buf + w->have, w->buf_size - w->have, 0);
        if (r > 0) {
            w->have += (size_t)r;
            continue;
        }
        if (r == 0) {
            snprintf(w->last_err, sizeof w->last_err, "server closed the connection before a full reply");
            return -1;
        }
        if (errno == EINTR) continue;
        set_err(w, errno == EAGAIN || errno == EWOULDBLOCK ? "recv timeout" : "recv");
        return -1;
    }
}

/* Drop the consumed reply (len bytes + its NUL), keep anything after it. */
static void consume(struct worker *w, size_t len) {
    size_t used = len + (o_json_framing ? 0 : 1);
    if (w->have > used) memmove(w->buf, w->buf + used, w->have - used);
    w->have -= used;
}

/* Has the reply an "error" key, i.e. `"error"` followed by optional spaces and ':'? */
static int is_error_reply(const char *r, size_t n) {
    static const char key[] = "\"error\"";
    const size_t kl = sizeof key - 1;
    const char *p = r, *end = r + n;
    while (p < end && (p = memmem(p, (size_t)(end - p), key, kl)) != NULL) {
        const char *q = p + kl;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
        if (q < end && *q == ':') return 1;
        p += kl;
    }
    return 0;
}

static void check_reply(struct worker *w, size_t len) {
    const char *r = w->buf;
    w->round_trips++;
    uint64_t b = len + 1;
    w->reply_bytes_total += b;
    if (b < w->reply_bytes_min) w->reply_bytes_min = b;
    if (b > w->reply_bytes_max) w->reply_bytes_max = b;
    if (o_print_reply && atomic_exchange(&g_reply_printed, 1) == 0)
        fprintf(stderr, "reply (%zu bytes + NUL): %.*s\n", len, (int)(len < 4096 ? len : 4096), r);
    if (is_error_reply(r, len)) w->errors++;
    else if (o_expect && !memmem(r, len, o_expect, o_expect_len)) w->mismatches++;
    else w->ok++;
}

/* One round trip. Returns 0 ok, -1 transport failure. */
static int round_trip(struct worker *w) {
    if (o_cpr) {
        int fd = open_conn(w);
        if (fd < 0) return -1;
        int rc = -1;
        long len;
        if (send_all(w, fd, g_msg, g_msg_len) == 0 && (len = read_reply(w, fd)) >= 0) {
            check_reply(w, (size_t)len);
            consume(w, (size_t)len);
            rc = 0;
        }
        close(fd);
        return rc;
    }
    if (w->fd < 0) {
        w->fd = open_conn(w);
        if (w->fd < 0) return -1;
    }
    long len;
    if (send_all(w, w->fd, g_msg, g_msg_len) == 0 && (len = read_reply(w, w->fd)) >= 0) {
        check_reply(w, (size_t)len);
        consume(w, (size_t)len);
        return 0;
    }
    close(w->fd); /* reconnect on the next request */
    w->fd = -1;
    return -1;
}

/* ---------------------------------------------------------------- worker */

static void *worker_main(void *arg) {
    struct worker *w = arg;
    uint64_t slot = 0, slot_end = 0;
    int consecutive_failures = 0;

    /* setup (not timed): connect, with optional retry, then warm up */
    if (!o_cpr) {
        uint64_t give_up = now_ns() + (uint64_t)o_wait_ms * 1000000ull;
        for (;;) {
            w->fd = open_conn(w);
            if (w->fd >= 0 || now_ns() >= give_up) break;
            usleep(20000);
        }
    } else if (o_wait_ms > 0) { /* just wait until the socket accepts */
        uint64_t give_up = now_ns() + (uint64_t)o_wait_ms * 1000000ull;
        for (;;) {
            int fd = open_conn(w);
            if (fd >= 0) {
                close(fd);
                w->connects--;
                break;
            }
            if (now_ns() >= give_up) break;
            usleep(20000);
        }
    }
    if (o_cpr || w->fd >= 0) {
        for (long i = 0; i < o_warmup; i++) {
            if (round_trip(w) < 0) break;
        }
    }
    /* warm-up results are not reported */
    w->round_trips = w->ok = w->errors = w->mismatches = w->reply_bytes_total = 0;
    w->io_failures = 0;
    w->connects = 0;
    if (o_cpr || w->fd >= 0) w->last_err[0] = '\0'; /* forget connect retries */
    w->reply_bytes_min = UINT64_MAX;
    w->reply_bytes_max = 0;

    pthread_barrier_wait(&g_barrier); /* 1: everyone connected and warmed up */
    pthread_barrier_wait(&g_barrier); /* 2: main has set the clock: go */

    if (!o_cpr && w->fd < 0) { /* could not connect at all */
        w->io_failures++;
        w->stopped_reason = R_FAILURE;
        return NULL;
    }

    for (;;) {
        if (slot == slot_end) {
            uint64_t s = atomic_fetch_add(&g_next, g_chunk);
            if (s >= g_cap) {
                w->stopped_reason = (o_requests && g_cap == o_requests) ? R_DONE : R_SAMPLE_CAP;
                break;
            }
            slot = s;
            slot_end = s + g_chunk < g_cap ? s + g_chunk : g_cap;
        }
        uint64_t t0 = now_ns();
        int rc = round_trip(w);
        uint64_t t1 = now_ns();
        if (rc == 0) {
            g_samples[slot++] = t1 - t0;
            consecutive_failures = 0;
        } else {
            w->io_failures++;
            if (++consecutive_failures >= 3) { /* server gone: stop this connection */
                w->stopped_reason = R_FAILURE;
                break;
            }
        }
        if (t1 >= g_deadline_ns) {
            w->stopped_reason = R_DEADLINE;
            break;
        }
    }
    while (slot < slot_end) g_samples[slot++] = EMPTY_SLOT; /* unused part of our block */
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    return NULL;
}

/* ------------------------------------------------------------------ main */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* nearest-rank percentile on sorted data */
static double pct_us(const uint64_t *s, uint64_t n, double q) {
    if (n == 0) return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)n);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return (double)s[rank - 1] / 1000.0;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 2 > cap) b = realloc(b, cap *= 2);
        if (!b) return NULL;
        size_t r = fread(b + n, 1, cap - n - 1, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    *len = n;
    return b;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "loadgen: hard time cap exceeded while waiting for workers, giving up\n";
    if (write(2, m, sizeof m - 1) < 0) { /* nothing to do */
    }
    _exit(3);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--socket")) o_socket = v;
        else if (ARG("--connections")) o_connections = strtol(v, NULL, 10);
        else if (ARG("--requests")) o_requests = strtoull(v, NULL, 10);
        else if (ARG("--duration")) o_duration = strtod(v, NULL);
        else if (ARG("--message-file")) o_message_file = v;
        else if (!strcmp(a, "--connection-per-request")) o_cpr = 1;
        else if (!strcmp(a, "--json")) o_json = 1;
        else if (ARG("--expect-substring")) o_expect = v;
        else if (ARG("--max-samples")) o_max_samples = strtoull(v, NULL, 10);
        else if (ARG("--max-seconds")) o_max_seconds = strtod(v, NULL);
        else if (ARG("--warmup")) o_warmup = strtol(v, NULL, 10);
        else if (ARG("--wait-ms")) o_wait_ms = strtol(v, NULL, 10);
        else if (ARG("--io-timeout-ms")) o_io_timeout_ms = strtol(v, NULL, 10);
        else if (ARG("--label")) o_label = v;
        else if (!strcmp(a, "--print-reply")) o_print_reply = 1;
        else if (!strcmp(a, "--quiet")) o_quiet = 1;
        else if (ARG("--framing")) {
            if (!strcmp(v, "json")) o_json_framing = 1;
            else if (strcmp(v, "nul")) {
                fprintf(stderr, "loadgen: --framing must be nul or json, got %s\n", v);
                usage();
            }
        }
        else {
            fprintf(stderr, "loadgen: unknown or incomplete argument: %s\n", a);
            usage();
        }
#undef ARG
    }
    if (!o_socket || !o_message_file || o_connections < 1 || o_connections > 10000 ||
        (!o_requests && o_duration <= 0) || o_max_samples < 1 || o_max_seconds <= 0 || o_warmup < 0 ||
        o_wait_ms < 0 || o_io_timeout_ms < 0)
        usage();
    if (o_expect) o_expect_len = strlen(o_expect);

    /* request message: file content, trailing whitespace stripped, plus NUL */
    size_t flen;
    char *m = read_file(o_message_file, &flen);
    if (!m) {
        fprintf(stderr, "loadgen: cannot read %s: %s\n", o_message_file, strerror(errno));
        return 1;
    }
    while (flen > 0 && (m[flen - 1] == '\n' || m[flen - 1] == '\r' || m[flen - 1] == ' ' || m[flen - 1] == '\t'))
        flen--;
    if (flen == 0 || memchr(m, 0, flen)) {
        fprintf(stderr, "loadgen: message file is empty or contains a NUL byte\n");
        return 1;
    }
    m[flen] = '\0';
    g_msg = m;
    g_msg_len = o_json_framing ? flen : flen + 1;

    g_addr.sun_family = AF_UNIX;
    if (strlen(o_socket) >= sizeof g_addr.sun_path) {
        fprintf(stderr, "loadgen: socket path too long\n");
        return 1;
    }
    strcpy(g_addr.sun_path, o_socket);
    g_addr_len = (socklen_t)sizeof g_addr;

    /* bounds */
    if (o_duration <= 0 || o_duration > o_max_seconds) {
        if (o_duration > o_max_seconds)
            fprintf(stderr, "loadgen: --duration capped to --max-seconds %.0f\n", o_max_seconds);
        o_duration = o_max_seconds;
    }
    g_cap = o_requests ? o_requests : o_max_samples;
    if (g_cap > o_max_samples) {
        fprintf(stderr, "loadgen: --requests %llu capped to --max-samples %llu\n", (unsigned long long)o_requests,
                (unsigned long long)o_max_samples);
        g_cap = o_max_samples;
    }
    g_chunk = g_cap / ((uint64_t)o_connections * 16);
    if (g_chunk < 1) g_chunk = 1;
    if (g_chunk > 256) g_chunk = 256;
    g_samples = malloc(g_cap * sizeof *g_samples);
    if (!g_samples) {
        fprintf(stderr, "loadgen: cannot allocate %llu samples\n", (unsigned long long)g_cap);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    int nc = (int)o_connections;
    struct worker *ws = calloc((size_t)nc, sizeof *ws);
    if (!ws) return 1;
    pthread_barrier_init(&g_barrier, NULL, (unsigned)nc + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < nc; i++) {
        ws[i].id = i;
        ws[i].fd = -1;
        ws[i].buf_size = 65536;
        ws[i].buf = malloc(ws[i].buf_size);
        ws[i].reply_bytes_min = UINT64_MAX;
        if (!ws[i].buf || pthread_create(&ws[i].thread, &attr, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "loadgen: cannot start thread %d\n", i);
            return 1;
        }
    }
    /* wait until all workers are connected and warmed up, then start the clock */
    pthread_barrier_wait(&g_barrier);
    uint64_t start = now_ns();
    g_deadline_ns = start + (uint64_t)(o_duration * 1e9);
    pthread_barrier_wait(&g_barrier); /* publishes g_deadline_ns and releases the workers */

    /* last resort: if workers are stuck past the cap + I/O timeout, exit */
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(o_duration + (double)o_io_timeout_ms / 1000.0 * 2 + 30));
    for (int i = 0; i < nc; i++) pthread_join(ws[i].thread, NULL);
    alarm(0);
    uint64_t end = now_ns();
    double seconds = (double)(end - start) / 1e9;

    /* aggregate */
    uint64_t rt = 0, ok = 0, errs = 0, mism = 0, fails = 0, conns = 0, rbytes = 0, rmin = UINT64_MAX, rmax = 0;
    int reasons[R_COUNT] = {0};
    const char *some_err = NULL;
    for (int i = 0; i < nc; i++) {
        rt += ws[i].round_trips;
        ok += ws[i].ok;
        errs += ws[i].errors;
        mism += ws[i].mismatches;
        fails += ws[i].io_failures;
        conns += ws[i].connects;
        rbytes += ws[i].reply_bytes_total;
        if (ws[i].reply_bytes_min < rmin) rmin = ws[i].reply_bytes_min;
        if (ws[i].reply_bytes_max > rmax) rmax = ws[i].reply_bytes_max;
        reasons[ws[i].stopped_reason]++;
        if (ws[i].last_err[0] && !some_err) some_err = ws[i].last_err;
    }
    if (rmin == UINT64_MAX) rmin = 0;
    /* The first block claimed after the deadline may leave trailing slots that
       no worker wrote; anything at or past g_next was never claimed. */
    uint64_t claimed = atomic_load(&g_next);
    if (claimed > g_cap) claimed = g_cap;
    uint64_t n = 0;
    for (uint64_t i = 0; i < claimed; i++)
        if (g_samples[i] != EMPTY_SLOT) g_samples[n++] = g_samples[i];
    if (n != rt) fprintf(stderr, "loadgen: internal: %llu samples vs %llu round trips\n",
                         (unsigned long long)n, (unsigned long long)rt);
    qsort(g_samples, n, sizeof *g_samples, cmp_u64);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) sum += (double)g_samples[i];
    double mean_us = n ? sum / (double)n / 1000.0 : 0;
    double p50 = pct_us(g_samples, n, 0.50), p90 = pct_us(g_samples, n, 0.90), p99 = pct_us(g_samples, n, 0.99),
           p999 = pct_us(g_samples, n, 0.999);
    double min_us = n ? (double)g_samples[0] / 1000.0 : 0, max_us = n ? (double)g_samples[n - 1] / 1000.0 : 0;
    double rps = seconds > 0 ? (double)rt / seconds : 0;
    double ok_ps = seconds > 0 ? (double)ok / seconds : 0;
    /* stop reason: the most common among workers */
    int best = 0;
    for (int r = 1; r < R_COUNT; r++)
        if (reasons[r] > reasons[best]) best = r;

    if (!o_quiet) {
        fprintf(stderr,
                "loadgen%s%s: %s conns=%d requests=%llu ok=%llu errors=%llu mismatches=%llu io_failures=%llu "
                "in %.3f s = %.0f req/s | latency us p50=%.1f p99=%.1f p99.9=%.1f max=%.1f mean=%.1f "
                "| reply %llu B | stop=%s\n",
                o_label ? " " : "", o_label ? o_label : "", o_cpr ? "conn-per-request" : "persistent", nc,
                (unsigned long long)rt, (unsigned long long)ok, (unsigned long long)errs,
                (unsigned long long)mism, (unsigned long long)fails, seconds, rps, p50, p99, p999, max_us, mean_us,
                (unsigned long long)(rt ? rbytes / rt : 0), reason_names[best]);
        if (errs || mism || fails)
            fprintf(stderr, "loadgen: WARNING: %llu error replies, %llu mismatches, %llu transport failures%s%s\n",
                    (unsigned long long)errs, (unsigned long long)mism, (unsigned long long)fails,
                    some_err ? " - last: " : "", some_err ? some_err : "");
    }
    if (o_json) {
        printf("{");
        if (o_label) {
            printf("\"label\":");
            json_string(stdout, o_label);
            printf(",");
        }
        printf("\"mode\":\"%s\",\"connections\":%d,\"requests\":%llu,\"ok\":%llu,\"errors\":%llu,"
               "\"mismatches\":%llu,\"io_failures\":%llu,\"connects\":%llu,\"seconds\":%.6f,"
               "\"requests_per_sec\":%.1f,\"ok_per_sec\":%.1f,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,"
               "\"p999_us\":%.2f,\"max_us\":%.2f,\"min_us\":%.2f,\"mean_us\":%.2f,"
               "\"request_bytes\":%zu,\"reply_bytes\":%llu,\"reply_bytes_min\":%llu,\"reply_bytes_max\":%llu,"
               "\"stop_reason\":\"%s\"",
               o_cpr ? "connection-per-request" : "persistent", nc, (unsigned long long)rt,
               (unsigned long long)ok, (unsigned long long)errs, (unsigned long long)mism,
               (unsigned long long)fails, (unsigned long long)conns, seconds, rps, ok_ps, p50, p90, p99, p999,
               max_us, min_us, mean_us, g_msg_len, (unsigned long long)(rt ? rbytes / rt : 0),
               (unsigned long long)rmin, (unsigned long long)rmax, reason_names[best]);
        if (some_err) {
            printf(",\"last_error\":");
            json_string(stdout, some_err);
        }
        printf("}\n");
    }
    if (rt == 0) return 2;
    return (errs || mism || fails) ? 2 : 0;
}
