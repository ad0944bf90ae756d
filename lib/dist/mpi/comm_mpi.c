/* The MPI process-group module (librlpost-mpi.so, see dist/comm_module.h):
 * ranks come from the launcher (mpirun, srun); traffic runs on a duplicate
 * of MPI_COMM_WORLD so it never mixes with the application's. It must not
 * link or call librlpost (errors go through host->error_set) and must never
 * end the process: no MPI_Abort, MPI_ERRORS_RETURN, timeouts on every wait. */
#include "backend/backend.h"
#include "dist/comm_module.h"

#include "rlpost.h" /* rlp_status codes */

#include <mpi.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* Bytes moved per step: the chunk is staged in memory the group owns (see
 * wait_request), so the staging buffers stay small; far below the 2^31 − 1
 * elements an MPI count holds. */
#define CHUNK_BYTES ((size_t)16 << 20)
#define POLL_FIRST_NS 20000L    /* first sleep between MPI_Test calls */
#define POLL_MAX_NS 1000000L    /* the longest: a collective's latency grows by at most this */

enum { KIND_ALL_REDUCE = 1, KIND_BROADCAST = 2, KIND_BARRIER = 3 };
enum { DESC_FIELDS = 6 };

typedef struct mpi_group {
    const rlpi_host_api *host;
    MPI_Comm comm;              /* our duplicate of MPI_COMM_WORLD, MPI_ERRORS_RETURN */
    int rank, world;
    double timeout_s;
    uint64_t calls;             /* collectives this rank started (the descriptor's first field) */
    bool aborted;               /* abort() was called: every later call fails at once */
    bool broken;                /* a collective failed or timed out: its request may be pending */
    MPI_Request pending;        /* the request a timeout left behind (MPI_REQUEST_NULL if none) */
    char why[256];              /* why the group is aborted or broken */
    int *counts, *displs;       /* [world]: each rank's part of a chunk */
    int *rcounts, *rdispls;     /* [world]: this rank's part as received from each rank */
    unsigned char *stage;       /* [stage_bytes ≤ CHUNK_BYTES]: the chunk in flight */
    unsigned char *parts;       /* [parts_bytes]: this rank's part of it from every rank */
    size_t stage_bytes, parts_bytes;
    int64_t *desc;              /* [2 * DESC_FIELDS]: the descriptors' exchange (see check_descriptors) */
    MPI_Comm *dup;              /* where MPI_Comm_idup writes (outlives a create that timed out) */
} mpi_group;

/* Memory that a collective left pending may still write: kept reachable
 * (for leak checkers too) for the life of the process. */
typedef struct left_behind {
    struct left_behind *next;
    void *a, *b;
} left_behind;

/* MPI runs at MPI_THREAD_SERIALIZED: every MPI call of this module is made
 * under this lock, so different groups may be used from different threads
 * (each group by one thread at a time). */
static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static bool we_initialized;     /* this module called MPI_Init_thread */
static const rlpi_host_api *module_host;
static left_behind *graveyard;  /* under mpi_lock */

/* Hands `a` and `b` (malloc'd) over to the process: MPI may write into
 * them at any time. */
static void leave_behind(void *a, void *b)
{
    if (!a && !b)
        return;
    left_behind *l = malloc(sizeof *l);
    if (!l)
        return; /* then a leak checker sees them as lost; nothing else changes */
    l->a = a;
    l->b = b;
    pthread_mutex_lock(&mpi_lock);
    l->next = graveyard;
    graveyard = l;
    pthread_mutex_unlock(&mpi_lock);
}

/* For the calls that get no group or no host api (bad arguments only). */
static int no_host_error(const char *what)
{
    if (module_host)
        return module_host->error_set(RLP_E_INVALID_ARG, "MPI process group: %s", what);
    return RLP_E_INVALID_ARG;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *kind_name(int kind)
{
    return kind == KIND_ALL_REDUCE ? "all_reduce" : kind == KIND_BROADCAST ? "broadcast" : "barrier";
}

static int mpi_error(const rlpi_host_api *host, int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS || len <= 0)
        snprintf(msg, sizeof msg, "MPI error code %d", err);
    else
        msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
    return host->error_set(RLP_E_BACKEND, "MPI process group: %s failed: %s", what, msg);
}

