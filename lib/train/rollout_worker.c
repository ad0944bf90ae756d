/* The rollout worker: the producer half of an asynchronous run (Echo's
 * push-pull, AReaL's rollout side). Batch j serves RL step j + 1: it
 * admits G groups through the synchronizer's staleness gate (one slot per
 * group), brings its engine to the latest version, draws G prompts,
 * generates with step j + 1's sampling seed, scores, and pushes the groups
 * whole, each with its provenance. The reward is computed here: the buffer
 * accepts scored trajectories only (its spill records carry the reward),
 * and scoring on the rollout side overlaps with training. */
#include "trainer_impl.h"

#include "core/batch.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/sync_eta.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int rlp_rollout_worker_options_init(rlp_rollout_worker_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_ROLLOUT_WORKER_OPTIONS_VERSION, "unknown version");
    rlp_rollout_worker_options d;
    memset(&d, 0, sizeof d);
    d.version = version;
    d.prompts_per_batch = 8;
    d.retries = 2;
    rlp_sampling_options_init(&d.sampling, RLP_SAMPLING_OPTIONS_VERSION);
    rlp_multiturn_options_init(&d.multiturn, RLP_MULTITURN_OPTIONS_VERSION);
    d.multiturn.env = NULL;
    /* a version-1 caller's struct ends before multiturn */
    memcpy(opts, &d, version >= 2 ? sizeof d : offsetof(rlp_rollout_worker_options, multiturn));
    return RLP_OK;
}

void rlpi_train_pull_warning(unsigned *count, rlp_log_fn fn, void *payload, int rc)
{
    if ((*count)++ % 20)
        return;
    char msg[1024];
    snprintf(msg, sizeof msg, "warning: not every rollout worker loaded the latest weights (%s: %s); generation "
             "goes on, the next pull retries%s", rlp_status_str(rc), rlp_error_last(),
             *count > 1 ? " (repeated warnings are shown every 20th time)" : "");
    if (fn)
        fn(RLP_LOG_WARN, msg, payload);
    else
        fprintf(stderr, "rlpost: %s\n", msg);
}

/* An engine numbers the groups it is not given ids for (1 << 63 | k, k
 * from 0 on every engine), so two workers over one buffer would push groups
 * with the same ids, and the RL step, which groups trajectories by id,
 * would merge them. Each worker moves each of its engines' ids into a space
 * of its own (bits 48–62: a tag per engine of the process); the order of ids within
 * a batch, and so every result, is unchanged, and the sampling streams were
 * drawn with the engine's ids. */
static atomic_uint_fast64_t workers_created;

/* The id tag of a new lane (engine) of @p w: a process-wide counter for
 * workers that push into a buffer; for an outbox worker, bits 32–47 from
 * this process's id and 48–62 from a random draw, so that workers of other
 * processes writing into the same inbox never share one. */
static uint64_t lane_tag(rlp_rollout_worker *w)
{
    uint64_t tag = (atomic_fetch_add(&workers_created, 1) % 0x7fff + 1) << 48;
    if (w->outbox) {
        uint64_t r = (uint64_t)rlpi_now_ns() ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(uintptr_t)w ^ w->n_lanes;
        r = rlpi_train_mix_seed(r, tag);
        tag = ((r % 0x7fff + 1) << 48) | (((uint64_t)getpid() & 0xffff) << 32);
        if (!w->outbox_nonce)
            w->outbox_nonce = r;
    }
    return tag;
}

static void tag_group_ids(uint64_t id_tag, rlp_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].group_id >> 63)
            b->items[i].group_id |= id_tag;
}

