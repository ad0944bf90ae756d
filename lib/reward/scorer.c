/* Reference counting of scorers and the reason formatter they share. */
#include "reward/scorer.h"

#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rlpi_scorer_create(rlpi_scorer **out, const rlpi_scorer_ops *ops, void *impl, size_t chunk)
{
    rlpi_scorer *sc = calloc(1, sizeof *sc);
    if (!sc) {
        ops->destroy(impl);
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory");
    }
    atomic_init(&sc->refs, 1);
    sc->ops = ops;
    sc->impl = impl;
    sc->chunk = chunk;
    sc->needs_reference = 1;
    *out = sc;
    return RLP_OK;
}

void rlpi_scorer_ref(rlpi_scorer *sc)
{
    atomic_fetch_add(&sc->refs, 1);
}

void rlpi_scorer_unref(rlpi_scorer *sc)
{
    if (!sc || atomic_fetch_sub(&sc->refs, 1) != 1)
        return;
    sc->ops->destroy(sc->impl);
    free(sc);
}

/* Length of s[0, n) without a UTF-8 sequence that the cut at n left
 * incomplete: reasons end up in JSON and in Python str, where half a
 * character is an error. */
static size_t utf8_cut(const char *s, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return need > back + 1 ? i - 1 : n;
}

void rlpi_cat(char *dst, size_t cap, const char *src)
{
    size_t len = strnlen(dst, cap);
    if (len + 1 >= cap)
        return;
    size_t room = cap - len - 1, n = strnlen(src, room);
    if (n == room && src[n] != '\0')
        n = utf8_cut(src, n); /* truncated: never inside a character */
    memcpy(dst + len, src, n);
    dst[len + n] = '\0';
}

void rlpi_reason(rlp_reward_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(res->reason, sizeof res->reason, fmt, ap);
    va_end(ap);
    if (w >= (int)sizeof res->reason) {
        size_t n = strlen(res->reason);
        res->reason[utf8_cut(res->reason, n)] = '\0';
    }
}
