/* rlp_comm: the public process-group API. Resolves rank, world size and
 * rendezvous (options, then the environment, torchrun-style), picks the
 * transport, serialises collectives, and bridges what a transport does not
 * do natively: host collectives over a device-only transport (NCCL) go
 * through a temporary backend buffer; buffer collectives over a host-only
 * transport (SHM) on device memory go through host staging in chunks.
 * Any failed collective leaves the group "broken": the ranks may be out of
 * step, so later calls fail at once rather than pair the wrong messages. */
#include "dist/comm.h"

#include "backend/context.h"
#include "core/error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rlp_comm_options_init(rlp_comm_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_COMM_OPTIONS_VERSION, "unknown version");
    rlp_comm_options d = RLP_COMM_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

/* First of the variables that is set; a set one must be a whole number. */
static int env_int(const char *const *names, size_t n, long *out, const char **which)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v)
            continue;
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || *end || x < INT32_MIN || x > INT32_MAX)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_comm_create: environment variable %s=\"%s\" is not an integer",
                                  names[i], v);
        *out = x;
        *which = names[i];
        return RLP_OK;
    }
    *which = NULL;
    return RLP_OK;
}

/* AUTO: the launcher's MPI when started by one with no rendezvous named;
 * NCCL on a GPU; Gloo for a TCP rendezvous; SHM for a file. */
static int32_t auto_transport(rlp_context *ctx, const char *rdv)
{
    if ((!rdv || !*rdv) && rlpi_comm_mpi_launched())
        return RLP_COMM_MPI;
    if (ctx->kind == RLP_BACKEND_CUDA && rlpi_comm_nccl_usable(ctx))
        return RLP_COMM_NCCL;
    return rlpi_rendezvous_is_tcp(rdv) ? RLP_COMM_GLOO : RLP_COMM_SHM;
}

int rlp_comm_create(rlp_comm **out, rlp_context *ctx, const rlp_comm_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    if (opts) {
        RLPI_CHECK_ARG(opts->version == RLP_COMM_OPTIONS_VERSION, "unknown rlp_comm_options version");
        o = *opts;
    }
    RLPI_CHECK_ARG(o.transport >= RLP_COMM_AUTO && o.transport <= RLP_COMM_GLOO,
                   "opts->transport is not an rlp_comm_transport");
    const char *rdv = o.rendezvous ? o.rendezvous : getenv("RLPOST_RENDEZVOUS");
    if (rdv && !*rdv)
        rdv = NULL;
    int32_t transport = o.transport == RLP_COMM_AUTO ? auto_transport(ctx, rdv) : o.transport;
    bool mpi = transport == RLP_COMM_MPI;
    const char *from;
    long v;
    if (o.rank < 0) {
        static const char *const names[] = {"RLPOST_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
        int rc = env_int(names, 4, &v, &from);
        if (rc)
            return rc;
        if (!from && !mpi)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_comm_create: no rank: set opts->rank or RLPOST_RANK (or RANK)");
        if (from)
            o.rank = (int32_t)v;
    }
    if (o.world_size == 0) {
        static const char *const names[] = {"RLPOST_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
        int rc = env_int(names, 4, &v, &from);
        if (rc)
            return rc;
        if (!from && !mpi)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "rlp_comm_create: no world size: set opts->world_size or RLPOST_WORLD_SIZE (or WORLD_SIZE)");
        if (from)
            o.world_size = (int32_t)v;
        else
            o.world_size = 0; /* MPI: the launcher's */
    }
    if (!mpi || o.world_size) {
        if (o.world_size < 1)
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_comm_create: world size %d must be >= 1", o.world_size);
        if (o.rank >= o.world_size || (!mpi && o.rank < 0))
            return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_comm_create: rank %d outside [0, %d)", o.rank, o.world_size);
    }
    if (!mpi && o.world_size > 1 && !rdv)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_comm_create: no rendezvous: set opts->rendezvous or "
                              "RLPOST_RENDEZVOUS (a file path, \"env://\" or \"tcp://HOST:PORT\")");
    if (transport == RLP_COMM_NCCL && ctx->kind != RLP_BACKEND_CUDA)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_comm_create: the NCCL transport needs a CUDA context");
    bool tcp = rlpi_rendezvous_is_tcp(rdv);
    if (o.world_size > 1 && transport == RLP_COMM_SHM && tcp)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_comm_create: the SHM transport meets through a rendezvous file "
                              "on one machine, not \"%s\" (use the Gloo transport across hosts)", rdv);
    if (o.world_size > 1 && transport == RLP_COMM_GLOO && !tcp)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_comm_create: the Gloo transport meets through a TCP "
                              "rendezvous (\"env://\" or \"tcp://HOST:PORT\"), not the file \"%s\"", rdv);
    const rlpi_comm_module_api *module = NULL;
    if (mpi || (transport == RLP_COMM_GLOO && o.world_size > 1)) {
        module = rlpi_comm_module(mpi ? "mpi" : "gloo");
        if (!module)
            return rlpi_error_wrap("rlp_comm_create");
    }

    rlp_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_comm_create: out of memory");
    c->ctx = ctx;
    c->rank = o.rank;
    c->world = o.world_size;
    c->transport = transport;
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : 300000;
    pthread_mutex_init(&c->lock, NULL);
    int rc = RLP_OK;
    if (mpi)
        rc = rlpi_comm_module_create(c, module);
    else if (c->world == 1)
        rc = rlpi_comm_shm_create(c, NULL); /* a group of one: collectives are copies */
    else if (transport == RLP_COMM_NCCL)
        rc = rlpi_comm_nccl_create(c, rdv);
    else if (transport == RLP_COMM_GLOO) {
        rc = rlpi_rendezvous_tcp_join(c, rdv, NULL, NULL);
        if (rc == RLP_OK)
            rc = rlpi_comm_module_create(c, module);
    }
    else
        rc = rlpi_comm_shm_create(c, rdv);
    if (rc != RLP_OK) {
        rlpi_store_close(c->store);
        pthread_mutex_destroy(&c->lock);
        free(c);
        if (o.world_size)
            return rlpi_error_wrap("rlp_comm_create: rank %d of %d", o.rank, o.world_size);
        return rlpi_error_wrap("rlp_comm_create");
    }
    rlpi_log(&ctx->log, RLP_LOG_INFO, "process group: rank %d of %d joined (%s)", c->rank, c->world,
             c->ops->name);
    *out = c;
    return RLP_OK;
}

