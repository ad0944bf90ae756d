/* The file transport: publish writes a complete version folder under a
 * temporary name, renames it to DIR/v<version>, then replaces the manifest
 * DIR/latest.json (temporary name, fsync, rename), so a reader that reads
 * the manifest finds a whole version. The manifest lists every file with
 * its size and CRC-32; a reader checks them before loading and checks
 * after loading that the files it verified are still the ones at those
 * names, retrying with a fresh manifest otherwise (manifest.c reads the
 * manifest as untrusted input). One writer per folder. */
#include "sync/sync.h"

#include "core/atomic_file.h"
#include "core/crc32.h"
#include "core/error.h"
#include "model/policy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_NAME "latest.json"
#define MANIFEST_FORMAT "rlpost-weights"
#define RETRY_BACKOFF_MS 20u

/* ---- manifest --------------------------------------------------------------- */

/* out = a/b; false (and an RLP_E_INVALID_ARG error) when it does not fit. */
static bool join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) {
        rlpi_error_set(RLP_E_INVALID_ARG, "%s/%s: path too long", a, b);
        return false;
    }
    return true;
}

/* ---- checksums -------------------------------------------------------------- */

/* What a verified file was, to notice if another one takes its name. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_id;

static bool same_id(const file_id *a, const struct stat *st)
{
    return a->dev == st->st_dev && a->ino == st->st_ino && a->size == st->st_size &&
           a->mtime.tv_sec == st->st_mtim.tv_sec && a->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

int rlpi_file_crc_chunks(int fd, const char *path, uint32_t chunk, uint32_t *crc, uint64_t *size, uint32_t **chunks,
                         size_t *n_chunks)
{
    static const size_t block = 1u << 20;
    uint8_t *buf = malloc(block);
    if (!buf)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    uint32_t c = 0, cc = 0; /* the file's and the current chunk's */
    uint64_t total = 0, in_chunk = 0;
    uint32_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = RLP_OK;
    for (;;) {
        ssize_t n = read(fd, buf, block);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = rlpi_error_set(RLP_E_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (!chunk)
            c = rlpi_crc32(c, buf, (size_t)n);
        /* with chunks, each byte is read into its chunk's CRC only, and the
         * file's CRC is combined from those (no second CRC pass) */
        for (size_t p = 0; chunk && p < (size_t)n;) {
            size_t take = (size_t)n - p < chunk - in_chunk ? (size_t)n - p : (size_t)(chunk - in_chunk);
            cc = rlpi_crc32(cc, buf + p, take);
            p += take;
            if ((in_chunk += take) == chunk) {
                c = rlpi_crc32_combine(c, cc, chunk);
                if (nv == cap) {
                    size_t ncap = cap ? 2 * cap : 64;
                    uint32_t *nvv = realloc(v, ncap * sizeof *v);
                    if (!nvv) {
                        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
                        break;
                    }
                    v = nvv;
                    cap = ncap;
                }
                v[nv++] = cc;
                cc = 0;
                in_chunk = 0;
            }
        }
        if (rc)
            break;
    }
    if (rc == RLP_OK && chunk && in_chunk) { /* the last, short chunk */
        c = rlpi_crc32_combine(c, cc, in_chunk);
        uint32_t *nvv = realloc(v, (nv + 1) * sizeof *v);
        if (!nvv) {
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
        } else {
            v = nvv;
            v[nv++] = cc;
        }
    }
    free(buf);
    if (rc || !chunks) {
        free(v);
        v = NULL;
        nv = 0;
    }
    *crc = c;
    *size = total;
    if (chunks) {
        *chunks = v;
        *n_chunks = nv;
    }
    return rc;
}

int rlpi_file_crc(int fd, const char *path, uint32_t *crc, uint64_t *size)
{
    return rlpi_file_crc_chunks(fd, path, 0, crc, size, NULL, NULL);
}

/* Checks every listed file of version folder `vdir`; fills ids. RLP_OK,
 * RLP_E_FORMAT (size or CRC mismatch), RLP_E_NOT_FOUND / RLP_E_IO (gone). */
