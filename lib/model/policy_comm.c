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

#include <stdio.h>

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

/* What a rank holds, as doubles (exact for these integers) so one
 * broadcast carries root's and each rank compares its own with it. */
enum { D_PARAMS, D_STORED, D_BLOCK_BYTES, D_BASE_TYPE, D_LORA, D_RANK, D_ALPHA, D_RSLORA, D_TARGETS, D_CRC, D_N };

static int describe(rlp_policy *policy, bool with_crc, double *d)
{
    rlpi_transformer *tf = policy->tf;
    const rlpi_lora_config *lc = rlpi_transformer_lora_config(tf);
    d[D_PARAMS] = (double)rlpi_transformer_n_params(tf);
    d[D_STORED] = (double)rlpi_transformer_n_stored(tf);
    d[D_BLOCK_BYTES] = (double)rlpi_transformer_base_block_bytes(tf);
    d[D_BASE_TYPE] = (double)rlpi_transformer_base_type(tf);
    d[D_LORA] = lc != NULL;
    d[D_RANK] = lc ? lc->rank : 0;
    d[D_ALPHA] = lc ? lc->alpha : 0;
    d[D_RSLORA] = lc ? lc->rslora : 0;
    d[D_TARGETS] = lc ? lc->targets : 0;
    d[D_CRC] = -1;
    uint32_t crc = 0;
    if (with_crc && lc) {
        int rc = rlpi_lora_base_fingerprint(tf, &crc);
        if (rc)
            return rc;
        d[D_CRC] = crc;
    }
    return RLP_OK;
}

/* Gets this rank ready to receive root's weights, or says why it cannot
 * (msg). A rank without adapters receiving a LoRA root's attaches
 * inference-only ones of root's config when it is frozen (a rollout
 * rank's copy); *attached says so, for undoing. *need_base: this rank's
 * base differs from root's (by the CRC-32 of the fp32 values). */
static bool prepare(rlp_policy *policy, const double *root, bool *attached, bool *need_base, char *msg, size_t cap)
{
    rlpi_transformer *tf = policy->tf;
    double me[D_N];
    *attached = false;
    *need_base = true;
    if (root[D_LORA] && !rlpi_transformer_lora_config(tf)) {
        if (policy->trainable) {
            snprintf(msg, cap, "root's policy has LoRA adapters and this trainable one has none "
                               "(attach the same adapters, rlp_policy_enable_lora)");
            return false;
        }
        rlpi_lora_config c = {.rank = (int32_t)root[D_RANK], .alpha = (float)root[D_ALPHA],
                              .rslora = root[D_RSLORA] != 0, .targets = (uint32_t)root[D_TARGETS]};
        if (rlpi_transformer_attach_lora(tf, &c, 0) != RLP_OK) {
            snprintf(msg, cap, "attaching root's adapters: %s", rlp_error_last());
            return false;
        }
        *attached = true;
    }
    if (describe(policy, root[D_LORA] != 0, me) != RLP_OK) {
        snprintf(msg, cap, "%s", rlp_error_last());
        return false;
    }
    if (me[D_LORA] != root[D_LORA] || me[D_RANK] != root[D_RANK] || me[D_ALPHA] != root[D_ALPHA] ||
        me[D_RSLORA] != root[D_RSLORA] || me[D_TARGETS] != root[D_TARGETS]) {
        snprintf(msg, cap, "the ranks' adapters differ (root: %s rank %.0f; this rank: %s rank %.0f)",
                 root[D_LORA] ? "LoRA" : "none", root[D_RANK], me[D_LORA] ? "LoRA" : "none", me[D_RANK]);
        return false;
    }
    if (me[D_PARAMS] != root[D_PARAMS]) {
        snprintf(msg, cap, "the ranks' policies differ in size (root %.0f parameters, this rank %.0f)",
                 root[D_PARAMS], me[D_PARAMS]);
        return false;
    }
    /* adapters over the same base need only the adapters: the frozen base
     * is what both hold (LoRA trainers publish adapters only) */
    *need_base = !root[D_LORA] || me[D_CRC] != root[D_CRC];
    if (*need_base && (me[D_STORED] != root[D_STORED] || me[D_BLOCK_BYTES] != root[D_BLOCK_BYTES] ||
                       me[D_BASE_TYPE] != root[D_BASE_TYPE])) {
        snprintf(msg, cap, "the ranks' bases differ and are stored differently (root %s, this rank %s): the "
                           "base cannot be sent",
                 rlpi_qbase_dtype_name((uint32_t)root[D_BASE_TYPE]), rlpi_qbase_dtype_name((uint32_t)me[D_BASE_TYPE]));
        return false;
    }
    return true;
}

