/* A JSON string of bytes that may not be valid UTF-8 (a completion or an
 * action cut inside a character), which JSON cannot carry: each invalid
 * byte becomes U+FFFD. Shared by the HTTP reward verifier and the HTTP
 * environment, which send model text to services. */
#ifndef RLPI_CORE_JSON_TEXT_H
#define RLPI_CORE_JSON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* s (n bytes) as a JSON string; with replace_nul a NUL byte becomes
 * U+FFFD too (a peer that reads C strings). NULL when out of memory. */
json_t *rlpi_json_string_lossy(const char *s, size_t n, bool replace_nul);

#endif
