/* GGUF reader: parses and validates a GGUF v2/v3 file that may be hostile.
 * Every length, count and offset read from the file is checked against the
 * bytes that remain (with overflow-checked arithmetic) before it is used or
 * sized into an allocation, so a bad file costs at most O(file size) memory.
 * It must not interpret metadata beyond general.alignment, nor dequantize. */
#include "model/gguf.h"

#include "core/checked.h"
#include "core/error.h"
#include "model/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host (it reads scalars in place)"
#endif

/* Smallest possible encodings, used to bound counts by the bytes left:
 * a KV is key length (8) + a key of >= 1 byte + type (4) + a value of >= 1;
 * a tensor info is name length (8) + >= 1 byte + n_dims (4) + one dim (8) +
 * type (4) + offset (8). */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_INFO_BYTES 33u

typedef struct cursor {
    const uint8_t *base;
    uint64_t off, size;
    const char *src;
} cursor;

static uint64_t left(const cursor *c)
{
    return c->size - c->off;
}

static int truncated(const cursor *c, const char *what)
{
    return rlpi_error_set(RLP_E_FORMAT, "%s: truncated at offset %llu reading %s", c->src,
                          (unsigned long long)c->off, what);
}

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
    if (left(c) < 4)
        return truncated(c, what);
    memcpy(v, c->base + c->off, 4);
    c->off += 4;
    return RLP_OK;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what)
{
    if (left(c) < 8)
        return truncated(c, what);
    memcpy(v, c->base + c->off, 8);
    c->off += 8;
    return RLP_OK;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF,
 * and (because keys and names become C strings) no NUL. */
static bool utf8_ok(const uint8_t *s, uint64_t n)
{
    uint64_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b == 0)
            return false;
        if (b < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp, min;
        if ((b & 0xe0) == 0xc0) {
            len = 2, cp = b & 0x1fu, min = 0x80;
        } else if ((b & 0xf0) == 0xe0) {
            len = 3, cp = b & 0x0fu, min = 0x800;
        } else if ((b & 0xf8) == 0xf0) {
            len = 4, cp = b & 0x07u, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < (uint64_t)len)
            return false;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += (uint64_t)len;
    }
    return true;
}

/* Reads a length-prefixed string; *s points into the file. */
static int rd_str(cursor *c, rlpi_gguf_str *s, const char *what)
{
    uint64_t at = c->off, n = 0;
    int rc = rd_u64(c, &n, what);
    if (rc)
        return rc;
    if (n > left(c))
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s at offset %llu has length %llu but only %llu bytes remain",
                              c->src, what, (unsigned long long)at, (unsigned long long)n,
                              (unsigned long long)left(c));
    s->ptr = (const char *)(c->base + c->off);
    s->len = n;
    c->off += n;
    return RLP_OK;
}

/* A key or tensor name: non-empty, bounded, UTF-8; returned as a new C string. */
static int rd_name(cursor *c, char **out, uint64_t max_len, const char *what)
{
    uint64_t at = c->off;
    rlpi_gguf_str s;
    int rc = rd_str(c, &s, what);
    if (rc)
        return rc;
    if (s.len == 0 || s.len > max_len)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s at offset %llu has length %llu (must be 1..%llu)", c->src,
                              what, (unsigned long long)at, (unsigned long long)s.len,
                              (unsigned long long)max_len);
    if (!utf8_ok((const uint8_t *)s.ptr, s.len))
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s at offset %llu is not valid UTF-8", c->src, what,
                              (unsigned long long)at);
    char *p = malloc((size_t)s.len + 1);
    if (!p)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", c->src);
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    *out = p;
    return RLP_OK;
}

static const char *const vtype_names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                          "bool", "string", "array", "uint64", "int64", "float64"};

const char *rlpi_gguf_vtype_name(uint32_t t)
{
    return t < sizeof vtype_names / sizeof vtype_names[0] ? vtype_names[t] : "?";
}

