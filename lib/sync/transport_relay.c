/* The relay transport (ECHO-2's peer-assisted broadcast): mirrors a
 * parent's published folder, served at GET {base}/v1/rlpost/weights/...,
 * into the local folder in exactly the FILE layout, so that the FILE
 * reader (transport_file.c) loads it and `rlpost serve` can serve it to
 * children in turn. Downloads land in DIR/.v<N>.part/ and resume with an
 * HTTP Range from the bytes on disk (the high-water mark); a file counts
 * only once its size and CRC-32 match the parent's manifest (with manifest
 * version 2 each 4 MiB chunk is checked as it lands, and a bad chunk alone
 * is fetched again); the version appears (rename, then the manifest
 * through a temporary name) only when every file does. While it
 * downloads, DIR/.relay-next.json holds the parent's manifest: `rlpost
 * serve` announces that version to its own children and streams them the
 * part files as they grow (cut-through, so a tree pipelines instead of
 * storing and forwarding; the children check every byte themselves). Must
 * not load weights or publish. Built only with libcurl. */
#include "sync/sync.h"

#include "core/atomic_file.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/http.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROUTE "/v1/rlpost/weights/"
#define MANIFEST_NAME "latest.json"
/* the version being fetched, for the local server (see the top) */
#define NEXT_NAME ".relay-next.json"
#define MANIFEST_LIMIT (1u << 20)
#define ERROR_BODY_LIMIT 4096u
/* A file failing its CRC-32 this many times is RLP_E_FORMAT (scale.md:
 * a parent with 3 bad chunks stops being trusted). */
#define BAD_FILE_TRIES 3u
/* Connect limit and stall limit (no progress above STALL_BYTES_PER_S for
 * this long: scale.md's "parent stalls: 10 s"), each at most timeout_ms. */
#define CONNECT_MAX_MS 10000u
#define STALL_MAX_MS 10000u
#define STALL_BYTES_PER_S 1L
/* Cuts after progress resume at once, but not forever (a parent that
 * cuts every transfer early and ignores Range would never finish). */
#define MAX_RESUMES 100u
#define FIRST_BACKOFF_MS 200u
#define MAX_BACKOFF_MS 5000u

/* One GET: into a file from `start` (fd >= 0) or into memory. */
typedef struct xfer {
    CURL *e;
    int fd;                  /* -1: body into mem */
    uint64_t start;          /* offset asked for (Range: bytes=start-) */
    uint64_t off;            /* next byte's offset in the file */
    uint64_t limit;          /* the file's size: more is an error */
    uint64_t received;       /* body bytes written to the file by this request */
    bool started;            /* first body byte seen: status known */
    long code;
    int64_t range_start;     /* Content-Range's first byte, -1 none */
    bool bad_range;          /* 206 at another offset than asked */
    bool too_long;
    int werr;                /* errno of a failed write */
    /* manifest version 2: each chunk's CRC-32 is checked the moment its
     * last byte is written; a bad one stops the transfer at once */
    const uint32_t *chunks;  /* the file's chunk CRCs, or NULL */
    uint32_t cs;             /* chunk size (0: none) */
    uint32_t cc;             /* CRC-32 of [chunk_start, off) */
    uint64_t chunk_start;
    bool bad_chunk;          /* the chunk at chunk_start failed (its bytes are on disk) */
    rlpi_http_response mem;
} xfer;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = sz * n;
    static const char cr[] = "content-range:";
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) /* a new response (after a 100): forget the last */
        x->range_start = -1;
    if (len > sizeof cr - 1 && !strncasecmp(p, cr, sizeof cr - 1)) {
        char buf[128];
        size_t k = len - (sizeof cr - 1) < sizeof buf - 1 ? len - (sizeof cr - 1) : sizeof buf - 1;
        memcpy(buf, p + sizeof cr - 1, k);
        buf[k] = '\0';
        unsigned long long a;
        if (sscanf(buf, " bytes %llu-", &a) == 1)
            x->range_start = (int64_t)a;
    }
    return len;
}

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = sz * n;
    if (!x->started) {
        x->started = true;
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->code);
        if (x->fd >= 0 && x->code == 200 && x->start > 0) {
            /* the parent ignored the Range: the whole file comes again */
            if (ftruncate(x->fd, 0) != 0) {
                x->werr = errno;
                return 0;
            }
            x->off = 0;
            x->cc = 0;
            x->chunk_start = 0;
        } else if (x->fd >= 0 && x->code == 206 && x->range_start != (int64_t)x->start) {
            x->bad_range = true;
            return 0;
        }
    }
    if (x->fd < 0 || x->code < 200 || x->code >= 300)
        return rlpi_http_response_append(&x->mem, p, len);
    if (len > x->limit - x->off) {
        x->too_long = true;
        return 0;
    }
    for (size_t done = 0; done < len;) {
        size_t seg = len - done; /* up to the end of the current chunk */
        uint64_t end = x->cs && x->chunk_start + x->cs < x->limit ? x->chunk_start + x->cs : x->limit;
        if (x->cs && seg > end - x->off)
            seg = (size_t)(end - x->off);
        for (size_t w = 0; w < seg;) {
            ssize_t k = pwrite(x->fd, p + done + w, seg - w, (off_t)(x->off + w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                x->werr = k < 0 ? errno : EIO;
                return 0;
            }
            w += (size_t)k;
        }
        if (x->cs)
            x->cc = rlpi_crc32(x->cc, p + done, seg);
        x->off += seg;
        x->received += seg;
        done += seg;
        if (x->cs && x->off == end) {
            if (x->cc != x->chunks[x->chunk_start / x->cs]) {
                x->bad_chunk = true;
                return 0;
            }
            x->cc = 0;
            x->chunk_start = x->off;
        }
    }
    return len;
}