int rlp_rollout_worker_create(rlp_rollout_worker **out, rlp_rollout_engine *engine, rlp_task *task,
                              rlp_reward_fn *reward, rlp_synchronizer *sync, rlp_replay_buffer *buffer,
                              const rlp_rollout_worker_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(engine && task && reward && sync, "engine, task, reward and sync are required");
    rlp_rollout_worker_options o;
    rlp_rollout_worker_options_init(&o, RLP_ROLLOUT_WORKER_OPTIONS_VERSION);
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_ROLLOUT_WORKER_OPTIONS_VERSION,
                       "opts->version: unknown version");
        memcpy(&o, opts, opts->version >= 2 ? sizeof o : offsetof(rlp_rollout_worker_options, multiturn));
        o.version = RLP_ROLLOUT_WORKER_OPTIONS_VERSION;
    }
    RLPI_CHECK_ARG(o.prompts_per_batch >= 1, "opts->prompts_per_batch must be ≥ 1");
    RLPI_CHECK_ARG(!buffer != !(o.outbox_dir && *o.outbox_dir),
                   "give a buffer, or opts->outbox_dir (a worker in another process than the trainer), not both");
    RLPI_CHECK_ARG(o.sampling.version == RLP_SAMPLING_OPTIONS_VERSION, "opts->sampling.version: unknown version");
    RLPI_CHECK_ARG(o.sampling.n >= 1, "opts->sampling.n (the group size) must be ≥ 1");
    rlp_rollout_worker *w = calloc(1, sizeof *w);
    if (!w)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    w->o = o;
    w->o.outbox_dir = NULL;
    if ((o.outbox_dir && !(w->outbox = strdup(o.outbox_dir))) ||
        rlpi_sampling_copy_make(&w->sampling_copy, &w->o.sampling)) {
        free(w->outbox);
        rlpi_sampling_copy_free(&w->sampling_copy);
        free(w);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    }
    w->task = task;
    w->reward = reward;
    w->sync = sync;
    w->buf = buffer;
    /* a model without a tokenizer: prompts are rendered as plain text and
     * encoded with the host's (token-level models such as llama2.c) */
    const rlp_tokenizer *own = rlp_rollout_engine_tokenizer(engine);
    w->ext_tok = o.tokenizer && o.tokenizer != own ? o.tokenizer : NULL;
    w->tok = w->ext_tok ? NULL : own;
    w->next_batch = w->next_push = o.first_batch;
    w->lanes[0].engine = engine;
    w->n_lanes = 1;
    w->lanes[0].id_tag = lane_tag(w);
    w->st.version = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->order_mu, NULL);
    pthread_mutex_init(&w->admit_mu, NULL);
    pthread_cond_init(&w->order_cv, NULL);
    *out = w;
    return RLP_OK;
}

/* Fails the worker once (the first failure's message is kept). */
static int fail(rlp_rollout_worker *w, int rc, const char *what)
{
    pthread_mutex_lock(&w->mu); /* lanes may fail at once */
    if (!atomic_load(&w->failed_rc)) {
        snprintf(w->err, sizeof w->err, "rollout: %s: %s", what, rlp_error_last());
        atomic_store(&w->failed_rc, rc ? rc : RLP_E_INTERNAL);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static void release_all(rlp_rollout_worker *w, size_t n, int accepted)
{
    for (size_t i = 0; i < n; i++)
        rlp_synchronizer_release(w->sync, accepted);
    if (!accepted) {
        pthread_mutex_lock(&w->mu);
        w->st.groups_released += n;
        pthread_mutex_unlock(&w->mu);
    }
}

static void add_seconds(rlp_rollout_worker *w, double *field, double since)
{
    pthread_mutex_lock(&w->mu);
    *field += rlpi_now_s() - since;
    pthread_mutex_unlock(&w->mu);
}

/* Tags every group of @p b (G groups of prompt order) with where it came
 * from; the provenance travels with the trajectories through the buffer
 * and its spill to the trainer. */
static int tag_provenance(rlp_rollout_worker *w, rlp_batch *b, const rlp_prompt_set *set, uint64_t seed, uint64_t j)
{
    size_t n = 0, G = w->o.prompts_per_batch;
    rlp_batch_size(&n, b);
    size_t per = n / G;
    int rc = RLP_OK;
    for (size_t g = 0; !rc && per && g < G; g++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        if (!(rc = rlp_batch_get(&t, b, g * per)) && !(rc = rlp_prompt_set_item(&it, set, g))) {
            rlp_provenance p = {.version = RLP_PROVENANCE_VERSION, .prompt_index = it.index, .epoch = it.epoch,
                                .position = it.position, .sampling_seed = seed, .batch = j};
            rc = rlp_batch_set_group_provenance(b, t.group_id, &p);
        }
    }
    return rc;
}

/* A worker in another process than its trainer: the batch goes into the
 * outbox as one file. Names begin with the wall-clock time, so that the
 * trainer's name order is about the order of production. */
static int write_outbox(rlp_rollout_worker *w, const rlp_batch *b, uint64_t j)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/%011lld%09ld-%016llx-%08llu.rlpb", w->outbox, (long long)now.tv_sec,
                       now.tv_nsec, (unsigned long long)w->outbox_nonce, (unsigned long long)j);
    if (len < 0 || (size_t)len >= sizeof path)
        return rlpi_error_set(RLP_E_INVALID_ARG, "outbox_dir: the path is too long");
    return rlp_batch_write_file(b, path);
}

