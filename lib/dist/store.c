/* The TCP key-value store of the env:// rendezvous (wire format in
 * store.h): a server thread polling non-blocking sockets, and a client of
 * one request at a time. Peers' bytes are untrusted: a bad frame costs its
 * own connection only. Nothing here may block past a deadline, exit, or
 * raise SIGPIPE. */
#include "dist/store.h"

#include "core/clock.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_PING = 4 };

#define REQ_HEAD(klen) (2 + (size_t)(klen) + 4) /* op, key_len, key, value_len */
#define RESP_HEAD 5                             /* status, len */
/* the largest request frame: what a connection's input buffer may grow to */
#define MAX_FRAME REQ_HEAD(RLPI_STORE_MAX_KEY) + RLPI_STORE_MAX_VALUE
/* answers queued for a peer that does not read them: past this, the
 * server stops reading that peer's requests until it catches up */
#define OUT_HIGH (RLPI_STORE_MAX_VALUE + 64)
/* buffers above this are given back once empty (a 1 MiB value must not
 * pin 1 MiB per connection for the life of the store) */
#define BUF_KEEP 65536
#define CONNECT_ATTEMPT_S 2.0 /* one address's connect: a black hole must not eat the deadline */
#define RETRY_MIN_S 0.05
#define RETRY_MAX_S 0.2

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int rlpi_store_parse_request(const unsigned char *buf, size_t len, rlpi_store_request *req, size_t *used)
{
    if (len < 1)
        return RLP_E_AGAIN;
    int op = buf[0];
    if (op < OP_SET || op > OP_PING)
        return rlpi_error_set(RLP_E_FORMAT, "store: unknown request op %d", op);
    if (len < 2)
        return RLP_E_AGAIN;
    size_t klen = buf[1];
    if (klen == 0)
        return rlpi_error_set(RLP_E_FORMAT, "store: request with an empty key");
    if (len < REQ_HEAD(klen))
        return RLP_E_AGAIN;
    size_t vlen = get_le32(buf + 2 + klen);
    if (vlen > RLPI_STORE_MAX_VALUE)
        return rlpi_error_set(RLP_E_FORMAT, "store: request value of %zu bytes, more than %zu", vlen,
                              RLPI_STORE_MAX_VALUE);
    if ((op == OP_GET || op == OP_PING) && vlen != 0)
        return rlpi_error_set(RLP_E_FORMAT, "store: GET or PING request with a value");
    if (op == OP_ADD && vlen != 8)
        return rlpi_error_set(RLP_E_FORMAT, "store: ADD request with a %zu-byte delta, not 8", vlen);
    if (op == OP_PING && (klen != 1 || buf[2] != '-'))
        return rlpi_error_set(RLP_E_FORMAT, "store: PING request with a key other than \"-\"");
    if (len - REQ_HEAD(klen) < vlen)
        return RLP_E_AGAIN;
    req->op = op;
    req->key = (const char *)buf + 2;
    req->key_len = klen;
    req->value = buf + REQ_HEAD(klen);
    req->value_len = vlen;
    *used = REQ_HEAD(klen) + vlen;
    return RLP_OK;
}

/* ---- server ---- */

typedef struct entry {
    char *key; /* NULL: a free slot */
    size_t key_len;
    unsigned char *value; /* malloc'd, at least 1 byte */
    size_t value_len;
} entry;

typedef struct conn {
    int fd;
    bool dead;
    unsigned char *in; /* (in_cap) received, not yet parsed: in[0..in_len) */
    size_t in_len, in_cap;
    unsigned char *out; /* (out_cap) answers, not yet sent: out[out_off..out_len) */
    size_t out_off, out_len, out_cap;
    bool parked; /* a GET of a missing key: no further request is read until it is answered */
    size_t parked_len;
    char parked_key[RLPI_STORE_MAX_KEY];
} conn;

typedef struct server {
    int listen_fd;
    int wake[2]; /* self-pipe: a byte in wake[1] stops the thread */
    int port;
    pthread_t thread;
    entry *table; /* (cap) open addressing, linear probing; keys are never removed */
    size_t cap, n_keys;
    conn **conns; /* (n_conns) */
    size_t n_conns, conns_cap;
    struct pollfd *pfds;        /* (2 + conns_cap) */
    double accept_paused_until; /* out of descriptors: stop accepting for a moment */
} server;

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 1099511628211u;
    return h;
}

