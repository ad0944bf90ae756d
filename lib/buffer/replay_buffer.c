/* rlp_replay_buffer: a FIFO of version-tagged trajectory groups shared by
 * producer and consumer threads, with capacity back-pressure, staleness
 * drops at pull time, and (optionally) a durable spill. One mutex guards
 * the state; spill writes happen outside it through a group commit: the
 * first waiting thread becomes the writer, writes every queued record with
 * one fdatasync, then publishes the groups. Groups become visible to
 * consumers only once durable, so a retire record can never precede the
 * push record of the group it names. Must not know about policies or
 * engines (buffer depends on core alone). */
#include "buffer/spill.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "buffer_internal.h"
#include "core/sync_eta.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_COMPACT_BYTES ((uint64_t)64 << 20)

/* A push or a pull waiting for its records to be durable. */
typedef struct commit_entry {
    rlpi_group **groups; /* (n) push: written, then inserted; NULL: a pull's retire barrier */
    size_t n;
    bool done;
    int rc;
    char err[256];       /* the writer's message: it may run on another thread */
    struct commit_entry *next;
} commit_entry;

typedef struct seq_list {
    uint64_t *v; /* (n, cap) */
    size_t n, cap;
} seq_list;

struct rlp_replay_buffer {
    rlp_buffer_options opts; /* spill_path points at spill_path below */
    char *spill_path;
    rlpi_logger log;

    pthread_mutex_t mu;
    pthread_cond_t room_cv;   /* pushers waiting for capacity */
    pthread_cond_t data_cv;   /* pullers waiting for groups */
    pthread_cond_t commit_cv; /* threads waiting for the writer */

    rlpi_group *head, *tail;  /* held groups, increasing seq */
    uint64_t size, n_trajs;   /* groups / trajectories held */
    uint64_t reserved;        /* groups of pushes admitted but not yet durable */
    uint64_t next_seq;
    uint64_t min_version;     /* ≤ every held group's version (exact after a full scan) */
    bool closed;

    bool has_spill, spill_failed, writer_active;
    rlpi_spill spill;
    commit_entry *q_head, *q_tail;
    seq_list retire_consumed, retire_dropped; /* waiting for the next commit */
    uint64_t live_bytes;      /* spill bytes the held groups would take alone */

    rlp_buffer_stats st;
};

/* ---- helpers ---------------------------------------------------------------- */

static int seq_push(seq_list *l, uint64_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *p = realloc(l->v, cap * sizeof *p);
        if (!p)
            return RLP_E_NOMEM;
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return RLP_OK;
}


/* Waits on cv; false once the deadline (if any) has passed. */
static bool wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *deadline)
{
    if (!deadline) {
        pthread_cond_wait(cv, mu);
        return true;
    }
    return pthread_cond_timedwait(cv, mu, deadline) != ETIMEDOUT;
}

static bool is_stale(const rlp_replay_buffer *b, uint64_t group_version, uint64_t v)
{
    uint32_t eta = b->opts.max_staleness;
    return eta != RLP_STALENESS_UNBOUNDED && v > eta && group_version < v - eta;
}

static void list_remove(rlp_replay_buffer *b, rlpi_group *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        b->head = g->next;
    if (g->next)
        g->next->prev = g->prev;
    else
        b->tail = g->prev;
    g->prev = g->next = NULL;
    b->size--;
    b->n_trajs -= g->n;
    b->live_bytes -= g->spill_bytes;
}

/* Inserts g keeping the list in seq order (almost always at the tail). */
static void list_insert(rlp_replay_buffer *b, rlpi_group *g)
{
    rlpi_group *after = b->tail;
    while (after && after->seq > g->seq)
        after = after->prev;
    g->prev = after;
    g->next = after ? after->next : b->head;
    if (g->next)
        g->next->prev = g;
    else
        b->tail = g;
    if (after)
        after->next = g;
    else
        b->head = g;
    b->size++;
    b->n_trajs += g->n;
    b->live_bytes += g->spill_bytes;
    if (g->version < b->min_version)
        b->min_version = g->version;
}

/* Frees a group's shell only: its trajectories are owned elsewhere. */
void rlpi_buffer_group_free_shell(rlpi_group *g)
{
    if (g) {
        free(g->trajs);
        free(g);
    }
}

/* ---- spill: group commit ---------------------------------------------------- */

