/* rlp_rl_options_init and the conversion of older callers' options. */
#include "algo/rl_options.h"

#include "algo/rl_math.h"

#include "core/error.h"

#include <string.h>

int rlp_rl_options_init(rlp_rl_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_RL_OPTIONS_VERSION, "unknown version");
    rlp_rl_options d = RLP_RL_OPTIONS_INIT;
    d.version = version;
    /* a version-1 caller's struct ends before sapo_tau_pos */
    memcpy(opts, &d, version == 1 ? sizeof(rlpi_rl_options_v1) : sizeof d);
    return RLP_OK;
}

void rlpi_rl_options_from_v1(rlp_rl_options *out, const rlpi_rl_options_v1 *in)
{
    rlp_rl_options d = RLP_RL_OPTIONS_INIT;
    memcpy(&d, in, sizeof *in);
    d.version = RLP_RL_OPTIONS_VERSION;
    *out = d;
}

int rlpi_rl_options_upgrade(rlp_rl_options *out, const rlp_rl_options *in, const char *what)
{
    rlp_rl_options d = RLP_RL_OPTIONS_INIT;
    *out = d;
    if (!in)
        return RLP_OK;
    if (in->version == 1) {
        rlpi_rl_options_from_v1(out, (const rlpi_rl_options_v1 *)(const void *)in);
        return RLP_OK;
    }
    if (in->version != RLP_RL_OPTIONS_VERSION)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s->version: unknown version %u (this library reads 1 to %d)",
                              what, in->version, RLP_RL_OPTIONS_VERSION);
    *out = *in;
    return RLP_OK;
}

int rlp_rl_options_check(const rlp_rl_options *opts)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    rlp_rl_options o;
    int rc = rlpi_rl_options_upgrade(&o, opts, "opts");
    return rc ? rc : rlpi_rl_options_check(&o);
}
