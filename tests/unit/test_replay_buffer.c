/* The replay buffer: groups formed by group_id and kept whole, FIFO order,
 * staleness drops counted and never returned, capacity back-pressure in
 * both policies, timeouts, close; the durable spill restores every field
 * of every unconsumed group, cuts a torn or corrupt last record with a
 * warning, refuses corruption in the middle, compacts, and locks; η comes
 * from an attached synchronizer; and the concurrency test: P = 4
 * producers and C = 3 consumers move 10^5 groups
 * with none lost or duplicated, every pulled group within the staleness
 * bound, and exact drop counts. (The kill -9 test is test_buffer_crash.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "buffer/spill.h"
#include "core/crc32.h"
#include "core/error.h"
#include "rlpost.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static char tmpdir[256];

static void path_in_tmp(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* A small scored trajectory whose contents are a function of gid and j. */
static void append_traj(rlp_batch *b, uint64_t gid, uint32_t j, uint64_t version)
{
    int32_t prompt[3] = {1, 2, (int32_t)(gid % 50)};
    int32_t comp[2] = {(int32_t)(gid % 60), (int32_t)j};
    float lp[2] = {-0.5f, -1.0f - (float)j};
    char text[32];
    snprintf(text, sizeof text, "c%llu.%u", (unsigned long long)gid, j);
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    t.group_id = gid;
    t.prompt_tokens = prompt;
    t.n_prompt_tokens = 3;
    t.completion_tokens = comp;
    t.logprobs = lp;
    t.n_completion_tokens = 2;
    t.completion_text = text;
    t.policy_version = version;
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.temperature = 1.0f;
    t.reward = (float)(gid % 7);
    t.valid = 1;
    t.sample_index = j;
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
}

static rlp_batch *batch_of(const uint64_t *gids, size_t n, uint32_t per_group, uint64_t version)
{
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < per_group; j++)
            append_traj(b, gids[i], j, version);
    return b;
}

static size_t batch_n(const rlp_batch *b)
{
    size_t n;
    assert_int_equal(rlp_batch_size(&n, b), RLP_OK);
    return n;
}

static rlp_trajectory traj_at(const rlp_batch *b, size_t i)
{
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    return t;
}

static void push_groups(rlp_replay_buffer *buf, const uint64_t *gids, size_t n, uint64_t version)
{
    rlp_batch *b = batch_of(gids, n, 2, version);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    assert_int_equal(batch_n(b), 0);
    rlp_batch_free(b);
}

static rlp_buffer_stats stats_of(const rlp_replay_buffer *buf)
{
    rlp_buffer_stats s;
    assert_int_equal(rlp_replay_buffer_stats(&s, buf), RLP_OK);
    return s;
}

typedef struct log_capture {
    pthread_mutex_t mu;
    int n_warn;
    char last[512];
} log_capture;

static void capture_log(int level, const char *msg, void *payload)
{
    log_capture *c = payload;
    pthread_mutex_lock(&c->mu);
    if (level >= RLP_LOG_WARN)
        c->n_warn++;
    snprintf(c->last, sizeof c->last, "%s", msg);
    pthread_mutex_unlock(&c->mu);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* ---- in-memory behaviour ------------------------------------------------------ */

/* Interleaved trajectories of three groups become three whole groups in
 * order of first appearance; pulls return them FIFO, each contiguous. */
static void test_groups_whole_and_fifo(void **state)
{
    (void)state;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, NULL), RLP_OK);
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    append_traj(b, 30, 0, 5);
    append_traj(b, 10, 0, 5);
    append_traj(b, 30, 1, 5);
    append_traj(b, 20, 0, 5);
    append_traj(b, 10, 1, 5);
    append_traj(b, 30, 2, 5);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    rlp_batch_free(b);
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.size, 3);
    assert_int_equal(s.trajectories, 6);
    assert_int_equal(s.accepted, 3);

    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 2, 5, 0), RLP_OK);
    assert_int_equal(batch_n(out), 5); /* group 30 (3) then group 10 (2) */
    uint64_t want_gid[5] = {30, 30, 30, 10, 10};
    uint32_t want_j[5] = {0, 1, 2, 0, 1};
    for (size_t i = 0; i < 5; i++) {
        rlp_trajectory t = traj_at(out, i);
        assert_int_equal(t.group_id, want_gid[i]);
        assert_int_equal(t.sample_index, want_j[i]);
        char text[32];
        snprintf(text, sizeof text, "c%llu.%u", (unsigned long long)want_gid[i], want_j[i]);
        assert_string_equal(t.completion_text, text);
    }
    rlp_batch_free(out);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 5, 0), RLP_OK);
    assert_int_equal(batch_n(out), 1);
    assert_int_equal(traj_at(out, 0).group_id, 20);
    rlp_batch_free(out);
    s = stats_of(buf);
    assert_int_equal(s.size, 0);
    assert_int_equal(s.consumed, 3);
    assert_int_equal(s.staleness_hist[0], 3);
    /* empty: AGAIN without waiting, TIMEOUT after waiting */
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 5, 0), RLP_E_AGAIN);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 5, 30), RLP_E_TIMEOUT);
    rlp_replay_buffer_free(buf);
}

/* η = 1: at v = 4 groups of version 3 and 4 (and a future 6) are served,
 * 0..2 dropped and counted; token versions decide a group's version. */
static void test_staleness_drop(void **state)
{
    (void)state;
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.max_staleness = 1;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    for (uint64_t v = 0; v <= 4; v++)
        push_groups(buf, &v, 1, v); /* gid = version */
    uint64_t six = 6;
    push_groups(buf, &six, 1, 6);
    /* a group started at version 4 whose first token came from version 2:
     * its version is 2 (the oldest weights in it), so it is stale at 4 */
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    int32_t p[1] = {1}, c[2] = {3, 4};
    float lp[2] = {-1, -1};
    uint64_t tv[2] = {2, 4};
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = 99, .prompt_tokens = p,
                        .n_prompt_tokens = 1, .completion_tokens = c, .n_completion_tokens = 2,
                        .logprobs = lp, .token_versions = tv, .policy_version = 4,
                        .finish_reason = RLP_FINISH_STOP, .temperature = 1, .reward = 1, .valid = 1};
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    rlp_batch_free(b);

    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 3, 4, 0), RLP_OK);
    assert_int_equal(batch_n(out), 6);
    assert_int_equal(traj_at(out, 0).group_id, 3);
    assert_int_equal(traj_at(out, 2).group_id, 4);
    assert_int_equal(traj_at(out, 4).group_id, 6);
    rlp_batch_free(out);
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.dropped_stale, 4); /* versions 0, 1, 2 and group 99 */
    assert_int_equal(s.size, 0);
    assert_int_equal(s.staleness_hist[0], 2); /* 4 at v 4, and 6 (newer: 0) */
    assert_int_equal(s.staleness_hist[1], 1);
    assert_int_equal(s.max_staleness_seen, 1);
    /* unbounded staleness never drops */
    rlp_replay_buffer_free(buf);
    o.max_staleness = RLP_STALENESS_UNBOUNDED;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    uint64_t z = 0;
    push_groups(buf, &z, 1, 0);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 1000000, 0), RLP_OK);
    rlp_batch_free(out);
    s = stats_of(buf);
    assert_int_equal(s.staleness_hist[RLP_BUFFER_STALENESS_BINS - 1], 1);
    assert_int_equal(s.max_staleness_seen, 1000000);
    rlp_replay_buffer_free(buf);
}