/* CRC-32 of `len` bytes of fd from `from`; RLP_E_IO naming path. */
static int range_crc(int fd, const char *path, uint64_t from, uint64_t len, uint32_t *crc)
{
    static const size_t block = 1u << 20;
    uint8_t *buf = malloc(block);
    if (!buf)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    uint32_t c = 0;
    int rc = RLP_OK;
    while (len > 0) {
        ssize_t n = pread(fd, buf, len < block ? (size_t)len : block, (off_t)from);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: read failed: %s", path, n < 0 ? strerror(errno) : "short");
            break;
        }
        c = rlpi_crc32(c, buf, (size_t)n);
        from += (uint64_t)n;
        len -= (uint64_t)n;
    }
    free(buf);
    *crc = c;
    return rc;
}

/* Bytes from 0 whose chunks all match (checking whole chunks below `upto`):
 * where a download must resume. */
static int good_prefix(int fd, const char *path, const xfer *x, uint64_t upto, uint64_t *good)
{
    *good = 0;
    for (uint64_t at = 0; at + x->cs <= upto || (at < upto && upto == x->limit); at += x->cs) {
        uint64_t n = x->limit - at < x->cs ? x->limit - at : x->cs;
        uint32_t crc;
        int rc = range_crc(fd, path, at, n, &crc);
        if (rc)
            return rc;
        if (crc != x->chunks[at / x->cs])
            return RLP_OK;
        *good = at + n;
    }
    return RLP_OK;
}

/* What every transfer to the parent shares. */
typedef struct relay_ctx {
    rlp_synchronizer *s;
    CURL *e;                 /* reused: keeps the connection to the parent */
    char base[2048];         /* urls[0] without a trailing "/" or "/v1" */
    struct curl_slist *headers;
    uint64_t requests, bytes;
} relay_ctx;

/* One GET of ROUTE + rel into x (from x->start for a file). Fills x->code
 * (0: no response) and errbuf (CURL_ERROR_SIZE), returns the curl code. */
