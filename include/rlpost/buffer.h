/**
 * @file rlpost/buffer.h
 * @brief librlpost: the replay buffer (rlp_replay_buffer): staleness-bounded store of scored trajectory groups.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_BUFFER_H
#define RLPOST_BUFFER_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Replay buffer: staleness-bounded store of scored trajectory groups       */
/* ------------------------------------------------------------------------ */

/** A timeout meaning "wait as long as it takes" (or until the handle is closed). */
#define RLP_WAIT_FOREVER UINT32_MAX

/** A staleness bound meaning "never drop a group for its age". */
#define RLP_STALENESS_UNBOUNDED UINT32_MAX

/** What rlp_replay_buffer_push() does when the buffer is full (values fixed). */
typedef enum rlp_buffer_full_policy {
    RLP_BUFFER_FULL_BLOCK = 0, /**< wait for room up to push_timeout_ms, then RLP_E_TIMEOUT */
    RLP_BUFFER_FULL_FAIL = 1   /**< return RLP_E_AGAIN at once */
} rlp_buffer_full_policy;

/** Bins of rlp_buffer_stats::staleness_hist. */
#define RLP_BUFFER_STALENESS_BINS 16

/** Version of rlp_buffer_options understood by this header (2 added sync). */
#define RLP_BUFFER_OPTIONS_VERSION 2

/**
 * Options of rlp_replay_buffer_create().
 *
 * Versions count RL steps (rlp_policy_version()). A group's version is
 * the smallest token version among its trajectories (the oldest weights
 * that produced any of its tokens; a trajectory without completion tokens
 * counts with its policy_version). A consumer at version v receives a group
 * of version u only if u + η ≥ v (AReaL, Fu et al. 2025, §5: staleness ≤
 * η); older groups are dropped and counted. η is @ref sync's
 * rlp_sync_options::max_staleness when @ref sync is set (one η for the gate
 * and the buffer), else @ref max_staleness.
 */
typedef struct rlp_buffer_options {
    uint32_t version;          /**< RLP_BUFFER_OPTIONS_VERSION */
    uint64_t capacity;         /**< most groups held (plus pushes being written); 0 = unbounded */
    uint32_t max_staleness;    /**< η; default 1 (Echo's sequential pull: ≤ 1 step);
                                    RLP_STALENESS_UNBOUNDED = never drop. With @ref sync
                                    set: leave it at the default 1 or set the
                                    synchronizer's η (any other value is refused) */
    int32_t full_policy;       /**< rlp_buffer_full_policy; default RLP_BUFFER_FULL_BLOCK */
    uint32_t push_timeout_ms;  /**< BLOCK: longest wait for room; default RLP_WAIT_FOREVER */
    const char *spill_path;    /**< durable spill file (created if absent, re-read if present),
                                    or NULL for a memory-only buffer; copied */
    uint64_t compact_bytes;    /**< rewrite the spill once it is larger than this and more than
                                    half of it is consumed or dropped; 0 = 64 MiB */
    rlp_log_fn log_fn;         /**< sink for warnings (a torn spill record); NULL = stderr */
    void *log_payload;         /**< passed to @ref log_fn */
    rlp_synchronizer *sync;    /**< (version 2) the synchronizer whose gate admits the groups pushed
                                    here, or NULL: the buffer then takes η from it
                                    (rlp_sync_options::max_staleness), so gate and buffer share one
                                    bound. Borrowed; must outlive the buffer */
} rlp_buffer_options;

#define RLP_BUFFER_OPTIONS_INIT \
    { RLP_BUFFER_OPTIONS_VERSION, 0, 1, RLP_BUFFER_FULL_BLOCK, RLP_WAIT_FOREVER, NULL, 0, NULL, NULL, NULL }

