/* The body of rlp_trainer and rlp_rollout_worker, for trainer.c,
 * trainer_state.c, step_record.c and rollout_worker.c. */
#ifndef RLPI_TRAINER_IMPL_H
#define RLPI_TRAINER_IMPL_H

#include "train_internal.h"

#include <pthread.h>
#include <stdatomic.h>

enum { RLPI_CURSOR_CAP = 512, RLPI_MAX_URLS = 64 };

/* Most engines (lanes) of one rollout worker: batches generating at once. */
#define RLPI_MAX_LANES 16

/* One lane: an engine and the thread that runs batches on it. */
typedef struct rlpi_rollout_lane {
    rlp_rollout_engine *engine;   /* borrowed */
    uint64_t id_tag;              /* bits 48–62 of its engine-numbered group ids (see rollout_worker.c) */
    pthread_t th;
} rlpi_rollout_lane;

struct rlp_rollout_worker {
    rlp_rollout_worker_options o;
    rlpi_rollout_lane lanes[RLPI_MAX_LANES];
    size_t n_lanes;               /* 1 + the engines of rlp_rollout_worker_add_engine() */
    struct lane_arg {
        struct rlp_rollout_worker *w;
        size_t lane;
    } lane_args[RLPI_MAX_LANES];
    rlp_task *task;
    rlp_reward_fn *reward;
    rlp_synchronizer *sync;
    rlp_replay_buffer *buf;
    const rlp_tokenizer *tok;     /* renders the prompts (NULL with ext_tok) */
    const rlp_tokenizer *ext_tok; /* encodes prompts / decodes completions for a model without a tokenizer */
    pthread_mutex_t admit_mu;     /* the gate's slots for one batch, next_batch, the task's cursor */
    pthread_mutex_t order_mu;     /* next_push */
    pthread_cond_t order_cv;      /* a batch was pushed */
    uint64_t next_batch;          /* j of the next batch drawn */
    uint64_t next_push;           /* j of the next batch to push: batches enter the buffer in order */
    char *outbox;                 /* o.outbox_dir's copy, or NULL */
    uint64_t outbox_nonce;        /* in the outbox's file names */
    int started;                  /* threads started */
    atomic_int stopping, running, at_gate, failed_rc; /* running, at_gate: lanes (at_gate: also waiting for admit_mu) */
    char err[1024];               /* written once before failed_rc is set */
    pthread_mutex_t mu;           /* stats, fail() */
    rlp_rollout_worker_stats st;
    unsigned pull_warnings;
    rlpi_sampling_copy sampling_copy; /* what o.sampling's stop arrays point to */
};

struct rlp_trainer {
    rlp_trainer_options o;
    rlp_trainer_metric metrics[RLP_TRAINER_MAX_METRICS];
    size_t n_metrics;
    char *urls[RLPI_MAX_URLS];     /* (n_urls) the remote workers now, under urls_mu */
    size_t n_urls;
    pthread_mutex_t urls_mu;       /* urls, and t->sync's creation (rlp_trainer_set_worker_urls) */
    char *api_key, *weights_dir;
    char *inbox;                   /* rollout_inbox's copy, or NULL */
    rlpi_sampling_copy sampling_copy; /* what o.sampling's stop arrays point to */
    rlp_policy *policy;
    rlp_task *task;
    rlp_reward_fn *reward;
    const rlp_tokenizer *tok;      /* what the task renders with: the policy's, or NULL with ext_tok */
    const rlp_tokenizer *ext_tok;  /* options.tokenizer for a model without one */
    int remote;                    /* worker_urls given, or remote_workers */
    int rank, world;
    rlp_rollout_engine *engine;    /* SYNC: shares the policy's weights; PULL: local copy or remote */
    rlp_rollout_engine *eval_engine; /* ASYNC and remote PULL: evaluations on the trainer's context */
    rlp_context *ro_ctx;           /* ASYNC, rollout_threads > 0: the rollout side's context */
    rlp_rollout_engine *ro_engine; /* ASYNC: the rollout worker's engine */
    rlp_rollout_engine *ro_lanes[RLPI_MAX_LANES - 1]; /* ASYNC, remote: its other engines (η of them) */
    size_t n_ro_lanes;
    rlp_synchronizer *sync;        /* remote PULL, ASYNC */
    rlp_replay_buffer *buf;        /* ASYNC */
    rlp_rollout_worker *worker;    /* ASYNC */
    uint64_t steps_done, start_step;
    int failed, stopped;
    atomic_int interrupt;
    char cursor[RLPI_CURSOR_CAP];  /* ASYNC: the task cursor after the last trained prompt */
    rlp_step_record last;
    int have_last;
    uint64_t *prompt_ids;          /* the last record's prompt_index */
    size_t cap_ids;
    rlp_rollout_worker_stats seen; /* ASYNC: the worker's counters at the previous step */
    uint64_t seen_dropped;
    unsigned pull_warnings;
    char *critic_path;             /* o.critic_path's copy, or NULL */
    rlp_policy *critic;            /* PPO's value model (critic.c), or NULL */
};

/* critic.c: PPO with a critic. create: from o.critic_path (nothing
 * without one); step: values, the RL step on GAE advantages and the
 * critic's updates, filling rec's value figures and rec->rl; save/load:
 * <dir>/critic of a checkpoint (nothing without a critic). */
int rlpi_train_critic_create(rlp_trainer *t);
struct rlpi_rl_mismatch;
int rlpi_train_critic_step(rlp_trainer *t, const rlp_batch *b, rlp_step_record *rec, struct rlpi_rl_mismatch *mm);
int rlpi_train_critic_save(rlp_trainer *t, const char *dir, int dtype);
int rlpi_train_critic_load(rlp_trainer *t, const char *dir);

/* step_record.c: the record as JSON (malloc'd text, NULL when out of memory). */
char *rlpi_train_record_json(const rlp_trainer *t, const rlp_step_record *r);

/* trainer_state.c: the cursor @p tmpl (a cursor JSON of the same task)
 * moved to (epoch, position), as new malloc'd text in *out. */
int rlpi_train_cursor_at(const char *tmpl, size_t cap, uint64_t epoch, uint64_t position, char **out);

/* trainer.c: room for n prompt record indices in t->prompt_ids. */
int rlpi_train_keep_prompt_ids(rlp_trainer *t, size_t n);

/* trainer.c: one batch of a SYNC or PULL step: the task's next
 * prompts_per_step prompts (this rank's share) generated on @p e with
 * sampling seed @p seed, scored into @p br (reduced over the ranks);
 * *gen_end: when the generation ended; the prompt set in *set_out. */
int rlpi_train_gen_batch(rlp_trainer *t, rlp_rollout_engine *e, uint64_t seed, rlp_step_record *br, rlp_batch **out,
                         rlp_prompt_set **set_out, double *gen_end);

/* dynamic_sampling.c: a SYNC/PULL step's batch under DAPO dynamic sampling
 * (filter_equal_groups with max_gen_batches, one rank), generated on @p e
 * from step seed @p seed; RLP_E_STATE past the cap. */
int rlpi_train_collect_dynamic(rlp_trainer *t, rlp_rollout_engine *e, uint64_t seed, double t0, rlp_step_record *rec,
                               rlp_batch **out);

/* rollout_worker.c: the warning of a failed remote pull (every 20th). */
void rlpi_train_pull_warning(unsigned *count, rlp_log_fn fn, void *payload, int rc);

#endif