/* Registered with atexit by the create that initialized MPI. The module is
 * linked -z nodelete, so this code is still mapped at exit even after the
 * host dlclose()s it (and libmpi, whose threads run until MPI_Finalize,
 * never goes away under them). */
static void finalize_at_exit(void)
{
    int finalized = 1;
    pthread_mutex_lock(&mpi_lock);
    if (we_initialized && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
        MPI_Finalize();
    pthread_mutex_unlock(&mpi_lock);
}

/* Whether a launcher started this process (OpenMPI's mpirun, a PMI or PMIx
 * launcher such as srun or MPICH's hydra). */
static bool launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

/* Checks that a group may start a collective: RLP_E_CLOSED after abort,
 * after an earlier failure or timeout, or once MPI is finalized. */
static int usable(mpi_group *g, const char *what)
{
    if (g->aborted)
        return g->host->error_set(RLP_E_CLOSED, "MPI process group: %s on rank %d: the group was aborted (%s)",
                                  what, g->rank, g->why);
    if (g->broken)
        return g->host->error_set(RLP_E_CLOSED, "MPI process group: %s on rank %d: the group is unusable since an "
                                  "earlier collective failed (%s)", what, g->rank, g->why);
    int finalized = 0;
    MPI_Finalized(&finalized); /* may be called at any time */
    if (finalized)
        return g->host->error_set(RLP_E_CLOSED, "MPI process group: %s on rank %d: MPI was finalized by the application",
                                  what, g->rank);
    return RLP_OK;
}

/* Polls *req (under the lock for each test, sleeping outside it) until it
 * completes or the group's timeout passes. The timeout bounds each step of
 * a collective, like the SHM transport's bound on each barrier, so a large
 * all_reduce is not cut short by its size. On a timeout the request stays
 * pending (MPI forbids freeing or cancelling a collective's request): the
 * group keeps it and the staging buffers it writes to, and turns unusable. */
static int wait_request(mpi_group *g, MPI_Request *req, const char *what)
{
    double deadline = now_s() + g->timeout_s;
    long sleep_ns = POLL_FIRST_NS;
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&mpi_lock);
        int err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&mpi_lock);
        if (err != MPI_SUCCESS) {
            g->broken = true;
            g->pending = *req;
            snprintf(g->why, sizeof g->why, "%s failed in MPI", what);
            return mpi_error(g->host, err, what);
        }
        if (done)
            return RLP_OK;
        if (now_s() >= deadline) {
            g->broken = true;
            g->pending = *req;
            snprintf(g->why, sizeof g->why, "%s timed out after %g s", what, g->timeout_s);
            return g->host->error_set(RLP_E_TIMEOUT, "MPI process group: %s on rank %d of %d timed out after %g s "
                                      "(a peer did not join it: stopped, failed or busy elsewhere)",
                                      what, g->rank, g->world, g->timeout_s);
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 > POLL_MAX_NS ? POLL_MAX_NS : sleep_ns * 2;
    }
}

/* Starts a non-blocking operation (under the lock), then waits for it;
 * `call` gets its request as &req_. Returns from the caller on failure. */
#define RUN(g, what, call)                                                                       \
    do {                                                                                         \
        MPI_Request req_ = MPI_REQUEST_NULL;                                                     \
        pthread_mutex_lock(&mpi_lock);                                                           \
        int err_ = (call);                                                                       \
        pthread_mutex_unlock(&mpi_lock);                                                         \
        if (err_ != MPI_SUCCESS) {                                                               \
            (g)->broken = true;                                                                  \
            snprintf((g)->why, sizeof (g)->why, "%s failed in MPI", (what));                     \
            return mpi_error((g)->host, err_, (what));                                           \
        }                                                                                        \
        int rc_ = wait_request((g), &req_, (what));                                              \
        if (rc_ != RLP_OK)                                                                       \
            return rc_;                                                                          \
    } while (0)

