/* Thread-local last error and the static status strings. No allocation:
 * the message lives in a fixed thread-local buffer. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RLPI_ERROR_MAX 1024

static _Thread_local char tl_message[RLPI_ERROR_MAX];
static _Thread_local int tl_code;

static void mark_truncated(int written)
{
    if (written >= RLPI_ERROR_MAX)
        memcpy(tl_message + RLPI_ERROR_MAX - 4, "...", 4);
}

int rlpi_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tl_message, sizeof tl_message, fmt, ap);
    va_end(ap);
    if (n < 0)
        tl_message[0] = '\0';
    mark_truncated(n);
    tl_code = code;
    return code;
}

int rlpi_error_wrap(const char *fmt, ...)
{
    char prefix[RLPI_ERROR_MAX];
    char old[RLPI_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0)
        return tl_code;
    memcpy(old, tl_message, sizeof old);
    n = snprintf(tl_message, sizeof tl_message, "%s: %s", prefix, old);
    mark_truncated(n);
    return tl_code;
}

const char *rlp_error_last(void)
{
    return tl_message;
}

int rlp_error_last_code(void)
{
    return tl_code;
}

void rlp_error_clear(void)
{
    tl_message[0] = '\0';
    tl_code = RLP_OK;
}

const char *rlp_status_str(int status)
{
    switch (status) {
    case RLP_OK: return "ok";
    case RLP_E_INVALID_ARG: return "invalid argument";
    case RLP_E_NOMEM: return "out of memory";
    case RLP_E_IO: return "I/O error";
    case RLP_E_FORMAT: return "malformed input";
    case RLP_E_UNSUPPORTED: return "unsupported";
    case RLP_E_BACKEND: return "backend error";
    case RLP_E_TIMEOUT: return "timed out";
    case RLP_E_NETWORK: return "network error";
    case RLP_E_CALLBACK: return "callback failed";
    case RLP_E_CLOSED: return "closed";
    case RLP_E_AGAIN: return "try again";
    case RLP_E_NOT_FOUND: return "not found";
    case RLP_E_STATE: return "invalid state";
    case RLP_E_OVERFLOW: return "size overflow";
    case RLP_E_INTERNAL: return "internal error";
    default: return "unknown status";
    }
}
