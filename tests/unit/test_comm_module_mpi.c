/* The MPI process-group module (lib/dist/mpi/comm_mpi.c) through its ABI
 * (dist/comm_module.h), as the loader sees it: dlopen'd, with a tiny host
 * api. Run by tests/meson.build under mpirun on 2, 3 and 4 ranks:
 *
 *   test_comm_module_mpi MODULE            the collectives, arguments, groups
 *   test_comm_module_mpi MODULE timeout    rank 1 skips a barrier: the others
 *                                          time out after timeout_s = 1
 *   test_comm_module_mpi MODULE singleton  without mpirun: a group of 2 is
 *                                          refused, a group of 1 works
 *
 * The program does not link MPI: what every rank received is compared
 * through the module's own broadcast (rank 0's bytes against each rank's)
 * and against sums this program forms itself, left to right in rank order,
 * from values every rank can compute for every other. Each rank prints its
 * failures and exits 1 if there were any (mpirun then fails). */
#include "dist/comm_module.h"
#include "rlpost.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* one chunk of the module (CHUNK_BYTES in comm_mpi.c): sizes past it test
 * the chunking */
#define MODULE_CHUNK_BYTES ((size_t)16 << 20)

static char last_err[2048];
static int rank_ = -1, world_ = 0, failures, checks;

static int host_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof last_err, fmt, ap);
    va_end(ap);
    return code;
}

static void host_log(const void *logger, int level, const char *fmt, ...)
{
    (void)logger;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: module log (level %d): %s\n", rank_, level, msg);
}

/* the codes this test meets (it links no librlpost for rlp_status_str) */
static const char *status_name(int rc)
{
    switch (rc) {
    case RLP_OK: return "RLP_OK";
    case RLP_E_INVALID_ARG: return "RLP_E_INVALID_ARG";
    case RLP_E_NOMEM: return "RLP_E_NOMEM";
    case RLP_E_BACKEND: return "RLP_E_BACKEND";
    case RLP_E_TIMEOUT: return "RLP_E_TIMEOUT";
    case RLP_E_CLOSED: return "RLP_E_CLOSED";
    default: return "another code";
    }
}

static const rlpi_host_api host = {RLPI_HOST_API_VERSION, host_error_set, host_log};
static const rlpi_comm_module_api *api;

/* one write per failure, so that the ranks' lines do not interleave */
__attribute__((format(printf, 3, 4))) static void fail(int line, const char *cond, const char *fmt, ...)
{
    char msg[3072];
    int k = snprintf(msg, sizeof msg, "rank %d: %s:%d: CHECK(%s) failed: ", rank_, __FILE__, line, cond);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < sizeof msg)
        k += vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < sizeof msg)
        snprintf(msg + k, sizeof msg - (size_t)k, " [last error: %s]", last_err);
    fprintf(stderr, "%s\n", msg);
    failures++;
}

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        checks++;                                                                                 \
        if (!(cond))                                                                              \
            fail(__LINE__, #cond, __VA_ARGS__);                                                   \
    } while (0)
