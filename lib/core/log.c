/* Formats log messages and hands them to the user's sink (or stderr).
 * Must stay callable from any thread: no shared mutable state. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static const char *level_name(int level)
{
    switch (level) {
    case RLP_LOG_DEBUG: return "debug";
    case RLP_LOG_INFO: return "info";
    case RLP_LOG_WARN: return "warn";
    default: return "error";
    }
}

void rlpi_log(const rlpi_logger *log, int level, const char *fmt, ...)
{
    int threshold = log ? __atomic_load_n(&log->level, __ATOMIC_RELAXED) : RLP_LOG_WARN;
    if (level < threshold || level >= RLP_LOG_NONE)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (log && log->fn)
        log->fn(level, msg, log->payload);
    else
        fprintf(stderr, "rlpost %s: %s\n", level_name(level), msg);
}
