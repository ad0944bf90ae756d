/* Open-addressing hash tables for the tokenizer: piece → id over the
 * tokenizer's own string arena, and (left id, right id) → merge. They
 * never own the strings they index; sizes are powers of two at most half
 * full, so a probe always ends. */
#ifndef RLPI_MODEL_TOK_MAP_H
#define RLPI_MODEL_TOK_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t rlpi_hash_bytes(const void *p, size_t n);

/* piece → id. Slots hold id + 1 (0 = empty); the caller's getter supplies
 * the string of an id for comparison. */
typedef const char *(*rlpi_piece_fn)(const void *owner, int32_t id, size_t *len);

typedef struct rlpi_strmap {
    uint32_t *slots; /* [mask + 1] */
    size_t mask;
    const void *owner;
    rlpi_piece_fn piece;
} rlpi_strmap;

bool rlpi_strmap_init(rlpi_strmap *m, size_t n_expected, const void *owner, rlpi_piece_fn piece);
void rlpi_strmap_free(rlpi_strmap *m);
/* Returns the id of an equal piece already present, or -1 after inserting. */
int32_t rlpi_strmap_insert(rlpi_strmap *m, int32_t id);
int32_t rlpi_strmap_find(const rlpi_strmap *m, const char *s, size_t len);

/* (left, right) → (priority, merged id); lower priority merges first.
 * One 16-byte slot per entry so that a probe touches one cache line.
 * Priorities are floats: exact for merge ranks below 2^24 and for
 * SentencePiece's float scores. */
typedef struct rlpi_pair_slot {
    uint64_t key;   /* left << 32 | right; UINT64_MAX = empty */
    float prio;
    int32_t merged;
} rlpi_pair_slot;

typedef struct rlpi_pairmap {
    rlpi_pair_slot *slots; /* [mask + 1] */
    size_t mask, n;
} rlpi_pairmap;

bool rlpi_pairmap_init(rlpi_pairmap *m, size_t n_expected);
void rlpi_pairmap_free(rlpi_pairmap *m);
/* Keeps the existing entry (first merge wins) if the pair is present. */
void rlpi_pairmap_put(rlpi_pairmap *m, int32_t left, int32_t right, double prio, int32_t merged);
bool rlpi_pairmap_get(const rlpi_pairmap *m, int32_t left, int32_t right, double *prio,
                      int32_t *merged);

#endif