/* Size of a fixed-size value type; 0 for string/array/unknown. */
static uint64_t scalar_size(uint32_t t)
{
    switch (t) {
    case RLPI_GGUF_UINT8: case RLPI_GGUF_INT8: case RLPI_GGUF_BOOL: return 1;
    case RLPI_GGUF_UINT16: case RLPI_GGUF_INT16: return 2;
    case RLPI_GGUF_UINT32: case RLPI_GGUF_INT32: case RLPI_GGUF_FLOAT32: return 4;
    case RLPI_GGUF_UINT64: case RLPI_GGUF_INT64: case RLPI_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static int rd_value(cursor *c, rlpi_gguf_kv *kv)
{
    uint64_t start = c->off;
    int rc;
    if (kv->type == RLPI_GGUF_STRING) {
        rlpi_gguf_str s;
        if ((rc = rd_str(c, &s, kv->key)))
            return rc;
        kv->val = c->base + start;
        kv->val_bytes = c->off - start;
        return RLP_OK;
    }
    if (kv->type == RLPI_GGUF_ARRAY) {
        uint64_t n = 0;
        if ((rc = rd_u32(c, &kv->arr_type, kv->key)) || (rc = rd_u64(c, &n, kv->key)))
            return rc;
        if (kv->arr_type == RLPI_GGUF_ARRAY)
            return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s': nested arrays are not allowed", c->src, kv->key);
        uint64_t es = scalar_size(kv->arr_type);
        if (!es && kv->arr_type != RLPI_GGUF_STRING)
            return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s': unknown array element type %u", c->src, kv->key,
                                  kv->arr_type);
        /* a string element takes at least its 8-byte length */
        uint64_t min_each = es ? es : 8;
        if (n > left(c) / min_each)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "%s: key '%s': array of %llu %s at offset %llu exceeds the %llu bytes left",
                                  c->src, kv->key, (unsigned long long)n, rlpi_gguf_vtype_name(kv->arr_type),
                                  (unsigned long long)start, (unsigned long long)left(c));
        kv->arr_n = n;
        kv->val = c->base + c->off;
        if (es) {
            c->off += n * es; /* bounded above */
        } else {
            for (uint64_t i = 0; i < n; i++) {
                rlpi_gguf_str s;
                if ((rc = rd_str(c, &s, kv->key)))
                    return rc;
            }
        }
        kv->val_bytes = (uint64_t)(c->base + c->off - kv->val);
        return RLP_OK;
    }
    uint64_t es = scalar_size(kv->type);
    if (!es)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' at offset %llu has unknown value type %u", c->src,
                              kv->key, (unsigned long long)start, kv->type);
    if (left(c) < es)
        return truncated(c, kv->key);
    kv->val = c->base + c->off;
    kv->val_bytes = es;
    c->off += es;
    if (kv->type == RLPI_GGUF_BOOL && kv->val[0] > 1)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s': bool value %u is not 0 or 1", c->src, kv->key,
                              kv->val[0]);
    return RLP_OK;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const rlpi_gguf_kv *)a)->key, ((const rlpi_gguf_kv *)b)->key);
}

/* qsort has no context argument in C11: the tensor array is passed through a
 * thread-local so that sorting stays reentrant across threads. */
static _Thread_local const rlpi_gguf_tensor *sort_tensors;

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(sort_tensors[*(const uint64_t *)a].name, sort_tensors[*(const uint64_t *)b].name);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const rlpi_gguf_tensor *x = &sort_tensors[*(const uint64_t *)a], *y = &sort_tensors[*(const uint64_t *)b];
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int rd_tensor_info(cursor *c, rlpi_gguf_tensor *t, uint64_t idx)
{
    char what[64];
    snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)idx);
    int rc = rd_name(c, &t->name, RLPI_GGUF_MAX_NAME, what);
    if (rc)
        return rc;
    if ((rc = rd_u32(c, &t->n_dims, t->name)))
        return rc;
    if (t->n_dims < 1 || t->n_dims > RLPI_GGUF_MAX_DIMS)
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' has %u dims (must be 1..%d)", c->src, t->name,
                              t->n_dims, RLPI_GGUF_MAX_DIMS);
    for (int d = 0; d < RLPI_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((rc = rd_u64(c, &t->ne[d], t->name)))
            return rc;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': dim %u = %llu is negative as int64", c->src,
                                  t->name, d, (unsigned long long)t->ne[d]);
    }
    if ((rc = rd_u32(c, &t->type, t->name)) || (rc = rd_u64(c, &t->offset, t->name)))
        return rc;
    const rlpi_ggml_type_info *ti = rlpi_ggml_type(t->type);
    if (!ti)
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' has unknown type id %u", c->src, t->name, t->type);
    uint64_t n = 1;
    for (int d = 0; d < RLPI_GGUF_MAX_DIMS; d++)
        if (!rlpi_mul_u64(&n, n, t->ne[d]))
            return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': element count overflows", c->src, t->name);
    if (t->ne[0] % ti->blck != 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': row length %llu is not a multiple of the %s block size %u",
                              c->src, t->name, (unsigned long long)t->ne[0], ti->name, ti->blck);
    t->n_elems = n;
    if (!rlpi_mul_u64(&t->nbytes, n / ti->blck, ti->type_size))
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': byte size of %llu %s elements overflows", c->src,
                              t->name, (unsigned long long)n, ti->name);
    return RLP_OK;
}

