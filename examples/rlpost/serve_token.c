/* Bearer tokens of `rlpost serve`: read from a file (--token-file), or, for
 * a server started without one, the weight-update token generated once
 * per weights folder in DIR/.rlpost-serve-token (mode 0600), where the
 * trainer publishing to DIR finds it (the HTTP transport reads it). Never
 * puts a token on a command line or in a log. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

bool serve_token_ok(const char *t)
{
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > SERVE_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0x21 || t[i] > 0x7e) /* visible ASCII: it goes into an HTTP header */
            return false;
    return true;
}

/* Reads the token of an open file: its first line, trailing white space
 * off. */
static int read_fd(int fd, const char *path, char *out, size_t n, char *err, size_t errlen)
{
    char buf[SERVE_TOKEN_MAX + 2];
    size_t len = 0;
    for (;;) {
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        if (k == 0 || (len += (size_t)k) == sizeof buf - 1)
            break;
    }
    buf[len] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    len = strlen(buf);
    while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t'))
        buf[--len] = '\0';
    if (!serve_token_ok(buf) || len + 1 > n) {
        snprintf(err, errlen, "%s: the first line must be the token: 1 to %d visible ASCII characters", path,
                 SERVE_TOKEN_MAX);
        return -1;
    }
    memcpy(out, buf, len + 1);
    return 0;
}

int serve_token_read(const char *path, char *out, size_t n, char *err, size_t errlen)
{
    err[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read_fd(fd, path, out, n, err, errlen) : -1;
    if (rc == 0 && (st.st_mode & 077))
        fprintf(stderr, "rlpost serve: warning: %s can be read by other users (chmod 600 it)\n", path);
    else if (rc != 0 && !*err)
        snprintf(err, errlen, "%s: not a regular file", path);
    close(fd);
    return rc;
}

/* Opens DIR/.rlpost-serve-token only if it is ours alone: a regular file
 * (no symlink), owned by this user, mode without group/other bits.
 * Otherwise someone else could have chosen the token. */
static int open_private(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(err, errlen,
                 "%s is not a private file of this user (mode 0600, owned by uid %u): delete it and restart",
                 path, (unsigned)geteuid());
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

int serve_token_dir(const char *dir, char *out, size_t n, char *path, size_t pn, char *err, size_t errlen)
{
    err[0] = '\0';
    if ((size_t)snprintf(path, pn, "%s/%s", dir, SERVE_TOKEN_FILE) >= pn) {
        snprintf(err, errlen, "--weights-dir: path too long");
        return -1;
    }
    int fd = open_private(path, err, errlen);
    if (fd < 0 && errno == ENOENT) {
        /* a new token: written under a temporary name, then linked into
         * place, so that a worker starting at the same moment either
         * finds the whole file or none (link() never replaces) */
        unsigned char rnd[SERVE_TOKEN_BYTES];
        size_t got = 0;
        while (got < sizeof rnd) {
            ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                snprintf(err, errlen, "getrandom: %s", strerror(errno));
                return -1;
            }
            got += (size_t)k;
        }
        char tok[2 * SERVE_TOKEN_BYTES + 2], tmp[4200];
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(tok + 2 * i, 3, "%02x", rnd[i]);
        tok[2 * sizeof rnd] = '\n';
        snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
        int t = mkstemp(tmp); /* mode 0600 */
        if (t < 0) {
            snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
            return -1;
        }
        bool ok = write(t, tok, 2 * sizeof rnd + 1) == (ssize_t)(2 * sizeof rnd + 1) && fsync(t) == 0;
        close(t);
        if (!ok || (link(tmp, path) != 0 && errno != EEXIST)) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            unlink(tmp);
            return -1;
        }
        unlink(tmp);
        fd = open_private(path, err, errlen);
    }
    if (fd < 0) {
        if (!*err)
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = read_fd(fd, path, out, n, err, errlen);
    close(fd);
    return rc;
}

int serve_token_resolve(const char *cmd, const char *token, const char *token_file, char *buf, size_t cap,
                        const char **out)
{
    *out = NULL;
    if (token && token_file) {
        fprintf(stderr, "%s: give --token-file or --token, not both\n", cmd);
        return -1;
    }
    if (token_file) {
        char err[4400];
        if (serve_token_read(token_file, buf, cap, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --token-file %s\n", cmd, err);
            return -1;
        }
        token = buf;
    }
    if (!token && getenv("RLPOST_SERVE_TOKEN") && *getenv("RLPOST_SERVE_TOKEN"))
        token = getenv("RLPOST_SERVE_TOKEN");
    if (token && !serve_token_ok(token)) {
        fprintf(stderr, "%s: the token must be 1 to %d visible ASCII characters\n", cmd, SERVE_TOKEN_MAX);
        return -1;
    }
    *out = token;
    return 0;
}

bool serve_weights_from_add(const char *val, const char **urls, size_t *n, size_t cap)
{
    if ((strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0) || *n >= cap)
        return false;
    urls[(*n)++] = val;
    return true;
}

bool serve_poll_s_parse(const char *val, double *out)
{
    char *end;
    double v = strtod(val, &end);
    if (end == val || *end || !(v >= 0.01 && v <= 3600))
        return false;
    *out = v;
    return true;
}
