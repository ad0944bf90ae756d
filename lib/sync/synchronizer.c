/* rlp_synchronizer: the policy version counter, the AReaL admission gate
 * (Fu et al. 2025, §5), publish after a train step and pull on the rollout
 * side, with the in-process transport here and the file, HTTP and relay
 * transports in their own files. The gate and the version live under one
 * mutex; weight copies, file writes and HTTP requests run outside it, so a
 * slow publish never stalls admissions. Must not generate or train. */
#include "sync/sync.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/sync_eta.h"
#include "dist/comm.h"
#include "model/policy.h"
#include "rollout/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_HTTP_TIMEOUT_MS 120000u
/* How often a gate waiting on another process's publishes re-reads the manifest. */
#define MANIFEST_POLL_MS 100u



static bool before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* (η + v + 1)·B, saturating. */
static uint64_t gate_bound(const rlp_synchronizer *s)
{
    return sat_mul(sat_add(sat_add(s->opts.max_staleness, s->version), 1), s->opts.batch_groups);
}

/* A newer version: record it and open the gate. accepted never lags v·B:
 * a fresh or resumed synchronizer starts there (AReaL: after resume
 * accepted = v·B). Groups still running count towards the floor: a
 * producer that pushes a group and then releases it lets the trainer
 * consume it, train and publish in between, and raising accepted then
 * would count that group twice once it is released (the gate would close
 * one step early, for good). mu held. */
static void advance_version(rlp_synchronizer *s, uint64_t v)
{
    if (v < s->version)
        return;
    s->version = v;
    uint64_t floor = sat_mul(v, s->opts.batch_groups), have = sat_add(s->accepted, s->running);
    if (have < floor)
        s->accepted = floor - s->running;
    s->st.policy_version = v;
    pthread_cond_broadcast(&s->gate_cv);
}

/* ---- options, create, free --------------------------------------------------- */

int rlp_sync_options_init(rlp_sync_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_SYNC_OPTIONS_VERSION, "unknown options version");
    rlp_sync_options d = RLP_SYNC_OPTIONS_INIT;
    /* a version-1 caller's struct ends before comm: nothing is written past it */
    memcpy(opts, &d, version >= 2 ? sizeof d : offsetof(rlp_sync_options, comm));
    opts->version = version;
    return RLP_OK;
}

uint32_t rlpi_sync_max_staleness(const rlp_synchronizer *sync)
{
    return sync->opts.max_staleness; /* set at creation, never changed: no lock */
}

static void snapshot_unref(rlpi_snapshot *snap)
{
    if (snap && --snap->refs == 0) {
        if (snap->owned)
            rlp_policy_free(snap->policy);
        free(snap);
    }
}

void rlp_synchronizer_free(rlp_synchronizer *sync)
{
    if (!sync)
        return;
    if (sync->bg_started) {
        /* a round in flight stops at its next poll (0.1 s) */
        atomic_store(&sync->http_abort, true);
        pthread_mutex_lock(&sync->mu);
        pthread_cond_broadcast(&sync->bg_cv);
        pthread_mutex_unlock(&sync->mu);
        pthread_join(sync->bg_thread, NULL);
    }
    pthread_cond_destroy(&sync->bg_cv);
#ifdef RLPI_HAVE_CURL
    rlpi_relay_release(sync);
    rlpi_http_release(sync);
#endif
    snapshot_unref(sync->snap);
    rlp_policy_free(sync->recv);
    for (size_t i = 0; i < sync->n_targets; i++)
        free(sync->targets[i].url);
    free(sync->targets);
    free(sync->dir);
    free(sync->api_key);
    pthread_cond_destroy(&sync->gate_cv);
    pthread_mutex_destroy(&sync->mu);
    pthread_mutex_destroy(&sync->publish_mu);
    pthread_mutex_destroy(&sync->http_mu);
    free(sync);
}

/* Copies of @p urls as targets whose versions are unknown (NULL for none). */
static int targets_make(const char *const *urls, size_t n, rlpi_sync_target **out)
{
    *out = NULL;
    rlpi_sync_target *t = n ? calloc(n, sizeof *t) : NULL;
    if (n && !t)
        return rlpi_error_set(RLP_E_NOMEM, "synchronizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        t[i].version = -1;
        if (!(t[i].url = strdup(urls[i]))) {
            for (size_t k = 0; k < i; k++)
                free(t[k].url);
            free(t);
            return rlpi_error_set(RLP_E_NOMEM, "synchronizer: out of memory");
        }
    }
    *out = t;
    return RLP_OK;
}

