/* Process groups (rlp_comm): the collectives data parallelism and weight
 * broadcast need, over interchangeable transports. comm.c owns the public
 * API, argument checks, the environment and the staging of device buffers
 * through host memory; a transport fills rlpi_comm_ops with whatever it
 * does natively (SHM: host memory; NCCL: device memory) and comm.c
 * bridges the rest. */
#ifndef RLPI_DIST_COMM_H
#define RLPI_DIST_COMM_H

#include "backend/backend.h"
#include "core/clock.h"
#include "dist/comm_module.h"
#include "dist/store.h"
#include "rlpost.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { RLPI_DT_F32 = 0, RLPI_DT_F64 = 1, RLPI_DT_BYTES = 2 };

static inline size_t rlpi_dt_size(int dt)
{
    return dt == RLPI_DT_F64 ? 8 : dt == RLPI_DT_F32 ? 4 : 1;
}

/* A transport's name in rendezvous documents and messages. */
static inline const char *rlpi_comm_transport_name(int32_t t)
{
    return t == RLP_COMM_NCCL ? "nccl" : t == RLP_COMM_GLOO ? "gloo" : t == RLP_COMM_MPI ? "mpi" : "shm";
}

/* Slots a transport leaves NULL are bridged by comm.c: host ops through a
 * temporary backend buffer, buffer ops through host staging. */
typedef struct rlpi_comm_ops {
    const char *name;
    /* in place over host memory; n elements of dtype (f32/f64) */
    int (*all_reduce_host)(void *impl, void *data, size_t n, int dtype, int op);
    int (*broadcast_host)(void *impl, void *data, size_t nbytes, int root);
    /* in place over backend memory (device pointers for NCCL) */
    int (*all_reduce_device)(void *impl, rlpi_buffer *buf, size_t off_bytes, size_t n, int dtype, int op);
    int (*broadcast_device)(void *impl, rlpi_buffer *buf, size_t off_bytes, size_t nbytes, int root);
    int (*barrier)(void *impl);
    /* tells the peers this rank will not take part any more (they fail
     * with RLP_E_CLOSED); idempotent */
    void (*abort)(void *impl, const char *why);
    void (*destroy)(void *impl);
} rlpi_comm_ops;

struct rlp_comm {
    const rlpi_comm_ops *ops;
    void *impl;
    rlp_context *ctx;           /* borrowed */
    int32_t rank, world, transport;
    uint32_t timeout_ms;
    rlpi_store *store;          /* env:// / tcp:// rendezvous: kept for the group's life (rank 0 serves it) */
    pthread_mutex_t lock;       /* one collective at a time */
    bool broken;                /* a collective failed: the group is out of step */
};

/* Staging size for device <-> host bridging. */
#define RLPI_COMM_CHUNK_BYTES ((size_t)4 << 20)

/* The SHM transport's slot size for `world` ranks: two sets of world slots
 * within 32 MiB of shared memory, between 256 KiB and 4 MiB (fewer, larger
 * chunks mean fewer barriers: 4 MiB moved a 538 MB all-reduce of 2 ranks in
 * 0.18 s against 0.27 s with 1 MiB). A pure function of world, so every
 * rank computes the same layout. */
static inline size_t rlpi_comm_slot_bytes(int32_t world)
{
    size_t s = ((size_t)32 << 20) / (2 * (size_t)(world > 0 ? world : 1));
    s = s > ((size_t)4 << 20) ? (size_t)4 << 20 : s < ((size_t)256 << 10) ? (size_t)256 << 10 : s;
    return s & ~(((size_t)64 << 10) - 1);
}

/* ---- internal collectives (what policy and RL step code call) ----
 * Same contracts as the public functions; a failure marks the group
 * broken (later calls fail at once with RLP_E_CLOSED). */
