/* libFuzzer target: the file transport's weight manifest parser on
 * arbitrary bytes. It must return a status (never crash, leak or read out
 * of bounds), and what it accepts must name the version folder by the
 * version and list only plain file names, so a reader can join them to
 * the weights folder unchecked; a version-2 manifest's chunk CRCs must
 * cover every file exactly (the relay indexes them unchecked). Built by tests/fuzz/run-fuzzers.sh. */
#include "sync/sync.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_manifest m;
    if (rlpi_manifest_parse(buf, size, "fuzz", &m) == 0) {
        char want[64];
        snprintf(want, sizeof want, "v%" PRIu64, m.version);
        if (strcmp(m.path, want) || m.n_files == 0 || m.n_files > RLPI_MANIFEST_MAX_FILES)
            abort();
        size_t chunks = 0;
        for (size_t i = 0; i < m.n_files; i++) {
            size_t n = strnlen(m.files[i].name, sizeof m.files[i].name);
            if (n == sizeof m.files[i].name || !rlpi_manifest_name_ok(m.files[i].name, n))
                abort();
            /* version 2: every file's chunk CRCs lie inside the array, in order */
            if (m.chunk_size && m.files[i].chunk0 != chunks)
                abort();
            chunks += rlpi_manifest_file_chunks(&m, &m.files[i]);
        }
        if (chunks != m.n_chunks || (m.n_chunks && !m.chunks) || (!m.chunk_size && m.chunks))
            abort();
        rlpi_manifest_clear(&m);
    } else if (m.n_files != 0 || m.chunks) {
        abort();
    }
    free(buf);
    return 0;
}