/* Rewrites the spill with the held groups only. Called by the writer with
 * mu held; drops mu during the file work (nobody else inserts meanwhile:
 * only the writer does). */
static void compact(rlp_replay_buffer *b)
{
    rlpi_bytes img = {0};
    int rc = RLP_OK;
    for (rlpi_group *g = b->head; g && rc == RLP_OK; g = g->next)
        rc = rlpi_spill_encode_push(&img, &g, 1);
    if (rc == RLP_OK) {
        pthread_mutex_unlock(&b->mu);
        rc = rlpi_spill_rewrite(&b->spill, img.p, img.len);
        pthread_mutex_lock(&b->mu);
    }
    rlpi_bytes_free(&img);
    if (rc == RLP_OK)
        b->st.compactions++;
    else /* the old file is intact: keep appending to it */
        rlpi_log(&b->log, RLP_LOG_WARN, "replay buffer: %s", rlp_error_last());
}

/* Writes everything queued (and the pending retire lists) with one
 * fdatasync, then publishes the result. Called with mu held and no writer
 * active; returns with mu held. */
static void write_queued(rlp_replay_buffer *b)
{
    b->writer_active = true;
    commit_entry *batch = b->q_head;
    b->q_head = b->q_tail = NULL;
    seq_list rc_list = b->retire_consumed, rd_list = b->retire_dropped;
    memset(&b->retire_consumed, 0, sizeof b->retire_consumed);
    memset(&b->retire_dropped, 0, sizeof b->retire_dropped);
    for (commit_entry *e = batch; e; e = e->next)
        for (size_t i = 0; i < e->n; i++)
            e->groups[i]->seq = b->next_seq++;
    pthread_mutex_unlock(&b->mu);

    rlpi_bytes out = {0};
    int rc = RLP_OK;
    size_t n_records = 0;
    if (rc_list.n || rd_list.n) {
        rc = rlpi_spill_encode_retire(&out, rc_list.v, rc_list.n, rd_list.v, rd_list.n);
        n_records++;
    }
    for (commit_entry *e = batch; e && rc == RLP_OK; e = e->next) {
        if (!e->n)
            continue;
        for (size_t i = 0; i < e->n; i++) /* what each group weighs alone, for compaction */
            if ((rc = rlpi_spill_push_size(&e->groups[i]->spill_bytes, &e->groups[i], 1)))
                break;
        if (rc == RLP_OK)
            rc = rlpi_spill_encode_push(&out, e->groups, e->n);
        n_records++;
    }
    bool io_failed = false;
    if (rc == RLP_OK && out.len) {
        rc = rlpi_spill_append(&b->spill, out.p, out.len);
        io_failed = rc != RLP_OK;
    }
    rlpi_bytes_free(&out);
    free(rc_list.v);
    free(rd_list.v);

    pthread_mutex_lock(&b->mu);
    if (rc == RLP_OK && n_records) {
        b->st.spill_records += n_records;
        b->st.spill_syncs++;
    }
    if (io_failed) {
        /* a disk that failed once cannot promise durability: stop here.
         * (Failing to encode, out of memory, wrote nothing: the entries
         * fail, pulls put their groups back, the file stays usable.) */
        b->spill_failed = true;
        rlpi_log(&b->log, RLP_LOG_ERROR, "replay buffer: %s; the buffer accepts no more pushes or pulls",
                 rlp_error_last());
    }
    bool inserted = false;
    for (commit_entry *e = batch; e; e = e->next) {
        for (size_t i = 0; i < e->n; i++) {
            if (rc == RLP_OK)
                list_insert(b, e->groups[i]);
            b->reserved--;
        }
        if (rc == RLP_OK)
            b->st.accepted += e->n;
        inserted |= e->n > 0 && rc == RLP_OK;
        e->rc = rc;
        if (rc)
            snprintf(e->err, sizeof e->err, "%s", rlp_error_last());
    }
    if (rc == RLP_OK && b->spill.bytes > b->opts.compact_bytes &&
        b->spill.bytes > 2 * (b->live_bytes + RLPI_SPILL_HEADER_BYTES))
        compact(b);
    /* entries live on their threads' stacks: mark them done last */
    for (commit_entry *e = batch, *next; e; e = next) {
        next = e->next;
        e->done = true;
    }
    b->writer_active = false;
    pthread_cond_broadcast(&b->commit_cv);
    if (inserted)
        pthread_cond_broadcast(&b->data_cv);
    if (rc != RLP_OK)
        pthread_cond_broadcast(&b->room_cv);
}