/* The descriptor exchange that opens every collective, so ranks that call
 * different collectives (or sizes, roots) all fail with RLP_E_INVALID_ARG
 * and the group stays usable, instead of hanging or mixing buffers; a
 * barrier is this exchange alone. One all-reduce of
 * the fields and their negations with MPI_MAX gives every rank the maximum
 * and the minimum of each field; they differ where the ranks disagree.
 * All fields are in [0, 2^62), so negating them cannot overflow. */
static int check_descriptors(mpi_group *g, int kind, int dtype, int op, int root, uint64_t n)
{
    int64_t d[DESC_FIELDS] = {(int64_t)++g->calls, kind, dtype, op, root, (int64_t)n};
    int64_t *both = g->desc; /* not on the stack: a timed-out exchange may still write it */
    for (int i = 0; i < DESC_FIELDS; i++) {
        both[i] = d[i];
        both[DESC_FIELDS + i] = -d[i];
    }
    RUN(g, kind_name(kind),
        MPI_Iallreduce(MPI_IN_PLACE, both, 2 * DESC_FIELDS, MPI_INT64_T, MPI_MAX, g->comm, &req_));
    static const char *field[DESC_FIELDS] = {"call number", "collective", "dtype", "op", "root", "size"};
    for (int i = 0; i < DESC_FIELDS; i++)
        if (both[i] != -both[DESC_FIELDS + i])
            return g->host->error_set(RLP_E_INVALID_ARG, "MPI process group: the ranks called different collectives: "
                                      "rank %d called %s number %llu (dtype %d, op %d, root %d, size %llu); the "
                                      "ranks' %s ranges from %lld to %lld",
                                      g->rank, kind_name(kind), (unsigned long long)d[0], dtype, op, root,
                                      (unsigned long long)n, field[i], (long long)-both[DESC_FIELDS + i],
                                      (long long)both[i]);
    return RLP_OK;
}

/* Grows the staging buffers to `stage` and `parts` bytes: the largest
 * chunk moved so far, so a group that moves small messages stays small.
 * parts holds W · ⌈len / W⌉ elements of a chunk of len. */
static int ensure_staging(mpi_group *g, size_t stage, size_t parts)
{
    if (stage > g->stage_bytes) {
        void *p = realloc(g->stage, stage);
        if (!p)
            return g->host->error_set(RLP_E_NOMEM, "MPI process group: out of memory for %zu staging bytes", stage);
        g->stage = p;
        g->stage_bytes = stage;
    }
    if (parts > g->parts_bytes) {
        void *p = realloc(g->parts, parts);
        if (!p)
            return g->host->error_set(RLP_E_NOMEM, "MPI process group: out of memory for %zu staging bytes", parts);
        g->parts = p;
        g->parts_bytes = parts;
    }
    return RLP_OK;
}

/* The combination of the SHM transport (comm_shm.c), operand by operand,
 * so both transports give the same bits: out = out ∘ in, in rank order. */
#define COMBINE(T)                                                                            \
    static void combine_##T(T *out, const T *in, size_t len, int op)                          \
    {                                                                                         \
        if (op == RLPI_CM_SUM)                                                                \
            for (size_t j = 0; j < len; j++)                                                  \
                out[j] += in[j];                                                              \
        else if (op == RLPI_CM_MAX)                                                           \
            for (size_t j = 0; j < len; j++)                                                  \
                out[j] = in[j] > out[j] || in[j] != in[j] ? in[j] : out[j];                   \
        else                                                                                  \
            for (size_t j = 0; j < len; j++)                                                  \
                out[j] = in[j] < out[j] || in[j] != in[j] ? in[j] : out[j];                   \
    }