/* Creates `dir` if needed and returns its absolute path. */
static int make_dir(const char *dir, char **out)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return rlpi_error_set(RLP_E_IO, "rlp_synchronizer_create: cannot create %s: %s", dir, strerror(errno));
    char *abs = realpath(dir, NULL);
    if (!abs)
        return rlpi_error_set(RLP_E_IO, "rlp_synchronizer_create: %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(abs);
        return rlpi_error_set(RLP_E_IO, "rlp_synchronizer_create: %s is not a folder", dir);
    }
    *out = abs;
    return RLP_OK;
}

int rlp_synchronizer_create(rlp_synchronizer **out, const rlp_sync_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_SYNC_OPTIONS_VERSION,
                       "opts->version is not RLP_SYNC_OPTIONS_VERSION");
        /* read only the fields the caller's version has (version 1 ended at log_payload) */
        memcpy(&o, opts, opts->version == 1 ? offsetof(rlp_sync_options, comm) : sizeof o);
        if (opts->version == 1) {
            o.comm = NULL;
            o.root = 0;
        }
        o.version = RLP_SYNC_OPTIONS_VERSION;
    }
    RLPI_CHECK_ARG(o.mode >= RLP_SYNC_COLOCATED && o.mode <= RLP_SYNC_ASYNC, "opts->mode is not an rlp_sync_mode");
    RLPI_CHECK_ARG(o.transport >= RLP_TRANSPORT_IN_PROCESS && o.transport <= RLP_TRANSPORT_RELAY,
                   "opts->transport is not an rlp_sync_transport");
    if (o.transport == RLP_TRANSPORT_COLLECTIVE) {
        RLPI_CHECK_ARG(o.comm, "the COLLECTIVE transport needs opts->comm");
        int32_t world;
        rlp_comm_info(o.comm, NULL, &world, NULL);
        RLPI_CHECK_ARG(o.root >= 0 && o.root < world, "opts->root is outside the process group");
        RLPI_CHECK_ARG(o.mode == RLP_SYNC_SEQUENTIAL_PULL,
                       "the COLLECTIVE transport pairs each publish with one pull per rank: SEQUENTIAL_PULL mode only");
    }
    RLPI_CHECK_ARG(o.mode != RLP_SYNC_COLOCATED || o.transport == RLP_TRANSPORT_IN_PROCESS,
                   "COLOCATED shares the policy in process: use RLP_TRANSPORT_IN_PROCESS");
    RLPI_CHECK_ARG(o.batch_groups >= 1, "opts->batch_groups (B) must be at least 1");
    bool relay = o.transport == RLP_TRANSPORT_RELAY;
    bool files = o.transport == RLP_TRANSPORT_FILE || o.transport == RLP_TRANSPORT_HTTP || relay;
    if (files) {
        RLPI_CHECK_ARG(o.dir && *o.dir, "the FILE, HTTP and RELAY transports need opts->dir");
        RLPI_CHECK_ARG(o.keep_versions >= 1, "opts->keep_versions must be at least 1");
        RLPI_CHECK_ARG(o.dtype >= RLP_DTYPE_F32 && o.dtype <= RLP_DTYPE_BF16, "opts->dtype is not an rlp_dtype");
    }
    if (o.transport == RLP_TRANSPORT_HTTP || relay) {
#ifndef RLPI_HAVE_CURL
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: the %s transport needs a build with libcurl", __func__,
                              relay ? "RELAY" : "HTTP");