static entry *table_find(server *sv, const char *k, size_t n)
{
    if (!sv->cap)
        return NULL;
    for (size_t i = key_hash(k, n) & (sv->cap - 1);; i = (i + 1) & (sv->cap - 1)) {
        entry *e = &sv->table[i];
        if (!e->key)
            return NULL;
        if (e->key_len == n && memcmp(e->key, k, n) == 0)
            return e;
    }
}

/* Inserts a new key (not present) that owns `value`; NULL when out of memory. */
static entry *table_insert(server *sv, const char *k, size_t n, unsigned char *value, size_t value_len)
{
    if (2 * (sv->n_keys + 1) > sv->cap) { /* load at most 1/2 */
        size_t ncap = sv->cap ? 2 * sv->cap : 64;
        entry *nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return NULL;
        for (size_t i = 0; i < sv->cap; i++) {
            if (!sv->table[i].key)
                continue;
            size_t j = key_hash(sv->table[i].key, sv->table[i].key_len) & (ncap - 1);
            while (nt[j].key)
                j = (j + 1) & (ncap - 1);
            nt[j] = sv->table[i];
        }
        free(sv->table);
        sv->table = nt;
        sv->cap = ncap;
    }
    char *kc = malloc(n);
    if (!kc)
        return NULL;
    memcpy(kc, k, n);
    size_t i = key_hash(k, n) & (sv->cap - 1);
    while (sv->table[i].key)
        i = (i + 1) & (sv->cap - 1);
    sv->table[i] = (entry){kc, n, value, value_len};
    sv->n_keys++;
    return &sv->table[i];
}

static bool buf_reserve(unsigned char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    unsigned char *nb = realloc(*b, ncap);
    if (!nb)
        return false;
    *b = nb;
    *cap = ncap;
    return true;
}

static void conn_flush(conn *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            c->out_off += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        else
            c->dead = true;
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        if (c->out_cap > BUF_KEEP) {
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
    }
}

/* Queues an answer and tries to send it at once. */
static void conn_reply(conn *c, int status, const void *data, size_t len)
{
    if (c->dead)
        return;
    if (!buf_reserve(&c->out, &c->out_cap, c->out_len + RESP_HEAD + len)) {
        c->dead = true; /* the peer sees its connection close: better than a wrong answer */
        return;
    }
    unsigned char *p = c->out + c->out_len;
    p[0] = (unsigned char)(-status);
    put_le32(p + 1, (uint32_t)len);
    if (len)
        memcpy(p + RESP_HEAD, data, len);
    c->out_len += RESP_HEAD + len;
    conn_flush(c);
}

/* A key came into being: answer the GETs parked on it. */
static void wake_parked(server *sv, const entry *e)
{
    for (size_t i = 0; i < sv->n_conns; i++) {
        conn *c = sv->conns[i];
        if (c->parked && !c->dead && c->parked_len == e->key_len && memcmp(c->parked_key, e->key, e->key_len) == 0) {
            c->parked = false;
            conn_reply(c, RLP_OK, e->value, e->value_len);
        }
    }
}

