/**
 * @file rlpost/sync.h
 * @brief librlpost: the synchronizer (rlp_synchronizer): policy versions, weight transports, the staleness gate.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_SYNC_H
#define RLPOST_SYNC_H

#include "rlpost/core.h"
#include "rlpost/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Synchronizer: policy versions, weight transports, the staleness gate     */
/* ------------------------------------------------------------------------ */

/** How trainer and rollout side share weights (values fixed; ARCHITECTURE.md §1). */
typedef enum rlp_sync_mode {
    RLP_SYNC_COLOCATED = 0,        /**< one thread trains and generates (verl/TRL default): publish
                                        keeps a borrowed pointer to the policy, pull copies from it
                                        (or does nothing for a share_weights engine); needs the
                                        in-process transport */
    RLP_SYNC_SEQUENTIAL_PULL = 1,  /**< Echo: the rollout side calls rlp_synchronizer_pull() before each
                                        generate call and runs at most η versions behind */
    RLP_SYNC_ASYNC = 2             /**< Echo/AReaL push-pull: the trainer publishes every version while
                                        rollout workers generate; they pull when ready (a pull from another
                                        thread during generation is handled by the engine's interrupt
                                        mode) and admit rollouts through the gate */
} rlp_sync_mode;

/** How published weights travel (values fixed). */
typedef enum rlp_sync_transport {
    RLP_TRANSPORT_IN_PROCESS = 0,  /**< publish keeps a frozen copy (rlp_policy_clone); pull copies it into
                                        the engine with rlp_rollout_engine_update_weights() */
    RLP_TRANSPORT_FILE = 1,        /**< publish writes DIR/v<version>/ (rlp_policy_save) and then the manifest
                                        DIR/latest.json (temporary name, fsync, rename; manifest version 2:
                                        a CRC-32 per file and per 4 MiB chunk); pull reads the manifest,
                                        verifies every file's CRC-32 and size, and loads with
                                        rlp_rollout_engine_load_weights(); works across processes */
    RLP_TRANSPORT_HTTP = 2,        /**< FILE, plus: pull tells the servers at @ref rlp_sync_options::urls to
                                        load the version (POST {url}/update_weights_from_disk, as `rlpost
                                        serve` and SGLang accept) and then sets a remote engine's version */
    RLP_TRANSPORT_COLLECTIVE = 3,  /**< a broadcast over the process group @ref rlp_sync_options::comm
                                        (rlp_policy_broadcast(): NCCL between GPUs, or shared memory): the
                                        trainer rank (@ref rlp_sync_options::root) publishes, every other
                                        rank pulls into its local engine. Both are collectives: the root's
                                        k-th publish pairs with each rank's k-th pull, so a pull waits for
                                        the next publish (Echo's sequential pull in lockstep); SEQUENTIAL_PULL
                                        mode only */
    RLP_TRANSPORT_RELAY = 4        /**< pull only (ECHO-2's peer-assisted broadcast, Xiao et al. 2026): pull
                                        fetches the parent's manifest, GET {urls[0]}/v1/rlpost/weights/latest.json
                                        (`rlpost serve --weights-dir` serves its folder there), and when it names
                                        a newer version than the local mirror @ref rlp_sync_options::dir, downloads
                                        every file of v<N> into DIR in the FILE layout (resuming a cut transfer
                                        with an HTTP Range from the bytes already on disk; each chunk's CRC-32
                                        checked on arrival with a version-2 manifest and each file's at its
                                        end, a bad chunk or file fetched again up to 3 times),
                                        writes DIR/latest.json (temporary name, rename) and then loads the
                                        version exactly as FILE does. DIR can be served to children in turn
                                        (origin → relay → …); it keeps keep_versions (at least 2) versions so
                                        that a child still fetching the previous one can finish. Connection,
                                        stall (no byte for min(timeout_ms, 10 s)) and manifest timeouts;
                                        max_retries retries with backoff on transport errors, 408, 429 and 5xx;
                                        @ref rlp_sync_options::api_key is sent as the bearer token. A parent
                                        that names an older version is ignored. Publishing is refused */
} rlp_sync_transport;

/** Version of rlp_sync_options understood by this header (2 added comm and root). */
#define RLP_SYNC_OPTIONS_VERSION 2

