/* Test helper shared by the tests that talk to an in-test libmicrohttpd
 * server (remote client, HTTP reward verifier, HTTP weight transport): a
 * daemon on an ephemeral loopback port, a thread per connection (so a
 * stalled handler holds up no other request), that collects each request's
 * body and hands it whole to the test's handler; reply helpers; shutdown;
 * a loopback port that refuses connections.
 * The test keeps its own routes, fault injection and counters. Test-only.
 *
 * Embed an http_test_server in the test's server struct, start it with the
 * handler and that struct as cls, and read the URL from its `base`. */
#ifndef RLPOST_TESTS_HTTP_TEST_SERVER_H
#define RLPOST_TESTS_HTTP_TEST_SERVER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Answers one request whose body has fully arrived: `body` is NUL-terminated
 * (NULL when the request had none), `len` its length without the NUL. */
typedef enum MHD_Result (*http_test_handler)(void *cls, struct MHD_Connection *conn,
                                             const char *url, const char *method,
                                             const char *body, size_t len);

typedef struct http_test_server {
    struct MHD_Daemon *d;
    char base[64];         /* "http://127.0.0.1:<port>" */
    atomic_int stopping;   /* set by http_test_server_stop: ends a handler's stall */
    http_test_handler handler;
    void *cls;
} http_test_server;

typedef struct http_test_upload {
    char *buf;
    size_t len;
} http_test_upload;

/* Sends `len` bytes of `body` (copied) as application/json. */
static inline enum MHD_Result http_test_reply_n(struct MHD_Connection *conn, unsigned code,
                                                const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ok;
}

/* Sends the string `body` as application/json. */
static inline enum MHD_Result http_test_reply(struct MHD_Connection *conn, unsigned code,
                                              const char *body)
{
    return http_test_reply_n(conn, code, body, strlen(body));
}

/* A 200 whose body `cb` produces in 4 KiB blocks; `size` may be
 * MHD_SIZE_UNKNOWN (chunked). */
static inline enum MHD_Result http_test_reply_stream(struct MHD_Connection *conn, uint64_t size,
                                                     MHD_ContentReaderCallback cb)
{
    struct MHD_Response *r = MHD_create_response_from_callback(size, 4096, cb, NULL, NULL);
    if (!r)
        return MHD_NO;
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* MHD's access handler: accumulates the upload, then calls the test's. */
static inline enum MHD_Result http_test_on_access(void *cls, struct MHD_Connection *conn,
                                                  const char *url, const char *method,
                                                  const char *version, const char *data,
                                                  size_t *data_size, void **req_cls)
{
    (void)version;
    http_test_server *hs = cls;
    http_test_upload *u = *req_cls;
    if (!u) {
        *req_cls = u = calloc(1, sizeof *u);
        return u ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        char *b = realloc(u->buf, u->len + *data_size + 1);
        if (!b)
            return MHD_NO;
        memcpy(b + u->len, data, *data_size);
        u->buf = b;
        u->len += *data_size;
        u->buf[u->len] = '\0';
        *data_size = 0;
        return MHD_YES;
    }
    return hs->handler(hs->cls, conn, url, method, u->buf, u->len);
}

/* Frees the upload when MHD is done with the request, however it ended. */
static inline void http_test_on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                                          enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    http_test_upload *u = *req_cls;
    if (u) {
        free(u->buf);
        free(u);
        *req_cls = NULL;
    }
}

/* Starts the daemon on 127.0.0.1, an ephemeral port, and fills in hs->base;
 * `handler` answers each request with `cls`. Fails the test when it cannot. */
static inline void http_test_server_start(http_test_server *hs, http_test_handler handler,
                                          void *cls)
{
    hs->handler = handler;
    hs->cls = cls;
    atomic_init(&hs->stopping, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = 0; /* ephemeral */
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* a thread per connection, so a stalled handler holds up no other */
    hs->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0,
                             NULL, NULL, http_test_on_access, hs, MHD_OPTION_SOCK_ADDR,
                             (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
                             http_test_on_completed, NULL, MHD_OPTION_END);
    assert_non_null(hs->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(hs->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    assert_true(info->port > 0);
    snprintf(hs->base, sizeof hs->base, "http://127.0.0.1:%u", (unsigned)info->port);
}

/* A port on 127.0.0.1 where nothing listens: a socket bound to an ephemeral
 * port and never listening, so connecting to it is refused. The caller
 * closes *fd (after which the port is free again, still with no listener). */
static inline int http_test_dead_port(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(*fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&sa, &len), 0);
    return ntohs(sa.sin_port);
}

/* Raises `stopping` (a stalling handler should poll it), then stops the
 * daemon, which waits for the connection threads. */
static inline void http_test_server_stop(http_test_server *hs)
{
    atomic_store(&hs->stopping, 1);
    MHD_stop_daemon(hs->d);
    hs->d = NULL;
}

#endif
