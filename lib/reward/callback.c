/* Scorers that call the host's C functions, in the single-sample and the
 * batch form. The payload is the host's unless it handed it over with
 * payload_free; then it is freed with the scorer, i.e. after the last
 * abandoned call has returned. */
#include "reward/callback.h"

#include "core/error.h"

#include <stdlib.h>

typedef struct cb_impl {
    rlp_reward_callback one;
    rlp_reward_batch_callback many;
    void *payload;
    void (*payload_free)(void *);
} cb_impl;

static int score_one(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const cb_impl *cb = impl;
    /* n is 1 (chunk 1); a loop keeps it right whatever the chunk */
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = cb->one(&res[i], &req[i], cb->payload);
    return rc;
}

static int score_many(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const cb_impl *cb = impl;
    return cb->many(res, req, n, cb->payload);
}

static void cb_destroy(void *impl)
{
    cb_impl *cb = impl;
    if (cb->payload_free)
        cb->payload_free(cb->payload);
    free(cb);
}

static const rlpi_scorer_ops one_ops = {score_one, cb_destroy};
static const rlpi_scorer_ops many_ops = {score_many, cb_destroy};

int rlpi_callback_scorer(rlpi_scorer **out, rlp_reward_callback one, rlp_reward_batch_callback many,
                         size_t batch_size, void *payload, void (*payload_free)(void *))
{
    cb_impl *cb = calloc(1, sizeof *cb);
    if (!cb) {
        if (payload_free)
            payload_free(payload);
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory");
    }
    cb->one = one;
    cb->many = many;
    cb->payload = payload;
    cb->payload_free = payload_free;
    int rc = rlpi_scorer_create(out, one ? &one_ops : &many_ops, cb, one ? 1 : batch_size);
    if (rc == RLP_OK)
        (*out)->token_scores = 1;
    return rc;
}
