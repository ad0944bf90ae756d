/* libFuzzer target: the tool-call parsers over model text — Hermes
 * <tool_call> blocks (rlpi_tool_calls_parse_hermes) and the last
 * ASearcher tag (rlpi_tag_action_parse). Calls must lie inside the text,
 * in order, with a name and object arguments; the tag body must lie
 * inside the text. */
#include "tools/tool_call.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1); /* exact size for ASan */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_tool_call *calls = NULL;
    size_t n = 0, bad = 0;
    if (rlpi_tool_calls_parse_hermes(&calls, &n, &bad, buf, size) == 0) {
        size_t prev_end = 0;
        for (size_t i = 0; i < n; i++) {
            if (calls[i].start < prev_end || calls[i].end > size || calls[i].end <= calls[i].start ||
                !calls[i].name[0] || calls[i].arguments[0] != '{')
                abort();
            prev_end = calls[i].end;
        }
        rlpi_tool_calls_free(calls, n);
    }
    size_t b = 0, len = 0;
    rlpi_tag_kind k = rlpi_tag_action_parse(buf, size, &b, &len);
    if ((k == RLPI_TAG_NONE && (b || len)) || b + len > size)
        abort();
    free(buf);
    return 0;
}
