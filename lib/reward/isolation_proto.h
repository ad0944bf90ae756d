/* The wire format between a process-isolated reward handle (isolated.c)
 * and its worker executable (reward_worker.c): length-prefixed binary
 * frames over a local socket, both ends built from the same sources (the
 * handshake checks the version). Header-only because the worker links
 * the shared library, which exports rlp_* only. Every read is
 * bounds-checked: a reader never trusts a length it was sent. */
#ifndef RLPI_REWARD_ISOLATION_PROTO_H
#define RLPI_REWARD_ISOLATION_PROTO_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define RLPI_ISO_MAGIC 0x574c5052u   /* "RPLW" */
#define RLPI_ISO_PROTOCOL 1u
#define RLPI_ISO_NONE UINT64_MAX     /* a NULL string */
#define RLPI_ISO_FD 3                /* the worker's end of the socket */
/* Largest frame either side accepts: a request of batch_size samples
 * with long completions fits many times over. */
#define RLPI_ISO_MAX_FRAME ((uint64_t)1 << 30)

enum {
    RLPI_ISO_INIT = 1,   /* parent → worker: u32 protocol, str library, str options (RLPI_ISO_NONE = NULL) */
    RLPI_ISO_READY = 2,  /* worker → parent: i32 status, str message */
    RLPI_ISO_SCORE = 3,  /* parent → worker: u32 n, then n samples (rlpi_iso_put_request) */
    RLPI_ISO_RESULT = 4  /* worker → parent: u32 n, then n results */
};

/* Kind of an invalid result (the worker's classification of its own
 * handle's outcome); the values are those of RLPI_RW_* in scorer.h. */

typedef struct rlpi_iso_frame_header {
    uint32_t magic, type;
    uint64_t len;
} rlpi_iso_frame_header;

/* ---- building ------------------------------------------------------------ */

typedef struct rlpi_iso_buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} rlpi_iso_buf;

static inline void rlpi_iso_put(rlpi_iso_buf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n < b->len) {
        b->oom = 1;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void rlpi_iso_u32(rlpi_iso_buf *b, uint32_t v) { rlpi_iso_put(b, &v, sizeof v); }
static inline void rlpi_iso_u64(rlpi_iso_buf *b, uint64_t v) { rlpi_iso_put(b, &v, sizeof v); }
static inline void rlpi_iso_f64(rlpi_iso_buf *b, double v) { rlpi_iso_put(b, &v, sizeof v); }

/* A string as u64 length (RLPI_ISO_NONE for NULL) and its bytes. */
static inline void rlpi_iso_str(rlpi_iso_buf *b, const char *s, size_t n)
{
    rlpi_iso_u64(b, s ? (uint64_t)n : RLPI_ISO_NONE);
    if (s)
        rlpi_iso_put(b, s, n);
}

/* Starts a frame of type t (the header's length is patched by _end). */
static inline void rlpi_iso_begin(rlpi_iso_buf *b, uint32_t type)
{
    b->len = 0;
    b->oom = 0;
    rlpi_iso_frame_header h = {RLPI_ISO_MAGIC, type, 0};
    rlpi_iso_put(b, &h, sizeof h);
}

static inline int rlpi_iso_end(rlpi_iso_buf *b)
{
    if (b->oom)
        return -1;
    uint64_t len = b->len - sizeof(rlpi_iso_frame_header);
    memcpy(b->p + offsetof(rlpi_iso_frame_header, len), &len, sizeof len);
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct rlpi_iso_rd {
    const unsigned char *p;
    size_t len, at;
    int bad;
} rlpi_iso_rd;

static inline const void *rlpi_iso_take(rlpi_iso_rd *r, size_t n)
{
    if (r->bad || n > r->len - r->at) {
        r->bad = 1;
        return NULL;
    }
    const void *p = r->p + r->at;
    r->at += n;
    return p;
}

static inline uint32_t rlpi_iso_get_u32(rlpi_iso_rd *r)
{
    uint32_t v = 0;
    const void *p = rlpi_iso_take(r, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t rlpi_iso_get_u64(rlpi_iso_rd *r)
{
    uint64_t v = 0;
    const void *p = rlpi_iso_take(r, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

static inline double rlpi_iso_get_f64(rlpi_iso_rd *r)
{
    double v = 0;
    const void *p = rlpi_iso_take(r, sizeof v);
    if (p)
        memcpy(&v, p, sizeof v);
    return v;
}

/* A string of at most max bytes: *s points into the frame (not
 * NUL-terminated; NULL for RLPI_ISO_NONE), *n its length. */
static inline void rlpi_iso_get_str(rlpi_iso_rd *r, const char **s, size_t *n, uint64_t max)
{
    uint64_t len = rlpi_iso_get_u64(r);
    *s = NULL;
    *n = 0;
    if (r->bad || len == RLPI_ISO_NONE)
        return;
    if (len > max) {
        r->bad = 1;
        return;
    }
    *s = (const char *)rlpi_iso_take(r, (size_t)len);
    *n = (size_t)len;
}

/* ---- the socket ------------------------------------------------------------- */

/* Writes all of p (MSG_NOSIGNAL: a dead peer is an error, not SIGPIPE in
 * the host). 0 or -1. */
static inline int rlpi_iso_send_all(int fd, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

#endif
