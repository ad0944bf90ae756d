/* Generation for the trainer and the rollout worker: a prompt set's
 * groups on one engine, with failed remote groups generated again and,
 * for a model without a tokenizer of its own, prompts encoded and
 * completions decoded with the host's tokenizer. */
#include "train_internal.h"

#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prompts of a set, with token ids from the external tokenizer when the
 * model has none (token-level models such as llama2.c checkpoints). */
typedef struct prompts {
    rlp_prompt *p;
    int32_t **ids;
    size_t n;
} prompts;

static void prompts_free(prompts *ps)
{
    for (size_t i = 0; ps->ids && i < ps->n; i++)
        free(ps->ids[i]);
    free(ps->ids);
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

/* Prompts [first, first + count) of @p set. */
static int prompts_make(prompts *ps, const rlp_prompt_set *set, size_t first, size_t count,
                        const rlp_tokenizer *ext_tok)
{
    size_t n = 0;
    rlp_prompt_set_size(&n, set);
    first = first < n ? first : n;
    count = count < n - first ? count : n - first;
    ps->n = count;
    ps->p = calloc(count ? count : 1, sizeof *ps->p);
    ps->ids = calloc(count ? count : 1, sizeof *ps->ids);
    if (!ps->p || !ps->ids)
        return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    if (count)
        memcpy(ps->p, rlp_prompt_set_prompts(set) + first, count * sizeof *ps->p);
    for (size_t i = 0; ext_tok && i < count; i++) {
        const char *text = ps->p[i].text ? ps->p[i].text : "";
        size_t cap = strlen(text) * 4 + 8, got = 0;
        if (!(ps->ids[i] = malloc(cap * sizeof(int32_t))))
            return rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
        int rc = rlp_tokenizer_encode(ext_tok, text, strlen(text), RLP_ENCODE_ADD_BOS, ps->ids[i], cap, &got);
        if (rc)
            return rc;
        ps->p[i].tokens = ps->ids[i];
        ps->p[i].n_tokens = got;
    }
    return RLP_OK;
}

/* With an external tokenizer the engine has no text: decode it here. */
static int add_texts(rlp_batch **batch, const rlp_tokenizer *ext_tok)
{
    size_t n = 0;
    rlp_batch_size(&n, *batch);
    rlp_batch *nb;
    int rc = rlp_batch_create(&nb);
    for (size_t i = 0; !rc && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if ((rc = rlp_batch_get(&t, *batch, i)))
            break;
        size_t cap = 16 * t.n_completion_tokens + 16, len = 0;
        char *text = malloc(cap);
        if (!text) {
            rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
            break;
        }
        rc = rlp_tokenizer_decode(ext_tok, t.completion_tokens, t.n_completion_tokens, RLP_DECODE_SKIP_SPECIAL, text,
                                  cap, &len);
        if (!rc) {
            t.completion_text = text;
            rc = rlp_batch_append(nb, &t);
        }
        free(text);
    }
    if (rc) {
        rlp_batch_free(nb);
        return rlpi_error_wrap("decoding completions");
    }
    rlp_batch_free(*batch);
    *batch = nb;
    return RLP_OK;
}

/* Prompts whose group holds a RLP_FINISH_ERROR trajectory; the message of
 * the first in @p why. */
static size_t failed_groups(const rlp_batch *b, size_t n_prompts, unsigned char *failed, char *why, size_t cap)
{
    size_t n = 0, k = 0;
    rlp_batch_size(&n, b);
    size_t per = n_prompts ? n / n_prompts : 0;
    memset(failed, 0, n_prompts);
    for (size_t i = 0; per && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, b, i) || t.finish_reason != RLP_FINISH_ERROR || failed[i / per])
            continue;
        if (!k)
            snprintf(why, cap, "%s", t.error ? t.error : "request failed");
        failed[i / per] = 1;
        k++;
    }
    return k;
}

/* Replaces the groups of the failed prompts in *b by those of @p redo
 * (generated for exactly the failed prompts, in order). */
