/* Internal layout of rlp_synchronizer and the transports behind it:
 * synchronizer.c owns the version counter, the gate and the in-process
 * copy; transport_file.c writes version folders and the manifest and loads
 * them verified; transport_http.c tells weight-update endpoints to load a
 * folder. Transports know nothing about the gate. */
#ifndef RLPI_SYNC_SYNC_H
#define RLPI_SYNC_SYNC_H

#include "core/log.h"
#include "rlpost.h"

#include <pthread.h>
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
};

/* One published version as the manifest describes it. */
#define RLPI_MANIFEST_MAX_FILES 64
typedef struct rlpi_manifest_file {
    char name[128];
    uint64_t size;
    uint32_t crc32;
} rlpi_manifest_file;

typedef struct rlpi_manifest {
    uint64_t version;
    char path[64];           /* folder name relative to dir: "v<version>" */
    rlpi_manifest_file files[RLPI_MANIFEST_MAX_FILES];
    size_t n_files;
} rlpi_manifest;

/* Whether a file name may appear in a manifest: 1..127 bytes, no path
 * separator or control character, not "." or "..". */
bool rlpi_manifest_name_ok(const char *s, size_t n);
/* Parses a manifest (untrusted: every field checked; RLP_E_FORMAT naming
 * it). `source` names the file in messages. */
int rlpi_manifest_parse(const char *json, size_t len, const char *source, rlpi_manifest *out);
/* Reads DIR/latest.json; RLP_E_NOT_FOUND when nothing was published yet. */
int rlpi_manifest_read(const char *dir, rlpi_manifest *out);

/* Saves the policy as DIR/v<version>/, writes the manifest atomically and
 * prunes old versions. *bytes receives the bytes written. */
int rlpi_file_publish(rlp_synchronizer *s, const rlp_policy *policy, uint64_t version, uint64_t *bytes);
/* Loads the newest version into a local engine if it is newer than the
 * engine's (or `force`), checksums verified, retrying on mismatch. Sets
 * *loaded to the version loaded or leaves it. */
int rlpi_file_pull(rlp_synchronizer *s, rlp_rollout_engine *engine, bool *loaded);

/* Tells every target not known to hold `version` to load DIR/v<version>
 * (concurrently, with timeouts and retries) and records what each now
 * holds; *sent: whether any request succeeded. RLP_E_NETWORK naming every
 * URL that failed (the others are updated). One round at a time. */
int rlpi_http_update(rlp_synchronizer *s, uint64_t version, bool *sent);

#endif