static int verify_files(const char *vdir, const rlpi_manifest *m, file_id *ids)
{
    for (size_t i = 0; i < m->n_files; i++) {
        char path[PATH_MAX];
        if (!join(path, sizeof path, vdir, m->files[i].name))
            return RLP_E_INVALID_ARG;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return rlpi_error_set(errno == ENOENT ? RLP_E_NOT_FOUND : RLP_E_IO, "%s: %s", path, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return rlpi_error_set(RLP_E_IO, "%s: not a regular file", path);
        }
        uint32_t crc;
        uint64_t size;
        int rc = rlpi_file_crc(fd, path, &crc, &size);
        close(fd);
        if (rc)
            return rc;
        if (size != m->files[i].size || crc != m->files[i].crc32)
            return rlpi_error_set(RLP_E_FORMAT, "%s: %" PRIu64 " bytes with CRC-32 %08x; the manifest says %" PRIu64
                                  " bytes, %08x",
                                  path, size, crc, m->files[i].size, m->files[i].crc32);
        ids[i] = (file_id){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    }
    return RLP_OK;
}

static bool still_same(const char *vdir, const rlpi_manifest *m, const file_id *ids)
{
    for (size_t i = 0; i < m->n_files; i++) {
        char path[PATH_MAX];
        struct stat st;
        if (!join(path, sizeof path, vdir, m->files[i].name) || stat(path, &st) != 0 || !same_id(&ids[i], &st))
            return false;
    }
    return true;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int rlpi_file_pull(rlp_synchronizer *s, rlp_rollout_engine *engine, bool *loaded)
{
    file_id *ids = malloc(RLPI_MANIFEST_MAX_FILES * sizeof *ids);
    if (!ids)
        return rlpi_error_set(RLP_E_NOMEM, "out of memory");
    rlpi_manifest m;
    memset(&m, 0, sizeof m);
    bool force = false; /* the engine holds a version whose files changed under it */
    unsigned backoff = RETRY_BACKOFF_MS;
    int rc = RLP_OK;
    for (uint32_t attempt = 0;; attempt++) {
        if (attempt) {
            pthread_mutex_lock(&s->mu);
            s->st.checksum_retries++;
            pthread_mutex_unlock(&s->mu);
            rlpi_log(&s->log, RLP_LOG_DEBUG, "weight pull: %s; retrying", rlp_error_last());
            sleep_ms(backoff);
            backoff = backoff < 1000 ? 2 * backoff : backoff;
        }
        rlpi_manifest_clear(&m);
        rc = rlpi_manifest_read(s->dir, &m);
        if (rc == RLP_E_NOT_FOUND) { /* nothing published yet */
            rc = RLP_OK;
            break;
        }
        uint64_t have = 0;
        rlp_rollout_engine_version(&have, engine);
        if (rc == RLP_OK && m.version <= have && !force)
            break;
        char vdir[PATH_MAX];
        if (rc == RLP_OK && (size_t)snprintf(vdir, sizeof vdir, "%s/%s", s->dir, m.path) >= sizeof vdir)
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: path too long", s->dir);
        if (rc == RLP_OK)
            rc = verify_files(vdir, &m, ids);
        if (rc == RLP_OK) {
            rc = rlp_rollout_engine_load_weights(engine, vdir, m.version);
            if (rc == RLP_OK && !still_same(vdir, &m, ids)) {
                /* replaced (republished) while we read it: what we loaded
                 * was not what we verified */
                force = true;
                rc = rlpi_error_set(RLP_E_FORMAT, "%s changed while it was loaded", vdir);
            } else if (rc == RLP_OK) {
                *loaded = true;
                break;
            }
        }
        /* a bad manifest, a checksum mismatch, a version pruned mid-load:
         * read the manifest again, a bounded number of times */
        bool retryable = rc == RLP_E_FORMAT || rc == RLP_E_NOT_FOUND || rc == RLP_E_IO;
        if (!retryable || attempt >= s->opts.verify_retries)
            break;
    }
    rlpi_manifest_clear(&m);
    free(ids);
    return rc;
}

/* ---- publish ----------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void rlpi_file_remove_tree(const char *path)
{
    nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* One file as describe_folder found it, before sorting. */
typedef struct described {
    rlpi_manifest_file f;
    uint32_t *chunks;
    size_t n_chunks;
} described;

static int cmp_described(const void *a, const void *b)
{
    return strcmp(((const described *)a)->f.name, ((const described *)b)->f.name);
}

/* Lists and checksums the files rlp_policy_save() wrote into `dir`: a
 * CRC-32 per file and per RLPI_MANIFEST_CHUNK_BYTES (manifest version 2),
 * in one read of each file. */
static int describe_folder(const char *dir, rlpi_manifest *m, uint64_t *bytes)
{
    DIR *d = opendir(dir);
    if (!d)
        return rlpi_error_set(RLP_E_IO, "%s: %s", dir, strerror(errno));
    described *list = calloc(RLPI_MANIFEST_MAX_FILES, sizeof *list);
    if (!list) {
        closedir(d);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
    }
    size_t n = 0;
    struct dirent *e;
    int rc = RLP_OK;
    while (rc == RLP_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        if (!join(path, sizeof path, dir, e->d_name)) {
            rc = RLP_E_INVALID_ARG;
            break;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            rc = rlpi_error_set(RLP_E_IO, "%s: %s", path, strerror(errno));
        } else if (S_ISREG(st.st_mode)) {
            if (n == RLPI_MANIFEST_MAX_FILES || !rlpi_manifest_name_ok(e->d_name, strlen(e->d_name))) {
                rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: more than %d files or an odd name", dir,
                                    RLPI_MANIFEST_MAX_FILES);
            } else {
                described *f = &list[n++];
                snprintf(f->f.name, sizeof f->f.name, "%s", e->d_name);
                rc = rlpi_file_crc_chunks(fd, path, RLPI_MANIFEST_CHUNK_BYTES, &f->f.crc32, &f->f.size, &f->chunks,
                                          &f->n_chunks);
                *bytes += f->f.size;
            }
        }
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
    qsort(list, n, sizeof *list, cmp_described);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += list[i].n_chunks;
    if (rc == RLP_OK && total && !(m->chunks = malloc(total * sizeof *m->chunks)))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
    if (rc == RLP_OK) {
        m->chunk_size = RLPI_MANIFEST_CHUNK_BYTES;
        for (size_t i = 0; i < n; i++) {
            m->files[i] = list[i].f;
            m->files[i].chunk0 = m->n_chunks;
            if (list[i].n_chunks)
                memcpy(m->chunks + m->n_chunks, list[i].chunks, list[i].n_chunks * sizeof *m->chunks);
            m->n_chunks += list[i].n_chunks;
        }
        m->n_files = n;
    }
    for (size_t i = 0; i < n; i++)
        free(list[i].chunks);
    free(list);
    return rc;
}

static json_t *hex_crc(uint32_t crc)
{
    char s[9];
    snprintf(s, sizeof s, "%08" PRIx32, crc);
    return json_string(s);
}

/* Version 2 (with chunk_size and each file's "chunks") when it has chunk
 * CRCs, else version 1. */
static char *manifest_json(const rlpi_manifest *m)
{
    json_t *files = json_array();
    for (size_t i = 0; files && i < m->n_files; i++) {
        const rlpi_manifest_file *f = &m->files[i];
        json_t *o = json_pack("{s:s, s:I, s:o}", "name", f->name, "size", (json_int_t)f->size, "crc32",
                              hex_crc(f->crc32));
        if (o && m->chunk_size) {
            json_t *c = json_array();
            for (size_t k = 0; c && k < rlpi_manifest_file_chunks(m, f); k++)
                json_array_append_new(c, hex_crc(m->chunks[f->chunk0 + k]));
            json_object_set_new(o, "chunks", c);
        }
        json_array_append_new(files, o);
    }
    json_t *root = json_pack("{s:s, s:i, s:I, s:s, s:s}", "format", MANIFEST_FORMAT, "manifest_version",
                             m->chunk_size ? 2 : 1, "version", (json_int_t)m->version, "path", m->path, "checksum",
                             "crc32");
    if (root && m->chunk_size)
        json_object_set_new(root, "chunk_size", json_integer((json_int_t)m->chunk_size));
    if (root) {
        json_object_set_new(root, "files", files);
        json_object_set_new(root, "created_unix", json_integer((json_int_t)time(NULL)));
    } else {
        json_decref(files);
    }
    char *s = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return s;
}

/* Removes version folders beyond the newest `keep` at or below `current`,
 * those above it (an abandoned run's), and leftovers of failed publishes. */
void rlpi_file_prune(const char *dir, uint64_t current, uint32_t keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    uint64_t *vs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (nm[0] == '.' && nm[1] == 'v' && (strstr(nm, ".tmp.") || strstr(nm, ".old."))) {
            if (join(path, sizeof path, dir, nm))
                rlpi_file_remove_tree(path);
            continue;
        }
        if (nm[0] != 'v' || !nm[1] || strspn(nm + 1, "0123456789") != strlen(nm + 1) || strlen(nm) > 21)
            continue;
        uint64_t v = strtoull(nm + 1, NULL, 10);
        if (v > current) {
            if (join(path, sizeof path, dir, nm))
                rlpi_file_remove_tree(path);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint64_t *p = realloc(vs, nc * sizeof *p);
            if (!p)
                break;
            vs = p;
            cap = nc;
        }
        vs[n++] = v;
    }
    closedir(d);
    /* the `keep` largest stay: remove anything with `keep` or more larger ones */
    for (size_t i = 0; i < n; i++) {
        size_t larger = 0;
        for (size_t j = 0; j < n; j++)
            larger += vs[j] > vs[i];
        if (larger >= keep) {
            char name[32];
            snprintf(name, sizeof name, "v%" PRIu64, vs[i]);
            if (join(path, sizeof path, dir, name))
                rlpi_file_remove_tree(path);
        }
    }
    free(vs);
}

int rlpi_file_publish(rlp_synchronizer *s, const rlp_policy *policy, uint64_t version, uint64_t *bytes)
{
    char tmp[PATH_MAX], final[PATH_MAX], old[PATH_MAX], mpath[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.v%" PRIu64 ".tmp.XXXXXX", s->dir, version) >= sizeof tmp)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: path too long", s->dir);
    snprintf(final, sizeof final, "%s/v%" PRIu64, s->dir, version);
    snprintf(old, sizeof old, "%s/.v%" PRIu64 ".old.XXXXXX", s->dir, version);
    snprintf(mpath, sizeof mpath, "%s/" MANIFEST_NAME, s->dir);
    if (!mkdtemp(tmp))
        return rlpi_error_set(RLP_E_IO, "%s: cannot create a temporary folder: %s", s->dir, strerror(errno));
    rlpi_manifest m;
    memset(&m, 0, sizeof m);
    m.version = version;
    snprintf(m.path, sizeof m.path, "v%" PRIu64, version);
    *bytes = 0;
    /* a policy with LoRA adapters ships them only (PEFT folder, ~3.6 % of
     * the weights at r = 16): readers apply them to the base they run
     * (rlp_rollout_engine_load_weights), and every version folder is
     * complete, so a late reader needs only the latest */
    int rc = rlpi_policy_has_lora(policy) ? rlp_policy_save_lora(policy, tmp, NULL)
                                          : rlp_policy_save(policy, tmp, s->opts.dtype);
    if (rc == RLP_OK)
        rc = describe_folder(tmp, &m, bytes);
    if (rc == RLP_OK)
        fsync_path(tmp);
    bool replaced = false;
    if (rc == RLP_OK) {
        struct stat st;
        /* republishing a version (after a resume): move the old folder
         * aside onto an empty one (rename may replace an empty folder) */
        if (stat(final, &st) == 0) {
            if (!mkdtemp(old) || rename(final, old) != 0)
                rc = rlpi_error_set(RLP_E_IO, "%s: cannot move the old version aside: %s", final, strerror(errno));
            else
                replaced = true;
        }
    }
    if (rc == RLP_OK && rename(tmp, final) != 0)
        rc = rlpi_error_set(RLP_E_IO, "%s: rename failed: %s", final, strerror(errno));
    if (rc) {
        rlpi_manifest_clear(&m);
        rlpi_file_remove_tree(tmp);
        return rc;
    }
    if (replaced)
        rlpi_file_remove_tree(old);
    fsync_path(s->dir);
    char *json = manifest_json(&m);
    rlpi_manifest_clear(&m);
    if (!json)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", mpath);
    size_t len = strlen(json);
    rc = rlpi_atomic_write_file(mpath, json, len);
    free(json);
    if (rc)
        return rc;
    *bytes += len;
    rlpi_file_prune(s->dir, version, s->opts.keep_versions);
    return RLP_OK;
}