int rlpi_comm_all_reduce_host(rlp_comm *c, void *data, size_t n, int dtype, int op);
int rlpi_comm_all_reduce_buffer(rlp_comm *c, rlpi_buffer *buf, size_t off_elems, size_t n_f32, int op);
int rlpi_comm_broadcast_host(rlp_comm *c, void *data, size_t nbytes, int root);
int rlpi_comm_broadcast_buffer(rlp_comm *c, rlpi_buffer *buf, size_t off_bytes, size_t nbytes, int root);
/* Tells the peers that this rank gave up on the current step. */
void rlpi_comm_abort(rlp_comm *c, const char *why);
/* A data-parallel step failed on this rank with `rc` (message in
 * rlp_error_last(), kept): closes the group with that reason so the peers
 * stop waiting for this rank. */
void rlpi_dp_fail(rlp_comm *c, const char *what, int rc);

/* ---- transports ---- */

typedef struct rlpi_rendezvous_info {
    int32_t world;
    int32_t transport;          /* RLP_COMM_SHM or RLP_COMM_NCCL */
    long pid;                   /* rank 0's */
    char shm_name[64];          /* SHM */
    unsigned char nccl_id[128]; /* NCCL */
} rlpi_rendezvous_info;

/* Rank 0: writes `info` to `path` (temporary name + rename, so readers see
 * all of it or nothing). */
int rlpi_rendezvous_publish(const char *path, const rlpi_rendezvous_info *info);
/* Parses a rendezvous document (untrusted: every field checked). RLP_OK;
 * RLP_E_AGAIN for a valid one of another group (world size or transport),
 * with only info->pid set (its writer); RLP_E_FORMAT naming `source`.
 * Does not check that the writer lives. */
int rlpi_rendezvous_parse(const char *buf, size_t len, const char *source, int32_t world, int32_t transport,
                          rlpi_rendezvous_info *info);
/* Other ranks: waits (polling) until `path` holds a rendezvous for `world`
 * ranks and `transport` whose writer is alive (SHM: same machine, checked
 * with kill(pid, 0)), or the deadline (monotonic seconds) passes. */
int rlpi_rendezvous_wait(const char *path, int32_t world, int32_t transport, double deadline,
                         rlpi_rendezvous_info *info);

/* ---- the TCP rendezvous (env://, tcp://HOST:PORT; rendezvous_tcp.c) ---- */

/* Whether `rendezvous` names the TCP store rather than a file. */
bool rlpi_rendezvous_is_tcp(const char *rendezvous);
/* Opens the store (rank 0 serves it) into c->store and meets every rank
 * there: each announces its world size and transport, rank 0 checks them
 * (a rank that joined twice, or disagrees, fails everyone with a message
 * naming it) and answers with `nccl_id` (rank 0's, may be NULL), which the
 * others receive into `nccl_id_out` (may be NULL). */
int rlpi_rendezvous_tcp_join(rlp_comm *c, const char *rendezvous, const unsigned char *nccl_id,
                             unsigned char nccl_id_out[128]);

/* ---- process-group modules (comm_module_loader.c, comm_module.c) ---- */

/* The module's table (loaded on first use), or NULL with RLP_E_UNSUPPORTED
 * saying why. name: "mpi", "gloo". */
const rlpi_comm_module_api *rlpi_comm_module(const char *name);
/* Joins the group through `api` (Gloo meets through c->store, which must
 * be open); sets c->ops, c->impl, and c->rank/c->world from the module
 * (MPI: the launcher's). */
int rlpi_comm_module_create(rlp_comm *c, const rlpi_comm_module_api *api);
/* The rank and size an MPI launcher gave this process (OMPI_COMM_WORLD_*,
 * PMI_*; PMIX_RANK alone gives only the rank): true when launched so. */
bool rlpi_comm_mpi_launched(void);

int rlpi_comm_shm_create(rlp_comm *c, const char *rendezvous);
/* Unlinks the shared-memory objects of this user whose creating process
 * has exited (leaked by a rank 0 killed during its rendezvous); returns
 * how many. Rank 0 runs it before it creates its object. */
size_t rlpi_comm_shm_sweep(void);
int rlpi_comm_nccl_create(rlp_comm *c, const char *rendezvous);
/* Whether the NCCL transport can be used on this context (CUDA + libnccl). */
bool rlpi_comm_nccl_usable(rlp_context *ctx);

#endif
