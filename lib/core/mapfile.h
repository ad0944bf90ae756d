/* Read-only whole-file views for loaders: mmap where possible so multi-GB
 * checkpoints are not copied before conversion. Gives a pointer and the
 * exact size; bounds checking against that size is the caller's job. */
#ifndef RLPI_CORE_MAPFILE_H
#define RLPI_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_mapped_file {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
} rlpi_mapped_file;

/* RLP_E_IO (with the path and errno text) if it cannot be opened or mapped,
 * or is not a regular file. */
int rlpi_map_file(const char *path, rlpi_mapped_file *out);
void rlpi_unmap_file(rlpi_mapped_file *m);

#endif
