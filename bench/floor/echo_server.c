/*
 * echo_server.c - the "floor" for tokend's socket benchmark.
 *
 * A Unix-socket server that speaks the framing of Varlink (NUL-terminated
 * messages) without doing any work: for every complete NUL-terminated request
 * it receives, it writes back one fixed, pre-built reply of exactly
 * --reply-bytes bytes (a padded JSON object followed by the NUL, the NUL is
 * counted).  So the floor moves the same number of bytes per round trip as
 * the real daemon, and the difference tokend - floor is what the daemon's own
 * work costs.
 *
 * It never looks at the request content, it only counts NUL bytes, so
 * pipelined requests (several in one read) and requests split across reads
 * are handled without buffering anything: a partial message simply has not
 * produced its NUL yet.
 *
 * Two serving models (--mode):
 *   thread  one blocking thread per connection (default).  On a 2-vCPU box
 *           this gives the best ping-pong latency and throughput for 1..64
 *           persistent connections: a blocked read() wakes exactly the one
 *           thread that has data, with no epoll_wait() round trip.
 *   epoll   --threads T workers (default: number of online CPUs), each with
 *           its own epoll set, level-triggered, non-blocking sockets; the
 *           listening socket is shared with EPOLLEXCLUSIVE.  No thread is
 *           created per connection, so it is cheaper for connection-per-
 *           request traffic.
 * See bench/README.md for the measurements behind the default.
 *
 * The socket appears atomically: it is bound and listening under a temporary
 * name and then renamed to PATH, so a client that sees PATH can connect.
 *
 * Build: gcc -O2 -Wall -Wextra -pthread -o echo_server echo_server.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_BUF 65536
#define BATCH_REPLIES 64 /* replies pre-concatenated for one write() */

static char *g_path;
static char *g_batch;      /* BATCH_REPLIES copies of the reply */
static size_t g_reply_len; /* bytes per reply, NUL included */
static size_t g_batch_len;
static int g_quiet;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void on_signal(int sig) {
    (void)sig;
    if (g_path) unlink(g_path); /* async-signal-safe */
    _exit(0);
}

/* Build a JSON object of exactly n bytes followed by a NUL (n+1 total). */
static void build_reply(char *out, size_t n) {
    static const char head[] = "{\"parameters\":{\"pad\":\"";
    static const char tail[] = "\"}}";
    size_t hl = sizeof head - 1, tl = sizeof tail - 1;
    if (n >= hl + tl) {
        memcpy(out, head, hl);
        memset(out + hl, 'x', n - hl - tl);
        memcpy(out + n - tl, tail, tl);
    } else { /* tiny: "{   }" is still a JSON object */
        out[0] = '{';
        memset(out + 1, ' ', n - 2);
        out[n - 1] = '}';
    }
    out[n] = '\0';
}

static size_t count_nuls(const char *p, size_t n) {
    size_t c = 0;
    const char *end = p + n;
    while (p < end && (p = memchr(p, 0, (size_t)(end - p))) != NULL) {
        c++;
        p++;
    }
    return c;
}

/* ---------------------------------------------------------------- thread */

static int write_replies_blocking(int fd, size_t count) {
    while (count > 0) {
        size_t k = count < BATCH_REPLIES ? count : BATCH_REPLIES;
        size_t len = k * g_reply_len, off = 0;
        while (off < len) {
            ssize_t w = send(fd, g_batch + off, len - off, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            off += (size_t)w;
        }
        count -= k;
    }
    return 0;
}

static void *conn_thread(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[READ_BUF];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            break; /* ECONNRESET etc. */
        }
        if (n == 0) break; /* clean disconnect */
        size_t c = count_nuls(buf, (size_t)n);
        if (c && write_replies_blocking(fd, c) < 0) break;
    }
    close(fd);
    return NULL;
}

static void serve_threads(int lfd) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                usleep(1000);
                continue;
            }
            die("accept4");
        }
        pthread_t t;
        int rc = pthread_create(&t, &attr, conn_thread, (void *)(intptr_t)fd);
        if (rc != 0) {
            fprintf(stderr, "echo_server: pthread_create: %s\n", strerror(rc));
            close(fd);
        }
    }
}

/* ----------------------------------------------------------------- epoll */

struct conn {
    int fd;
    int want_out;    /* EPOLLOUT registered */
    uint64_t owed;   /* bytes of replies not yet written */
    uint64_t offset; /* position inside the reply stream (mod reply len) */
};

struct worker {
    int epfd;
    int lfd;
};

/* Write as much of the owed reply bytes as the socket takes.
 * Returns 0 ok (maybe still owed), -1 connection dead. */
