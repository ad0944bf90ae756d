/* The local generator: continuous batching over KV-cache slots. Each step
 * (1) parks for pending weight updates and applies the interrupt mode to
 * sequences whose cache was built with older weights, (2) refills free
 * slots from the queue, sharing a prompt's prefill among the samples of
 * its group, (3) runs one rlpi_transformer_extend() over every running
 * sequence (prompt chunks and single decode tokens together) and (4)
 * samples one token for each sequence whose context is fully cached, on
 * the backend (rlpi_op_sample_rows: the logits stay there; only ids and
 * logprobs come back).
 * Sampling never depends on the batch: sample j of group g draws its k-th
 * token with the uniform number (seed, stream(g, j), k). */
#include "rollout/local_gen.h"

#include "core/clock.h"
#include "core/error.h"
#include "backend/qmat.h"
#include "core/log.h"
#include "model/policy.h"
#include "model/qweights.h"
#include "model/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* most tokens run through one extend call: bounds the workspace of a step
 * (prompts longer than this are prefilled in chunks over several steps) */
#define PREFILL_BUDGET 2048

/* The id of the token that ends an assistant turn in the tokenizer's chat
 * template when it is one token (Gemma 3's <end_of_turn>), else -1. */
static int32_t end_of_turn_id(const rlp_tokenizer *tok)
{
    const char *name = tok ? rlp_tokenizer_chat_template(tok) : NULL;
    int kind;
    const char *eot;
    if (!name || rlpi_chat_template_detect(&kind, name) != RLP_OK || !(eot = rlpi_chat_template_end_of_turn(kind)))
        return -1;
    int32_t ids[2];
    size_t n = 0;
    if (rlp_tokenizer_encode(tok, eot, strlen(eot), RLP_ENCODE_PARSE_SPECIAL, ids, 2, &n) != RLP_OK || n != 1)
        return -1;
    return ids[0];
}

static int32_t ctx_token(const seq_state *q, int64_t i)
{
    return i < (int64_t)q->n_prompt ? q->ids[i] : q->traj.tokens[i - (int64_t)q->n_prompt];
}

static int64_t ctx_len(const seq_state *q)
{
    return (int64_t)(q->n_prompt + q->traj.n_tokens);
}

static int delta_append(gen_ctx *g, size_t *len, const char *text, size_t n)
{
    if (*len + n + 1 > g->delta_cap) {
        size_t cap = (*len + n + 1) * 2;
        char *d = realloc(g->delta, cap);
        if (!d)
            return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
        g->delta = d;
        g->delta_cap = cap;
    }
    if (n)
        memcpy(g->delta + *len, text, n);
    *len += n;
    g->delta[*len] = '\0';
    return RLP_OK;
}

/* Ends a sequence: its text, its slot back to the pool, a final stream
 * event (with the text the matcher still held) when `emit` is set. An
 * episode's text and record come from episode_local.c. */
int rlpi_gen_finish(gen_ctx *g, seq_state *q, int reason, int64_t *free_slots, int64_t *n_free, bool emit)
{
    size_t dlen = 0;
    int rc = RLP_OK;
    bool turn_open = !q->epi || q->epi->turn_open;
    if (q->sm && turn_open) {
        const char *d = NULL;
        size_t n = 0;
        if (reason != RLP_FINISH_STOP && (rc = rlpi_stop_matcher_finish(q->sm, &d, &n)) != RLP_OK)
            return rc;
        if ((rc = delta_append(g, &dlen, d, n)) != RLP_OK)
            return rc;
    }
    if (q->epi) {
        if ((rc = rlpi_episode_close(g, q, reason)) != RLP_OK)
            return rc;
    } else if (q->sm) {
        size_t tl;
        const char *t = rlpi_stop_matcher_text(q->sm, &tl);
        q->traj.text = malloc(tl + 1);
        if (!q->traj.text)
            return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
        memcpy(q->traj.text, t, tl);
        q->traj.text[tl] = '\0';
    } else {
        q->traj.text = strdup("");
        if (!q->traj.text)
            return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    }
    if (q->sm)
        q->traj.stop_index = rlpi_stop_matcher_matched_string(q->sm);
    q->traj.finish_reason = reason;
    if (q->slot >= 0)
        free_slots[(*n_free)++] = q->slot;
    q->slot = -1;
    q->state = SEQ_DONE;
    g->n_done++;
    if (emit && g->cb) {
        rlp_stream_event ev = {.version = 1, .prompt_index = q->prompt, .sample_index = q->j, .token = -1,
                               .policy_version = q->traj.policy_version, .text = g->delta ? g->delta : "",
                               .text_len = dlen, .finish_reason = reason};
        g->cb(&ev, g->payload); /* the sequence has ended: its answer is moot */
    }
    return RLP_OK;
}