/* Batch j of lane @p L: admit, draw, pull, generate, score, push. Lanes
 * take their batch numbers and prompts in one order (under admit_mu, after
 * admission, so every smaller j is admitted already) and push in that
 * order, so that a run with several lanes trains on the same batches in the
 * same steps as with one; only the generating overlaps. */
static int run_lane(rlp_rollout_worker *w, size_t L)
{
    if (atomic_load(&w->stopping))
        return rlpi_error_set(RLP_E_CLOSED, "the rollout worker was stopped");
    rlpi_rollout_lane *lane = &w->lanes[L];
    const size_t G = w->o.prompts_per_batch;
    /* the gate: one slot per group of the batch, one lane at a time (two
     * lanes sharing out the last free slots would each wait for the rest
     * for ever); then batch j, the prompts of step j + 1, in admission order */
    double t = rlpi_now_s();
    size_t admitted = 0;
    int rc = RLP_OK;
    atomic_fetch_add(&w->at_gate, 1);
    pthread_mutex_lock(&w->admit_mu);
    while (admitted < G && (rc = rlp_synchronizer_acquire(w->sync, RLP_WAIT_FOREVER)) == RLP_OK)
        admitted++;
    atomic_fetch_sub(&w->at_gate, 1);
    rlp_prompt_set *set = NULL;
    const uint64_t j = w->next_batch;
    if (admitted == G && (rc = rlp_task_next_batch(&set, w->task, G, w->tok)) == RLP_OK)
        w->next_batch = j + 1;
    pthread_mutex_unlock(&w->admit_mu);
    add_seconds(w, &w->st.idle_seconds, t);
    if (admitted < G) {
        release_all(w, admitted, 0);
        return rc == RLP_E_CLOSED ? rc : fail(w, rc, "staleness gate");
    }
    if (rc != RLP_OK) {
        release_all(w, G, 0);
        return fail(w, rc, "prompts");
    }
    uint64_t seed = rlpi_train_mix_seed(w->o.seed, j + 1);

    /* the weights, then generate. Batch j serves step j + 1, where the
     * trainer holds version j: anything older than j − η would be dropped,
     * so that much is required (a local engine loads the newest; remote
     * servers get the newest in the background and hold each request until
     * they have j − η: rlp_synchronizer_pull_at_least) */
    t = rlpi_now_s();
    uint32_t eta = rlpi_sync_max_staleness(w->sync);
    rc = rlp_synchronizer_pull_at_least(w->sync, lane->engine, j > eta ? j - eta : 0);
    if (rc == RLP_E_NETWORK && w->o.remote) {
        pthread_mutex_lock(&w->mu);
        rlpi_train_pull_warning(&w->pull_warnings, w->o.log_fn, w->o.log_payload, rc);
        pthread_mutex_unlock(&w->mu);
        rc = RLP_OK;
    } else if (rc) {
        fail(w, rc, "weights");
    }
    rlp_batch *b = NULL;
    rlp_sampling_options s = w->o.sampling;
    s.seed = w->o.remote ? seed >> 1 : seed; /* servers take a signed 64-bit seed */
    if (!rc && (rc = rlpi_train_generate(&b, lane->engine, set, 0, SIZE_MAX, &s,
                                         w->o.multiturn.env ? &w->o.multiturn : NULL, w->ext_tok,
                                         w->o.retries)) != RLP_OK &&
        !atomic_load(&w->stopping))
        fail(w, rc, "generate");
    if (!rc)
        tag_group_ids(lane->id_tag, b);
    uint64_t tokens = 0;
    size_t n = 0;
    if (!rc)
        rlp_batch_size(&n, b);
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        if (!rlp_batch_get(&tr, b, i))
            tokens += tr.n_completion_tokens;
    }
    pthread_mutex_lock(&w->mu);
    w->st.generate_seconds += rlpi_now_s() - t;
    w->st.tokens += tokens;
    pthread_mutex_unlock(&w->mu);

    /* the reward (see the header comment for why here) */
    if (!rc && !atomic_load(&w->stopping)) {
        t = rlpi_now_s();
        rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
        if ((rc = rlp_reward_fn_score(w->reward, b, &st)) != RLP_OK)
            fail(w, rc, "reward");
        pthread_mutex_lock(&w->mu);
        w->st.reward_seconds += rlpi_now_s() - t;
        w->st.reward_errors += st.errors;
        w->st.reward_timeouts += st.timeouts;
        w->st.reward_nonfinite += st.nonfinite;
        w->st.reward_crashed += st.crashed;
        pthread_mutex_unlock(&w->mu);
    }
    if (!rc && !atomic_load(&w->stopping) && (rc = tag_provenance(w, b, set, seed, j)) != RLP_OK)
        fail(w, rc, "provenance");
    rlp_prompt_set_free(set);

    /* push in batch order: wait for batch j − 1 to be pushed */
    t = rlpi_now_s();
    pthread_mutex_lock(&w->order_mu);
    while (w->next_push != j && !atomic_load(&w->stopping) && !atomic_load(&w->failed_rc))
        pthread_cond_wait(&w->order_cv, &w->order_mu);
    bool in_turn = w->next_push == j;
    pthread_mutex_unlock(&w->order_mu);
    /* stopping, or an earlier batch failed: the generate call may have been
     * aborted; nothing half-done or out of order is pushed */
    if (rc || !in_turn || atomic_load(&w->stopping)) {
        rlp_batch_free(b);
        release_all(w, G, 0);
        if (!rc && !in_turn && !atomic_load(&w->stopping))
            return atomic_load(&w->failed_rc);
        return rc ? rc : rlpi_error_set(RLP_E_CLOSED, "the rollout worker was stopped");
    }
    rc = w->outbox ? write_outbox(w, b, j) : rlp_replay_buffer_push(w->buf, b);
    rlp_batch_free(b);
    release_all(w, G, rc == RLP_OK);
    pthread_mutex_lock(&w->order_mu);
    if (rc == RLP_OK)
        w->next_push = j + 1;
    pthread_cond_broadcast(&w->order_cv);
    pthread_mutex_unlock(&w->order_mu);
    pthread_mutex_lock(&w->mu);
    w->st.idle_seconds += rlpi_now_s() - t;
    if (!rc) {
        w->st.batches++;
        w->st.groups_pushed += G;
    }
    pthread_mutex_unlock(&w->mu);
    if (rc)
        return rc == RLP_E_CLOSED ? rc : fail(w, rc, w->outbox ? "outbox" : "replay buffer");
    return RLP_OK;
}