static void handle(server *sv, conn *c, const rlpi_store_request *r)
{
    entry *e = table_find(sv, r->key, r->key_len);
    if (r->op == OP_PING) {
        conn_reply(c, RLP_OK, NULL, 0);
    } else if (r->op == OP_GET) {
        if (e) {
            conn_reply(c, RLP_OK, e->value, e->value_len);
        } else {
            c->parked = true;
            c->parked_len = r->key_len;
            memcpy(c->parked_key, r->key, r->key_len);
        }
    } else if (r->op == OP_SET) {
        if (!e && sv->n_keys >= RLPI_STORE_MAX_KEYS) {
            c->dead = true; /* beyond the store's limit: store.h closes the connection */
            return;
        }
        unsigned char *v = malloc(r->value_len ? r->value_len : 1);
        if (!v) {
            conn_reply(c, RLP_E_NOMEM, NULL, 0);
            return;
        }
        memcpy(v, r->value, r->value_len);
        if (e) {
            free(e->value);
            e->value = v;
            e->value_len = r->value_len;
        } else if (!(e = table_insert(sv, r->key, r->key_len, v, r->value_len))) {
            free(v);
            conn_reply(c, RLP_E_NOMEM, NULL, 0);
            return;
        }
        conn_reply(c, RLP_OK, NULL, 0);
        wake_parked(sv, e);
    } else { /* OP_ADD */
        int64_t delta = (int64_t)get_le64(r->value), now = 0;
        if (e && e->value_len != 8) {
            conn_reply(c, RLP_E_FORMAT, NULL, 0); /* a SET value, not a counter */
            return;
        }
        if (e)
            now = (int64_t)get_le64(e->value);
        if ((delta > 0 && now > INT64_MAX - delta) || (delta < 0 && now < INT64_MIN - delta)) {
            conn_reply(c, RLP_E_OVERFLOW, NULL, 0);
            return;
        }
        now += delta;
        bool created = !e;
        if (!e) {
            if (sv->n_keys >= RLPI_STORE_MAX_KEYS) {
                c->dead = true;
                return;
            }
            unsigned char *v = malloc(8);
            if (!v || !(e = table_insert(sv, r->key, r->key_len, v, 8))) {
                free(v);
                conn_reply(c, RLP_E_NOMEM, NULL, 0);
                return;
            }
        }
        put_le64(e->value, (uint64_t)now);
        conn_reply(c, RLP_OK, e->value, 8);
        if (created)
            wake_parked(sv, e);
    }
}

/* Answers the complete requests buffered on c, in order, until one parks
 * or the peer falls behind reading; true if any was consumed. */
static bool conn_process(server *sv, conn *c)
{
    size_t off = 0;
    bool any = false;
    while (!c->dead && !c->parked && c->out_len - c->out_off <= OUT_HIGH) {
        rlpi_store_request r;
        size_t used;
        int rc = rlpi_store_parse_request(c->in + off, c->in_len - off, &r, &used);
        if (rc == RLP_E_AGAIN)
            break;
        if (rc != RLP_OK) {
            c->dead = true; /* a bad frame: this connection only */
            break;
        }
        handle(sv, c, &r);
        off += used;
        any = true;
    }
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    if (c->in_len == 0 && c->in_cap > BUF_KEEP) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    return any;
}

/* Whether to read from c now: not while it waits for an answer it cannot
 * have yet, or has answers piled up, or a full frame already buffered. */
static bool conn_wants_input(const conn *c)
{
    return !c->dead && c->in_len < MAX_FRAME && c->out_len - c->out_off <= OUT_HIGH;
}

static void conn_read(conn *c)
{
    for (;;) {
        if (!conn_wants_input(c))
            return;
        size_t want = c->in_len + 65536 < MAX_FRAME ? c->in_len + 65536 : MAX_FRAME;
        if (!buf_reserve(&c->in, &c->in_cap, want)) {
            c->dead = true;
            return;
        }
        size_t room = (c->in_cap < MAX_FRAME ? c->in_cap : MAX_FRAME) - c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, room, MSG_DONTWAIT);
        if (n > 0) {
            c->in_len += (size_t)n;
            if ((size_t)n < room)
                return;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            c->dead = true; /* EOF or a reset: requests not yet answered die with it */
            return;
        }
    }
}