#define finish rlpi_gen_finish

/* Records a sampled token, runs the stop rules, streams it. */
static int accept_token(gen_ctx *g, seq_state *q, int32_t tok, float lp, uint64_t version, int64_t capacity,
                        int64_t *free_slots, int64_t *n_free)
{
    int rc = rlpi_traj_push_token(&q->traj, tok, lp, version);
    if (rc)
        return rc;
    bool stopped = false;
    for (size_t i = 0; i < q->n_stop_ids; i++)
        stopped |= tok == q->stop_ids[i];
    size_t dlen = 0;
    if (q->sm) {
        const char *d;
        size_t n;
        bool s2 = false;
        if ((rc = rlpi_stop_matcher_push(q->sm, tok, &s2, &d, &n)) != RLP_OK ||
            (rc = delta_append(g, &dlen, d, n)) != RLP_OK)
            return rc;
        stopped |= s2;
    }
    int reason = RLP_FINISH_NONE;
    /* max_new_tokens bounds a turn; an episode also has its token budget */
    size_t turn_tokens = q->traj.n_tokens - (q->epi ? q->epi->turn_start : 0);
    if (stopped)
        reason = RLP_FINISH_STOP;
    else if (turn_tokens >= q->s->max_new_tokens || ctx_len(q) >= capacity ||
             (q->epi && q->traj.n_tokens >= g->max_tokens))
        reason = RLP_FINISH_LENGTH;
    int verdict = 0;
    if (g->cb) {
        rlp_stream_event ev = {.version = 1, .prompt_index = q->prompt, .sample_index = q->j, .token = tok,
                               .logprob = lp, .policy_version = version, .text = g->delta ? g->delta : "",
                               .text_len = dlen, .finish_reason = RLP_FINISH_NONE};
        verdict = g->cb(&ev, g->payload);
    }
    if (reason == RLP_FINISH_NONE && verdict != 0)
        reason = RLP_FINISH_ABORT;
    if (q->epi && (reason == RLP_FINISH_STOP || reason == RLP_FINISH_LENGTH))
        return rlpi_episode_turn_end(g, q, reason, capacity, free_slots, n_free);
    if (reason != RLP_FINISH_NONE)
        return finish(g, q, reason, free_slots, n_free, true);
    return RLP_OK;
}

static void seqs_free(gen_ctx *g)
{
    for (size_t i = 0; g->seqs && i < g->N; i++) {
        rlpi_traj_clear(&g->seqs[i].traj);
        rlpi_stop_matcher_free(g->seqs[i].sm);
        rlpi_episode_free(g->seqs[i].epi);
    }
    free(g->seqs);
    for (size_t p = 0; g->stop_ids && p < g->n_prompts; p++)
        free(g->stop_ids[p]);
    free(g->stop_ids);
    free(g->delta);
}