int rlp_rollout_worker_run_once(rlp_rollout_worker *w)
{
    RLPI_CHECK_ARG(w, "worker is NULL");
    return run_lane(w, 0);
}

static void *lane_main(void *arg)
{
    struct lane_arg *a = arg;
    rlp_rollout_worker *w = a->w;
    while (!atomic_load(&w->stopping) && !atomic_load(&w->failed_rc) && run_lane(w, a->lane) == RLP_OK) {
    }
    /* a failed lane stops the others (they wait on order_cv or at the gate) */
    if (atomic_load(&w->failed_rc)) {
        pthread_mutex_lock(&w->order_mu);
        pthread_cond_broadcast(&w->order_cv);
        pthread_mutex_unlock(&w->order_mu);
    }
    atomic_fetch_sub(&w->running, 1);
    return NULL;
}

int rlp_rollout_worker_add_engine(rlp_rollout_worker *w, rlp_rollout_engine *engine)
{
    RLPI_CHECK_ARG(w && engine, "worker and engine are required");
    if (w->started)
        return rlpi_error_set(RLP_E_STATE, "%s: the worker's threads were started already", __func__);
    if (w->n_lanes >= RLPI_MAX_LANES)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: at most %d engines", __func__, RLPI_MAX_LANES);
    for (size_t i = 0; i < w->n_lanes; i++)
        if (w->lanes[i].engine == engine)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: this engine is the worker's already", __func__);
    const rlp_tokenizer *own = rlp_rollout_engine_tokenizer(engine);
    if (!w->ext_tok && own != w->tok)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the engine has another tokenizer than the worker's first engine",
                              __func__);
    w->lanes[w->n_lanes].engine = engine;
    w->lanes[w->n_lanes].id_tag = lane_tag(w);
    w->n_lanes++;
    return RLP_OK;
}

