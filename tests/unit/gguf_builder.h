/* Writes GGUF bytes field by field into a growable buffer, so tests (and the
 * fuzz seed writer) can state a broken file exactly: any length, count, type
 * id or offset can be given its hostile value. Test-only; aborts on OOM. */
#ifndef RLPI_TEST_GGUF_BUILDER_H
#define RLPI_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb {
    uint8_t *p;
    size_t n, cap;
} gb;

static inline void gb_bytes(gb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}
static inline void gb_u32(gb *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64(gb *b, uint64_t v) { gb_bytes(b, &v, 8); }
/* a string whose length field says `len` but whose bytes are `s` */
static inline void gb_str_len(gb *b, const char *s, uint64_t len)
{
    gb_u64(b, len);
    gb_bytes(b, s, strlen(s));
}
static inline void gb_str(gb *b, const char *s) { gb_str_len(b, s, strlen(s)); }
static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static inline void gb_kv_u32(gb *b, const char *key, uint32_t v)
{
    gb_str(b, key);
    gb_u32(b, 4);
    gb_u32(b, v);
}
static inline void gb_kv_str(gb *b, const char *key, const char *v)
{
    gb_str(b, key);
    gb_u32(b, 8);
    gb_str(b, v);
}
static inline void gb_tensor(gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_pad(gb *b, size_t align)
{
    static const uint8_t zero[64];
    while (b->n % align)
        gb_bytes(b, zero, 1);
}
/* `n` bytes of a deterministic pattern (tensor data) */
static inline void gb_fill(gb *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(seed + i * 7);
        gb_bytes(b, &v, 1);
    }
}
static inline void gb_free(gb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

#endif
