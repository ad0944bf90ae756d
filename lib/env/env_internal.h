/* The engine's side of an environment: reset and step calls that run on
 * the environment's own worker threads while the engine goes on decoding,
 * each with a deadline; a call that overruns is abandoned (its thread
 * finishes alone and its episode is closed after it). Everything a call
 * reads is copied into it, so an abandoned call never touches the
 * engine's memory. */
#ifndef RLPI_ENV_ENV_INTERNAL_H
#define RLPI_ENV_ENV_INTERNAL_H

#include "rlpost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One piece of an observation: text (encoded with its flags) or ids. */
typedef struct rlpi_env_piece {
    bool is_tokens;
    uint32_t flags;
    char *text;       /* owned */
    size_t len;
    int32_t *ids;     /* owned */
    size_t n;
} rlpi_env_piece;

struct rlp_env_reply {
    rlpi_env_piece *pieces;
    size_t n_pieces, cap;
    uint64_t bytes, max_bytes;  /* observation bytes so far (4 per id), the cut */
    bool truncated;
    bool has_reward, done;
    float reward;
    int tool_call;              /* -1 unset: a reply that is not done is a tool call */
    char *tool_error;           /* owned or NULL */
    char *metadata;             /* owned JSON object text or NULL */
};

void rlpi_env_reply_clear(rlp_env_reply *r);
/* Whether the reply counts as a tool call (explicit, else "not done"). */
bool rlpi_env_reply_is_tool_call(const rlp_env_reply *r);

typedef struct rlpi_env_ep rlpi_env_ep;     /* an episode's state, shared by its calls */
typedef struct rlpi_env_call rlpi_env_call; /* one reset or step call */

enum { RLPI_ENV_RESET = 0, RLPI_ENV_STEP = 1 };
enum { RLPI_CALL_RUNNING = 0, RLPI_CALL_DONE = 1, RLPI_CALL_TIMED_OUT = 2 };

int rlpi_env_ep_create(rlpi_env_ep **out, rlp_env *env);
/* Drops the owner's reference; close runs (on a worker) once no call holds it. */
void rlpi_env_ep_release(rlpi_env_ep *ep);

/* Queues a call (text/ids copied: the metadata JSON for a reset, the
 * action for a step). Never blocks on the environment. A call refused at
 * once (too many abandoned calls) comes back already done with an error. */
int rlpi_env_call_submit(rlpi_env_call **out, rlpi_env_ep *ep, int kind, const char *text, size_t len,
                         const int32_t *ids, size_t n);
/* RLPI_CALL_RUNNING (queued or running), _DONE, or _TIMED_OUT (running past its deadline at `now`). */
int rlpi_env_call_poll(rlpi_env_call *c, double now);
/* The time at which a running call's deadline passes (+inf when none or still queued). */
double rlpi_env_call_deadline(const rlpi_env_call *c);
/* Of a done call: RLP_OK or the failure, its message, the reply, its wall time. */
int rlpi_env_call_status(const rlpi_env_call *c, const char **error);
rlp_env_reply *rlpi_env_call_reply(rlpi_env_call *c);
double rlpi_env_call_seconds(const rlpi_env_call *c);
/* Drops the caller's reference; a running call is abandoned. NULL is a no-op. */
void rlpi_env_call_release(rlpi_env_call *c);

/* Calls finished so far (a counter to wait on without missing one). */
uint64_t rlpi_env_completions(rlp_env *env);
/* Waits until a call finishes after `seen` completions, or until `until` (rlpi_now_s() time). */
void rlpi_env_wait(rlp_env *env, uint64_t seen, double until);

const rlp_env_options *rlpi_env_options(const rlp_env *env);

#endif