/* Queues e and waits until a writer (maybe this thread) has handled it.
 * mu held on entry and return. */
static int commit(rlp_replay_buffer *b, commit_entry *e)
{
    e->done = false;
    e->next = NULL;
    if (b->q_tail)
        b->q_tail->next = e;
    else
        b->q_head = e;
    b->q_tail = e;
    while (!e->done) {
        if (!b->writer_active)
            write_queued(b);
        else
            pthread_cond_wait(&b->commit_cv, &b->mu);
    }
    if (e->rc) /* the message is thread-local: give this thread the writer's */
        return rlpi_error_set(e->rc, "%s", e->err);
    return RLP_OK;
}

/* ---- options, create, free --------------------------------------------------- */

int rlp_buffer_options_init(rlp_buffer_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_BUFFER_OPTIONS_VERSION, "unknown options version");
    rlp_buffer_options d = RLP_BUFFER_OPTIONS_INIT;
    /* a version-1 caller's struct ends before sync: write only its fields */
    memcpy(opts, &d, version >= 2 ? sizeof d : offsetof(rlp_buffer_options, sync));
    opts->version = version;
    return RLP_OK;
}

static void log_sink(rlp_replay_buffer *b)
{
    b->log.fn = b->opts.log_fn;
    b->log.payload = b->opts.log_payload;
    b->log.level = RLP_LOG_WARN;
}

void rlp_replay_buffer_free(rlp_replay_buffer *buf)
{
    if (!buf)
        return;
    for (rlpi_group *g = buf->head, *next; g; g = next) {
        next = g->next;
        rlpi_group_free(g);
    }
    if (buf->has_spill)
        rlpi_spill_close(&buf->spill);
    free(buf->retire_consumed.v);
    free(buf->retire_dropped.v);
    free(buf->spill_path);
    pthread_cond_destroy(&buf->room_cv);
    pthread_cond_destroy(&buf->data_cv);
    pthread_cond_destroy(&buf->commit_cv);
    pthread_mutex_destroy(&buf->mu);
    free(buf);
}

int rlp_replay_buffer_create(rlp_replay_buffer **out, const rlp_buffer_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_BUFFER_OPTIONS_VERSION,
                       "opts->version is not RLP_BUFFER_OPTIONS_VERSION");
        /* read only the fields the caller's version has (version 1 ended at log_payload) */
        memcpy(&o, opts, opts->version == 1 ? offsetof(rlp_buffer_options, sync) : sizeof o);
        if (opts->version == 1)
            o.sync = NULL;
        o.version = RLP_BUFFER_OPTIONS_VERSION;
    }
    if (o.sync) {
        /* one η: the gate's. The buffer's own is the default or the same */
        const rlp_buffer_options d = RLP_BUFFER_OPTIONS_INIT;
        uint32_t eta = rlpi_sync_max_staleness(o.sync);
        if (o.max_staleness != d.max_staleness && o.max_staleness != eta)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "%s: opts->max_staleness is %u but the synchronizer's max_staleness (η) is %u: "
                                  "leave the buffer's at its default with opts->sync set",
                                  __func__, o.max_staleness, eta);
        o.max_staleness = eta;
    }
    RLPI_CHECK_ARG(o.full_policy == RLP_BUFFER_FULL_BLOCK || o.full_policy == RLP_BUFFER_FULL_FAIL,
                   "opts->full_policy is not an rlp_buffer_full_policy");
    RLPI_CHECK_ARG(!o.spill_path || *o.spill_path, "opts->spill_path is empty");
    if (!o.compact_bytes)
        o.compact_bytes = DEFAULT_COMPACT_BYTES;

    rlp_replay_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    b->opts = o;
    b->min_version = UINT64_MAX;
    b->st.version = 1;
    log_sink(b);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->room_cv, &ca);
    pthread_cond_init(&b->data_cv, &ca);
    pthread_cond_init(&b->commit_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (o.spill_path) {
        if (!(b->spill_path = strdup(o.spill_path))) {
            rlp_replay_buffer_free(b);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        }
        b->opts.spill_path = b->spill_path;
        rlpi_spill_scan scan;
        int rc = rlpi_spill_open(&b->spill, b->spill_path, &b->log, &scan);
        if (rc) {
            free(b->spill_path);
            b->spill_path = NULL;
            rlp_replay_buffer_free(b);
            return rlpi_error_wrap("%s", __func__);
        }
        b->has_spill = true;
        for (size_t i = 0; i < scan.n_groups; i++) {
            list_insert(b, scan.groups[i]);
            scan.groups[i] = NULL;
        }
        b->st.restored = scan.n_groups;
        b->st.torn_bytes = scan.torn ? scan.image_bytes - scan.valid_bytes : 0;
        b->next_seq = scan.next_seq;
        scan.n_groups = 0;
        rlpi_spill_scan_free(&scan);
    }
    *out = b;
    return RLP_OK;
}

