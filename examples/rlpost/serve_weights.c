/* Read-only serving of the weights folder for the relay transport
 * (RLP_TRANSPORT_RELAY): which paths below --weights-dir a client may GET
 * (DIR/latest.json and DIR/v<N>/<file>, nothing else: no hidden files such
 * as the update token, no "..", no symlinks), and HTTP Range parsing.
 * Cut-through: while this server's own relay client fetches version N
 * (DIR/.relay-next.json names it, files arrive in DIR/.vN.part/), the
 * manifest served is that one and vN's files are streamed as they grow,
 * so that children start before the parent has finished. The HTTP
 * response itself is serve_http.c's; nothing here writes. */
#include "serve.h"

#include <errno.h>
#include <jansson.h>
#include <time.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "v" and 1..20 digits. */
static bool version_name(const char *s, size_t n)
{
    if (n < 2 || n > 21 || s[0] != 'v')
        return false;
    for (size_t i = 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* A file name as the manifest allows it (1..127 bytes, no separator or
 * control character), and not hidden. */
static bool file_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 127 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == '/' || s[i] == '\\' || s[i] == 0x7f)
            return false;
    return true;
}

#define NEXT_NAME ".relay-next.json"
/* How long a request waits for a file of the version in progress to
 * appear or to grow before it gives up (the client resumes by Range). */
#define GROW_STALL_MS 30000
#define GROW_POLL_MS 5
/* How often a wait for a growing file checks that its version is still
 * being fetched. */
#define GROW_CHECK_MS 50

static void nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The version a manifest of the folder names (-1: none or unreadable),
 * and, with `name`, that file's size in it (-1: not listed). */
static int64_t manifest_version(int rfd, const char *file, const char *name, int64_t *size)
{
    int fd = openat(rfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (size)
        *size = -1;
    if (fd < 0)
        return -1;
    json_t *j = json_loadfd(fd, 0, NULL);
    close(fd);
    json_t *v = json_object_get(j, "version");
    int64_t ver = json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
    json_t *files = json_object_get(j, "files");
    for (size_t i = 0; name && size && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i), *n = json_object_get(f, "name"), *sz = json_object_get(f, "size");
        if (json_is_string(n) && !strcmp(json_string_value(n), name) && json_is_integer(sz))
            *size = (int64_t)json_integer_value(sz);
    }
    json_decref(j);
    return ver;
}

static int open_regular(int dfd, const char *name, uint64_t *size)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        return -1;
    }
    if (fd >= 0)
        *size = (uint64_t)st.st_size;
    return fd;
}

int serve_weights_open(const char *root, const char *rel, int *fd_out, uint64_t *size_out, bool *manifest,
                       bool *growing)
{
    *fd_out = -1;
    *manifest = false;
    *growing = false;
    const char *slash = strchr(rel, '/');
    char vname[32];
    const char *name;
    if (!strcmp(rel, "latest.json")) {
        *manifest = true;
        vname[0] = '\0';
        name = rel;
    } else if (slash && version_name(rel, (size_t)(slash - rel)) && file_name(slash + 1)) {
        snprintf(vname, sizeof vname, "%.*s", (int)(slash - rel), rel);
        name = slash + 1;
    } else {
        return 404;
    }
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return 404;
    int fd = -1;
    if (!vname[0]) {
        /* the version in progress, when it is newer than the last complete one */
        bool next = manifest_version(rfd, NEXT_NAME, NULL, NULL) > manifest_version(rfd, "latest.json", NULL, NULL);
        fd = open_regular(rfd, next ? NEXT_NAME : "latest.json", size_out);
        close(rfd);
        *fd_out = fd;
        return fd >= 0 ? 200 : 404;
    }
    uint64_t want = strtoull(vname + 1, NULL, 10);
    char part[48];
    snprintf(part, sizeof part, ".%s.part", vname);
    for (unsigned waited = 0;; waited += GROW_POLL_MS) {
        /* O_NOFOLLOW on each component: a symlink (to anywhere) is refused */
        int dfd = openat(rfd, vname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0) {
            fd = open_regular(dfd, name, size_out);
            close(dfd);
            if (fd >= 0)
                break;
        }
        int64_t final_size;
        int64_t nv = manifest_version(rfd, NEXT_NAME, name, &final_size);
        if (nv < 0 || (uint64_t)nv != want || final_size < 0)
            break; /* not the version in progress, or not one of its files */
        int pfd = openat(rfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (pfd >= 0) {
            uint64_t now;
            fd = open_regular(pfd, name, &now);
            close(pfd);
            if (fd >= 0) {
                *size_out = (uint64_t)final_size;
                *growing = true;
                break;
            }
        }
        if (waited >= GROW_STALL_MS) /* the relay has not started this file */
            break;
        nap_ms(GROW_POLL_MS);
    }
    close(rfd);
    if (fd < 0)
        return 404;
    *fd_out = fd;
    return 200;
}

/* Whether version `v` is still on its way into `root`: the relay client
 * names it in NEXT_NAME, or it is complete (v<N>/ exists). A version the
 * relay client gave up (its parent pruned it, a newer one came) is
 * neither, and its part file will not grow again. */
static bool version_alive(const char *root, uint64_t v)
{
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return false;
    char vname[32];
    snprintf(vname, sizeof vname, "v%" PRIu64, v);
    struct stat st;
    bool alive = fstatat(rfd, vname, &st, AT_SYMLINK_NOFOLLOW) == 0 ||
                 manifest_version(rfd, NEXT_NAME, NULL, NULL) == (int64_t)v;
    close(rfd);
    return alive;
}

ssize_t serve_weights_read(const char *root, uint64_t version, int fd, uint64_t off, char *buf, size_t max)
{
    for (unsigned waited = 0;; waited += GROW_POLL_MS) {
        ssize_t n = pread(fd, buf, max, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 0)
            return n;
        if (waited >= GROW_STALL_MS)
            return -1; /* the relay stalled: the client resumes by Range later */
        /* an abandoned version ends the response at once (the child reads
         * the manifest again), not after GROW_STALL_MS of nothing */
        if (waited % GROW_CHECK_MS == 0 && waited && !version_alive(root, version))
            return -1;
        nap_ms(GROW_POLL_MS);
    }
}

/* Digits only, no sign or space; false on overflow. */
static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 19)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

int serve_range_parse(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
    if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0; /* absent, another unit or several ranges: the whole file (RFC 9110 §14.2) */
    const char *spec = h + 6, *dash = strchr(spec, '-');
    if (!dash)
        return 0;
    uint64_t a = 0, b = 0;
    bool has_a = parse_u64(spec, (size_t)(dash - spec), &a), has_b = parse_u64(dash + 1, strlen(dash + 1), &b);
    if (dash == spec) { /* bytes=-n: the last n bytes */
        if (!has_b)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return 1;
    }
    if (!has_a || (dash[1] && !has_b) || (dash[1] && b < a))
        return 0; /* not a valid range: ignored */
    if (a >= size)
        return -1;
    *first = a;
    *last = dash[1] && b < size - 1 ? b : size - 1;
    return 1;
}
