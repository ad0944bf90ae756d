/* TEMPORARY until the built-in and HTTP environments land (helpers). */
#include "env/env_internal.h"
#include "core/error.h"
int rlp_env_create_http(rlp_env **out, const char *url, const char *api_key, const rlp_env_options *opts)
{
    (void)out, (void)url, (void)api_key, (void)opts;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_env_create_http: not built yet");
}
int rlp_env_create_builtin(rlp_env **out, const char *name, const char *options_json, const rlp_env_options *opts)
{
    (void)out, (void)name, (void)options_json, (void)opts;
    return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_env_create_builtin: not built yet");
}