/* Attached to a synchronizer, the buffer takes η from it (one bound for
 * the gate and the buffer); a different η of its own is refused naming
 * both; a version-1 options struct (before sync) still works. */
static void test_staleness_from_synchronizer(void **state)
{
    (void)state;
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.max_staleness = 3;
    rlp_synchronizer *sync;
    assert_int_equal(rlp_synchronizer_create(&sync, &so), RLP_OK);
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    assert_int_equal(o.max_staleness, 1);
    assert_null(o.sync);
    o.sync = sync; /* max_staleness left at its default: the synchronizer's 3 applies */
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    for (uint64_t v = 0; v <= 2; v++)
        push_groups(buf, &v, 1, v); /* gid = version */
    rlp_batch *out;
    /* at version 4: version 0 is 4 > η = 3 steps old (dropped), 1 and 2 are kept (η = 1 would drop 1 and 2) */
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 2, 4, 0), RLP_OK);
    assert_int_equal(traj_at(out, 0).group_id, 1);
    assert_int_equal(traj_at(out, 2).group_id, 2);
    rlp_batch_free(out);
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.dropped_stale, 1);
    assert_int_equal(s.max_staleness_seen, 3);
    rlp_replay_buffer_free(buf);

    /* the same η given twice is fine; a different one is refused, naming both */
    o.max_staleness = 3;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    rlp_replay_buffer_free(buf);
    o.max_staleness = 2;
    buf = NULL;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_E_INVALID_ARG);
    assert_null(buf);
    assert_non_null(strstr(rlp_error_last(), "max_staleness is 2"));
    assert_non_null(strstr(rlp_error_last(), "is 3"));

    /* a caller built against version 1: its struct ends at log_payload, and
     * whatever follows it in memory is not read as sync */
    rlp_buffer_options v1;
    memset(&v1, 0xA5, sizeof v1);
    assert_int_equal(rlp_buffer_options_init(&v1, 1), RLP_OK);
    assert_int_equal(v1.version, 1);
    assert_int_equal(v1.max_staleness, 1);
    unsigned char tail[sizeof v1.sync];
    memcpy(tail, &v1.sync, sizeof tail);
    for (size_t i = 0; i < sizeof tail; i++)
        assert_int_equal(tail[i], 0xA5); /* init wrote only version 1's fields */
    v1.max_staleness = 2;                /* used as is: the bytes where sync would be are not read */
    assert_int_equal(rlp_replay_buffer_create(&buf, &v1), RLP_OK);
    uint64_t g = 0;
    push_groups(buf, &g, 1, 0);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 3, 0), RLP_E_AGAIN); /* η = 2 of its own */
    rlp_replay_buffer_free(buf);
    rlp_synchronizer_free(sync);
}

typedef struct pusher_arg {
    rlp_replay_buffer *buf;
    uint64_t gid;
    int rc;
} pusher_arg;

static void *pusher(void *p)
{
    pusher_arg *a = p;
    rlp_batch *b = batch_of(&a->gid, 1, 1, 0);
    a->rc = rlp_replay_buffer_push(a->buf, b);
    rlp_batch_free(b);
    return NULL;
}

static void *puller(void *p)
{
    pusher_arg *a = p;
    rlp_batch *out = NULL;
    a->rc = rlp_replay_buffer_pull(&out, a->buf, 1, 0, RLP_WAIT_FOREVER);
    rlp_batch_free(out);
    return NULL;
}

static void test_capacity_and_close(void **state)
{
    (void)state;
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.capacity = 2;
    o.full_policy = RLP_BUFFER_FULL_FAIL;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    uint64_t g[3] = {1, 2, 3};
    push_groups(buf, g, 2, 0);
    rlp_batch *b = batch_of(&g[2], 1, 2, 0);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_E_AGAIN);
    assert_int_equal(batch_n(b), 2); /* unchanged on failure */
    rlp_batch_free(b);
    b = batch_of(g, 3, 1, 0);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_E_INVALID_ARG); /* 3 > capacity */
    rlp_batch_free(b);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 3, 0, 0), RLP_E_INVALID_ARG);
    assert_int_equal(stats_of(buf).rejected, 1);
    rlp_replay_buffer_free(buf);

    /* BLOCK with a timeout: TIMEOUT; a pull makes room for a blocked push */
    o.full_policy = RLP_BUFFER_FULL_BLOCK;
    o.push_timeout_ms = 40;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    push_groups(buf, g, 2, 0);
    b = batch_of(&g[2], 1, 1, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_E_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 39);
    rlp_batch_free(b);
    rlp_replay_buffer_free(buf);

    o.push_timeout_ms = RLP_WAIT_FOREVER;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    push_groups(buf, g, 2, 0);
    pusher_arg pa = {buf, 3, 99};
    pthread_t th;
    pthread_create(&th, NULL, pusher, &pa);
    usleep(20000);
    assert_int_equal(stats_of(buf).size, 2);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 0, 0), RLP_OK);
    rlp_batch_free(out);
    pthread_join(th, NULL);
    assert_int_equal(pa.rc, RLP_OK);
    assert_int_equal(stats_of(buf).size, 2);

    /* close wakes a push blocked on a full buffer; pulls still drain */
    pusher_arg pb = {buf, 4, 99};
    pthread_create(&th, NULL, pusher, &pb);
    usleep(20000);
    assert_int_equal(rlp_replay_buffer_close(buf), RLP_OK);
    pthread_join(th, NULL);
    assert_int_equal(pb.rc, RLP_E_CLOSED);
    b = batch_of(g, 1, 1, 0);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_E_CLOSED);
    rlp_batch_free(b);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 2, 0, 0), RLP_OK);
    rlp_batch_free(out);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 0, RLP_WAIT_FOREVER), RLP_E_CLOSED);
    assert_int_equal(rlp_replay_buffer_close(buf), RLP_OK); /* idempotent */
    rlp_replay_buffer_free(buf);

    /* close wakes a pull blocked on an empty buffer */
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    pusher_arg pc = {buf, 0, 99};
    pthread_create(&th, NULL, puller, &pc);
    usleep(20000);
    assert_int_equal(rlp_replay_buffer_close(buf), RLP_OK);
    pthread_join(th, NULL);
    assert_int_equal(pc.rc, RLP_E_CLOSED);
    rlp_replay_buffer_free(buf);
}

