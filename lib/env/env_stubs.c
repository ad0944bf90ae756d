/* TEMPORARY until the built-in environments land (helpers); the HTTP one is env_http.c. */
#include "env/env_internal.h"
#include "core/error.h"
int rlp_env_create_builtin(rlp_env **out, const char *name, const char *options_json, const rlp_env_options *opts)
{
    (void)out, (void)name, (void)options_json, (void)opts;
    return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_env_create_builtin: not built yet");
}
