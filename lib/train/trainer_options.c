/* rlp_trainer_options_init and the conversion of older callers' options
 * (trainer_options.h says why a conversion is needed). */
#include "train/trainer_options.h"

#include "core/error.h"

#include <stddef.h>
#include <string.h>

static void defaults(rlp_trainer_options *d)
{
    memset(d, 0, sizeof *d);
    d->version = RLP_TRAINER_OPTIONS_VERSION;
    d->mode = RLP_TRAIN_SYNC;
    d->max_staleness = 0;
    d->prompts_per_step = 8;
    d->worker_retries = 2;
    d->stall_polls = 10;
    rlp_sampling_options_init(&d->sampling, RLP_SAMPLING_OPTIONS_VERSION);
    rlp_rl_options_init(&d->rl, RLP_RL_OPTIONS_VERSION);
    rlp_multiturn_options_init(&d->multiturn, RLP_MULTITURN_OPTIONS_VERSION);
    d->value_clip = 0.5f;
    d->gae_lambda = 1.0f;
}

/* How many bytes of the frozen layout a caller of @p version owns. */
static size_t v3_size(uint32_t version)
{
    return version >= 3   ? sizeof(rlpi_trainer_options_v3)
           : version == 2 ? offsetof(rlpi_trainer_options_v3, rollout_weights)
                          : offsetof(rlpi_trainer_options_v3, multiturn);
}

/* The fields between rl and multiturn: the same names and types in both
 * layouts, at other offsets. Both conversions below copy exactly these. */
#define V3_MIDDLE_FIELDS(X)                                                                                        \
    X(ref) X(tokenizer) X(max_seq_len) X(max_batch) X(rollout_threads) X(worker_urls) X(n_worker_urls)             \
    X(api_key) X(weights_dir) X(worker_timeout_ms) X(worker_retries) X(metrics) X(n_metrics) X(on_batch)           \
    X(on_batch_payload) X(comm) X(stall_polls) X(rollout_inbox)

/* The current options as an older caller's layout (for init). */
static void to_v3(rlpi_trainer_options_v3 *o, const rlp_trainer_options *d)
{
    memset(o, 0, sizeof *o);
    memcpy(o, d, offsetof(rlpi_trainer_options_v3, rl)); /* version … sampling: the same layout */
    memcpy(&o->rl, &d->rl, sizeof o->rl);                /* rl's version-1 prefix */
    o->rl.version = 1;
#define COPY(f) o->f = d->f;
    V3_MIDDLE_FIELDS(COPY)
#undef COPY
    o->multiturn = d->multiturn;
    o->rollout_weights = d->rollout_weights;
}

int rlp_trainer_options_init(rlp_trainer_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_TRAINER_OPTIONS_VERSION, "unknown version");
    rlp_trainer_options d;
    defaults(&d);
    if (version == RLP_TRAINER_OPTIONS_VERSION) {
        *opts = d;
        return RLP_OK;
    }
    if (version == 4 || version == 5) { /* the current layout cut before the critic / remote_workers */
        d.version = version;
        memcpy(opts, &d, version == 4 ? offsetof(rlp_trainer_options, critic_path)
                                      : offsetof(rlp_trainer_options, remote_workers));
        return RLP_OK;
    }
    rlpi_trainer_options_v3 old;
    to_v3(&old, &d);
    old.version = version;
    memcpy(opts, &old, v3_size(version));
    return RLP_OK;
}

int rlpi_trainer_options_upgrade(rlp_trainer_options *out, const rlp_trainer_options *in)
{
    defaults(out);
    if (!in)
        return RLP_OK;
    RLPI_CHECK_ARG(in->version >= 1 && in->version <= RLP_TRAINER_OPTIONS_VERSION, "opts->version: unknown version");
    if (in->version == RLP_TRAINER_OPTIONS_VERSION) {
        *out = *in;
        return RLP_OK;
    }
    if (in->version == 4 || in->version == 5) { /* the current layout cut before the critic / remote_workers */
        memcpy(out, in, in->version == 4 ? offsetof(rlp_trainer_options, critic_path)
                                         : offsetof(rlp_trainer_options, remote_workers));
        out->version = RLP_TRAINER_OPTIONS_VERSION;
        return RLP_OK;
    }
    rlpi_trainer_options_v3 o = {0};
    memcpy(&o, in, v3_size(in->version));
    if (o.rl.version != 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "opts->rl.version: a version-%u rlp_trainer_options holds rl of "
                              "version 1, not %u", in->version, o.rl.version);
    memcpy(out, &o, offsetof(rlpi_trainer_options_v3, rl));
    out->version = RLP_TRAINER_OPTIONS_VERSION;
    rlpi_rl_options_from_v1(&out->rl, &o.rl);
#define COPY(f) out->f = o.f;
    V3_MIDDLE_FIELDS(COPY)
#undef COPY
    if (in->version >= 2)
        out->multiturn = o.multiturn;
    if (in->version >= 3)
        out->rollout_weights = o.rollout_weights;
    return RLP_OK;
}
