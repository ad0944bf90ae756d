/* Serving order and resumable cursor of a task. The order of epoch e is a
 * pure function of (seed, e); the cursor (epoch, position) always names
 * the next item to serve, so a saved cursor can never mean "this epoch is
 * used up": at an epoch's end it already reads (epoch + 1, 0) — the whole
 * kind of public-bugs case #10 (verl #5725, an exhausted iterator restored
 * into the next epoch) has no representation. Knows nothing of records. */
#ifndef RLPI_TASK_CURSOR_H
#define RLPI_TASK_CURSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_cursor {
    uint64_t epoch;
    uint64_t position; /* < size when size > 0 (invariant) */
} rlpi_cursor;

typedef struct rlpi_order {
    uint64_t size;       /* items per epoch; 0: an endless stream (epoch stays 0) */
    uint64_t seed;
    int shuffle;         /* 0: item = position */
    uint64_t perm_epoch; /* epoch whose permutation perm holds */
    int have_perm;
    uint32_t *perm;      /* (size) when shuffle */
} rlpi_order;

/* RLP_E_INVALID_ARG when size exceeds 2^32 − 1 with shuffle on. */
int rlpi_order_init(rlpi_order *o, uint64_t size, uint64_t seed, int shuffle);
void rlpi_order_free(rlpi_order *o);

/* The item served at (epoch, position): an index in [0, size), or for an
 * endless stream the draw number `position`. Builds the epoch's
 * permutation on first use (O(size) time and 4·size bytes). RLP_E_NOMEM. */
int rlpi_order_item(rlpi_order *o, rlpi_cursor c, uint64_t *item);

/* One step: the next position, rolling over into the next epoch at the
 * end. The only place the cursor moves forward. RLP_E_OVERFLOW past
 * 2^63 - 1, the largest counter the saved (JSON) form can hold. */
int rlpi_cursor_advance(rlpi_cursor *c, uint64_t size);

/* Identity of what a cursor indexes: restore refuses a cursor of another
 * task, seed, size or content. */
typedef struct rlpi_cursor_owner {
    const char *task;     /* "kk", "countdown", "jsonl" */
    uint64_t seed;
    uint64_t size;
    uint64_t fingerprint;
} rlpi_cursor_owner;

/* JSON form: {"version":1,"task":…,"epoch":…,"position":…,"seed":…,
 * "size":…,"fingerprint":"16 hex digits"}. Writes up to cap bytes and a
 * NUL; *len gets the length without NUL, also on RLP_E_OVERFLOW. */
int rlpi_cursor_save(const rlpi_cursor *c, const rlpi_cursor_owner *owner, char *buf, size_t cap,
                     size_t *len);

/* Parses and checks a saved cursor against `owner`. A position equal to
 * size (a cursor written by a tool that counts "items done") is read as
 * the start of the next epoch; a larger one is RLP_E_FORMAT. RLP_E_FORMAT
 * for malformed text, RLP_E_INVALID_ARG when it belongs to another task,
 * seed, size or content (named in the message). *c is written only on
 * success. */
int rlpi_cursor_load(rlpi_cursor *c, const rlpi_cursor_owner *owner, const char *json, size_t len);

#endif
