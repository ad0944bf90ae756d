/* Reading single fields out of a trajectory's metadata JSON. */
#include "reward/metadata.h"

#include "core/json_guard.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

char *rlpi_metadata_field(const char *metadata_json, const char *key, int numbers_ok, int *bad)
{
    *bad = 0;
    if (!metadata_json)
        return NULL;
    json_t *root = NULL;
    if (rlpi_json_load_guarded(metadata_json, strlen(metadata_json), RLPI_JSON_MAX_DEPTH, "metadata", &root)) {
        *bad = 1;
        return NULL;
    }
    char *out = NULL;
    json_t *v = json_is_object(root) ? json_object_get(root, key) : NULL;
    if (json_is_string(v))
        out = strdup(json_string_value(v));
    else if (numbers_ok && json_is_number(v))
        out = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    json_decref(root);
    return out;
}

char *rlpi_metadata_reference(const char *metadata_json, int *bad)
{
    return rlpi_metadata_field(metadata_json, "reference", 1, bad);
}