static void conn_free(conn *c)
{
    if (!c)
        return;
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

static void server_accept(server *sv)
{
    for (;;) {
        int fd = accept4(sv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                sv->accept_paused_until = rlpi_now_s() + 0.1; /* the listen socket would stay readable */
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn *c = calloc(1, sizeof *c);
        if (c && sv->n_conns == sv->conns_cap) {
            size_t ncap = sv->conns_cap ? 2 * sv->conns_cap : 16;
            conn **nc = realloc(sv->conns, ncap * sizeof *nc);
            struct pollfd *np = nc ? realloc(sv->pfds, (2 + ncap) * sizeof *np) : NULL;
            if (nc)
                sv->conns = nc;
            if (np) {
                sv->pfds = np;
                sv->conns_cap = ncap;
            }
        }
        if (!c || sv->n_conns == sv->conns_cap) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        sv->conns[sv->n_conns++] = c;
    }
}

static void *server_main(void *arg)
{
    server *sv = arg;
    for (;;) {
        double now = rlpi_now_s();
        bool accepting = now >= sv->accept_paused_until;
        sv->pfds[0] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN};
        sv->pfds[1] = (struct pollfd){.fd = accepting ? sv->listen_fd : -1, .events = POLLIN};
        size_t n = sv->n_conns;
        for (size_t i = 0; i < n; i++) {
            conn *c = sv->conns[i];
            short ev = POLLRDHUP;
            if (conn_wants_input(c))
                ev |= POLLIN;
            if (c->out_off < c->out_len)
                ev |= POLLOUT;
            sv->pfds[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        int ms = accepting ? -1 : (int)ceil((sv->accept_paused_until - now) * 1000);
        int pr = poll(sv->pfds, 2 + n, ms);
        if (pr < 0 && errno != EINTR)
            break; /* nothing to do but stop: the clients see their connections close */
        if (pr <= 0)
            continue;
        if (sv->pfds[0].revents)
            break;
        for (size_t i = 0; i < n; i++) {
            conn *c = sv->conns[i];
            short re = sv->pfds[2 + i].revents;
            if (re & POLLOUT)
                conn_flush(c);
            if (re & POLLIN)
                conn_read(c);
            else if (re & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP))
                c->dead = true;
            /* POLLRDHUP with POLLIN: the read above drains and then sees EOF */
        }
        if (sv->pfds[1].revents & POLLIN)
            server_accept(sv);
        /* answer what arrived; a SET may unpark GETs whose connections have
         * requests of their own queued behind them, hence the fixed point */
        for (bool progress = true; progress;) {
            progress = false;
            for (size_t i = 0; i < sv->n_conns; i++)
                if (conn_process(sv, sv->conns[i]))
                    progress = true;
        }
        size_t kept = 0;
        for (size_t i = 0; i < sv->n_conns; i++) {
            if (sv->conns[i]->dead)
                conn_free(sv->conns[i]);
            else
                sv->conns[kept++] = sv->conns[i];
        }
        sv->n_conns = kept;
    }
    for (size_t i = 0; i < sv->n_conns; i++)
        conn_free(sv->conns[i]);
    sv->n_conns = 0;
    return NULL;
}

static void server_free(server *sv)
{
    if (!sv)
        return;
    for (size_t i = 0; i < sv->n_conns; i++)
        conn_free(sv->conns[i]);
    for (size_t i = 0; i < sv->cap; i++) {
        free(sv->table[i].key);
        free(sv->table[i].value);
    }
    free(sv->table);
    free(sv->conns);
    free(sv->pfds);
    if (sv->listen_fd >= 0)
        close(sv->listen_fd);
    if (sv->wake[0] >= 0)
        close(sv->wake[0]);
    if (sv->wake[1] >= 0)
        close(sv->wake[1]);
    free(sv);
}

/* A listening socket on every address at `port`: IPv6 dual-stack, or IPv4
 * where this host has no IPv6. */
static int server_listen(int port, int *fd_out)
{
    int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        a6.sin6_addr = in6addr_any;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0) {
            *fd_out = fd;
            return RLP_OK;
        }
        int err = errno;
        close(fd);
        if (err == EADDRINUSE || err == EACCES)
            return rlpi_error_set(RLP_E_IO, "store: cannot listen on port %d: %s", port, strerror(err));
        /* IPv6 disabled (EADDRNOTAVAIL, EAFNOSUPPORT): IPv4 alone below */
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rlpi_error_set(RLP_E_IO, "store: cannot create a socket for port %d: %s", port, strerror(errno));
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&a4, sizeof a4) != 0) {
        int err = errno;
        close(fd);
        return rlpi_error_set(RLP_E_IO, "store: cannot listen on port %d: %s", port, strerror(err));
    }
    *fd_out = fd;
    return RLP_OK;
}

