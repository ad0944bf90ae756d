/* Temporary-name + fsync + rename file replacement. */
#include "core/atomic_file.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rlpi_atomic_open(rlpi_atomic_file *f, const char *path)
{
    f->fd = -1;
    f->path = strdup(path);
    size_t n = strlen(path) + sizeof ".tmp.XXXXXX";
    f->tmp_path = malloc(n);
    if (!f->path || !f->tmp_path) {
        rlpi_atomic_abort(f);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    }
    snprintf(f->tmp_path, n, "%s.tmp.XXXXXX", path);
    f->fd = mkostemp(f->tmp_path, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp_path);
        f->tmp_path = NULL; /* nothing was created: abort must not unlink */
        rlpi_atomic_abort(f);
        return rlpi_error_set(RLP_E_IO, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    /* mkstemp makes 0600; a checkpoint is meant to be read by other tools */
    (void)fchmod(f->fd, 0644);
    return RLP_OK;
}

int rlpi_atomic_write(rlpi_atomic_file *f, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return rlpi_error_set(RLP_E_IO, "%s: write failed: %s", f->path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return RLP_OK;
}

static void fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* best effort: some filesystems refuse it */
        close(dfd);
    }
    free(copy);
}

int rlpi_atomic_commit(rlpi_atomic_file *f)
{
    if (fsync(f->fd) != 0) {
        int e = errno;
        rlpi_atomic_abort(f);
        return rlpi_error_set(RLP_E_IO, "fsync failed: %s", strerror(e));
    }
    if (close(f->fd) != 0) {
        int e = errno;
        f->fd = -1;
        rlpi_atomic_abort(f);
        return rlpi_error_set(RLP_E_IO, "close failed: %s", strerror(e));
    }
    f->fd = -1;
    if (rename(f->tmp_path, f->path) != 0) {
        int e = errno;
        char msg[64];
        snprintf(msg, sizeof msg, "%s", strerror(e));
        int rc = rlpi_error_set(RLP_E_IO, "%s: rename failed: %s", f->path, msg);
        rlpi_atomic_abort(f);
        return rc;
    }
    fsync_dir_of(f->path);
    free(f->tmp_path);
    free(f->path);
    f->tmp_path = f->path = NULL;
    return RLP_OK;
}

void rlpi_atomic_abort(rlpi_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp_path)
        unlink(f->tmp_path);
    free(f->tmp_path);
    free(f->path);
    f->tmp_path = f->path = NULL;
}

int rlpi_atomic_write_file(const char *path, const void *buf, size_t len)
{
    rlpi_atomic_file f;
    int rc = rlpi_atomic_open(&f, path);
    if (rc)
        return rc;
    rc = rlpi_atomic_write(&f, buf, len);
    if (rc) {
        rlpi_atomic_abort(&f);
        return rc;
    }
    return rlpi_atomic_commit(&f);
}