static int parse(rlpi_gguf *g)
{
    cursor c = {g->base, 0, g->size, g->source};
    int rc;
    if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: not a GGUF file (bad magic)", g->source);
    c.off = 4;
    if ((rc = rd_u32(&c, &g->version, "header version")))
        return rc;
    if (g->version == 1)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: GGUF version 1 is not supported (convert to v3)", g->source);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: big-endian GGUF files are not supported", g->source);
    if (g->version != 2 && g->version != 3)
        return rlpi_error_set(RLP_E_FORMAT, "%s: unknown GGUF version %u", g->source, g->version);
    if ((rc = rd_u64(&c, &g->n_tensors, "header tensor count")) ||
        (rc = rd_u64(&c, &g->n_kv, "header metadata count")))
        return rc;
    /* Bound both counts by the bytes left before allocating for either. */
    if (g->n_tensors > left(&c) / MIN_TENSOR_INFO_BYTES)
        return rlpi_error_set(RLP_E_FORMAT, "%s: header claims %llu tensors but the file has %llu bytes",
                              g->source, (unsigned long long)g->n_tensors, (unsigned long long)g->size);
    if (g->n_kv > left(&c) / MIN_KV_BYTES)
        return rlpi_error_set(RLP_E_FORMAT, "%s: header claims %llu metadata keys but the file has %llu bytes",
                              g->source, (unsigned long long)g->n_kv, (unsigned long long)g->size);
    uint64_t need;
    if (!rlpi_mul_u64(&need, g->n_tensors, MIN_TENSOR_INFO_BYTES) ||
        !rlpi_add_u64(&need, need, g->n_kv * MIN_KV_BYTES) || need > left(&c))
        return rlpi_error_set(RLP_E_FORMAT, "%s: %llu tensors and %llu keys cannot fit in %llu bytes", g->source,
                              (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv,
                              (unsigned long long)g->size);

    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    g->by_name = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->by_name);
    if (!g->kv || !g->tensors || !g->by_name)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for %llu keys / %llu tensors", g->source,
                              (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);

    g->alignment = RLPI_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        rlpi_gguf_kv *kv = &g->kv[i];
        char what[64];
        snprintf(what, sizeof what, "key %llu", (unsigned long long)i);
        if ((rc = rd_name(&c, &kv->key, UINT64_MAX, what)) || (rc = rd_u32(&c, &kv->type, kv->key)) ||
            (rc = rd_value(&c, kv)))
            return rc;
        if (!strcmp(kv->key, "general.alignment")) {
            uint32_t a;
            if (kv->type != RLPI_GGUF_UINT32)
                return rlpi_error_set(RLP_E_FORMAT, "%s: general.alignment has type %s (must be uint32)",
                                      g->source, rlpi_gguf_vtype_name(kv->type));
            memcpy(&a, kv->val, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return rlpi_error_set(RLP_E_FORMAT, "%s: general.alignment %u is not a nonzero power of two",
                                      g->source, a);
            g->alignment = a;
        }
    }
    if (g->n_kv > 1) {
        qsort(g->kv, (size_t)g->n_kv, sizeof *g->kv, cmp_kv);
        for (uint64_t i = 1; i < g->n_kv; i++)
            if (!strcmp(g->kv[i - 1].key, g->kv[i].key))
                return rlpi_error_set(RLP_E_FORMAT, "%s: duplicate key '%s'", g->source, g->kv[i].key);
    }

    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = rd_tensor_info(&c, &g->tensors[i], i)))
            return rc;

    /* The data section starts at the next alignment boundary. A file without
     * tensors may end before it. */
    if (!rlpi_align_up_u64(&g->data_offset, c.off, g->alignment))
        return rlpi_error_set(RLP_E_FORMAT, "%s: data section offset overflows", g->source);
    if (g->n_tensors == 0)
        return RLP_OK;
    if (g->data_offset > g->size)
        return rlpi_error_set(RLP_E_FORMAT, "%s: data section at offset %llu starts past the end of the file (%llu bytes)",
                              g->source, (unsigned long long)g->data_offset, (unsigned long long)g->size);
    uint64_t data_size = g->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        rlpi_gguf_tensor *t = &g->tensors[i];
        uint64_t end, padded;
        if (t->offset % g->alignment != 0)
            return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu",
                                  g->source, t->name, (unsigned long long)t->offset,
                                  (unsigned long long)g->alignment);
        /* Both the end and its padded form must be representable: the padding
         * step is where a size of 2^64-16 wraps to 0 (public-bugs.md #4). */
        if (!rlpi_add_u64(&end, t->offset, t->nbytes) || !rlpi_align_up_u64(&padded, end, g->alignment))
            return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s': offset %llu + %llu bytes overflows", g->source,
                                  t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        if (end > data_size)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "%s: tensor '%s': bytes [%llu, %llu) exceed the data section of %llu bytes",
                                  g->source, t->name, (unsigned long long)t->offset, (unsigned long long)end,
                                  (unsigned long long)data_size);
        t->data = g->base + g->data_offset + t->offset;
        g->by_name[i] = i;
    }
    sort_tensors = g->tensors;
    uint64_t *order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", g->source);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = i;
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    rc = RLP_OK;
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++) {
        const rlpi_gguf_tensor *a = &g->tensors[order[i - 1]], *b = &g->tensors[order[i]];
        if (a->offset + a->nbytes > b->offset) /* no overflow: checked above */
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                                g->source, a->name, (unsigned long long)a->offset,
                                (unsigned long long)(a->offset + a->nbytes), b->name,
                                (unsigned long long)b->offset, (unsigned long long)(b->offset + b->nbytes));
    }
    free(order);
    if (rc)
        return rc;
    qsort(g->by_name, (size_t)g->n_tensors, sizeof *g->by_name, cmp_by_name);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[g->by_name[i - 1]].name, g->tensors[g->by_name[i]].name))
            return rlpi_error_set(RLP_E_FORMAT, "%s: duplicate tensor '%s'", g->source,
                                  g->tensors[g->by_name[i]].name);
    return RLP_OK;
}