static int server_start(int port, server **out)
{
    server *sv = calloc(1, sizeof *sv);
    if (!sv)
        return rlpi_error_set(RLP_E_NOMEM, "store: out of memory");
    sv->listen_fd = sv->wake[0] = sv->wake[1] = -1;
    int rc = server_listen(port, &sv->listen_fd);
    if (rc != RLP_OK) {
        server_free(sv);
        return rc;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (listen(sv->listen_fd, SOMAXCONN) != 0 || getsockname(sv->listen_fd, (struct sockaddr *)&ss, &sl) != 0) {
        rc = rlpi_error_set(RLP_E_IO, "store: cannot listen on port %d: %s", port, strerror(errno));
        server_free(sv);
        return rc;
    }
    sv->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (pipe2(sv->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        sv->wake[0] = sv->wake[1] = -1;
        rc = rlpi_error_set(RLP_E_IO, "store: cannot create a pipe: %s", strerror(errno));
        server_free(sv);
        return rc;
    }
    sv->pfds = malloc(2 * sizeof *sv->pfds);
    if (!sv->pfds) {
        server_free(sv);
        return rlpi_error_set(RLP_E_NOMEM, "store: out of memory");
    }
    int e = pthread_create(&sv->thread, NULL, server_main, sv);
    if (e != 0) {
        server_free(sv);
        return rlpi_error_set(e == EAGAIN ? RLP_E_NOMEM : RLP_E_INTERNAL, "store: cannot start the server thread: %s",
                              strerror(e));
    }
    *out = sv;
    return RLP_OK;
}

static void server_stop(server *sv)
{
    if (!sv)
        return;
    char b = 1;
    while (write(sv->wake[1], &b, 1) < 0 && errno == EINTR)
        ;
    pthread_join(sv->thread, NULL);
    server_free(sv);
}

/* ---- client ---- */

struct rlpi_store {
    pthread_mutex_t mu; /* one request at a time on fd */
    int fd;             /* -1: dropped after a timeout, reconnected by the next request */
    bool broken;        /* the server went away or garbled: every request fails */
    char host[256];
    char port_str[8];
    char where[300]; /* "host:port" (IPv6 in brackets) for messages */
    double timeout_s;
    char local[NI_MAXHOST];
    server *srv; /* the serving rank's server, else NULL */
};

/* Waits for `ev` on fd until `deadline` (monotonic seconds, may be
 * INFINITY): 1 ready, 0 timed out, -1 failed (errno). */
static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        int ms = -1;
        if (isfinite(deadline)) {
            double left = deadline - rlpi_now_s();
            if (left <= 0)
                return 0;
            ms = left * 1000 >= INT_MAX ? INT_MAX : (int)ceil(left * 1000);
        }
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, ms);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static void sleep_s(double s)
{
    if (!(s > 0))
        return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

enum { TRY_OK = 0, TRY_RETRY = 1 }; /* else a negative rlp_status */

/* One pass over host's addresses; TRY_RETRY with errno_out when none accepts now. */
static int connect_once(rlpi_store *s, double deadline, int *fd_out, int *errno_out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(s->host, s->port_str, &hints, &ai);
    if (g == EAI_AGAIN) {
        *errno_out = EAGAIN; /* name service busy: retried like a refused connection */
        return TRY_RETRY;
    }
    if (g == EAI_MEMORY)
        return rlpi_error_set(RLP_E_NOMEM, "store %s: out of memory resolving the host", s->where);
    if (g != 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "store %s: cannot resolve the host: %s", s->where,
                              g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    *errno_out = ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                int e = errno;
                freeaddrinfo(ai);
                return rlpi_error_set(RLP_E_IO, "store %s: cannot create a socket: %s", s->where, strerror(e));
            }
            *errno_out = errno; /* a family this host lacks: the next address */
            continue;
        }
        int err = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS || err == EINTR) {
                double until = rlpi_now_s() + CONNECT_ATTEMPT_S;
                int w = wait_fd(fd, POLLOUT, until < deadline ? until : deadline);
                socklen_t el = sizeof err;
                if (w == 0)
                    err = ETIMEDOUT;
                else if (w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                    err = errno;
            }
        }
        if (err == 0) {
            /* a connect to a free local port in the ephemeral range can
             * meet itself (TCP simultaneous open): that is no server */
            struct sockaddr_storage me, peer;
            socklen_t ml = sizeof me, pl = sizeof peer;
            if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
                getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && ml == pl && memcmp(&me, &peer, ml) == 0)
                err = ECONNREFUSED;
        }
        if (err == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            freeaddrinfo(ai);
            *fd_out = fd;
            return TRY_OK;
        }
        close(fd);
        *errno_out = err;
    }
    freeaddrinfo(ai);
    return TRY_RETRY;
}

