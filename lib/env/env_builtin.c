/* rlp_env_create_builtin(): the built-in environments by name. Only
 * dispatches; each environment lives in its own file. */
#include "rlpost.h"

#include "core/error.h"
#include "env/env_tools.h"

#include <string.h>

int rlp_env_create_builtin(rlp_env **out, const char *name, const char *options_json, const rlp_env_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(name, "name is NULL");
    if (!strcmp(name, "tools"))
        return rlpi_env_tools_create(out, options_json, opts);
    return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_env_create_builtin: no built-in environment \"%.64s\" (tools)", name);
}
