/* Multi-turn episodes on the local generator. Between two turns a
 * sequence keeps its KV slot and waits in SEQ_ENV while the environment
 * answers on its own threads; the decode loop goes on with the others and
 * polls here each step. An observation is encoded piece by piece and its
 * ids pushed after the turn's sampled ids (loss mask 0): the episode's
 * ids are never re-encoded from text, so they are exactly what the model
 * saw and what the trainer recomputes. */
#include "rollout/local_gen.h"

#include "core/clock.h"
#include "core/error.h"
#include "model/policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rlpi_episode_free(seq_episode *epi)
{
    if (!epi)
        return;
    rlpi_env_call_release(epi->call);
    rlpi_env_ep_release(epi->ep);
    rlpi_episode_acc_clear(&epi->acc);
    free(epi);
}

int rlpi_episode_setup(gen_ctx *g, seq_state *q)
{
    seq_episode *epi = calloc(1, sizeof *epi);
    if (!epi)
        return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
    q->epi = epi;
    epi->es.version = RLP_EPISODE_STATS_VERSION;
    epi->turn_reason = RLP_FINISH_STOP;
    int rc = rlpi_episode_text_append(&epi->acc, "", 0);
    if (!rc)
        rc = rlpi_env_ep_create(&epi->ep, g->mt->env);
    const char *meta = q->traj.metadata;
    if (!rc)
        rc = rlpi_env_call_submit(&epi->call, epi->ep, RLPI_ENV_RESET, meta, meta ? strlen(meta) : 0, NULL, 0);
    if (!rc)
        g->n_calls++;
    return rc;
}

/* Ends the episode as failed: the sample is invalid, the others go on.
 * Its finish_reason stays how its last turn ended: RLP_FINISH_ERROR means
 * a failed remote request, which a trainer generates again, while an
 * environment's failure is the sample's own outcome. */
static int fail(gen_ctx *g, seq_state *q, const char *what, const char *why, int64_t *free_slots, int64_t *n_free)
{
    char msg[512];
    snprintf(msg, sizeof msg, "environment '%s': %s: %s", rlp_env_name(g->mt->env), what,
             why ? why : "failed");
    free(q->traj.error);
    q->traj.error = strdup(msg);
    if (!q->traj.error)
        return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
    q->traj.valid = 0;
    q->epi->es.end = RLP_EPISODE_ERROR;
    return rlpi_gen_finish(g, q, q->epi->turn_reason, free_slots, n_free, true);
}

/* A reply has come for q: end the episode, or append the observation and
 * let the model write its next turn. */
static int take_reply(gen_ctx *g, seq_state *q, rlpi_env_call *c, uint64_t version, int64_t capacity,
                      int64_t *free_slots, int64_t *n_free)
{
    seq_episode *epi = q->epi;
    const rlp_env_reply *r = rlpi_env_call_reply(c);
    bool reset = q->state == SEQ_QUEUED;
    int rc = RLP_OK;
    if (!reset) {
        if (rlpi_env_reply_is_tool_call(r))
            epi->es.tool_calls++;
        if (r->has_reward && (rc = rlpi_episode_add_turn_reward(&epi->acc, epi->turn_last, r->reward)) != RLP_OK)
            return rc;
    }
    if (r->tool_error)
        epi->es.tool_errors++;
    if (r->metadata && (rc = rlpi_episode_set_meta(&epi->acc, r->metadata)) != RLP_OK)
        return rc;
    if (r->done)
        return epi->es.end = RLP_EPISODE_DONE, rlpi_gen_finish(g, q, RLP_FINISH_STOP, free_slots, n_free, true);
    if (!reset && epi->es.turns >= g->mt->max_turns)
        return epi->es.end = RLP_EPISODE_MAX_TURNS, rlpi_gen_finish(g, q, RLP_FINISH_STOP, free_slots, n_free, true);
    int32_t *ids = NULL;
    size_t n = 0;
    char bad[160] = "";
    size_t text_mark = epi->acc.len;
    rc = rlpi_episode_encode_reply(&epi->acc, g->e->tok, rlpi_transformer_config(g->e->policy->tf)->vocab_size, r,
                                   &ids, &n, bad, sizeof bad);
    if (rc || bad[0]) {
        free(ids);
        return rc ? rc : fail(g, q, reset ? "reset" : "step", bad, free_slots, n_free);
    }
    /* the next turn needs room for the observation and at least one token */
    if (q->traj.n_tokens + n + 1 > g->max_tokens || (int64_t)(q->n_prompt + q->traj.n_tokens + n + 1) > capacity) {
        free(ids);
        rlpi_episode_text_cut(&epi->acc, text_mark); /* the observation is not part of the episode */
        epi->es.observations_cut++;
        epi->es.end = RLP_EPISODE_BUDGET;
        return rlpi_gen_finish(g, q, RLP_FINISH_LENGTH, free_slots, n_free, true);
    }
    rc = rlpi_traj_push_observation(&q->traj, ids, n, version);
    free(ids);
    if (rc)
        return rc;
    epi->es.observation_tokens += (uint32_t)n;
    epi->es.observations_cut += r->truncated;
    if (q->sm)
        rlpi_stop_matcher_reset(q->sm);
    epi->turn_start = q->traj.n_tokens;
    epi->turn_open = true;
    if (!reset)
        q->state = SEQ_RUNNING; /* keeps its slot: the next extend feeds the observation */
    return RLP_OK;
}

