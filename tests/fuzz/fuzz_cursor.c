/* libFuzzer target: the task cursor a checkpoint carries (rlpi_cursor_load),
 * read back on resume from a file anyone with the run folder can edit.
 * The owner (task, seed, size, fingerprint) is taken from the input's own
 * fields when they have the right types, so that mutations get past the
 * identity checks to the position rules. An accepted cursor must name a
 * next item inside the epoch, and save -> load must give it back. */
#include "core/error.h"
#include "task/cursor.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t u64_or(const json_t *o, const char *key, uint64_t dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v) : dflt;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1); /* exact size for ASan */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_cursor_owner owner = {"kk", 1, 10, 0x0123456789abcdefu};
    char task[64] = "kk";
    json_t *peek = json_loadb(buf, size, JSON_DECODE_ANY, NULL);
    if (json_is_object(peek)) {
        const json_t *t = json_object_get(peek, "task");
        if (json_is_string(t) && json_string_length(t) < sizeof task &&
            strlen(json_string_value(t)) == json_string_length(t))
            memcpy(task, json_string_value(t), json_string_length(t) + 1);
        owner.seed = u64_or(peek, "seed", owner.seed);
        owner.size = u64_or(peek, "size", owner.size);
        const char *fp = json_string_value(json_object_get(peek, "fingerprint"));
        if (fp && strlen(fp) == 16)
            owner.fingerprint = strtoull(fp, NULL, 16);
    }
    json_decref(peek);
    owner.task = task;
    rlpi_cursor c = {UINT64_MAX, UINT64_MAX};
    if (rlpi_cursor_load(&c, &owner, buf, size) == RLP_OK) {
        if (owner.size && c.position >= owner.size)
            abort(); /* the cursor always names the next item of an epoch */
        char text[512];
        size_t len;
        rlpi_cursor back = {0, 0};
        if (rlpi_cursor_save(&c, &owner, text, sizeof text, &len) != RLP_OK ||
            rlpi_cursor_load(&back, &owner, text, len) != RLP_OK || back.epoch != c.epoch ||
            back.position != c.position)
            abort();
    } else if (c.epoch != UINT64_MAX || c.position != UINT64_MAX) {
        abort(); /* written only on success */
    }
    free(buf);
    return 0;
}
