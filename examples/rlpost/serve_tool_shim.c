/* lib/tools/tool_call.c is compiled into the driver: its Hermes parser is
 * not public API. Its one dependency on the library's internals is the
 * error setter, which librlpost keeps hidden; this stands in for it. The
 * parser fails only on a NULL argument (never passed here) or out of
 * memory, and the driver reads its return code alone. */
#include "core/error.h"

int rlpi_error_set(int code, const char *fmt, ...)
{
    (void)fmt;
    return code;
}
