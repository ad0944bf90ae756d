/* NCCL for the process groups of the core (lib/dist/comm_nccl.c), inside
 * the CUDA module. libnccl.so.2 is loaded with dlopen on first use, so the
 * module (and the CUDA backend) still loads on machines without NCCL; only
 * the types come from nccl.h.
 *
 * Communicators are created non-blocking (ncclConfig_t.blocking = 0) and
 * every collective is waited for by polling the stream and
 * ncclCommGetAsyncError: a peer that died or never comes turns into
 * RLP_E_TIMEOUT after the group's timeout, and the communicator is
 * aborted (ncclCommAbort) rather than left hanging — the watchdog that
 * PyTorch's ProcessGroupNCCL runs on a thread, done inline since our
 * collectives are synchronous to the caller. */
#include "../lib/backend/backend.h"
#include "cuda_module.h"

#include "rlpost.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct nccl_syms {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*finalize)(ncclComm_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} nccl_syms;

static nccl_syms S;
static const rlpi_host_api *H;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512];

typedef struct nccl_group {
    ncclComm_t comm;
    rlpi_backend *be;
    double timeout_s;
    int aborted;
} nccl_group;

static void load(void)
{
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "libnccl.so.2 could not be loaded: %s", e ? e : "not found");
        return;
    }
#define SYM(field, name)                                                                          \
    if (!(*(void **)&S.field = dlsym(h, name))) {                                                  \
        snprintf(load_error, sizeof load_error, "libnccl.so.2 lacks %s (NCCL 2.14 or newer needed)", name); \
        memset(&S, 0, sizeof S);                                                                   \
        return;                                                                                    \
    }
    SYM(get_unique_id, "ncclGetUniqueId")
    SYM(init_rank_config, "ncclCommInitRankConfig")
    SYM(all_reduce, "ncclAllReduce")
    SYM(broadcast, "ncclBroadcast")
    SYM(async_error, "ncclCommGetAsyncError")
    SYM(abort, "ncclCommAbort")
    SYM(finalize, "ncclCommFinalize")
    SYM(destroy, "ncclCommDestroy")
    SYM(error_string, "ncclGetErrorString")
#undef SYM
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
}

static int nccl_fail(ncclResult_t r, const char *what)
{
    return H->error_set(r == ncclSystemError || r == ncclRemoteError ? RLP_E_NETWORK : RLP_E_BACKEND,
                        "nccl: %s: %s", what, S.error_string(r));
}

/* Waits until the communicator is done with what was issued (init or an
 * in-progress call), or fails/aborts it at the deadline. */
static int wait_comm(nccl_group *g, const char *what, double deadline)
{
    for (;;) {
        ncclResult_t st;
        ncclResult_t r = S.async_error(g->comm, &st);
        if (r != ncclSuccess)
            return nccl_fail(r, what);
        if (st == ncclSuccess)
            return RLP_OK;
        if (st != ncclInProgress)
            return nccl_fail(st, what);
        if (now_s() > deadline) {
            S.abort(g->comm);
            g->aborted = 1;
            return H->error_set(RLP_E_TIMEOUT, "nccl: %s: no progress within %.0f s (a peer is gone or stuck); the "
                                "communicator was aborted", what, g->timeout_s);
        }
        nap();
    }
}