static void set_source(rlpi_gguf *g, const char *name)
{
    const char *slash = name ? strrchr(name, '/') : NULL;
    snprintf(g->source, sizeof g->source, "%s", slash ? slash + 1 : name ? name : "gguf");
}

int rlpi_gguf_open_memory(rlpi_gguf **out, const void *buf, size_t size, const char *name)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(buf || size == 0, "buf is NULL");
    rlpi_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return rlpi_error_set(RLP_E_NOMEM, "gguf: out of memory");
    set_source(g, name);
    g->base = buf ? buf : (const uint8_t *)"";
    g->size = size;
    int rc = parse(g);
    if (rc) {
        rlpi_gguf_close(g);
        return rc;
    }
    *out = g;
    return RLP_OK;
}

int rlpi_gguf_open(rlpi_gguf **out, const char *path)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rlpi_error_set(RLP_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return rlpi_error_set(RLP_E_IO, "%s: not a readable regular file%s%s", path, e ? ": " : "",
                              e ? strerror(e) : "");
    }
    rlpi_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        close(fd);
        return rlpi_error_set(RLP_E_NOMEM, "gguf: out of memory");
    }
    set_source(g, path);
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g);
            return rlpi_error_set(RLP_E_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        g->map = m;
        g->map_size = (size_t)st.st_size;
        g->base = m;
    } else {
        g->base = (const uint8_t *)"";
    }
    close(fd);
    g->size = (uint64_t)st.st_size;
    int rc = parse(g);
    if (rc) {
        rlpi_gguf_close(g);
        return rc;
    }
    *out = g;
    return RLP_OK;
}