static CURLcode get_once(relay_ctx *c, const char *rel, xfer *x, long timeout_ms, char *url, size_t url_n,
                         char *errbuf)
{
    snprintf(url, url_n, "%s" ROUTE "%s", c->base, rel);
    CURL *e = c->e;
    char range[48];
    x->e = e;
    x->started = false;
    x->code = 0;
    x->range_start = -1;
    x->bad_range = x->too_long = false;
    x->werr = 0;
    x->off = x->start;
    x->received = 0;
    rlpi_http_response_reset(&x->mem, x->fd >= 0 ? ERROR_BODY_LIMIT : MANIFEST_LIMIT);
    curl_easy_reset(e);
    long connect_ms = timeout_ms < (long)CONNECT_MAX_MS ? timeout_ms : (long)CONNECT_MAX_MS;
    long stall_s = (timeout_ms < (long)STALL_MAX_MS ? timeout_ms : (long)STALL_MAX_MS) / 1000;
    errbuf[0] = '\0';
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, x) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, x) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms) != CURLE_OK;
    if (x->fd < 0) /* the manifest: small, one overall limit */
        bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
    /* a file takes as long as the link needs; a stalled one is cut and resumed */
    bad |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, STALL_BYTES_PER_S) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, stall_s > 0 ? stall_s : 1L) != CURLE_OK;
    bad |= rlpi_curl_safe_setopts(e) != 0;
    if (x->fd >= 0 && x->start > 0) {
        snprintf(range, sizeof range, "%" PRIu64 "-", x->start);
        bad |= curl_easy_setopt(e, CURLOPT_RANGE, range) != CURLE_OK;
    }
    if (bad)
        return CURLE_FAILED_INIT;
    c->requests++;
    CURLcode rc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    x->code = code;
    c->bytes += x->fd >= 0 ? x->received : x->mem.len;
    return rc;
}