/**
 * Options of rlp_synchronizer_create().
 *
 * The gate (AReaL, Fu et al. 2025, §5 "staleness-aware training"): with v
 * the latest published version, B = @ref batch_groups, η =
 * @ref max_staleness, `accepted` the groups released as accepted and
 * `running` those admitted and not yet released, a new rollout group may
 * start only while running < max_concurrent and accepted + running <
 * (η + v + 1)·B. Versions count RL steps (rlp_policy_version(): one per
 * rlp_policy_train_rl() call, however many optimizer steps it takes), so
 * B is the number of groups the trainer consumes per RL step: G for a
 * step on G groups. η is in RL steps too. A replay buffer created with
 * rlp_buffer_options::sync takes its η from here.
 */
typedef struct rlp_sync_options {
    uint32_t version;              /**< RLP_SYNC_OPTIONS_VERSION */
    int32_t mode;                  /**< rlp_sync_mode; default RLP_SYNC_SEQUENTIAL_PULL */
    int32_t transport;             /**< rlp_sync_transport; default RLP_TRANSPORT_IN_PROCESS */
    uint32_t max_staleness;        /**< η; default 1 */
    uint32_t batch_groups;         /**< B (≥ 1); default 1 */
    uint32_t max_concurrent;       /**< rollout groups in flight at most; 0 = no limit */
    uint64_t initial_version;      /**< v at creation (a resumed run's policy version); accepted starts at v·B */
    const char *dir;               /**< FILE/HTTP: folder of the published versions (created if absent);
                                        readers in other processes open the same folder; RELAY: the local
                                        mirror; copied */
    uint32_t keep_versions;        /**< FILE/HTTP/RELAY: version folders kept (K ≥ 1; RELAY keeps at least 2);
                                        default 3 */
    int32_t dtype;                 /**< FILE/HTTP: rlp_dtype of the saved weights; default RLP_DTYPE_F32 */
    const char *const *urls;       /**< HTTP: (n_urls) server base URLs, e.g. "http://127.0.0.1:8000" (none
                                        is allowed: a swarm whose servers join later, rlp_synchronizer_set_urls); RELAY:
                                        urls[0] is the parent, asked first at every pull; the others (e.g. the
                                        grandparent, then the origin) are tried in order while it fails with
                                        RLP_E_NETWORK or RLP_E_FORMAT; copied */
    size_t n_urls;
    const char *api_key;           /**< RELAY: the parent's bearer token, or NULL: none.
                                        HTTP: bearer token, or NULL: the first line of
                                        DIR/.rlpost-serve-token if that file exists (the token
                                        `rlpost serve --weights-dir DIR` demands for weight
                                        updates), read at each publish; copied */
    uint32_t timeout_ms;           /**< HTTP: per request (a server loads the weights before answering);
                                        RELAY: the manifest request, and the connect and stall limits of file
                                        transfers (at most 10 s each); 0 = 120000 */
    uint32_t max_retries;          /**< HTTP/RELAY: retries on connection errors, timeouts, 408, 429 and 5xx
                                        (RELAY: per file, counted anew after a transfer that made progress);
                                        default 3 */
    uint32_t verify_retries;       /**< FILE/HTTP readers: re-reads of the manifest after a checksum
                                        mismatch or a version pruned mid-load; default 5 */
    rlp_log_fn log_fn;             /**< sink for warnings; NULL = stderr */
    void *log_payload;             /**< passed to @ref log_fn */
    rlp_comm *comm;                /**< COLLECTIVE: the group (borrowed; must outlive the synchronizer) */
    int32_t root;                  /**< COLLECTIVE: the publishing (trainer) rank; default 0 */
} rlp_sync_options;