/* Connects, retrying until `deadline` while no server accepts; with
 * `once`, a refusal is final (the server was there and has gone). */
static int store_connect(rlpi_store *s, double deadline, double timeout_s, bool once)
{
    double backoff = RETRY_MIN_S;
    for (;;) {
        int fd = -1, err = 0;
        int rc = connect_once(s, deadline, &fd, &err);
        if (rc == TRY_OK) {
            s->fd = fd;
            return RLP_OK;
        }
        if (rc < 0)
            return rc;
        if (once && err == ECONNREFUSED) {
            s->broken = true;
            return rlpi_error_set(RLP_E_CLOSED, "store %s: the server has gone (reconnecting: %s)", s->where,
                                  strerror(err));
        }
        double left = deadline - rlpi_now_s();
        if (left <= 0)
            return rlpi_error_set(RLP_E_TIMEOUT, "store %s: no server answered within %.1f s (last: %s)", s->where,
                                  timeout_s, strerror(err));
        sleep_s(backoff < left ? backoff : left);
        backoff = backoff * 2 < RETRY_MAX_S ? backoff * 2 : RETRY_MAX_S;
    }
}

static void drop_fd(rlpi_store *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

static int lost(rlpi_store *s, const char *what, int err)
{
    drop_fd(s);
    s->broken = true;
    if (err)
        return rlpi_error_set(RLP_E_CLOSED, "store %s: connection lost %s: %s", s->where, what, strerror(err));
    return rlpi_error_set(RLP_E_CLOSED,
                          "store %s: the server closed the connection %s (it stopped, or refused a request beyond "
                          "its limits)",
                          s->where, what);
}

static int timed_out(rlpi_store *s, const char *key, double timeout_s)
{
    /* the answer may still come: the stream is out of step, so start a
     * fresh connection with the next request (the server forgets a
     * closed connection's parked GET) */
    drop_fd(s);
    return rlpi_error_set(RLP_E_TIMEOUT, "store %s: no answer for key '%s' within %.3g s", s->where, key, timeout_s);
}

/* 1 sent, 0 deadline, else a negative status */
static int send_all(rlpi_store *s, const void *p, size_t n, double deadline, bool more)
{
    const unsigned char *b = p;
    while (n) {
        ssize_t w = send(s->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return lost(s, "sending a request", errno);
        int r = wait_fd(s->fd, POLLOUT, deadline);
        if (r == 0)
            return 0;
        if (r < 0)
            return lost(s, "sending a request", errno);
    }
    return 1;
}

static int recv_all(rlpi_store *s, void *p, size_t n, double deadline)
{
    unsigned char *b = p;
    while (n) {
        ssize_t r = recv(s->fd, b, n, MSG_DONTWAIT);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return lost(s, "awaiting an answer", 0);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return lost(s, "awaiting an answer", errno);
        int w = wait_fd(s->fd, POLLIN, deadline);
        if (w == 0)
            return 0;
        if (w < 0)
            return lost(s, "awaiting an answer", errno);
    }
    return 1;
}

static int check_key(const char *fn, const char *key, size_t *klen)
{
    if (!key || !key[0])
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: empty key", fn);
    *klen = strnlen(key, RLPI_STORE_MAX_KEY + 1);
    if (*klen > RLPI_STORE_MAX_KEY)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: key '%.40s...' longer than %d bytes", fn, key,
                              RLPI_STORE_MAX_KEY);
    return RLP_OK;
}

/* One request and its answer: *resp (malloc'd, NUL one past *resp_len)
 * when resp is not NULL. */
static int request(rlpi_store *s, int op, const char *key, size_t klen, const void *value, size_t vlen,
                   double timeout_s, unsigned char **resp, size_t *resp_len)
{
    double deadline = isinf(timeout_s) ? INFINITY : rlpi_now_s() + timeout_s;
    pthread_mutex_lock(&s->mu);
    int rc;
    if (s->broken) {
        rc = rlpi_error_set(RLP_E_CLOSED, "store %s: the connection was lost earlier", s->where);
        goto out;
    }
    if (s->fd < 0 && (rc = store_connect(s, deadline, timeout_s, true)) != RLP_OK) {
        if (rc == RLP_E_TIMEOUT)
            rc = rlpi_error_set(RLP_E_TIMEOUT, "store %s: no answer for key '%s' within %.3g s (reconnecting)",
                                s->where, key, timeout_s);
        goto out;
    }
    unsigned char head[REQ_HEAD(RLPI_STORE_MAX_KEY)];
    head[0] = (unsigned char)op;
    head[1] = (unsigned char)klen;
    memcpy(head + 2, key, klen);
    put_le32(head + 2 + klen, (uint32_t)vlen);
    if ((rc = send_all(s, head, REQ_HEAD(klen), deadline, vlen > 0)) == 1 && vlen)
        rc = send_all(s, value, vlen, deadline, false);
    if (rc == 1) {
        unsigned char rh[RESP_HEAD];
        rc = recv_all(s, rh, RESP_HEAD, deadline);
        if (rc == 1) {
            size_t n = get_le32(rh + 1);
            int status = -(int)rh[0];
            if (n > RLPI_STORE_MAX_VALUE || status < RLP_E_INTERNAL || (status != RLP_OK && n != 0)) {
                drop_fd(s);
                s->broken = true;
                rc = rlpi_error_set(RLP_E_NETWORK, "store %s: a malformed answer (status %d, %zu bytes)", s->where,
                                    rh[0], n);
                goto out;
            }
            unsigned char *v = malloc(n + 1);
            if (!v) {
                drop_fd(s); /* the answer's bytes are still on the stream */
                rc = rlpi_error_set(RLP_E_NOMEM, "store %s: out of memory for a %zu-byte value", s->where, n);
                goto out;
            }
            rc = recv_all(s, v, n, deadline);
            if (rc == 1 && status != RLP_OK) {
                free(v);
                rc = status == RLP_E_FORMAT
                    ? rlpi_error_set(status, "store %s: key '%s' does not hold a counter", s->where, key)
                    : status == RLP_E_OVERFLOW
                    ? rlpi_error_set(status, "store %s: counter '%s' would overflow", s->where, key)
                    : rlpi_error_set(status, "store %s: the server failed on key '%s' (%s)", s->where, key,
                                     rlp_status_str(status));
                goto out;
            }
            if (rc == 1) {
                v[n] = 0;
                if (resp) {
                    *resp = v;
                    *resp_len = n;
                } else {
                    free(v);
                }
                rc = RLP_OK;
                goto out;
            }
            free(v);
        }
    }
    if (rc == 0)
        rc = timed_out(s, key, timeout_s);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rlpi_store_open(const char *host, int port, bool serve, double timeout_s, rlpi_store **out)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(host && host[0], "empty host");
    if (strlen(host) >= sizeof((rlpi_store *)0)->host)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_store_open: host '%.40s...' too long", host);
    if (port < (serve ? 0 : 1) || port > 65535)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_store_open: port %d out of range for %s:%d", port, host, port);
    if (!(timeout_s > 0))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_store_open: timeout %g s for %s:%d is not positive", timeout_s,
                              host, port);
    double deadline = isinf(timeout_s) ? INFINITY : rlpi_now_s() + timeout_s;
    rlpi_store *s = calloc(1, sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "store %s:%d: out of memory", host, port);
    s->fd = -1;
    s->timeout_s = timeout_s;
    /* "[::1]" as in a URL: getaddrinfo wants the address without brackets */
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']')
        snprintf(s->host, sizeof s->host, "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(s->host, sizeof s->host, "%s", host);
    int rc = RLP_OK;
    if (serve && (rc = server_start(port, &s->srv)) != RLP_OK) {
        free(s);
        return rc;
    }
    if (serve)
        port = s->srv->port;
    snprintf(s->port_str, sizeof s->port_str, "%d", port);
    snprintf(s->where, sizeof s->where, strchr(s->host, ':') ? "[%s]:%d" : "%s:%d", s->host, port);
    int e = pthread_mutex_init(&s->mu, NULL);
    if (e != 0) {
        server_stop(s->srv);
        free(s);
        return rlpi_error_set(RLP_E_NOMEM, "store %s: cannot create a mutex: %s", host, strerror(e));
    }
    if ((rc = store_connect(s, deadline, timeout_s, false)) != RLP_OK) {
        rlpi_store_close(s);
        return rc;
    }
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    int g = getsockname(s->fd, (struct sockaddr *)&me, &ml) != 0
        ? EAI_SYSTEM
        : getnameinfo((struct sockaddr *)&me, ml, s->local, sizeof s->local, NULL, 0, NI_NUMERICHOST);
    if (g != 0) {
        rc = rlpi_error_set(RLP_E_IO, "store %s: cannot read this end's address: %s", s->where,
                            g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        rlpi_store_close(s);
        return rc;
    }
    if (strncmp(s->local, "::ffff:", 7) == 0 && strchr(s->local + 7, '.'))
        memmove(s->local, s->local + 7, strlen(s->local + 7) + 1);
    *out = s;
    return RLP_OK;
}

int rlpi_store_port(const rlpi_store *s)
{
    return s && s->srv ? s->srv->port : 0;
}

const char *rlpi_store_local_address(const rlpi_store *s)
{
    return s ? s->local : NULL;
}

int rlpi_store_set(rlpi_store *s, const char *key, const void *value, size_t len)
{
    size_t klen;
    RLPI_CHECK_ARG(s, "store is NULL");
    int rc = check_key(__func__, key, &klen);
    if (rc != RLP_OK)
        return rc;
    RLPI_CHECK_ARG(value || len == 0, "value is NULL");
    if (len > RLPI_STORE_MAX_VALUE)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_store_set: value of key '%s' has %zu bytes, more than %zu", key,
                              len, RLPI_STORE_MAX_VALUE);
    return request(s, OP_SET, key, klen, value, len, s->timeout_s, NULL, NULL);
}