static int merge_groups(rlp_batch **b, const rlp_batch *redo, size_t n_prompts, const unsigned char *failed)
{
    size_t n = 0;
    rlp_batch_size(&n, *b);
    size_t per = n / n_prompts, r_i = 0;
    rlp_batch *nb;
    int rc = rlp_batch_create(&nb);
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        for (size_t j = 0; !rc && j < per; j++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            rc = failed[p] ? rlp_batch_get(&t, redo, r_i * per + j) : rlp_batch_get(&t, *b, p * per + j);
            if (!rc)
                rc = rlp_batch_append(nb, &t);
        }
        r_i += failed[p];
    }
    if (rc) {
        rlp_batch_free(nb);
        return rc;
    }
    rlp_batch_free(*b);
    *b = nb;
    return RLP_OK;
}

/* One generate call: completions, or episodes when mt is given. */
static int gen_call(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt *p, size_t n,
                    const rlp_sampling_options *s, const rlp_multiturn_options *mt)
{
    return mt ? rlp_rollout_generate_episodes(out, engine, p, n, s, mt, NULL, NULL)
              : rlp_rollout_generate(out, engine, p, n, s, NULL, NULL);
}

int rlpi_train_generate(rlp_batch **out, rlp_rollout_engine *engine, const rlp_prompt_set *set, size_t first,
                        size_t count, const rlp_sampling_options *s, const rlp_multiturn_options *mt,
                        const rlp_tokenizer *ext_tok, uint32_t retries)
{
    prompts ps = {0};
    rlp_batch *b = NULL;
    unsigned char *failed = NULL;
    rlp_prompt *redo = NULL;
    int rc = prompts_make(&ps, set, first, count, ext_tok);
    if (!rc)
        rc = gen_call(&b, engine, ps.p, ps.n, s, mt);
    if (!rc && (!(failed = malloc(ps.n ? ps.n : 1)) || !(redo = malloc((ps.n ? ps.n : 1) * sizeof *redo))))
        rc = rlpi_error_set(RLP_E_NOMEM, "generate: out of memory");
    /* a remote group that failed (its request failed on every URL) is
     * generated again, so that every group trains or none does */
    for (uint32_t attempt = 0; !rc; attempt++) {
        char why[256];
        size_t k = failed_groups(b, ps.n, failed, why, sizeof why);
        if (!k)
            break;
        if (attempt == retries) {
            rc = rlpi_error_set(RLP_E_NETWORK, "%zu of %zu prompt groups failed %u times, the last with: %s", k,
                                ps.n, retries + 1, why);
            break;
        }
        size_t m = 0;
        for (size_t i = 0; i < ps.n; i++)
            if (failed[i])
                redo[m++] = ps.p[i];
        rlp_batch *again = NULL;
        if (!(rc = gen_call(&again, engine, redo, m, s, mt)))
            rc = merge_groups(&b, again, ps.n, failed);
        rlp_batch_free(again);
    }
    free(failed);
    free(redo);
    prompts_free(&ps);
    if (!rc && ext_tok)
        rc = add_texts(&b, ext_tok);
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    *out = b;
    return RLP_OK;
}

int rlpi_sampling_copy_make(rlpi_sampling_copy *c, rlp_sampling_options *s)
{
    memset(c, 0, sizeof *c);
    if (s->n_stop && s->stop) {
        if (!(c->stops = calloc(s->n_stop, sizeof *c->stops)))
            return rlpi_error_set(RLP_E_NOMEM, "out of memory");
        c->n = s->n_stop;
        for (size_t i = 0; i < s->n_stop; i++)
            if (s->stop[i] && !(c->stops[i] = strdup(s->stop[i])))
                return rlpi_error_set(RLP_E_NOMEM, "out of memory");
        s->stop = (const char *const *)c->stops;
    }
    if (s->n_stop_token_ids && s->stop_token_ids) {
        if (!(c->stop_ids = malloc(s->n_stop_token_ids * sizeof *c->stop_ids)))
            return rlpi_error_set(RLP_E_NOMEM, "out of memory");
        memcpy(c->stop_ids, s->stop_token_ids, s->n_stop_token_ids * sizeof *c->stop_ids);
        s->stop_token_ids = c->stop_ids;
    }
    return RLP_OK;
}

void rlpi_sampling_copy_free(rlpi_sampling_copy *c)
{
    for (size_t i = 0; c->stops && i < c->n; i++)
        free(c->stops[i]);
    free(c->stops);
    free(c->stop_ids);
    memset(c, 0, sizeof *c);
}
