/* libFuzzer target: rlpi_safetensors_parse on arbitrary bytes must return
 * a status (never crash, leak or read outside the buffer), and anything it
 * accepts must survive write -> read unchanged. Built by
 * tests/fuzz/run-fuzzers.sh. */
#include "model/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy so ASan flags a read one past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_st_metadata m;
    rlpi_st_metadata_init(&m);
    int rc = rlpi_safetensors_parse(buf, size, "fuzz", &w, &m);
    if (rc == 0 && w.n > 0 && size < 4096) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/fuzz_st_%d.safetensors", (int)getpid());
        rlpi_st_write_opts o = {RLPI_ST_F32, &m, false};
        if (rlpi_safetensors_write(path, &w, &o) == 0) {
            rlpi_weights r;
            rlpi_weights_init(&r);
            if (rlpi_safetensors_read(path, &r, NULL) != 0 || r.n != w.n)
                abort();
            for (size_t i = 0; i < w.n; i++) {
                const rlpi_tensor *t = rlpi_weights_find(&r, w.tensors[i].name);
                if (!t || t->n_elems != w.tensors[i].n_elems ||
                    memcmp(t->data, w.tensors[i].data, t->n_elems * sizeof(float)))
                    abort();
            }
            rlpi_weights_free(&r);
        }
        unlink(path);
    }
    rlpi_weights_free(&w);
    rlpi_st_metadata_free(&m);
    free(buf);
    return 0;
}
