/* Internal layout of rlp_synchronizer and the transports behind it:
 * synchronizer.c owns the version counter, the gate and the in-process
 * copy; transport_file.c writes version folders and the manifest and loads
 * them verified; transport_http.c tells weight-update endpoints to load a
 * folder; transport_relay.c mirrors a parent's folder over HTTP into the
 * FILE layout. Transports know nothing about the gate. */
#ifndef RLPI_SYNC_SYNC_H
#define RLPI_SYNC_SYNC_H

#include "core/log.h"
#include "rlpost.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A frozen copy of published weights, shared by pulls in progress. */
typedef struct rlpi_snapshot {
    rlp_policy *policy;      /* owned (cloned), or borrowed when COLOCATED */
    bool owned;
    uint64_t version;
    int refs;                /* under the synchronizer's mu */
} rlpi_snapshot;

/* What a server is known to hold. */
typedef struct rlpi_sync_target {
    char *url;               /* base URL, owned */
    int64_t version;         /* loaded version, -1 = unknown */
} rlpi_sync_target;

struct rlp_synchronizer {
    rlp_sync_options opts;   /* strings point at the owned copies below */
    char *dir;               /* absolute */
    char *api_key;
    rlpi_sync_target *targets; /* (n_targets) */
    size_t n_targets;
    rlpi_logger log;

    pthread_mutex_t mu;      /* version, gate, snapshot, targets, stats */
    pthread_cond_t gate_cv;
    pthread_mutex_t publish_mu; /* one publish at a time */
    pthread_mutex_t http_mu;    /* one round of update requests at a time */

    uint64_t version;        /* latest known */
    bool published;          /* this synchronizer has published (FILE: no need to read the manifest) */
    uint64_t accepted, running;
    bool closed;
    rlpi_snapshot *snap;     /* IN_PROCESS: the latest published weights */
    rlp_policy *recv;        /* COLLECTIVE, receiving ranks: the broadcast lands here, then in the engine */
    rlp_sync_stats st;

    /* HTTP, rlp_synchronizer_pull_at_least(): update rounds on a thread of
     * their own, so that generation on a version within the staleness bound
     * goes on while the newest one reaches the servers (under mu) */
    pthread_t bg_thread;
    bool bg_started, bg_busy, bg_pending; /* thread up; a round in flight; one asked for */
    pthread_cond_t bg_cv;    /* a round was asked for, or the synchronizer is being freed */
    uint64_t bg_want;        /* the version the next round brings the servers to */
    uint64_t bg_round;       /* the version of the round in flight or the last one */
    int bg_rc;               /* how the last round ended (RLP_OK once reported, or when the set changed) */
    uint64_t targets_gen;    /* bumped by rlp_synchronizer_set_urls(): a round of an older set reports nothing */
    char bg_err[512];        /* its message */
    atomic_bool http_abort;  /* rlp_synchronizer_free(): a round in flight stops */
    void *http_queue;        /* HTTP: the rounds' rlpi_http_queue, kept for its connections (under http_mu) */
    void *relay_easy;        /* RELAY: the CURL handle of the pulls, kept for its connection (under http_mu) */
};

/* One published version as the manifest describes it. */
#define RLPI_MANIFEST_MAX_FILES 64
typedef struct rlpi_manifest_file {
    char name[128];
    uint64_t size;
    uint32_t crc32;
    size_t chunk0;           /* manifest version 2: its first CRC in rlpi_manifest::chunks */
} rlpi_manifest_file;

/* Chunk size of the CRCs that FILE publishes write (manifest version 2):
 * the size process groups stage in, 3,634 CRCs (15 KB) for 7B bf16. */
#define RLPI_MANIFEST_CHUNK_BYTES (4u << 20)
/* At most this many chunk CRCs per manifest (16 TiB at 4 MiB). */
#define RLPI_MANIFEST_MAX_CHUNKS (1u << 22)

typedef struct rlpi_manifest {
    uint64_t version;
    char path[64];           /* folder name relative to dir: "v<version>" */
    rlpi_manifest_file files[RLPI_MANIFEST_MAX_FILES];
    size_t n_files;
    /* manifest version 2: a CRC-32 per chunk_size bytes of every file,
     * file i's ⌈size/chunk_size⌉ of them from files[i].chunk0; version 1:
     * chunk_size 0, chunks NULL. Owned: rlpi_manifest_clear(). */
    uint32_t chunk_size;
    uint32_t *chunks;        /* (n_chunks) */
    size_t n_chunks;
} rlpi_manifest;

