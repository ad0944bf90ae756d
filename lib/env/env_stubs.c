/* TEMPORARY until the HTTP environment lands (helpers). */
#include "env/env_internal.h"
#include "core/error.h"
int rlp_env_create_http(rlp_env **out, const char *url, const char *api_key, const rlp_env_options *opts)
{
    (void)out, (void)url, (void)api_key, (void)opts;
    return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_env_create_http: not built yet");
}