static void test_bad_input(void **state)
{
    (void)state;
    rlp_replay_buffer *buf;
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.full_policy = 7;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_E_INVALID_ARG);
    o = (rlp_buffer_options)RLP_BUFFER_OPTIONS_INIT;
    o.version = 99;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_buffer_options_init(&o, RLP_BUFFER_OPTIONS_VERSION), RLP_OK);
    assert_int_equal(o.max_staleness, 1);
    assert_int_equal(rlp_replay_buffer_create(&buf, NULL), RLP_OK);
    /* an unscored valid trajectory: refused, the batch unchanged */
    uint64_t g = 5;
    rlp_batch *b = batch_of(&g, 1, 2, 0);
    rlp_batch *extra;
    assert_int_equal(rlp_batch_create(&extra), RLP_OK);
    int32_t p[1] = {1};
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = 6, .prompt_tokens = p,
                        .n_prompt_tokens = 1, .reward = NAN, .valid = 1, .temperature = 1};
    assert_int_equal(rlp_batch_append(extra, &t), RLP_OK);
    assert_int_equal(rlp_batch_extend(b, extra), RLP_OK);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "trajectory 2 (group 6)"));
    assert_int_equal(batch_n(b), 3);
    /* an invalid one may go unscored */
    assert_int_equal(rlp_batch_set_invalid(b, 2, "reward timed out"), RLP_OK);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    rlp_batch_free(b);
    rlp_batch_free(extra);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(NULL, buf, 1, 0, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 0, 0, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_replay_buffer_push(buf, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_replay_buffer_stats(NULL, buf), RLP_E_INVALID_ARG);
    rlp_replay_buffer_free(buf);
    rlp_replay_buffer_free(NULL);
}

/* ---- spill ------------------------------------------------------------------ */

/* A trajectory with every optional field set, to check the round trip. */
static void append_rich(rlp_batch *b, uint64_t gid, uint32_t j)
{
    int32_t prompt[4] = {7, 8, 9, (int32_t)j};
    int32_t comp[3] = {11, 12, (int32_t)gid};
    float lp[3] = {-0.25f, -3.5f, -1e-7f};
    uint64_t tv[3] = {40, 41, 41};
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    t.group_id = gid;
    t.prompt_tokens = prompt;
    t.n_prompt_tokens = 4;
    t.completion_tokens = comp;
    t.logprobs = lp;
    t.token_versions = tv;
    t.n_completion_tokens = 3;
    t.prompt_text = "Q: 2+2?";
    t.completion_text = "A: 4 \xe2\x9c\x93";
    t.policy_version = 40;
    t.finish_reason = RLP_FINISH_LENGTH;
    t.stop_index = 2;
    t.temperature = 0.7f;
    t.reward = 0.5f + (float)j;
    t.valid = j != 1;
    t.error = j == 1 ? "verifier crashed" : NULL;
    t.metadata_json = "{\"reference\":\"4\"}";
    t.sample_index = j;
    if (gid % 2 == 0) { /* even groups say where they came from; odd ones do not */
        t.has_provenance = 1;
        t.provenance = (rlp_provenance){.version = RLP_PROVENANCE_VERSION,
                                        .prompt_index = 1000 + gid,
                                        .epoch = gid << 40,
                                        .position = 3 * gid + j,
                                        .sampling_seed = UINT64_MAX - gid,
                                        .batch = 7 + gid};
    }
    /* multi-turn samples (j = 2): a loss mask (the middle token an
     * observation) and the episode's record */
    static const uint8_t mask[3] = {1, 0, 1};
    if (j == 2) {
        t.loss_mask = mask;
        t.has_episode = 1;
        t.episode = (rlp_episode_stats){.version = RLP_EPISODE_STATS_VERSION,
                                        .turns = 2,
                                        .tool_calls = 1 + (uint32_t)gid,
                                        .tool_errors = 1,
                                        .tool_timeouts = (uint32_t)gid % 2,
                                        .observation_tokens = 1,
                                        .observations_cut = 3,
                                        .end = gid % 2 ? RLP_EPISODE_MAX_TURNS : RLP_EPISODE_DONE,
                                        .tool_seconds = 0.125 * (double)gid};
    }
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    if (j == 0) {
        size_t n = batch_n(b);
        float tr[3] = {0.1f, -0.2f, 1.0f};
        assert_int_equal(rlp_batch_set_token_rewards(b, n - 1, tr, 3), RLP_OK);
    }
}

static void assert_same_traj(const rlp_trajectory *a, const rlp_trajectory *b)
{
    assert_int_equal(a->group_id, b->group_id);
    assert_int_equal(a->n_prompt_tokens, b->n_prompt_tokens);
    assert_memory_equal(a->prompt_tokens, b->prompt_tokens, a->n_prompt_tokens * 4);
    assert_int_equal(a->n_completion_tokens, b->n_completion_tokens);
    assert_memory_equal(a->completion_tokens, b->completion_tokens, a->n_completion_tokens * 4);
    assert_memory_equal(a->logprobs, b->logprobs, a->n_completion_tokens * 4);
    assert_memory_equal(a->token_versions, b->token_versions, a->n_completion_tokens * 8);
    assert_true((a->prompt_text == NULL) == (b->prompt_text == NULL));
    if (a->prompt_text)
        assert_string_equal(a->prompt_text, b->prompt_text);
    assert_string_equal(a->completion_text, b->completion_text);
    assert_int_equal(a->policy_version, b->policy_version);
    assert_int_equal(a->finish_reason, b->finish_reason);
    assert_int_equal(a->stop_index, b->stop_index);
    assert_true(a->temperature == b->temperature);
    assert_true(a->reward == b->reward || (isnan(a->reward) && isnan(b->reward)));
    assert_int_equal(a->valid, b->valid);
    assert_true((a->error == NULL) == (b->error == NULL));
    if (a->error)
        assert_string_equal(a->error, b->error);
    assert_true((a->metadata_json == NULL) == (b->metadata_json == NULL));
    if (a->metadata_json)
        assert_string_equal(a->metadata_json, b->metadata_json);
    assert_int_equal(a->sample_index, b->sample_index);
    assert_true((a->token_rewards == NULL) == (b->token_rewards == NULL));
    if (a->token_rewards)
        assert_memory_equal(a->token_rewards, b->token_rewards, a->n_completion_tokens * 4);
    assert_int_equal(a->has_provenance, b->has_provenance);
    assert_int_equal(a->provenance.version, b->provenance.version);
    assert_int_equal(a->provenance.prompt_index, b->provenance.prompt_index);
    assert_int_equal(a->provenance.epoch, b->provenance.epoch);
    assert_int_equal(a->provenance.position, b->provenance.position);
    assert_int_equal(a->provenance.sampling_seed, b->provenance.sampling_seed);
    assert_int_equal(a->provenance.batch, b->provenance.batch);
    assert_true((a->loss_mask == NULL) == (b->loss_mask == NULL));
    if (a->loss_mask)
        assert_memory_equal(a->loss_mask, b->loss_mask, a->n_completion_tokens);
    assert_int_equal(a->has_episode, b->has_episode);
    assert_int_equal(a->episode.version, b->episode.version);
    assert_int_equal(a->episode.turns, b->episode.turns);
    assert_int_equal(a->episode.tool_calls, b->episode.tool_calls);
    assert_int_equal(a->episode.tool_errors, b->episode.tool_errors);
    assert_int_equal(a->episode.tool_timeouts, b->episode.tool_timeouts);
    assert_int_equal(a->episode.observation_tokens, b->episode.observation_tokens);
    assert_int_equal(a->episode.observations_cut, b->episode.observations_cut);
    assert_int_equal(a->episode.end, b->episode.end);
    assert_true(a->episode.tool_seconds == b->episode.tool_seconds);
}