COMBINE(float)
COMBINE(double)

/* MPI's reductions do not give the result: MPI keeps rank order for a
 * non-commutative op but may group the terms as it likes (OpenMPI 4.1's
 * sum over 4 ranks is not left to right), and MPI_MAX of −0/+0 or of NaNs
 * depends on an operand order MPI does not fix. Each chunk is reduced as the
 * SHM transport (comm_shm.c) does it: an all-to-all hands rank r part r of
 * every rank's chunk, rank r combines the parts of ranks 0, 1, …, W−1 in that
 * order with the SHM transport's operators, an all-gather hands every rank
 * every part. Every rank gets the same bits, the same as over SHM, for the
 * traffic of a ring all-reduce. */
static int mpi_all_reduce(void *impl, void *data, size_t n, int dtype, int op)
{
    mpi_group *g = impl;
    if (!g)
        return no_host_error("all_reduce on a NULL group");
    if (dtype != RLPI_CM_F32 && dtype != RLPI_CM_F64)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI all_reduce: dtype %d is not f32 (%d) or f64 (%d)",
                                  dtype, RLPI_CM_F32, RLPI_CM_F64);
    if (op != RLPI_CM_SUM && op != RLPI_CM_MAX && op != RLPI_CM_MIN)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI all_reduce: op %d is not sum (%d), max (%d) or min (%d)",
                                  op, RLPI_CM_SUM, RLPI_CM_MAX, RLPI_CM_MIN);
    size_t es = dtype == RLPI_CM_F32 ? sizeof(float) : sizeof(double);
    if (!data && n > 0)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI all_reduce: NULL data with %zu elements", n);
    if (n > ((uint64_t)1 << 62) / es)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI all_reduce: %zu elements do not fit in memory", n);
    int rc = usable(g, "all_reduce");
    if (rc != RLP_OK)
        return rc;
    /* staging for the largest chunk, before any traffic: a rank that fails
     * here leaves the others at the descriptors' exchange, not mid-way */
    size_t per = CHUNK_BYTES / es, W = (size_t)g->world, me = (size_t)g->rank;
    size_t first = n < per ? n : per;
    if (W > 1 && (rc = ensure_staging(g, first * es, W * ((first + W - 1) / W) * es)) != RLP_OK)
        return rc;
    if ((rc = check_descriptors(g, KIND_ALL_REDUCE, dtype, op, 0, n)) != RLP_OK)
        return rc;
    if (W == 1)
        return RLP_OK;

    MPI_Datatype type = dtype == RLPI_CM_F32 ? MPI_FLOAT : MPI_DOUBLE;
    for (size_t done = 0; done < n;) {
        size_t len = n - done < per ? n - done : per;
        /* part r of the chunk is [len·r/W, len·(r+1)/W), as in the SHM transport */
        for (size_t r = 0; r < W; r++) {
            size_t lo = len * r / W, hi = len * (r + 1) / W;
            g->counts[r] = (int)(hi - lo);
            g->displs[r] = (int)lo;
        }
        int mine = g->counts[me];
        for (size_t r = 0; r < W; r++) {
            g->rcounts[r] = mine;
            g->rdispls[r] = (int)r * mine;
        }
        memcpy(g->stage, (unsigned char *)data + done * es, len * es);
        RUN(g, "all_reduce", MPI_Ialltoallv(g->stage, g->counts, g->displs, type, g->parts, g->rcounts, g->rdispls,
                                            type, g->comm, &req_));
        unsigned char *out = g->stage + (size_t)g->displs[me] * es;
        if (mine > 0) { /* a chunk shorter than the group leaves some ranks no part */
            memcpy(out, g->parts, (size_t)mine * es);
            for (size_t r = 1; r < W; r++) {
                const unsigned char *in = g->parts + r * (size_t)mine * es;
                if (dtype == RLPI_CM_F32)
                    combine_float((float *)(void *)out, (const float *)(const void *)in, (size_t)mine, op);
                else
                    combine_double((double *)(void *)out, (const double *)(const void *)in, (size_t)mine, op);
            }
        }
        RUN(g, "all_reduce", MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g->stage, g->counts, g->displs,
                                             type, g->comm, &req_));
        memcpy((unsigned char *)data + done * es, g->stage, len * es);
        done += len;
    }
    return RLP_OK;
}

