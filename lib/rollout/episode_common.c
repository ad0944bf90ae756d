/* The parts of a multi-turn episode that do not depend on the engine. */
#include "rollout/episode_common.h"

#include "core/error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rlpi_episode_acc_clear(rlpi_episode_acc *a)
{
    free(a->text);
    free(a->rw_at);
    free(a->rw);
    free(a->meta);
    memset(a, 0, sizeof *a);
}

int rlpi_episode_text_append(rlpi_episode_acc *a, const char *s, size_t n)
{
    if (a->len + n + 1 > a->cap) {
        size_t cap = (a->len + n + 1) * 2;
        char *t = realloc(a->text, cap);
        if (!t)
            return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
        a->text = t;
        a->cap = cap;
    }
    if (n)
        memcpy(a->text + a->len, s, n);
    a->len += n;
    a->text[a->len] = '\0';
    return RLP_OK;
}

void rlpi_episode_text_cut(rlpi_episode_acc *a, size_t mark)
{
    if (a->text && mark <= a->len) {
        a->len = mark;
        a->text[mark] = '\0';
    }
}

int rlpi_episode_add_turn_reward(rlpi_episode_acc *a, size_t token_index, float reward)
{
    if (a->n_rw == a->rw_cap) {
        size_t cap = a->rw_cap ? 2 * a->rw_cap : 8;
        size_t *at = realloc(a->rw_at, cap * sizeof *at);
        if (at)
            a->rw_at = at;
        float *v = realloc(a->rw, cap * sizeof *v);
        if (v)
            a->rw = v;
        if (!at || !v)
            return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
        a->rw_cap = cap;
    }
    a->rw_at[a->n_rw] = token_index;
    a->rw[a->n_rw++] = reward;
    return RLP_OK;
}

int rlpi_episode_set_meta(rlpi_episode_acc *a, const char *json)
{
    char *m = strdup(json);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
    free(a->meta);
    a->meta = m;
    return RLP_OK;
}

int rlpi_episode_encode_reply(rlpi_episode_acc *a, const rlp_tokenizer *tok, int32_t vocab, const rlp_env_reply *r,
                              int32_t **ids, size_t *n, char *bad, size_t bad_cap)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < r->n_pieces; i++) {
        const rlpi_env_piece *p = &r->pieces[i];
        size_t m = p->n;
        if (!p->is_tokens) {
            rc = rlp_tokenizer_encode(tok, p->text, p->len, p->flags, NULL, 0, &m);
            if (rc == RLP_E_OVERFLOW)
                rc = RLP_OK;
            if (rc)
                break;
        } else {
            for (size_t k = 0; k < p->n; k++)
                if (p->ids[k] < 0 || p->ids[k] >= vocab) {
                    snprintf(bad, bad_cap, "observation token %d is outside the vocabulary of %d", p->ids[k], vocab);
                    free(*ids);
                    *ids = NULL;
                    *n = 0;
                    return RLP_OK;
                }
        }
        if (*n + m > cap) {
            size_t nc = (*n + m) * 2 + 16;
            int32_t *t = realloc(*ids, nc * sizeof *t);
            if (!t) {
                rc = rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
                break;
            }
            *ids = t;
            cap = nc;
        }
        if (p->is_tokens) {
            if (m)
                memcpy(*ids + *n, p->ids, m * sizeof **ids);
            size_t tl = 0; /* the text shows what the ids say */
            int drc = rlp_tokenizer_decode(tok, p->ids, p->n, 0, NULL, 0, &tl);
            char *t = (drc == RLP_OK || drc == RLP_E_OVERFLOW) ? malloc(tl + 1) : NULL;
            if (t && rlp_tokenizer_decode(tok, p->ids, p->n, 0, t, tl + 1, &tl) == RLP_OK)
                rc = rlpi_episode_text_append(a, t, tl);
            free(t);
        } else {
            size_t got = 0;
            rc = rlp_tokenizer_encode(tok, p->text, p->len, p->flags, *ids + *n, m, &got);
            if (!rc)
                rc = rlpi_episode_text_append(a, p->text, p->len);
        }
        *n += m;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

/* metadata_json gains {"env": <the environment's last metadata>} */
static int merge_metadata(rlpi_traj *t, const char *env_meta)
{
    json_t *root = t->metadata ? json_loads(t->metadata, 0, NULL) : json_object();
    if (!root || !json_is_object(root)) {
        json_decref(root);
        root = json_object();
    }
    json_t *m = json_loads(env_meta, 0, NULL);
    char *out = NULL;
    if (root && m && json_object_set_new(root, "env", m) == 0)
        out = json_dumps(root, JSON_COMPACT);
    else
        json_decref(m);
    json_decref(root);
    if (!out)
        return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
    free(t->metadata);
    t->metadata = out;
    return RLP_OK;
}

int rlpi_episode_finalize(rlpi_episode_acc *a, rlpi_traj *t, const rlp_episode_stats *es)
{
    if (!a->text && rlpi_episode_text_append(a, "", 0))
        return RLP_E_NOMEM;
    free(t->text);
    t->text = a->text;
    a->text = NULL;
    a->len = a->cap = 0;
    if (a->n_rw && t->n_tokens) {
        float *tr = calloc(t->n_tokens, sizeof *tr);
        if (!tr)
            return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
        for (size_t i = 0; i < a->n_rw; i++)
            if (a->rw_at[i] < t->n_tokens)
                tr[a->rw_at[i]] += a->rw[i];
        free(t->token_rewards);
        t->token_rewards = tr;
    }
    int rc = a->meta ? merge_metadata(t, a->meta) : RLP_OK;
    if (rc)
        return rc;
    t->has_episode = true;
    t->episode = *es;
    /* no mask yet means no observation was appended: say so explicitly */
    if (!t->loss_mask && t->n_tokens) {
        t->loss_mask = malloc(t->cap ? t->cap : t->n_tokens);
        if (!t->loss_mask)
            return rlpi_error_set(RLP_E_NOMEM, "episode: out of memory");
        memset(t->loss_mask, 1, t->n_tokens);
    }
    return RLP_OK;
}