static int flush_conn(struct conn *c) {
    while (c->owed > 0) {
        size_t start = (size_t)(c->offset % g_reply_len);
        size_t len = g_batch_len - start;
        if (len > c->owed) len = (size_t)c->owed;
        ssize_t w = send(c->fd, g_batch + start, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        c->owed -= (uint64_t)w;
        c->offset += (uint64_t)w;
    }
    return 0;
}

static void close_conn(struct worker *w, struct conn *c) {
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

static void *epoll_worker(void *arg) {
    struct worker *w = arg;
    struct epoll_event evs[256];
    char buf[READ_BUF];
    for (;;) {
        int n = epoll_wait(w->epfd, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) { /* listening socket */
                for (;;) {
                    int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED) continue;
                        break; /* EAGAIN: another worker took it, or EMFILE */
                    }
                    struct conn *c = calloc(1, sizeof *c);
                    if (!c) {
                        close(fd);
                        continue;
                    }
                    c->fd = fd;
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
                    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        close(fd);
                        free(c);
                    }
                }
                continue;
            }
            struct conn *c = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            int dead = 0;
            if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                for (;;) {
                    ssize_t r = read(c->fd, buf, sizeof buf);
                    if (r > 0) {
                        c->owed += (uint64_t)count_nuls(buf, (size_t)r) * g_reply_len;
                        if ((size_t)r < sizeof buf) break;
                        continue;
                    }
                    if (r == 0) dead = 1; /* clean disconnect */
                    else if (errno == EINTR) continue;
                    else if (errno != EAGAIN && errno != EWOULDBLOCK) dead = 1;
                    break;
                }
            }
            if (!dead && flush_conn(c) < 0) dead = 1;
            if (dead) {
                close_conn(w, c);
                continue;
            }
            int want = c->owed > 0;
            if (want != c->want_out) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0),
                                         .data.ptr = c};
                epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
                c->want_out = want;
            }
        }
    }
    return NULL;
}

static void serve_epoll(int lfd, int nthreads) {
    int fl = fcntl(lfd, F_GETFL);
    fcntl(lfd, F_SETFL, fl | O_NONBLOCK);
    pthread_t *ts = calloc((size_t)nthreads, sizeof *ts);
    struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
    if (!ts || !ws) die("calloc");
    for (int i = 0; i < nthreads; i++) {
        ws[i].lfd = lfd;
        ws[i].epfd = epoll_create1(EPOLL_CLOEXEC);
        if (ws[i].epfd < 0) die("epoll_create1");
        struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
        if (epoll_ctl(ws[i].epfd, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl listen");
        if (i > 0 && pthread_create(&ts[i], NULL, epoll_worker, &ws[i]) != 0) die("pthread_create");
    }
    epoll_worker(&ws[0]); /* main thread is worker 0; never returns */
}

/* ------------------------------------------------------------------ main */

static void usage(void) {
    fprintf(stderr,
            "usage: echo_server [--reply-bytes N] [--mode thread|epoll] [--threads T]\n"
            "                   [--max-seconds S] [--quiet] SOCKET_PATH\n"
            "  --reply-bytes N  bytes per reply, terminating NUL included (default 100, min 3)\n"
            "  --mode           thread: one thread per connection (default); epoll: T workers\n"
            "  --threads T      epoll workers (default: online CPUs)\n"
            "  --max-seconds S  exit after S seconds no matter what (default 0 = no limit)\n");
    exit(2);
}

int main(int argc, char **argv) {
    long reply_bytes = 100;
    int epoll_mode = 0;
    long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    long max_seconds = 0;
    const char *path = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--reply-bytes") && i + 1 < argc) reply_bytes = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            if (!strcmp(m, "thread")) epoll_mode = 0;
            else if (!strcmp(m, "epoll")) epoll_mode = 1;
            else usage();
        } else if (!strcmp(a, "--threads") && i + 1 < argc) nthreads = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--max-seconds") && i + 1 < argc) max_seconds = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--quiet")) g_quiet = 1;
        else if (a[0] == '-' && a[1] == '-') usage();
        else if (!path) path = a;
        else usage();
    }
    if (!path || reply_bytes < 3 || reply_bytes > (1L << 24) || nthreads < 1 || nthreads > 1024 ||
        max_seconds < 0)
        usage();

    g_reply_len = (size_t)reply_bytes;
    g_batch_len = g_reply_len * BATCH_REPLIES;
    g_batch = malloc(g_batch_len);
    if (!g_batch) die("malloc");
    build_reply(g_batch, g_reply_len - 1);
    for (int i = 1; i < BATCH_REPLIES; i++) memcpy(g_batch + (size_t)i * g_reply_len, g_batch, g_reply_len);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char tmp[sizeof sa.sun_path];
    if (strlen(path) + 16 >= sizeof sa.sun_path) {
        fprintf(stderr, "echo_server: socket path too long: %s\n", path);
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    strcpy(sa.sun_path, tmp);

    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    unlink(tmp);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");

    g_path = strdup(path);
    struct sigaction sact = {.sa_handler = on_signal};
    sigemptyset(&sact.sa_mask);
    sigaction(SIGTERM, &sact, NULL);
    sigaction(SIGINT, &sact, NULL);
    sigaction(SIGHUP, &sact, NULL);
    sigaction(SIGALRM, &sact, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (max_seconds > 0) alarm((unsigned)max_seconds);

    if (rename(tmp, path) < 0) { /* socket appears only once it is listening */
        unlink(tmp);
        die("rename");
    }
    if (!g_quiet)
        fprintf(stderr, "echo_server: listening on %s, reply %zu bytes, mode %s%s\n", path, g_reply_len,
                epoll_mode ? "epoll" : "thread", epoll_mode ? "" : " (one thread per connection)");

    if (epoll_mode) serve_epoll(lfd, (int)nthreads);
    else serve_threads(lfd);
    return 0;
}