int rlpi_store_get(rlpi_store *s, const char *key, void **value, size_t *len, double timeout_s)
{
    size_t klen;
    RLPI_CHECK_ARG(s, "store is NULL");
    int rc = check_key(__func__, key, &klen);
    if (rc != RLP_OK)
        return rc;
    RLPI_CHECK_ARG(value && len, "value or len is NULL");
    if (!(timeout_s > 0))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_store_get: timeout %g s for key '%s' is not positive", timeout_s,
                              key);
    unsigned char *v = NULL;
    size_t n = 0;
    rc = request(s, OP_GET, key, klen, NULL, 0, timeout_s, &v, &n);
    if (rc == RLP_OK) {
        *value = v;
        *len = n;
    }
    return rc;
}

int rlpi_store_add(rlpi_store *s, const char *key, int64_t delta, int64_t *result)
{
    size_t klen;
    RLPI_CHECK_ARG(s, "store is NULL");
    int rc = check_key(__func__, key, &klen);
    if (rc != RLP_OK)
        return rc;
    unsigned char d[8], *v = NULL;
    size_t n = 0;
    put_le64(d, (uint64_t)delta);
    rc = request(s, OP_ADD, key, klen, d, 8, s->timeout_s, &v, &n);
    if (rc != RLP_OK)
        return rc;
    if (n != 8) {
        free(v);
        return rlpi_error_set(RLP_E_NETWORK, "store %s: ADD of key '%s' answered with %zu bytes, not 8", s->where, key,
                              n);
    }
    if (result)
        *result = (int64_t)get_le64(v);
    free(v);
    return RLP_OK;
}

void rlpi_store_close(rlpi_store *s)
{
    if (!s)
        return;
    drop_fd(s);
    server_stop(s->srv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