/** Fills @p opts with the defaults: the fields of @p version (1 or 2) only,
 *  so a caller built against version 1 may pass its shorter struct.
 *  RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_buffer_options_init(rlp_buffer_options *opts, uint32_t version);

/**
 * Creates a replay buffer.
 *
 * With @ref rlp_buffer_options::spill_path every accepted push is
 * appended to that file and fsynced before rlp_replay_buffer_push()
 * returns, and every pull records what it consumed (and what was dropped as
 * stale) before it returns, so after a crash re-creating the buffer on the
 * same file restores exactly the groups that were accepted and not yet
 * consumed. A torn or corrupt last record (a push that never returned) is
 * cut off with a warning; corruption anywhere else fails with RLP_E_FORMAT
 * rather than losing accepted groups silently. The file is locked: one
 * buffer per file at a time. Its format (records with lengths and CRC-32s)
 * is described in docs/buffer-sync.md; it is read as untrusted input. A
 * file of the format before provenance (1) is read (its groups have none)
 * and rewritten in the current format at once.
 *
 * @param[out] out  receives the buffer; free with rlp_replay_buffer_free()
 * @param opts      options, or NULL for the defaults (memory only, unbounded);
 *                  version 1 or 2 (a version-1 struct is read up to log_payload)
 * @return RLP_OK; RLP_E_INVALID_ARG (also: @ref rlp_buffer_options::sync set
 *         and max_staleness neither the default 1 nor the synchronizer's η,
 *         the message naming both); RLP_E_IO (the spill cannot be opened,
 *         read or written); RLP_E_STATE (another buffer holds the spill);
 *         RLP_E_FORMAT (the spill is not ours or is corrupt before its last
 *         record); RLP_E_UNSUPPORTED (a spill of a newer format);
 *         RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_replay_buffer_create(rlp_replay_buffer **out, const rlp_buffer_options *opts);

/**
 * Frees a buffer and the groups it holds (the spill file stays on disk
 * with them). No thread may be inside a call on it. NULL is a no-op.
 */
RLP_API void rlp_replay_buffer_free(rlp_replay_buffer *buf);

/**
 * Adds the trajectories of @p batch as groups: trajectories sharing a
 * group_id form one group (a push takes whole groups, so push a prompt's n
 * samples together). Each group is tagged with its version (see
 * rlp_buffer_options). All groups go in, or none. Every field of a
 * trajectory is kept, its provenance (rlp_batch_set_group_provenance())
 * included, in memory and in the spill.
 *
 * When the buffer is full (capacity counts groups), the full policy
 * decides: block until consumers make room, or fail at once. With a spill
 * the groups are on disk (fsynced) before this returns; concurrent pushes
 * share one fsync (group commit).
 *
 * @param buf    the buffer
 * @param batch  scored trajectories: every valid trajectory needs a finite
 *               reward. On RLP_OK the batch is left empty (its
 *               trajectories now belong to the buffer); on failure it is
 *               unchanged. An empty batch is a no-op.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, an unscored valid trajectory or
 *         another field a spill could not hold, named with its index; more
 *         groups than the capacity); RLP_E_AGAIN (full, FAIL policy);
 *         RLP_E_TIMEOUT (full past push_timeout_ms); RLP_E_CLOSED; RLP_E_IO
 *         (the spill write failed: the buffer stops accepting pushes);
 *         RLP_E_NOMEM.
 * Thread-safe: any number of producers may push at once, while consumers pull.
 */
RLP_API int rlp_replay_buffer_push(rlp_replay_buffer *buf, rlp_batch *batch);

/**
 * Takes @p n_groups whole groups for a consumer at policy version
 * @p version, oldest accepted first. Every group whose version is below
 * version − η is dropped on the way (counted in
 * rlp_buffer_stats::dropped_stale, never returned). Waits until
 * enough fresh groups are there, up to @p timeout_ms.
 *
 * @param[out] out      receives a new batch of the groups' trajectories
 *                      (each group contiguous); free with rlp_batch_free()
 * @param buf           the buffer
 * @param n_groups      groups wanted (≥ 1, ≤ the capacity when bounded)
 * @param version       the consumer's current policy version v
 * @param timeout_ms    0 = do not wait; RLP_WAIT_FOREVER = no limit
 * @return RLP_OK; RLP_E_AGAIN (not enough with timeout 0); RLP_E_TIMEOUT;
 *         RLP_E_CLOSED (closed and not enough left); RLP_E_INVALID_ARG;
 *         RLP_E_IO (the spill could not record the consumption: the groups
 *         stay in the buffer); RLP_E_NOMEM. Nothing is taken on failure.
 * Thread-safe: any number of consumers may pull at once.
 */