static int mpi_broadcast(void *impl, void *data, size_t nbytes, int root)
{
    mpi_group *g = impl;
    if (!g)
        return no_host_error("broadcast on a NULL group");
    if (!data && nbytes > 0)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI broadcast: NULL data with %zu bytes", nbytes);
    if (root < 0 || root >= g->world)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI broadcast: root %d is not a rank of the group [0, %d)",
                                  root, g->world);
    if (nbytes > (uint64_t)1 << 62)
        return g->host->error_set(RLP_E_INVALID_ARG, "MPI broadcast: %zu bytes do not fit in memory", nbytes);
    int rc = usable(g, "broadcast");
    if (rc != RLP_OK)
        return rc;
    if (g->world > 1 && (rc = ensure_staging(g, nbytes < CHUNK_BYTES ? nbytes : CHUNK_BYTES, 0)) != RLP_OK)
        return rc;
    if ((rc = check_descriptors(g, KIND_BROADCAST, 0, 0, root, nbytes)) != RLP_OK)
        return rc;
    if (g->world == 1)
        return RLP_OK;
    for (size_t done = 0; done < nbytes;) {
        size_t len = nbytes - done < CHUNK_BYTES ? nbytes - done : CHUNK_BYTES;
        if (g->rank == root)
            memcpy(g->stage, (unsigned char *)data + done, len);
        RUN(g, "broadcast", MPI_Ibcast(g->stage, (int)len, MPI_BYTE, root, g->comm, &req_));
        if (g->rank != root)
            memcpy((unsigned char *)data + done, g->stage, len);
        done += len;
    }
    return RLP_OK;
}

static int mpi_barrier(void *impl)
{
    mpi_group *g = impl;
    if (!g)
        return no_host_error("barrier on a NULL group");
    int rc = usable(g, "barrier");
    if (rc != RLP_OK)
        return rc;
    /* no rank leaves the descriptors' all-reduce before every rank joined it */
    return check_descriptors(g, KIND_BARRIER, 0, 0, 0, 0);
}

/* Local only: MPI_Abort would end every process of the job, the host's
 * included, and a module must never end its host. The peers of a rank that
 * gives up see their pending and later collectives time out; if its process
 * dies instead, mpirun ends the job; if it exits normally, the exit handler's
 * MPI_Finalize waits for the peers to finalize too (after their timeouts). */
static void mpi_abort(void *impl, const char *why)
{
    mpi_group *g = impl;
    if (!g || g->aborted)
        return;
    g->aborted = true;
    snprintf(g->why, sizeof g->why, "%s", why ? why : "no reason given");
}

/* Whether a collective that timed out is still pending (then MPI may
 * still write into the staging buffers, and progress it on the
 * communicator: neither may go away). MPI can neither cancel nor free a
 * collective's request. Under mpi_lock. */