static rlp_replay_buffer *open_spill(const char *path, log_capture *cap, uint64_t compact)
{
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = path;
    o.max_staleness = RLP_STALENESS_UNBOUNDED;
    o.compact_bytes = compact;
    o.log_fn = cap ? capture_log : NULL;
    o.log_payload = cap;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    return buf;
}

static void test_spill_round_trip(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "roundtrip.spill");
    unlink(path);
    rlp_replay_buffer *buf = open_spill(path, NULL, 0);
    rlp_batch *orig;
    assert_int_equal(rlp_batch_create(&orig), RLP_OK);
    for (uint64_t g = 1; g <= 4; g++)
        for (uint32_t j = 0; j < 3; j++)
            append_rich(orig, g, j);
    /* keep a copy to compare with: push empties its batch */
    rlp_batch *copy;
    assert_int_equal(rlp_batch_create(&copy), RLP_OK);
    for (size_t i = 0; i < batch_n(orig); i++) {
        rlp_trajectory t = traj_at(orig, i);
        assert_int_equal(rlp_batch_append(copy, &t), RLP_OK);
    }
    assert_int_equal(rlp_replay_buffer_push(buf, copy), RLP_OK);
    rlp_batch_free(copy);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 41, 0), RLP_OK); /* consumes group 1 */
    rlp_batch_free(out);
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.spill_records, 2);
    assert_int_equal(s.spill_bytes, (uint64_t)file_size(path));
    rlp_replay_buffer_free(buf);

    /* another buffer on the same file restores groups 2..4 exactly */
    buf = open_spill(path, NULL, 0);
    s = stats_of(buf);
    assert_int_equal(s.restored, 3);
    assert_int_equal(s.size, 3);
    assert_int_equal(s.torn_bytes, 0);
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 3, 41, 0), RLP_OK);
    assert_int_equal(batch_n(out), 9);
    for (size_t i = 0; i < 9; i++) {
        rlp_trajectory a = traj_at(orig, 3 + i), b = traj_at(out, i);
        assert_same_traj(&a, &b);
        /* groups 2 and 4 came with provenance, group 3 without */
        assert_int_equal(b.has_provenance, b.group_id % 2 == 0);
        if (b.has_provenance)
            assert_int_equal(b.provenance.sampling_seed, UINT64_MAX - b.group_id);
        /* the third sample of each group is a multi-turn one */
        assert_int_equal(b.has_episode, b.sample_index == 2);
        assert_true((b.loss_mask != NULL) == (b.sample_index == 2));
        if (b.has_episode) {
            assert_int_equal(b.loss_mask[1], 0);
            assert_int_equal(b.episode.tool_calls, 1 + b.group_id);
            assert_true(b.episode.tool_seconds == 0.125 * (double)b.group_id);
        }
    }
    rlp_batch_free(out);
    rlp_replay_buffer_free(buf);
    buf = open_spill(path, NULL, 0);
    assert_int_equal(stats_of(buf).size, 0);
    rlp_replay_buffer_free(buf);
    rlp_batch_free(orig);
    unlink(path);
}

/* A batch file (rlp_batch_write_file, the spill's format) keeps every
 * field of multi-turn samples: loss mask and episode record, next to
 * provenance and token rewards; the file is of the current format. */
static void test_batch_file_multiturn(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "multiturn.rlpb");
    unlink(path);
    rlp_batch *orig, *back = NULL;
    assert_int_equal(rlp_batch_create(&orig), RLP_OK);
    for (uint64_t g = 1; g <= 2; g++)
        for (uint32_t j = 0; j < 3; j++)
            append_rich(orig, g, j);
    assert_int_equal(rlp_batch_write_file(orig, path), RLP_OK);
    assert_int_equal(rlp_batch_read_file(&back, path), RLP_OK);
    assert_int_equal(batch_n(back), 6);
    size_t episodes = 0;
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory a = traj_at(orig, i), b = traj_at(back, i);
        assert_same_traj(&a, &b);
        episodes += b.has_episode != 0;
    }
    assert_int_equal(episodes, 2);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t head[RLPI_SPILL_HEADER_BYTES];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    assert_int_equal(head[8], 3);
    /* a version-2 caller reading it back gets its fields only */
    struct {
        rlp_trajectory t;
        uint8_t guard[64];
    } v2;
    memset(&v2, 0xAB, sizeof v2);
    v2.t.version = 2;
    assert_int_equal(rlp_batch_get(&v2.t, back, 2), RLP_OK);
    const uint8_t *tail = (const uint8_t *)&v2.t + offsetof(rlp_trajectory, loss_mask);
    for (size_t k = 0; k < sizeof v2.t - offsetof(rlp_trajectory, loss_mask); k++)
        assert_int_equal(tail[k], 0xAB);
    assert_int_equal(v2.t.n_completion_tokens, 3);
    rlp_batch_free(back);
    rlp_batch_free(orig);
    unlink(path);
}

static void append_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

/* Provenance set on a batch is data of its trajectories: a push and a pull
 * (no spill) hand it back with each group, and a group without any stays
 * without. */
static void test_provenance_push_pull(void **state)
{
    (void)state;
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.max_staleness = RLP_STALENESS_UNBOUNDED;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    const uint64_t gids[3] = {5, 6, 7};
    rlp_batch *b = batch_of(gids, 3, 2, 1);
    for (uint64_t g = 5; g <= 7; g += 2) {
        rlp_provenance p = {.version = RLP_PROVENANCE_VERSION,
                            .prompt_index = 100 + g,
                            .epoch = 2,
                            .position = g,
                            .sampling_seed = 0xABCDEF0123456789ull ^ g,
                            .batch = 41};
        assert_int_equal(rlp_batch_set_group_provenance(b, g, &p), RLP_OK);
    }
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    rlp_batch_free(b);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 3, 1, 0), RLP_OK);
    assert_int_equal(batch_n(out), 6);
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory t = traj_at(out, i);
        assert_int_equal(t.group_id, gids[i / 2]);
        if (t.group_id == 6) {
            assert_int_equal(t.has_provenance, 0);
            continue;
        }
        assert_int_equal(t.has_provenance, 1);
        assert_int_equal(t.provenance.version, RLP_PROVENANCE_VERSION);
        assert_int_equal(t.provenance.prompt_index, 100 + t.group_id);
        assert_int_equal(t.provenance.epoch, 2);
        assert_int_equal(t.provenance.position, t.group_id);
        assert_int_equal(t.provenance.sampling_seed, 0xABCDEF0123456789ull ^ t.group_id);
        assert_int_equal(t.provenance.batch, 41);
    }
    rlp_batch_free(out);
    rlp_replay_buffer_free(buf);
}

/* A spill file of format 1 (before provenance; the same records without
 * its flag), written by the encoder under a format-1 header with a torn
 * tail: a buffer restores its group, rewrites the file in the current format (so a
 * record with provenance appended later matches its header) and cuts the
 * tail; the next buffer restores both groups, the second with provenance. */
