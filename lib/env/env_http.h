/* The HTTP environment's reader of answers (env_http.c): the bytes of a
 * /reset or /step answer into an rlp_env_reply, every field checked. No
 * I/O, so the fuzz target env_response calls it directly. */
#ifndef RLPI_ENV_ENV_HTTP_H
#define RLPI_ENV_ENV_HTTP_H

#include "rlpost.h"

#include <stddef.h>

enum { RLPI_ENV_HTTP_RESET = 0, RLPI_ENV_HTTP_STEP = 1 };

/* Reads `len` bytes of a reset or step answer (the protocol in
 * docs/environments.md) into `reply`. RLP_OK, or the RLP_E_* code with
 * `msg` (cap bytes) saying why, naming `url`. For a reset, *episode_id
 * receives the id (malloc'd; the caller frees it) as soon as it is read,
 * also when a later field fails (the server's episode then needs a close). */
int rlpi_env_http_read_answer(rlp_env_reply *reply, int kind, const char *url, const char *body, size_t len,
                              char **episode_id, char *msg, size_t cap);

#endif