static int setup(gen_ctx *g, const rlp_prompt *prompts, size_t n_prompts, const int32_t **ids, const size_t *lens,
                 uint64_t group_base)
{
    rlp_rollout_engine *e = g->e;
    const rlpi_model_config *cfg = rlpi_transformer_config(e->policy->tf);
    g->N = 0;
    for (size_t p = 0; p < n_prompts; p++)
        g->N += g->sp[p].n;
    g->seqs = calloc(g->N, sizeof *g->seqs);
    g->stop_ids = calloc(n_prompts, sizeof *g->stop_ids);
    if (!g->seqs || !g->stop_ids)
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    int32_t eos = -1;
    if (e->tok)
        rlp_tokenizer_special_id(&eos, e->tok, RLP_TOKEN_EOS);
    else
        eos = cfg->eos_id;
    /* the chat template's end-of-turn token ends generation too, as in
     * llama.cpp's end-of-generation set: Gemma 3's GGUF names <eos> as EOS
     * but its turns end with <end_of_turn> */
    int32_t eot = end_of_turn_id(e->tok);
    if (eot == eos)
        eot = -1;
    size_t k = 0;
    for (size_t p = 0; p < n_prompts; p++) {
        const rlp_sampling_options *s = &g->sp[p];
        if (s->n_stop && !e->tok)
            return rlpi_error_set(RLP_E_STATE, "generate: stop strings need a tokenizer and the model has none");
        int32_t *stops = malloc((s->n_stop_token_ids + 2) * sizeof *stops);
        if (!stops)
            return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
        g->stop_ids[p] = stops;
        size_t n_stops = 0;
        if (!s->ignore_eos && eos >= 0)
            stops[n_stops++] = eos;
        if (!s->ignore_eos && eot >= 0)
            stops[n_stops++] = eot;
        for (size_t i = 0; i < s->n_stop_token_ids; i++)
            stops[n_stops++] = s->stop_token_ids[i];
        rlpi_stop_config sc = {.stop = s->stop, .n_stop = s->n_stop, .stop_ids = stops, .n_stop_ids = n_stops,
                               .include_stop_str = s->include_stop_str != 0 || g->mt != NULL};
        /* (an episode's text keeps each turn's stop string: "</search>" is part of the action) */
        uint64_t group = rlpi_engine_group_id(&prompts[p], p, group_base);
        uint64_t stream_group = prompts[p].group_id ? prompts[p].group_id : p;
        for (uint32_t j = 0; j < s->n; j++, k++) {
            seq_state *q = &g->seqs[k];
            q->prompt = p;
            q->j = j;
            q->s = s;
            q->sp = (rlpi_sampler_params){s->temperature, s->top_k, s->top_p, s->min_p, s->logprobs_mode};
            q->stop_ids = stops;
            q->n_stop_ids = n_stops;
            q->stream = rlpi_engine_stream(stream_group, j);
            q->ids = ids[p];
            q->n_prompt = lens[p];
            q->slot = -1;
            q->traj.group_id = group;
            q->traj.sample_index = j;
            q->traj.temperature = s->temperature;
            q->traj.reward = NAN;
            q->traj.valid = 1;
            q->traj.stop_index = -1;
            q->traj.n_prompt = lens[p];
            q->traj.prompt = malloc(lens[p] * sizeof(int32_t));
            if (!q->traj.prompt)
                return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
            memcpy(q->traj.prompt, ids[p], lens[p] * sizeof(int32_t));
            if (prompts[p].text && !(q->traj.prompt_text = strdup(prompts[p].text)))
                return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
            if (prompts[p].metadata_json && !(q->traj.metadata = strdup(prompts[p].metadata_json)))
                return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
            if (e->tok) {
                int rc = rlpi_stop_matcher_create(&q->sm, e->tok, &sc);
                if (rc)
                    return rc;
            }
            if (g->mt) {
                int rc = rlpi_episode_setup(g, q);
                if (rc)
                    return rc;
            }
        }
    }
    return RLP_OK;
}

/* Weights in use for the next step: (epoch, version). A shared-weights
 * engine follows the policy's own version. */
static void current_weights(rlp_rollout_engine *e, uint64_t *epoch, uint64_t *version)
{
    if (!e->owns_policy) {
        *version = e->policy->version;
        *epoch = e->policy->version;
    } else {
        *version = e->version;
        *epoch = e->epoch;
    }
}