static void test_spill_format1_upgraded(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "format1.spill");
    unlink(path);
    int32_t tok[2] = {3, 4};
    float lp[2] = {-1, -0.5f};
    uint64_t ver[2] = {2, 2};
    rlpi_traj t;
    memset(&t, 0, sizeof t);
    t.group_id = 55;
    t.tokens = tok;
    t.logprobs = lp;
    t.versions = ver;
    t.n_tokens = 2;
    t.policy_version = 2;
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.valid = 1;
    t.reward = 0.25f;
    t.temperature = 1;
    t.text = "old";
    rlpi_group g = {.seq = 3, .trajs = &t, .n = 1};
    rlpi_group *gp = &g;
    rlpi_bytes img = {0};
    uint8_t head[RLPI_SPILL_HEADER_BYTES] = {'R', 'L', 'P', 'S', 'P', 'I', 'L', 'L', 1, 0, 0, 0};
    uint32_t crc = rlpi_crc32(0, head, 12);
    for (int i = 0; i < 4; i++)
        head[12 + i] = (uint8_t)(crc >> (8 * i));
    assert_int_equal(rlpi_spill_encode_push(&img, &gp, 1), RLP_OK);
    append_bytes(path, head, sizeof head);
    append_bytes(path, img.p, img.len);
    append_bytes(path, img.p, 10); /* a torn record header */
    long v1_bytes = (long)(sizeof head + img.len);
    rlpi_bytes_free(&img);

    log_capture cap = {.mu = PTHREAD_MUTEX_INITIALIZER};
    rlp_replay_buffer *buf = open_spill(path, &cap, 0);
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.restored, 1);
    assert_int_equal(s.torn_bytes, 10);
    assert_int_equal(cap.n_warn, 1); /* the torn tail */
    assert_int_equal(file_size(path), v1_bytes);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t now[RLPI_SPILL_HEADER_BYTES];
    assert_int_equal(fread(now, 1, sizeof now, f), sizeof now);
    fclose(f);
    assert_int_equal(now[8], 3); /* the current format now */
    assert_int_equal(rlpi_crc32(0, now, 12),
                     (uint32_t)now[12] | (uint32_t)now[13] << 8 | (uint32_t)now[14] << 16 | (uint32_t)now[15] << 24);
    const uint64_t gid = 56;
    rlp_batch *b = batch_of(&gid, 1, 2, 3);
    rlp_provenance p = {.version = RLP_PROVENANCE_VERSION,
                        .prompt_index = 9,
                        .epoch = 1,
                        .position = 4,
                        .sampling_seed = 77,
                        .batch = 2};
    assert_int_equal(rlp_batch_set_group_provenance(b, gid, &p), RLP_OK);
    assert_int_equal(rlp_replay_buffer_push(buf, b), RLP_OK);
    rlp_batch_free(b);
    rlp_replay_buffer_free(buf);

    buf = open_spill(path, NULL, 0);
    s = stats_of(buf);
    assert_int_equal(s.restored, 2);
    assert_int_equal(s.torn_bytes, 0);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 2, 3, 0), RLP_OK);
    assert_int_equal(batch_n(out), 3);
    rlp_trajectory a = traj_at(out, 0), c = traj_at(out, 2);
    assert_int_equal(a.group_id, 55);
    assert_string_equal(a.completion_text, "old");
    assert_int_equal(a.has_provenance, 0);
    assert_int_equal(c.group_id, 56);
    assert_int_equal(c.has_provenance, 1);
    assert_int_equal(c.provenance.prompt_index, 9);
    assert_int_equal(c.provenance.position, 4);
    assert_int_equal(c.provenance.sampling_seed, 77);
    assert_int_equal(c.provenance.batch, 2);
    rlp_batch_free(out);
    rlp_replay_buffer_free(buf);
    unlink(path);
}

/* Two groups pushed; the file then damaged in ways a crash can and cannot
 * produce. */
static void test_spill_torn_and_corrupt(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "torn.spill");
    log_capture cap = {.mu = PTHREAD_MUTEX_INITIALIZER};
    long sizes[3];
    for (int round = 0; round < 5; round++) {
        unlink(path);
        rlp_replay_buffer *buf = open_spill(path, &cap, 0);
        sizes[0] = file_size(path);
        uint64_t g1 = 1, g2 = 2;
        push_groups(buf, &g1, 1, 0);
        sizes[1] = file_size(path);
        push_groups(buf, &g2, 1, 0);
        sizes[2] = file_size(path);
        rlp_replay_buffer_free(buf);
        int warn0 = cap.n_warn;
        int expect_groups = 2, expect_rc = RLP_OK;
        switch (round) {
        case 0: { /* a partial record header after the last record */
            uint8_t junk[10] = {'R', 'L', 'P', 'R', 1, 0, 0, 0, 9, 9};
            append_bytes(path, junk, sizeof junk);
            break;
        }
        case 1: /* the last record cut short: the second push never returned */
            assert_int_equal(truncate(path, sizes[2] - 7), 0);
            expect_groups = 1;
            break;
        case 2: /* the last record's payload damaged */
            flip_byte(path, sizes[2] - 3);
            expect_groups = 1;
            break;
        case 3: { /* zero fill after the last record */
            uint8_t z[100] = {0};
            append_bytes(path, z, sizeof z);
            break;
        }
        case 4: /* the first record's payload damaged: not a crash, refuse */
            flip_byte(path, sizes[0] + RLPI_SPILL_RECORD_HEADER_BYTES + 10);
            expect_rc = RLP_E_FORMAT;
            break;
        }
        rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
        o.spill_path = path;
        o.log_fn = capture_log;
        o.log_payload = &cap;
        rlp_replay_buffer *b2 = NULL;
        int rc = rlp_replay_buffer_create(&b2, &o);
        assert_int_equal(rc, expect_rc);
        if (rc) {
            assert_non_null(strstr(rlp_error_last(), "not the last record"));
            continue;
        }
        rlp_buffer_stats s = stats_of(b2);
        assert_int_equal(s.size, expect_groups);
        assert_int_equal(cap.n_warn, warn0 + 1); /* one warning, naming the offset */
        assert_non_null(strstr(cap.last, "truncating"));
        assert_true(s.torn_bytes > 0);
        assert_int_equal(file_size(path), sizes[expect_groups]);
        /* and the file goes on working */
        uint64_t g3 = 3;
        push_groups(b2, &g3, 1, 0);
        rlp_replay_buffer_free(b2);
        b2 = open_spill(path, &cap, 0);
        assert_int_equal(stats_of(b2).size, expect_groups + 1);
        assert_int_equal(cap.n_warn, warn0 + 1);
        rlp_replay_buffer_free(b2);
    }
    /* not a spill file at all: refused, left alone */
    FILE *f = fopen(path, "wb");
    fputs("{\"this is\": \"somebody's json\"}", f);
    fclose(f);
    long before = file_size(path);
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = path;
    rlp_replay_buffer *b3;
    assert_int_equal(rlp_replay_buffer_create(&b3, &o), RLP_E_FORMAT);
    assert_int_equal(file_size(path), before);
    unlink(path);
}

