/* rlpost-reward-worker: the helper executable of a process-isolated reward
 * function (rlp_reward_fn_create_isolated(), isolated.c). It loads a reward
 * library, creates its rlp_reward_fn and scores the requests its parent
 * sends over fd 3 (isolation_proto.h), through the public API of the
 * librlpost it links (the same shared object the library links), until the
 * socket closes. It holds no state the parent needs: crashing here is what
 * it is for. Must not write to stdout (the parent points it at stderr
 * anyway) and must not outlive its parent. */
#include "rlpost.h"
#include "reward/isolation_proto.h"

#include <dlfcn.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* RLPI_RW_* of scorer.h (not included: it is the library's internal header) */
enum { KIND_REJECTED = 1, KIND_ERROR = 2, KIND_TIMEOUT = 3, KIND_NONFINITE = 4 };

typedef int (*entry_fn)(rlp_reward_fn **out, const char *options_json);

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WORKER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define WORKER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WORKER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define WORKER_TSAN 1
#endif
/* In a sanitizer build a deliberate crash of a reward library must end the
 * worker with the signal itself (what the parent reports), not with the
 * sanitizer's report and abort; environment settings still win over these. */
#define WORKER_SAN_OPTIONS "handle_segv=0:handle_sigbus=0:handle_abort=0:allow_user_segv_handler=1"
#ifdef WORKER_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return WORKER_SAN_OPTIONS;
}
#endif
#ifdef WORKER_TSAN
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return WORKER_SAN_OPTIONS;
}
#endif

static pid_t parent_pid;

/* The parent died: PR_SET_PDEATHSIG would tie the worker to the thread
 * that spawned it, not to the process (prctl(2)), and a library cannot
 * promise that a host's scoring thread outlives the handle; so a thread
 * watches getppid() instead (the worker is re-parented when its parent
 * exits, whatever the cause). It also covers a worker stuck in a callback,
 * which never reads the socket's end-of-file. */
static void *watch_parent(void *arg)
{
    (void)arg;
    for (;;) {
        if (getppid() != parent_pid)
            _exit(0);
        usleep(200 * 1000);
    }
    return NULL;
}