/* A failed request in words. */
static void describe(const xfer *x, CURLcode rc, const char *errbuf, char *why, size_t n)
{
    if (x->bad_range)
        snprintf(why, n, "HTTP 206 for bytes from %" PRId64 ", asked for %" PRIu64, x->range_start, x->start);
    else if (x->too_long)
        snprintf(why, n, "more bytes than the manifest's %" PRIu64, x->limit);
    else if (x->werr)
        snprintf(why, n, "cannot write the mirror: %s", strerror(x->werr));
    else if (x->mem.overflow && x->fd < 0)
        snprintf(why, n, "response larger than %u bytes", MANIFEST_LIMIT);
    else if (rc != CURLE_OK)
        snprintf(why, n, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else
        snprintf(why, n, "HTTP %ld: %.*s", x->code, (int)(x->mem.len < 160 ? x->mem.len : 160),
                 x->mem.data ? x->mem.data : "");
}

/* The parent's manifest, with retries; *raw receives its bytes (malloc'd). */
static int get_manifest(relay_ctx *c, rlpi_manifest *m, char **raw, size_t *raw_len)
{
    xfer x = {.fd = -1};
    char url[2600], errbuf[CURL_ERROR_SIZE], why[320] = "";
    unsigned backoff = FIRST_BACKOFF_MS;
    int rc = RLP_E_NETWORK;
    for (uint32_t attempt = 0; attempt <= c->s->opts.max_retries; attempt++) {
        if (attempt) {
            sleep_ms(backoff);
            backoff = backoff * 2 < MAX_BACKOFF_MS ? backoff * 2 : MAX_BACKOFF_MS;
        }
        CURLcode cr = get_once(c, MANIFEST_NAME, &x, (long)c->s->opts.timeout_ms, url, sizeof url, errbuf);
        if (cr == CURLE_OK && x.code == 200) {
            rc = rlpi_manifest_parse(x.mem.data ? x.mem.data : "", x.mem.len, url, m);
            if (rc == RLP_OK) {
                *raw = malloc(x.mem.len);
                if (!*raw) {
                    rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", url);
                } else {
                    memcpy(*raw, x.mem.data, x.mem.len);
                    *raw_len = x.mem.len;
                }
            }
            rlpi_http_response_free(&x.mem);
            return rc;
        }
        describe(&x, cr, errbuf, why, sizeof why);
        bool retry = cr != CURLE_OK ? rlpi_curl_retryable(cr) : rlpi_http_retryable(x.code);
        if (!retry)
            break;
    }
    rlpi_http_response_free(&x.mem);
    return rlpi_error_set(RLP_E_NETWORK, "weight relay: GET %s: %s", url, why);
}

/* Brings `path` to the manifest's file: resumes from its size (after its
 * last good chunk), checks each chunk's CRC-32 as it arrives (manifest
 * version 2) and the file's at the end, fetches again what is bad.
 * RLP_E_NOT_FOUND: the parent no longer has the version (pruned);
 * RLP_E_NETWORK; RLP_E_FORMAT; RLP_E_IO. */
static int fetch_file(relay_ctx *c, const rlpi_manifest *m, const rlpi_manifest_file *f, const char *path)
{
    char rel[256], url[2600], errbuf[CURL_ERROR_SIZE], why[320];
    snprintf(rel, sizeof rel, "%s/%s", m->path, f->name);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
    xfer x = {.fd = fd, .limit = f->size, .cs = m->chunk_size, .chunks = m->chunks ? m->chunks + f->chunk0 : NULL};
    if (!x.chunks)
        x.cs = 0;
    unsigned bad = 0, fails = 0, resumes = 0, backoff = FIRST_BACKOFF_MS;
    bool prefix_checked = false; /* what an earlier pull left on disk */
    int rc = RLP_OK;
    for (;;) {
        struct stat st;
        if (fstat(fd, &st) != 0) {
            rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
            break;
        }
        uint64_t have = (uint64_t)st.st_size;
        if (have > f->size) {
            if (ftruncate(fd, 0) != 0) {
                rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                break;
            }
            have = 0;
        }
        if (have == f->size) {
            uint32_t crc;
            uint64_t size;
            if (lseek(fd, 0, SEEK_SET) != 0 || (rc = rlpi_file_crc(fd, path, &crc, &size)) != RLP_OK) {
                rc = rc ? rc : rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                break;
            }
            if (crc == f->crc32 && size == f->size) {
                if (fdatasync(fd) != 0)
                    rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: fsync: %s", path, strerror(errno));
                break;
            }
            /* corruption on the way (or on disk): this copy never counts;
             * with chunk CRCs only the bad chunks onwards are fetched again */
            prefix_checked = true;
            uint64_t keep = 0;
            if (x.cs && (rc = good_prefix(fd, path, &x, f->size, &keep)) != RLP_OK)
                break;
            if (++bad >= BAD_FILE_TRIES) {
                rc = rlpi_error_set(RLP_E_FORMAT, "weight relay: %s" ROUTE "%s failed its CRC-32 %u times (%08x, "
                                    "the manifest says %08x)", c->base, rel, bad, crc, f->crc32);
                break;
            }
            rlpi_log(&c->s->log, RLP_LOG_WARN, "weight relay: %s" ROUTE "%s: CRC-32 %08x, the manifest says %08x: "
                     "fetching it again from byte %" PRIu64, c->base, rel, crc, f->crc32, keep);
            if (ftruncate(fd, (off_t)keep) != 0) {
                rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                break;
            }
            continue;
        }
        if (x.cs) {
            /* the chunks already on disk: checked once, resumed after the
             * last good one; the running CRC of the partial chunk after it */
            uint64_t full = have - have % x.cs;
            if (!prefix_checked && full) {
                uint64_t good;
                if ((rc = good_prefix(fd, path, &x, full, &good)) != RLP_OK)
                    break;
                if (good < full) {
                    rlpi_log(&c->s->log, RLP_LOG_WARN, "weight relay: %s: a chunk at byte %" PRIu64 " on disk is "
                             "damaged: fetching from there", path, good);
                    if (ftruncate(fd, (off_t)good) != 0) {
                        rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                        break;
                    }
                    have = full = good;
                }
            }
            prefix_checked = true;
            x.chunk_start = full;
            if ((rc = range_crc(fd, path, full, have - full, &x.cc)) != RLP_OK)
                break;
        }
        prefix_checked = true;
        x.start = have;
        x.bad_chunk = false;
        CURLcode cr = get_once(c, rel, &x, (long)c->s->opts.timeout_ms, url, sizeof url, errbuf);
        bool ok_code = x.code == 200 || x.code == 206;
        if (cr == CURLE_OK && ok_code && x.off == f->size)
            continue; /* complete: the CRC decides */
        if (x.bad_chunk) {
            if (++bad >= BAD_FILE_TRIES) {
                rc = rlpi_error_set(RLP_E_FORMAT, "weight relay: GET %s: the chunk at byte %" PRIu64 " failed its CRC-32 "
                                    "%u times", url, x.chunk_start, bad);
                break;
            }
            rlpi_log(&c->s->log, RLP_LOG_WARN, "weight relay: GET %s: the chunk at byte %" PRIu64 " failed its CRC-32 "
                     "(%08x, the manifest says %08x): fetching it again", url, x.chunk_start, x.cc,
                     x.chunks[x.chunk_start / x.cs]);
            if (ftruncate(fd, (off_t)x.chunk_start) != 0) {
                rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                break;
            }
            continue;
        }
        if (x.too_long) {
            if (++bad >= BAD_FILE_TRIES) {
                rc = rlpi_error_set(RLP_E_FORMAT, "weight relay: GET %s: more than the manifest's %" PRIu64
                                    " bytes, %u times", url, f->size, bad);
                break;
            }
            if (ftruncate(fd, 0) != 0) {
                rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(errno));
                break;
            }
            continue;
        }
        if (x.werr) {
            rc = rlpi_error_set(RLP_E_IO, "weight relay: %s: %s", path, strerror(x.werr));
            break;
        }
        if (cr == CURLE_OK && x.code == 404) {
            rc = rlpi_error_set(RLP_E_NOT_FOUND, "weight relay: GET %s: HTTP 404 (pruned at the parent?)", url);
            break;
        }
        describe(&x, cr, errbuf, why, sizeof why);
        bool progress = x.received > 0;
        bool retry;
        if (x.code == 416) {
            /* the parent's file is shorter than what we hold: start over */
            retry = ftruncate(fd, 0) == 0;
        } else if (x.bad_range) {
            retry = true;
        } else if (cr != CURLE_OK) {
            retry = rlpi_curl_retryable(cr) || (cr == CURLE_WRITE_ERROR && !x.werr);
        } else {
            retry = ok_code || rlpi_http_retryable(x.code); /* ok_code: a short body */
        }
        if (progress) { /* a cut link that delivered: resume at once, count anew */
            fails = 0;
            backoff = FIRST_BACKOFF_MS;
            rlpi_log(&c->s->log, RLP_LOG_DEBUG, "weight relay: GET %s cut at byte %" PRIu64 " (%s): resuming", url,
                     x.off, why);
            if (retry && ++resumes <= MAX_RESUMES)
                continue;
        }
        if (!retry || ++fails > c->s->opts.max_retries) {
            rc = rlpi_error_set(RLP_E_NETWORK, "weight relay: GET %s (from byte %" PRIu64 ", %u attempts): %s", url,
                                x.start, fails + (retry ? 0 : 1), why);
            break;
        }
        sleep_ms(backoff);
        backoff = backoff * 2 < MAX_BACKOFF_MS ? backoff * 2 : MAX_BACKOFF_MS;
    }
    rlpi_http_response_free(&x.mem);
    close(fd);
    return rc;
}