static void test_spill_compaction_and_lock(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "compact.spill");
    unlink(path);
    rlp_replay_buffer *buf = open_spill(path, NULL, 4096);
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = path;
    rlp_replay_buffer *other;
    assert_int_equal(rlp_replay_buffer_create(&other, &o), RLP_E_STATE);
    uint64_t gid = 0;
    long peak = 0;
    for (int round = 0; round < 50; round++) {
        uint64_t g[4] = {gid, gid + 1, gid + 2, gid + 3};
        gid += 4;
        push_groups(buf, g, 4, 0);
        rlp_batch *out;
        assert_int_equal(rlp_replay_buffer_pull(&out, buf, 3, 0, 0), RLP_OK);
        rlp_batch_free(out);
        if (file_size(path) > peak)
            peak = file_size(path);
    }
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.size, 50);
    assert_true(s.compactions > 0);
    /* without compaction the file would hold all 200 groups' records */
    assert_true(peak < 3 * 4096 + (long)s.spill_bytes);
    assert_int_equal(rlp_replay_buffer_create(&other, &o), RLP_E_STATE); /* the new inode is locked too */
    rlp_replay_buffer_free(buf);
    buf = open_spill(path, NULL, 4096);
    s = stats_of(buf);
    assert_int_equal(s.restored, 50);
    /* pulls take the oldest: the 50 left are the last 50 pushed */
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, 50, 0, 0), RLP_OK);
    for (size_t i = 0; i < 50; i++)
        assert_int_equal(traj_at(out, 2 * i).group_id, 150 + i);
    rlp_batch_free(out);
    rlp_replay_buffer_free(buf);
    unlink(path);
}

/* Many producers with a spill: group commit makes fewer fsyncs than
 * records, and every group is there after reopening. */
typedef struct spill_prod {
    rlp_replay_buffer *buf;
    uint64_t base;
    int n;
} spill_prod;

