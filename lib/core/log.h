/* Logging through a context's sink. The logger is a small value that a
 * handle copies from its context, so lower layers can log without
 * reaching up to the context type. */
#ifndef RLPI_CORE_LOG_H
#define RLPI_CORE_LOG_H

#include "core/error.h"

typedef struct rlpi_logger {
    rlp_log_fn fn;      /* NULL: stderr */
    void *payload;
    int level;          /* threshold, an rlp_log_level */
} rlpi_logger;

/* Formats and delivers one message if `level` passes the threshold.
 * `log` may be NULL (then only warnings and errors go to stderr). */
void rlpi_log(const rlpi_logger *log, int level, const char *fmt, ...) RLPI_PRINTF(3, 4);

#endif
