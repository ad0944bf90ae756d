/* Per-epoch shuffle (Fisher–Yates over a stream seeded by (seed, epoch))
 * and the cursor's arithmetic and JSON form. The cursor is normalised on
 * every move and every load, so "position == size" never exists in
 * memory: resuming at an epoch boundary cannot replay an exhausted epoch
 * (public-bugs case #10). Must not know what the items are. */
#include "task/cursor.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "core/rng.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHUFFLE_SALT UINT64_C(0x73687566666c6521) /* "shuffle!" */
#define CURSOR_VERSION 1

int rlpi_order_init(rlpi_order *o, uint64_t size, uint64_t seed, int shuffle)
{
    memset(o, 0, sizeof *o);
    if (shuffle && size > UINT32_MAX)
        return rlpi_error_set(RLP_E_INVALID_ARG, "task: %" PRIu64 " items are too many to shuffle",
                              size);
    o->size = size;
    o->seed = seed;
    o->shuffle = shuffle && size > 1;
    return RLP_OK;
}

void rlpi_order_free(rlpi_order *o)
{
    if (!o)
        return;
    free(o->perm);
    memset(o, 0, sizeof *o);
}

static int build_perm(rlpi_order *o, uint64_t epoch)
{
    if (!o->perm) {
        if (o->size > SIZE_MAX / sizeof(uint32_t) || !(o->perm = malloc((size_t)o->size * sizeof(uint32_t))))
            return rlpi_error_set(RLP_E_NOMEM, "task: out of memory for a shuffle of %" PRIu64
                                               " items", o->size);
    }
    rlpi_rng r;
    rlpi_rng_seed(&r, o->seed ^ SHUFFLE_SALT, epoch);
    for (uint64_t i = 0; i < o->size; i++)
        o->perm[i] = (uint32_t)i;
    for (uint64_t i = o->size - 1; i > 0; i--) {
        uint64_t j = rlpi_rng_below(&r, i + 1);
        uint32_t t = o->perm[i];
        o->perm[i] = o->perm[j];
        o->perm[j] = t;
    }
    o->perm_epoch = epoch;
    o->have_perm = 1;
    return RLP_OK;
}

int rlpi_order_item(rlpi_order *o, rlpi_cursor c, uint64_t *item)
{
    if (o->size == 0 || !o->shuffle) {
        *item = c.position;
        return RLP_OK;
    }
    if (!o->have_perm || o->perm_epoch != c.epoch) {
        int rc = build_perm(o, c.epoch);
        if (rc)
            return rc;
    }
    *item = o->perm[c.position];
    return RLP_OK;
}

int rlpi_cursor_advance(rlpi_cursor *c, uint64_t size)
{
    /* Counters stop at INT64_MAX, not UINT64_MAX: the saved form is JSON,
     * whose integers jansson (and so rlpi_cursor_load) reads only up to
     * 2^63 - 1; a larger one would be saved as text that cannot be
     * restored. */
    if (size == 0) {
        if (c->position >= (uint64_t)INT64_MAX)
            return rlpi_error_set(RLP_E_OVERFLOW, "task: the stream position overflowed");
        c->position++;
        return RLP_OK;
    }
    if (c->position + 1 < size) {
        c->position++;
        return RLP_OK;
    }
    if (c->epoch >= (uint64_t)INT64_MAX)
        return rlpi_error_set(RLP_E_OVERFLOW, "task: the epoch counter overflowed");
    c->epoch++;
    c->position = 0;
    return RLP_OK;
}

