/*
 * oidc_loadgen.c - connection-per-request load generator for oidc-agent.
 *
 *   oidc_loadgen --account NAME --clients C (--requests N | --duration S) [options]
 *
 * oidc-agent 4.x encrypts its IPC between liboidc-agent and the agent (an X25519 key exchange
 * on every connection, then libsodium boxes; see `strace oidc-token`), so this drives the agent
 * through the real client library: every request is one getAgentTokenResponse() call, which
 * opens a connection to $OIDC_SOCK, does the key exchange, sends the encrypted access_token
 * request, reads the reply and closes - exactly what `oidc-token ACCOUNT` does per call.
 *
 * The library keeps error state in globals, so concurrency is C worker *processes* (fork), not
 * threads; latencies go into one shared (mmap) array, slots claimed with an atomic counter, as
 * in bench/loadgen.c. Bounded by --requests, --duration, a hard --max-seconds cap (SIGALRM in
 * every process) and the sample array's size. Output: the same flat JSON keys as loadgen
 * (requests, ok, errors, requests_per_sec, p50_us, p90_us, p99_us, p999_us, ...).
 *
 * Build: gcc -O2 -Wall -Wextra -o oidc_loadgen oidc_loadgen.c -loidc-agent -lm
 * Exit: 0 all replies were tokens, 1 usage/setup failure, 2 some replies were errors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <oidc-agent/api.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EMPTY_SLOT UINT64_MAX
#define MAX_CLIENTS 1024

struct shared {
    _Atomic uint64_t next;     /* next unclaimed sample slot */
    _Atomic uint64_t ok, errors, mismatches;
    _Atomic int ready;
    uint64_t deadline_ns;      /* written before `go` is released */
    char last_err[200];
};

static struct shared *g;
static uint64_t *g_samples;
static uint64_t g_cap;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *s, uint64_t n, double p) {
    if (!n) return 0;
    uint64_t i = (uint64_t)ceil(p * (double)n);
    if (i == 0) i = 1;
    if (i > n) i = n;
    return (double)s[i - 1] / 1000.0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: oidc_loadgen --account NAME --clients C (--requests N | --duration S)\n"
            "  --warmup N          unrecorded calls per client before timing (default 20)\n"
            "  --max-seconds S     hard cap on the whole run (default 120)\n"
            "  --expect-substring S  a token lacking S counts as a mismatch\n"
            "  --label L           copied into the JSON\n"
            "  --print-reply       print the first token to stderr\n"
            "  (the agent's socket comes from $OIDC_SOCK)\n");
    exit(1);
}

static const char *o_account, *o_label, *o_expect;
static long o_clients = 1, o_warmup = 20;
static uint64_t o_requests;
static double o_duration, o_max_seconds = 120;
static int o_print;

/* one call; returns 0 token, 1 error reply */
static int one_call(int record_err) {
    struct agent_response r = getAgentTokenResponse(o_account, 0, NULL, "oidc_loadgen", NULL);
    int rc = 0;
    if (r.type == AGENT_RESPONSE_TYPE_TOKEN && r.token_response.token && r.token_response.token[0]) {
        if (o_expect && !strstr(r.token_response.token, o_expect)) rc = 2;
        if (o_print) {
            o_print = 0;
            fprintf(stderr, "token: %s (issuer %s)\n", r.token_response.token,
                    r.token_response.issuer ? r.token_response.issuer : "?");
        }
    } else {
        rc = 1;
        if (record_err && !g->last_err[0]) {
            const char *e = r.type == AGENT_RESPONSE_TYPE_ERROR && r.error_response.error ? r.error_response.error
                                                                                           : oidcagent_serror();
            snprintf(g->last_err, sizeof g->last_err, "%s", e ? e : "unknown error");
        }
    }
    secFreeAgentResponse(r);
    return rc;
}

