/* The public face of the tool-call parser (lib/tools/tool_call.c): a list
 * handle with views, so hosts and the driver parse calls the way the
 * built-in environment does. */
#include "core/error.h"
#include "tools/tool_call.h"

#include "rlpost.h"

#include <stdlib.h>

struct rlp_tool_call_list {
    rlpi_tool_call *calls;
    size_t n;
};

int rlp_tool_calls_parse(rlp_tool_call_list **out, const char *text, size_t len, size_t *n_bad)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(text || len == 0, "text is NULL");
    rlp_tool_call_list *l = calloc(1, sizeof *l);
    if (!l)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_tool_calls_parse: out of memory");
    size_t bad = 0;
    int rc = rlpi_tool_calls_parse_hermes(&l->calls, &l->n, &bad, text ? text : "", len);
    if (rc) {
        free(l);
        return rc;
    }
    if (n_bad)
        *n_bad = bad;
    *out = l;
    return RLP_OK;
}

int rlp_tool_call_list_size(size_t *out_count, const rlp_tool_call_list *list)
{
    RLPI_CHECK_ARG(out_count && list, "out_count and list are required");
    *out_count = list->n;
    return RLP_OK;
}

int rlp_tool_call_list_get(rlp_tool_call *out, const rlp_tool_call_list *list, size_t index)
{
    RLPI_CHECK_ARG(out && list, "out and list are required");
    RLPI_CHECK_ARG(out->version >= 1, "out->version must be set to RLP_TOOL_CALL_VERSION");
    if (index >= list->n)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_tool_call_list_get: index %zu outside the list of %zu", index,
                              list->n);
    const rlpi_tool_call *c = &list->calls[index];
    *out = (rlp_tool_call){.version = RLP_TOOL_CALL_VERSION, .name = c->name, .arguments = c->arguments,
                           .start = c->start, .end = c->end};
    return RLP_OK;
}

void rlp_tool_call_list_free(rlp_tool_call_list *list)
{
    if (!list)
        return;
    rlpi_tool_calls_free(list->calls, list->n);
    free(list);
}