int rlpi_cursor_save(const rlpi_cursor *c, const rlpi_cursor_owner *owner, char *buf, size_t cap,
                     size_t *len)
{
    char tmp[512];
    json_t *task = json_string(owner->task);
    char *task_json = task ? json_dumps(task, JSON_ENCODE_ANY) : NULL;
    json_decref(task);
    if (!task_json)
        return rlpi_error_set(RLP_E_NOMEM, "task: out of memory");
    int n = snprintf(tmp, sizeof tmp,
                     "{\"version\":%d,\"task\":%s,\"epoch\":%" PRIu64 ",\"position\":%" PRIu64
                     ",\"seed\":%" PRIu64 ",\"size\":%" PRIu64 ",\"fingerprint\":\"%016" PRIx64 "\"}",
                     CURSOR_VERSION, task_json, c->epoch, c->position, owner->seed, owner->size,
                     owner->fingerprint);
    free(task_json);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return rlpi_error_set(RLP_E_INTERNAL, "task: cursor text too long");
    *len = (size_t)n;
    if (cap < (size_t)n + 1) {
        if (buf && cap) {
            memcpy(buf, tmp, cap - 1);
            buf[cap - 1] = '\0';
        }
        return rlpi_error_set(RLP_E_OVERFLOW, "task cursor: %d bytes do not fit in %zu", n + 1, cap);
    }
    memcpy(buf, tmp, (size_t)n + 1);
    return RLP_OK;
}

/* A non-negative JSON integer field. Numbers past 2^63 − 1 are not
 * JSON integers to jansson and fail here too. */
static int get_u64(const json_t *root, const char *key, uint64_t *out)
{
    const json_t *v = json_object_get(root, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return rlpi_error_set(RLP_E_FORMAT, "task cursor: \"%s\" is %s", key,
                              v ? "not a non-negative integer" : "missing");
    *out = (uint64_t)json_integer_value(v);
    return RLP_OK;
}

/* Exactly 16 hex digits. */
static int parse_hex64(const char *s, uint64_t *out)
{
    if (!s || strlen(s) != 16)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 1;
}

int rlpi_cursor_load(rlpi_cursor *c, const rlpi_cursor_owner *owner, const char *text, size_t len)
{
    json_t *root = NULL;
    int rc = rlpi_json_load_guarded(text, len, 4, "task cursor", &root);
    if (rc)
        return rc;
    uint64_t version, epoch, position, seed, size;
    const json_t *task = json_object_get(root, "task");
    const char *fp_text = json_string_value(json_object_get(root, "fingerprint"));
    uint64_t fp = 0;
    if (!json_is_object(root))
        rc = rlpi_error_set(RLP_E_FORMAT, "task cursor: not a JSON object");
    else if ((rc = get_u64(root, "version", &version)) || (rc = get_u64(root, "epoch", &epoch)) ||
             (rc = get_u64(root, "position", &position)) || (rc = get_u64(root, "seed", &seed)) ||
             (rc = get_u64(root, "size", &size)))
        ;
    else if (version != CURSOR_VERSION)
        rc = rlpi_error_set(RLP_E_FORMAT, "task cursor: version %" PRIu64 " (this library reads %d)",
                            version, CURSOR_VERSION);
    else if (!json_is_string(task))
        rc = rlpi_error_set(RLP_E_FORMAT, "task cursor: \"task\" is missing or not a string");
    else if (!parse_hex64(fp_text, &fp))
        rc = rlpi_error_set(RLP_E_FORMAT, "task cursor: \"fingerprint\" is not 16 hex digits");
    else if (strcmp(json_string_value(task), owner->task))
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "task cursor: saved by task \"%.32s\", not \"%s\"",
                            json_string_value(task), owner->task);
    else if (seed != owner->seed)
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "task cursor: saved with seed %" PRIu64 ", this task has seed %" PRIu64
                            " (a different order: resuming would repeat and skip items)",
                            seed, owner->seed);
    else if (size != owner->size)
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "task cursor: saved for %" PRIu64 " items per epoch, this task has %" PRIu64,
                            size, owner->size);
    else if (fp != owner->fingerprint)
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "task cursor: saved for other content (fingerprint %016" PRIx64
                            ", this task %016" PRIx64 ")",
                            fp, owner->fingerprint);
    else if (size && position > size)
        rc = rlpi_error_set(RLP_E_FORMAT, "task cursor: position %" PRIu64 " is past the %" PRIu64
                                          " items of an epoch",
                            position, size);
    json_decref(root);
    if (rc)
        return rc;
    rlpi_cursor got = {epoch, position};
    /* "all `size` items of epoch e done" is "epoch e + 1 not started":
     * step from the last item like a served one would */
    if (size && position == size) {
        got.position = size - 1;
        if ((rc = rlpi_cursor_advance(&got, size)))
            return rc;
    }
    *c = got;
    return RLP_OK;
}