static bool still_pending(mpi_group *g)
{
    if (g->pending == MPI_REQUEST_NULL)
        return false;
    int done = 0, finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized)
        return false;
    if (MPI_Test(&g->pending, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return true; /* unknown: keep what it may touch */
    return !done;
}

/* Frees the group; what a pending collective may still use (`keep`) is
 * handed over to the process instead. */
static void group_free(mpi_group *g, bool keep)
{
    if (keep) {
        leave_behind(g->stage, g->parts);
        leave_behind(g->desc, NULL);
        g->stage = g->parts = NULL;
        g->desc = NULL;
    }
    free(g->stage);
    free(g->parts);
    free(g->counts);
    free(g->displs);
    free(g->rcounts);
    free(g->rdispls);
    free(g->dup);
    free(g->desc);
    free(g);
}

static void mpi_destroy(void *impl)
{
    mpi_group *g = impl;
    if (!g)
        return;
    int finalized = 1;
    pthread_mutex_lock(&mpi_lock);
    MPI_Finalized(&finalized);
    bool pending = !finalized && still_pending(g);
    /* MPI_Comm_free is local; but OpenMPI 4.1 progresses a pending
     * non-blocking collective on a freed communicator into a crash
     * (seen in MPI_Finalize), so a communicator with one stays, like the
     * buffers: MPI_Finalize ends both */
    if (!finalized && !pending && g->comm != MPI_COMM_NULL) {
        int err = MPI_Comm_free(&g->comm);
        if (err != MPI_SUCCESS && !g->aborted && !g->broken)
            g->host->log(NULL, RLP_LOG_WARN, "MPI process group: MPI_Comm_free failed (error %d)", err);
    }
    pthread_mutex_unlock(&mpi_lock);
    group_free(g, pending);
}

/* MPI_Init_thread unless MPI is running already; under mpi_lock. MPI
 * cannot start again once finalized, so that is an error. */
static int ensure_mpi(const rlpi_comm_module_args *args)
{
    const rlpi_host_api *host = args->host;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return host->error_set(RLP_E_BACKEND, "MPI process group: MPI was finalized in this process and cannot "
                               "start again");
    if (inited) {
        int level = MPI_THREAD_SINGLE, is_main = 1;
        MPI_Query_thread(&level);
        MPI_Is_thread_main(&is_main);
        if (level < MPI_THREAD_SERIALIZED && !is_main)
            host->log(NULL, RLP_LOG_WARN, "MPI process group: the application initialized MPI at thread level %d "
                      "(below MPI_THREAD_SERIALIZED) and the group is created outside its main thread", level);
        return RLP_OK;
    }
    if (args->world > 1 && !launched())
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: a group of %d ranks was asked for, but this "
                               "process was not started by mpirun/srun (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or "
                               "PMI_RANK in the environment)", (int)args->world);
    /* OpenMPI ends the process itself if its start fails (errors are fatal
     * until MPI_Init returns): nothing to do about that here. */
    int provided = MPI_THREAD_SINGLE;
    int err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (err != MPI_SUCCESS)
        return mpi_error(host, err, "MPI_Init_thread");
    we_initialized = true;
    /* MPI_COMM_WORLD is ours too now: let its errors return, not abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_SERIALIZED)
        host->log(NULL, RLP_LOG_WARN, "MPI process group: MPI provides thread level %d, below "
                  "MPI_THREAD_SERIALIZED (%d)", provided, MPI_THREAD_SERIALIZED);
    if (atexit(finalize_at_exit) != 0)
        host->log(NULL, RLP_LOG_WARN, "MPI process group: atexit failed: MPI will not be finalized at exit");
    return RLP_OK;
}

static int run_idup(mpi_group *g)
{
    RUN(g, "create (MPI_Comm_idup)", MPI_Comm_idup(MPI_COMM_WORLD, g->dup, &req_));
    return RLP_OK;
}

static int mpi_create(const rlpi_comm_module_args *args, int32_t *rank, int32_t *world, void **impl)
{
    if (!args || !args->host)
        return no_host_error(args ? "create with a NULL host api" : "create with NULL args");
    const rlpi_host_api *host = args->host;
    if (args->abi != RLPI_COMM_MODULE_ABI)
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: module ABI %u asked for, this module has %u",
                               (unsigned)args->abi, (unsigned)RLPI_COMM_MODULE_ABI);
    if (!rank || !world || !impl)
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: NULL %s", !rank ? "rank" : !world ? "world" : "impl");
    if (!(args->timeout_s > 0))
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: timeout %g s is not positive", args->timeout_s);

    pthread_mutex_lock(&mpi_lock);
    int rc = ensure_mpi(args);
    int r = -1, w = 0;
    if (rc == RLP_OK && (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS ||
                         MPI_Comm_size(MPI_COMM_WORLD, &w) != MPI_SUCCESS))
        rc = host->error_set(RLP_E_BACKEND, "MPI process group: MPI_COMM_WORLD gives no rank or size");
    pthread_mutex_unlock(&mpi_lock);
    if (rc != RLP_OK)
        return rc;
    /* checked before the duplication, which is collective: ranks that fail
     * here leave no operation behind for the others */
    if (w == 1 && args->world > 1)
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: a group of %d ranks was asked for, but MPI runs "
                               "this process alone: not started by mpirun/srun", (int)args->world);
    if (args->world > 0 && args->world != w)
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: the caller expects %d ranks, the MPI launcher "
                               "started %d", (int)args->world, w);
    if (args->rank >= 0 && args->rank != r)
        return host->error_set(RLP_E_INVALID_ARG, "MPI process group: the caller expects rank %d, the MPI launcher "
                               "made this process rank %d", (int)args->rank, r);

    mpi_group *g = calloc(1, sizeof *g);
    if (!g)
        return host->error_set(RLP_E_NOMEM, "MPI process group: out of memory");
    g->host = host;
    g->comm = MPI_COMM_NULL;
    g->pending = MPI_REQUEST_NULL;
    g->rank = r;
    g->world = w;
    g->timeout_s = args->timeout_s;
    size_t W = (size_t)w;
    g->counts = malloc(W * sizeof(int));
    g->displs = malloc(W * sizeof(int));
    g->rcounts = malloc(W * sizeof(int));
    g->rdispls = malloc(W * sizeof(int));
    g->dup = malloc(sizeof *g->dup);
    g->desc = malloc(2 * DESC_FIELDS * sizeof *g->desc);
    if (!g->counts || !g->displs || !g->rcounts || !g->rdispls || !g->dup || !g->desc) {
        group_free(g, false);
        return host->error_set(RLP_E_NOMEM, "MPI process group: out of memory for %d ranks", w);
    }
    *g->dup = MPI_COMM_NULL;

    /* MPI_Comm_idup rather than MPI_Comm_dup: a rank that never comes is a
     * timeout here too */
    if ((rc = run_idup(g)) != RLP_OK) {
        pthread_mutex_lock(&mpi_lock);
        bool pending = still_pending(g);
        pthread_mutex_unlock(&mpi_lock);
        if (pending) {
            leave_behind(g->dup, NULL); /* MPI writes the handle when the others come */
            g->dup = NULL;
        }
        group_free(g, false);
        return rc;
    }
    g->comm = *g->dup;
    pthread_mutex_lock(&mpi_lock);
    int err = MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    pthread_mutex_unlock(&mpi_lock);
    if (err != MPI_SUCCESS) {
        rc = mpi_error(host, err, "MPI_Comm_set_errhandler");
        mpi_destroy(g);
        return rc;
    }
    *rank = r;
    *world = w;
    *impl = g;
    return RLP_OK;
}

static const rlpi_comm_module_api mpi_api = {
    .abi = RLPI_COMM_MODULE_ABI,
    .name = "mpi",
    .create = mpi_create,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

EXPORT const rlpi_comm_module_api *rlpi_comm_module_get(const rlpi_host_api *host);

EXPORT const rlpi_comm_module_api *rlpi_comm_module_get(const rlpi_host_api *host)
{
    if (!host || !host->error_set)
        return NULL;
    if (host->version < RLPI_HOST_API_VERSION || !host->log) {
        host->error_set(RLP_E_UNSUPPORTED, "MPI process group module: host api version %u, this module needs %u",
                        (unsigned)host->version, (unsigned)RLPI_HOST_API_VERSION);
        return NULL;
    }
    module_host = host;
    return &mpi_api;
}
