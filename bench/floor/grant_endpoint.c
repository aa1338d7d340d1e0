/*
 * grant_endpoint.c - a token endpoint fast enough not to be the bottleneck of a
 * refresh wave (bench/fleet.py), that counts every grant per credential.
 *
 * It answers refresh grants (RFC 6749 section 6) without storage or crypto:
 * a refresh token names its credential and its place in the rotation,
 * "rt.<user>.<n>" (tokend-storegen --traceable writes n = 0), and each grant
 * answers with "rt.<user>.<n+1>" and an access token that names the
 * credential, the rotation and its own expiry, "at.<user>.<n+1>.<exp>." padded
 * to --token-bytes, or with --jwt-bytes a JWT-shaped token of that length
 * whose claims hold sub, n, iat and exp. So a client can tell from a token
 * itself whether it was served expired.
 *
 * Rotation as a strict provider with a reuse grace: the newest refresh token
 * is spent and replaced; the one before it (whose answer may have been lost
 * with a node killed mid-grant) is accepted once more and counted as a
 * replay; anything older is refused with invalid_grant and counted as stale.
 * Per credential it counts the grants of the current wave; POST /__wave
 * starts a new wave (zeroes those counts), GET /__stats reports totals, the
 * wave's distribution (credentials granted once, more than once, the most)
 * and this process's own CPU time, so its cost per grant can be subtracted.
 * GET /__more lists up to 50 credentials granted more than once this wave.
 *
 * One thread, epoll, HTTP/1.1 keep-alive, bound to 127.0.0.1 only. Prints
 * "READY <port>" on stdout once it listens. Every table is bounded
 * (--max-credentials, default 4,000,000).
 *
 *   grant_endpoint [--port 0] [--lifetime 3600] [--token-bytes 40 | --jwt-bytes 1024]
 *
 * Build: make -C bench (gcc -O2 -Wall -Wextra).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP 65536
#define MAX_USER 200

static long g_lifetime = 3600;
static int g_token_bytes = 40;
static int g_jwt_bytes = 0;
static size_t g_max_credentials = 4000000;

/* ------------------------------------------------------------ credentials */

struct credential {
    char *user;          /* NULL: empty slot */
    uint32_t latest;     /* newest rotation issued */
    uint32_t wave;       /* grants this wave */
    uint32_t total;      /* grants ever */
};

static struct credential *g_table;
static size_t g_capacity, g_count;

static struct {
    uint64_t posts, grants, replays, stale, malformed, other_requests;
} g_stats;

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void grow(void) {
    size_t capacity = g_capacity ? g_capacity * 2 : 1 << 16;
    struct credential *table = calloc(capacity, sizeof *table);
    if (!table) { perror("calloc"); exit(1); }
    for (size_t i = 0; i < g_capacity; i++) {
        if (!g_table[i].user) continue;
        size_t j = hash(g_table[i].user, strlen(g_table[i].user)) & (capacity - 1);
        while (table[j].user) j = (j + 1) & (capacity - 1);
        table[j] = g_table[i];
    }
    free(g_table);
    g_table = table;
    g_capacity = capacity;
}

/* The credential named `user` (n bytes), added if new; NULL when the table is full. */
static struct credential *lookup(const char *user, size_t n) {
    if (g_count * 2 >= g_capacity) {
        if (g_count >= g_max_credentials) return NULL;
        grow();
    }
    size_t j = hash(user, n) & (g_capacity - 1);
    while (g_table[j].user) {
        if (strlen(g_table[j].user) == n && memcmp(g_table[j].user, user, n) == 0) return &g_table[j];
        j = (j + 1) & (g_capacity - 1);
    }
    g_table[j].user = strndup(user, n);
    g_count++;
    return &g_table[j];
}

/* ------------------------------------------------------------ tokens */

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
static uint64_t g_random = 0x9E3779B97F4A7C15ULL;

static void fill_random(char *out, int n) {
    for (int i = 0; i < n; i++) {
        g_random ^= g_random << 13;
        g_random ^= g_random >> 7;
        g_random ^= g_random << 17;
        out[i] = ALPHABET[g_random & 63];
    }
}

