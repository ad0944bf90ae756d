/* The shared retrying HTTP queue (lib/core/http_queue) against an in-test
 * libmicrohttpd server: a 503 retried until it succeeds, a 4xx never
 * retried, a refused URL left for the next one, backoff that stops at the
 * deadline, an abort while a retry waits, and many requests at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/http_queue.h"
#include "http_test_server.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef struct server {
    http_test_server http;
    atomic_int flaky, always503, bad, ok; /* hits per path */
} server;

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *body, size_t len)
{
    server *s = cls;
    (void)method;
    if (!strcmp(url, "/flaky")) /* 503 twice, then the answer */
        return atomic_fetch_add(&s->flaky, 1) < 2 ? http_test_reply(conn, 503, "{\"busy\":1}")
                                                  : http_test_reply(conn, 200, "{\"ok\":1}");
    if (!strcmp(url, "/always503")) {
        atomic_fetch_add(&s->always503, 1);
        return http_test_reply(conn, 503, "{}");
    }
    if (!strcmp(url, "/bad")) {
        atomic_fetch_add(&s->bad, 1);
        return http_test_reply(conn, 400, "{\"error\":\"bad\"}");
    }
    atomic_fetch_add(&s->ok, 1); /* echoes the body */
    return http_test_reply_n(conn, 200, body ? body : "", len);
}

static server *srv;

static int setup(void **state)
{
    (void)state;
    srv = calloc(1, sizeof *srv);
    http_test_server_start(&srv->http, handle, srv);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    http_test_server_stop(&srv->http);
    free(srv);
    return 0;
}

static char urlbuf[8][128];

static const char *url(int i, const char *path)
{
    snprintf(urlbuf[i], sizeof urlbuf[i], "%s%s", srv->http.base, path);
    return urlbuf[i];
}

static void req_init(rlpi_http_req *r, const char *const *urls, size_t n_urls, uint32_t max_retries)
{
    memset(r, 0, sizeof *r);
    r->urls = urls;
    r->n_urls = n_urls;
    r->body = "{\"q\":1}";
    r->body_len = strlen(r->body);
    r->timeout_ms = 5000;
    r->connect_timeout_ms = 2000;
    r->response_limit = 4096;
    r->max_retries = max_retries;
}

static rlpi_http_queue *queue(uint32_t backoff_ms, int (*abort_fn)(void *), void *payload)
{
    rlpi_http_queue_opts o = {.max_in_flight = 4,
                              .backoff_ms = backoff_ms,
                              .max_backoff_ms = backoff_ms,
                              .poll_ms = 50,
                              .abort = abort_fn,
                              .payload = payload};
    rlpi_http_queue *q;
    assert_int_equal(rlpi_http_queue_create(&q, &o), RLP_OK);
    return q;
}

static void test_retry_503_then_success(void **state)
{
    (void)state;
    rlpi_http_queue *q = queue(10, NULL, NULL);
    const char *u[1] = {url(0, "/flaky")};
    rlpi_http_req r;
    req_init(&r, u, 1, 5);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.curl_rc, CURLE_OK);
    assert_int_equal(r.http_code, 200);
    assert_int_equal(r.attempts, 3); /* two 503s, then the answer */
    assert_int_equal(atomic_load(&srv->flaky), 3);
    assert_int_equal(r.resp.len, 8);
    assert_memory_equal(r.resp.data, "{\"ok\":1}", 8);
    rlpi_http_req_release(&r);

    /* too few retries: the last 503 is the result */
    atomic_store(&srv->flaky, 0);
    req_init(&r, u, 1, 1);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.http_code, 503);
    assert_int_equal(r.attempts, 2);
    rlpi_http_req_release(&r);
    rlpi_http_queue_free(q);
}

static void test_4xx_not_retried(void **state)
{
    (void)state;
    rlpi_http_queue *q = queue(10, NULL, NULL);
    const char *u[1] = {url(0, "/bad")};
    rlpi_http_req r;
    req_init(&r, u, 1, 5);
    int before = atomic_load(&srv->bad);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.http_code, 400);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(atomic_load(&srv->bad) - before, 1);
    rlpi_http_req_release(&r);
    rlpi_http_queue_free(q);
}

static void test_refused_then_next_url(void **state)
{
    (void)state;
    int fd;
    int port = http_test_dead_port(&fd);
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d/ok", port);
    rlpi_http_queue *q = queue(10, NULL, NULL);
    const char *u[2] = {dead, url(0, "/ok")};
    rlpi_http_req r;
    req_init(&r, u, 2, 1);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.attempts, 2);
    assert_int_equal(r.url, 1); /* the retry went to the next URL */
    assert_int_equal(r.http_code, 200);
    assert_int_equal(r.resp.len, r.body_len); /* the echo */
    rlpi_http_req_release(&r);

    /* without a retry the refusal is the result */
    req_init(&r, u, 2, 0);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.curl_rc, CURLE_COULDNT_CONNECT);
    assert_int_equal(r.http_code, 0);
    assert_int_equal(r.attempts, 1);
    rlpi_http_req_release(&r);
    rlpi_http_queue_free(q);
    close(fd);
}

