/* Parsing untrusted JSON (file headers, config.json, index files) through
 * jansson with two guards jansson leaves to the caller: a nesting-depth
 * bound checked by a flat scan before any recursion, and rejection of
 * duplicate keys. Only parses; what the document means is the caller's. */
#ifndef RLPI_CORE_JSON_GUARD_H
#define RLPI_CORE_JSON_GUARD_H

#include <jansson.h>
#include <stddef.h>

/* Deepest nesting a loader accepts. Real headers and configs nest 3-4
 * levels; jansson's own recursion limit (2048) is a stack-size bet we do
 * not need to make. */
#define RLPI_JSON_MAX_DEPTH 32

/* Parses `len` bytes (no NUL needed) into *out. RLP_E_FORMAT naming
 * `source` when nesting exceeds `max_depth`, the text is not valid JSON or
 * UTF-8, or an object repeats a key; RLP_E_NOMEM. */
int rlpi_json_load_guarded(const char *buf, size_t len, int max_depth, const char *source,
                           json_t **out);

#endif
