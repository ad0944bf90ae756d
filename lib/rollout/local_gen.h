/* The local generator's per-call state, shared by its decode loop
 * (engine_local.c) and the multi-turn episode logic (episode_local.c). */
#ifndef RLPI_ROLLOUT_LOCAL_GEN_H
#define RLPI_ROLLOUT_LOCAL_GEN_H

#include "rollout/engine.h"
#include "rollout/stop_matcher.h"
#include "backend/sampler.h"
#include "env/env_internal.h"
#include "rollout/episode_common.h"

enum {
    SEQ_QUEUED = 0,   /* not started (in episodes: may wait for its reset) */
    SEQ_RUNNING = 1,  /* holds a slot and decodes */
    SEQ_DONE = 2,
    SEQ_ENV = 3       /* an episode between turns: holds its slot (and KV) while the environment answers */
};

/* A multi-turn episode's state beside its trajectory. */
typedef struct seq_episode {
    rlpi_env_ep *ep;
    rlpi_env_call *call;        /* the reset or step in flight, or NULL */
    size_t turn_start;          /* index of the current turn's first token */
    size_t turn_last;           /* index of the last turn's last model token */
    int turn_reason;            /* how the last turn ended (RLP_FINISH_STOP before any) */
    bool turn_open;             /* the model is writing a turn (its text is still in the matcher) */
    rlpi_episode_acc acc;       /* text, turn rewards, metadata (episode_common.h) */
    rlp_episode_stats es;
} seq_episode;

typedef struct seq_state {
    size_t prompt;              /* index in the call */
    uint32_t j;                 /* sample index within the group */
    uint64_t stream;
    const int32_t *ids;         /* (n_prompt) borrowed from the call's prompt table */
    size_t n_prompt;
    rlpi_traj traj;
    rlpi_stop_matcher *sm;      /* NULL without a tokenizer */
    const rlp_sampling_options *s; /* this prompt's options */
    rlpi_sampler_params sp;
    const int32_t *stop_ids;    /* EOS (unless ignored) + the prompt's own, shared by its samples */
    size_t n_stop_ids;
    int64_t slot;
    int64_t filled;             /* context rows whose keys/values are in the slot */
    uint64_t epoch;             /* weights epoch those rows were computed with */
    int state;
    bool started;               /* has a policy_version */
    seq_episode *epi;           /* NULL unless the call runs episodes */
} seq_state;

typedef struct gen_ctx {
    rlp_rollout_engine *e;
    const rlp_sampling_options *sp; /* (n_prompts) resolved */
    size_t n_prompts;
    rlp_stream_fn cb;
    void *payload;
    seq_state *seqs;            /* (N) prompt-major */
    size_t N, n_done;
    int32_t **stop_ids;         /* (n_prompts) */
    char *delta;                /* stream text of the current event */
    size_t delta_cap;
    const rlp_multiturn_options *mt; /* NULL: single-turn generate */
    uint32_t max_tokens;        /* episode budget after the prompt */
    size_t n_calls;             /* environment calls in flight */
} gen_ctx;



int rlpi_gen_finish(gen_ctx *g, seq_state *q, int reason, int64_t *free_slots, int64_t *n_free, bool emit);

/* Episodes (episode_local.c). */
int rlpi_episode_setup(gen_ctx *g, seq_state *q);
void rlpi_episode_free(seq_episode *epi);
/* A turn of q ended (reason STOP or LENGTH, before finish): asks the
 * environment, or ends the episode by its limits. */
int rlpi_episode_turn_end(gen_ctx *g, seq_state *q, int reason, int64_t capacity, int64_t *free_slots,
                          int64_t *n_free);
/* Takes in the environment's answers that have come (and the deadlines
 * that have passed); `version` is stamped on observation tokens. */
int rlpi_episode_poll(gen_ctx *g, uint64_t version, int64_t capacity, int64_t *free_slots, int64_t *n_free);
/* Puts the episode's text, record, rewards and metadata on q->traj (from finish). */
int rlpi_episode_close(gen_ctx *g, seq_state *q, int reason);

#endif
