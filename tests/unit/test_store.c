/* The TCP key-value store of the env:// rendezvous (lib/dist/store.h):
 * the request parser on partial, exact, pipelined and malformed frames;
 * a server with client threads (set/get/add round trips, a GET that waits
 * for another thread's SET, 800 ADDs from 8 threads that each see distinct
 * counts, values of 0 and of the largest size, key and value limits);
 * clients that start before their server, that find none (timeout), whose
 * GET times out and who then must not see the stale answer; a busy port;
 * a server closing under a blocked GET; raw sockets sending garbage, a
 * pipelined batch, a request queued behind a parked GET, one key past
 * the store's limit; the local address. Threads record results; assertions run on the main thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/clock.h"
#include "dist/store.h"
#include "rlpost.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How far past its timeout a failing open or GET may return: one connect
 * attempt to a refusing local port plus scheduling; the retry sleeps
 * (<= 200 ms) are cut to the deadline. Sanitizer builds do not slow sleeps. */
#define SLACK_S 0.5
#define OPEN_TIMEOUT_S 10.0

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A port nobody listens on now (bound to port 0 on every address, then closed). */
static int free_port(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0), zero = 0, port = 0;
    if (fd >= 0) {
        struct sockaddr_in6 a = {.sin6_family = AF_INET6};
        a.sin6_addr = in6addr_any;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        socklen_t l = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
            port = ntohs(a.sin6_port);
        close(fd);
    }
    if (!port) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t l = sizeof a;
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &l) == 0)
            port = ntohs(a.sin_port);
        if (fd >= 0)
            close(fd);
    }
    assert_true(port > 0);
    return port;
}

static rlpi_store *serve(void)
{
    rlpi_store *s = NULL;
    assert_int_equal(rlpi_store_open("127.0.0.1", 0, true, OPEN_TIMEOUT_S, &s), RLP_OK);
    assert_true(rlpi_store_port(s) > 0);
    return s;
}

