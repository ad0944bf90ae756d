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

void rlpi_cat(char *dst, size_t cap, const char *src)
{
    size_t len = strnlen(dst, cap);
    if (len + 1 >= cap)
        return;
    size_t n = strnlen(src, cap - len - 1);
    memcpy(dst + len, src, n);
    dst[len + n] = '\0';
}

void rlpi_reason(rlp_reward_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->reason, sizeof res->reason, fmt, ap);
    va_end(ap);
}
