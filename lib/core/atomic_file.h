/* Crash-safe file replacement: write to a temporary name in the target's
 * folder, fsync, rename over the target, fsync the folder. A crash at any
 * point leaves either the old file or the new one, never a torn mix. Not
 * for concurrent writers of the same path (last rename wins). */
#ifndef RLPI_CORE_ATOMIC_FILE_H
#define RLPI_CORE_ATOMIC_FILE_H

#include <stddef.h>

typedef struct rlpi_atomic_file {
    int fd;
    char *path;     /* final name */
    char *tmp_path; /* temporary name, unlinked on abort */
} rlpi_atomic_file;

/* Creates the temporary file (mode 0644). RLP_E_IO / RLP_E_NOMEM. */
int rlpi_atomic_open(rlpi_atomic_file *f, const char *path);
/* Writes all of `len` bytes (retrying short writes). RLP_E_IO. */
int rlpi_atomic_write(rlpi_atomic_file *f, const void *buf, size_t len);
/* fsync, rename, fsync folder; frees `f`. On failure the target is
 * untouched and the temporary is removed. */
int rlpi_atomic_commit(rlpi_atomic_file *f);
/* Removes the temporary and frees `f`; safe after a failed open. */
void rlpi_atomic_abort(rlpi_atomic_file *f);

/* Convenience: the whole file from one buffer. */
int rlpi_atomic_write_file(const char *path, const void *buf, size_t len);

#endif
