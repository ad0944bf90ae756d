/* Hash tables behind the tokenizer's vocabulary and merge lookups (see
 * tok_map.h). Pure data structures: no error reporting, no I/O. */
#include "model/tok_map.h"

#include "core/checked.h"

#include <stdlib.h>
#include <string.h>

uint64_t rlpi_hash_bytes(const void *p, size_t n)
{
    /* FNV-1a, then a final mix so that low bits spread. */
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return h;
}

static size_t table_size(size_t n_expected)
{
    size_t size = 16;
    while (size < n_expected * 2 + 1 && size < ((size_t)1 << 40))
        size <<= 1;
    return size;
}

bool rlpi_strmap_init(rlpi_strmap *m, size_t n_expected, const void *owner, rlpi_piece_fn piece)
{
    size_t size = table_size(n_expected);
    m->slots = calloc(size, sizeof *m->slots);
    m->mask = size - 1;
    m->owner = owner;
    m->piece = piece;
    return m->slots != NULL;
}

void rlpi_strmap_free(rlpi_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

int32_t rlpi_strmap_find(const rlpi_strmap *m, const char *s, size_t len)
{
    size_t i = (size_t)rlpi_hash_bytes(s, len) & m->mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (v == 0)
            return -1;
        size_t plen;
        const char *p = m->piece(m->owner, (int32_t)(v - 1), &plen);
        if (plen == len && memcmp(p, s, len) == 0)
            return (int32_t)(v - 1);
        i = (i + 1) & m->mask;
    }
}

int32_t rlpi_strmap_insert(rlpi_strmap *m, int32_t id)
{
    size_t len;
    const char *s = m->piece(m->owner, id, &len);
    size_t i = (size_t)rlpi_hash_bytes(s, len) & m->mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (v == 0) {
            m->slots[i] = (uint32_t)id + 1;
            return -1;
        }
        size_t plen;
        const char *p = m->piece(m->owner, (int32_t)(v - 1), &plen);
        if (plen == len && memcmp(p, s, len) == 0)
            return (int32_t)(v - 1);
        i = (i + 1) & m->mask;
    }
}

static uint64_t pair_key(int32_t l, int32_t r)
{
    return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
}

static size_t pair_slot(uint64_t key, size_t mask)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 17) & mask;
}

bool rlpi_pairmap_init(rlpi_pairmap *m, size_t n_expected)
{
    size_t size = table_size(n_expected);
    m->slots = malloc(size * sizeof *m->slots);
    m->mask = size - 1;
    m->n = 0;
    if (!m->slots)
        return false;
    for (size_t i = 0; i < size; i++)
        m->slots[i].key = UINT64_MAX;
    return true;
}

void rlpi_pairmap_free(rlpi_pairmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

void rlpi_pairmap_put(rlpi_pairmap *m, int32_t left, int32_t right, double prio, int32_t merged)
{
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, m->mask);
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key)
            return;
        i = (i + 1) & m->mask;
    }
    m->slots[i].key = key;
    m->slots[i].prio = (float)prio;
    m->slots[i].merged = merged;
    m->n++;
}

bool rlpi_pairmap_get(const rlpi_pairmap *m, int32_t left, int32_t right, double *prio,
                      int32_t *merged)
{
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, m->mask);
    for (;;) {
        const rlpi_pair_slot *s = &m->slots[i];
        if (s->key == key) {
            *prio = s->prio;
            *merged = s->merged;
            return true;
        }
        if (s->key == UINT64_MAX)
            return false;
        i = (i + 1) & m->mask;
    }
}
