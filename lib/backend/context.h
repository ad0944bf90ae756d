/* Internal layout of rlp_context, for the handles built on it (policy,
 * rollout engine) that need its backend, logger and seed. */
#ifndef RLPI_BACKEND_CONTEXT_H
#define RLPI_BACKEND_CONTEXT_H

#include "backend/backend.h"
#include "core/log.h"
#include "rlpost.h"

struct rlp_context {
    int kind;               /* rlp_backend_kind */
    int device;
    int n_threads;          /* resolved, >= 1 */
    uint64_t seed;
    rlpi_logger log;        /* level is written by rlp_context_set_log_level */
    rlpi_backend *backend;  /* owned */
};

#endif
