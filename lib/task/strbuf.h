/* A growable NUL-terminated byte string for the task renderers. Errors are
 * sticky: after a failed append the buffer stays as it was, `failed` is set
 * and further appends do nothing, so a renderer checks once at the end.
 * Internal to lib/task; never exposes its storage past rlpi_sb_take(). */
#ifndef RLPI_TASK_STRBUF_H
#define RLPI_TASK_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rlpi_sb {
    char *s;     /* (cap) bytes, s[len] == '\0' once anything was appended */
    size_t len;
    size_t cap;
    bool failed;
} rlpi_sb;

static inline void rlpi_sb_append(rlpi_sb *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (n >= SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static inline void rlpi_sb_puts(rlpi_sb *b, const char *s)
{
    rlpi_sb_append(b, s, strlen(s));
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void rlpi_sb_printf(rlpi_sb *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) { /* only short numeric pieces go through here */
        b->failed = true;
        return;
    }
    rlpi_sb_append(b, tmp, (size_t)n);
}

/* Hands the string to the caller (malloc'd, "" when nothing was appended),
 * or NULL if an append failed; the builder is reset either way. */
static inline char *rlpi_sb_take(rlpi_sb *b)
{
    char *s = b->failed ? NULL : b->s;
    if (b->failed)
        free(b->s);
    else if (!s)
        s = calloc(1, 1);
    memset(b, 0, sizeof *b);
    return s;
}

static inline void rlpi_sb_free(rlpi_sb *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

#endif