static void *spill_producer(void *p)
{
    spill_prod *a = p;
    for (int i = 0; i < a->n; i++) {
        uint64_t g = a->base + (uint64_t)i;
        rlp_batch *b = batch_of(&g, 1, 2, 0);
        if (rlp_replay_buffer_push(a->buf, b) != RLP_OK)
            abort();
        rlp_batch_free(b);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_spill_group_commit(void **state)
{
    (void)state;
    char path[512];
    path_in_tmp(path, sizeof path, "gc.spill");
    unlink(path);
    rlp_replay_buffer *buf = open_spill(path, NULL, 0);
    enum { P = 8, N = 40 };
    pthread_t th[P];
    spill_prod a[P];
    double t0 = now_s();
    for (int i = 0; i < P; i++) {
        a[i] = (spill_prod){buf, (uint64_t)i * 1000, N};
        pthread_create(&th[i], NULL, spill_producer, &a[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    rlp_buffer_stats s = stats_of(buf);
    assert_int_equal(s.accepted, P * N);
    assert_int_equal(s.spill_records, P * N);
    assert_true(s.spill_syncs < s.spill_records);
    print_message("spill: %d durable pushes from %d threads in %.3f s (%.0f pushes/s, %llu fdatasyncs)\n", P * N, P,
                  dt, P * N / dt, (unsigned long long)s.spill_syncs);
    rlp_replay_buffer_free(buf);
    buf = open_spill(path, NULL, 0);
    assert_int_equal(stats_of(buf).restored, P * N);
    rlp_batch *out;
    assert_int_equal(rlp_replay_buffer_pull(&out, buf, P * N, 0, 0), RLP_OK);
    char seen[P][N];
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < batch_n(out); i += 2) {
        uint64_t g = traj_at(out, i).group_id;
        assert_true(g % 1000 < N && g / 1000 < P);
        assert_int_equal(seen[g / 1000][g % 1000]++, 0);
    }
    rlp_batch_free(out);
    rlp_replay_buffer_free(buf);
    unlink(path);
}

/* ---- concurrency ------------------------------------------------------------- */

#define CONC_GROUPS 100000
#define CONC_P 4
#define CONC_C 3
#define CONC_ETA 2
#define CONC_PULL 4
#define CONC_PULLS_PER_VERSION 40

typedef struct conc {
    rlp_replay_buffer *buf;
    atomic_uint_fast64_t version;       /* consumers' v, advanced as they go */
    atomic_uint_fast64_t pulls;
    atomic_int violations;              /* pulled groups outside the bound */
    atomic_uchar *count;                /* (CONC_GROUPS) times each group was pulled */
    uint64_t *tag;                      /* (CONC_GROUPS) version each group was pushed with */
} conc;

typedef struct conc_worker {
    conc *c;
    int id;
} conc_worker;

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *conc_producer(void *p)
{
    conc_worker *w = p;
    conc *c = w->c;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    int per = CONC_GROUPS / CONC_P;
    for (int i = 0; i < per;) {
        int k = 1 + (int)(xorshift(&rng) % 4);
        if (k > per - i)
            k = per - i;
        rlp_batch *b;
        if (rlp_batch_create(&b))
            abort();
        for (int j = 0; j < k; j++) {
            uint64_t gid = (uint64_t)w->id * per + (uint64_t)(i + j);
            uint64_t v = atomic_load(&c->version), r = xorshift(&rng);
            uint64_t lag = r % 10 == 0 ? 3 : (r >> 8) % 2;
            uint64_t tag = v > lag ? v - lag : 0; /* some start stale */
            c->tag[gid] = tag;
            append_traj(b, gid, 0, tag);
        }
        int rc = rlp_replay_buffer_push(c->buf, b);
        if (rc != RLP_OK)
            abort();
        rlp_batch_free(b);
        i += k;
    }
    return NULL;
}

static void *conc_consumer(void *p)
{
    conc_worker *w = p;
    conc *c = w->c;
    for (;;) {
        uint64_t v = atomic_load(&c->version);
        rlp_batch *out;
        int rc = rlp_replay_buffer_pull(&out, c->buf, CONC_PULL, v, 50);
        if (rc == RLP_E_CLOSED)
            break;
        if (rc == RLP_E_TIMEOUT)
            continue;
        if (rc != RLP_OK)
            abort();
        size_t n;
        rlp_batch_size(&n, out);
        if (n != CONC_PULL)
            abort();
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            rlp_batch_get(&t, out, i);
            atomic_fetch_add(&c->count[t.group_id], 1);
            if (t.policy_version + CONC_ETA < v)
                atomic_fetch_add(&c->violations, 1);
        }
        rlp_batch_free(out);
        if (atomic_fetch_add(&c->pulls, 1) % CONC_PULLS_PER_VERSION == CONC_PULLS_PER_VERSION - 1)
            atomic_fetch_add(&c->version, 1);
    }
    return NULL;
}

static void test_concurrency(void **state)
{
    (void)state;
    conc c;
    memset(&c, 0, sizeof c);
    atomic_init(&c.version, 0);
    atomic_init(&c.pulls, 0);
    atomic_init(&c.violations, 0);
    c.count = calloc(CONC_GROUPS, sizeof *c.count);
    c.tag = calloc(CONC_GROUPS, sizeof *c.tag);
    assert_non_null(c.count);
    assert_non_null(c.tag);
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.capacity = 256;
    o.max_staleness = CONC_ETA;
    assert_int_equal(rlp_replay_buffer_create(&c.buf, &o), RLP_OK);
    pthread_t prod[CONC_P], cons[CONC_C];
    conc_worker wp[CONC_P], wc[CONC_C];
    double t0 = now_s();
    for (int i = 0; i < CONC_C; i++) {
        wc[i] = (conc_worker){&c, i};
        pthread_create(&cons[i], NULL, conc_consumer, &wc[i]);
    }
    for (int i = 0; i < CONC_P; i++) {
        wp[i] = (conc_worker){&c, i};
        pthread_create(&prod[i], NULL, conc_producer, &wp[i]);
    }
    for (int i = 0; i < CONC_P; i++)
        pthread_join(prod[i], NULL);
    /* consumers drain what they can, then close ends them */
    for (int spin = 0; spin < 400 && stats_of(c.buf).size >= CONC_PULL; spin++)
        usleep(5000);
    assert_int_equal(rlp_replay_buffer_close(c.buf), RLP_OK);
    for (int i = 0; i < CONC_C; i++)
        pthread_join(cons[i], NULL);
    double dt = now_s() - t0;
    /* the rest (fewer than a pull) one by one, at the final version */
    uint64_t v_end = atomic_load(&c.version);
    rlp_batch *out;
    while (rlp_replay_buffer_pull(&out, c.buf, 1, v_end, 0) == RLP_OK) {
        rlp_trajectory t = traj_at(out, 0);
        atomic_fetch_add(&c.count[t.group_id], 1);
        if (t.policy_version + CONC_ETA < v_end)
            atomic_fetch_add(&c.violations, 1);
        rlp_batch_free(out);
    }
    rlp_buffer_stats s = stats_of(c.buf);
    uint64_t pulled = 0, never = 0;
    for (size_t g = 0; g < CONC_GROUPS; g++) {
        assert_true(c.count[g] <= 1); /* none duplicated */
        pulled += c.count[g];
        if (!c.count[g]) {
            never++;
            /* a group never pulled was stale by the end: it was dropped, not lost */
            assert_true(c.tag[g] + CONC_ETA < v_end);
        }
    }
    assert_int_equal(atomic_load(&c.violations), 0);
    assert_int_equal(s.size, 0);
    assert_int_equal(s.accepted, CONC_GROUPS);
    assert_int_equal(s.consumed, pulled);
    assert_int_equal(s.dropped_stale, never); /* exact: every unpulled group is a counted drop */
    assert_int_equal(s.consumed + s.dropped_stale, CONC_GROUPS);
    uint64_t hist = 0;
    for (int i = 0; i < RLP_BUFFER_STALENESS_BINS; i++)
        hist += s.staleness_hist[i];
    assert_int_equal(hist, s.consumed);
    assert_true(s.max_staleness_seen <= CONC_ETA);
    assert_true(s.dropped_stale > 0 && s.consumed > CONC_GROUPS / 2); /* the test exercised both */
    print_message("concurrency: %d groups, %d producers, %d consumers in %.3f s (%.0f groups/s); consumed %llu, "
                  "dropped stale %llu, final version %llu\n",
                  CONC_GROUPS, CONC_P, CONC_C, dt, CONC_GROUPS / dt, (unsigned long long)s.consumed,
                  (unsigned long long)s.dropped_stale, (unsigned long long)v_end);
    rlp_replay_buffer_free(c.buf);
    free(c.count);
    free(c.tag);
}

/* ---- the reader on its own ---------------------------------------------------- */

/* Bytes that pass the CRCs but break a rule are refused. */
static void test_scan_rules(void **state)
{
    (void)state;
    rlpi_traj t;
    memset(&t, 0, sizeof t);
    int32_t tok[1] = {3};
    float lp[1] = {-1};
    uint64_t ver[1] = {0};
    t.tokens = tok;
    t.logprobs = lp;
    t.versions = ver;
    t.n_tokens = 1;
    t.valid = 1;
    t.reward = 1;
    t.temperature = 1;
    rlpi_group g = {.seq = 5, .trajs = &t, .n = 1};
    rlpi_group *gp = &g;
    rlpi_bytes img = {0};
    uint8_t head[RLPI_SPILL_HEADER_BYTES] = {'R', 'L', 'P', 'S', 'P', 'I', 'L', 'L', 1, 0, 0, 0};
    uint32_t crc = rlpi_crc32(0, head, 12);
    for (int i = 0; i < 4; i++)
        head[12 + i] = (uint8_t)(crc >> (8 * i));
    assert_int_equal(rlpi_spill_encode_push(&img, &gp, 1), RLP_OK);
    /* the same seq twice: sequence numbers must increase */
    assert_int_equal(rlpi_spill_encode_push(&img, &gp, 1), RLP_OK);
    uint8_t *file = malloc(sizeof head + img.len);
    memcpy(file, head, sizeof head);
    memcpy(file + sizeof head, img.p, img.len);
    rlpi_spill_scan scan;
    assert_int_equal(rlpi_spill_scan_image(file, sizeof head + img.len / 2, "t", &scan), RLP_OK);
    assert_int_equal(scan.n_groups, 1);
    assert_int_equal(scan.next_seq, 6);
    rlpi_spill_scan_free(&scan);
    assert_int_equal(rlpi_spill_scan_image(file, sizeof head + img.len, "t", &scan), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "does not increase"));
    free(file);
    rlpi_bytes_free(&img);
    /* the CRC-32 check value */
    assert_int_equal(rlpi_crc32(0, "123456789", 9), 0xCBF43926u);
}

/* The seed corpus, written by an independent (Python) encoder of the
 * format: what the reader makes of each file. */
static void test_scan_python_fixtures(void **state)
{
    (void)state;
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    if (!root)
        skip();
    static const struct {
        const char *name;
        int rc;
        size_t groups, trajs;
        int torn;
    } cases[] = {
        {"empty_header", RLP_OK, 0, 0, 0},
        {"one_push", RLP_OK, 1, 2, 0},
        {"push_retire", RLP_OK, 1, 1, 0},
        {"retire_unknown_seq", RLP_OK, 1, 2, 0},
        {"utf8_and_metadata", RLP_OK, 1, 1, 0},
        {"torn_header", RLP_OK, 1, 2, 1},
        {"torn_payload", RLP_OK, 1, 2, 1},
        {"last_crc_bad", RLP_OK, 1, 2, 1},
        {"zero_tail", RLP_OK, 1, 2, 1},
        {"header_only_prefix", RLP_OK, 0, 0, 1},
        {"bad_magic", RLP_E_FORMAT, 0, 0, 0},
        {"future_format", RLP_E_UNSUPPORTED, 0, 0, 0},
        {"middle_crc_bad", RLP_E_FORMAT, 0, 0, 0},
        {"middle_header_crc_bad", RLP_E_FORMAT, 0, 0, 0},
        {"seq_not_increasing", RLP_E_FORMAT, 0, 0, 0},
        {"huge_record_len", RLP_E_FORMAT, 0, 0, 0},
        {"huge_group_count", RLP_E_FORMAT, 0, 0, 0},
        {"huge_traj_count", RLP_E_FORMAT, 0, 0, 0},
        {"prompt_len_past_end", RLP_E_FORMAT, 0, 0, 0},
        {"token_len_past_end", RLP_E_FORMAT, 0, 0, 0},
        {"string_len_past_end", RLP_E_FORMAT, 0, 0, 0},
        {"string_embedded_nul", RLP_E_FORMAT, 0, 0, 0},
        {"nan_logprob", RLP_E_FORMAT, 0, 0, 0},
        {"valid_unscored", RLP_E_FORMAT, 0, 0, 0},
        {"negative_token", RLP_E_FORMAT, 0, 0, 0},
        {"bad_finish", RLP_E_FORMAT, 0, 0, 0},
        {"unknown_flags", RLP_E_FORMAT, 0, 0, 0},
        {"mixed_group_ids", RLP_E_FORMAT, 0, 0, 0},
        {"unknown_type", RLP_E_FORMAT, 0, 0, 0},
        {"retire_count_mismatch", RLP_E_FORMAT, 0, 0, 0},
        {"trailing_bytes_in_push", RLP_E_FORMAT, 0, 0, 0},
        {"provenance", RLP_OK, 2, 3, 0},
        {"provenance_bad_version", RLP_E_FORMAT, 0, 0, 0},
        {"provenance_cut_short", RLP_E_FORMAT, 0, 0, 0},
        {"format1_push", RLP_OK, 1, 2, 0},
        {"format1_provenance_flag", RLP_E_FORMAT, 0, 0, 0},
        {"format2_provenance", RLP_OK, 0, 0, 0},
        {"format2_mask_flag", RLP_E_FORMAT, 0, 0, 0},
        {"episode_mask", RLP_OK, 2, 3, 0},
        {"mask_value_2", RLP_E_FORMAT, 0, 0, 0},
        {"mask_cut_short", RLP_E_FORMAT, 0, 0, 0},
        {"episode_bad_version", RLP_E_FORMAT, 0, 0, 0},
        {"episode_bad_end", RLP_E_FORMAT, 0, 0, 0},
        {"episode_nan_seconds", RLP_E_FORMAT, 0, 0, 0},
        {"episode_cut_short", RLP_E_FORMAT, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/spill/%s.spill", root, cases[i].name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t data[4096];
        size_t n = fread(data, 1, sizeof data, f);
        fclose(f);
        rlpi_spill_scan sc;
        int rc = rlpi_spill_scan_image(data, n, cases[i].name, &sc);
        if (rc != cases[i].rc)
            print_error("%s: rc %d (%s), expected %d\n", cases[i].name, rc, rlp_error_last(), cases[i].rc);
        assert_int_equal(rc, cases[i].rc);
        if (rc)
            continue;
        assert_int_equal(sc.n_groups, cases[i].groups);
        assert_int_equal(sc.torn, cases[i].torn);
        size_t trajs = 0;
        for (size_t g = 0; g < sc.n_groups; g++)
            trajs += sc.groups[g]->n;
        assert_int_equal(trajs, cases[i].trajs);
        if (!strcmp(cases[i].name, "push_retire")) {
            /* group 1: version min(3, tokens 3, 4) = 3, token rewards kept */
            const rlpi_traj *t = &sc.groups[0]->trajs[0];
            assert_int_equal(sc.groups[0]->seq, 1);
            assert_int_equal(sc.groups[0]->version, 3);
            assert_int_equal(t->group_id, 11);
            assert_non_null(t->token_rewards);
            assert_true(t->token_rewards[1] == -0.25f && t->temperature == 0.7f && t->finish_reason == 2);
            assert_int_equal(sc.next_seq, 3);
        }
        if (!strcmp(cases[i].name, "provenance")) {
            /* group 20: both samples with (12345, 2, 17, 2^64 - 3, 41); group 21 without */
            for (size_t k = 0; k < 2; k++) {
                const rlpi_traj *t = &sc.groups[0]->trajs[k];
                assert_true(t->has_provenance);
                assert_int_equal(t->provenance.version, 1);
                assert_int_equal(t->provenance.prompt_index, 12345);
                assert_int_equal(t->provenance.epoch, 2);
                assert_int_equal(t->provenance.position, 17);
                assert_int_equal(t->provenance.sampling_seed, UINT64_MAX - 2);
                assert_int_equal(t->provenance.batch, 41);
            }
            assert_non_null(sc.groups[0]->trajs[1].token_rewards);
            assert_true(sc.groups[0]->trajs[1].token_rewards[1] == 1.0f);
            assert_false(sc.groups[1]->trajs[0].has_provenance);
            assert_int_equal(sc.format, 3);
        }
        if (!strcmp(cases[i].name, "episode_mask")) {
            /* group 30: a multi-turn sample (mask 1 1 0 0 0 1, episode 3 turns, 2 calls,
             * 1 error, 3 observation tokens, 1 cut, done, 0.75 s) and a one-turn one */
            const rlpi_traj *t = &sc.groups[0]->trajs[0], *u = &sc.groups[0]->trajs[1];
            static const uint8_t want[6] = {1, 1, 0, 0, 0, 1};
            assert_int_equal(t->n_tokens, 6);
            assert_non_null(t->loss_mask);
            assert_memory_equal(t->loss_mask, want, 6);
            assert_true(t->has_episode && t->has_provenance && t->token_rewards);
            assert_int_equal(t->episode.version, 1);
            assert_int_equal(t->episode.turns, 3);
            assert_int_equal(t->episode.tool_calls, 2);
            assert_int_equal(t->episode.tool_errors, 1);
            assert_int_equal(t->episode.tool_timeouts, 0);
            assert_int_equal(t->episode.observation_tokens, 3);
            assert_int_equal(t->episode.observations_cut, 1);
            assert_int_equal(t->episode.end, RLP_EPISODE_DONE);
            assert_true(t->episode.tool_seconds == 0.75);
            assert_true(t->token_rewards[5] == 1.0f && t->logprobs[2] == 0.0f);
            assert_true(u->has_episode && u->loss_mask && u->loss_mask[0] == 1 && u->loss_mask[1] == 1);
            assert_int_equal(u->episode.end, RLP_EPISODE_MAX_TURNS);
            assert_false(sc.groups[1]->trajs[0].has_episode || sc.groups[1]->trajs[0].loss_mask);
        }
        if (!strcmp(cases[i].name, "format2_provenance")) {
            /* pushed and retired: nothing live, but the provenance records parsed */
            assert_int_equal(sc.format, 2);
            assert_int_equal(sc.next_seq, 1);
        }
        if (!strcmp(cases[i].name, "format1_push")) {
            assert_int_equal(sc.format, 1);
            assert_false(sc.groups[0]->trajs[0].has_provenance || sc.groups[0]->trajs[1].has_provenance);
        }
        rlpi_spill_scan_free(&sc);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "%s/rlp_buffer_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_whole_and_fifo),
        cmocka_unit_test(test_staleness_drop),
        cmocka_unit_test(test_staleness_from_synchronizer),
        cmocka_unit_test(test_capacity_and_close),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_spill_round_trip),
        cmocka_unit_test(test_batch_file_multiturn),
        cmocka_unit_test(test_provenance_push_pull),
        cmocka_unit_test(test_spill_format1_upgraded),
        cmocka_unit_test(test_spill_torn_and_corrupt),
        cmocka_unit_test(test_spill_compaction_and_lock),
        cmocka_unit_test(test_spill_group_commit),
        cmocka_unit_test(test_scan_rules),
        cmocka_unit_test(test_scan_python_fixtures),
        cmocka_unit_test(test_concurrency),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
