/* Small helpers to print JSON on stdout for the driver's subcommands. */
#ifndef RLPOST_JSON_OUT_H
#define RLPOST_JSON_OUT_H

#include "rlpost.h"

#include <math.h>
#include <stdio.h>

/* The OpenAI/vLLM name of an rlp_finish_reason ("stop", "length", "abort",
 * "error"), or NULL while a sequence still runs. */
static inline const char *finish_reason_name(int reason)
{
    switch (reason) {
    case RLP_FINISH_STOP: return "stop";
    case RLP_FINISH_LENGTH: return "length";
    case RLP_FINISH_ABORT: return "abort";
    case RLP_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* Writes s as a JSON string literal (quotes included). */
static inline void json_print_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Writes x with the printf format fmt (one double conversion), or null
 * when x is NaN or infinite: JSON has neither, and a bare `nan` would make
 * the whole document unreadable. Counts the nulls in *non_finite so the
 * document can say it holds some (the caller's "non_finite_values"). */
static inline void json_print_number(FILE *f, const char *fmt, double x, size_t *non_finite)
{
    if (isfinite(x)) {
        fprintf(f, fmt, x);
        return;
    }
    fputs("null", f);
    (*non_finite)++;
}

#endif
