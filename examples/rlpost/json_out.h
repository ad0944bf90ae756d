/* Small helpers to print JSON on stdout for the driver's subcommands. */
#ifndef RLPOST_JSON_OUT_H
#define RLPOST_JSON_OUT_H

#include <stdio.h>

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
