/**
 * @file rlpost.h
 * @brief librlpost — reinforcement-learning post-training of causal language
 *        models, as an embeddable C11 library with a stable ABI.
 *
 * This is the public header: it includes every header of include/rlpost/
 * (core.h, then one per handle or concern: context, tokenizer, policy, batch,
 * rollout, algo, task, reward, buffer, sync, comm, trainer), each of which may also be
 * included alone. Everything they declare starts with `rlp_` or `RLP_`. Conventions that hold for every function unless its own comment
 * says otherwise:
 *
 * - **Status.** Functions return `int`: `RLP_OK` (0) on success or a negative
 *   `RLP_E_*` code. On failure a human-readable message naming the argument,
 *   file, field or URL at fault is available from rlp_error_last() on the
 *   same thread.
 * - **Out-parameters** come first and are written only on success.
 * - **Ownership.** Whatever a function returns through `**out` belongs to the
 *   caller and is released with the matching `*_free()`; `*_free(NULL)` is a
 *   no-op. Getters return borrowed pointers that stay valid until the parent
 *   handle is freed or changed.
 * - **Options structs** start with `uint32_t version`, are initialised with
 *   their `RLP_*_OPTIONS_INIT` macro or `rlp_*_options_init()`, are passed by
 *   pointer, and only ever grow at the end. Passing NULL means "defaults".
 * - **Threads.** A handle is used by one thread at a time unless its
 *   functions document otherwise (the replay buffer and the synchronizer are
 *   built for concurrent producers and consumers).
 * - **Callbacks** take `void *payload` last.
 *
 * See docs/ABI.md for what is stable and how the ABI is checked.
 */
#ifndef RLPOST_H
#define RLPOST_H

#include "rlpost/core.h"
#include "rlpost/context.h"
#include "rlpost/tokenizer.h"
#include "rlpost/policy.h"
#include "rlpost/batch.h"
#include "rlpost/env.h"
#include "rlpost/rollout.h"
#include "rlpost/algo.h"
#include "rlpost/task.h"
#include "rlpost/reward.h"
#include "rlpost/buffer.h"
#include "rlpost/sync.h"
#include "rlpost/comm.h"
#include "rlpost/trainer.h"

#endif /* RLPOST_H */