void rlp_comm_free(rlp_comm *comm)
{
    if (!comm)
        return;
    if (comm->ops)
        comm->ops->destroy(comm->impl);
    rlpi_store_close(comm->store);
    pthread_mutex_destroy(&comm->lock);
    free(comm);
}

int rlp_comm_info(const rlp_comm *comm, int32_t *rank, int32_t *world_size, int32_t *transport)
{
    RLPI_CHECK_ARG(comm, "comm is NULL");
    if (rank)
        *rank = comm->rank;
    if (world_size)
        *world_size = comm->world;
    if (transport)
        *transport = comm->transport;
    return RLP_OK;
}

/* ---- the collectives, with bridging ---- */

static int begin(rlp_comm *c)
{
    pthread_mutex_lock(&c->lock);
    if (c->broken) {
        pthread_mutex_unlock(&c->lock);
        return rlpi_error_set(RLP_E_CLOSED, "process group: an earlier collective failed on rank %d; the ranks are "
                              "out of step and the group cannot be used any more", c->rank);
    }
    return RLP_OK;
}

static int end(rlp_comm *c, int rc)
{
    if (rc != RLP_OK) {
        c->broken = true;
        c->ops->abort(c->impl, "failed a collective");
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Host data through a device-only transport: a temporary backend buffer. */
static int host_via_device(rlp_comm *c, void *data, size_t nbytes, size_t n, int dtype, int op, int root,
                           bool bcast)
{
    rlpi_buffer *tmp;
    int rc = rlpi_buffer_alloc(c->ctx->backend, nbytes ? nbytes : 8, &tmp);
    if (rc)
        return rc;
    if (nbytes)
        rc = rlpi_buffer_upload(tmp, 0, data, nbytes);
    if (!rc)
        rc = bcast ? c->ops->broadcast_device(c->impl, tmp, 0, nbytes, root)
                   : c->ops->all_reduce_device(c->impl, tmp, 0, n, dtype, op);
    if (!rc && nbytes)
        rc = rlpi_buffer_download(tmp, 0, data, nbytes);
    rlpi_buffer_free(tmp);
    return rc;
}

static int all_reduce_host(rlp_comm *c, void *data, size_t n, int dtype, int op)
{
    if (c->ops->all_reduce_host)
        return c->ops->all_reduce_host(c->impl, data, n, dtype, op);
    return host_via_device(c, data, n * rlpi_dt_size(dtype), n, dtype, op, 0, false);
}

static int broadcast_host(rlp_comm *c, void *data, size_t nbytes, int root)
{
    if (c->ops->broadcast_host)
        return c->ops->broadcast_host(c->impl, data, nbytes, root);
    return host_via_device(c, data, nbytes, nbytes, RLPI_DT_BYTES, 0, root, true);
}

int rlpi_comm_all_reduce_host(rlp_comm *c, void *data, size_t n, int dtype, int op)
{
    int rc = begin(c);
    return rc ? rc : end(c, all_reduce_host(c, data, n, dtype, op));
}

int rlpi_comm_broadcast_host(rlp_comm *c, void *data, size_t nbytes, int root)
{
    int rc = begin(c);
    return rc ? rc : end(c, broadcast_host(c, data, nbytes, root));
}

/* Backend memory through a host-only transport: chunked staging. Every
 * rank cuts the same chunks (same sizes), so the pieces pair up. */
static int staged(rlp_comm *c, rlpi_buffer *buf, size_t off, size_t nbytes, int dtype, int op, int root,
                  bool bcast)
{
    size_t es = bcast ? 1 : rlpi_dt_size(dtype);
    size_t piece = RLPI_COMM_CHUNK_BYTES / es * es;
    unsigned char *host = malloc(piece);
    if (!host)
        return rlpi_error_set(RLP_E_NOMEM, "process group: out of memory");
    int rc = RLP_OK;
    size_t done = 0;
    do {
        size_t len = nbytes - done < piece ? nbytes - done : piece;
        if (len && (!bcast || c->rank == root))
            rc = rlpi_buffer_download(buf, off + done, host, len);
        if (!rc)
            rc = bcast ? broadcast_host(c, host, len, root) : all_reduce_host(c, host, len / es, dtype, op);
        if (!rc && len && (!bcast || c->rank != root))
            rc = rlpi_buffer_upload(buf, off + done, host, len);
        done += len;
    } while (!rc && done < nbytes);
    free(host);
    return rc;
}

/* A collective over backend memory: in place on host-visible memory over a
 * host transport, on device memory over a device transport, else staged. */
static int buffer_collective(rlp_comm *c, rlpi_buffer *buf, size_t off, size_t nbytes, int dtype, int op,
                             int root, bool bcast)
{
    int rc = begin(c);
    if (rc)
        return rc;
    unsigned char *host = rlpi_buffer_host(buf);
    size_t n = nbytes / rlpi_dt_size(dtype);
    if (host && (bcast ? c->ops->broadcast_host != NULL : c->ops->all_reduce_host != NULL))
        rc = bcast ? c->ops->broadcast_host(c->impl, host + off, nbytes, root)
                   : c->ops->all_reduce_host(c->impl, host + off, n, dtype, op);
    else if (!host && (bcast ? c->ops->broadcast_device != NULL : c->ops->all_reduce_device != NULL))
        rc = bcast ? c->ops->broadcast_device(c->impl, buf, off, nbytes, root)
                   : c->ops->all_reduce_device(c->impl, buf, off, n, dtype, op);
    else
        rc = staged(c, buf, off, nbytes, dtype, op, root, bcast);
    return end(c, rc);
}

int rlpi_comm_all_reduce_buffer(rlp_comm *c, rlpi_buffer *buf, size_t off_elems, size_t n, int op)
{
    if (off_elems > buf->nbytes / 4 || n > buf->nbytes / 4 - off_elems)
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: all-reduce range outside its buffer");
    return buffer_collective(c, buf, off_elems * 4, n * 4, RLPI_DT_F32, op, 0, false);
}

int rlpi_comm_broadcast_buffer(rlp_comm *c, rlpi_buffer *buf, size_t off, size_t nbytes, int root)
{
    if (off > buf->nbytes || nbytes > buf->nbytes - off)
        return rlpi_error_set(RLP_E_INVALID_ARG, "process group: broadcast range outside its buffer");
    return buffer_collective(c, buf, off, nbytes, RLPI_DT_BYTES, 0, root, true);
}

void rlpi_comm_abort(rlp_comm *c, const char *why)
{
    pthread_mutex_lock(&c->lock);
    c->broken = true;
    c->ops->abort(c->impl, why);
    pthread_mutex_unlock(&c->lock);
}

void rlpi_dp_fail(rlp_comm *c, const char *what, int rc)
{
    char why[200];
    snprintf(why, sizeof why, "gave up in the %s (%d: %s)", what, rc, rlp_error_last());
    rlpi_comm_abort(c, why);
}

/* ---- public wrappers ---- */

int rlp_comm_barrier(rlp_comm *comm)
{
    RLPI_CHECK_ARG(comm, "comm is NULL");
    int rc = begin(comm);
    return rc ? rc : end(comm, comm->ops->barrier(comm->impl));
}

int rlp_comm_all_reduce(rlp_comm *comm, double *values, size_t n, int op)
{
    RLPI_CHECK_ARG(comm, "comm is NULL");
    RLPI_CHECK_ARG(values || n == 0, "values is NULL");
    RLPI_CHECK_ARG(op >= RLP_REDUCE_SUM && op <= RLP_REDUCE_MIN, "op is not an rlp_reduce_op");
    RLPI_CHECK_ARG(n <= SIZE_MAX / 8, "n is too large");
    return rlpi_comm_all_reduce_host(comm, values, n, RLPI_DT_F64, op);
}

int rlp_comm_broadcast(rlp_comm *comm, void *data, size_t nbytes, int32_t root)
{
    RLPI_CHECK_ARG(comm, "comm is NULL");
    RLPI_CHECK_ARG(data || nbytes == 0, "data is NULL");
    RLPI_CHECK_ARG(root >= 0 && root < comm->world, "root is outside the group");
    return rlpi_comm_broadcast_host(comm, data, nbytes, root);
}
