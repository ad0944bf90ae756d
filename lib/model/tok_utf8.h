/* UTF-8 scanning, lossy conversion and NFC for the tokenizer (see
 * tok_utf8.c). rlpi_utf8_complete_prefix and rlpi_utf8_lossy_append are
 * declared in tokenizer.h, where the streaming decoder finds them. */
#ifndef RLPI_MODEL_TOK_UTF8_H
#define RLPI_MODEL_TOK_UTF8_H

#include "model/tokenizer.h"

enum { RLPI_U8_OK = 0, RLPI_U8_PARTIAL = 1, RLPI_U8_BAD = 2 };

int rlpi_utf8_scan(const unsigned char *s, size_t n, size_t i, size_t *len);
bool rlpi_utf8_valid(const unsigned char *s, size_t n);

/* Appends bytes to a NUL-terminated growable buffer. */
bool rlpi_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n);

enum { RLPI_NFC_SKIP = 0, RLPI_NFC_DONE = 1, RLPI_NFC_FAIL = -1 };
/* NFC of s[0..n): RLPI_NFC_DONE with a malloc'd *out when it changes the
 * text, RLPI_NFC_SKIP when the text is already NFC (or not well-formed
 * UTF-8, which is then left as it is), RLPI_NFC_FAIL when out of memory. */
int rlpi_utf8_nfc(const char *s, size_t n, char **out, size_t *out_len);

#endif