static int base64url(const unsigned char *in, int n, char *out) {
    int o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = ALPHABET[v >> 18 & 63]; out[o++] = ALPHABET[v >> 12 & 63];
        out[o++] = ALPHABET[v >> 6 & 63]; out[o++] = ALPHABET[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = ALPHABET[v >> 18 & 63]; out[o++] = ALPHABET[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = ALPHABET[v >> 18 & 63]; out[o++] = ALPHABET[v >> 12 & 63]; out[o++] = ALPHABET[v >> 6 & 63];
    }
    return o;
}

/* The access token for rotation `n` of `user`, into out (at least 64 + user + token bytes). */
static int access_token(char *out, const char *user, int user_len, uint32_t n, long iat, long exp) {
    if (g_jwt_bytes > 0) {
        static const char header[] = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImJlbmNoIn0"; /* {"alg":"RS256","typ":"JWT","kid":"bench"} */
        char claims[2048];
        int c = snprintf(claims, sizeof claims, "{\"sub\":\"%.*s\",\"n\":%u,\"iat\":%ld,\"exp\":%ld,\"pad\":\"", user_len, user, n, iat, exp);
        /* header . payload . 342-character signature = jwt_bytes: pad the claims to fit. */
        int room = g_jwt_bytes - (int)strlen(header) - 2 - 342;
        int pad = (room * 3) / 4 - c - 2;
        if (pad < 0) pad = 0;
        if (pad > (int)sizeof claims - c - 3) pad = (int)sizeof claims - c - 3;
        fill_random(claims + c, pad);
        c += pad;
        claims[c++] = '"';
        claims[c++] = '}';
        int o = sprintf(out, "%s.", header);
        o += base64url((unsigned char *)claims, c, out + o);
        out[o++] = '.';
        int sig = g_jwt_bytes - o;
        if (sig < 16) sig = 16;
        fill_random(out + o, sig);
        return o + sig;
    }
    int o = sprintf(out, "at.%.*s.%u.%ld.", user_len, user, n, exp);
    if (o < g_token_bytes) {
        fill_random(out + o, g_token_bytes - o);
        o = g_token_bytes;
    }
    return o;
}

/* ------------------------------------------------------------ HTTP */

struct connection {
    int fd;
    char in[IN_CAP];
    size_t in_len;
    char *out;
    size_t out_len, out_sent, out_cap;
};

static void append(struct connection *c, const char *data, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n) cap *= 2;
        c->out = realloc(c->out, cap);
        if (!c->out) { perror("realloc"); exit(1); }
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
}

static void respond(struct connection *c, int status, const char *body, size_t n) {
    char head[256];
    const char *reason = status == 200 ? "OK" : status == 400 ? "Bad Request" : "Not Found";
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: %zu\r\n\r\n",
                     status, reason, n);
    append(c, head, (size_t)h);
    append(c, body, n);
}

/* The value of form field `name` in an application/x-www-form-urlencoded body (not decoded:
 * the tokens this endpoint issues need no escaping). */
static const char *form_field(const char *body, size_t n, const char *name, size_t *len) {
    size_t name_len = strlen(name);
    size_t i = 0;
    while (i < n) {
        size_t end = i;
        while (end < n && body[end] != '&') end++;
        if (end - i > name_len && memcmp(body + i, name, name_len) == 0 && body[i + name_len] == '=') {
            *len = end - i - name_len - 1;
            return body + i + name_len + 1;
        }
        i = end + 1;
    }
    return NULL;
}

