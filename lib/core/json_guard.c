/* Depth-bounded, duplicate-rejecting jansson parse of untrusted text. */
#include "core/json_guard.h"

#include "core/error.h"

/* Deepest bracket nesting outside string literals. Malformed text may
 * confuse the count, but then jansson rejects it anyway; what matters is
 * that a document jansson would recurse into deeply is caught first. */
static int max_nesting(const char *s, size_t len, int limit)
{
    int depth = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++; /* skip the escaped character, whatever it is */
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return depth;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return depth;
}

int rlpi_json_load_guarded(const char *buf, size_t len, int max_depth, const char *source,
                           json_t **out)
{
    *out = NULL;
    if (max_nesting(buf, len, max_depth) > max_depth)
        return rlpi_error_set(RLP_E_FORMAT, "%s: JSON nested deeper than %d levels", source,
                              max_depth);
    json_error_t err;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (json_error_code(&err) == json_error_out_of_memory)
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory parsing JSON", source);
        return rlpi_error_set(RLP_E_FORMAT, "%s: invalid JSON at line %d column %d: %s", source,
                              err.line, err.column, err.text);
    }
    *out = root;
    return RLP_OK;
}
