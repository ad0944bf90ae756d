/* safetensors reader and writer (https://github.com/huggingface/safetensors):
 * 8-byte little-endian header length, JSON header, raw little-endian data.
 * Reads F32/F16/BF16 into rlpi_weights as fp32, writes F32/F16/BF16, and
 * reads sharded checkpoints through model.safetensors.index.json. Files are
 * hostile: every length, offset, shape and dtype is checked before use.
 * Knows nothing about model architectures (that is hf_dir.c). */
#ifndef RLPI_MODEL_SAFETENSORS_H
#define RLPI_MODEL_SAFETENSORS_H

#include "model/weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Header JSON larger than this is refused (the reference implementation's
 * limit is 100 MB as well); real headers are well under 1 MB. */
#define RLPI_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef enum rlpi_st_dtype {
    RLPI_ST_F32 = 0,
    RLPI_ST_F16 = 1,
    RLPI_ST_BF16 = 2
} rlpi_st_dtype;

/* The `__metadata__` string-to-string map, in file order. */
typedef struct rlpi_st_metadata {
    size_t n;
    char **keys;   /* owned */
    char **values; /* owned */
} rlpi_st_metadata;

void rlpi_st_metadata_init(rlpi_st_metadata *m);
void rlpi_st_metadata_free(rlpi_st_metadata *m);
/* Adds or replaces a key. RLP_E_NOMEM. */
int rlpi_st_metadata_set(rlpi_st_metadata *m, const char *key, const char *value);
/* NULL if absent. */
const char *rlpi_st_metadata_get(const rlpi_st_metadata *m, const char *key);

/* Parses a whole safetensors image held in memory and appends its tensors
 * to `w` (fp32, shapes as stored, src_dtype set). `meta` (may be NULL)
 * receives `__metadata__`. `source` names the file in messages.
 * RLP_E_FORMAT for any structural problem (message names it and the
 * tensor), RLP_E_UNSUPPORTED for a valid dtype we do not convert or more
 * than RLPI_MAX_DIMS dimensions, RLP_E_NOMEM. On failure `w` may hold the
 * tensors added before the failure: free it. */
int rlpi_safetensors_parse(const uint8_t *buf, size_t len, const char *source, rlpi_weights *w,
                           rlpi_st_metadata *meta);

/* Maps `path` and parses it (see above); also RLP_E_IO / RLP_E_NOT_FOUND. */
int rlpi_safetensors_read(const char *path, rlpi_weights *w, rlpi_st_metadata *meta);

/* Reads a sharded checkpoint: `index_path` is model.safetensors.index.json,
 * whose `weight_map` names, for every tensor, a shard file in the same
 * folder. Every listed tensor must be in its shard and no shard may hold
 * an unlisted one. Shard names with a path separator are refused.
 * `meta` receives the metadata of the first shard. */
int rlpi_safetensors_read_index(const char *index_path, rlpi_weights *w, rlpi_st_metadata *meta);

typedef struct rlpi_st_write_opts {
    rlpi_st_dtype dtype;          /* for every tensor */
    const rlpi_st_metadata *meta; /* NULL: no __metadata__ */
    bool skip_aliases;            /* true: aliases are not written (tied head);
                                     false: written as copies of their target */
} rlpi_st_write_opts;

/* Writes `w` to `path` atomically (temporary name, fsync, rename). Header
 * padded with spaces to a multiple of 8 so the data section is aligned.
 * Tensors are laid out in `w`'s order. RLP_E_IO, RLP_E_NOMEM,
 * RLP_E_OVERFLOW. */
int rlpi_safetensors_write(const char *path, const rlpi_weights *w, const rlpi_st_write_opts *opts);

/* Name of a dtype as the format spells it ("F32", "F16", "BF16"). */
const char *rlpi_st_dtype_name(rlpi_st_dtype d);

#endif