RLP_API int rlp_replay_buffer_pull(rlp_batch **out, rlp_replay_buffer *buf, size_t n_groups, uint64_t version,
                                   uint32_t timeout_ms);

/**
 * Closes the buffer: every blocked push and pull returns RLP_E_CLOSED, new
 * pushes fail with it, pulls still take what is there. Idempotent.
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_replay_buffer_close(rlp_replay_buffer *buf);

/* ------------------------------------------------------------------------ */
/* Batch files: scored groups between processes                              */
/* ------------------------------------------------------------------------ */

/**
 * Writes @p batch (scored groups; a group is its trajectories with one
 * group_id) to @p path as one batch file: the spill format's header and one
 * push record, checksummed, with provenance; written under a temporary
 * name, fsynced and renamed, so that a reader never sees half of it. This
 * is how a rollout worker in another process — or on another machine,
 * over a shared folder — hands its groups to a trainer
 * (rlp_rollout_worker_options::outbox_dir, rlp_replay_buffer_ingest_dir()).
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL, an empty batch, a trajectory the
 *         buffer would refuse — the message names the rule); RLP_E_IO;
 *         RLP_E_NOMEM.
 */
RLP_API int rlp_batch_write_file(const rlp_batch *batch, const char *path);

/**
 * Reads a batch file written by rlp_batch_write_file(). The file is
 * untrusted input: every length, count and checksum is checked before use.
 * @return RLP_OK; RLP_E_NOT_FOUND (no such file); RLP_E_IO (cannot read
 *         it); RLP_E_FORMAT (not one whole,
 *         well-formed batch: the message names the offset and the field);
 *         RLP_E_UNSUPPORTED (a newer format); RLP_E_NOMEM.
 */
RLP_API int rlp_batch_read_file(rlp_batch **out, const char *path);

/**
 * Takes in the batch files of folder @p dir (names ending in ".rlpb", in
 * name order; names starting with '.' are writes in progress): each is
 * pushed whole into the buffer (rlp_replay_buffer_push: staleness is judged
 * at pull as for any push) and removed. A file that is malformed, or holds
 * what a push refuses, is renamed NAME.bad and logged: its groups are lost,
 * the run goes on. A file the buffer has no room for stays for a later
 * call. Thread-safe like a push.
 * @param[out] out_groups  groups taken in; may be NULL
 * @return RLP_OK; RLP_E_INVALID_ARG; RLP_E_IO (the folder cannot be read);
 *         RLP_E_CLOSED; RLP_E_NOMEM.
 */
RLP_API int rlp_replay_buffer_ingest_dir(rlp_replay_buffer *buf, const char *dir, size_t *out_groups);

/** Counters of a replay buffer (groups unless said otherwise). */
typedef struct rlp_buffer_stats {
    uint32_t version;            /**< set by the library (1) */
    uint64_t size;               /**< groups held now */
    uint64_t trajectories;       /**< trajectories held now */
    uint64_t accepted;           /**< groups accepted by pushes since creation */
    uint64_t restored;           /**< groups restored from the spill at creation */
    uint64_t consumed;           /**< groups handed out by pulls */
    uint64_t dropped_stale;      /**< groups dropped for staleness */
    uint64_t rejected;           /**< pushes refused for lack of room (AGAIN or TIMEOUT) */
    uint64_t staleness_hist[RLP_BUFFER_STALENESS_BINS]; /**< consumed groups by v − version
                                                             (0 when negative); the last bin
                                                             counts everything ≥ its index */
    uint64_t max_staleness_seen; /**< largest v − version among consumed groups */
    uint64_t spill_bytes;        /**< size of the spill file now (0 without one) */
    uint64_t spill_records;      /**< records appended since creation */
    uint64_t spill_syncs;        /**< fdatasync calls (fewer than records when pushes share one) */
    uint64_t compactions;        /**< spill rewrites */
    uint64_t torn_bytes;         /**< bytes of a torn last record cut off at creation */
} rlp_buffer_stats;

/**
 * Reads the counters (one consistent snapshot).
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_replay_buffer_stats(rlp_buffer_stats *out, const rlp_replay_buffer *buf);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_BUFFER_H */