static rlpi_store *client(const char *host, int port)
{
    rlpi_store *c = NULL;
    int rc = rlpi_store_open(host, port, false, OPEN_TIMEOUT_S, &c);
    if (rc != RLP_OK)
        fail_msg("open %s:%d: %s", host, port, rlp_error_last());
    assert_int_equal(rlpi_store_port(c), 0);
    return c;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* a request frame: op, key, value */
static size_t frame(unsigned char *b, int op, const char *key, const void *v, size_t vl)
{
    size_t kl = strlen(key);
    b[0] = (unsigned char)op;
    b[1] = (unsigned char)kl;
    memcpy(b + 2, key, kl);
    put_le32(b + 2 + kl, (uint32_t)vl);
    if (vl)
        memcpy(b + 6 + kl, v, vl);
    return 6 + kl + vl;
}

/* ---- the parser ---- */

static void test_parse(void **state)
{
    (void)state;
    unsigned char b[600];
    rlpi_store_request r;
    size_t used = 12345;
    size_t n = frame(b, 1, "alpha", "hello", 5);
    assert_int_equal(n, 16);
    for (size_t k = 0; k < n; k++) /* every proper prefix wants more */
        assert_int_equal(rlpi_store_parse_request(b, k, &r, &used), RLP_E_AGAIN);
    assert_int_equal(used, 12345); /* untouched until a frame is whole */
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_OK);
    assert_int_equal(used, n);
    assert_int_equal(r.op, 1);
    assert_int_equal(r.key_len, 5);
    assert_ptr_equal(r.key, (const char *)b + 2);
    assert_memory_equal(r.key, "alpha", 5);
    assert_int_equal(r.value_len, 5);
    assert_ptr_equal(r.value, b + 11);
    assert_memory_equal(r.value, "hello", 5);

    /* pipelined: the second frame starts where the first ended */
    size_t n2 = frame(b + n, 2, "beta", NULL, 0);
    size_t n3 = frame(b + n + n2, 4, "-", NULL, 0);
    assert_int_equal(rlpi_store_parse_request(b, n + n2 + n3 - 1, &r, &used), RLP_OK);
    assert_int_equal(used, n);
    assert_int_equal(rlpi_store_parse_request(b + n, n2 + n3 - 1, &r, &used), RLP_OK);
    assert_int_equal(r.op, 2);
    assert_int_equal(r.key_len, 4);
    assert_int_equal(r.value_len, 0);
    assert_int_equal(used, n2);
    assert_int_equal(rlpi_store_parse_request(b + n + n2, n3 - 1, &r, &used), RLP_E_AGAIN);
    assert_int_equal(rlpi_store_parse_request(b + n + n2, n3, &r, &used), RLP_OK);
    assert_int_equal(r.op, 4);

    /* ADD: an 8-byte delta */
    unsigned char d[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    n = frame(b, 3, "ctr", d, 8);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_OK);
    assert_int_equal(r.op, 3);
    assert_int_equal(r.value_len, 8);

    /* the largest key */
    char key[256];
    memset(key, 'k', 255);
    key[255] = 0;
    n = frame(b, 1, key, "v", 1);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_OK);
    assert_int_equal(r.key_len, 255);
    assert_int_equal(used, 262);

    /* malformed: refused as soon as the bytes that show it are there */
    unsigned char bad_op0[] = {0}, bad_op5[] = {5}, bad_op255[] = {255};
    assert_int_equal(rlpi_store_parse_request(bad_op0, 1, &r, &used), RLP_E_FORMAT);
    assert_int_equal(rlpi_store_parse_request(bad_op5, 1, &r, &used), RLP_E_FORMAT);
    assert_int_equal(rlpi_store_parse_request(bad_op255, 1, &r, &used), RLP_E_FORMAT);
    unsigned char empty_key[] = {1, 0};
    assert_int_equal(rlpi_store_parse_request(empty_key, 2, &r, &used), RLP_E_FORMAT);
    /* a value one byte over the limit, before any of it has come */
    n = frame(b, 1, "k", NULL, 0);
    put_le32(b + 3, (uint32_t)RLPI_STORE_MAX_VALUE + 1);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    put_le32(b + 3, 0xffffffffu);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    /* ... while exactly the limit only waits for the bytes */
    put_le32(b + 3, (uint32_t)RLPI_STORE_MAX_VALUE);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_AGAIN);
    /* GET and PING carry no value; ADD exactly 8 bytes; PING's key is "-" */
    n = frame(b, 2, "k", "x", 1);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    n = frame(b, 4, "-", "x", 1);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    n = frame(b, 4, "x", NULL, 0);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    n = frame(b, 3, "k", d, 7);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    n = frame(b, 3, "k", d, 0);
    assert_int_equal(rlpi_store_parse_request(b, n, &r, &used), RLP_E_FORMAT);
    assert_int_equal(rlpi_store_parse_request(b, 0, &r, &used), RLP_E_AGAIN);
}

/* ---- four clients on threads ---- */

typedef struct worker {
    rlpi_store *c;
    int id, n_workers;
    int rc;
    char err[256];
} worker;

#define ROUNDS 40

static void wfail(worker *w, int rc, const char *what)
{
    if (w->rc == RLP_OK) {
        w->rc = rc ? rc : RLP_E_INTERNAL;
        snprintf(w->err, sizeof w->err, "worker %d: %s: %s", w->id, what, rlp_error_last());
    }
}

