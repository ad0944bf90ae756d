/* The rows that tests/abi/struct_layout.py generates from include/rlpost.h
 * (layout_rows.c in the build folder) and layout_probe.c checks. */
#ifndef RLPOST_LAYOUT_PROBE_H
#define RLPOST_LAYOUT_PROBE_H
#include <stddef.h>

struct layout_row {
    const char *strct;  /* the typedef name */
    const char *field;  /* member designator (a.b, a[0].b), or "-" for the whole struct */
    size_t offset;      /* offsetof; 0 for "-" */
    size_t size;        /* sizeof the member, or of the struct for "-" */
};

extern const struct layout_row layout_rows[];
extern const size_t layout_n_rows;

#endif