#define CHECK_RC(expr, want)                                                                      \
    do {                                                                                          \
        last_err[0] = '\0';                                                                       \
        int rc_ = (expr);                                                                         \
        CHECK(rc_ == (want), "%s returned %d (%s), expected %d (%s)", #expr, rc_, status_name(rc_), \
              (want), status_name(want));                                                      \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static rlpi_comm_module_args make_args(int32_t rank, int32_t world, double timeout_s)
{
    rlpi_comm_module_args a = {RLPI_COMM_MODULE_ABI, &host, rank, world, timeout_s, NULL, NULL};
    return a;
}

static void *create(int32_t rank, int32_t world, double timeout_s)
{
    rlpi_comm_module_args a = make_args(rank, world, timeout_s);
    int32_t r = -1, w = 0;
    void *g = NULL;
    CHECK_RC(api->create(&a, &r, &w, &g), RLP_OK);
    if (g) {
        CHECK(r == rank_ && w == world_, "create gave rank %d of %d, the launcher %d of %d", r, w, rank_, world_);
    }
    return g;
}

/* ---- values every rank can compute for every rank ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* Terms whose sum depends on the order: ±1e8 (f32) or ±1e16 (f64) next to
 * terms below their spacing. */
static double term(int r, size_t i, double big)
{
    uint64_t h = mix(((uint64_t)r << 40) ^ i);
    switch (h % 4) {
    case 0: return (h >> 8) & 1 ? big : -big;
    case 1: return 1.0 + (double)((h >> 8) % 1000) * 0.001;
    case 2: return -(double)((h >> 8) % 777) * 0.3;
    default: return (double)((h >> 8) % 16) * 0.0625;
    }
}

static float nan32(uint32_t payload)
{
    uint32_t bits = 0x7fc00000u | (payload & 0x3fffffu);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double nan64(uint64_t payload)
{
    uint64_t bits = 0x7ff8000000000000u | (payload & 0xffffffffffu);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Inputs of max/min: ordinary values, −0 against +0 and NaNs of
 * different payloads, where operand order decides the bits. */
static double mm_term(int r, size_t i, bool f32)
{
    switch (i % 6) {
    case 0: return term(r, i, 1e8);
    case 1: return r % 2 ? -0.0 : 0.0;
    case 2: return r == 1 ? (f32 ? (double)nan32(7) : nan64(7)) : (double)r;
    case 3: return f32 ? (double)nan32((uint32_t)r + 1) : nan64((uint64_t)r + 1);
    case 4: return (double)((int)(i % 11) - 5) * (r + 1);
    default: return r == 0 ? INFINITY : -(double)r;
    }
}

/* The operators of the SHM transport (comm_shm.c), which the module follows. */
#define OP_REF(T)                                                                  \
    static T op_##T(T out, T in, int op)                                           \
    {                                                                              \
        if (op == RLPI_CM_SUM)                                                     \
            return out + in;                                                       \
        if (op == RLPI_CM_MAX)                                                     \
            return in > out || in != in ? in : out;                                \
        return in < out || in != in ? in : out;                                    \
    }
OP_REF(float)
OP_REF(double)

static double input(int r, size_t i, int dtype, int op)
{
    if (op == RLPI_CM_SUM)
        return term(r, i, dtype == RLPI_CM_F32 ? 1e8 : 1e16);
    return mm_term(r, i, dtype == RLPI_CM_F32);
}

/* One all_reduce of n elements, checked bit for bit against the rank-order
 * result and against rank 0's bytes. Returns how many elements a sum in
 * reverse rank order would have got wrong (0 for max and min). */
static size_t check_all_reduce(void *g, size_t n, int dtype, int op)
{
    size_t es = dtype == RLPI_CM_F32 ? 4 : 8;
    unsigned char *data = malloc(n * es + 1), *want = malloc(n * es + 1), *root0 = malloc(n * es + 1);
    size_t order_matters = 0;
    for (size_t i = 0; i < n; i++) {
        if (dtype == RLPI_CM_F32) {
            float acc = (float)input(0, i, dtype, op), rev = (float)input(world_ - 1, i, dtype, op);
            for (int r = 1; r < world_; r++) {
                acc = op_float(acc, (float)input(r, i, dtype, op), op);
                rev = op_float(rev, (float)input(world_ - 1 - r, i, dtype, op), op);
            }
            ((float *)(void *)want)[i] = acc;
            ((float *)(void *)data)[i] = (float)input(rank_, i, dtype, op);
            order_matters += op == RLPI_CM_SUM && memcmp(&acc, &rev, 4) != 0;
        } else {
            double acc = input(0, i, dtype, op), rev = input(world_ - 1, i, dtype, op);
            for (int r = 1; r < world_; r++) {
                acc = op_double(acc, input(r, i, dtype, op), op);
                rev = op_double(rev, input(world_ - 1 - r, i, dtype, op), op);
            }
            ((double *)(void *)want)[i] = acc;
            ((double *)(void *)data)[i] = input(rank_, i, dtype, op);
            order_matters += op == RLPI_CM_SUM && memcmp(&acc, &rev, 8) != 0;
        }
    }
    CHECK_RC(api->all_reduce(g, data, n, dtype, op), RLP_OK);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(data + i * es, want + i * es, es) != 0 && bad++ == 0)
            first = i;
    CHECK(bad == 0, "all_reduce dtype %d op %d n %zu: %zu elements differ from the rank-order result, first %zu",
          dtype, op, n, bad, first);
    memcpy(root0, data, n * es);
    CHECK_RC(api->broadcast(g, root0, n * es, 0), RLP_OK);
    CHECK(memcmp(root0, data, n * es) == 0, "all_reduce dtype %d op %d n %zu: rank 0 got other bits", dtype, op, n);
    free(data);
    free(want);
    free(root0);
    return order_matters;
}

static void check_broadcast(void *g, size_t nbytes, int root)
{
    unsigned char *buf = malloc(nbytes + 1);
    for (size_t i = 0; i < nbytes; i++)
        buf[i] = rank_ == root ? (unsigned char)(i * 31 + (size_t)root * 7 + i / 65536) : 0xAA;
    CHECK_RC(api->broadcast(g, buf, nbytes, root), RLP_OK);
    size_t bad = 0;
    for (size_t i = 0; i < nbytes; i++)
        bad += buf[i] != (unsigned char)(i * 31 + (size_t)root * 7 + i / 65536);
    CHECK(bad == 0, "broadcast of %zu bytes from %d: %zu bytes differ", nbytes, root, bad);
    free(buf);
}

static int main_checks(void)
{
    void *g = create(-1, 0, 60);
    if (!g)
        return 1;

    /* sums whose bits depend on the order, max/min with ±0 and NaNs; sizes
     * of no particular multiple, and past one chunk of the module */
    size_t sizes32[] = {1, 7, 1000003, MODULE_CHUNK_BYTES / 4 + 4097};
    size_t sizes64[] = {1, 13, 300007, MODULE_CHUNK_BYTES / 8 + 33};
    size_t order_matters = 0;
    for (size_t k = 0; k < 4; k++) {
        order_matters += check_all_reduce(g, sizes32[k], RLPI_CM_F32, RLPI_CM_SUM);
        order_matters += check_all_reduce(g, sizes64[k], RLPI_CM_F64, RLPI_CM_SUM);
    }
    if (world_ >= 3) /* with 2 ranks a + b = b + a: any order gives the same bits */
        CHECK(order_matters > 1000, "only %zu sums depend on the order: the check proves nothing", order_matters);
    for (int op = RLPI_CM_MAX; op <= RLPI_CM_MIN; op++) {
        check_all_reduce(g, 1000, RLPI_CM_F32, op);
        check_all_reduce(g, 1001, RLPI_CM_F64, op);
        check_all_reduce(g, sizes32[3], RLPI_CM_F32, op);
    }

    /* nothing to move */
    CHECK_RC(api->all_reduce(g, NULL, 0, RLPI_CM_F32, RLPI_CM_SUM), RLP_OK);
    CHECK_RC(api->broadcast(g, NULL, 0, world_ - 1), RLP_OK);

    for (int root = 0; root < world_; root++)
        check_broadcast(g, 1000003 + (size_t)root, root);
    check_broadcast(g, 3, world_ - 1);
    check_broadcast(g, MODULE_CHUNK_BYTES + 12345, world_ - 1);

    /* the barrier waits for the last rank: rank 0 comes 1 s late (the
     * others' bound leaves 0.5 s for the ranks' skew before it) */
    if (rank_ == 0)
        sleep_s(1.0);
    double t0 = now_s();
    CHECK_RC(api->barrier(g), RLP_OK);
    if (rank_ != 0)
        CHECK(now_s() - t0 > 0.5, "the barrier returned after %.3f s, before rank 0 came", now_s() - t0);

    /* bad arguments: refused on the rank that makes them, before any traffic */
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_RC(api->all_reduce(g, NULL, 5, RLPI_CM_F32, RLPI_CM_SUM), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(g, buf, 5, 7, RLPI_CM_SUM), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(g, buf, 5, -1, RLPI_CM_SUM), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(g, buf, 5, RLPI_CM_F32, 9), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(g, buf, 5, RLPI_CM_F32, -1), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(g, buf, SIZE_MAX / 2, RLPI_CM_F64, RLPI_CM_SUM), RLP_E_INVALID_ARG);
    CHECK_RC(api->all_reduce(NULL, buf, 5, RLPI_CM_F32, RLPI_CM_SUM), RLP_E_INVALID_ARG);
    CHECK_RC(api->broadcast(g, NULL, 5, 0), RLP_E_INVALID_ARG);
    CHECK_RC(api->broadcast(g, buf, 5, -1), RLP_E_INVALID_ARG);
    CHECK_RC(api->broadcast(g, buf, 5, world_), RLP_E_INVALID_ARG);
    CHECK(strstr(last_err, "root") != NULL, "the message does not name the root: %s", last_err);
    CHECK_RC(api->broadcast(NULL, buf, 5, 0), RLP_E_INVALID_ARG);
    CHECK_RC(api->barrier(NULL), RLP_E_INVALID_ARG);
    int32_t r = -1, w = 0;
    void *none = NULL;
    rlpi_comm_module_args a = make_args(-1, 0, 60);
    CHECK_RC(api->create(NULL, &r, &w, &none), RLP_E_INVALID_ARG);
    CHECK_RC(api->create(&a, NULL, &w, &none), RLP_E_INVALID_ARG);
    CHECK_RC(api->create(&a, &r, &w, NULL), RLP_E_INVALID_ARG);
    a.abi = RLPI_COMM_MODULE_ABI + 1;
    CHECK_RC(api->create(&a, &r, &w, &none), RLP_E_INVALID_ARG);
    a = make_args(-1, 0, 0);
    CHECK_RC(api->create(&a, &r, &w, &none), RLP_E_INVALID_ARG);
    /* the launcher's size or rank, not the caller's */
    a = make_args(-1, world_ + 1, 60);
    CHECK_RC(api->create(&a, &r, &w, &none), RLP_E_INVALID_ARG);
    char want[64], got[64];
    snprintf(want, sizeof want, "expects %d ranks", world_ + 1);
    snprintf(got, sizeof got, "started %d", world_);
    CHECK(strstr(last_err, want) && strstr(last_err, got), "the message does not name both sizes: %s", last_err);
    if (world_ > 1) {
        a = make_args((rank_ + 1) % world_, world_, 60);
        CHECK_RC(api->create(&a, &r, &w, &none), RLP_E_INVALID_ARG);
        snprintf(want, sizeof want, "expects rank %d", (rank_ + 1) % world_);
        CHECK(strstr(last_err, want) != NULL, "the message does not name the rank: %s", last_err);
    }
    CHECK(none == NULL, "a failed create wrote *impl");

    /* ranks that call different collectives all fail, and the group goes on */
    if (world_ > 1) {
        CHECK_RC(api->all_reduce(g, buf, rank_ == 0 ? 5 : 6, RLPI_CM_F32, RLPI_CM_SUM), RLP_E_INVALID_ARG);
        CHECK(strstr(last_err, "different collectives") != NULL, "unexpected message: %s", last_err);
        if (rank_ == 0)
            CHECK_RC(api->barrier(g), RLP_E_INVALID_ARG);
        else
            CHECK_RC(api->broadcast(g, buf, 4, 0), RLP_E_INVALID_ARG);
        CHECK(memcmp(buf, (float[8]){1, 2, 3, 4, 5, 6, 7, 8}, sizeof buf) == 0, "a refused call changed the data");
    }
    float one[3] = {1, 2, (float)rank_};
    CHECK_RC(api->all_reduce(g, one, 3, RLPI_CM_F32, RLPI_CM_SUM), RLP_OK);
    CHECK(one[0] == (float)world_ && one[1] == 2.0f * (float)world_ &&
          one[2] == (float)(world_ * (world_ - 1) / 2), "sum after the refusals: %g %g %g", one[0], one[1], one[2]);

    /* a second group beside the first, with the caller's (right) rank and
     * size, and one group after another */
    void *g2 = create(rank_, world_, 60);
    if (g2) {
        check_all_reduce(g2, 1003, RLPI_CM_F32, RLPI_CM_SUM);
        CHECK_RC(api->barrier(g), RLP_OK);
        CHECK_RC(api->barrier(g2), RLP_OK);
        api->destroy(g2);
    }
    void *g3 = create(-1, world_, 60);
    if (g3) {
        check_broadcast(g3, 999, 0);
        api->destroy(g3);
    }

    /* abort is local and final for the group, and idempotent */
    void *g4 = create(-1, 0, 60);
    if (g4) {
        api->abort(g4, "the test gave up");
        api->abort(g4, "again");
        CHECK_RC(api->barrier(g4), RLP_E_CLOSED);
        CHECK_RC(api->all_reduce(g4, buf, 2, RLPI_CM_F32, RLPI_CM_SUM), RLP_E_CLOSED);
        CHECK(strstr(last_err, "the test gave up") != NULL, "the message lacks the reason: %s", last_err);
        CHECK_RC(api->broadcast(g4, buf, 4, 0), RLP_E_CLOSED);
        api->destroy(g4);
    }
    CHECK_RC(api->barrier(g), RLP_OK);
    api->destroy(g);

    /* every group gone: MPI stays up for the next one */
    void *g5 = create(-1, 0, 60);
    if (g5) {
        check_all_reduce(g5, 17, RLPI_CM_F64, RLPI_CM_SUM);
        api->destroy(g5);
    }
    return 0;
}

/* Rank 1 skips a barrier; the others' ends after timeout_s = 1. Rank 1
 * then joins it late, so the collective the others left pending completes
 * and every process exits through MPI_Finalize. */
static int timeout_checks(void)
{
    void *g = create(-1, 0, 1.0);
    if (!g)
        return 1;
    CHECK_RC(api->barrier(g), RLP_OK); /* everyone is here */
    if (rank_ == 1) {
        sleep_s(2.5);
        /* the others' barrier is still pending in MPI: this one completes it */
        double t0 = now_s();
        CHECK_RC(api->barrier(g), RLP_OK);
        CHECK(now_s() - t0 < 1.0, "the late barrier took %.3f s", now_s() - t0);
    } else {
        double t0 = now_s();
        CHECK_RC(api->barrier(g), RLP_E_TIMEOUT);
        double took = now_s() - t0;
        CHECK(took >= 0.9 && took < 2.0, "the barrier timed out after %.3f s, not ~1 s", took);
        CHECK(strstr(last_err, "timed out") != NULL, "unexpected message: %s", last_err);
        /* the group is unusable now, at once */
        t0 = now_s();
        CHECK_RC(api->barrier(g), RLP_E_CLOSED);
        float x = 1;
        CHECK_RC(api->all_reduce(g, &x, 1, RLPI_CM_F32, RLPI_CM_SUM), RLP_E_CLOSED);
        CHECK(now_s() - t0 < 0.5, "a broken group's calls took %.3f s", now_s() - t0);
    }
    api->destroy(g);
    return 0;
}

/* Without a launcher: a group of 2 is refused before MPI starts, then MPI
 * starts alone (a singleton) for a group of 1, which then refuses 2 too. */
static int singleton_checks(void)
{
    int32_t r = -1, w = 0;
    void *g = NULL;
    rlpi_comm_module_args a = make_args(-1, 2, 10);
    CHECK_RC(api->create(&a, &r, &w, &g), RLP_E_INVALID_ARG);
    CHECK(strstr(last_err, "not started by mpirun/srun") != NULL, "unexpected message: %s", last_err);
    rank_ = 0;
    world_ = 1;
    g = create(-1, 0, 10);
    if (!g)
        return 1;
    float x[3] = {1.5f, -0.0f, nan32(3)}, y[3];
    memcpy(y, x, sizeof x);
    CHECK_RC(api->all_reduce(g, x, 3, RLPI_CM_F32, RLPI_CM_SUM), RLP_OK);
    CHECK(memcmp(x, y, sizeof x) == 0, "a group of 1 changed its data");
    CHECK_RC(api->broadcast(g, x, sizeof x, 0), RLP_OK);
    CHECK_RC(api->broadcast(g, x, sizeof x, 1), RLP_E_INVALID_ARG);
    CHECK_RC(api->barrier(g), RLP_OK);
    a = make_args(1, 0, 10);
    void *g2 = NULL;
    CHECK_RC(api->create(&a, &r, &w, &g2), RLP_E_INVALID_ARG);
    a = make_args(-1, 2, 10);
    CHECK_RC(api->create(&a, &r, &w, &g2), RLP_E_INVALID_ARG);
    CHECK(strstr(last_err, "not started by mpirun/srun") != NULL, "unexpected message: %s", last_err);
    api->destroy(g);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE [timeout|singleton]\n", argv[0]);
        return 2;
    }
    const char *mode = argc > 2 ? argv[2] : "main";
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    rlpi_comm_module_get_fn get = (rlpi_comm_module_get_fn)(uintptr_t)dlsym(h, "rlpi_comm_module_get");
    if (!get) {
        fprintf(stderr, "%s has no rlpi_comm_module_get\n", argv[1]);
        return 1;
    }
    api = get(&host);
    if (!api || api->abi != RLPI_COMM_MODULE_ABI || strcmp(api->name, "mpi") != 0) {
        fprintf(stderr, "%s: no MPI module table of ABI %d\n", argv[1], RLPI_COMM_MODULE_ABI);
        return 1;
    }
    /* where the launcher put this process, without MPI */
    const char *er = getenv("OMPI_COMM_WORLD_RANK"), *ew = getenv("OMPI_COMM_WORLD_SIZE");
    if (strcmp(mode, "singleton") != 0) {
        if (!er || !ew) {
            fprintf(stderr, "not started by OpenMPI's mpirun (no OMPI_COMM_WORLD_RANK/SIZE)\n");
            return 1;
        }
        rank_ = atoi(er);
        world_ = atoi(ew);
    }
    int rc = strcmp(mode, "timeout") == 0     ? timeout_checks()
             : strcmp(mode, "singleton") == 0 ? singleton_checks()
                                              : main_checks();
    /* the module stays mapped (-z nodelete): its exit handler finalizes MPI */
    dlclose(h);
    printf("rank %d of %d (%s): %d checks, %d failed\n", rank_, world_, mode, checks, failures);
    return rc != 0 || failures != 0;
}
