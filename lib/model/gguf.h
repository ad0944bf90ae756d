/* GGUF (v2, v3) reader: maps the file read-only and validates all it hands
 * out (lengths, counts, types, alignment, tensor extents, no overlap) before
 * allocating anything sized by the file (never more than 3x its size at
 * once), then gives typed access to metadata and tensor infos. It does not
 * dequantize (quant.h) or know model architectures (gguf_model.c). */
#ifndef RLPI_MODEL_GGUF_H
#define RLPI_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types (fixed by the format). */
typedef enum rlpi_gguf_vtype {
    RLPI_GGUF_UINT8 = 0,
    RLPI_GGUF_INT8 = 1,
    RLPI_GGUF_UINT16 = 2,
    RLPI_GGUF_INT16 = 3,
    RLPI_GGUF_UINT32 = 4,
    RLPI_GGUF_INT32 = 5,
    RLPI_GGUF_FLOAT32 = 6,
    RLPI_GGUF_BOOL = 7,
    RLPI_GGUF_STRING = 8,
    RLPI_GGUF_ARRAY = 9,
    RLPI_GGUF_UINT64 = 10,
    RLPI_GGUF_INT64 = 11,
    RLPI_GGUF_FLOAT64 = 12,
} rlpi_gguf_vtype;

#define RLPI_GGUF_MAX_DIMS 4
#define RLPI_GGUF_DEFAULT_ALIGNMENT 32
/* Longest tensor name accepted (ggml's GGML_MAX_NAME is 64 with the NUL). */
#define RLPI_GGUF_MAX_NAME 255

/* A string inside the mapped file: not NUL-terminated, valid UTF-8 is NOT
 * guaranteed for values (only for keys and tensor names). */
typedef struct rlpi_gguf_str {
    const char *ptr;
    uint64_t len;
} rlpi_gguf_str;

typedef struct rlpi_gguf_kv {
    char *key;             /* owned, NUL-terminated, valid UTF-8 */
    uint32_t type;         /* rlpi_gguf_vtype */
    uint32_t arr_type;     /* element type when type == ARRAY (never ARRAY) */
    uint64_t arr_n;        /* element count when type == ARRAY */
    const uint8_t *val;    /* the value (for arrays: the first element) in the map */
    uint64_t val_bytes;    /* bytes of the value (for arrays: of all elements) */
} rlpi_gguf_kv;

typedef struct rlpi_gguf_tensor {
    char *name;                        /* owned, NUL-terminated, valid UTF-8 */
    uint32_t n_dims;                   /* 1..4 */
    uint64_t ne[RLPI_GGUF_MAX_DIMS];   /* ne[0] innermost; unused dims are 1 */
    uint32_t type;                     /* ggml type id (quant.h) */
    uint64_t offset;                   /* from the start of the data section */
    uint64_t n_elems;
    uint64_t nbytes;                   /* from type and shape, checked against the file */
    const uint8_t *data;               /* in the map, nbytes long */
} rlpi_gguf_tensor;

typedef struct rlpi_gguf {
    uint32_t version;
    uint64_t alignment;
    uint64_t n_kv, n_tensors;
    rlpi_gguf_kv *kv;          /* sorted by key */
    rlpi_gguf_tensor *tensors; /* in file order */
    uint64_t *by_name;         /* tensor indices sorted by name (lookup) */
    uint64_t data_offset;      /* start of the data section in the file */
    const uint8_t *base;       /* the whole file */
    uint64_t size;
    void *map;                 /* mmap'd region, or NULL when opened from memory */
    size_t map_size;
    char source[128];          /* file name for messages */
} rlpi_gguf;

/* Opens and validates `path`. On success *out is a new reader (free with
 * rlpi_gguf_close). RLP_E_IO (open/stat/mmap), RLP_E_FORMAT (anything
 * malformed; the message names the key, tensor or offset), RLP_E_UNSUPPORTED
 * (GGUF v1, big-endian files), RLP_E_NOMEM. */
int rlpi_gguf_open(rlpi_gguf **out, const char *path);
/* Same over a caller's buffer, which must outlive the reader (tests, fuzzing,
 * in-memory models). `name` is used in messages. */
int rlpi_gguf_open_memory(rlpi_gguf **out, const void *buf, size_t size, const char *name);
void rlpi_gguf_close(rlpi_gguf *g);

/* Metadata lookup (binary search); NULL when absent. */
const rlpi_gguf_kv *rlpi_gguf_find(const rlpi_gguf *g, const char *key);

/* Typed getters. Each returns RLP_OK, RLP_E_NOT_FOUND when the key is absent
 * (message names the key) or RLP_E_FORMAT when its type does not convert
 * without loss (message names key, stored type and value). Integer getters
 * accept any integer type whose value fits; f32 accepts float32/float64. */
int rlpi_gguf_get_u32(const rlpi_gguf *g, const char *key, uint32_t *out);
int rlpi_gguf_get_i32(const rlpi_gguf *g, const char *key, int32_t *out);
int rlpi_gguf_get_u64(const rlpi_gguf *g, const char *key, uint64_t *out);
int rlpi_gguf_get_f32(const rlpi_gguf *g, const char *key, float *out);
int rlpi_gguf_get_bool(const rlpi_gguf *g, const char *key, bool *out);
/* Borrowed view into the map, valid until rlpi_gguf_close. */
int rlpi_gguf_get_str(const rlpi_gguf *g, const char *key, rlpi_gguf_str *out);

/* Array accessors. `*n` is the element count. */
int rlpi_gguf_get_arr_len(const rlpi_gguf *g, const char *key, uint64_t *n);
/* String arrays (tokenizer.ggml.tokens / merges): *out is a malloc'd array of
 * *n views into the map; the caller frees the array (not the strings). */
int rlpi_gguf_get_str_array(const rlpi_gguf *g, const char *key, rlpi_gguf_str **out, uint64_t *n);
/* Float arrays (tokenizer.ggml.scores): float32 or float64 elements, copied
 * into a malloc'd float array the caller frees. */
int rlpi_gguf_get_f32_array(const rlpi_gguf *g, const char *key, float **out, uint64_t *n);
/* Integer arrays (tokenizer.ggml.token_type): any integer element type whose
 * values fit int32, copied into a malloc'd array the caller frees. */
int rlpi_gguf_get_i32_array(const rlpi_gguf *g, const char *key, int32_t **out, uint64_t *n);

/* Tensor infos: index 0..n_tensors-1 in file order, or by name (NULL). */
const rlpi_gguf_tensor *rlpi_gguf_tensor_at(const rlpi_gguf *g, uint64_t i);
const rlpi_gguf_tensor *rlpi_gguf_find_tensor(const rlpi_gguf *g, const char *name);

/* Name of a metadata value type ("uint32", "array", ...; "?" if unknown). */
const char *rlpi_gguf_vtype_name(uint32_t t);

#endif
