/* What the two halves of `rlpost train` share: the state of one run
 * (cmd_train.c: configuration, trainer, co-located engine, eval, files) and
 * the rollout side beyond the co-located engine (train_rollout.c: remote
 * engine over rollout.urls, synchronizer, replay buffer, the rollout thread
 * of sync.mode "async"). Both use the public API only (rlpost.h). */
#ifndef RLPOST_TRAIN_H
#define RLPOST_TRAIN_H

#include "rlpost.h"

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ERR_CAP 1024

typedef struct train_rollout train_rollout;

typedef struct run {
    json_t *cfg;
    char err[ERR_CAP];
    rlp_context *ctx;
    rlp_policy *policy, *ref;
    rlp_rollout_engine *engine;  /* co-located (sync), own copy (pull), or the eval engine (remote, async) */
    rlp_tokenizer *ext_tok;      /* a tokenizer file for a model without one (token-level models) */
    const rlp_tokenizer *tok;    /* what the task renders with: the policy's, or NULL with ext_tok */
    rlp_task *task;              /* async: the rollout thread's while it runs */
    rlp_reward_fn *reward, *format_fn, *acc_fn;
    rlp_reward_fn *parse_fn;     /* 1 when the accuracy verifier finds an answer of the task's type, else 0 */
    rlp_reward_fn *terms[8];     /* a combined reward's terms, scored alone for samples.jsonl (n_terms > 1) */
    char term_names[8][64];
    size_t n_terms;
    long long overlap, overlap_checked; /* held-out prompts among the run's training prompts; -1 = not counted yet */
    double acc_threshold;
    void *reward_lib;
    rlp_sampling_options sampling;
    rlp_rl_options rl;
    rlp_optimizer_options opt;
    int pull, async, remote, dtype;
    int threads_train, threads_rollout; /* async, local engine: the two contexts' shares of `threads` */
    char weights[PATH_MAX];      /* what the policy was loaded from (the model, or the resumed checkpoint) */
    char out[PATH_MAX];
    train_rollout *ro;           /* pull with rollout.urls, async */
    int rank, world;             /* data parallelism: this process's rank of `world` (0 of 1 alone) */
    rlp_comm *comm;              /* world > 1: the ranks' process group (train_dist.c) */
    int shared_gpu;              /* backend cuda: some ranks share a GPU (the group then uses SHM, not NCCL) */
} run;

/* snprintf that callers may let truncate (paths and messages are cut, never
 * overflowed); a function so that -Wformat-truncation judges the callers'
 * sizes by the checks they do, not by worst-case argument lengths. */
__attribute__((format(printf, 3, 4))) static inline int fmt(char *buf, size_t cap, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, cap, f, ap);
    va_end(ap);
    return n;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the sampling seed of a step is a pure function of (seed, step). */