#endif
        RLPI_CHECK_ARG(relay ? o.n_urls >= 1 && o.urls : o.urls || o.n_urls == 0,
                       "the RELAY transport needs opts->urls (the parent); HTTP: opts->urls is NULL");
        for (size_t i = 0; i < o.n_urls; i++)
            RLPI_CHECK_ARG(o.urls[i] && (!strncmp(o.urls[i], "http://", 7) || !strncmp(o.urls[i], "https://", 8)),
                           "opts->urls[i] must be an http:// or https:// URL");
    }
    if (!o.timeout_ms)
        o.timeout_ms = DEFAULT_HTTP_TIMEOUT_MS;

    rlp_synchronizer *s = calloc(1, sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->gate_cv, &ca);
    pthread_cond_init(&s->bg_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->publish_mu, NULL);
    pthread_mutex_init(&s->http_mu, NULL);
    s->opts = o;
    s->log = (rlpi_logger){o.log_fn, o.log_payload, RLP_LOG_WARN};
    s->st.version = 1;
    s->st.mode = o.mode;
    s->st.transport = o.transport;
    s->version = o.initial_version;
    s->accepted = sat_mul(o.initial_version, o.batch_groups);
    s->st.policy_version = o.initial_version;
    int rc = RLP_OK;
    if (files)
        rc = make_dir(o.dir, &s->dir);
    if (!rc && o.api_key && !(s->api_key = strdup(o.api_key)))
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    if (!rc && (o.transport == RLP_TRANSPORT_HTTP || relay) &&
        (rc = targets_make(o.urls, o.n_urls, &s->targets)) == RLP_OK)
        s->n_targets = o.n_urls;
    if (rc) {
        rlp_synchronizer_free(s);
        return rc;
    }
    s->opts.dir = s->dir;
    s->opts.api_key = s->api_key;
    s->opts.urls = NULL; /* the targets hold them */
    *out = s;
    return RLP_OK;
}

/* ---- the HTTP transport's servers ---------------------------------------------- */

int rlp_synchronizer_set_urls(rlp_synchronizer *sync, const char *const *urls, size_t n_urls)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    if (sync->opts.transport != RLP_TRANSPORT_HTTP)
        return rlpi_error_set(RLP_E_STATE, "%s: only the HTTP transport has a set of servers to change", __func__);
    RLPI_CHECK_ARG(urls || n_urls == 0, "urls is NULL");
    for (size_t i = 0; i < n_urls; i++)
        RLPI_CHECK_ARG(urls[i] && (!strncmp(urls[i], "http://", 7) || !strncmp(urls[i], "https://", 8)),
                       "urls[i] must be an http:// or https:// URL");
    rlpi_sync_target *t = NULL;
    int rc = targets_make(urls, n_urls, &t);
    if (rc)
        return rc;
    pthread_mutex_lock(&sync->mu);
    /* a server that stays keeps what it is known to hold */
    for (size_t i = 0; i < n_urls; i++)
        for (size_t k = 0; k < sync->n_targets; k++)
            if (!strcmp(sync->targets[k].url, t[i].url))
                t[i].version = sync->targets[k].version;
    rlpi_sync_target *old = sync->targets;
    size_t n_old = sync->n_targets;
    sync->targets = t;
    sync->n_targets = n_urls;
    sync->targets_gen++;
    sync->bg_rc = RLP_OK;
    pthread_cond_broadcast(&sync->gate_cv);
    pthread_mutex_unlock(&sync->mu);
    for (size_t k = 0; k < n_old; k++)
        free(old[k].url);
    free(old);
    return RLP_OK;
}

/* ---- publish ----------------------------------------------------------------- */

