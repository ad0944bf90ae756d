/* The weight manifest DIR/latest.json of the file transport: its parser and
 * reader (version 1: a CRC-32 per file; version 2 adds chunk_size and a
 * CRC-32 per chunk of every file, which the relay checks as bytes arrive). The manifest comes from another process and is read as untrusted
 * input: every field is checked, the version folder is derived from the
 * version (never taken as a path from the file) and file names must be
 * plain names. Writing it is transport_file.c's job. */
#include "sync/sync.h"

#include "core/error.h"
#include "core/json_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_NAME "latest.json"
#define MANIFEST_FORMAT "rlpost-weights"
#define MANIFEST_MAX_BYTES (1u << 20)

bool rlpi_manifest_name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= sizeof(((rlpi_manifest_file *)0)->name) || !strcmp(s, ".") || !strcmp(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == '/' || s[i] == '\\' || s[i] == 0x7f)
            return false;
    return true;
}

void rlpi_manifest_clear(rlpi_manifest *m)
{
    free(m->chunks);
    memset(m, 0, sizeof *m);
}

static bool crc_hex(const json_t *j, uint32_t *out)
{
    const char *c = json_is_string(j) ? json_string_value(j) : "";
    if (strlen(c) != 8 || strspn(c, "0123456789abcdef") != 8)
        return false;
    *out = (uint32_t)strtoul(c, NULL, 16);
    return true;
}

/* Version 2's chunk CRCs of every file (sizes already checked). */
static const char *parse_chunks(const json_t *root, const json_t *files, rlpi_manifest *out)
{
    const json_t *cs = json_object_get(root, "chunk_size");
    if (!json_is_integer(cs) || json_integer_value(cs) < 4096 || json_integer_value(cs) > (1 << 30))
        return "\"chunk_size\" is not an integer from 4096 to 2^30";
    out->chunk_size = (uint32_t)json_integer_value(cs);
    size_t total = 0;
    for (size_t i = 0; i < out->n_files; i++) {
        size_t n = rlpi_manifest_file_chunks(out, &out->files[i]);
        if (n > RLPI_MANIFEST_MAX_CHUNKS - total)
            return "more chunks than a manifest may list";
        out->files[i].chunk0 = total;
        total += n;
    }
    if (total && !(out->chunks = malloc(total * sizeof *out->chunks)))
        return "out of memory";
    out->n_chunks = total;
    for (size_t i = 0; i < out->n_files; i++) {
        const json_t *c = json_object_get(json_array_get(files, i), "chunks");
        size_t n = rlpi_manifest_file_chunks(out, &out->files[i]);
        if (!json_is_array(c) || json_array_size(c) != n)
            return "a file's \"chunks\" is not an array of one CRC per chunk_size bytes";
        for (size_t k = 0; k < n; k++)
            if (!crc_hex(json_array_get(c, k), &out->chunks[out->files[i].chunk0 + k]))
                return "a chunk crc32 is not 8 lowercase hex digits";
    }
    return NULL;
}

int rlpi_manifest_parse(const char *json, size_t len, const char *source, rlpi_manifest *out)
{
    memset(out, 0, sizeof *out);
    json_t *root;
    int rc = rlpi_json_load_guarded(json, len, 4, source, &root);
    if (rc)
        return rc;
    const char *why = NULL;
    const json_t *fmt = json_object_get(root, "format"), *mv = json_object_get(root, "manifest_version"),
                 *ver = json_object_get(root, "version"), *path = json_object_get(root, "path"),
                 *ck = json_object_get(root, "checksum"), *files = json_object_get(root, "files");
    if (!json_is_object(root))
        why = "not a JSON object";
    else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), MANIFEST_FORMAT))
        why = "\"format\" is not \"" MANIFEST_FORMAT "\"";
    else if (!json_is_integer(mv) || json_integer_value(mv) < 1 || json_integer_value(mv) > 2)
        why = "\"manifest_version\" is not 1 or 2";
    else if (!json_is_integer(ver) || json_integer_value(ver) < 0)
        why = "\"version\" is not a non-negative integer";
    else if (!json_is_string(ck) || strcmp(json_string_value(ck), "crc32"))
        why = "\"checksum\" is not \"crc32\"";
    else if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > RLPI_MANIFEST_MAX_FILES)
        why = "\"files\" is not an array of 1 to 64 entries";
    if (!why) {
        out->version = (uint64_t)json_integer_value(ver);
        snprintf(out->path, sizeof out->path, "v%" PRIu64, out->version);
        /* the folder is named by the version, never by what the file says */
        if (!json_is_string(path) || strcmp(json_string_value(path), out->path))
            why = "\"path\" is not \"v<version>\"";
    }
    for (size_t i = 0; !why && i < json_array_size(files); i++) {
        const json_t *f = json_array_get(files, i), *name = json_object_get(f, "name"),
                     *size = json_object_get(f, "size"), *crc = json_object_get(f, "crc32");
        const char *c = json_is_string(crc) ? json_string_value(crc) : "";
        if (!json_is_object(f) || !json_is_string(name) ||
            !rlpi_manifest_name_ok(json_string_value(name), json_string_length(name)) ||
            strlen(json_string_value(name)) != json_string_length(name)) {
            why = "a file name is missing, too long, or not a plain name";
        } else if (!json_is_integer(size) || json_integer_value(size) < 0) {
            why = "a file size is not a non-negative integer";
        } else if (strlen(c) != 8 || strspn(c, "0123456789abcdef") != 8) {
            why = "a crc32 is not 8 lowercase hex digits";
        } else {
            rlpi_manifest_file *mf = &out->files[out->n_files++];
            snprintf(mf->name, sizeof mf->name, "%s", json_string_value(name));
            mf->size = (uint64_t)json_integer_value(size);
            mf->crc32 = (uint32_t)strtoul(c, NULL, 16);
            for (size_t k = 0; k + 1 < out->n_files; k++)
                if (!strcmp(out->files[k].name, mf->name))
                    why = "a file is listed twice";
        }
    }
    if (!why && json_integer_value(mv) == 2)
        why = parse_chunks(root, files, out);
    json_decref(root);
    if (why) {
        rlpi_manifest_clear(out);
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s", source, why);
    }
    return RLP_OK;
}

int rlpi_manifest_read(const char *dir, rlpi_manifest *out)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/" MANIFEST_NAME, dir) >= sizeof path)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: path too long", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rlpi_error_set(errno == ENOENT ? RLP_E_NOT_FOUND : RLP_E_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MANIFEST_MAX_BYTES) {
        close(fd);
        return rlpi_error_set(RLP_E_FORMAT, "%s: not a regular file of at most %u bytes", path, MANIFEST_MAX_BYTES);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    int rc = rlpi_manifest_parse(buf, got, path, out);
    free(buf);
    return rc;
}
