/* The NCCL transport of rlp_comm: rank 0 asks NCCL for a unique id and
 * writes it into the rendezvous file (or hands it out through the TCP
 * store of env:// and tcp://); every rank then joins with
 * ncclCommInitRank on its context's GPU. The NCCL calls themselves live in
 * the CUDA module (cuda/nccl.c), which loads libnccl; this file is the
 * glue to the process-group interface. NCCL only moves device memory, so
 * host collectives are bridged by comm.c. */
#include "dist/comm.h"

#include "backend/context.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct nccl_comm {
    const rlpi_cuda_nccl_api *api;
    void *comm;
    rlp_comm *c;   /* for the barrier's one-float buffer */
} nccl_comm;

static int n_all_reduce(void *impl, rlpi_buffer *buf, size_t off, size_t n, int dtype, int op)
{
    nccl_comm *s = impl;
    return s->api->all_reduce(s->comm, buf, off, n, dtype, op);
}

static int n_broadcast(void *impl, rlpi_buffer *buf, size_t off, size_t nbytes, int root)
{
    nccl_comm *s = impl;
    return s->api->broadcast(s->comm, buf, off, nbytes, root);
}

/* NCCL has no barrier: an all-reduce of one value is one. */
static int n_barrier(void *impl)
{
    nccl_comm *s = impl;
    rlpi_buffer *one;
    int rc = rlpi_buffer_alloc(s->c->ctx->backend, 4, &one);
    if (rc)
        return rc;
    if ((rc = rlpi_buffer_fill_f32(one, 0, 1, 1.0f)) == RLP_OK)
        rc = s->api->all_reduce(s->comm, one, 0, 1, RLPI_DT_F32, RLP_REDUCE_SUM);
    rlpi_buffer_free(one);
    return rc;
}

static void n_abort(void *impl, const char *why)
{
    (void)why;
    nccl_comm *s = impl;
    s->api->abort(s->comm);
}

static void n_destroy(void *impl)
{
    nccl_comm *s = impl;
    if (s) {
        s->api->destroy(s->comm);
        free(s);
    }
}

static const rlpi_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce_device = n_all_reduce,
    .broadcast_device = n_broadcast,
    .barrier = n_barrier,
    .abort = n_abort,
    .destroy = n_destroy,
};

bool rlpi_comm_nccl_usable(rlp_context *ctx)
{
    return ctx->kind == RLP_BACKEND_CUDA && rlpi_backend_cuda_nccl() != NULL;
}

int rlpi_comm_nccl_create(rlp_comm *c, const char *rendezvous)
{
    const rlpi_cuda_nccl_api *api = rlpi_backend_cuda_nccl();
    if (!api)
        return rlpi_error_wrap("process group: the NCCL transport is not available");
    double deadline = rlpi_now_s() + c->timeout_ms / 1e3;
    rlpi_rendezvous_info info = {.world = c->world, .transport = RLP_COMM_NCCL, .pid = (long)getpid()};
    int rc = RLP_OK;
    bool tcp = rlpi_rendezvous_is_tcp(rendezvous);
    if (c->rank == 0 && !tcp)
        unlink(rendezvous);
    if (c->rank == 0)
        rc = api->get_unique_id(info.nccl_id);
    if (rc == RLP_OK && tcp) /* the TCP store hands the id out (as torch's store does) */
        rc = rlpi_rendezvous_tcp_join(c, rendezvous, c->rank == 0 ? info.nccl_id : NULL, info.nccl_id);
    else if (rc == RLP_OK && c->rank == 0)
        rc = rlpi_rendezvous_publish(rendezvous, &info);
    else if (rc == RLP_OK)
        rc = rlpi_rendezvous_wait(rendezvous, c->world, RLP_COMM_NCCL, deadline, &info);
    if (rc)
        return rc;
    nccl_comm *s = calloc(1, sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "process group: out of memory");
    s->api = api;
    s->c = c;
    rc = api->init(c->ctx->backend, info.nccl_id, c->rank, c->world, c->timeout_ms / 1e3, &s->comm);
    if (c->rank == 0 && !tcp)
        unlink(rendezvous); /* every rank has joined (init returns only then) or it failed */
    if (rc) {
        free(s);
        return rc;
    }
    c->impl = s;
    c->ops = &nccl_ops;
    return RLP_OK;
}
