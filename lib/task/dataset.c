/* JSONL dataset loader with field mapping. Every line is checked before it
 * reaches jansson (size bound, strict UTF-8) and jansson runs behind the
 * depth and duplicate-key guards; fields are type-checked. Memory grows
 * with the file only: strings are stored unescaped in one arena, never
 * longer than their JSON spelling. Must not decide the serving order. */
#include "task/dataset.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "core/mapfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t rlpi_utf8_check(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c >= 0x01 && c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
        if (c >= 0xc2 && c <= 0xdf)
            n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0)
                lo = 0xa0; /* overlong */
            else if (c == 0xed)
                hi = 0x9f; /* UTF-16 surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0)
                lo = 0x90; /* overlong */
            else if (c == 0xf4)
                hi = 0x8f; /* past U+10FFFF */
        } else {
            return i; /* NUL, a continuation byte, 0xc0/0xc1 or 0xf5+ */
        }
        if (len - i < n || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
        i += n;
    }
    return len;
}

void rlpi_dataset_free(rlpi_dataset *d)
{
    if (!d)
        return;
    if (d->extras)
        for (size_t i = 0; i < d->n; i++)
            json_decref(d->extras[i]);
    free(d->extras);
    free(d->arena);
    free(d->prompt_off);
    free(d->ref_off);
    free(d->line);
    free(d);
}

const char *rlpi_dataset_prompt(const rlpi_dataset *d, size_t i)
{
    return d->arena + d->prompt_off[i];
}

const char *rlpi_dataset_reference(const rlpi_dataset *d, size_t i)
{
    return d->ref_off[i] == SIZE_MAX ? NULL : d->arena + d->ref_off[i];
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* Appends s[0..n) and a NUL to the arena; *off gets where it starts. */
static int arena_put(rlpi_dataset *d, const char *s, size_t n, size_t *off)
{
    if (n >= SIZE_MAX / 4 || d->arena_len > SIZE_MAX / 4 - n)
        return rlpi_error_set(RLP_E_OVERFLOW, "dataset: text too large");
    if (d->arena_len + n + 1 > d->arena_cap) {
        size_t cap = d->arena_cap ? d->arena_cap : 4096;
        while (cap < d->arena_len + n + 1)
            cap *= 2;
        char *a = realloc(d->arena, cap);
        if (!a)
            return rlpi_error_set(RLP_E_NOMEM, "dataset: out of memory");
        d->arena = a;
        d->arena_cap = cap;
    }
    memcpy(d->arena + d->arena_len, s, n);
    d->arena[d->arena_len + n] = '\0';
    *off = d->arena_len;
    d->arena_len += n + 1;
    return RLP_OK;
}

static int grow_records(rlpi_dataset *d)
{
    if (d->n < d->cap)
        return RLP_OK;
    size_t cap = d->cap ? d->cap * 2 : 256;
    if (cap > SIZE_MAX / sizeof(json_t *))
        return rlpi_error_set(RLP_E_OVERFLOW, "dataset: too many records");
    size_t *p = realloc(d->prompt_off, cap * sizeof *p);
    if (p)
        d->prompt_off = p;
    size_t *r = realloc(d->ref_off, cap * sizeof *r);
    if (r)
        d->ref_off = r;
    json_t **e = realloc(d->extras, cap * sizeof *e);
    if (e)
        d->extras = e;
    uint64_t *l = realloc(d->line, cap * sizeof *l);
    if (l)
        d->line = l;
    if (!p || !r || !e || !l)
        return rlpi_error_set(RLP_E_NOMEM, "dataset: out of memory");
    d->cap = cap;
    return RLP_OK;
}

/* The K&K benchmark's own fields: names (non-empty strings) and solution
 * (booleans) of equal length — what its rewards and ours index by. */
static int check_kk(const json_t *rec, const char *source, uint64_t line)
{
    const json_t *names = json_object_get(rec, "names");
    const json_t *sol = json_object_get(rec, "solution");
    if (!json_is_array(names) || json_array_size(names) == 0 || json_array_size(names) > 64)
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s: line %llu: \"names\" must be an array of 1 to 64 names", source,
                              (unsigned long long)line);
    if (!json_is_array(sol) || json_array_size(sol) != json_array_size(names))
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s: line %llu: \"solution\" must be an array of booleans, one per name",
                              source, (unsigned long long)line);
    for (size_t i = 0; i < json_array_size(names); i++) {
        const json_t *n = json_array_get(names, i);
        if (!json_is_string(n) || json_string_length(n) == 0)
            return rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: names[%zu] is not a non-empty string",
                                  source, (unsigned long long)line, i);
        if (!json_is_boolean(json_array_get(sol, i)))
            return rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: solution[%zu] is not a boolean",
                                  source, (unsigned long long)line, i);
    }
    return RLP_OK;
}