void rlpi_gguf_close(rlpi_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].key);
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++)
            free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->by_name);
    if (g->map)
        munmap(g->map, g->map_size);
    free(g);
}

const rlpi_gguf_kv *rlpi_gguf_find(const rlpi_gguf *g, const char *key)
{
    if (!g || !key)
        return NULL;
    uint64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[mid].key, key);
        if (c == 0)
            return &g->kv[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const rlpi_gguf_tensor *rlpi_gguf_tensor_at(const rlpi_gguf *g, uint64_t i)
{
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const rlpi_gguf_tensor *rlpi_gguf_find_tensor(const rlpi_gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const rlpi_gguf_tensor *t = &g->tensors[g->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- typed getters ------------------------------------------------------ */

static const rlpi_gguf_kv *lookup(const rlpi_gguf *g, const char *key, int *rc)
{
    const rlpi_gguf_kv *kv = rlpi_gguf_find(g, key);
    *rc = kv ? RLP_OK
             : rlpi_error_set(RLP_E_NOT_FOUND, "%s: no metadata key '%s'", g ? g->source : "gguf",
                              key ? key : "(null)");
    return kv;
}

/* An integer element as (negative?, magnitude); false for a non-integer type. */
static bool int_at(uint32_t type, const uint8_t *p, bool *neg, uint64_t *mag)
{
    int64_t s;
    uint64_t u;
    *neg = false;
    switch (type) {
    case RLPI_GGUF_UINT8: *mag = p[0]; return true;
    case RLPI_GGUF_INT8: s = (int8_t)p[0]; break;
    case RLPI_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *mag = v; return true; }
    case RLPI_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case RLPI_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *mag = v; return true; }
    case RLPI_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case RLPI_GGUF_UINT64: memcpy(&u, p, 8); *mag = u; return true;
    case RLPI_GGUF_INT64: memcpy(&s, p, 8); break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

static int get_int(const rlpi_gguf *g, const char *key, int64_t lo, uint64_t hi, bool *neg, uint64_t *mag)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup(g, key, &rc);
    if (!kv)
        return rc;
    if (!int_at(kv->type, kv->val, neg, mag))
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' has type %s, expected an integer", g->source, key,
                              rlpi_gguf_vtype_name(kv->type));
    if (*neg ? *mag > (uint64_t)0 - (uint64_t)lo : *mag > hi)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' = %s%llu is out of range", g->source, key,
                              *neg ? "-" : "", (unsigned long long)*mag);
    return RLP_OK;
}

int rlpi_gguf_get_u32(const rlpi_gguf *g, const char *key, uint32_t *out)
{
    bool neg;
    uint64_t mag;
    int rc = get_int(g, key, 0, UINT32_MAX, &neg, &mag);
    if (!rc)
        *out = (uint32_t)mag;
    return rc;
}

int rlpi_gguf_get_u64(const rlpi_gguf *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    int rc = get_int(g, key, 0, UINT64_MAX, &neg, &mag);
    if (!rc)
        *out = mag;
    return rc;
}

int rlpi_gguf_get_i32(const rlpi_gguf *g, const char *key, int32_t *out)
{
    bool neg;
    uint64_t mag;
    int rc = get_int(g, key, INT32_MIN, INT32_MAX, &neg, &mag);
    if (!rc)
        *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return rc;
}

int rlpi_gguf_get_f32(const rlpi_gguf *g, const char *key, float *out)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup(g, key, &rc);
    if (!kv)
        return rc;
    if (kv->type == RLPI_GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == RLPI_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' has type %s, expected a float", g->source, key,
                              rlpi_gguf_vtype_name(kv->type));
    }
    return RLP_OK;
}

int rlpi_gguf_get_bool(const rlpi_gguf *g, const char *key, bool *out)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup(g, key, &rc);
    if (!kv)
        return rc;
    if (kv->type != RLPI_GGUF_BOOL)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' has type %s, expected bool", g->source, key,
                              rlpi_gguf_vtype_name(kv->type));
    *out = kv->val[0] != 0;
    return RLP_OK;
}

