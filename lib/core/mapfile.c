/* mmap-backed read-only file views. */
#include "core/mapfile.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int rlpi_map_file(const char *path, rlpi_mapped_file *out)
{
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rlpi_error_set(errno == ENOENT ? RLP_E_NOT_FOUND : RLP_E_IO, "%s: cannot open: %s",
                              path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rlpi_error_set(RLP_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rlpi_error_set(RLP_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) { /* mmap of length 0 fails; an empty view is valid */
        close(fd);
        return RLP_OK;
    }
    if ((uintmax_t)st.st_size > SIZE_MAX) {
        close(fd);
        return rlpi_error_set(RLP_E_OVERFLOW, "%s: file too large to map", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED)
        return rlpi_error_set(RLP_E_IO, "%s: cannot map: %s", path, strerror(e));
    out->data = p;
    out->size = (size_t)st.st_size;
    return RLP_OK;
}

void rlpi_unmap_file(rlpi_mapped_file *m)
{
    if (m && m->data)
        munmap((void *)(uintptr_t)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}