#define RLP_SYNC_OPTIONS_INIT                                                                             \
    { RLP_SYNC_OPTIONS_VERSION, RLP_SYNC_SEQUENTIAL_PULL, RLP_TRANSPORT_IN_PROCESS, 1, 1, 0, 0, NULL, 3, \
      RLP_DTYPE_F32, NULL, 0, NULL, 0, 3, 5, NULL, NULL, NULL, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_sync_options_init(rlp_sync_options *opts, uint32_t version);

/**
 * Creates a synchronizer. Trainer and rollout side may each have their own
 * (in different processes with the FILE or HTTP transport, pointed at the
 * same folder): a synchronizer that has not published itself learns the
 * latest version from the manifest. Run one gate per run, though: each
 * synchronizer admits by its own counts.
 *
 * @param[out] out  receives the synchronizer; free with rlp_synchronizer_free()
 * @param opts      options, or NULL for the defaults
 * @return RLP_OK; RLP_E_INVALID_ARG (bad enum, B = 0, K = 0, no dir for
 *         FILE/HTTP, no URLs for HTTP, COLOCATED with another transport);
 *         RLP_E_UNSUPPORTED (HTTP in a build without libcurl); RLP_E_IO (the
 *         folder cannot be created); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_create(rlp_synchronizer **out, const rlp_sync_options *opts);

/** Frees a synchronizer (and its snapshot of the weights). No thread may be
 *  inside a call on it. The published files stay. NULL is a no-op. */
RLP_API void rlp_synchronizer_free(rlp_synchronizer *sync);

/**
 * Publishes the policy's current weights as version rlp_policy_version():
 * call it after each train step. IN_PROCESS keeps a frozen copy (COLOCATED:
 * the pointer); FILE/HTTP write DIR/v<version>/ and then the manifest, and
 * remove old version folders beyond keep_versions (a reader still loading
 * one retries with the newest). A policy with LoRA adapters
 * (rlp_policy_enable_lora) publishes its adapters only, as a PEFT folder
 * (rlp_policy_save_lora): readers must run the same base, to which
 * rlp_rollout_engine_load_weights applies them. Wakes rollouts waiting at
 * the gate.
 *
 * @param sync    the synchronizer
 * @param policy  the trained policy; COLOCATED borrows it until the next
 *                publish or rlp_synchronizer_free()
 * @return RLP_OK (also when this version was already published: nothing is
 *         done); RLP_E_STATE (an older version than the last published, or
 *         the RELAY transport, which only pulls);
 *         RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_NOMEM.
 * Thread-safe; publishes are serialized. One process writes a folder.
 */
RLP_API int rlp_synchronizer_publish(rlp_synchronizer *sync, const rlp_policy *policy);

/**
 * Brings a rollout engine to the latest published version if it is older
 * (Echo's pull): a local engine gets the in-process copy or the verified
 * files; a remote engine's servers are told to load the version (only
 * those not known to hold it already) and the engine's version is set once
 * all of them have it. A local share_weights engine needs nothing.
 *
 * RELAY: first brings the local mirror to the parent's version (see
 * RLP_TRANSPORT_RELAY), then loads it as FILE does. A pull that fails
 * while downloading leaves what it got in DIR/.v<N>.part/, and the next
 * pull (also in another process) resumes from there.
 *
 * @param sync    the synchronizer
 * @param engine  the engine; NULL (HTTP: just tell the servers; RELAY: just
 *                update the mirror)
 * @return RLP_OK (also when there is nothing newer); RLP_E_FORMAT (the
 *         files failed their checksums on every retry, or the manifest is
 *         malformed; RELAY: a chunk or file failed its CRC-32 three times; the engine
 *         keeps its weights); RLP_E_NETWORK (a server
 *         refused or could not be reached after its retries: the message
 *         names each failing URL; the others were updated, and the next pull
 *         retries the failed ones; the engine's version is not changed;
 *         RELAY: the parent could not be reached or refused, naming the URL;
 *         the mirror and the engine keep their version);
 *         RLP_E_STATE (a remote engine without the HTTP transport);
 *         RLP_E_INVALID_ARG; RLP_E_IO; RLP_E_NOMEM.
 * Thread-safe, also while the engine generates on another thread (the
 * engine applies the update between decode steps).
 */
RLP_API int rlp_synchronizer_pull(rlp_synchronizer *sync, rlp_rollout_engine *engine);

/**
 * Like rlp_synchronizer_pull(), but generation needs only weights of
 * @p min_version or newer, so that it goes on with a version within the
 * staleness bound while the newest one spreads (Echo's asynchronous
 * push-pull; ECHO-2 overlaps weight dissemination with generation the same
 * way). A rollout side that serves RL step j + 1 under the bound η needs
 * version j − η at least (the buffer drops anything older at step j + 1).
 *
 * With a remote engine and the HTTP transport it does not wait: a thread of
 * the synchronizer tells the servers to load the latest version (one round
 * at a time, each to the newest version asked for; a server a round left
 * behind is asked again by the next), and the engine's requests from now on
 * carry "min_weight_version": @p min_version (capped at the latest
 * published version), an rlpost extension of /v1/completions — `rlpost
 * serve` holds such a request until its weights are that new (60 s at most,
 * then HTTP 503, which the engine retries), so each server starts as soon
 * as it has the version instead of every batch waiting for the slowest
 * server. Servers that ignore the field (vLLM, SGLang) generate with what
 * they hold; their responses' versions still tag the trajectories, and the
 * buffer drops what is too old. The engine's version is set to the oldest
 * version every server is known to hold. Every other engine and transport:
 * exactly rlp_synchronizer_pull().
 *
 * @param sync         the synchronizer
 * @param engine       the engine (see rlp_synchronizer_pull())
 * @param min_version  the oldest version worth generating with; 0 = any
 * @return RLP_OK; RLP_E_NETWORK (the last update round left a server behind:
 *         the message names it; reported once, the next round retries it);
 *         the errors of rlp_synchronizer_pull().
 * Thread-safe; the update thread ends in rlp_synchronizer_free(), which
 * stops a round in flight within 0.1 s.
 */
RLP_API int rlp_synchronizer_pull_at_least(rlp_synchronizer *sync, rlp_rollout_engine *engine,
                                           uint64_t min_version);

/**
 * Replaces the servers that the HTTP transport tells to load each version
 * (opts->urls at creation): for a swarm whose rollout servers join and
 * leave while it runs. A server that was in the old set keeps what it is
 * known to hold; a new one is told at the next pull. An update round in
 * flight finishes with the set it started with (its results are recorded
 * for the servers still in the set; a failure it had is not reported by
 * rlp_synchronizer_pull_at_least()). An empty set is allowed: a pull then
 * tells nobody and returns RLP_OK.
 *
 * @param sync    the synchronizer (HTTP transport)
 * @param urls    (n_urls) http:// or https:// base URLs, copied; NULL when n_urls is 0
 * @param n_urls  how many
 * @return RLP_OK; RLP_E_STATE (not the HTTP transport); RLP_E_INVALID_ARG;
 *         RLP_E_NOMEM (the old set is kept).
 * Thread-safe, also while another thread pulls.
 */
RLP_API int rlp_synchronizer_set_urls(rlp_synchronizer *sync, const char *const *urls, size_t n_urls);

/**
 * Admits one rollout group through the staleness gate (see
 * rlp_sync_options), waiting up to @p timeout_ms for a publish or a release
 * to open it. Call rlp_synchronizer_release() when the group is done.
 *
 * @param sync        the synchronizer
 * @param timeout_ms  0 = do not wait; RLP_WAIT_FOREVER = no limit
 * @return RLP_OK (running + 1); RLP_E_AGAIN (closed gate, timeout 0);
 *         RLP_E_TIMEOUT; RLP_E_CLOSED; RLP_E_INVALID_ARG.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_acquire(rlp_synchronizer *sync, uint32_t timeout_ms);

/**
 * Ends an admitted rollout group.
 *
 * @param sync      the synchronizer
 * @param accepted  non-zero: the group was pushed to the buffer (accepted + 1);
 *                  0: it was discarded (its slot is freed, nothing counted)
 * @return RLP_OK; RLP_E_STATE (nothing is running); RLP_E_INVALID_ARG.
 * Thread-safe.
 */
RLP_API int rlp_synchronizer_release(rlp_synchronizer *sync, int accepted);

/**
 * The latest published version: this synchronizer's last publish, or
 * (FILE/HTTP, when it has not published) the manifest's.
 * @return RLP_OK; RLP_E_FORMAT / RLP_E_IO (unreadable manifest);
 *         RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_synchronizer_version(uint64_t *out_version, rlp_synchronizer *sync);

/**
 * Closes the gate for good: waiting and later acquires return RLP_E_CLOSED.
 * Publish and pull keep working. Idempotent. Thread-safe.
 */
RLP_API int rlp_synchronizer_close(rlp_synchronizer *sync);

/** Counters of a synchronizer. */
typedef struct rlp_sync_stats {
    uint32_t version;            /**< set by the library (1) */
    int32_t mode, transport;     /**< as created */
    uint64_t policy_version;     /**< latest version known (published here or read from the manifest) */
    uint64_t accepted, running;  /**< the gate's counts */
    uint64_t admitted;           /**< acquires that succeeded */
    uint64_t gate_waits;         /**< acquires that found the gate closed (and waited or gave up) */
    uint64_t publishes;          /**< versions published */
    uint64_t pulls;              /**< pull calls */
    uint64_t weight_loads;       /**< pulls that changed an engine's weights (or told servers) */
    uint64_t checksum_retries;   /**< manifest re-reads after a mismatch or a vanished version */
    uint64_t http_requests;      /**< update requests sent (retries included); RELAY: requests to the parent */
    uint64_t http_failures;      /**< servers that were not updated after their retries; RELAY: pulls that
                                        failed on the parent */
    uint64_t bytes_published;    /**< bytes written by FILE/HTTP publishes; RELAY: bytes downloaded */
    double publish_seconds;      /**< total time in publish */
    double pull_seconds;         /**< total time in pulls that loaded weights */
} rlp_sync_stats;

/** Reads the counters (one consistent snapshot). RLP_OK or RLP_E_INVALID_ARG. Thread-safe. */
RLP_API int rlp_synchronizer_stats(rlp_sync_stats *out, const rlp_synchronizer *sync);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_SYNC_H */