/* Chunks of a file of `size` bytes. */
static inline size_t rlpi_manifest_file_chunks(const rlpi_manifest *m, const rlpi_manifest_file *f)
{
    return m->chunk_size ? (size_t)((f->size + m->chunk_size - 1) / m->chunk_size) : 0;
}
/* Frees what a parse allocated; the manifest is empty after it. */
void rlpi_manifest_clear(rlpi_manifest *m);

/* Whether a file name may appear in a manifest: 1..127 bytes, no path
 * separator or control character, not "." or "..". */
bool rlpi_manifest_name_ok(const char *s, size_t n);
/* Parses a manifest of version 1 (a CRC-32 per file) or 2 (also one per
 * chunk) (untrusted: every field checked; RLP_E_FORMAT naming it).
 * `source` names the file in messages. On success *out owns its chunk
 * CRCs: rlpi_manifest_clear() it. */
int rlpi_manifest_parse(const char *json, size_t len, const char *source, rlpi_manifest *out);
/* Reads DIR/latest.json; RLP_E_NOT_FOUND when nothing was published yet.
 * As rlpi_manifest_parse: clear *out after a success. */
int rlpi_manifest_read(const char *dir, rlpi_manifest *out);

/* Saves the policy as DIR/v<version>/, writes the manifest atomically and
 * prunes old versions. *bytes receives the bytes written. */
int rlpi_file_publish(rlp_synchronizer *s, const rlp_policy *policy, uint64_t version, uint64_t *bytes);
/* Loads the newest version into a local engine if it is newer than the
 * engine's (or `force`), checksums verified, retrying on mismatch. Sets
 * *loaded to the version loaded or leaves it. */
int rlpi_file_pull(rlp_synchronizer *s, rlp_rollout_engine *engine, bool *loaded);

/* CRC-32 and size of an open file (read from its current offset to the
 * end); RLP_E_IO / RLP_E_NOMEM naming `path`. */
int rlpi_file_crc(int fd, const char *path, uint32_t *crc, uint64_t *size);
/* The same, plus (chunk > 0) a CRC-32 of every `chunk` bytes, the last
 * one short: *chunks (malloc'd, the caller frees) gets *n_chunks. */
int rlpi_file_crc_chunks(int fd, const char *path, uint32_t chunk, uint32_t *crc, uint64_t *size, uint32_t **chunks,
                         size_t *n_chunks);
/* Removes a folder tree (no symlinks followed); errors ignored. */
void rlpi_file_remove_tree(const char *path);
/* Removes version folders of `dir` beyond the newest `keep` at or below
 * `current`, those above it, and leftovers of failed publishes. */
void rlpi_file_prune(const char *dir, uint64_t current, uint32_t keep);

/* RELAY: brings the mirror s->dir to the version that the parent's
 * (urls[0]'s) manifest names, if it is newer (downloads with Range resume,
 * CRC-32 per file, then the manifest through a rename); the other URLs in
 * order when one fails with RLP_E_NETWORK or RLP_E_FORMAT. *version: the
 * mirror's version after the call (0 and *any false when it has none).
 * One fetch at a time. RLP_E_NETWORK naming the URL; RLP_E_FORMAT (bad
 * manifest, a file bad 3 times); RLP_E_IO. */
int rlpi_relay_fetch(rlp_synchronizer *s, uint64_t *version, bool *any);
/* Frees what the relay and HTTP transports keep across calls (their
 * connections). From rlp_synchronizer_free(). */
void rlpi_relay_release(rlp_synchronizer *s);
void rlpi_http_release(rlp_synchronizer *s);

/* Tells every target not known to hold `version` to load DIR/v<version>
 * (concurrently, with timeouts and retries) and records what each now
 * holds; *sent: whether any request succeeded. RLP_E_NETWORK naming every
 * URL that failed (the others are updated). One round at a time. */
int rlpi_http_update(rlp_synchronizer *s, uint64_t version, bool *sent);

#endif
