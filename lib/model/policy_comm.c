/* Data parallelism and weight broadcast on a policy: attaching a process
 * group (the train step and the RL step do their collectives through
 * policy->comm), and rlp_policy_broadcast(). The gradient all-reduce
 * itself sits in the train step (model/policy.c), between the backward
 * and the optimizer, where DDP puts it. The policy uses process groups;
 * process groups (lib/dist) know nothing of policies. */
#include "model/lora.h"
#include "model/policy.h"
#include "model/qbase.h"

#include "core/error.h"
#include "dist/comm.h"

int rlp_policy_set_comm(rlp_policy *policy, rlp_comm *comm)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    if (comm && comm->ctx != policy->ctx)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the process group belongs to another context", __func__);
    if (comm && !policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen (data parallelism is for training)", __func__);
    policy->comm = comm;
    return RLP_OK;
}

int rlp_policy_broadcast(rlp_policy *policy, rlp_comm *comm, int32_t root)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(comm, "comm is NULL");
    RLPI_CHECK_ARG(root >= 0 && root < comm->world, "root is outside the group");
    if (comm->ctx->kind != policy->ctx->kind)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the policy and the process group are on different backends",
                              __func__);
    /* same shape everywhere, or nobody moves a byte: compare parameter
     * counts (the base's plus the adapters' under LoRA: a rank with and a
     * rank without adapters differ) */
    double nb = (double)rlpi_transformer_n_params(policy->tf), na = (double)rlpi_transformer_n_trainable(policy->tf);
    bool lora = rlpi_transformer_lora_config(policy->tf) != NULL;
    /* a quantized base stores fewer floats and its blocks: those must agree too */
    double ns = (double)rlpi_transformer_n_stored(policy->tf), nq = (double)rlpi_transformer_base_block_bytes(policy->tf);
    double n = nb + (lora ? na : 0) + (ns != nb ? ns + nq : 0), range[2] = {n, -n}; /* min, −max: one call */
    int rc = rlpi_comm_all_reduce_host(comm, range, 2, RLPI_DT_F64, RLP_REDUCE_MIN);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    double lo = range[0], hi = -range[1];
    if (lo != hi)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: the ranks' policies differ in size (%.0f to %.0f parameters; this rank %.0f)",
                              __func__, lo, hi, n);
    uint64_t version = policy->version;
    rc = rlpi_comm_broadcast_host(comm, &version, sizeof version, root);
    if (!rc)
        rc = rlpi_comm_broadcast_buffer(comm, rlpi_transformer_params(policy->tf), 0, (size_t)ns * 4, root);
    if (!rc && nq > 0) /* the blocks (host memory), then the window is reloaded from them */
        rc = rlpi_comm_broadcast_host(comm, rlpi_transformer_base_blocks(policy->tf), (size_t)nq, root);
    rlpi_lora_base_changed(policy->tf);
    if (!rc && lora)
        rc = rlpi_comm_broadcast_buffer(comm, rlpi_transformer_trainable_params(policy->tf), 0, (size_t)na * 4, root);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    policy->version = version;
    policy->weights_gen++;
    return RLP_OK;
}
