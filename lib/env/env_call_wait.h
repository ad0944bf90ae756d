/* Waiting on one environment call from a thread that has nothing else to
 * do meanwhile (a remote engine's episode thread): the poll/wait loop of
 * the synchronous episode API, with a flag that ends the wait early. */
#ifndef RLPI_ENV_ENV_CALL_WAIT_H
#define RLPI_ENV_ENV_CALL_WAIT_H

#include "env/env_internal.h"

/* Blocks until call c (submitted on env) ends or overruns its deadline:
 * RLPI_CALL_DONE or RLPI_CALL_TIMED_OUT. Returns RLPI_CALL_RUNNING when
 * *stop (read atomically; NULL = never) turned non-zero first, which is
 * looked at least every 50 ms. Thread-safe for distinct calls. */
int rlpi_env_call_wait(rlpi_env_call *c, rlp_env *env, const int *stop);

#endif