static void *roundtrip_worker(void *arg)
{
    worker *w = arg;
    char key[64], want[64];
    for (int j = 0; j < ROUNDS && w->rc == RLP_OK; j++) {
        snprintf(key, sizeof key, "rt/%d/%d", w->id, j);
        int n = snprintf(want, sizeof want, "value of worker %d round %d", w->id, j);
        int rc = rlpi_store_set(w->c, key, want, (size_t)n);
        if (rc != RLP_OK)
            wfail(w, rc, "set");
        /* a neighbour's key of the same round: may not exist yet, GET waits */
        int peer = (w->id + 1) % w->n_workers;
        snprintf(key, sizeof key, "rt/%d/%d", peer, j);
        n = snprintf(want, sizeof want, "value of worker %d round %d", peer, j);
        void *v = NULL;
        size_t len = 0;
        rc = rlpi_store_get(w->c, key, &v, &len, OPEN_TIMEOUT_S);
        if (rc != RLP_OK)
            wfail(w, rc, "get");
        else if (len != (size_t)n || memcmp(v, want, len) != 0 || ((char *)v)[len] != 0)
            wfail(w, RLP_E_INTERNAL, "get returned a wrong value");
        free(v);
        int64_t now = 0;
        rc = rlpi_store_add(w->c, "rt/count", 1, &now);
        if (rc != RLP_OK)
            wfail(w, rc, "add");
        else if (now < 1 || now > ROUNDS * w->n_workers)
            wfail(w, RLP_E_INTERNAL, "add returned a count out of range");
    }
    return NULL;
}

typedef struct late_get {
    rlpi_store *c;
    const char *key;
    double timeout_s;
    int rc;
    void *value;
    size_t len;
    double returned_at;
} late_get;

static void *late_get_main(void *arg)
{
    late_get *g = arg;
    g->rc = rlpi_store_get(g->c, g->key, &g->value, &g->len, g->timeout_s);
    g->returned_at = rlpi_now_s();
    return NULL;
}

