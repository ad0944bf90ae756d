/* Episodes on a remote engine: every turn is one completion request with
 * the episode's ids so far (prompt, turns, observations), so the server's
 * prefix cache does what the local engine's kept KV slot does. */
#include "rollout/engine.h"

#include "core/error.h"

int rlpi_engine_remote_episodes(rlp_rollout_engine *e, rlp_batch *out, const rlp_prompt *prompts, size_t n_prompts,
                                const rlp_sampling_options *s, const rlp_multiturn_options *mt, rlp_stream_fn cb,
                                void *payload)
{
    (void)e, (void)out, (void)prompts, (void)n_prompts, (void)s, (void)mt, (void)cb, (void)payload;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_rollout_generate_episodes: remote engines do not run episodes yet");
}