static void child(int go_fd, long index) {
    if (index > 0) o_print = 0; /* one client prints */
    signal(SIGALRM, SIG_DFL);
    alarm((unsigned)(o_max_seconds + 5));
    for (long i = 0; i < o_warmup; i++) one_call(0);
    atomic_fetch_add(&g->ready, 1);
    char c;
    while (read(go_fd, &c, 1) < 0 && errno == EINTR) {} /* EOF = go */
    uint64_t deadline = g->deadline_ns;
    for (;;) {
        uint64_t slot = atomic_fetch_add(&g->next, 1);
        if (slot >= g_cap) break;
        uint64_t t0 = now_ns();
        int rc = one_call(1);
        uint64_t t1 = now_ns();
        g_samples[slot] = t1 - t0;
        if (rc == 0) atomic_fetch_add(&g->ok, 1);
        else if (rc == 1) atomic_fetch_add(&g->errors, 1);
        else atomic_fetch_add(&g->mismatches, 1);
        if (t1 >= deadline) break;
    }
    _exit(0);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static pid_t g_pids[MAX_CLIENTS];
static long g_started;
static void on_alarm(int sig) {
    (void)sig;
    for (long i = 0; i < g_started; i++) kill(g_pids[i], SIGKILL);
    static const char m[] = "oidc_loadgen: hard time cap reached, killed the clients\n";
    if (write(2, m, sizeof m - 1)) {}
    _exit(1);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print-reply")) { o_print = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--account")) o_account = v;
        else if (!strcmp(a, "--clients")) o_clients = atol(v);
        else if (!strcmp(a, "--requests")) o_requests = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--duration")) o_duration = atof(v);
        else if (!strcmp(a, "--warmup")) o_warmup = atol(v);
        else if (!strcmp(a, "--max-seconds")) o_max_seconds = atof(v);
        else if (!strcmp(a, "--expect-substring")) o_expect = v;
        else if (!strcmp(a, "--label")) o_label = v;
        else usage();
        i++;
    }
    if (!o_account || o_clients < 1 || o_clients > MAX_CLIENTS || (!o_requests && o_duration <= 0)) usage();
    if (!getenv("OIDC_SOCK")) { fprintf(stderr, "oidc_loadgen: OIDC_SOCK is not set\n"); return 1; }
    if (o_duration <= 0 || o_duration > o_max_seconds) o_duration = o_max_seconds;
    g_cap = o_requests ? o_requests : 2000000;

    g = mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_samples = mmap(NULL, g_cap * sizeof *g_samples, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED || g_samples == MAP_FAILED) { perror("mmap"); return 1; }
    memset(g_samples, 0xff, g_cap * sizeof *g_samples);

    int go[2];
    if (pipe(go) < 0) { perror("pipe"); return 1; }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(o_max_seconds + 15));
    for (long i = 0; i < o_clients; i++) {
        pid_t p = fork();
        if (p < 0) { perror("fork"); on_alarm(0); }
        if (p == 0) { close(go[1]); child(go[0], i); }
        g_pids[g_started++] = p;
    }
    close(go[0]);
    while (atomic_load(&g->ready) < o_clients) {
        int st;
        if (waitpid(-1, &st, WNOHANG) > 0) { fprintf(stderr, "oidc_loadgen: a client died during warm-up\n"); on_alarm(0); }
        usleep(1000);
    }
    uint64_t start = now_ns();
    g->deadline_ns = start + (uint64_t)(o_duration * 1e9);
    atomic_thread_fence(memory_order_seq_cst);
    close(go[1]); /* go */
    for (long i = 0; i < g_started; i++) waitpid(g_pids[i], NULL, 0);
    alarm(0);
    double seconds = (double)(now_ns() - start) / 1e9;

    uint64_t claimed = atomic_load(&g->next), n = 0;
    if (claimed > g_cap) claimed = g_cap;
    for (uint64_t i = 0; i < claimed; i++)
        if (g_samples[i] != EMPTY_SLOT) g_samples[n++] = g_samples[i];
    qsort(g_samples, n, sizeof *g_samples, cmp_u64);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) sum += (double)g_samples[i];
    uint64_t ok = g->ok, errs = g->errors, mism = g->mismatches;
    double rps = seconds > 0 ? (double)n / seconds : 0;
    printf("{");
    if (o_label) { printf("\"label\":"); json_str(o_label); printf(","); }
    printf("\"mode\":\"connection-per-request\",\"client\":\"liboidc-agent getAgentTokenResponse\",\"connections\":%ld,"
           "\"requests\":%llu,\"ok\":%llu,\"errors\":%llu,\"mismatches\":%llu,\"io_failures\":0,\"seconds\":%.6f,"
           "\"requests_per_sec\":%.1f,\"ok_per_sec\":%.1f,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,"
           "\"p999_us\":%.2f,\"max_us\":%.2f,\"min_us\":%.2f,\"mean_us\":%.2f",
           o_clients, (unsigned long long)n, (unsigned long long)ok, (unsigned long long)errs,
           (unsigned long long)mism, seconds, rps, seconds > 0 ? (double)ok / seconds : 0,
           pct_us(g_samples, n, 0.5), pct_us(g_samples, n, 0.9), pct_us(g_samples, n, 0.99),
           pct_us(g_samples, n, 0.999), n ? (double)g_samples[n - 1] / 1000 : 0, n ? (double)g_samples[0] / 1000 : 0,
           n ? sum / (double)n / 1000 : 0);
    if (g->last_err[0]) { printf(",\"last_error\":"); json_str(g->last_err); }
    printf("}\n");
    if (n == 0) return 2;
    return (errs || mism) ? 2 : 0;
}
