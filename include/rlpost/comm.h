/**
 * @file rlpost/comm.h
 * @brief librlpost: process groups (rlp_comm): data-parallel training and weight broadcast.
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_COMM_H
#define RLPOST_COMM_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Process groups: data-parallel training and weight broadcast              */
/* ------------------------------------------------------------------------ */

/*
 * A process group (rlp_comm, "communicator"): world_size processes, one per device
 * (or per CPU share), that run collectives together. Data parallelism
 * (rlp_policy_set_comm()) all-reduces gradients through it; rlp_policy_broadcast()
 * sends weights from one rank to the others (the trainer to co-located
 * rollout engines).
 *
 * Every collective is called by every rank of the group, in the same order,
 * with the same sizes; a rank that calls with another size makes them all
 * fail with RLP_E_INVALID_ARG instead of corrupting memory. Sums are taken
 * in rank order 0, 1, …, so every rank receives the same bits and a rerun
 * reproduces them: the same bits over SHM, MPI and Gloo (NCCL's ring order
 * is fixed for a given topology).
 */
/** How the ranks exchange data (values fixed). */
typedef enum rlp_comm_transport {
    RLP_COMM_AUTO = 0,  /**< launched by mpirun/srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set)
                             with no rendezvous given: MPI; otherwise NCCL on a CUDA context where NCCL
                             loads; otherwise Gloo for a TCP rendezvous (env://, tcp://) and SHM for a
                             rendezvous file */
    RLP_COMM_SHM = 1,   /**< POSIX shared memory between processes (or threads) of one machine; any
                             backend (device buffers are staged through host memory) */
    RLP_COMM_NCCL = 2,  /**< NCCL on CUDA contexts (one GPU per rank, one or several machines); the
                             unique id travels through the rendezvous (a file every rank sees, or the
                             TCP store of env:// / tcp://) */
    RLP_COMM_MPI = 3,   /**< MPI (the librlpost-mpi.so module, OpenMPI): ranks, world size and peers
                             come from the launcher (`mpirun -n 4 …`, srun); no rendezvous; host
                             memory (device buffers staged) */
    RLP_COMM_GLOO = 4   /**< Gloo's TCP transport (the librlpost-gloo.so module; torch's CPU process
                             groups): ranks on any hosts meet through the TCP rendezvous (env:// or
                             tcp://HOST:PORT); host memory (device buffers staged) */
} rlp_comm_transport;

/** Reductions of rlp_comm_all_reduce() (values fixed). */
typedef enum rlp_reduce_op {
    RLP_REDUCE_SUM = 0,
    RLP_REDUCE_MAX = 1,
    RLP_REDUCE_MIN = 2
} rlp_reduce_op;

/** Version of rlp_comm_options understood by this header. */
#define RLP_COMM_OPTIONS_VERSION 1

/**
 * Options of rlp_comm_create(). Unset fields come from the environment,
 * torchrun-style: rank from RLPOST_RANK, else RANK, else the MPI
 * launcher's (OMPI_COMM_WORLD_RANK, PMI_RANK); world size from
 * RLPOST_WORLD_SIZE, else WORLD_SIZE, else OMPI_COMM_WORLD_SIZE, PMI_SIZE;
 * rendezvous from RLPOST_RENDEZVOUS.
 *
 * Rendezvous, as torch's init_method:
 * - a file path: one machine (or a file system every rank sees); rank 0
 *   writes it, the others poll it;
 * - "env://": the TCP store at MASTER_ADDR:MASTER_PORT, which rank 0
 *   serves (listening on every address of its host) and every rank
 *   connects to; no shared file system;
 * - "tcp://HOST:PORT" ("tcp://[v6addr]:PORT"): the same store, named here.
 * Over the store the ranks check that they agree on the world size and
 * transport (ranks that disagree all fail, with a message naming the
 * rank; a second process claiming a rank already taken is refused), and
 * rank 0 hands out the NCCL unique id or Gloo's addresses. The MPI transport takes no rendezvous.
 */
typedef struct rlp_comm_options {
    uint32_t version;        /**< RLP_COMM_OPTIONS_VERSION */
    int32_t transport;       /**< rlp_comm_transport; default RLP_COMM_AUTO */
    int32_t rank;            /**< 0 … world_size − 1; −1 (default) = from the environment */
    int32_t world_size;      /**< ≥ 1; 0 (default) = from the environment */
    const char *rendezvous;  /**< "env://", "tcp://HOST:PORT", or the path of a rendezvous file: rank 0
                                  replaces it with a fresh one (JSON: world size, transport, the
                                  shared-memory name or NCCL id, its pid) and removes it when all ranks
                                  joined; the others wait for it. Use one path (or port) per run.
                                  NULL = RLPOST_RENDEZVOUS. Copied. */
    uint32_t timeout_ms;     /**< the rendezvous and every collective fail with RLP_E_TIMEOUT after this
                                  long without progress (a dead or stuck peer); 0 = 300000 */
} rlp_comm_options;

#define RLP_COMM_OPTIONS_INIT { RLP_COMM_OPTIONS_VERSION, RLP_COMM_AUTO, -1, 0, NULL, 0 }

/** Fills @p opts with the defaults. RLP_OK or RLP_E_INVALID_ARG. */
RLP_API int rlp_comm_options_init(rlp_comm_options *opts, uint32_t version);