int rlp_synchronizer_publish(rlp_synchronizer *sync, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    if (sync->opts.transport == RLP_TRANSPORT_RELAY)
        return rlpi_error_set(RLP_E_STATE, "%s: the RELAY transport only pulls (publish to the origin's folder with "
                              "FILE or HTTP)", __func__);
    uint64_t v;
    int rc = rlp_policy_version(&v, policy);
    if (rc)
        return rc;
    double t0 = rlpi_now_s();
    pthread_mutex_lock(&sync->publish_mu);
    pthread_mutex_lock(&sync->mu);
    /* a collective publish is never skipped: each pairs with one pull per rank */
    bool done = sync->published && v == sync->version && sync->opts.transport != RLP_TRANSPORT_COLLECTIVE;
    if (v < sync->version)
        rc = rlpi_error_set(RLP_E_STATE, "%s: version %llu is older than the current %llu", __func__,
                            (unsigned long long)v, (unsigned long long)sync->version);
    pthread_mutex_unlock(&sync->mu);
    if (rc || done) {
        pthread_mutex_unlock(&sync->publish_mu);
        return rc;
    }

    rlpi_snapshot *snap = NULL;
    uint64_t bytes = 0;
    if (sync->opts.transport == RLP_TRANSPORT_IN_PROCESS) {
        if (!(snap = calloc(1, sizeof *snap))) {
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        } else if (sync->opts.mode == RLP_SYNC_COLOCATED) {
            snap->policy = (rlp_policy *)policy; /* same thread trains and generates */
        } else {
            /* a frozen copy: the trainer goes on changing its weights while
             * rollout threads copy these */
            rc = rlp_policy_clone(&snap->policy, policy, 0);
            snap->owned = true;
        }
        if (rc) {
            free(snap);
            snap = NULL;
        } else {
            snap->version = v;
            snap->refs = 1;
        }
    } else if (sync->opts.transport == RLP_TRANSPORT_COLLECTIVE) {
        int32_t rank;
        rlp_comm_info(sync->opts.comm, &rank, NULL, NULL);
        if (rank != sync->opts.root) {
            rc = rlpi_error_set(RLP_E_STATE, "rank %d is not the publishing rank %d of the COLLECTIVE transport",
                                rank, sync->opts.root);
            /* its peers are in the matching pull: release them */
            rlpi_dp_fail(sync->opts.comm, "synchronizer (publish on a receiving rank)", rc);
        }
        else {
            /* the root's weights are only read (its version is sent as it is) */
            rc = rlp_policy_broadcast((rlp_policy *)policy, sync->opts.comm, sync->opts.root);
            bytes = policy->bytes_broadcast; /* a LoRA root over the receivers' base: the adapters only */
        }
    } else {
        rc = rlpi_file_publish(sync, policy, v, &bytes);
    }
    if (rc == RLP_OK) {
        pthread_mutex_lock(&sync->mu);
        rlpi_snapshot *old = sync->snap;
        if (snap)
            sync->snap = snap;
        sync->published = true;
        advance_version(sync, v);
        sync->st.publishes++;
        sync->st.bytes_published += bytes;
        sync->st.publish_seconds += rlpi_now_s() - t0;
        if (snap)
            snapshot_unref(old);
        pthread_mutex_unlock(&sync->mu);
    }
    pthread_mutex_unlock(&sync->publish_mu);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

/* ---- pull -------------------------------------------------------------------- */

/* The latest version: ours if we published (or hold a snapshot), else the
 * manifest's. *any: whether any version was published at all. */
static int latest_version(rlp_synchronizer *s, uint64_t *out, bool *any)
{
    pthread_mutex_lock(&s->mu);
    bool ours = s->published || s->opts.transport == RLP_TRANSPORT_IN_PROCESS;
    *out = s->version;
    *any = s->published || s->snap;
    pthread_mutex_unlock(&s->mu);
    if (ours)
        return RLP_OK;
    rlpi_manifest m;
    int rc = rlpi_manifest_read(s->dir, &m);
    if (rc == RLP_E_NOT_FOUND) /* nothing published yet */
        return RLP_OK;
    if (rc)
        return rc;
    uint64_t v = m.version;
    rlpi_manifest_clear(&m);
    pthread_mutex_lock(&s->mu);
    advance_version(s, v);
    *out = s->version;
    *any = true;
    pthread_mutex_unlock(&s->mu);
    return RLP_OK;
}

static int pull_in_process(rlp_synchronizer *s, rlp_rollout_engine *engine, uint64_t have, bool *loaded)
{
    pthread_mutex_lock(&s->mu);
    rlpi_snapshot *snap = s->snap;
    if (snap)
        snap->refs++;
    pthread_mutex_unlock(&s->mu);
    int rc = RLP_OK;
    if (snap && snap->version > have) {
        rc = rlp_rollout_engine_update_weights(engine, snap->policy);
        *loaded = rc == RLP_OK;
    }
    pthread_mutex_lock(&s->mu);
    snapshot_unref(snap);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* COLLECTIVE on a receiving rank: takes part in the root's next publish
 * (a broadcast into a frozen policy of the engine's architecture), then
 * hands the weights to the engine between two of its decode steps. */
static int pull_collective(rlp_synchronizer *s, rlp_rollout_engine *engine)
{
    int32_t rank;
    rlp_comm_info(s->opts.comm, &rank, NULL, NULL);
    if (rank == s->opts.root) {
        int rc = rlpi_error_set(RLP_E_STATE, "rank %d publishes on the COLLECTIVE transport; it does not pull", rank);
        rlpi_dp_fail(s->opts.comm, "synchronizer (pull on the publishing rank)", rc); /* release the peers */
        return rc;
    }
    double t0 = rlpi_now_s();
    pthread_mutex_lock(&s->publish_mu); /* one broadcast at a time, and recv is created once */
    int rc = RLP_OK;
    if (!s->recv)
        rc = rlp_policy_clone(&s->recv, engine->policy, 0);
    if (!rc)
        rc = rlp_policy_broadcast(s->recv, s->opts.comm, s->opts.root);
    uint64_t v = 0;
    if (!rc) {
        rlp_policy_version(&v, s->recv);
        rc = rlp_rollout_engine_update_weights(engine, s->recv);
    }
    pthread_mutex_unlock(&s->publish_mu);
    if (!rc) {
        uint64_t n = s->recv->bytes_broadcast;
        pthread_mutex_lock(&s->mu);
        s->published = true;
        advance_version(s, v);
        s->st.weight_loads++;
        s->st.bytes_published += n;
        s->st.pull_seconds += rlpi_now_s() - t0;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

int rlp_synchronizer_pull(rlp_synchronizer *sync, rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    RLPI_CHECK_ARG(engine || sync->opts.transport == RLP_TRANSPORT_HTTP || sync->opts.transport == RLP_TRANSPORT_RELAY,
                   "engine is NULL (allowed with the HTTP and RELAY transports only)");
    double t0 = rlpi_now_s();
    pthread_mutex_lock(&sync->mu);
    sync->st.pulls++;
    pthread_mutex_unlock(&sync->mu);
    bool remote = engine && engine->kind == RLPI_ENGINE_REMOTE;
    if (remote && sync->opts.transport != RLP_TRANSPORT_HTTP)
        return rlpi_error_set(RLP_E_STATE, "%s: a remote engine's servers are updated through the HTTP transport",
                              __func__);
    /* a share_weights engine generates with the trainer's own weights */
    if (engine && !remote && !engine->owns_policy) {
        if (sync->opts.transport == RLP_TRANSPORT_COLLECTIVE) {
            int rc = rlpi_error_set(RLP_E_STATE, "%s: a share_weights engine cannot take broadcast weights (the "
                                    "COLLECTIVE transport needs an engine with its own copy)", __func__);
            rlpi_dp_fail(sync->opts.comm, "synchronizer (pull into a share_weights engine)", rc);
            return rc;
        }
        return RLP_OK;
    }

    if (sync->opts.transport == RLP_TRANSPORT_COLLECTIVE) {
        int rc = pull_collective(sync, engine);
        return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
    }
    if (sync->opts.transport == RLP_TRANSPORT_RELAY) {
#ifdef RLPI_HAVE_CURL
        /* the mirror first; then the engine reads it as the FILE transport does */
        uint64_t mirrored;
        bool any;
        int rc = rlpi_relay_fetch(sync, &mirrored, &any);
        if (rc)
            return rlpi_error_wrap("%s", __func__);
        if (!engine)
            return RLP_OK;
#endif
    }
    uint64_t have = 0, latest;
    bool any;
    if (engine)
        rlp_rollout_engine_version(&have, engine);
    int rc = latest_version(sync, &latest, &any);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    bool loaded = false;
    if (!any) {
        /* nothing published yet: nothing to pull */
    } else if (remote || !engine) {
#ifdef RLPI_HAVE_CURL
        /* only servers not known to hold `latest` are asked (a new
         * synchronizer asks them all once) */
        rc = rlpi_http_update(sync, latest, &loaded);
        if (rc == RLP_OK && engine && have != latest)
            rc = rlp_rollout_engine_set_version(engine, latest);
#endif
    } else if (latest > have) {
        if (sync->opts.transport == RLP_TRANSPORT_IN_PROCESS)
            rc = pull_in_process(sync, engine, have, &loaded);
        else
            rc = rlpi_file_pull(sync, engine, &loaded);
    }
    if (loaded) {
        pthread_mutex_lock(&sync->mu);
        sync->st.weight_loads++;
        sync->st.pull_seconds += rlpi_now_s() - t0;
        pthread_mutex_unlock(&sync->mu);
    }
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

/* ---- pull at least: the newest version in the background ------------------------------ */

#ifdef RLPI_HAVE_CURL
/* The oldest version the HTTP servers are known to hold; -1 when one is
 * unknown; INT64_MAX when there are none. Under mu. */
static int64_t servers_floor(const rlp_synchronizer *s)
{
    int64_t m = INT64_MAX;
    for (size_t i = 0; i < s->n_targets; i++)
        if (s->targets[i].version < m)
            m = s->targets[i].version;
    return m;
}

/* The update thread: one round at a time, each to the newest version asked
 * for when it starts; it ends when the synchronizer is freed. */
static void *update_main(void *arg)
{
    rlp_synchronizer *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->bg_pending && !atomic_load(&s->http_abort))
            pthread_cond_wait(&s->bg_cv, &s->mu);
        if (atomic_load(&s->http_abort))
            break;
        uint64_t v = s->bg_want, gen = s->targets_gen;
        s->bg_pending = false;
        s->bg_busy = true;
        s->bg_round = v;
        pthread_mutex_unlock(&s->mu);
        bool sent = false;
        int rc = rlpi_http_update(s, v, &sent);
        pthread_mutex_lock(&s->mu);
        s->bg_busy = false;
        /* a failure of servers the set no longer has (or may not have) is moot */
        s->bg_rc = gen == s->targets_gen ? rc : RLP_OK;
        snprintf(s->bg_err, sizeof s->bg_err, "%s", s->bg_rc ? rlp_error_last() : "");
        if (sent)
            s->st.weight_loads++;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
#endif

int rlp_synchronizer_pull_at_least(rlp_synchronizer *sync, rlp_rollout_engine *engine, uint64_t min_version)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    bool remote = engine && engine->kind == RLPI_ENGINE_REMOTE;
    if (!remote || sync->opts.transport != RLP_TRANSPORT_HTTP)
        return rlp_synchronizer_pull(sync, engine);
#ifndef RLPI_HAVE_CURL
    (void)min_version;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: the HTTP transport needs a build with libcurl", __func__);
#else
    uint64_t latest;
    bool any;
    int rc = latest_version(sync, &latest, &any);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    if (!any)
        return RLP_OK; /* nothing published yet */
    if (min_version > latest)
        min_version = latest;
    pthread_mutex_lock(&sync->mu);
    sync->st.pulls++;
    if (!sync->bg_started) {
        if (pthread_create(&sync->bg_thread, NULL, update_main, sync) != 0) {
            pthread_mutex_unlock(&sync->mu);
            return rlpi_error_set(RLP_E_NOMEM, "%s: cannot start the weight update thread", __func__);
        }
        sync->bg_started = true;
    }
    /* a round to `latest`, unless one is in flight for it or waiting to
     * start; a server a round left behind is asked again by the next one */
    int64_t have = servers_floor(sync);
    if (have < (int64_t)latest) {
        if (sync->bg_want < latest)
            sync->bg_want = latest;
        if (!sync->bg_pending && !(sync->bg_busy && sync->bg_round >= latest)) {
            sync->bg_pending = true;
            pthread_cond_broadcast(&sync->bg_cv);
        }
    }
    /* no waiting here: each request carries min_version and a server holds
     * it until its weights are that new, so no server waits for the
     * slowest (a global "every server holds it" barrier cost a whole relay
     * round per batch over a WAN). Failures of the last round are reported
     * once, as a warning's worth: the round goes on at the next call. */
    if (sync->bg_rc && !sync->bg_busy && have < (int64_t)latest) {
        rc = sync->bg_rc;
        rlpi_error_set(rc, "%s: %s", __func__, sync->bg_err);
        sync->bg_rc = RLP_OK;
    }
    pthread_mutex_unlock(&sync->mu);
    rlpi_engine_set_min_version(engine, min_version, latest);
    /* the engine's own version (the tag of responses that carry none): what
     * every server is known to hold at least */
    if (have >= 0 && have != INT64_MAX)
        rlp_rollout_engine_set_version(engine, (uint64_t)have);
    return rc;
#endif
}

/* ---- the gate ------------------------------------------------------------------ */

static bool gate_open(const rlp_synchronizer *s)
{
    if (s->opts.max_concurrent && s->running >= s->opts.max_concurrent)
        return false;
    return sat_add(s->accepted, s->running) < gate_bound(s);
}

int rlp_synchronizer_acquire(rlp_synchronizer *sync, uint32_t timeout_ms)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    bool poll_manifest = sync->opts.transport != RLP_TRANSPORT_IN_PROCESS;
    struct timespec deadline;
    if (timeout_ms != RLP_WAIT_FOREVER)
        rlpi_deadline_after(&deadline, timeout_ms);
    pthread_mutex_lock(&sync->mu);
    bool counted = false;
    int rc = RLP_OK;
    for (;;) {
        if (sync->closed) {
            rc = rlpi_error_set(RLP_E_CLOSED, "%s: the synchronizer is closed", __func__);
            break;
        }
        if (gate_open(sync)) {
            sync->running++;
            sync->st.admitted++;
            break;
        }
        if (!counted) {
            sync->st.gate_waits++;
            counted = true;
        }
        if (timeout_ms == 0) {
            rc = rlpi_error_set(RLP_E_AGAIN,
                                "%s: gate closed (accepted %llu + running %llu, bound %llu at version %llu)",
                                __func__, (unsigned long long)sync->accepted, (unsigned long long)sync->running,
                                (unsigned long long)gate_bound(sync), (unsigned long long)sync->version);
            break;
        }
        /* with files, another process may publish: look at the manifest
         * now and then instead of waiting for a local publish only */
        struct timespec wake;
        bool timed = timeout_ms != RLP_WAIT_FOREVER;
        if (poll_manifest && !sync->published) {
            rlpi_deadline_after(&wake, MANIFEST_POLL_MS);
            if (timed && before(&deadline, &wake))
                wake = deadline;
            timed = true;
        } else if (timed) {
            wake = deadline;
        }
        int w = timed ? pthread_cond_timedwait(&sync->gate_cv, &sync->mu, &wake)
                      : pthread_cond_wait(&sync->gate_cv, &sync->mu);
        if (poll_manifest && !sync->published) {
            pthread_mutex_unlock(&sync->mu);
            uint64_t ignored;
            bool any;
            (void)latest_version(sync, &ignored, &any);
            pthread_mutex_lock(&sync->mu);
        }
        if (w == ETIMEDOUT && timeout_ms != RLP_WAIT_FOREVER && !gate_open(sync) && !sync->closed) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!before(&now, &deadline)) {
                rc = rlpi_error_set(RLP_E_TIMEOUT, "%s: the gate stayed closed for %u ms", __func__, timeout_ms);
                break;
            }
        }
    }
    pthread_mutex_unlock(&sync->mu);
    return rc;
}

int rlp_synchronizer_release(rlp_synchronizer *sync, int accepted)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    pthread_mutex_lock(&sync->mu);
    int rc = RLP_OK;
    if (sync->running == 0) {
        rc = rlpi_error_set(RLP_E_STATE, "%s: no rollout is running (release without acquire)", __func__);
    } else {
        sync->running--;
        if (accepted)
            sync->accepted = sat_add(sync->accepted, 1);
        pthread_cond_broadcast(&sync->gate_cv);
    }
    pthread_mutex_unlock(&sync->mu);
    return rc;
}

int rlp_synchronizer_close(rlp_synchronizer *sync)
{
    RLPI_CHECK_ARG(sync, "sync is NULL");
    pthread_mutex_lock(&sync->mu);
    sync->closed = true;
    pthread_cond_broadcast(&sync->gate_cv);
    pthread_mutex_unlock(&sync->mu);
    return RLP_OK;
}

int rlp_synchronizer_version(uint64_t *out_version, rlp_synchronizer *sync)
{
    RLPI_CHECK_ARG(out_version, "out_version is NULL");
    RLPI_CHECK_ARG(sync, "sync is NULL");
    uint64_t v;
    bool any;
    int rc = latest_version(sync, &v, &any);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    *out_version = v;
    return RLP_OK;
}

int rlp_synchronizer_stats(rlp_sync_stats *out, const rlp_synchronizer *sync)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(sync, "sync is NULL");
    rlp_synchronizer *s = (rlp_synchronizer *)sync;
    pthread_mutex_lock(&s->mu);
    rlp_sync_stats st = s->st;
    st.accepted = s->accepted;
    st.running = s->running;
    st.policy_version = s->version;
    pthread_mutex_unlock(&s->mu);
    *out = st;
    return RLP_OK;
}