/* One line → one record appended to d, or an error naming the line. */
static int parse_line(rlpi_dataset *d, const char *s, size_t n, const rlpi_dataset_mapping *m,
                      const char *source, uint64_t line)
{
    size_t bad = rlpi_utf8_check((const unsigned char *)s, n);
    if (bad != n)
        return rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: invalid UTF-8 (or a NUL byte) at byte %zu",
                              source, (unsigned long long)line, bad);
    char where[64];
    snprintf(where, sizeof where, "line %llu", (unsigned long long)line);
    json_t *rec = NULL;
    int rc = rlpi_json_load_guarded(s, n, RLPI_JSON_MAX_DEPTH, where, &rec);
    if (rc)
        return rlpi_error_wrap("%s", source);
    json_t *extras = NULL;
    if (!json_is_object(rec)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: not a JSON object", source,
                            (unsigned long long)line);
        goto out;
    }
    const json_t *prompt = json_object_get(rec, m->prompt_field);
    if (!json_is_string(prompt) || json_string_length(prompt) == 0) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: field \"%s\" (the prompt) is %s", source,
                            (unsigned long long)line, m->prompt_field,
                            !prompt ? "missing" : json_is_string(prompt) ? "empty" : "not a string");
        goto out;
    }
    char numbuf[64];
    const char *ref = NULL;
    size_t ref_len = 0;
    if (m->reference_field) {
        const json_t *r = json_object_get(rec, m->reference_field);
        if (json_is_string(r)) {
            ref = json_string_value(r);
            ref_len = json_string_length(r);
        } else if (json_is_integer(r)) {
            ref_len = (size_t)snprintf(numbuf, sizeof numbuf, "%lld", (long long)json_integer_value(r));
            ref = numbuf;
        } else if (json_is_real(r)) {
            ref_len = (size_t)snprintf(numbuf, sizeof numbuf, "%.17g", json_real_value(r));
            ref = numbuf;
        } else {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "%s: line %llu: field \"%s\" (the reference) is %s", source,
                                (unsigned long long)line, m->reference_field,
                                !r ? "missing" : "not a string or a number");
            goto out;
        }
    }
    if (m->kk && (rc = check_kk(rec, source, line)))
        goto out;
    for (size_t i = 0; i < m->n_extra; i++) {
        json_t *v = json_object_get(rec, m->extra_fields[i]);
        if (!v)
            continue;
        if (!extras && !(extras = json_object())) {
            rc = rlpi_error_set(RLP_E_NOMEM, "dataset: out of memory");
            goto out;
        }
        if (json_object_set(extras, m->extra_fields[i], v)) {
            rc = rlpi_error_set(RLP_E_NOMEM, "dataset: out of memory");
            goto out;
        }
    }
    if ((rc = grow_records(d)))
        goto out;
    size_t poff, roff = SIZE_MAX;
    if ((rc = arena_put(d, json_string_value(prompt), json_string_length(prompt), &poff)) ||
        (ref && (rc = arena_put(d, ref, ref_len, &roff))))
        goto out;
    d->fingerprint = fnv1a(d->fingerprint, json_string_value(prompt), json_string_length(prompt));
    d->fingerprint = fnv1a(d->fingerprint, "\xff", 1);
    if (ref)
        d->fingerprint = fnv1a(d->fingerprint, ref, ref_len);
    d->fingerprint = fnv1a(d->fingerprint, "\xfe", 1);
    d->prompt_off[d->n] = poff;
    d->ref_off[d->n] = roff;
    d->extras[d->n] = extras;
    d->line[d->n] = line;
    d->n++;
    extras = NULL;
out:
    json_decref(extras);
    json_decref(rec);
    return rc;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t')
            return 0;
    return 1;
}

int rlpi_dataset_parse(rlpi_dataset **out, const char *buf, size_t len,
                       const rlpi_dataset_mapping *m, const char *source)
{
    *out = NULL;
    if (!m->prompt_field || !*m->prompt_field || m->n_extra > RLPI_DATASET_MAX_EXTRA)
        return rlpi_error_set(RLP_E_INVALID_ARG, "dataset: bad field mapping");
    size_t max_line = m->max_line_bytes ? m->max_line_bytes : RLPI_DATASET_DEFAULT_MAX_LINE;
    uint64_t max_records = m->max_records && m->max_records < RLPI_DATASET_MAX_RECORDS
                               ? m->max_records
                               : RLPI_DATASET_MAX_RECORDS;
    rlpi_dataset *d = calloc(1, sizeof *d);
    if (!d)
        return rlpi_error_set(RLP_E_NOMEM, "dataset: out of memory");
    d->fingerprint = UINT64_C(0xcbf29ce484222325);
    size_t pos = 0;
    /* a UTF-8 byte-order mark some editors write */
    if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
        pos = 3;
    uint64_t line = 0;
    int rc = RLP_OK;
    while (pos < len) {
        line++;
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n && s[n - 1] == '\r')
            n--;
        if (blank(s, n))
            continue;
        if ((uint64_t)d->n >= max_records) {
            /* a guard, not a truncation: fail whatever skip_invalid says */
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: more than %llu records", source,
                                (unsigned long long)line, (unsigned long long)max_records);
            break;
        }
        if (n > max_line)
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: line %llu: %zu bytes, more than the limit of %zu",
                                source, (unsigned long long)line, n, max_line);
        else
            rc = parse_line(d, s, n, m, source, line);
        if (rc == RLP_E_NOMEM || rc == RLP_E_OVERFLOW || (rc && !m->skip_invalid))
            break;
        if (rc) {
            d->skipped++;
            rc = RLP_OK;
        }
    }
    if (rc == RLP_OK && d->n == 0)
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: no records (%llu lines, %llu skipped)", source,
                            (unsigned long long)line, (unsigned long long)d->skipped);
    if (rc) {
        rlpi_dataset_free(d);
        return rc;
    }
    *out = d;
    return RLP_OK;
}

int rlpi_dataset_load(rlpi_dataset **out, const char *path, const rlpi_dataset_mapping *m)
{
    *out = NULL;
    rlpi_mapped_file f;
    int rc = rlpi_map_file(path, &f);
    if (rc)
        return rc;
    rc = rlpi_dataset_parse(out, (const char *)f.data, f.size, m, path);
    rlpi_unmap_file(&f);
    return rc;
}