/**
 * Joins a process group: blocks until all world_size ranks have joined
 * through the rendezvous (or the timeout).
 *
 * @param[out] out  the communicator; free with rlp_comm_free()
 * @param ctx       context whose backend holds the buffers the group reduces (gradients); must outlive it
 * @param opts      options or NULL (all from the environment)
 * @return RLP_OK; RLP_E_INVALID_ARG (rank outside [0, world_size), world_size < 1, no rendezvous
 *         path, unknown transport, a rank that joined twice, ranks that disagree on the world size or
 *         transport, a rank or size that differs from the MPI launcher's, MASTER_ADDR/MASTER_PORT
 *         unset for env://); RLP_E_UNSUPPORTED (NCCL on a CPU context, Gloo without a TCP
 *         rendezvous, or a transport whose module is not loadable: the message says why);
 *         RLP_E_TIMEOUT (a rank did not come); RLP_E_IO (the store's port is busy);
 *         RLP_E_BACKEND (NCCL, MPI or Gloo failed); RLP_E_NOMEM.
 */
RLP_API int rlp_comm_create(rlp_comm **out, rlp_context *ctx, const rlp_comm_options *opts);

/** Leaves the group. Peers still waiting in a collective for this rank fail
 *  with RLP_E_CLOSED instead of waiting for the timeout (SHM, Gloo: the pairs'
 *  sockets close; over MPI, which cannot tell its peers without ending the
 *  job, they fail at the timeout). NULL is a no-op. */
RLP_API void rlp_comm_free(rlp_comm *comm);

/**
 * This process's rank, the group's size and its transport (any may be NULL).
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_comm_info(const rlp_comm *comm, int32_t *rank, int32_t *world_size, int32_t *transport);

/**
 * Waits until every rank has called it. @return RLP_OK; RLP_E_TIMEOUT;
 * RLP_E_CLOSED (a peer left or failed; the group is unusable afterwards).
 */
RLP_API int rlp_comm_barrier(rlp_comm *comm);

/**
 * In-place all-reduce of @p n host doubles: afterwards every rank holds
 * op(values of rank 0, …, rank world−1), combined in rank order.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL values with n > 0, unknown op,
 *         ranks disagreeing on n or op); RLP_E_TIMEOUT; RLP_E_CLOSED; RLP_E_BACKEND.
 * Collectives on one communicator are serialised; call them from one thread per rank.
 */
RLP_API int rlp_comm_all_reduce(rlp_comm *comm, double *values, size_t n, int op);

/**
 * Broadcasts @p nbytes host bytes from rank @p root to all ranks (in place).
 * @return as rlp_comm_all_reduce(), plus RLP_E_INVALID_ARG for root outside the group.
 */
RLP_API int rlp_comm_broadcast(rlp_comm *comm, void *data, size_t nbytes, int32_t root);

/**
 * Data parallelism (the DDP pattern): after this call every
 * rlp_policy_train_step() and rlp_policy_train_rl() on @p policy is a
 * collective of the group. Each rank passes its own share of the step's
 * sequences (a rank may have none); the step's token and sequence totals
 * are summed over ranks before the loss sees them, the gradients are
 * summed after the backward (so a token-mean loss gives the gradient of
 * the whole global batch), and the norm, clipping and AdamW then run
 * identically everywhere, leaving bit-identical weights on all ranks.
 * RL steps also reduce their step normalisers, REINFORCE++'s batch
 * statistics and the reported statistics, and run the same number of
 * optimizer steps on every rank. Start all ranks from the same weights
 * (load the same file, or rlp_policy_broadcast()).
 *
 * @param policy  a trainable policy on the communicator's context
 * @param comm    the group (borrowed; must outlive its use), or NULL to train alone again
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL policy, another context); RLP_E_STATE (frozen policy).
 */
RLP_API int rlp_policy_set_comm(rlp_policy *policy, rlp_comm *comm);

/**
 * Collective: copies rank @p root's weights and version into @p policy on
 * every other rank (same architecture everywhere; trainable or frozen).
 * The weight broadcast of Echo's co-located rollout engines: the trainer
 * rank broadcasts after a step, a rollout rank receives into a frozen
 * policy and passes it to rlp_rollout_engine_update_weights().
 * Optimizer state is not sent: start data-parallel ranks with fresh
 * optimizers, or have each load the same rlp_policy_save_optimizer() file.
 *
 * A root with LoRA adapters (rlp_policy_enable_lora) sends its adapters,
 * and its frozen base only when some rank's base differs from it (each
 * rank compares the CRC-32 of its fp32 base values with root's): over the
 * same base a version costs the adapters' bytes, not the model's. A frozen
 * receiver without adapters attaches inference-only adapters of root's
 * configuration; a trainable one must have attached the same adapters.
 * Every rank first agrees that all can take root's weights, so a refusal
 * moves nothing anywhere.
 * @return RLP_OK; RLP_E_INVALID_ARG (NULLs, root outside the group, ranks whose parameter counts,
 *         adapters or base storage differ; each rank's message names what); RLP_E_TIMEOUT;
 *         RLP_E_CLOSED; RLP_E_BACKEND.
 */
RLP_API int rlp_policy_broadcast(rlp_policy *policy, rlp_comm *comm, int32_t root);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_COMM_H */