int rlp_policy_broadcast(rlp_policy *policy, rlp_comm *comm, int32_t root)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(comm, "comm is NULL");
    RLPI_CHECK_ARG(root >= 0 && root < comm->world, "root is outside the group");
    if (comm->ctx->kind != policy->ctx->kind)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the policy and the process group are on different backends",
                              __func__);
    /* root's description to everyone, then every rank says whether it can
     * take root's weights and whether it needs the base; nobody moves a
     * weight unless all can */
    double d[D_N] = {0};
    int rc = comm->rank == root ? describe(policy, true, d) : RLP_OK;
    double flags[2] = {rc != RLP_OK, 0}; /* any rank refuses, any rank needs the base */
    char msg[512] = "";
    if (rc)
        snprintf(msg, sizeof msg, "%s", rlp_error_last());
    if ((rc = rlpi_comm_broadcast_host(comm, d, sizeof d, root)) != RLP_OK)
        return rlpi_error_wrap("%s", __func__);
    bool attached = false, need_base = true;
    if (!flags[0] && comm->rank != root && !prepare(policy, d, &attached, &need_base, msg, sizeof msg))
        flags[0] = 1;
    if (comm->rank == root)
        need_base = d[D_LORA] == 0; /* root's own verdict comes from the others */
    flags[1] = need_base;
    if ((rc = rlpi_comm_all_reduce_host(comm, flags, 2, RLPI_DT_F64, RLP_REDUCE_MAX)) != RLP_OK) {
        if (attached)
            rlpi_transformer_detach_lora(policy->tf);
        return rlpi_error_wrap("%s", __func__);
    }
    if (flags[0]) {
        if (attached)
            rlpi_transformer_detach_lora(policy->tf);
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s", __func__,
                              *msg ? msg : "another rank cannot take root's weights (its error says why)");
    }
    uint64_t version = policy->version;
    rc = rlpi_comm_broadcast_host(comm, &version, sizeof version, root);
    if (!rc && flags[1]) {
        size_t ns = rlpi_transformer_n_stored(policy->tf), nq = rlpi_transformer_base_block_bytes(policy->tf);
        rc = rlpi_comm_broadcast_buffer(comm, rlpi_transformer_params(policy->tf), 0, ns * 4, root);
        if (!rc && nq > 0) /* the blocks (host memory); the window is reloaded from them */
            rc = rlpi_comm_broadcast_host(comm, rlpi_transformer_base_blocks(policy->tf), nq, root);
        rlpi_lora_base_changed(policy->tf);
    }
    policy->bytes_broadcast = flags[1] ? (uint64_t)rlpi_transformer_n_stored(policy->tf) * 4 +
                                             rlpi_transformer_base_block_bytes(policy->tf)
                                       : 0;
    if (!rc && d[D_LORA]) {
        size_t na = rlpi_transformer_n_trainable(policy->tf);
        rc = rlpi_comm_broadcast_buffer(comm, rlpi_transformer_trainable_params(policy->tf), 0, na * 4, root);
        policy->bytes_broadcast += (uint64_t)na * 4;
    }
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    policy->version = version;
    policy->weights_gen++;
    return RLP_OK;
}