/* Reads exactly n bytes; 0, or -1 at end of file or on an error. */
static int recv_all(int fd, void *p, size_t n)
{
    unsigned char *c = p;
    while (n > 0) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The next frame (*payload malloc'd); 0, or -1 (closed, error, malformed). */
static int read_frame(int fd, uint32_t *type, unsigned char **payload, uint64_t *len)
{
    rlpi_iso_frame_header h;
    if (recv_all(fd, &h, sizeof h) || h.magic != RLPI_ISO_MAGIC || h.len > RLPI_ISO_MAX_FRAME)
        return -1;
    unsigned char *p = malloc(h.len ? (size_t)h.len : 1);
    if (!p || recv_all(fd, p, (size_t)h.len)) {
        free(p);
        return -1;
    }
    *type = h.type;
    *payload = p;
    *len = h.len;
    return 0;
}

static int send_ready(int fd, int status, const char *msg)
{
    rlpi_iso_buf b = {0};
    rlpi_iso_begin(&b, RLPI_ISO_READY);
    rlpi_iso_u32(&b, (uint32_t)status);
    rlpi_iso_str(&b, msg, strlen(msg));
    int rc = rlpi_iso_end(&b) ? -1 : rlpi_iso_send_all(fd, b.p, b.len);
    free(b.p);
    return rc;
}

/* metadata with "reference" set to ref (the host passed an explicit
 * reference, e.g. rlp_reward_fn_score_one()): a new string, or NULL. */
static char *with_reference(const char *meta, size_t meta_len, const char *ref, size_t ref_len)
{
    json_error_t jerr;
    json_t *o = meta ? json_loadb(meta, meta_len, 0, &jerr) : json_object();
    if (!json_is_object(o)) {
        json_decref(o);
        o = json_object();
    }
    json_object_set_new(o, "reference", json_stringn(ref, ref_len));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        if (n)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Kind of an invalid sample: its handle's reason says which failure it
 * was when the counts of this call leave a choice (a request of several
 * samples with several kinds of failure). */
static int classify(const char *why, rlp_reward_stats *st)
{
    if (st->timeouts && why && strstr(why, "timed out after")) {
        st->timeouts--;
        return KIND_TIMEOUT;
    }
    if (st->nonfinite && why && (strstr(why, "must be finite") || strstr(why, "token score"))) {
        st->nonfinite--;
        return KIND_NONFINITE;
    }
    if (st->errors) {
        st->errors--;
        return KIND_ERROR;
    }
    return KIND_REJECTED;
}

/* Scores one SCORE frame and sends the RESULT. 0, or -1 (malformed: the
 * parent then sees the socket close). */
static int serve_score(int fd, rlp_reward_fn *fn, const unsigned char *payload, uint64_t len, rlpi_iso_buf *out)
{
    rlpi_iso_rd r = {payload, (size_t)len, 0, 0};
    uint32_t n = rlpi_iso_get_u32(&r);
    if (r.bad || n == 0 || n > 65536)
        return -1;
    rlp_batch *batch = NULL;
    if (rlp_batch_create(&batch) != RLP_OK)
        return -1;
    float *zeros = NULL;
    size_t zeros_n = 0;
    size_t *tok_n = calloc(n, sizeof *tok_n);
    int rc = tok_n ? 0 : -1;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = rlpi_iso_get_u64(&r);
        t.sample_index = rlpi_iso_get_u32(&r);
        t.policy_version = rlpi_iso_get_u64(&r);
        (void)rlpi_iso_get_u64(&r); /* batch_index: the parent maps results back by position */
        const char *prompt, *completion, *ref, *meta;
        size_t prompt_n, completion_n, ref_n, meta_n;
        rlpi_iso_get_str(&r, &prompt, &prompt_n, RLPI_ISO_MAX_FRAME);
        rlpi_iso_get_str(&r, &completion, &completion_n, RLPI_ISO_MAX_FRAME);
        uint64_t nt = rlpi_iso_get_u64(&r);
        const void *toks = nt <= RLPI_ISO_MAX_FRAME / 4 ? rlpi_iso_take(&r, (size_t)nt * sizeof(int32_t)) : NULL;
        rlpi_iso_get_str(&r, &ref, &ref_n, RLPI_ISO_MAX_FRAME);
        rlpi_iso_get_str(&r, &meta, &meta_n, RLPI_ISO_MAX_FRAME);
        if (r.bad || (nt && !toks)) {
            rc = -1;
            break;
        }
        if (nt > zeros_n) {
            float *z = realloc(zeros, (size_t)nt * sizeof *z);
            if (!z) {
                rc = -1;
                break;
            }
            memset(z, 0, (size_t)nt * sizeof *z);
            zeros = z;
            zeros_n = (size_t)nt;
        }
        /* the tokens are unaligned inside the frame: copy them */
        int32_t *tk = nt ? malloc((size_t)nt * sizeof *tk) : NULL;
        char *ptext = dup_n(prompt ? prompt : "", prompt_n);
        char *ctext = dup_n(completion ? completion : "", completion_n);
        char *mtext = ref ? with_reference(meta, meta_n, ref, ref_n) : meta ? dup_n(meta, meta_n) : NULL;
        if ((nt && !tk) || !ptext || !ctext || ((ref || meta) && !mtext)) {
            rc = -1;
        } else {
            if (nt)
                memcpy(tk, toks, (size_t)nt * sizeof *tk);
            t.completion_tokens = tk;
            t.n_completion_tokens = (size_t)nt;
            t.logprobs = nt ? zeros : NULL; /* required by append; no reward reads them */
            t.prompt_text = ptext;
            t.completion_text = ctext;
            t.metadata_json = mtext;
            t.finish_reason = RLP_FINISH_STOP;
            t.stop_index = -1;
            t.temperature = 1.0f;
            t.reward = NAN;
            t.valid = 1;
            tok_n[i] = (size_t)nt;
            rc = rlp_batch_append(batch, &t) == RLP_OK ? 0 : -1;
        }
        free(tk);
        free(ptext);
        free(ctext);
        free(mtext);
    }
    free(zeros);
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    if (rc == 0 && rlp_reward_fn_score(fn, batch, &st) != RLP_OK) {
        fprintf(stderr, "rlpost-reward-worker: scoring failed: %s\n", rlp_error_last());
        rc = -1;
    }
    if (rc == 0) {
        rlpi_iso_begin(out, RLPI_ISO_RESULT);
        rlpi_iso_u32(out, n);
        for (uint32_t i = 0; i < n; i++) {
            rlp_trajectory t;
            memset(&t, 0, sizeof t);
            t.version = RLP_TRAJECTORY_VERSION;
            rlp_batch_get(&t, batch, i);
            const char *why = t.error ? t.error : "";
            rlpi_iso_u32(out, t.valid ? 1u : 0u);
            rlpi_iso_u32(out, t.valid ? 0u : (uint32_t)classify(t.error, &st));
            rlpi_iso_f64(out, t.valid ? (double)t.reward : NAN);
            size_t wl = strlen(why);
            rlpi_iso_str(out, why, wl < RLP_REWARD_REASON_MAX - 1 ? wl : RLP_REWARD_REASON_MAX - 1);
            int tokens = t.valid && t.token_rewards && tok_n[i];
            rlpi_iso_u64(out, tokens ? tok_n[i] : 0);
            if (tokens)
                rlpi_iso_put(out, t.token_rewards, tok_n[i] * sizeof(float));
        }
        rc = rlpi_iso_end(out) ? -1 : rlpi_iso_send_all(fd, out->p, out->len);
    }
    free(tok_n);
    rlp_batch_free(batch);
    return rc;
}

int main(int argc, char **argv)
{
    /* argv[1]: the parent's pid, so that a parent that died before we got
     * here is noticed at once */
    parent_pid = argc > 1 ? (pid_t)strtol(argv[1], NULL, 10) : getppid();
    if (getppid() != parent_pid)
        return 0;
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_parent, NULL) != 0)
        return 1;
    pthread_detach(watcher);

    int fd = RLPI_ISO_FD;
    uint32_t type;
    unsigned char *payload;
    uint64_t len;
    if (read_frame(fd, &type, &payload, &len) || type != RLPI_ISO_INIT)
        return 1;
    rlpi_iso_rd r = {payload, (size_t)len, 0, 0};
    uint32_t proto = rlpi_iso_get_u32(&r);
    const char *lib, *opts;
    size_t lib_n, opts_n;
    rlpi_iso_get_str(&r, &lib, &lib_n, 65536);
    rlpi_iso_get_str(&r, &opts, &opts_n, RLPI_ISO_MAX_FRAME);
    char *lib_s = lib ? dup_n(lib, lib_n) : NULL, *opts_s = opts ? dup_n(opts, opts_n) : NULL;
    free(payload);
    if (r.bad || proto != RLPI_ISO_PROTOCOL || !lib_s || (opts && !opts_s)) {
        send_ready(fd, RLP_E_FORMAT, "rlpost-reward-worker: bad start message (a worker of another version?)");
        free(lib_s);
        free(opts_s);
        return 1;
    }
    char msg[1024];
    rlp_reward_fn *fn = NULL;
    int rc = RLP_E_CALLBACK;
    void *h = dlopen(lib_s, RTLD_NOW | RTLD_LOCAL);
    entry_fn entry = NULL;
    if (!h) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "%s", e ? e : lib_s);
    } else if (!(*(void **)&entry = dlsym(h, "rlpost_reward_create"))) {
        snprintf(msg, sizeof msg, "'%s' does not export rlpost_reward_create()", lib_s);
    } else if ((rc = entry(&fn, opts_s)) != RLP_OK || !fn) {
        snprintf(msg, sizeof msg, "rlpost_reward_create() of '%s' failed (%d): %s", lib_s, rc, rlp_error_last());
        rc = RLP_E_CALLBACK;
    }
    free(lib_s);
    free(opts_s);
    if (rc != RLP_OK || !fn) {
        send_ready(fd, rc ? rc : RLP_E_CALLBACK, msg);
        return 1;
    }
    if (send_ready(fd, 0, ""))
        return 1;
    rlpi_iso_buf out = {0};
    while (read_frame(fd, &type, &payload, &len) == 0) {
        rc = type == RLPI_ISO_SCORE ? serve_score(fd, fn, payload, len, &out) : -1;
        free(payload);
        if (rc)
            break;
    }
    free(out.p);
    /* the socket closed (the handle is being freed), or a request could not
     * be served: the parent then reads "exited with status 1" */
    rlp_reward_fn_free(fn);
    /* the library stays loaded: abandoned calls of its handle may still run */
    return rc ? 1 : 0;
}
