/* The synchronous episode API (rlp_env_episode_*): one call at a time,
 * run on the environment's workers under the same deadline as in an
 * engine, for hosts and tests that drive an environment themselves. */
#include "env/env_call_wait.h"

#include "core/clock.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

struct rlp_env_episode {
    rlp_env *env;
    rlpi_env_ep *ep;
    rlpi_env_call *last;   /* the outcome's strings point into it */
    char *text;            /* its text pieces, concatenated */
    bool over;             /* done, failed or timed out */
};

/* Runs one call to its end or its deadline and fills *out. */
static int run_one(rlp_env_outcome *out, rlp_env_episode *e, int kind, const char *text, size_t len,
                   const int32_t *ids, size_t n)
{
    rlpi_env_call_release(e->last);
    e->last = NULL;
    free(e->text);
    e->text = NULL;
    rlpi_env_call *c;
    int rc = rlpi_env_call_submit(&c, e->ep, kind, text, len, ids, n);
    if (rc)
        return rc;
    e->last = c;
    double t0 = rlpi_now_s();
    int st = rlpi_env_call_wait(c, e->env, NULL);
    rlp_env_outcome o;
    memset(&o, 0, sizeof o);
    o.version = RLP_ENV_OUTCOME_VERSION;
    if (st == RLPI_CALL_TIMED_OUT) {
        o.status = RLP_E_TIMEOUT;
        o.error = "the environment's call ran past its deadline";
        o.seconds = rlpi_now_s() - t0;
        rlpi_env_call_release(c); /* abandon it */
        e->last = NULL;
        e->over = true;
    } else {
        const char *err = NULL;
        o.status = rlpi_env_call_status(c, &err);
        o.error = err;
        const rlp_env_reply *r = rlpi_env_call_reply(c);
        size_t tl = 0;
        for (size_t i = 0; i < r->n_pieces; i++)
            if (r->pieces[i].is_tokens)
                o.n_observation_tokens += r->pieces[i].n;
            else
                tl += r->pieces[i].len;
        e->text = malloc(tl + 1);
        if (!e->text)
            return rlpi_error_set(RLP_E_NOMEM, "rlp_env_episode: out of memory");
        size_t at = 0;
        for (size_t i = 0; i < r->n_pieces; i++)
            if (!r->pieces[i].is_tokens) {
                memcpy(e->text + at, r->pieces[i].text, r->pieces[i].len);
                at += r->pieces[i].len;
            }
        e->text[at] = '\0';
        o.observation = e->text;
        o.observation_len = at;
        o.done = r->done;
        o.tool_call = kind == RLPI_ENV_STEP && rlpi_env_reply_is_tool_call(r);
        o.has_reward = r->has_reward;
        o.reward = r->has_reward ? r->reward : 0.0f;
        o.tool_error = r->tool_error;
        o.metadata_json = r->metadata;
        o.truncated = r->truncated;
        o.seconds = rlpi_env_call_seconds(c);
        e->over = o.status != RLP_OK || (kind == RLPI_ENV_STEP && r->done);
    }
    if (out) {
        uint32_t v = out->version;
        *out = o;
        (void)v;
    }
    return RLP_OK;
}

int rlp_env_episode_start(rlp_env_episode **out, rlp_env *env, const char *metadata_json, rlp_env_outcome *first)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(env, "env is NULL");
    rlp_env_episode *e = calloc(1, sizeof *e);
    if (!e)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_env_episode_start: out of memory");
    e->env = env;
    int rc = rlpi_env_ep_create(&e->ep, env);
    if (!rc)
        rc = run_one(first, e, RLPI_ENV_RESET, metadata_json, metadata_json ? strlen(metadata_json) : 0, NULL, 0);
    if (rc) {
        rlp_env_episode_free(e);
        return rc;
    }
    *out = e;
    return RLP_OK;
}

int rlp_env_episode_step(rlp_env_outcome *out, rlp_env_episode *ep, const char *action, size_t action_len,
                         const int32_t *action_ids, size_t n_action_ids)
{
    RLPI_CHECK_ARG(ep, "ep is NULL");
    RLPI_CHECK_ARG(action || action_len == 0, "action is NULL");
    RLPI_CHECK_ARG(action_ids || n_action_ids == 0, "action_ids is NULL");
    if (ep->over)
        return rlpi_error_set(RLP_E_STATE, "rlp_env_episode_step: the episode is over (done, failed or timed out)");
    return run_one(out, ep, RLPI_ENV_STEP, action ? action : "", action_len, action_ids, n_action_ids);
}

void rlp_env_episode_free(rlp_env_episode *ep)
{
    if (!ep)
        return;
    rlpi_env_call_release(ep->last);
    rlpi_env_ep_release(ep->ep);
    free(ep->text);
    free(ep);
}