/* Leaves only the manifest's files in the download folder, and removes
 * downloads of other versions. */
static void tidy(const char *dir, const char *part_name, const char *part, const rlpi_manifest *m)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' && e->d_name[1] == 'v' && n > 5 && !strcmp(e->d_name + n - 5, ".part") &&
            strcmp(e->d_name, part_name) && (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path)
            rlpi_file_remove_tree(path);
    }
    if (d)
        closedir(d);
    d = opendir(part);
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        bool listed = false;
        for (size_t i = 0; i < m->n_files && !listed; i++)
            listed = !strcmp(m->files[i].name, e->d_name);
        if (!listed && (size_t)snprintf(path, sizeof path, "%s/%s", part, e->d_name) < sizeof path)
            rlpi_file_remove_tree(path);
    }
    if (d)
        closedir(d);
}

static void fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Downloads version m into the mirror and makes it the latest. */
static int mirror_version(relay_ctx *c, const rlpi_manifest *m, const char *raw, size_t raw_len)
{
    const char *dir = c->s->dir;
    char part_name[80], part[PATH_MAX], final[PATH_MAX], old[PATH_MAX], path[PATH_MAX], mpath[PATH_MAX];
    snprintf(part_name, sizeof part_name, ".%s.part", m->path);
    if ((size_t)snprintf(part, sizeof part, "%s/%s", dir, part_name) >= sizeof part ||
        (size_t)snprintf(final, sizeof final, "%s/%s", dir, m->path) >= sizeof final ||
        (size_t)snprintf(old, sizeof old, "%s/.%s.old.XXXXXX", dir, m->path) >= sizeof old ||
        (size_t)snprintf(mpath, sizeof mpath, "%s/" MANIFEST_NAME, dir) >= sizeof mpath)
        return rlpi_error_set(RLP_E_INVALID_ARG, "weight relay: %s: path too long", dir);
    if (mkdir(part, 0755) != 0 && errno != EEXIST)
        return rlpi_error_set(RLP_E_IO, "weight relay: cannot create %s: %s", part, strerror(errno));
    struct stat st;
    if (lstat(part, &st) != 0 || !S_ISDIR(st.st_mode))
        return rlpi_error_set(RLP_E_IO, "weight relay: %s is not a folder", part);
    tidy(dir, part_name, part, m);
    char npath[PATH_MAX];
    if ((size_t)snprintf(npath, sizeof npath, "%s/" NEXT_NAME, dir) >= sizeof npath)
        return rlpi_error_set(RLP_E_INVALID_ARG, "weight relay: %s: path too long", dir);
    int rc = rlpi_atomic_write_file(npath, raw, raw_len);
    if (rc)
        return rc;
    for (size_t i = 0; i < m->n_files; i++) {
        if ((size_t)snprintf(path, sizeof path, "%s/%s", part, m->files[i].name) >= sizeof path)
            return rlpi_error_set(RLP_E_INVALID_ARG, "weight relay: %s: path too long", part);
        rc = fetch_file(c, m, &m->files[i], path);
        if (rc == RLP_E_FORMAT)
            unlink(npath); /* not to be relayed: children would wait for it */
        if (rc)
            return rc;
    }
    fsync_dir(part);
    if (stat(final, &st) == 0) { /* an earlier copy (a crash before its manifest, or republished) */
        if (!mkdtemp(old) || rename(final, old) != 0)
            return rlpi_error_set(RLP_E_IO, "weight relay: cannot move %s aside: %s", final, strerror(errno));
    }
    if (rename(part, final) != 0)
        return rlpi_error_set(RLP_E_IO, "weight relay: rename %s -> %s: %s", part, final, strerror(errno));
    fsync_dir(dir);
    /* the parent's manifest as it is: every field was checked, and the
     * files are the ones it describes */
    rc = rlpi_atomic_write_file(mpath, raw, raw_len);
    if (rc)
        return rc;
    unlink(npath); /* latest.json names the version now */
    uint32_t keep = c->s->opts.keep_versions < 2 ? 2 : c->s->opts.keep_versions;
    rlpi_file_prune(dir, m->version, keep); /* also the old copy moved aside */
    return RLP_OK;
}

