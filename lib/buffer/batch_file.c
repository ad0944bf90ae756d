/* Batch files: scored groups as one file in the spill format (its header
 * and one push record, checksummed), written under a temporary name,
 * fsynced and renamed, so that a reader never sees half of one. How a
 * rollout worker in another process (or on another machine, over a shared
 * folder) hands its groups to a trainer, whose buffer takes them in with
 * rlp_replay_buffer_ingest_dir(). The reader is the spill's: every length,
 * count and checksum is checked before use (fuzz_spill covers it). */
#include "buffer_internal.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/mapfile.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUFFIX ".rlpb"

int rlp_batch_write_file(const rlp_batch *batch, const char *path)
{
    RLPI_CHECK_ARG(batch && path && *path, "batch and path are required");
    if (batch->n == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the batch is empty", __func__);
    rlpi_group **groups = NULL;
    size_t k = 0;
    int rc = rlpi_buffer_check_batch(batch, __func__);
    if (rc)
        return rc;
    rc = rlpi_buffer_make_groups(batch, &groups, &k);
    if (rc)
        return rc;
    rlpi_bytes img = {0};
    uint8_t h[RLPI_SPILL_HEADER_BYTES];
    rlpi_spill_file_header(h);
    uint64_t size = 0;
    if ((rc = rlpi_spill_push_size(&size, groups, k)))
        rlpi_error_set(RLP_E_INVALID_ARG, "%s: the batch is too large for one file; write fewer groups", __func__);
    else if (!(img.p = malloc(RLPI_SPILL_HEADER_BYTES + (size_t)size)))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    if (!rc) {
        img.cap = RLPI_SPILL_HEADER_BYTES + (size_t)size;
        memcpy(img.p, h, sizeof h);
        img.len = sizeof h;
        rc = rlpi_spill_encode_push(&img, groups, k);
    }
    if (!rc && (rc = rlpi_atomic_write_file(path, img.p, img.len)))
        rlpi_error_wrap("%s: %s", __func__, path);
    rlpi_bytes_free(&img);
    for (size_t i = 0; i < k; i++)
        rlpi_buffer_group_free_shell(groups[i]);
    free(groups);
    return rc;
}

int rlp_batch_read_file(rlp_batch **out, const char *path)
{
    RLPI_CHECK_ARG(out && path, "out and path are required");
    rlpi_mapped_file m;
    int rc = rlpi_map_file(path, &m);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    rlpi_spill_scan sc;
    memset(&sc, 0, sizeof sc);
    rc = rlpi_spill_scan_image(m.data, m.size, path, &sc);
    if (!rc && (sc.torn || sc.n_records != 1 || sc.n_retired || sc.n_groups == 0))
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %s is not a whole batch file (%s)", __func__, path,
                            sc.torn ? sc.torn_reason : "one push record of at least one group expected");
    rlp_batch *b = NULL;
    if (!rc)
        rc = rlp_batch_create(&b);
    for (size_t g = 0; !rc && g < sc.n_groups; g++)
        for (size_t i = 0; !rc && i < sc.groups[g]->n; i++)
            rc = rlpi_batch_take(b, &sc.groups[g]->trajs[i]);
    rlpi_spill_scan_free(&sc);
    rlpi_unmap_file(&m);
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    *out = b;
    return RLP_OK;
}

/* A file of the inbox that cannot be taken in: renamed NAME.bad (removed
 * if that fails) and logged with the reason rlp_error_last() holds. */
static void set_aside(rlp_replay_buffer *buf, const char *path)
{
    char bad[4200];
    snprintf(bad, sizeof bad, "%s.bad", path);
    rlpi_log(rlpi_buffer_logger(buf), RLP_LOG_WARN, "replay buffer: %s: %s (set aside as %s)", path, rlp_error_last(),
             bad);
    if (rename(path, bad))
        unlink(path);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int rlp_replay_buffer_ingest_dir(rlp_replay_buffer *buf, const char *dir, size_t *out_groups)
{
    RLPI_CHECK_ARG(buf && dir, "buf and dir are required");
    DIR *d = opendir(dir);
    if (!d)
        return rlpi_error_set(RLP_E_IO, "%s: cannot read the folder '%s': %s", __func__, dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = RLP_OK;
    const size_t sl = strlen(SUFFIX);
    for (struct dirent *e; rc == RLP_OK && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l <= sl || strcmp(e->d_name + l - sl, SUFFIX) || e->d_name[0] == '.')
            continue; /* temporary files of a write in progress start with '.' or end otherwise */
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name)))
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        else
            n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, by_name);
    size_t taken = 0;
    for (size_t i = 0; rc == RLP_OK && i < n; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path)
            continue;
        rlp_batch *b = NULL;
        int r = rlp_batch_read_file(&b, path);
        if (r == RLP_E_FORMAT || r == RLP_E_UNSUPPORTED) {
            set_aside(buf, path); /* untrusted input: the run goes on */
            continue;
        }
        if (r) {
            rc = r;
            break;
        }
        size_t ng = 0;
        for (size_t j = 0; j < b->n; j++)
            ng += j == 0 || b->items[j].group_id != b->items[j - 1].group_id;
        r = rlp_replay_buffer_push(buf, b);
        rlp_batch_free(b);
        if (r == RLP_E_AGAIN || r == RLP_E_TIMEOUT)
            break; /* no room: the file stays for a later call */
        if (r == RLP_E_INVALID_ARG) {
            set_aside(buf, path); /* what a push refuses */
            continue;
        }
        if (r) {
            rc = r;
            break;
        }
        unlink(path);
        taken += ng;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!rc && out_groups)
        *out_groups = taken;
    return rc;
}
