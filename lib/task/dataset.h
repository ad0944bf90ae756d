/* JSONL datasets: one JSON object per line, mapped to (prompt, reference,
 * extra metadata fields). The file is hostile: line sizes, UTF-8, nesting,
 * duplicate keys, field types and record counts are checked before use.
 * Loading only; the order records are served in is cursor.c's. */
#ifndef RLPI_TASK_DATASET_H
#define RLPI_TASK_DATASET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Most records a dataset may hold (shuffle orders are 32-bit indices). */
#define RLPI_DATASET_MAX_RECORDS UINT64_C(0xffffffff)
/* Default longest line (bytes, newline excluded). */
#define RLPI_DATASET_DEFAULT_MAX_LINE ((size_t)16 << 20)
/* Most extra fields per record. */
#define RLPI_DATASET_MAX_EXTRA 32

typedef struct rlpi_dataset_mapping {
    const char *prompt_field;                       /* required, a string field */
    const char *reference_field;                    /* NULL: records have no reference */
    const char *extra_fields[RLPI_DATASET_MAX_EXTRA]; /* copied into metadata when present */
    size_t n_extra;
    int kk;                 /* 1: K&K benchmark records: "names" (strings) and "solution"
                               (booleans) are required, of equal length */
    size_t max_line_bytes;  /* 0: RLPI_DATASET_DEFAULT_MAX_LINE */
    uint64_t max_records;   /* 0: RLPI_DATASET_MAX_RECORDS */
    int skip_invalid;       /* 1: skip and count bad lines; 0: the first one fails the load */
} rlpi_dataset_mapping;

typedef struct rlpi_dataset {
    size_t n;            /* records, ≥ 1 */
    char *arena;         /* NUL-terminated strings of every record */
    size_t arena_len, arena_cap;
    size_t *prompt_off;  /* (n) offsets into arena */
    size_t *ref_off;     /* (n) offsets into arena, SIZE_MAX: no reference */
    json_t **extras;     /* (n) object of the extra fields present, or NULL */
    uint64_t *line;      /* (n) 1-based line number of each record */
    size_t cap;
    uint64_t skipped;    /* bad lines skipped (skip_invalid) */
    uint64_t fingerprint; /* FNV-1a 64 over every prompt and reference */
} rlpi_dataset;

/* Parses `len` bytes of JSONL. `source` names the input in messages.
 * RLP_E_FORMAT naming the line and the field at fault; RLP_E_INVALID_ARG
 * (bad mapping); RLP_E_NOMEM. A dataset with no record is RLP_E_FORMAT. */
int rlpi_dataset_parse(rlpi_dataset **out, const char *buf, size_t len,
                       const rlpi_dataset_mapping *m, const char *source);

/* Maps the file and parses it. RLP_E_IO besides the above. */
int rlpi_dataset_load(rlpi_dataset **out, const char *path, const rlpi_dataset_mapping *m);

void rlpi_dataset_free(rlpi_dataset *d);

/* Borrowed strings of record i < n (reference NULL when none). */
const char *rlpi_dataset_prompt(const rlpi_dataset *d, size_t i);
const char *rlpi_dataset_reference(const rlpi_dataset *d, size_t i);

/* Strict UTF-8: no overlong forms, surrogates, values past U+10FFFF or NUL
 * bytes. Returns the offset of the first bad byte, or len when all good. */
size_t rlpi_utf8_check(const unsigned char *s, size_t len);

#endif