int rlpi_gguf_get_str(const rlpi_gguf *g, const char *key, rlpi_gguf_str *out)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup(g, key, &rc);
    if (!kv)
        return rc;
    if (kv->type != RLPI_GGUF_STRING)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' has type %s, expected string", g->source, key,
                              rlpi_gguf_vtype_name(kv->type));
    memcpy(&out->len, kv->val, 8);
    out->ptr = (const char *)kv->val + 8;
    return RLP_OK;
}

static const rlpi_gguf_kv *lookup_arr(const rlpi_gguf *g, const char *key, int *rc)
{
    const rlpi_gguf_kv *kv = lookup(g, key, rc);
    if (kv && kv->type != RLPI_GGUF_ARRAY) {
        *rc = rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' has type %s, expected array", g->source, key,
                             rlpi_gguf_vtype_name(kv->type));
        return NULL;
    }
    return kv;
}

int rlpi_gguf_get_arr_len(const rlpi_gguf *g, const char *key, uint64_t *n)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup_arr(g, key, &rc);
    if (kv)
        *n = kv->arr_n;
    return rc;
}

static int wrong_elem(const rlpi_gguf *g, const char *key, const rlpi_gguf_kv *kv, const char *want)
{
    return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' is an array of %s, expected %s", g->source, key,
                          rlpi_gguf_vtype_name(kv->arr_type), want);
}

int rlpi_gguf_get_str_array(const rlpi_gguf *g, const char *key, rlpi_gguf_str **out, uint64_t *n)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup_arr(g, key, &rc);
    if (!kv)
        return rc;
    if (kv->arr_type != RLPI_GGUF_STRING)
        return wrong_elem(g, key, kv, "strings");
    /* arr_n <= file size / 8 was checked while parsing */
    rlpi_gguf_str *v = malloc(kv->arr_n ? (size_t)kv->arr_n * sizeof *v : 1);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for '%s'", g->source, key);
    const uint8_t *p = kv->val;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        memcpy(&v[i].len, p, 8);
        v[i].ptr = (const char *)p + 8;
        p += 8 + v[i].len; /* lengths were validated during parsing */
    }
    *out = v;
    *n = kv->arr_n;
    return RLP_OK;
}

int rlpi_gguf_get_f32_array(const rlpi_gguf *g, const char *key, float **out, uint64_t *n)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup_arr(g, key, &rc);
    if (!kv)
        return rc;
    if (kv->arr_type != RLPI_GGUF_FLOAT32 && kv->arr_type != RLPI_GGUF_FLOAT64)
        return wrong_elem(g, key, kv, "floats");
    float *v = malloc(kv->arr_n ? (size_t)kv->arr_n * sizeof *v : 1);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for '%s'", g->source, key);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        if (kv->arr_type == RLPI_GGUF_FLOAT32) {
            memcpy(&v[i], kv->val + 4 * i, 4);
        } else {
            double d;
            memcpy(&d, kv->val + 8 * i, 8);
            v[i] = (float)d;
        }
    }
    *out = v;
    *n = kv->arr_n;
    return RLP_OK;
}

int rlpi_gguf_get_i32_array(const rlpi_gguf *g, const char *key, int32_t **out, uint64_t *n)
{
    int rc;
    const rlpi_gguf_kv *kv = lookup_arr(g, key, &rc);
    if (!kv)
        return rc;
    uint64_t es = scalar_size(kv->arr_type);
    bool neg;
    uint64_t mag;
    if (!es || kv->arr_type == RLPI_GGUF_FLOAT32 || kv->arr_type == RLPI_GGUF_FLOAT64 ||
        kv->arr_type == RLPI_GGUF_BOOL)
        return wrong_elem(g, key, kv, "integers");
    int32_t *v = malloc(kv->arr_n ? (size_t)kv->arr_n * sizeof *v : 1);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for '%s'", g->source, key);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int_at(kv->arr_type, kv->val + es * i, &neg, &mag);
        if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX) {
            free(v);
            return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s'[%llu] = %s%llu does not fit int32", g->source, key,
                                  (unsigned long long)i, neg ? "-" : "", (unsigned long long)mag);
        }
        v[i] = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    }
    *out = v;
    *n = kv->arr_n;
    return RLP_OK;
}