int rlp_replay_buffer_close(rlp_replay_buffer *buf)
{
    RLPI_CHECK_ARG(buf, "buf is NULL");
    pthread_mutex_lock(&buf->mu);
    buf->closed = true;
    pthread_cond_broadcast(&buf->room_cv);
    pthread_cond_broadcast(&buf->data_cv);
    pthread_mutex_unlock(&buf->mu);
    return RLP_OK;
}

/* ---- push ------------------------------------------------------------------ */

typedef struct idx_key {
    uint64_t group_id;
    size_t index;
} idx_key;

static int cmp_key(const void *a, const void *b)
{
    const idx_key *x = a, *y = b;
    if (x->group_id != y->group_id)
        return x->group_id < y->group_id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_first(const void *a, const void *b)
{
    const rlpi_group *x = *(rlpi_group *const *)a, *y = *(rlpi_group *const *)b;
    /* seq holds the batch index of the group's first trajectory until commit */
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Splits the batch into groups by group_id, in order of first appearance.
 * The groups hold shallow copies: the batch still owns the memory until
 * the push succeeds. */
int rlpi_buffer_check_batch(const rlp_batch *batch, const char *caller)
{
    for (size_t i = 0; i < batch->n; i++) {
        const char *why = rlpi_spill_check_traj(&batch->items[i]);
        if (why)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: trajectory %zu (group %llu): %s", caller, i,
                                  (unsigned long long)batch->items[i].group_id, why);
    }
    return RLP_OK;
}

int rlpi_buffer_make_groups(const rlp_batch *batch, rlpi_group ***out, size_t *n_out)
{
    size_t n = batch->n;
    idx_key *keys = malloc(n * sizeof *keys);
    rlpi_group **groups = calloc(n, sizeof *groups);
    if (!keys || !groups) {
        free(keys);
        free(groups);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_replay_buffer_push: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (idx_key){batch->items[i].group_id, i};
    qsort(keys, n, sizeof *keys, cmp_key);
    size_t ng = 0;
    int rc = RLP_OK;
    for (size_t s = 0, e; s < n && rc == RLP_OK; s = e) {
        for (e = s + 1; e < n && keys[e].group_id == keys[s].group_id; e++)
            ;
        rlpi_group *g = calloc(1, sizeof *g);
        rlpi_traj *t = malloc((e - s) * sizeof *t);
        if (!g || !t) {
            free(g);
            free(t);
            rc = rlpi_error_set(RLP_E_NOMEM, "rlp_replay_buffer_push: out of memory");
            break;
        }
        for (size_t k = s; k < e; k++)
            t[k - s] = batch->items[keys[k].index];
        g->trajs = t;
        g->n = e - s;
        g->seq = keys[s].index;
        g->version = rlpi_group_version(t, g->n);
        groups[ng++] = g;
    }
    free(keys);
    if (rc) {
        for (size_t i = 0; i < ng; i++)
            rlpi_buffer_group_free_shell(groups[i]);
        free(groups);
        return rc;
    }
    qsort(groups, ng, sizeof *groups, cmp_first);
    *out = groups;
    *n_out = ng;
    return RLP_OK;
}

int rlp_replay_buffer_push(rlp_replay_buffer *buf, rlp_batch *batch)
{
    RLPI_CHECK_ARG(buf, "buf is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    if (batch->n == 0)
        return RLP_OK;
    rlpi_group **groups = NULL;
    size_t k = 0;
    int rc = rlpi_buffer_check_batch(batch, __func__);
    if (rc)
        return rc;
    rc = rlpi_buffer_make_groups(batch, &groups, &k);
    if (rc)
        return rc;
    uint64_t record_bytes;
    if (buf->opts.capacity && k > buf->opts.capacity)
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: %zu groups in one push exceed the capacity of %llu", __func__, k,
                            (unsigned long long)buf->opts.capacity);
    else if (buf->has_spill && rlpi_spill_push_size(&record_bytes, groups, k) != RLP_OK)
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: the push is too large for one spill record; push fewer groups",
                            __func__);
    if (rc) {
        for (size_t i = 0; i < k; i++)
            rlpi_buffer_group_free_shell(groups[i]);
        free(groups);
        return rc;
    }

    struct timespec deadline;
    bool timed = buf->opts.push_timeout_ms != RLP_WAIT_FOREVER;
    if (timed)
        rlpi_deadline_after(&deadline, buf->opts.push_timeout_ms);
    pthread_mutex_lock(&buf->mu);
    for (;;) {
        if (buf->closed) {
            rc = rlpi_error_set(RLP_E_CLOSED, "%s: the buffer is closed", __func__);
            break;
        }
        if (buf->spill_failed) {
            rc = rlpi_error_set(RLP_E_IO, "%s: the spill file failed earlier; re-create the buffer", __func__);
            break;
        }
        if (!buf->opts.capacity || buf->size + buf->reserved + k <= buf->opts.capacity)
            break;
        if (buf->opts.full_policy == RLP_BUFFER_FULL_FAIL) {
            buf->st.rejected++;
            rc = rlpi_error_set(RLP_E_AGAIN, "%s: the buffer is full (%llu groups)", __func__,
                                (unsigned long long)buf->opts.capacity);
            break;
        }
        if (!wait_until(&buf->room_cv, &buf->mu, timed ? &deadline : NULL) && buf->opts.capacity &&
            buf->size + buf->reserved + k > buf->opts.capacity && !buf->closed) {
            buf->st.rejected++;
            rc = rlpi_error_set(RLP_E_TIMEOUT, "%s: no room for %zu groups within %u ms", __func__, k,
                                buf->opts.push_timeout_ms);
            break;
        }
    }
    if (rc == RLP_OK) {
        buf->reserved += k;
        if (buf->has_spill) {
            commit_entry e = {.groups = groups, .n = k};
            rc = commit(buf, &e);
        } else {
            for (size_t i = 0; i < k; i++) {
                groups[i]->seq = buf->next_seq++;
                list_insert(buf, groups[i]);
            }
            buf->reserved -= k;
            buf->st.accepted += k;
            pthread_cond_broadcast(&buf->data_cv);
        }
    }
    pthread_mutex_unlock(&buf->mu);
    if (rc) {
        for (size_t i = 0; i < k; i++)
            rlpi_buffer_group_free_shell(groups[i]);
        free(groups);
        return rc;
    }
    /* the groups (now possibly already pulled) own the trajectories */
    batch->n = 0;
    free(groups);
    return RLP_OK;
}

/* ---- pull ------------------------------------------------------------------ */

/* Drops every group that is stale at v. mu held. */
static void drop_stale(rlp_replay_buffer *b, uint64_t v)
{
    if (b->size == 0 || !is_stale(b, b->min_version, v))
        return;
    uint64_t min = UINT64_MAX;
    bool dropped = false;
    for (rlpi_group *g = b->head, *next; g; g = next) {
        next = g->next;
        if (!is_stale(b, g->version, v)) {
            if (g->version < min)
                min = g->version;
            continue;
        }
        list_remove(b, g);
        b->st.dropped_stale++;
        dropped = true;
        /* out of memory here only means the group may come back after a
         * crash, to be dropped again */
        if (b->has_spill)
            (void)seq_push(&b->retire_dropped, g->seq);
        rlpi_group_free(g);
    }
    b->min_version = min;
    if (dropped)
        pthread_cond_broadcast(&b->room_cv);
}

int rlp_replay_buffer_pull(rlp_batch **out, rlp_replay_buffer *buf, size_t n_groups, uint64_t version,
                           uint32_t timeout_ms)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(buf, "buf is NULL");
    RLPI_CHECK_ARG(n_groups >= 1, "n_groups must be at least 1");
    if (buf->opts.capacity && n_groups > buf->opts.capacity)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %zu groups can never be held at once (capacity %llu)",
                              __func__, n_groups, (unsigned long long)buf->opts.capacity);
    rlp_batch *batch;
    int rc = rlp_batch_create(&batch);
    if (rc)
        return rc;
    struct timespec deadline;
    bool timed = timeout_ms != RLP_WAIT_FOREVER;
    if (timed && timeout_ms)
        rlpi_deadline_after(&deadline, timeout_ms);

    pthread_mutex_lock(&buf->mu);
    for (;;) {
        if (buf->spill_failed) {
            rc = rlpi_error_set(RLP_E_IO, "%s: the spill file failed earlier; re-create the buffer", __func__);
            break;
        }
        drop_stale(buf, version);
        if (buf->size >= n_groups)
            break;
        if (buf->closed) {
            rc = rlpi_error_set(RLP_E_CLOSED, "%s: the buffer is closed (%llu groups left, %zu wanted)", __func__,
                                (unsigned long long)buf->size, n_groups);
            break;
        }
        if (timeout_ms == 0) {
            rc = rlpi_error_set(RLP_E_AGAIN, "%s: %llu groups held, %zu wanted", __func__,
                                (unsigned long long)buf->size, n_groups);
            break;
        }
        if (!wait_until(&buf->data_cv, &buf->mu, timed ? &deadline : NULL) && buf->size < n_groups) {
            rc = rlpi_error_set(RLP_E_TIMEOUT, "%s: %zu groups wanted, %llu arrived within %u ms", __func__,
                                n_groups, (unsigned long long)buf->size, timeout_ms);
            break;
        }
    }
    size_t n_trajs = 0;
    rlpi_group *first = buf->head, *g = first;
    for (size_t i = 0; rc == RLP_OK && i < n_groups; i++, g = g->next)
        n_trajs += g->n;
    if (rc == RLP_OK)
        rc = rlpi_batch_reserve(batch, n_trajs);
    rlpi_group *taken = NULL, **tail = &taken;
    for (size_t i = 0; rc == RLP_OK && i < n_groups; i++) {
        g = buf->head;
        list_remove(buf, g);
        if (buf->has_spill && seq_push(&buf->retire_consumed, g->seq) != RLP_OK) {
            list_insert(buf, g);
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
            break;
        }
        *tail = g;
        tail = &g->next;
    }
    if (rc == RLP_OK && buf->has_spill) {
        commit_entry e = {0};
        rc = commit(buf, &e);
    }
    if (rc && taken) {
        /* nothing is taken on failure: put the groups back in order */
        for (rlpi_group *t = taken, *next; t; t = next) {
            next = t->next;
            list_insert(buf, t);
        }
        taken = NULL;
    }
    for (rlpi_group *t = taken; t; t = t->next) {
        uint64_t s = version > t->version ? version - t->version : 0;
        buf->st.staleness_hist[s < RLP_BUFFER_STALENESS_BINS ? s : RLP_BUFFER_STALENESS_BINS - 1]++;
        if (s > buf->st.max_staleness_seen)
            buf->st.max_staleness_seen = s;
        buf->st.consumed++;
    }
    if (taken)
        pthread_cond_broadcast(&buf->room_cv);
    pthread_mutex_unlock(&buf->mu);
    if (rc) {
        rlp_batch_free(batch);
        return rc;
    }
    for (rlpi_group *t = taken, *next; t; t = next) {
        next = t->next;
        for (size_t i = 0; i < t->n; i++)
            batch->items[batch->n++] = t->trajs[i]; /* reserved above: cannot fail */
        rlpi_buffer_group_free_shell(t);
    }
    *out = batch;
    return RLP_OK;
}

/* ---- stats ------------------------------------------------------------------ */

int rlp_replay_buffer_stats(rlp_buffer_stats *out, const rlp_replay_buffer *buf)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(buf, "buf is NULL");
    rlp_replay_buffer *b = (rlp_replay_buffer *)buf;
    pthread_mutex_lock(&b->mu);
    rlp_buffer_stats s = b->st;
    s.size = b->size;
    s.trajectories = b->n_trajs;
    s.spill_bytes = b->has_spill ? b->spill.bytes : 0;
    pthread_mutex_unlock(&b->mu);
    *out = s;
    return RLP_OK;
}

const rlpi_logger *rlpi_buffer_logger(const rlp_replay_buffer *b)
{
    return &b->log;
}