int rlpi_engine_make_qweights(rlp_rollout_engine *e)
{
    int want = e->opts.weights;
    rlpi_transformer *tf = e->policy->tf;
    const rlpi_logger *log = &e->policy->ctx->log;
    if (want == RLP_ROLLOUT_WEIGHTS_F32)
        return RLP_OK;
    /* auto: only where an int8 kernel beats fp32 SGEMV (not the scalar one) */
    bool fast = rlpi_qmat_isa() >= RLPI_QMAT_ISA_AVX2;
    if (want == RLP_ROLLOUT_WEIGHTS_AUTO && !fast)
        return RLP_OK;
    rlpi_backend *be = e->policy->ctx->backend;
    if (!rlpi_op_qmatmul_available(be) || !rlpi_buffer_host(rlpi_transformer_params(tf))) {
        rlpi_log(log, RLP_LOG_INFO, "rollout weights: the %s backend has no quantized products; decoding fp32",
                 be->ops->name);
        return RLP_OK;
    }
    const int type = want == RLP_ROLLOUT_WEIGHTS_Q4_0 ? RLPI_QMAT_Q4_0 : RLPI_QMAT_Q8_0;
    int rc = rlpi_qweights_create(&e->qw, tf, type);
    if (rc)
        return rc;
    current_weights(e, &e->qw_epoch, &e->qw_version);
    e->qw_gen = e->policy->weights_gen;
    rlpi_kv_cache_set_qweights(e->kv, e->qw);
    rlpi_log(log, RLP_LOG_INFO, "rollout weights: %s copy of %.1f MiB (%s kernel), quantized in %.3f s",
             type == RLPI_QMAT_Q4_0 ? "Q4_0 (head Q8_0)" : "Q8_0", (double)rlpi_qweights_bytes(e->qw) / 1048576.0,
             rlpi_qmat_isa_name(rlpi_qmat_isa()), e->qw->last_update_s);
    return RLP_OK;
}

/* Re-quantizes the rollout copy when the weights moved since it was made
 * (an optimizer step of a shared policy, a broadcast into it, an update or
 * load of the engine's own copy). */
static int sync_qweights(rlp_rollout_engine *e, uint64_t epoch, uint64_t version)
{
    uint64_t gen = e->policy->weights_gen;
    if (!e->qw || (e->qw_epoch == epoch && e->qw_version == version && e->qw_gen == gen))
        return RLP_OK;
    int rc = rlpi_qweights_update(e->qw, e->policy->tf);
    if (rc)
        return rlpi_error_wrap("re-quantizing the rollout weights");
    e->qw_epoch = epoch;
    e->qw_version = version;
    e->qw_gen = gen;
    rlpi_log(&e->policy->ctx->log, RLP_LOG_DEBUG, "rollout weights: re-quantized for version %llu in %.3f s",
             (unsigned long long)version, e->qw->last_update_s);
    return RLP_OK;
}

void rlpi_engine_release_qweights(rlp_rollout_engine *e)
{
    if (!e || e->kind != RLPI_ENGINE_LOCAL || !e->qw)
        return;
    pthread_mutex_lock(&e->mu);
    if (!e->generating) {
        rlpi_buffer_discard(e->qw->buf);
        /* no weights have this (epoch, version, generation): sync_qweights
         * re-quantizes before anything decodes with the zeroed pages */
        e->qw_epoch = e->qw_version = e->qw_gen = UINT64_MAX;
    }
    pthread_mutex_unlock(&e->mu);
}