/* The parent's base URL: `url` without a trailing "/" or "/v1". */
static int set_base(relay_ctx *c, const char *u)
{
    size_t n = strlen(u);
    while (n > 0 && u[n - 1] == '/')
        n--;
    if (n >= 3 && !memcmp(u + n - 3, "/v1", 3))
        n -= 3;
    if (n >= sizeof c->base)
        return rlpi_error_set(RLP_E_INVALID_ARG, "weight relay: the parent URL is too long");
    snprintf(c->base, sizeof c->base, "%.*s", (int)n, u);
    return RLP_OK;
}

/* One parent: its manifest, and its version if newer than the mirror's. */
static int fetch_from(relay_ctx *c, const rlpi_manifest *have, bool have_any, rlpi_manifest *m, uint64_t *version,
                      bool *any)
{
    rlp_synchronizer *s = c->s;
    int rc;
    /* the parent may prune the version while we fetch it: read its manifest again */
    for (uint32_t attempt = 0;; attempt++) {
        char *raw = NULL;
        size_t raw_len = 0;
        rlpi_manifest_clear(m);
        rc = get_manifest(c, m, &raw, &raw_len);
        if (rc)
            break;
        if (have_any && m->version <= have->version) {
            if (m->version < have->version)
                rlpi_log(&s->log, RLP_LOG_DEBUG, "weight relay: %s names version %" PRIu64 ", older than the mirror's "
                         "%" PRIu64 ": ignored", c->base, m->version, have->version);
            free(raw);
            break;
        }
        rc = mirror_version(c, m, raw, raw_len);
        free(raw);
        if (rc == RLP_OK) {
            *version = m->version;
            *any = true;
            break;
        }
        if (rc != RLP_E_NOT_FOUND || attempt >= s->opts.verify_retries)
            break;
    }
    if (rc == RLP_E_NOT_FOUND) /* pruned every time: the parent is moving faster than we fetch */
        rc = rlpi_error_set(RLP_E_NETWORK, "%s", rlp_error_last());
    return rc;
}

