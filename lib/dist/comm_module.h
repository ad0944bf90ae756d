/* The interface between librlpost and a process-group module: a shared
 * object loaded with dlopen (dist/comm_module_loader.c) that carries host
 * collectives over an engine librlpost itself does not link, so that
 * librlpost.so loads on a machine without it:
 *
 *   librlpost-mpi.so   MPI (OpenMPI): ranks come from the launcher
 *                      (mpirun/srun), which also says who the peers are;
 *   librlpost-gloo.so  Gloo's TCP transport (the engine of torch's CPU
 *                      process groups): ranks meet through a key-value
 *                      store (ours: dist/store.c, the env:// rendezvous).
 *
 * The module exports one symbol, rlpi_comm_module_get, returning its
 * table. This header is included by C and by C++ (the Gloo module), so it
 * uses only plain C types. Errors are reported through host->error_set
 * (the message becomes rlp_error_last() of the calling thread); no module
 * function may throw, exit or abort the process. */
#ifndef RLPI_DIST_COMM_MODULE_H
#define RLPI_DIST_COMM_MODULE_H

#include "backend/backend.h" /* rlpi_host_api */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLPI_COMM_MODULE_ABI 1

/* `host` (rlpi_comm_module_args) outlives every group; modules are never
 * unloaded. */

/* A blocking key-value store shared by all ranks (the env:// rendezvous);
 * keys are NUL-terminated strings of at most 255 bytes, values at most
 * 1 MiB. Both functions are thread-safe and return rlp_status codes. */
typedef struct rlpi_comm_store_api {
    void *impl;
    int (*set)(void *impl, const char *key, const void *value, size_t len);
    /* Waits until `key` is set (or timeout_s passes: RLP_E_TIMEOUT), then
     * returns a copy of its value in *value (malloc'd; the caller frees it
     * with free()) and its length in *len. */
    int (*get)(void *impl, const char *key, void **value, size_t *len, double timeout_s);
} rlpi_comm_store_api;

typedef struct rlpi_comm_module_args {
    uint32_t abi;                       /* RLPI_COMM_MODULE_ABI */
    const rlpi_host_api *host;
    int32_t rank, world;                /* Gloo: this rank and the group's size; MPI: -1 and 0, or the
                                           values the caller expects (checked against the launcher's) */
    double timeout_s;                   /* > 0: a wait (one step of a collective) that makes no progress
                                           for this long fails with RLP_E_TIMEOUT */
    const rlpi_comm_store_api *store;   /* Gloo: where the ranks meet; MPI: NULL */
    const char *address;                /* Gloo: the numeric IP address of this host that the peers
                                           reach (the store connection's local address); MPI: NULL */
} rlpi_comm_module_args;

enum { RLPI_CM_F32 = 0, RLPI_CM_F64 = 1 };          /* = RLPI_DT_F32, RLPI_DT_F64 */
enum { RLPI_CM_SUM = 0, RLPI_CM_MAX = 1, RLPI_CM_MIN = 2 }; /* = RLP_REDUCE_* */

typedef struct rlpi_comm_module_api {
    uint32_t abi;                       /* RLPI_COMM_MODULE_ABI */
    const char *name;                   /* "mpi", "gloo" */
    /* Joins the group; *rank and *world receive this process's place in it.
     * RLP_OK; RLP_E_TIMEOUT (a peer never came); RLP_E_INVALID_ARG (the
     * launcher's rank or size differ from the caller's); RLP_E_BACKEND. */
    int (*create)(const rlpi_comm_module_args *args, int32_t *rank, int32_t *world, void **impl);
    /* Collectives: every rank makes the same calls in the same order; a
     * rank in another call (kind, dtype, op, root or size) makes every rank
     * fail with RLP_E_INVALID_ARG. After RLP_E_TIMEOUT or an engine error
     * later calls fail with RLP_E_CLOSED and only destroy is useful; the
     * caller's buffer is never touched after a call returns.
     * all_reduce: in place over host memory, n elements of dtype
     * RLPI_CM_F32/F64, combined in rank order 0, 1, …, W−1 with the SHM
     * transport's operators (comm_shm.c), so every rank receives the same
     * bits as over SHM. */
    int (*all_reduce)(void *impl, void *data, size_t n, int dtype, int op);
    int (*broadcast)(void *impl, void *data, size_t nbytes, int root);
    int (*barrier)(void *impl);
    /* This rank gives up: its later calls fail with RLP_E_CLOSED, and the
     * peers' pending and later collectives fail (Gloo: its pairs close) or
     * time out (MPI cannot tell them without ending the job); idempotent.
     * Never called while a collective of the same group runs (comm.c holds
     * the group's lock). */
    void (*abort)(void *impl, const char *why);
    void (*destroy)(void *impl);
} rlpi_comm_module_api;

typedef const rlpi_comm_module_api *(*rlpi_comm_module_get_fn)(const rlpi_host_api *host);

#ifdef __cplusplus
}
#endif

#endif
