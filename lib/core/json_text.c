/* rlpi_json_string_lossy: valid UTF-8 sequences are copied, anything else
 * (a stray continuation byte, a truncated or overlong sequence, a
 * surrogate) becomes U+FFFD, one per byte. */
#include "core/json_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s[i] (n bytes), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t i)
{
    unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    else if ((c & 0xe0) == 0xc0)
        len = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0)
        len = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (i + len > n)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i + k] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

json_t *rlpi_json_string_lossy(const char *s, size_t n, bool replace_nul)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u, n, i);
        bool keep = l && !(replace_nul && l == 1 && s[i] == 0);
        bad += !keep;
        i += keep ? l : 1;
    }
    if (!bad)
        return json_stringn(s, n);
    char *fixed = malloc(n + 2 * bad + 1);
    if (!fixed)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u, n, i);
        if (l && !(replace_nul && l == 1 && s[i] == 0)) {
            memcpy(fixed + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(fixed, o);
    free(fixed);
    return j;
}
