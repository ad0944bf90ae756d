/* LoRA on the public policy handle: attaching adapters, their parameter
 * count, and PEFT-format save/load. The adapters themselves live in the
 * transformer (model/lora.h); the optimizer, checkpoints and rollout
 * engines pick them up through its trainable view and merged export. */
#include "model/lora.h"
#include "model/policy.h"
#include "model/qbase.h"

#include "core/error.h"

#include <stddef.h>
#include <string.h>

static const rlp_lora_options default_lora_options = RLP_LORA_OPTIONS_INIT;

int rlp_lora_options_init(rlp_lora_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_LORA_OPTIONS_VERSION, "unknown rlp_lora_options version");
    /* a version-1 caller's struct ends before base_dtype */
    memcpy(opts, &default_lora_options,
           version >= 2 ? sizeof *opts : offsetof(rlp_lora_options, base_dtype));
    opts->version = version;
    return RLP_OK;
}

int rlp_policy_enable_lora(rlp_policy *policy, const rlp_lora_options *opts)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_LORA_OPTIONS_VERSION,
                   "opts->version must be RLP_LORA_OPTIONS_VERSION");
    if (!policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen (trainable = 0)", __func__);
    rlpi_lora_config c = {.rank = opts->rank, .alpha = opts->alpha, .rslora = opts->rslora != 0};
    int rc = opts->targets ? rlpi_lora_parse_targets(opts->targets, &c.targets) : RLP_OK;
    if (!opts->targets)
        c.targets = RLPI_LORA_ALL_TARGETS;
    uint32_t base = RLPI_GGML_F32;
    if (!rc && opts->version >= 2)
        rc = rlpi_qbase_parse_dtype(opts->base_dtype, &base);
    if (!rc)
        rc = rlpi_transformer_attach_lora(policy->tf, &c, opts->seed);
    if (!rc && (rc = rlpi_transformer_quantize_base(policy->tf, base)) != RLP_OK)
        rlpi_transformer_detach_lora(policy->tf); /* as it was: the fp32 base is still there */
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    if (base != RLPI_GGML_F32)
        policy->weights_gen++; /* the values are the dequantized ones now */
    rlpi_optimizer_release(&policy->opt); /* the base's moments: the adapters start their own */
    return RLP_OK;
}

int rlp_policy_n_trainable(uint64_t *out_count, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out_count, "out_count is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    *out_count = policy->trainable ? rlpi_transformer_n_trainable(policy->tf) : 0;
    return RLP_OK;
}

int rlp_policy_save_lora(const rlp_policy *policy, const char *dir, const char *base_model)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(dir && *dir, "dir is NULL or empty");
    int rc = rlpi_lora_save_peft(policy->tf, dir, base_model);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

int rlp_policy_load_lora(rlp_policy *policy, const char *dir)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(dir && *dir, "dir is NULL or empty");
    bool had = rlpi_transformer_lora_config(policy->tf) != NULL;
    int rc = rlpi_lora_load_peft(policy->tf, dir);
    if (rc)
        return rlpi_error_wrap("%s: %s", __func__, dir);
    if (!had)
        rlpi_optimizer_release(&policy->opt);
    policy->weights_gen++; /* a quantized rollout copy is stale now */
    return RLP_OK;
}

bool rlpi_policy_has_lora(const rlp_policy *policy)
{
    return policy && rlpi_transformer_lora_config(policy->tf) != NULL;
}