int rlpi_relay_fetch(rlp_synchronizer *s, uint64_t *version, bool *any)
{
    int rc = rlpi_curl_global_init();
    if (rc)
        return rc;
    pthread_mutex_lock(&s->http_mu);
    rlpi_manifest *have = calloc(1, sizeof *have), *m = calloc(1, sizeof *m);
    /* the handle outlives the call: its connection to the parent is reused
     * by the next pull (a new TCP connection per poll paid a handshake, a
     * cold congestion window and, on a lossy link, a 1 s SYN timeout) */
    relay_ctx c = {.s = s, .e = s->relay_easy};
    if (!c.e)
        c.e = s->relay_easy = curl_easy_init();
    if (!have || !m || !c.e) {
        rc = rlpi_error_set(RLP_E_NOMEM, "weight relay: out of memory");
        goto out;
    }
    if (s->api_key) {
        char auth[1200];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", s->api_key);
        if (!(c.headers = curl_slist_append(NULL, auth))) {
            rc = rlpi_error_set(RLP_E_NOMEM, "weight relay: out of memory");
            goto out;
        }
    }
    int hrc = rlpi_manifest_read(s->dir, have);
    bool have_any = hrc == RLP_OK;
    if (hrc && hrc != RLP_E_NOT_FOUND) /* a damaged mirror manifest: replaced by the parent's */
        rlpi_log(&s->log, RLP_LOG_WARN, "weight relay: %s; taking the parent's", rlp_error_last());
    *any = have_any;
    *version = have_any ? have->version : 0;
    /* the parent first, every pull; the others (a grandparent, the origin)
     * only while it cannot be reached or serves bad copies. A part already
     * on disk resumes from any of them: they serve the same bytes. */
    for (size_t t = 0; t < s->n_targets; t++) {
        if ((rc = set_base(&c, s->targets[t].url)) != RLP_OK)
            break;
        rc = fetch_from(&c, have, have_any, m, version, any);
        if (rc != RLP_E_NETWORK && rc != RLP_E_FORMAT)
            break;
        if (t + 1 < s->n_targets)
            rlpi_log(&s->log, RLP_LOG_WARN, "weight relay: %s; trying %s", rlp_error_last(), s->targets[t + 1].url);
    }
out:
    pthread_mutex_lock(&s->mu);
    s->st.http_requests += c.requests;
    s->st.bytes_published += c.bytes;
    if (rc)
        s->st.http_failures++;
    pthread_mutex_unlock(&s->mu);
    curl_slist_free_all(c.headers);
    if (have)
        rlpi_manifest_clear(have);
    if (m)
        rlpi_manifest_clear(m);
    free(have);
    free(m);
    pthread_mutex_unlock(&s->http_mu);
    return rc;
}

void rlpi_relay_release(rlp_synchronizer *s)
{
    if (s->relay_easy)
        curl_easy_cleanup(s->relay_easy);
    s->relay_easy = NULL;
}