/* Waits for the stream after a collective, watching NCCL's error. */
static int wait_stream(nccl_group *g, cudaStream_t stream, const char *what)
{
    double deadline = now_s() + g->timeout_s;
    int rc = wait_comm(g, what, deadline);
    if (rc)
        return rc;
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return RLP_OK;
        if (e != cudaErrorNotReady)
            return H->error_set(RLP_E_BACKEND, "cuda: %s: %s", what, cudaGetErrorString(e));
        ncclResult_t st;
        if (S.async_error(g->comm, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
            return nccl_fail(st, what);
        if (now_s() > deadline) {
            S.abort(g->comm);
            g->aborted = 1;
            return H->error_set(RLP_E_TIMEOUT, "nccl: %s did not finish within %.0f s (a peer is gone or stuck); "
                                "the communicator was aborted", what, g->timeout_s);
        }
        nap();
    }
}

static int get_unique_id(unsigned char id[128])
{
    ncclUniqueId u;
    _Static_assert(sizeof u == 128, "ncclUniqueId is 128 bytes");
    ncclResult_t r = S.get_unique_id(&u);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return RLP_OK;
}

static int init(rlpi_backend *be, const unsigned char id[128], int rank, int world, double timeout_s, void **out)
{
    nccl_group *g = calloc(1, sizeof *g);
    if (!g)
        return H->error_set(RLP_E_NOMEM, "nccl: out of memory");
    g->be = be;
    g->timeout_s = timeout_s;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cudaSetDevice(be->device);
    ncclResult_t r = S.init_rank_config(&g->comm, world, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        free(g);
        return nccl_fail(r, "ncclCommInitRankConfig");
    }
    int rc = wait_comm(g, "joining the NCCL communicator", now_s() + timeout_s);
    if (rc) {
        if (!g->aborted)
            S.abort(g->comm);
        free(g);
        return rc;
    }
    *out = g;
    return RLP_OK;
}

static int dtype_of(int dt, ncclDataType_t *out)
{
    switch (dt) {
    case 0: *out = ncclFloat32; return 1;
    case 1: *out = ncclFloat64; return 1;
    case 2: *out = ncclUint8; return 1;
    default: return 0;
    }
}

static int all_reduce(void *comm, rlpi_buffer *buf, size_t off, size_t n, int dtype, int op)
{
    nccl_group *g = comm;
    ncclDataType_t t;
    ncclRedOp_t o = op == RLP_REDUCE_SUM ? ncclSum : op == RLP_REDUCE_MAX ? ncclMax : ncclMin;
    if (!dtype_of(dtype, &t) || dtype == 2)
        return H->error_set(RLP_E_INVALID_ARG, "nccl: all-reduce of an unknown dtype %d", dtype);
    if (g->aborted)
        return H->error_set(RLP_E_CLOSED, "nccl: the communicator was aborted");
    cudaStream_t stream = rlpi_cuda_lock_stream(g->be);
    void *p = (char *)buf->data + off;
    ncclResult_t r = S.all_reduce(p, p, n, t, o, g->comm, stream);
    rlpi_cuda_unlock(g->be);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(r, "ncclAllReduce");
    return wait_stream(g, stream, "all-reduce");
}

static int broadcast(void *comm, rlpi_buffer *buf, size_t off, size_t nbytes, int root)
{
    nccl_group *g = comm;
    if (g->aborted)
        return H->error_set(RLP_E_CLOSED, "nccl: the communicator was aborted");
    cudaStream_t stream = rlpi_cuda_lock_stream(g->be);
    void *p = (char *)buf->data + off;
    ncclResult_t r = S.broadcast(p, p, nbytes, ncclUint8, root, g->comm, stream);
    rlpi_cuda_unlock(g->be);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(r, "ncclBroadcast");
    return wait_stream(g, stream, "broadcast");
}

static void abort_group(void *comm)
{
    nccl_group *g = comm;
    if (g && !g->aborted) {
        S.abort(g->comm);
        g->aborted = 1;
    }
}

static void destroy(void *comm)
{
    nccl_group *g = comm;
    if (!g)
        return;
    if (!g->aborted) {
        /* flush, bounded by the timeout; a peer that is gone makes it abort */
        ncclResult_t r = S.finalize(g->comm);
        if ((r == ncclSuccess || r == ncclInProgress) &&
            wait_comm(g, "finalizing the communicator", now_s() + g->timeout_s) == RLP_OK)
            S.destroy(g->comm);
        else if (!g->aborted)
            S.abort(g->comm);
    }
    free(g);
}

static const rlpi_cuda_nccl_api api = {
    .version = RLPI_CUDA_NCCL_API_VERSION,
    .get_unique_id = get_unique_id,
    .init = init,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .abort = abort_group,
    .destroy = destroy,
};

EXPORT const rlpi_cuda_nccl_api *rlpi_cuda_module_nccl(const rlpi_host_api *host)
{
    H = host;
    pthread_once(&once, load);
    if (!S.get_unique_id) {
        host->error_set(RLP_E_UNSUPPORTED, "nccl: %s", load_error);
        return NULL;
    }
    return &api;
}
