/**
 * @file rlpost/core.h
 * @brief librlpost: export and deprecation macros, versions, status codes and errors, the opaque handle types, logging.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_CORE_H
#define RLPOST_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "rlpost_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Export and deprecation macros                                            */
/* ------------------------------------------------------------------------ */

/** Marks a public function. The library is built with hidden visibility and
 *  a linker version script, so only symbols carrying RLP_API are exported. */
#if defined(_WIN32) && defined(RLPOST_BUILDING)
#define RLP_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(RLPOST_STATIC)
#define RLP_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define RLP_API __attribute__((visibility("default")))
#else
#define RLP_API
#endif

/** Marks a public function that still works but will be removed at the next
 *  ABI break; the message names its replacement. */
#if defined(__GNUC__) || defined(__clang__)
#define RLP_DEPRECATED(msg) __attribute__((deprecated(msg)))
#elif defined(_MSC_VER)
#define RLP_DEPRECATED(msg) __declspec(deprecated(msg))
#else
#define RLP_DEPRECATED(msg)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

/** Run-time version as `MAJOR*10000 + MINOR*100 + PATCH`; compare with
 *  RLP_VERSION_NUMBER to detect a header/library mismatch.
 *  Thread-safe. */
RLP_API unsigned rlp_version_number(void);

/** Run-time version as a static string "MAJOR.MINOR.PATCH". Thread-safe;
 *  the string is owned by the library and never freed. */
RLP_API const char *rlp_version_string(void);

/** ABI version (the shared object's SOVERSION). It changes only on an
 *  incompatible ABI change, independently of the release version.
 *  Thread-safe. */
RLP_API unsigned rlp_abi_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                  */
/* ------------------------------------------------------------------------ */

/** Status codes. Values are fixed forever; new codes are only appended. */
typedef enum rlp_status {
    RLP_OK = 0,                /**< success */
    RLP_E_INVALID_ARG = -1,    /**< a NULL handle or pointer, a bad enum value, a value out of range */
    RLP_E_NOMEM = -2,          /**< an allocation failed (host or device) */
    RLP_E_IO = -3,             /**< a file could not be opened, read, written or synced */
    RLP_E_FORMAT = -4,         /**< a file or message is malformed (bad magic, bounds, JSON) */
    RLP_E_UNSUPPORTED = -5,    /**< valid, but not supported (dtype, architecture, option) */
    RLP_E_BACKEND = -6,        /**< the compute backend failed or is not available here */
    RLP_E_TIMEOUT = -7,        /**< a wait, peer or callback ran past its deadline */
    RLP_E_NETWORK = -8,        /**< a network peer could not be reached or answered badly */
    RLP_E_CALLBACK = -9,       /**< a user callback returned an error */
    RLP_E_CLOSED = -10,        /**< the handle was shut down; no more work is accepted */
    RLP_E_AGAIN = -11,         /**< would block (full, empty, busy): try again later */
    RLP_E_NOT_FOUND = -12,     /**< a named item (tensor, key, token, file) does not exist */
    RLP_E_STATE = -13,         /**< the call is not valid in the handle's current state */
    RLP_E_OVERFLOW = -14,      /**< a size or count does not fit (arithmetic overflow, buffer too small) */
    RLP_E_INTERNAL = -15       /**< a bug in librlpost: please report it */
} rlp_status;

/** A static English description of any status code (unknown codes give
 *  "unknown status"). Never returns NULL. Thread-safe. */
RLP_API const char *rlp_status_str(int status);

/** The message describing the last failure of a librlpost call on the
 *  calling thread, e.g. "rlp_context_create: options->backend: 7 is not a
 *  backend kind". The string is thread-local, owned by the library, and valid
 *  until the next failing librlpost call on this thread. Returns "" when no error has
 *  been recorded. Never returns NULL. */
RLP_API const char *rlp_error_last(void);

/** The status code that went with rlp_error_last() (RLP_OK if none).
 *  Thread-local. */
RLP_API int rlp_error_last_code(void);

/** Forgets the calling thread's last error. */
RLP_API void rlp_error_clear(void);

/* ------------------------------------------------------------------------ */
/* Opaque handles                                                           */
/* ------------------------------------------------------------------------ */

/** Execution context: backend, device, threads, seed, logging. */
typedef struct rlp_context rlp_context;
/** Tokenizer: encode/decode, special tokens, chat templates. */
typedef struct rlp_tokenizer rlp_tokenizer;
/** Causal language model with trainable weights and optimizer state. */
typedef struct rlp_policy rlp_policy;
/** Generates sampled completions with behaviour logprobs and version tags. */
typedef struct rlp_rollout_engine rlp_rollout_engine;
/** Thread-safe, staleness-bounded store of version-tagged trajectory groups. */
typedef struct rlp_replay_buffer rlp_replay_buffer;
/** Scores trajectories (C callbacks, built-ins, HTTP verifiers). */
typedef struct rlp_reward_fn rlp_reward_fn;
/** Owns the policy version counter, the sync mode and the staleness gate. */
typedef struct rlp_synchronizer rlp_synchronizer;
/** A batch of trajectories (prompt, completion, logprobs, versions, reward). */
typedef struct rlp_batch rlp_batch;
/** A process group: data-parallel gradient all-reduce, weight broadcast (SHM or NCCL). */
typedef struct rlp_comm rlp_comm;

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

/** Log severities; a context logs messages at or above its level. */
typedef enum rlp_log_level {
    RLP_LOG_DEBUG = 0,
    RLP_LOG_INFO = 1,
    RLP_LOG_WARN = 2,
    RLP_LOG_ERROR = 3,
    RLP_LOG_NONE = 4  /**< as a threshold: log nothing */
} rlp_log_level;

/**
 * Receives the library's log messages.
 *
 * @param level    an rlp_log_level
 * @param message  NUL-terminated, without a trailing newline; borrowed for
 *                 the duration of the call
 * @param payload  the pointer given with the callback
 *
 * May be called from any thread the library runs (worker threads included),
 * concurrently: it must be thread-safe and must not call back into the
 * handle that is logging.
 */
typedef void (*rlp_log_fn)(int level, const char *message, void *payload);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_CORE_H */