int rlpi_episode_poll(gen_ctx *g, uint64_t version, int64_t capacity, int64_t *free_slots, int64_t *n_free)
{
    double now = rlpi_now_s();
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < g->N; i++) {
        seq_state *q = &g->seqs[i];
        seq_episode *epi = q->epi;
        if (!epi || !epi->call || q->state == SEQ_DONE)
            continue;
        int st = rlpi_env_call_poll(epi->call, now);
        if (st == RLPI_CALL_RUNNING)
            continue;
        rlpi_env_call *c = epi->call;
        epi->call = NULL;
        g->n_calls--;
        const char *what = q->state == SEQ_QUEUED ? "reset" : "step";
        if (st == RLPI_CALL_TIMED_OUT) {
            const rlp_env_options *o = rlpi_env_options(g->mt->env);
            epi->es.tool_timeouts++;
            epi->es.tool_errors++;
            epi->es.tool_seconds += 1e-3 * o->timeout_ms;
            rlpi_env_call_release(c); /* abandoned: its thread ends alone */
            char why[96];
            snprintf(why, sizeof why, "no answer within the %u ms deadline", o->timeout_ms);
            rc = fail(g, q, what, why, free_slots, n_free);
            continue;
        }
        epi->es.tool_seconds += rlpi_env_call_seconds(c);
        const char *err = NULL;
        if (rlpi_env_call_status(c, &err) != RLP_OK) {
            epi->es.tool_errors++;
            rc = fail(g, q, what, err, free_slots, n_free);
        } else {
            rc = take_reply(g, q, c, version, capacity, free_slots, n_free);
        }
        rlpi_env_call_release(c);
    }
    return rc;
}

int rlpi_episode_turn_end(gen_ctx *g, seq_state *q, int reason, int64_t capacity, int64_t *free_slots,
                          int64_t *n_free)
{
    seq_episode *epi = q->epi;
    epi->es.turns++;
    int rc = RLP_OK;
    size_t tl = 0;
    const char *t = "";
    if (q->sm) {
        const char *d;
        size_t dn;
        if (reason != RLP_FINISH_STOP && (rc = rlpi_stop_matcher_finish(q->sm, &d, &dn)) != RLP_OK)
            return rc;
        t = rlpi_stop_matcher_text(q->sm, &tl);
    }
    if ((rc = rlpi_episode_text_append(&epi->acc, t, tl)) != RLP_OK)
        return rc;
    epi->turn_open = false;
    epi->turn_reason = reason;
    epi->turn_last = q->traj.n_tokens - 1;
    int64_t ctx = (int64_t)(q->n_prompt + q->traj.n_tokens);
    if (reason == RLP_FINISH_LENGTH && (ctx >= capacity || q->traj.n_tokens >= g->max_tokens)) {
        epi->es.end = RLP_EPISODE_BUDGET;
        return rlpi_gen_finish(g, q, RLP_FINISH_LENGTH, free_slots, n_free, true);
    }
    rc = rlpi_env_call_submit(&epi->call, epi->ep, RLPI_ENV_STEP, epi->acc.text + epi->acc.len - tl, tl,
                              q->traj.tokens + epi->turn_start, q->traj.n_tokens - epi->turn_start);
    if (rc)
        return rc;
    g->n_calls++;
    q->state = SEQ_ENV;
    return RLP_OK;
}

int rlpi_episode_close(gen_ctx *g, seq_state *q, int reason)
{
    seq_episode *epi = q->epi;
    int rc = RLP_OK;
    if (epi->turn_open && q->sm) { /* ended inside a turn (abort): keep what it wrote */
        size_t tl;
        const char *t = rlpi_stop_matcher_text(q->sm, &tl);
        if ((rc = rlpi_episode_text_append(&epi->acc, t, tl)) != RLP_OK)
            return rc;
        epi->turn_open = false;
    }
    if (epi->es.end == RLP_EPISODE_RUNNING)
        epi->es.end = reason == RLP_FINISH_ABORT   ? RLP_EPISODE_ABORT
                      : reason == RLP_FINISH_ERROR ? RLP_EPISODE_ERROR
                      : reason == RLP_FINISH_LENGTH ? RLP_EPISODE_BUDGET
                                                    : RLP_EPISODE_DONE;
    if (epi->call) { /* aborted while the environment ran */
        rlpi_env_call_release(epi->call);
        epi->call = NULL;
        g->n_calls--;
    }
    if ((rc = rlpi_episode_finalize(&epi->acc, &q->traj, &epi->es)) != RLP_OK)
        return rc;
    rlpi_env_ep_release(epi->ep);
    epi->ep = NULL;
    return RLP_OK;
}
