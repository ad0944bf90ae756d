/* libFuzzer target for the GGUF reader and the GGUF model loader: any input
 * must either be rejected with an error or yield a reader whose every
 * accessor, dequantizer and the model mapping stay inside the buffer.
 * Built by tests/fuzz/run-fuzzers.sh (clang -fsanitize=fuzzer,address,undefined). */
#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Touches every byte a borrowed view claims, so ASan sees a bad view. */
static volatile unsigned sink;
static void touch(const void *p, uint64_t n)
{
    const unsigned char *c = p;
    for (uint64_t i = 0; i < n; i++)
        sink += c[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy: libFuzzer's buffer is exact too, but be explicit */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    rlpi_gguf *g = NULL;
    if (rlpi_gguf_open_memory(&g, buf, size, "fuzz") != RLP_OK) {
        free(buf);
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const rlpi_gguf_kv *kv = &g->kv[i];
        uint32_t u;
        int32_t s;
        uint64_t u64;
        float f;
        bool b;
        rlpi_gguf_str str;
        (void)rlpi_gguf_get_u32(g, kv->key, &u);
        (void)rlpi_gguf_get_i32(g, kv->key, &s);
        (void)rlpi_gguf_get_u64(g, kv->key, &u64);
        (void)rlpi_gguf_get_f32(g, kv->key, &f);
        (void)rlpi_gguf_get_bool(g, kv->key, &b);
        if (rlpi_gguf_get_str(g, kv->key, &str) == RLP_OK)
            touch(str.ptr, str.len);
        rlpi_gguf_str *sa;
        float *fa;
        int32_t *ia;
        uint64_t n;
        if (rlpi_gguf_get_str_array(g, kv->key, &sa, &n) == RLP_OK) {
            for (uint64_t k = 0; k < n; k++)
                touch(sa[k].ptr, sa[k].len);
            free(sa);
        }
        if (rlpi_gguf_get_f32_array(g, kv->key, &fa, &n) == RLP_OK)
            free(fa);
        if (rlpi_gguf_get_i32_array(g, kv->key, &ia, &n) == RLP_OK)
            free(ia);
        if (rlpi_gguf_find(g, kv->key) != kv)
            abort(); /* lookup must find every key it parsed */
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const rlpi_gguf_tensor *t = rlpi_gguf_tensor_at(g, i);
        touch(t->data, t->nbytes);
        if (rlpi_gguf_find_tensor(g, t->name) != t)
            abort();
        const rlpi_ggml_type_info *ti = rlpi_ggml_type(t->type);
        /* the element count is bounded by the file through nbytes */
        if (ti && ti->dequant && t->n_elems <= (1u << 22)) {
            float *out = malloc(t->n_elems ? (size_t)t->n_elems * sizeof *out : 1);
            if (out && rlpi_dequantize(t->type, t->data, (size_t)t->nbytes, out, (size_t)t->n_elems) != RLP_OK)
                abort(); /* a validated tensor must always dequantize */
            free(out);
        }
    }
    rlpi_model_config cfg;
    if (rlpi_gguf_model_config(g, &cfg) == RLP_OK) {
        rlpi_weights w;
        rlpi_weights_init(&w);
        (void)rlpi_gguf_model_weights(g, &cfg, &w, NULL);
        rlpi_weights_free(&w);
    }
    rlpi_gguf_close(g);
    free(buf);
    return 0;
}
