/* Thread-local last-error record behind rlp_error_last().
 * Internal code reports a failure with rlpi_error_set(), which records the
 * message and returns the code so that `return rlpi_error_set(...)` reads
 * naturally. Must not allocate: it has to work when memory is exhausted. */
#ifndef RLPI_CORE_ERROR_H
#define RLPI_CORE_ERROR_H

#include "rlpost.h"

#if defined(__GNUC__) || defined(__clang__)
#define RLPI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RLPI_PRINTF(f, a)
#endif

/* Records `code` and a printf-style message for the calling thread;
 * returns `code`. Messages longer than the buffer are truncated with "...". */
int rlpi_error_set(int code, const char *fmt, ...) RLPI_PRINTF(2, 3);

/* Prefixes the current message with "prefix: " (used when a lower layer's
 * error passes up through a public function); returns the current code. */
int rlpi_error_wrap(const char *fmt, ...) RLPI_PRINTF(1, 2);

/* Validates a public argument: on failure records RLP_E_INVALID_ARG with
 * "<function>: <what>" and returns it from the enclosing function. */
#define RLPI_CHECK_ARG(cond, what)                                              \
    do {                                                                        \
        if (!(cond))                                                            \
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s", __func__, what); \
    } while (0)

/* Same, for functions that return a pointer: returns NULL. */
#define RLPI_CHECK_ARG_NULL(cond, what)                                  \
    do {                                                                 \
        if (!(cond)) {                                                   \
            rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s", __func__, what); \
            return NULL;                                                 \
        }                                                                \
    } while (0)

#endif
