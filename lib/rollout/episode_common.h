/* What a multi-turn episode collects beside its trajectory, whichever
 * engine runs it (episode_local.c, engine_remote_episodes.c): the turns'
 * and observations' text, turn rewards, the environment's metadata; the
 * encoding of a reply's observation piece by piece; and the trajectory's
 * final record. */
#ifndef RLPI_ROLLOUT_EPISODE_COMMON_H
#define RLPI_ROLLOUT_EPISODE_COMMON_H

#include "core/batch.h"
#include "env/env_internal.h"

typedef struct rlpi_episode_acc {
    char *text;                 /* turns' and observations' text so far (NUL-terminated once started) */
    size_t len, cap;
    size_t *rw_at;              /* (n_rw) turn rewards: token index, value */
    float *rw;
    size_t n_rw, rw_cap;
    char *meta;                 /* the environment's last metadata object, or NULL */
} rlpi_episode_acc;

void rlpi_episode_acc_clear(rlpi_episode_acc *a);
int rlpi_episode_text_append(rlpi_episode_acc *a, const char *s, size_t n);
/* Forgets the text past `mark` (an observation that is not appended). */
void rlpi_episode_text_cut(rlpi_episode_acc *a, size_t mark);
int rlpi_episode_add_turn_reward(rlpi_episode_acc *a, size_t token_index, float reward);
int rlpi_episode_set_meta(rlpi_episode_acc *a, const char *json);
/* A reply's observation as ids (*ids malloc'd, NULL when none) and its
 * text appended to a: each text piece encoded alone with its flags, token
 * pieces as given (their decoding shown as text). A token outside the
 * vocabulary leaves *ids NULL and says why in bad (the episode fails). */
int rlpi_episode_encode_reply(rlpi_episode_acc *a, const rlp_tokenizer *tok, int32_t vocab, const rlp_env_reply *r,
                              int32_t **ids, size_t *n, char *bad, size_t bad_cap);
/* Moves the text onto t and puts the turn rewards (token_rewards), the
 * metadata (under "env"), the record and an explicit all-ones mask when no
 * observation was appended. */
int rlpi_episode_finalize(rlpi_episode_acc *a, rlpi_traj *t, const rlp_episode_stats *es);

#endif