static int run(gen_ctx *g)
{
    rlp_rollout_engine *e = g->e;
    rlpi_transformer *tf = e->policy->tf;
    const int64_t V = rlpi_transformer_config(tf)->vocab_size;
    const int64_t n_slots = rlpi_kv_cache_slots(e->kv), capacity = rlpi_kv_cache_capacity(e->kv);
    int64_t *free_slots = malloc((size_t)n_slots * sizeof *free_slots);
    int64_t *q_start = malloc((size_t)(n_slots + 1) * sizeof *q_start);
    int64_t *slot = malloc((size_t)n_slots * sizeof *slot), *past = malloc((size_t)n_slots * sizeof *past);
    size_t *member = malloc((size_t)n_slots * sizeof *member);
    int64_t *fed = malloc((size_t)n_slots * sizeof *fed);
    int32_t *tokens = malloc((size_t)(PREFILL_BUDGET + n_slots) * sizeof *tokens);
    size_t *running = malloc((size_t)n_slots * sizeof *running);
    /* the step's draws: logits row, params, uniform, results (n_slots) */
    int32_t *d_row = malloc((size_t)n_slots * sizeof *d_row), *d_tok = malloc((size_t)n_slots * sizeof *d_tok);
    rlpi_sampler_params *d_par = malloc((size_t)n_slots * sizeof *d_par);
    double *d_u = malloc((size_t)n_slots * sizeof *d_u);
    float *d_lp = malloc((size_t)n_slots * sizeof *d_lp);
    int rc = free_slots && q_start && slot && past && member && fed && tokens && running && d_row && d_tok &&
                     d_par && d_u && d_lp
                 ? RLP_OK
                 : rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    int64_t n_free = 0;
    for (int64_t s = n_slots - 1; s >= 0; s--)
        free_slots[n_free++] = s;
    size_t next = 0, n_running = 0;
    while (!rc && g->n_done < g->N) {
        pthread_mutex_lock(&e->mu);
        /* park while an update swaps the weights (in DEFER mode the update
         * itself waits for the whole call to end) */
        while (e->pending > 0 && e->opts.interrupt_mode != RLP_INTERRUPT_DEFER)
            pthread_cond_wait(&e->cv, &e->mu);
        e->in_step = true;
        pthread_mutex_unlock(&e->mu);
        uint64_t epoch, version;
        current_weights(e, &epoch, &version);
        if ((rc = sync_qweights(e, epoch, version)) != RLP_OK)
            break; /* in_step is cleared below */
        uint64_t interrupts = 0, prefill_tokens = 0, decode_tokens = 0, prompts_prefilled = 0;
        double t0 = rlpi_now_s();

        uint64_t env_seen = g->mt ? rlpi_env_completions(g->mt->env) : 0;
        if (__atomic_load_n(&e->abort_requested, __ATOMIC_SEQ_CST)) {
            for (size_t i = 0; !rc && i < g->N; i++)
                if (g->seqs[i].state != SEQ_DONE)
                    rc = finish(g, &g->seqs[i], RLP_FINISH_ABORT, free_slots, &n_free, true);
        }
        /* the environment's answers that have come: observations appended */
        if (!rc && g->mt)
            rc = rlpi_episode_poll(g, version, capacity, free_slots, &n_free);
        /* sequences whose cache predates the current weights */
        n_running = 0;
        for (size_t i = 0; !rc && i < g->N; i++) {
            seq_state *q = &g->seqs[i];
            if (q->state != SEQ_RUNNING && q->state != SEQ_ENV)
                continue;
            if (q->epoch != epoch) {
                interrupts++;
                if (e->opts.interrupt_mode == RLP_INTERRUPT_ABORT) {
                    rc = finish(g, q, RLP_FINISH_ABORT, free_slots, &n_free, true);
                    continue;
                }
                q->filled = 0; /* recompute prompt + tokens so far with the new weights */
                q->epoch = epoch;
            }
            if (q->state == SEQ_RUNNING)
                running[n_running++] = i;
        }
        /* refill free slots from the queue (episodes once their reset has answered) */
        while (next < g->N && g->seqs[next].state != SEQ_QUEUED)
            next++;
        for (size_t i = next; !rc && n_free > 0 && i < g->N; i++) {
            seq_state *q = &g->seqs[i];
            if (q->state != SEQ_QUEUED || (q->epi && q->epi->call))
                continue;
            q->state = SEQ_RUNNING;
            q->slot = free_slots[--n_free];
            q->filled = 0;
            q->epoch = epoch;
            running[n_running++] = (size_t)(q - g->seqs);
        }
        /* build the step: which sequences feed which tokens (none while any
         * environment call runs, when the batch waits for them all) */
        int64_t n_seq = 0, n_tok = 0, budget = PREFILL_BUDGET;
        bool batch_wait = g->mt && !g->mt->overlap && g->n_calls > 0;
        for (size_t r = 0; !rc && !batch_wait && r < n_running; r++) {
            seq_state *q = &g->seqs[running[r]];
            if (q->state != SEQ_RUNNING)
                continue;
            int64_t len = ctx_len(q);
            if (q->filled == 0 && q->traj.n_tokens == 0 && q->n_prompt > 1) {
                /* share a sibling's prompt prefill when one has it cached
                 * (same weights); wait a step when a sibling is prefilling now */
                bool waiting = false, copied = false;
                for (size_t r2 = 0; r2 < n_running && !copied; r2++) {
                    seq_state *o = &g->seqs[running[r2]];
                    if (o == q || o->state != SEQ_RUNNING || o->prompt != q->prompt || o->epoch != epoch)
                        continue;
                    if (o->filled >= (int64_t)q->n_prompt - 1) {
                        rc = rlpi_kv_cache_copy_prefix(e->kv, q->slot, o->slot, (int64_t)q->n_prompt - 1);
                        q->filled = (int64_t)q->n_prompt - 1;
                        copied = true;
                    } else if (r2 < r && o->filled == 0 && o->traj.n_tokens == 0) {
                        waiting = true; /* o is scheduled to prefill in this step */
                    }
                }
                if (rc)
                    break;
                if (waiting && !copied)
                    continue;
            }
            int64_t want = len - q->filled;
            if (want > 1) { /* prefill (chunked by the step's token budget) */
                if (budget <= 0)
                    continue;
                want = want < budget ? want : budget;
                budget -= want;
                if (q->filled == 0)
                    prompts_prefilled++;
                prefill_tokens += (uint64_t)want;
            }
            q_start[n_seq] = n_tok;
            slot[n_seq] = q->slot;
            past[n_seq] = q->filled;
            fed[n_seq] = want;
            member[n_seq] = running[r];
            for (int64_t i = 0; i < want; i++)
                tokens[n_tok + i] = ctx_token(q, q->filled + i);
            n_tok += want;
            n_seq++;
        }
        q_start[n_seq] = n_tok;
        if (!rc && n_seq > 0)
            rc = rlpi_transformer_extend(tf, e->kv, n_seq, q_start, slot, past, tokens, NULL);
        double t1 = rlpi_now_s();
        /* one draw per sequence whose context is now fully cached (a
         * prefill chunk yields no token), all on the backend at once */
        int64_t n_draw = 0;
        for (int64_t s = 0; !rc && s < n_seq; s++) {
            seq_state *q = &g->seqs[member[s]];
            q->filled += fed[s];
            if (q->filled < ctx_len(q))
                continue;
            if (!q->started) {
                q->traj.policy_version = version;
                q->started = true;
            }
            d_row[n_draw] = (int32_t)s;
            d_par[n_draw] = q->sp;
            d_u[n_draw] = rlpi_sample_uniform(q->s->seed, q->stream, q->traj.n_tokens);
            member[n_draw++] = member[s]; /* member[s] is not read again for rows past s */
        }
        if (!rc && n_draw > 0)
            rc = rlpi_op_sample_rows(rlpi_kv_cache_logits(e->kv)->owner, d_tok, d_lp,
                                     RLPI_REF(rlpi_kv_cache_logits(e->kv), 0), n_seq, d_row, n_draw, V, d_par, d_u);
        for (int64_t i = 0; !rc && i < n_draw; i++) {
            rc = accept_token(g, &g->seqs[member[i]], d_tok[i], d_lp[i], version, capacity, free_slots, &n_free);
            decode_tokens++;
        }
        double t2 = rlpi_now_s();
        pthread_mutex_lock(&e->mu);
        e->in_step = false;
        e->stats.interrupts += interrupts;
        e->stats.prefill_tokens += prefill_tokens;
        e->stats.prompts += prompts_prefilled;
        e->stats.decode_tokens += decode_tokens;
        e->stats.decode_steps += n_seq > 0;
        if (prefill_tokens > 0)
            e->stats.prefill_seconds += t1 - t0;
        else
            e->stats.decode_seconds += t1 - t0;
        e->stats.decode_seconds += t2 - t1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        /* nothing to decode: sleep until an environment call ends or a
         * deadline passes (outside the step, so weight updates go ahead) */
        if (!rc && n_seq == 0 && g->n_calls > 0 && g->n_done < g->N) {
            double until = rlpi_now_s() + 0.25;
            for (size_t i = 0; i < g->N; i++)
                if (g->seqs[i].epi && g->seqs[i].epi->call) {
                    double d = rlpi_env_call_deadline(g->seqs[i].epi->call);
                    until = d < until ? d : until;
                }
            rlpi_env_wait(g->mt->env, env_seen, until);
        }
    }
    free(free_slots);
    free(q_start);
    free(slot);
    free(past);
    free(member);
    free(fed);
    free(tokens);
    free(running);
    free(d_row);
    free(d_tok);
    free(d_par);
    free(d_u);
    free(d_lp);
    return rc;
}