int rlp_rollout_worker_start(rlp_rollout_worker *w)
{
    RLPI_CHECK_ARG(w, "worker is NULL");
    if (w->started)
        return rlpi_error_set(RLP_E_STATE, "%s: the worker's thread was started already", __func__);
    atomic_store(&w->running, (int)w->n_lanes);
    for (size_t i = 0; i < w->n_lanes; i++) {
        w->lane_args[i] = (struct lane_arg){w, i};
        int e = pthread_create(&w->lanes[i].th, NULL, lane_main, &w->lane_args[i]);
        if (e) {
            /* the ones started stop again */
            atomic_fetch_sub(&w->running, (int)(w->n_lanes - i));
            w->started = (int)i;
            rlp_rollout_worker_stop(w);
            return rlpi_error_set(RLP_E_NOMEM, "%s: cannot start a rollout thread: %s", __func__, strerror(e));
        }
    }
    w->started = (int)w->n_lanes;
    return RLP_OK;
}

int rlp_rollout_worker_stop(rlp_rollout_worker *w)
{
    RLPI_CHECK_ARG(w, "worker is NULL");
    atomic_store(&w->stopping, 1);
    if (!w->started)
        return RLP_OK;
    /* close the gate and the buffer (a waiting acquire or push returns),
     * wake the lanes waiting for their turn to push, abort the generate
     * calls in flight (again until the threads are out: an abort before
     * the call starts is reset by it) */
    rlp_synchronizer_close(w->sync);
    if (w->buf)
        rlp_replay_buffer_close(w->buf);
    while (atomic_load(&w->running) > 0) {
        pthread_mutex_lock(&w->order_mu);
        pthread_cond_broadcast(&w->order_cv);
        pthread_mutex_unlock(&w->order_mu);
        for (size_t i = 0; i < w->n_lanes; i++)
            rlp_rollout_engine_abort(w->lanes[i].engine);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < w->started; i++)
        pthread_join(w->lanes[i].th, NULL);
    w->started = 0;
    return RLP_OK;
}

int rlp_rollout_worker_error(const rlp_rollout_worker *w, const char **message)
{
    RLPI_CHECK_ARG(w, "worker is NULL");
    int rc = atomic_load(&((rlp_rollout_worker *)w)->failed_rc);
    if (message)
        *message = rc ? w->err : "";
    return rc;
}

int rlp_rollout_worker_stats_get(rlp_rollout_worker_stats *out, const rlp_rollout_worker *w)
{
    RLPI_CHECK_ARG(out && w, "out and worker are required");
    rlp_rollout_worker *mw = (rlp_rollout_worker *)w;
    pthread_mutex_lock(&mw->mu);
    *out = w->st;
    pthread_mutex_unlock(&mw->mu);
    /* at the gate: every lane that runs waits there (one that generates
     * will push, so the run is not stalled) */
    int running = atomic_load(&mw->running), at_gate = atomic_load(&mw->at_gate);
    out->at_gate = at_gate > 0 && at_gate >= (running > 0 ? running : 1);
    out->running = running > 0;
    return RLP_OK;
}

void rlp_rollout_worker_free(rlp_rollout_worker *w)
{
    if (!w)
        return;
    rlp_rollout_worker_stop(w);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->order_mu);
    pthread_mutex_destroy(&w->admit_mu);
    pthread_cond_destroy(&w->order_cv);
    rlpi_sampling_copy_free(&w->sampling_copy);
    free(w->outbox);
    free(w);
}