static void test_four_clients(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    int port = rlpi_store_port(srv);
    enum { W = 4 };
    worker w[W];
    pthread_t t[W];
    const char *hosts[W] = {"127.0.0.1", "localhost", "127.0.0.1", "localhost"};
    for (int i = 0; i < W; i++) {
        w[i] = (worker){.c = client(hosts[i], port), .id = i, .n_workers = W};
        assert_int_equal(pthread_create(&t[i], NULL, roundtrip_worker, &w[i]), 0);
    }
    for (int i = 0; i < W; i++) {
        pthread_join(t[i], NULL);
        if (w[i].rc != RLP_OK)
            fail_msg("%s", w[i].err);
    }
    int64_t total = -1;
    assert_int_equal(rlpi_store_add(srv, "rt/count", 0, &total), RLP_OK);
    assert_int_equal(total, ROUNDS * W);

    /* a GET that waits for a SET from another client */
    late_get g = {.c = w[0].c, .key = "late/key", .timeout_s = OPEN_TIMEOUT_S};
    pthread_t gt;
    assert_int_equal(pthread_create(&gt, NULL, late_get_main, &g), 0);
    sleep_ms(150);
    double set_at = rlpi_now_s();
    assert_int_equal(rlpi_store_set(w[1].c, "late/key", "arrived", 7), RLP_OK);
    pthread_join(gt, NULL);
    assert_int_equal(g.rc, RLP_OK);
    assert_int_equal(g.len, 7);
    assert_memory_equal(g.value, "arrived", 8); /* with its NUL */
    assert_true(g.returned_at >= set_at);       /* it did wait for the SET */
    free(g.value);

    /* SET replaces */
    assert_int_equal(rlpi_store_set(w[2].c, "late/key", "again!", 6), RLP_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rlpi_store_get(w[3].c, "late/key", &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(v, "again!", 6);
    free(v);
    for (int i = 0; i < W; i++)
        rlpi_store_close(w[i].c);
    rlpi_store_close(srv);
}

/* ---- ADD from 8 threads over 4 shared handles ---- */

#define ADDERS 8
#define ADDS 100

typedef struct adder {
    rlpi_store *c;
    int rc;
    int64_t seen[ADDS];
} adder;

static void *adder_main(void *arg)
{
    adder *a = arg;
    for (int i = 0; i < ADDS; i++) {
        int rc = rlpi_store_add(a->c, "adds", 1, &a->seen[i]);
        if (rc != RLP_OK && a->rc == RLP_OK)
            a->rc = rc;
    }
    return NULL;
}

static void test_concurrent_add(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    rlpi_store *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = client("127.0.0.1", rlpi_store_port(srv));
    adder a[ADDERS];
    pthread_t t[ADDERS];
    for (int i = 0; i < ADDERS; i++) {
        a[i] = (adder){.c = c[i % 4]}; /* two threads per handle: the handle's lock */
        assert_int_equal(pthread_create(&t[i], NULL, adder_main, &a[i]), 0);
    }
    bool hit[ADDERS * ADDS + 1] = {false};
    for (int i = 0; i < ADDERS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, RLP_OK);
        for (int j = 0; j < ADDS; j++) {
            int64_t v = a[i].seen[j];
            assert_true(v >= 1 && v <= ADDERS * ADDS);
            assert_false(hit[v]); /* every ADD saw its own count */
            hit[v] = true;
            if (j)
                assert_true(v > a[i].seen[j - 1]);
        }
    }
    int64_t total = 0;
    assert_int_equal(rlpi_store_add(c[0], "adds", 0, &total), RLP_OK);
    assert_int_equal(total, ADDERS * ADDS);
    /* negative deltas, and a GET of a counter: its 8 bytes, little-endian */
    assert_int_equal(rlpi_store_add(c[1], "adds", -1000, &total), RLP_OK);
    assert_int_equal(total, -200);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rlpi_store_get(c[2], "adds", &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 8);
    const unsigned char *p = v;
    assert_int_equal(p[0], 0x38); /* -200 = 0xffffffffffffff38 */
    for (int i = 1; i < 8; i++)
        assert_int_equal(p[i], 0xff);
    free(v);
    /* overflow is refused and leaves the counter as it was */
    assert_int_equal(rlpi_store_add(c[3], "big", INT64_MAX, &total), RLP_OK);
    assert_int_equal(rlpi_store_add(c[3], "big", 1, &total), RLP_E_OVERFLOW);
    assert_int_equal(rlpi_store_add(c[3], "big", 0, &total), RLP_OK);
    assert_true(total == INT64_MAX);
    /* ADD on a value that is not a counter */
    assert_int_equal(rlpi_store_set(c[0], "text", "abc", 3), RLP_OK);
    assert_int_equal(rlpi_store_add(c[0], "text", 1, &total), RLP_E_FORMAT);
    assert_int_equal(rlpi_store_add(c[0], "adds", 1, &total), RLP_OK); /* the connection goes on */
    assert_int_equal(total, -199);
    for (int i = 0; i < 4; i++)
        rlpi_store_close(c[i]);
    rlpi_store_close(srv);
}

/* ---- sizes and arguments ---- */

static void test_limits(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    rlpi_store *c = client("127.0.0.1", rlpi_store_port(srv));
    void *v = NULL;
    size_t len = 99;

    /* an empty value: a NUL-terminated empty buffer */
    assert_int_equal(rlpi_store_set(c, "empty", NULL, 0), RLP_OK);
    assert_int_equal(rlpi_store_get(c, "empty", &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 0);
    assert_non_null(v);
    assert_int_equal(((char *)v)[0], 0);
    free(v);

    /* the largest value, through the server's buffers and back */
    unsigned char *big = malloc(RLPI_STORE_MAX_VALUE + 1);
    assert_non_null(big);
    for (size_t i = 0; i <= RLPI_STORE_MAX_VALUE; i++)
        big[i] = (unsigned char)(i * 2654435761u >> 13);
    assert_int_equal(rlpi_store_set(c, "big", big, RLPI_STORE_MAX_VALUE), RLP_OK);
    rlpi_store *c2 = client("localhost", rlpi_store_port(srv));
    assert_int_equal(rlpi_store_get(c2, "big", &v, &len, 5.0), RLP_OK);
    assert_int_equal(len, RLPI_STORE_MAX_VALUE);
    assert_memory_equal(v, big, RLPI_STORE_MAX_VALUE);
    assert_int_equal(((unsigned char *)v)[len], 0);
    free(v);
    assert_int_equal(rlpi_store_set(c, "big", big, RLPI_STORE_MAX_VALUE + 1), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "big"));

    /* keys: 255 bytes fine, 256 and empty refused */
    char key[258];
    memset(key, 'k', sizeof key);
    key[255] = 0;
    assert_int_equal(rlpi_store_set(c, key, "x", 1), RLP_OK);
    assert_int_equal(rlpi_store_get(c2, key, &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 1);
    free(v);
    key[255] = 'k';
    key[256] = 0;
    assert_int_equal(rlpi_store_set(c, key, "x", 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_get(c, key, &v, &len, 1.0), RLP_E_INVALID_ARG);
    int64_t r;
    assert_int_equal(rlpi_store_add(c, key, 1, &r), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_set(c, "", "x", 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_set(c, NULL, "x", 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_set(c, "k", NULL, 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_set(NULL, "k", "x", 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_get(c, "k", NULL, &len, 1.0), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_get(c, "k", &v, &len, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_get(c, "k", &v, &len, -1), RLP_E_INVALID_ARG);
    /* none of the refusals broke the connection */
    assert_int_equal(rlpi_store_add(c, "n", 5, &r), RLP_OK);
    assert_int_equal(r, 5);

    /* open's arguments */
    rlpi_store *x = NULL;
    assert_int_equal(rlpi_store_open(NULL, 1234, false, 1.0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("", 1234, false, 1.0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("127.0.0.1", 0, false, 1.0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("127.0.0.1", 65536, true, 1.0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("127.0.0.1", -1, true, 1.0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("127.0.0.1", 1234, false, 0, &x), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_store_open("127.0.0.1", 1234, false, 1.0, NULL), RLP_E_INVALID_ARG);
    /* a name no resolver knows: INVALID_ARG at once, or TIMEOUT where the
     * resolver itself cannot be reached (EAI_AGAIN is retried) */
    int rc = rlpi_store_open("300.1.2.3.4", 1234, false, 1.0, &x);
    assert_true(rc == RLP_E_INVALID_ARG || rc == RLP_E_TIMEOUT);
    assert_null(x);
    assert_int_equal(rlpi_store_port(NULL), 0);
    rlpi_store_close(NULL);

    free(big);
    rlpi_store_close(c2);
    rlpi_store_close(c);
    rlpi_store_close(srv);
}

/* ---- start order, timeouts, a busy port, the server going away ---- */

typedef struct opener {
    const char *host;
    int port;
    double timeout_s;
    int rc;
    rlpi_store *s;
    char err[256];
} opener;

static void *opener_main(void *arg)
{
    opener *o = arg;
    o->rc = rlpi_store_open(o->host, o->port, false, o->timeout_s, &o->s);
    if (o->rc != RLP_OK)
        snprintf(o->err, sizeof o->err, "%s", rlp_error_last());
    return NULL;
}

static void test_client_before_server(void **state)
{
    (void)state;
    int port = free_port();
    opener o = {.host = "127.0.0.1", .port = port, .timeout_s = OPEN_TIMEOUT_S};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, opener_main, &o), 0);
    sleep_ms(300);
    rlpi_store *srv = NULL;
    assert_int_equal(rlpi_store_open("127.0.0.1", port, true, OPEN_TIMEOUT_S, &srv), RLP_OK);
    assert_int_equal(rlpi_store_port(srv), port);
    pthread_join(t, NULL);
    if (o.rc != RLP_OK)
        fail_msg("early client: %s", o.err);
    assert_int_equal(rlpi_store_set(o.s, "early", "bird", 4), RLP_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rlpi_store_get(srv, "early", &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(v, "bird", 4);
    free(v);
    rlpi_store_close(o.s);
    rlpi_store_close(srv);
}

static void test_no_server_times_out(void **state)
{
    (void)state;
    int port = free_port();
    const double timeout = 0.6;
    rlpi_store *c = NULL;
    double t0 = rlpi_now_s();
    assert_int_equal(rlpi_store_open("127.0.0.1", port, false, timeout, &c), RLP_E_TIMEOUT);
    double took = rlpi_now_s() - t0;
    assert_null(c);
    assert_true(took >= timeout - 0.01);
    if (took > timeout + SLACK_S)
        fail_msg("open took %.3f s for a %.3f s timeout", took, timeout);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    assert_non_null(strstr(rlp_error_last(), where));
}

static void test_get_timeout_then_go_on(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    rlpi_store *c = client("127.0.0.1", rlpi_store_port(srv));
    rlpi_store *other = client("127.0.0.1", rlpi_store_port(srv));
    void *v = NULL;
    size_t len = 0;
    double t0 = rlpi_now_s();
    assert_int_equal(rlpi_store_get(c, "missing", &v, &len, 0.2), RLP_E_TIMEOUT);
    double took = rlpi_now_s() - t0;
    assert_true(took >= 0.2 - 0.001);
    if (took > 0.2 + SLACK_S)
        fail_msg("GET took %.3f s for a 0.2 s timeout", took);
    assert_non_null(strstr(rlp_error_last(), "missing"));
    assert_null(v);
    /* the key arrives later: the handle must answer its next GET with that
     * GET's value, not with the late answer to the one that timed out */
    assert_int_equal(rlpi_store_set(other, "missing", "late", 4), RLP_OK);
    assert_int_equal(rlpi_store_set(other, "second", "fresh!", 6), RLP_OK);
    sleep_ms(50);
    assert_int_equal(rlpi_store_get(c, "second", &v, &len, 2.0), RLP_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(v, "fresh!", 6);
    free(v);
    assert_int_equal(rlpi_store_get(c, "missing", &v, &len, 2.0), RLP_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(v, "late", 4);
    free(v);
    rlpi_store_close(other);
    rlpi_store_close(c);
    rlpi_store_close(srv);
}

static void test_busy_port(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    int port = rlpi_store_port(srv);
    rlpi_store *second = NULL;
    assert_int_equal(rlpi_store_open("127.0.0.1", port, true, 1.0, &second), RLP_E_IO);
    assert_null(second);
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    assert_non_null(strstr(rlp_error_last(), p));
    /* the first server still serves */
    int64_t r = 0;
    assert_int_equal(rlpi_store_add(srv, "alive", 2, &r), RLP_OK);
    assert_int_equal(r, 2);
    rlpi_store_close(srv);
    /* and its port is free again once it is closed (SO_REUSEADDR) */
    assert_int_equal(rlpi_store_open("127.0.0.1", port, true, 1.0, &second), RLP_OK);
    assert_int_equal(rlpi_store_port(second), port);
    rlpi_store_close(second);
}

static void test_server_close_unblocks_get(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    rlpi_store *c = client("127.0.0.1", rlpi_store_port(srv));
    late_get g = {.c = c, .key = "never", .timeout_s = OPEN_TIMEOUT_S};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_get_main, &g), 0);
    sleep_ms(200);
    double closed_at = rlpi_now_s();
    rlpi_store_close(srv);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, RLP_E_CLOSED);
    assert_null(g.value);
    if (g.returned_at - closed_at > 1.0)
        fail_msg("the blocked GET returned %.3f s after the server closed", g.returned_at - closed_at);
    /* and so does everything after */
    assert_int_equal(rlpi_store_set(c, "k", "v", 1), RLP_E_CLOSED);
    int64_t r;
    assert_int_equal(rlpi_store_add(c, "k", 1, &r), RLP_E_CLOSED);
    rlpi_store_close(c);
}

/* ---- raw sockets ---- */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Reads exactly n bytes within 2 s: the count read. */
static size_t raw_read(int fd, void *p, size_t n)
{
    size_t got = 0;
    double end = rlpi_now_s() + 2.0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - rlpi_now_s()) * 1000);
        if (ms <= 0 || poll(&pf, 1, ms) <= 0)
            break;
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* Whether the server closes fd within 2 s (EOF or a reset, no answer bytes). */
static bool raw_closed(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 2000) <= 0)
        return false;
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

static void raw_send(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void test_garbage_closes_only_its_connection(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    int port = rlpi_store_port(srv);
    rlpi_store *good = client("127.0.0.1", port);
    assert_int_equal(rlpi_store_set(good, "g", "1", 1), RLP_OK);

    unsigned char b[64];
    size_t n;
    struct {
        const char *what;
        unsigned char bytes[16];
        size_t len;
    } cases[] = {
        {"unknown op", {9, 1, 'k', 0, 0, 0, 0}, 7},
        {"op 0", {0}, 1},
        {"empty key", {1, 0, 0, 0, 0, 0}, 6},
        {"value over the limit", {1, 1, 'k', 1, 0, 0x10, 0}, 7}, /* 1 MiB + 1 */
        {"GET with a value", {2, 1, 'k', 1, 0, 0, 0, 'x'}, 8},
        {"ADD of 4 bytes", {3, 1, 'k', 4, 0, 0, 0, 1, 0, 0, 0}, 11},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = raw_connect(port);
        raw_send(fd, cases[i].bytes, cases[i].len);
        if (!raw_closed(fd))
            fail_msg("%s: the server kept the connection", cases[i].what);
        close(fd);
        /* the others are served as before */
        int64_t r = 0;
        assert_int_equal(rlpi_store_add(good, "after", 1, &r), RLP_OK);
        assert_int_equal(r, (int64_t)i + 1);
    }

    /* a peer that leaves mid-frame, and one with a parked GET */
    int fd = raw_connect(port);
    raw_send(fd, (unsigned char[]){1, 5, 'a', 'b'}, 4);
    close(fd);
    fd = raw_connect(port);
    n = frame(b, 2, "nobody-sets-this", NULL, 0);
    raw_send(fd, b, n);
    close(fd);

    /* a pipelined batch: answers in order */
    fd = raw_connect(port);
    n = frame(b, 1, "pipe", "v", 1);
    n += frame(b + n, 2, "pipe", NULL, 0);
    n += frame(b + n, 4, "-", NULL, 0);
    unsigned char delta[8] = {3};
    n += frame(b + n, 3, "pipe-ctr", delta, 8);
    raw_send(fd, b, n);
    unsigned char want[] = {0, 0, 0, 0, 0,                            /* SET */
                            0, 1, 0, 0, 0, 'v',                       /* GET */
                            0, 0, 0, 0, 0,                            /* PING */
                            0, 8, 0, 0, 0, 3,   0, 0, 0, 0, 0, 0, 0}; /* ADD */
    unsigned char got[sizeof want];
    assert_int_equal(raw_read(fd, got, sizeof got), sizeof got);
    assert_memory_equal(got, want, sizeof want);
    /* ADD on a non-counter: a status byte, RLP_E_FORMAT negated */
    n = frame(b, 3, "pipe", delta, 8);
    raw_send(fd, b, n);
    assert_int_equal(raw_read(fd, got, 5), 5);
    assert_memory_equal(got, ((unsigned char[]){(unsigned char)-RLP_E_FORMAT, 0, 0, 0, 0}), 5);

    /* a request behind a parked GET waits for it: order is kept */
    n = frame(b, 2, "parked", NULL, 0);
    n += frame(b + n, 1, "behind", "B", 1);
    raw_send(fd, b, n);
    void *v = NULL;
    size_t len;
    assert_int_equal(rlpi_store_get(good, "behind", &v, &len, 0.3), RLP_E_TIMEOUT);
    assert_int_equal(rlpi_store_set(good, "parked", "P", 1), RLP_OK);
    unsigned char want2[] = {0, 1, 0, 0, 0, 'P', 0, 0, 0, 0, 0};
    assert_int_equal(raw_read(fd, got, sizeof want2), sizeof want2);
    assert_memory_equal(got, want2, sizeof want2);
    assert_int_equal(rlpi_store_get(good, "behind", &v, &len, 2.0), RLP_OK);
    assert_int_equal(len, 1);
    assert_memory_equal(v, "B", 1);
    free(v);
    close(fd);

    assert_int_equal(rlpi_store_get(good, "g", &v, &len, 1.0), RLP_OK);
    assert_memory_equal(v, "1", 2);
    free(v);
    rlpi_store_close(good);
    rlpi_store_close(srv);
}

/* The store holds at most RLPI_STORE_MAX_KEYS keys: a SET of one more
 * closes that connection; replacing a key, and other connections, go on. */
static void test_key_limit(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    int port = rlpi_store_port(srv);
    rlpi_store *good = client("127.0.0.1", port);
    int fd = raw_connect(port);
    enum { CHUNK = 4096 };
    unsigned char *b = malloc(CHUNK * 16), *acks = malloc(CHUNK * 5);
    assert_non_null(b);
    assert_non_null(acks);
    char key[16];
    for (int first = 0; first < RLPI_STORE_MAX_KEYS; first += CHUNK) {
        size_t n = 0;
        for (int i = first; i < first + CHUNK; i++) {
            snprintf(key, sizeof key, "%05x", i);
            n += frame(b + n, 1, key, "", 0);
        }
        raw_send(fd, b, n);
        assert_int_equal(raw_read(fd, acks, CHUNK * 5), CHUNK * 5);
        for (int i = 0; i < CHUNK * 5; i++)
            assert_int_equal(acks[i], 0);
    }
    size_t n = frame(b, 1, "one-too-many", "", 0);
    raw_send(fd, b, n);
    assert_true(raw_closed(fd));
    close(fd);
    assert_int_equal(rlpi_store_set(good, "00000", "x", 1), RLP_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rlpi_store_get(good, "0ffff", &v, &len, 1.0), RLP_OK);
    assert_int_equal(len, 0);
    free(v);
    assert_int_equal(rlpi_store_get(good, "00000", &v, &len, 1.0), RLP_OK);
    assert_memory_equal(v, "x", 2);
    free(v);
    free(b);
    free(acks);
    rlpi_store_close(good);
    rlpi_store_close(srv);
}

/* ---- the local address ---- */

static void test_local_address(void **state)
{
    (void)state;
    rlpi_store *srv = serve();
    int port = rlpi_store_port(srv);
    assert_string_equal(rlpi_store_local_address(srv), "127.0.0.1");
    rlpi_store *c = NULL;
    /* the server listens on every address: IPv6 where this host has it */
    if (rlpi_store_open("::1", port, false, 1.0, &c) == RLP_OK) {
        assert_string_equal(rlpi_store_local_address(c), "::1");
        rlpi_store_close(c);
        c = NULL;
        /* an IPv4-mapped address reads as dotted IPv4 */
        assert_int_equal(rlpi_store_open("::ffff:127.0.0.1", port, false, 1.0, &c), RLP_OK);
        assert_string_equal(rlpi_store_local_address(c), "127.0.0.1");
        rlpi_store_close(c);
        c = NULL;
        assert_int_equal(rlpi_store_open("[::1]", port, false, 1.0, &c), RLP_OK);
        assert_int_equal(rlpi_store_set(c, "v6", "", 0), RLP_OK);
        rlpi_store_close(c);
    } else {
        print_message("no IPv6 loopback here: %s\n", rlp_error_last());
    }
    rlpi_store_close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_four_clients),
        cmocka_unit_test(test_concurrent_add),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_client_before_server),
        cmocka_unit_test(test_no_server_times_out),
        cmocka_unit_test(test_get_timeout_then_go_on),
        cmocka_unit_test(test_busy_port),
        cmocka_unit_test(test_server_close_unblocks_get),
        cmocka_unit_test(test_garbage_closes_only_its_connection),
        cmocka_unit_test(test_key_limit),
        cmocka_unit_test(test_local_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