static void grant(struct connection *c, const char *body, size_t n) {
    g_stats.posts++;
    size_t type_len = 0, token_len = 0;
    const char *type = form_field(body, n, "grant_type", &type_len);
    const char *token = form_field(body, n, "refresh_token", &token_len);
    static const char bad_grant[] = "{\"error\":\"invalid_grant\",\"error_description\":\"unknown or spent refresh token\"}";
    if (!type || type_len != 13 || memcmp(type, "refresh_token", 13) != 0) {
        static const char unsupported[] = "{\"error\":\"unsupported_grant_type\"}";
        g_stats.malformed++;
        respond(c, 400, unsupported, sizeof unsupported - 1);
        return;
    }
    /* rt.<user>.<n>: the user is everything between the first dot and the last. */
    const char *last = token ? memrchr(token, '.', token_len) : NULL;
    if (!token || token_len < 6 || memcmp(token, "rt.", 3) != 0 || !last || last <= token + 3 || last - token - 3 > MAX_USER) {
        g_stats.malformed++;
        respond(c, 400, bad_grant, sizeof bad_grant - 1);
        return;
    }
    const char *user = token + 3;
    int user_len = (int)(last - user);
    char number[16];
    size_t digits = token_len - (size_t)(last - token) - 1;
    if (digits == 0 || digits >= sizeof number) {
        g_stats.malformed++;
        respond(c, 400, bad_grant, sizeof bad_grant - 1);
        return;
    }
    memcpy(number, last + 1, digits);
    number[digits] = 0;
    uint32_t presented = (uint32_t)strtoul(number, NULL, 10);
    struct credential *credential = lookup(user, (size_t)user_len);
    if (!credential) {
        g_stats.malformed++;
        respond(c, 400, bad_grant, sizeof bad_grant - 1);
        return;
    }
    if (presented == credential->latest) {
        /* the newest token: spent now */
    } else if (presented + 1 == credential->latest) {
        g_stats.replays++;
    } else {
        g_stats.stale++;
        respond(c, 400, bad_grant, sizeof bad_grant - 1);
        return;
    }
    credential->latest++;
    credential->wave++;
    credential->total++;
    g_stats.grants++;
    long now = (long)time(NULL);
    char reply[8192];
    int o = sprintf(reply, "{\"access_token\":\"");
    o += access_token(reply + o, user, user_len, credential->latest, now, now + g_lifetime);
    o += sprintf(reply + o, "\",\"token_type\":\"Bearer\",\"expires_in\":%ld,\"refresh_token\":\"rt.%.*s.%u\"}", g_lifetime, user_len,
                 user, credential->latest);
    respond(c, 200, reply, (size_t)o);
}

static double cpu_seconds(int who_user) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    struct timeval t = who_user ? usage.ru_utime : usage.ru_stime;
    return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

static void stats(struct connection *c) {
    uint64_t once = 0, more = 0, granted = 0, max = 0;
    for (size_t i = 0; i < g_capacity; i++) {
        if (!g_table[i].user || g_table[i].wave == 0) continue;
        granted++;
        if (g_table[i].wave == 1) once++; else more++;
        if (g_table[i].wave > max) max = g_table[i].wave;
    }
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "{\"token_posts\":%llu,\"grants\":%llu,\"replays\":%llu,\"stale\":%llu,\"malformed\":%llu,\"credentials\":%zu,"
                     "\"wave\":{\"credentials_granted\":%llu,\"granted_once\":%llu,\"granted_more_than_once\":%llu,\"most_grants\":%llu},"
                     "\"cpu_user_s\":%.3f,\"cpu_system_s\":%.3f}",
                     (unsigned long long)g_stats.posts, (unsigned long long)g_stats.grants, (unsigned long long)g_stats.replays,
                     (unsigned long long)g_stats.stale, (unsigned long long)g_stats.malformed, g_count, (unsigned long long)granted,
                     (unsigned long long)once, (unsigned long long)more, (unsigned long long)max, cpu_seconds(1), cpu_seconds(0));
    respond(c, 200, body, (size_t)n);
}

static void more_than_once(struct connection *c) {
    char body[16384];
    int n = sprintf(body, "[");
    int listed = 0;
    for (size_t i = 0; i < g_capacity && listed < 50; i++) {
        if (!g_table[i].user || g_table[i].wave < 2) continue;
        n += sprintf(body + n, "%s{\"user\":\"%.*s\",\"grants\":%u}", listed ? "," : "", MAX_USER, g_table[i].user, g_table[i].wave);
        listed++;
    }
    n += sprintf(body + n, "]");
    respond(c, 200, body, (size_t)n);
}

