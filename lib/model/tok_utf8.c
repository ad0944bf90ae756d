/* UTF-8 for the tokenizer: well-formedness scanning by the Unicode
 * "maximal subpart" rule (Unicode 15, table 3-7), lossy conversion with
 * U+FFFD, the hold-back rule of the streaming decoder, and NFC through
 * ICU. Knows nothing about tokens. */
#include "model/tok_utf8.h"

#include "core/checked.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

/* Classifies the sequence at s[i]: returns RLPI_U8_OK with its length,
 * RLPI_U8_PARTIAL when s ends inside a still-valid sequence (length =
 * bytes present), or RLPI_U8_BAD with the length of the maximal ill-formed
 * subpart (≥ 1). */
int rlpi_utf8_scan(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned char c = s[i];
    if (c < 0x80) {
        *len = 1;
        return RLPI_U8_OK;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        *len = 1;
        return RLPI_U8_BAD;
    }
    size_t k = 1;
    for (; k < need; k++) {
        if (i + k >= n) {
            *len = k;
            return RLPI_U8_PARTIAL;
        }
        unsigned char b = s[i + k];
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
        if (b < l || b > h) {
            *len = k;
            return RLPI_U8_BAD;
        }
    }
    *len = need;
    return RLPI_U8_OK;
}

bool rlpi_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0, len;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (rlpi_utf8_scan(s, n, i, &len) != RLPI_U8_OK)
            return false;
        i += len;
    }
    return true;
}

size_t rlpi_utf8_complete_prefix(const unsigned char *s, size_t n)
{
    /* Only a sequence starting in the last 3 bytes can be incomplete: find
     * the last non-continuation byte there and ask whether the bytes from
     * it on are a valid but unfinished sequence. */
    if (n == 0)
        return 0;
    size_t j = n - 1;
    while (j > 0 && n - j < 4 && (s[j] & 0xc0) == 0x80)
        j--;
    if ((s[j] & 0xc0) == 0x80)
        return n;
    size_t len;
    return rlpi_utf8_scan(s, n, j, &len) == RLPI_U8_PARTIAL ? j : n;
}

static bool reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (!rlpi_mul_size(&c, c, 2))
            return false;
    }
    char *p = realloc(*buf, c);
    if (!p)
        return false;
    *buf = p;
    *cap = c;
    return true;
}

bool rlpi_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n)
{
    size_t need;
    if (!rlpi_add_size(&need, *len, n) || !rlpi_add_size(&need, need, 1))
        return false;
    if (!reserve(buf, cap, need))
        return false;
    if (n)
        memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

bool rlpi_utf8_lossy_append(char **buf, size_t *len, size_t *cap, const unsigned char *s,
                            size_t n)
{
    size_t need;
    if (!rlpi_mul_size(&need, n, 3) || !rlpi_add_size(&need, need, *len) ||
        !rlpi_add_size(&need, need, 1) || !reserve(buf, cap, need))
        return false;
    size_t i = 0, l;
    while (i < n) {
        int st = rlpi_utf8_scan(s, n, i, &l);
        if (st == RLPI_U8_OK) {
            memcpy(*buf + *len, s + i, l);
            *len += l;
        } else {
            memcpy(*buf + *len, "\xef\xbf\xbd", 3);
            *len += 3;
        }
        i += l;
    }
    (*buf)[*len] = '\0';
    return true;
}

int rlpi_utf8_nfc(const char *s, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (n > (size_t)INT32_MAX / 4)
        return RLPI_NFC_SKIP;
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&err);
    if (U_FAILURE(err))
        return RLPI_NFC_FAIL;
    int32_t n16 = 0;
    u_strFromUTF8(NULL, 0, &n16, s, (int32_t)n, &err);
    if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err))
        return RLPI_NFC_SKIP; /* ill-formed UTF-8: leave the bytes alone */
    err = U_ZERO_ERROR;
    UChar *u = malloc(((size_t)n16 + 1) * sizeof *u);
    if (!u)
        return RLPI_NFC_FAIL;
    u_strFromUTF8(u, n16 + 1, NULL, s, (int32_t)n, &err);
    if (U_FAILURE(err)) {
        free(u);
        return RLPI_NFC_SKIP;
    }
    int32_t span = unorm2_spanQuickCheckYes(nfc, u, n16, &err);
    if (U_FAILURE(err) || span == n16) {
        free(u);
        return RLPI_NFC_SKIP; /* already NFC */
    }
    /* NFC output is at most 3x the input in UTF-16 units. */
    int32_t cap16 = n16 * 3 + 16;
    UChar *v = malloc((size_t)cap16 * sizeof *v);
    if (!v) {
        free(u);
        return RLPI_NFC_FAIL;
    }
    int32_t m16 = unorm2_normalize(nfc, u, n16, v, cap16, &err);
    free(u);
    if (U_FAILURE(err)) {
        free(v);
        return RLPI_NFC_SKIP;
    }
    int32_t n8 = 0;
    u_strToUTF8(NULL, 0, &n8, v, m16, &err);
    err = U_ZERO_ERROR;
    char *o = malloc((size_t)n8 + 1);
    if (!o) {
        free(v);
        return RLPI_NFC_FAIL;
    }
    u_strToUTF8(o, n8 + 1, NULL, v, m16, &err);
    free(v);
    if (U_FAILURE(err)) {
        free(o);
        return RLPI_NFC_SKIP;
    }
    *out = o;
    *out_len = (size_t)n8;
    return RLPI_NFC_DONE;
}