int rlpi_engine_local_generate(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                               const rlp_sampling_options *sp, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                               void *payload)
{
    const rlpi_model_config *cfg = rlpi_transformer_config(e->policy->tf);
    const int32_t **ids = calloc(n_prompts, sizeof *ids);
    size_t *lens = calloc(n_prompts, sizeof *lens);
    int32_t **owned = calloc(n_prompts, sizeof *owned);
    gen_ctx g = {.e = e, .sp = sp, .n_prompts = n_prompts, .cb = cb, .payload = payload, .mt = mt};
    int rc = ids && lens && owned ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    int64_t capacity = rlpi_kv_cache_capacity(e->kv);
    g.max_tokens = (uint32_t)capacity;
    if (mt && mt->max_tokens && mt->max_tokens < g.max_tokens)
        g.max_tokens = mt->max_tokens;
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        rc = rlpi_engine_prompt_ids(e, &prompts[p], p, &ids[p], &lens[p], &owned[p]);
        if (!rc && (int64_t)lens[p] > capacity - 1)
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu has %zu tokens; the engine holds %lld per sequence", p,
                                lens[p], (long long)capacity);
        for (size_t i = 0; !rc && i < lens[p]; i++)
            if (ids[p][i] < 0 || ids[p][i] >= cfg->vocab_size)
                rc = rlpi_error_set(RLP_E_INVALID_ARG, "prompt %zu: token %zu has id %d outside the vocabulary of %d",
                                    p, i, ids[p][i], cfg->vocab_size);
    }
    uint64_t group_base = 0;
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        group_base = e->next_group;
        e->next_group += n_prompts;
        pthread_mutex_unlock(&e->mu);
        rc = setup(&g, prompts, n_prompts, ids, lens, group_base);
    }
    if (!rc) {
        /* a bf16 CPU context runs decode's few-row products in fp32
         * (rlpi_gemm_generation_begin) */
        int scope = rlpi_gemm_generation_begin();
        rc = run(&g);
        rlpi_gemm_generation_end(scope);
        /* every slot is free again: the cache's pages are dead until the
         * next call (in a sync RL step, the trainer's backward and
         * optimizer run in between and need the memory) */
        rlpi_kv_cache_release(e->kv);
    }
    if (!rc)
        rc = rlpi_batch_reserve(out, g.N);
    for (size_t i = 0; !rc && i < g.N; i++)
        rc = rlpi_batch_take(out, &g.seqs[i].traj);
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        e->stats.completions += g.N;
        pthread_mutex_unlock(&e->mu);
    }
    seqs_free(&g);
    for (size_t p = 0; owned && p < n_prompts; p++)
        free(owned[p]);
    free(owned);
    free(ids);
    free(lens);
    if (rc) {
        /* the engine stays usable: clear in_step if a step failed midway */
        pthread_mutex_lock(&e->mu);
        e->in_step = false;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    return rc;
}