/* Handles every complete request in c->in; returns -1 to close the connection. */
static int handle(struct connection *c) {
    for (int requests = 0; requests < 1024; requests++) {
        char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
        if (!end) return c->in_len >= IN_CAP ? -1 : 0;
        size_t head_len = (size_t)(end - c->in) + 4;
        size_t body_len = 0;
        for (char *line = memchr(c->in, '\n', head_len); line && line < end; line = memchr(line + 1, '\n', (size_t)(end - line))) {
            if (strncasecmp(line + 1, "content-length:", 15) == 0) body_len = strtoul(line + 16, NULL, 10);
        }
        if (head_len + body_len > IN_CAP) return -1;
        if (c->in_len < head_len + body_len) return 0;
        char *body = c->in + head_len;
        if (strncmp(c->in, "POST /__wave", 12) == 0) {
            for (size_t i = 0; i < g_capacity; i++) g_table[i].wave = 0;
            respond(c, 200, "{}", 2);
        } else if (strncmp(c->in, "GET /__stats", 12) == 0) {
            stats(c);
        } else if (strncmp(c->in, "GET /__more", 11) == 0) {
            more_than_once(c);
        } else if (strncmp(c->in, "POST ", 5) == 0) {
            grant(c, body, body_len);
        } else {
            g_stats.other_requests++;
            respond(c, 404, "{}", 2);
        }
        memmove(c->in, c->in + head_len + body_len, c->in_len - head_len - body_len);
        c->in_len -= head_len + body_len;
    }
    return 0;
}

static void close_connection(int epoll, struct connection *c) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->out);
    free(c);
}

/* Writes what is queued; returns -1 on a broken connection. */
static int flush(int epoll, struct connection *c) {
    while (c->out_sent < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN) break;
            return -1;
        }
        c->out_sent += (size_t)w;
    }
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
    if (c->out_sent == c->out_len) {
        c->out_len = c->out_sent = 0;
    } else {
        event.events |= EPOLLOUT;
    }
    epoll_ctl(epoll, EPOLL_CTL_MOD, c->fd, &event);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: grant_endpoint [--port 0] [--lifetime 3600] [--token-bytes 40 | --jwt-bytes 1024] [--max-credentials N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--port") == 0) port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--lifetime") == 0) g_lifetime = atol(argv[++i]);
        else if (strcmp(argv[i], "--token-bytes") == 0) g_token_bytes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--jwt-bytes") == 0) g_jwt_bytes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-credentials") == 0) g_max_credentials = strtoul(argv[++i], NULL, 10);
        else usage();
    }
    if (g_lifetime < 1 || g_token_bytes < 8 || g_token_bytes > 4096 || g_jwt_bytes < 0 || g_jwt_bytes > 4096 || port < 0 || port > 65535)
        usage();
    signal(SIGPIPE, SIG_IGN);
    grow();
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 1024) < 0) { perror("bind"); return 1; }
    socklen_t length = sizeof address;
    getsockname(listener, (struct sockaddr *)&address, &length);
    printf("READY %d\n", ntohs(address.sin_port));
    fflush(stdout);
    int epoll = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epoll, events, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            struct connection *c = events[i].data.ptr;
            if (!c) {
                for (int accepted = 0; accepted < 256; accepted++) {
                    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct connection *made = calloc(1, sizeof *made);
                    if (!made) { close(fd); break; }
                    made->fd = fd;
                    struct epoll_event add = {.events = EPOLLIN, .data.ptr = made};
                    epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &add);
                }
                continue;
            }
            if (events[i].events & (EPOLLERR | EPOLLHUP) && !(events[i].events & EPOLLIN)) {
                close_connection(epoll, c);
                continue;
            }
            if (events[i].events & EPOLLIN) {
                ssize_t r = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN)) {
                    close_connection(epoll, c);
                    continue;
                }
                if (r > 0) c->in_len += (size_t)r;
                if (handle(c) < 0) {
                    close_connection(epoll, c);
                    continue;
                }
            }
            if (flush(epoll, c) < 0) close_connection(epoll, c);
        }
    }
}