static inline uint64_t mix_seed(uint64_t seed, uint64_t step)
{
    uint64_t z = seed * UINT64_C(0x9e3779b97f4a7c15) + step + 1;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* cmd_train.c: generates one completion group per prompt of @p set on
 * @p engine (token ids from the external tokenizer when the model has
 * none, completion texts decoded with it); a group whose remote request
 * failed is generated again (twice at most), so every group comes back
 * whole. Thread-safe for distinct engines. RLP_OK, or a status with one
 * line in @p err (ERR_CAP bytes). */
int train_generate(run *r, rlp_rollout_engine *engine, const rlp_prompt_set *set, const rlp_sampling_options *s,
                   rlp_batch **out, char *err);

/* The same for prompts [first, first + count) of @p set only (a rank's share). */
int train_generate_range(run *r, rlp_rollout_engine *engine, const rlp_prompt_set *set, size_t first,
                         size_t count, const rlp_sampling_options *s, rlp_batch **out, char *err);

/* cmd_train.c: the record indices of a prompt set's prompts (a new JSON
 * array) and the epoch of its first. */
json_t *train_prompt_ids(const rlp_prompt_set *set, uint64_t *epoch);

/* ------------------------------------------------------------------------ */
/* train_dist.c: several ranks (data parallelism)                           */
/* ------------------------------------------------------------------------ */

/* Decides this process's part: alone (rank 0 of 1); a rank started by a
 * launcher (RLPOST_RANK or RANK in the environment, with the world size
 * and rendezvous beside it); or the launcher (distributed.world_size > 1
 * and no rank in the environment). Sets r->rank and r->world (the
 * launcher's: the world size, rank 0). 0: go on as this rank; 1: launch;
 * -1: bad setting (one line in r->err). */
int train_dist_resolve(run *r);

/* The launcher, torchrun-style: forks one process per rank (each returns
 * 0 here, as that rank), waits for them, forwards an interrupt sent to it,
 * and stops the other ranks when one fails. Returns 1 in the launcher
 * after its ranks ended (*exit_code: the first failure's status, or 0).
 * Call it before any thread exists. */
int train_dist_launch(run *r, int *exit_code);

/* After the context exists: joins the process group (world > 1). 0, or
 * -1 with one line in r->err. */
int train_dist_join(run *r);

/* After the policy is loaded: checks that every rank runs the same
 * configuration (a digest per top-level key; threads, device and
 * distributed may differ) and gives every rank rank 0's weights. 0, or -1
 * with one line in r->err naming the key. */
int train_dist_agree(run *r);

/* The rank's share of n items: [*first, *first + *count). */
void train_dist_share(const run *r, size_t n, size_t *first, size_t *count);

/* ------------------------------------------------------------------------ */
/* train_rollout.c                                                          */
/* ------------------------------------------------------------------------ */

/* Checks rollout.urls before anything is written: each an http(s) base
 * URL, no repeats, and (http) answering GET /health. One line in r->err
 * naming the key on failure. */
int train_rollout_check_urls(run *r);

/* What the trainer of an asynchronous run takes for one step. */
typedef struct train_step_input {
    rlp_batch *batch;           /* prompts_per_step scored groups (caller frees) */
    json_t *prompt_ids;         /* record indices of its prompts (caller owns) */
    uint64_t epoch;             /* epoch of its first prompt */
    uint64_t seed;              /* the sampling seed it was generated with */
    char cursor[512];           /* the task cursor after its prompts (a checkpoint's) */
    double trainer_idle;        /* seconds this step waited for the buffer */
    double rollout_seconds;     /* since the previous step: the rollout side's generate time, */
    double reward_seconds;      /* reward time, */
    double rollout_idle;        /* time blocked at the staleness gate or a full buffer, */
    uint64_t rollout_tokens;    /* and completion tokens generated */
    uint64_t reward_failed[4];  /* and the reward's failures: errors, timeouts, non-finite, crashed workers */
    uint64_t buffer_dropped;    /* groups dropped as stale since the previous step */
    uint64_t buffer_dropped_total, buffer_size;
} train_step_input;

/* Creates the rollout side of a pull run with rollout.urls (remote engine,
 * HTTP synchronizer) or of an async run (plus the replay buffer, and a
 * context and engine of its own unless remote), and publishes the
 * policy's current version. @p start_step: the steps already done (the
 * task's cursor stands after their prompts); the rollout thread's batch j
 * is step j + 1's. The thread starts with train_rollout_start(). 0, or -1
 * with one line in r->err. */
int train_rollout_create(run *r, long long start_step, train_rollout **out);

/* async: starts the rollout thread. */
int train_rollout_start(train_rollout *ro);

/* pull with rollout.urls: the workers load the latest version, then generate. */
int train_rollout_generate(train_rollout *ro, const rlp_prompt_set *set, const rlp_sampling_options *s,
                           rlp_batch **out);

/* async: waits for the next step's groups at the trainer's version. 0: @p in
 * filled; 1: *stop became non-zero while waiting; -1: failure (one line in
 * r->err: the rollout thread's error); -2: the staleness gate can never
 * open again (one line in r->err; a resume restarts it). */
int train_rollout_next(train_rollout *ro, volatile sig_atomic_t *stop, train_step_input *in);

/* After a train step: publishes the policy's version (no-op when unchanged). */
int train_rollout_publish(train_rollout *ro);

/* Stops the rollout thread (a generate call in flight is aborted, nothing
 * half-done is pushed) and frees everything. NULL is a no-op. */
void train_rollout_free(train_rollout *ro);

#endif