static void test_backoff_stops_at_deadline(void **state)
{
    (void)state;
    /* 100 ms between attempts, no jitter; 1000 retries would take 100 s */
    rlpi_http_queue *q = queue(100, NULL, NULL);
    const char *u[1] = {url(0, "/always503")};
    rlpi_http_req r;
    req_init(&r, u, 1, 1000);
    uint64_t t0 = rlpi_now_ns();
    r.deadline_ns = t0 + 350 * 1000000ull;
    int before = atomic_load(&srv->always503);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    uint64_t t1 = rlpi_now_ns();
    assert_int_equal(r.outcome, RLPI_HQ_DONE);
    assert_int_equal(r.http_code, 503);
    /* attempts at about 0, 100, 200, 300 ms; none whose wait ends past 350 ms */
    assert_true(r.attempts >= 2 && r.attempts <= 4);
    assert_int_equal(atomic_load(&srv->always503) - before, (int)r.attempts);
    /* it gave up instead of waiting: no retry starts after the deadline */
    assert_true(t1 < r.deadline_ns + 2000 * 1000000ull);
    rlpi_http_req_release(&r);

    /* a deadline already past: nothing starts */
    req_init(&r, u, 1, 3);
    r.deadline_ns = rlpi_now_ns() - 1;
    before = atomic_load(&srv->always503);
    assert_int_equal(rlpi_http_queue_run(q, &r, 1), RLP_OK);
    assert_int_equal(r.outcome, RLPI_HQ_NOSTART);
    assert_int_equal(r.attempts, 0);
    assert_int_equal(atomic_load(&srv->always503), before);
    rlpi_http_queue_free(q);
}

typedef struct abort_state {
    rlpi_http_req *r; /* (2) */
    int aborts;
} abort_state;

/* Says stop once both requests' first attempts have ended with their 503
 * (the queue sets http_code when an attempt ends): the queue is then
 * waiting out their 10 s backoffs. */
static int abort_after_first(void *payload)
{
    abort_state *a = payload;
    if (a->r[0].http_code != 503 || a->r[1].http_code != 503)
        return 0;
    a->aborts++;
    return 1;
}

static void test_abort_while_waiting(void **state)
{
    (void)state;
    atomic_store(&srv->always503, 0);
    rlpi_http_req r[2];
    abort_state a = {r, 0};
    rlpi_http_queue *q = queue(10000, abort_after_first, &a);
    const char *u[1] = {url(0, "/always503")};
    req_init(&r[0], u, 1, 3);
    req_init(&r[1], u, 1, 3);
    uint64_t t0 = rlpi_now_ns();
    assert_int_equal(rlpi_http_queue_run(q, r, 2), RLP_E_CLOSED);
    uint64_t t1 = rlpi_now_ns();
    assert_int_equal(a.aborts, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].outcome, RLPI_HQ_ABORTED);
        assert_int_equal(r[i].attempts, 1); /* the retry never started */
        rlpi_http_req_release(&r[i]);
    }
    assert_int_equal(atomic_load(&srv->always503), 2);
    assert_true(t1 - t0 < 5000 * 1000000ull); /* not the 10 s backoff */
    rlpi_http_queue_free(q);
}

static void test_many_at_once(void **state)
{
    (void)state;
    rlpi_http_queue *q = queue(10, NULL, NULL); /* at most 4 in flight */
    enum { N = 12 };
    const char *u_ok[1] = {url(0, "/ok")}, *u_bad[1] = {url(1, "/bad")};
    rlpi_http_req r[N];
    char bodies[N][32];
    for (int i = 0; i < N; i++) {
        req_init(&r[i], i % 3 == 2 ? u_bad : u_ok, 1, 2);
        snprintf(bodies[i], sizeof bodies[i], "{\"i\":%d}", i);
        r[i].body = bodies[i];
        r[i].body_len = strlen(bodies[i]);
    }
    assert_int_equal(rlpi_http_queue_run(q, r, N), RLP_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].outcome, RLPI_HQ_DONE);
        assert_int_equal(r[i].attempts, 1);
        if (i % 3 == 2) {
            assert_int_equal(r[i].http_code, 400);
        } else { /* each got its own answer back */
            assert_int_equal(r[i].http_code, 200);
            assert_int_equal(r[i].resp.len, strlen(bodies[i]));
            assert_memory_equal(r[i].resp.data, bodies[i], r[i].resp.len);
        }
        rlpi_http_req_release(&r[i]);
    }
    rlpi_http_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_503_then_success), cmocka_unit_test(test_4xx_not_retried),
        cmocka_unit_test(test_refused_then_next_url),  cmocka_unit_test(test_backoff_stops_at_deadline),
        cmocka_unit_test(test_abort_while_waiting),    cmocka_unit_test(test_many_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
