/* Small helpers to print JSON on stdout for the driver's subcommands. */
#ifndef RLPOST_JSON_OUT_H
#define RLPOST_JSON_OUT_H

#include "rlpost.h"

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

#endif
