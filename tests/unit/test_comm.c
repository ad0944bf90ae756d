/* Process groups (rlp_comm) over the SHM transport, with real processes:
 * all-reduce (sum, max, min; f32 buffers and f64 host values) spanning many
 * 1 MiB chunks, exact against the rank-order reference and bit-identical on
 * every rank; broadcast; barriers; ranks that disagree on a size; a rank
 * that never comes (timeout), leaves, or is killed; a rank joining twice;
 * stale and malformed rendezvous files; the environment; argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/context.h"
#include "dist/comm.h"
#include "rank_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static rlp_context *make_ctx(void)
{
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 1;
    rlp_context *c = NULL;
    return rlp_context_create(&c, &o) == RLP_OK ? c : NULL;
}

static int join(rlp_context *ctx, int rank, int world, const char *dir, uint32_t timeout_ms, rlp_comm **out)
{
    char rdv[512];
    snprintf(rdv, sizeof rdv, "%s/rendezvous.json", dir);
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    o.transport = RLP_COMM_SHM;
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    o.timeout_ms = timeout_ms;
    return rlp_comm_create(out, ctx, &o);
}

/* value of element i on rank r: distinct, with fractions that make the
 * summation order visible in the last bits */
static double val(int r, size_t i)
{
    return sin((double)i * 0.37 + r) * (1.0 + r * 1e-3) + (double)(i % 7) * 1e-7;
}

/* several chunks of the largest slot (4 MiB), plus a ragged tail */
enum { N_F64 = 3 * 524288 + 17, N_F32 = 5 * 1048576 + 3, N_BYTES = 3 * 4194304 + 5 };

static int collectives_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    RANK_CHECK(ctx, "context");
    rlp_comm *comm;
    int rc = join(ctx, rank, world, dir, 20000, &comm);
    RANK_CHECK(rc == RLP_OK, "join: %s", rlp_error_last());
    int32_t r, w, t;
    RANK_CHECK(rlp_comm_info(comm, &r, &w, &t) == RLP_OK && r == rank && w == world && t == RLP_COMM_SHM, "info");

    /* f64 sum / max / min over the public API */
    double *v = malloc(N_F64 * sizeof *v), *ref = malloc(N_F64 * sizeof *ref);
    for (int op = RLP_REDUCE_SUM; op <= RLP_REDUCE_MIN; op++) {
        for (size_t i = 0; i < N_F64; i++) {
            v[i] = val(rank, i);
            double acc = val(0, i);
            for (int q = 1; q < world; q++) {
                double x = val(q, i);
                acc = op == RLP_REDUCE_SUM ? acc + x : op == RLP_REDUCE_MAX ? (x > acc ? x : acc) : (x < acc ? x : acc);
            }
            ref[i] = acc;
        }
        RANK_CHECK(rlp_comm_all_reduce(comm, v, N_F64, op) == RLP_OK, "all_reduce: %s", rlp_error_last());
        RANK_CHECK(memcmp(v, ref, N_F64 * sizeof *v) == 0, "op %d: not the rank-order result", op);
    }
    free(v);
    free(ref);

    /* f32 sum over a backend buffer (the gradient path), at an offset */
    rlpi_buffer *g;
    RANK_CHECK(rlpi_buffer_alloc(ctx->backend, (N_F32 + 5) * 4, &g) == RLP_OK, "alloc");
    float *gh = rlpi_buffer_host(g);
    for (size_t i = 0; i < N_F32 + 5; i++)
        gh[i] = (float)val(rank, i);
    RANK_CHECK(rlpi_comm_all_reduce_buffer(comm, g, 5, N_F32, RLP_REDUCE_SUM) == RLP_OK, "%s", rlp_error_last());
    for (size_t i = 0; i < N_F32 + 5; i++) {
        float want = (float)val(rank, i);
        if (i >= 5) {
            want = (float)val(0, i);
            for (int q = 1; q < world; q++)
                want += (float)val(q, i);
        }
        RANK_CHECK(gh[i] == want, "f32 element %zu: %.9g, want %.9g", i, gh[i], want);
    }
    rlpi_buffer_free(g);

    /* broadcast from the last rank */
    unsigned char *b = malloc(N_BYTES);
    for (size_t i = 0; i < N_BYTES; i++)
        b[i] = (unsigned char)(rank == world - 1 ? (i * 31 + 7) & 255 : 0xEE);
    RANK_CHECK(rlp_comm_broadcast(comm, b, N_BYTES, world - 1) == RLP_OK, "broadcast: %s", rlp_error_last());
    for (size_t i = 0; i < N_BYTES; i++)
        RANK_CHECK(b[i] == (unsigned char)((i * 31 + 7) & 255), "broadcast byte %zu", i);
    free(b);

    /* zero-length collectives are still collectives */
    RANK_CHECK(rlp_comm_all_reduce(comm, NULL, 0, RLP_REDUCE_SUM) == RLP_OK, "empty all_reduce");
    for (int k = 0; k < 50; k++)
        RANK_CHECK(rlp_comm_barrier(comm) == RLP_OK, "barrier %d: %s", k, rlp_error_last());
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_collectives_three_ranks(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_true(dir[0]);
    assert_int_equal(run_ranks(3, collectives_rank, dir, NULL), 0);
    /* rank 0 removes the rendezvous file once everyone joined */
    char rdv[512];
    snprintf(rdv, sizeof rdv, "%s/rendezvous.json", dir);
    struct stat st;
    assert_int_not_equal(stat(rdv, &st), 0);
    rmdir(dir);
}

/* Ranks that call with different sizes all fail, and nothing is overrun. */
static int mismatch_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm;
    RANK_CHECK(join(ctx, rank, world, dir, 20000, &comm) == RLP_OK, "join: %s", rlp_error_last());
    double v[8] = {0};
    int rc = rlp_comm_all_reduce(comm, v, rank ? 8 : 7, RLP_REDUCE_SUM);
    RANK_CHECK(rc == RLP_E_INVALID_ARG, "rc %d: %s", rc, rlp_error_last());
    RANK_CHECK(strstr(rlp_error_last(), "disagree"), "message: %s", rlp_error_last());
    /* the group is unusable afterwards, and says so at once */
    RANK_CHECK(rlp_comm_barrier(comm) == RLP_E_CLOSED, "barrier after a failure");
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

/* One rank in a barrier, the other in an all-reduce of the same shape as
 * the call before (so a stale descriptor would look right): both fail. */
static int barrier_mismatch_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm;
    RANK_CHECK(join(ctx, rank, world, dir, 20000, &comm) == RLP_OK, "join: %s", rlp_error_last());
    double v = rank;
    RANK_CHECK(rlp_comm_all_reduce(comm, &v, 1, RLP_REDUCE_SUM) == RLP_OK && v == 1, "first all-reduce");
    int rc = rank ? rlp_comm_barrier(comm) : rlp_comm_all_reduce(comm, &v, 1, RLP_REDUCE_SUM);
    RANK_CHECK(rc == RLP_E_INVALID_ARG, "rc %d: %s", rc, rlp_error_last());
    RANK_CHECK(strstr(rlp_error_last(), "barrier") && strstr(rlp_error_last(), "all-reduce"), "message: %s",
               rlp_error_last());
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_size_mismatch_fails_every_rank(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(2, mismatch_rank, dir, NULL), 0);
    for (int k = 0; k < 20; k++) /* the race the descriptors' call numbers close */
        assert_int_equal(run_ranks(2, barrier_mismatch_rank, dir, NULL), 0);
    rmdir(dir);
}

/* Rank 1 of 2 never starts: rank 0's join times out with a message. */
static int alone_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm = NULL;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = join(ctx, rank, world, dir, 400, &comm);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    RANK_CHECK(rc == RLP_E_TIMEOUT && !comm, "rc %d", rc);
    RANK_CHECK(strstr(rlp_error_last(), "1 of 2"), "message: %s", rlp_error_last());
    RANK_CHECK(s >= 0.35 && s < 5, "took %.2f s", s);
    rlp_context_free(ctx);
    return 0;
}

/* A rank > 0 whose rank 0 never comes times out too. */
static int orphan_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm = NULL;
    int rc = join(ctx, rank, world, dir, 300, &comm);
    RANK_CHECK(rc == RLP_E_TIMEOUT, "rc %d: %s", rc, rlp_error_last());
    RANK_CHECK(strstr(rlp_error_last(), "rank 0"), "message: %s", rlp_error_last());
    rlp_context_free(ctx);
    return 0;
}

static void test_missing_rank_times_out(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks_ex(2, 0, 1, alone_rank, dir, NULL, NULL), 0);
    assert_int_equal(run_ranks_ex(2, 1, 1, orphan_rank, dir, NULL, NULL), 0);
    rmdir(dir);
}

/* Rank 1 leaves (frees its comm) while the others wait in a barrier: they
 * learn it at once (RLP_E_CLOSED), long before their 30 s timeout. Then
 * rank 1 is killed without a word: the others see its process gone within
 * about a second. */
static int leave_rank(int rank, int world, const char *dir, void *arg)
{
    int mode = *(int *)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm;
    RANK_CHECK(join(ctx, rank, world, dir, 30000, &comm) == RLP_OK, "join: %s", rlp_error_last());
    RANK_CHECK(rlp_comm_barrier(comm) == RLP_OK, "first barrier");
    if (rank == 1) {
        if (mode)
            raise(SIGKILL);
        rlp_comm_free(comm);
        rlp_context_free(ctx);
        return 0;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = rlp_comm_barrier(comm);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (mode) {
        /* the dead rank's pid is gone: noticed within about a second, not at the 30 s timeout */
        RANK_CHECK(rc == RLP_E_CLOSED, "rc %d: %s", rc, rlp_error_last());
        RANK_CHECK(strstr(rlp_error_last(), "rank 1 (process") && strstr(rlp_error_last(), "exit without leaving"),
                   "message: %s", rlp_error_last());
        RANK_CHECK(s < 5, "took %.2f s", s);
    }
    else {
        RANK_CHECK(rc == RLP_E_CLOSED, "rc %d: %s", rc, rlp_error_last());
        RANK_CHECK(strstr(rlp_error_last(), "rank 1 left"), "message: %s", rlp_error_last());
        RANK_CHECK(s < 5, "took %.2f s", s);
    }
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_peer_leaves_or_dies(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    int mode = 0;
    assert_int_equal(run_ranks(3, leave_rank, dir, &mode), 0);
    mode = 1; /* rank 1 is killed: its exit status is a failure, the others pass */
    assert_int_equal(run_ranks(3, leave_rank, dir, &mode), 1);
    rmdir(dir);
}

/* Two processes claim rank 1: the second is refused. */
static int dup_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm = NULL;
    int rc = join(ctx, rank == 2 ? 1 : rank, world, dir, 1500, &comm);
    if (rank == 2) {
        RANK_CHECK(rc == RLP_E_INVALID_ARG || rc == RLP_E_CLOSED || rc == RLP_E_TIMEOUT, "rc %d", rc);
        RANK_CHECK(rc != RLP_E_INVALID_ARG || strstr(rlp_error_last(), "twice"), "message: %s", rlp_error_last());
    }
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_duplicate_rank_refused(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    /* world 3 with ranks 0, 1, 1: the group can never complete, and the
     * duplicate must not be counted as the missing rank 2 */
    unsigned delay[3] = {0, 0, 200000};
    assert_int_equal(run_ranks_ex(3, 0, 3, dup_rank, dir, NULL, delay), 0);
    rmdir(dir);
}

/* Rank 1 expects 3 ranks, rank 0 (running) 2: rank 1 says so at once
 * instead of waiting out its timeout for a file that will never fit. */
static int world_mismatch_rank(int rank, int world, const char *dir, void *arg)
{
    (void)world, (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm = NULL;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = join(ctx, rank, rank ? 3 : 2, dir, rank ? 20000 : 1500, &comm);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (rank) {
        RANK_CHECK(rc == RLP_E_INVALID_ARG, "rc %d: %s", rc, rlp_error_last());
        RANK_CHECK(strstr(rlp_error_last(), "is for 2 ranks") && strstr(rlp_error_last(), "disagree"), "message: %s",
                   rlp_error_last());
        RANK_CHECK(s < 5, "took %.1f s", s);
    }
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_world_size_mismatch_is_quick(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    unsigned delay[2] = {0, 200000};
    assert_int_equal(run_ranks_ex(2, 0, 2, world_mismatch_rank, dir, NULL, delay), 0);
    rmdir(dir);
}

/* A stale rendezvous of a dead process, then a malformed one: rank 1
 * starts first and must wait for rank 0's fresh file, not join the old. */
static void test_stale_and_malformed_rendezvous(void **state)
{
    (void)state;
    char dir[256], rdv[512];
    rank_tmpdir(dir, sizeof dir);
    snprintf(rdv, sizeof rdv, "%s/rendezvous.json", dir);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    FILE *f = fopen(rdv, "w");
    fprintf(f, "{\"rlpost_rendezvous\":1,\"world_size\":3,\"transport\":\"shm\",\"pid\":%ld,"
               "\"shm\":\"/rlpost-gone\",\"nccl_id\":\"\"}", (long)dead);
    fclose(f);
    unsigned delay[3] = {300000, 0, 0};
    assert_int_equal(run_ranks_ex(3, 0, 3, collectives_rank, dir, NULL, delay), 0);
    f = fopen(rdv, "w");
    fprintf(f, "{\"rlpost_rendezvous\": [[[[[[");
    fclose(f);
    assert_int_equal(run_ranks_ex(2, 0, 2, collectives_rank, dir, NULL, delay), 0);
    rmdir(dir);
}

/* rank, world size and rendezvous from the environment (torchrun's names too) */
static int env_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    char rdv[512], rs[16], ws[16];
    snprintf(rdv, sizeof rdv, "%s/env-rendezvous.json", dir);
    snprintf(rs, sizeof rs, "%d", rank);
    snprintf(ws, sizeof ws, "%d", world);
    setenv(rank ? "RANK" : "RLPOST_RANK", rs, 1);
    setenv("WORLD_SIZE", ws, 1);
    setenv("RLPOST_RENDEZVOUS", rdv, 1);
    rlp_context *ctx = make_ctx();
    rlp_comm *comm;
    RANK_CHECK(rlp_comm_create(&comm, ctx, NULL) == RLP_OK, "%s", rlp_error_last());
    int32_t r, w;
    rlp_comm_info(comm, &r, &w, NULL);
    RANK_CHECK(r == rank && w == world, "rank %d world %d", r, w);
    double x = rank + 1;
    RANK_CHECK(rlp_comm_all_reduce(comm, &x, 1, RLP_REDUCE_SUM) == RLP_OK && x == 3, "sum %g", x);
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

static void test_environment(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(2, env_rank, dir, NULL), 0);
    rmdir(dir);
}

/* Join, one all-reduce, leave at once: the last rank through a barrier
 * leaves while the others are still between their checks of the barrier
 * and of the group's state. That race once failed 20-30 % of such groups
 * with a false "rank 1 left the group". */
static int short_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    rlp_context *ctx = make_ctx();
    rlp_comm *comm;
    RANK_CHECK(join(ctx, rank, world, dir, 20000, &comm) == RLP_OK, "join: %s", rlp_error_last());
    double x = rank + 1;
    int rc = rlp_comm_all_reduce(comm, &x, 1, RLP_REDUCE_SUM);
    RANK_CHECK(rc == RLP_OK && x == world * (world + 1) / 2.0, "rc %d, sum %g: %s", rc, x, rlp_error_last());
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

/* How many objects in /dev/shm start with `prefix`. */
static int shm_count(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Rank 0 killed during its rendezvous (rank 1 never comes) leaves its
 * 16 MiB shared-memory object behind; the next group's rank 0 sweeps it.
 * Objects of a live process, or named for another user, are left alone. */
static void test_leaked_shm_swept(void **state)
{
    (void)state;
    if (access("/dev/shm", W_OK))
        skip();
    char dir[256], prefix[96], live[128], other[128];
    rank_tmpdir(dir, sizeof dir);
    pid_t victim = fork();
    if (victim == 0) {
        rlp_context *ctx = make_ctx();
        rlp_comm *comm = NULL;
        join(ctx, 0, 2, dir, 60000, &comm); /* waits for a rank 1 that never comes */
        _exit(1);
    }
    snprintf(prefix, sizeof prefix, "rlpost-u%u-p%ld-", (unsigned)geteuid(), (long)victim);
    for (int i = 0; i < 500 && shm_count(prefix) == 0; i++)
        usleep(10000);
    assert_int_equal(shm_count(prefix), 1);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    assert_int_equal(shm_count(prefix), 1); /* the leak */

    /* a live process's object, and a dead process's named for another user */
    snprintf(live, sizeof live, "/rlpost-u%u-p%ld-00000000000000aa", (unsigned)geteuid(), (long)getpid());
    snprintf(other, sizeof other, "/rlpost-u%u-p%ld-00000000000000bb", (unsigned)geteuid() + 1, (long)victim);
    int fd1 = shm_open(live, O_CREAT | O_RDWR, 0600), fd2 = shm_open(other, O_CREAT | O_RDWR, 0600);
    assert_true(fd1 >= 0 && fd2 >= 0);
    close(fd1);
    close(fd2);

    assert_int_equal(run_ranks(2, short_rank, dir, NULL), 0);
    assert_int_equal(shm_count(prefix), 0);
    assert_int_equal(shm_unlink(live), 0);  /* still there */
    assert_int_equal(shm_unlink(other), 0); /* still there */
    char rdv[512];
    snprintf(rdv, sizeof rdv, "%s/rendezvous.json", dir);
    unlink(rdv);
    rmdir(dir);
}

static void test_short_lived_groups(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    for (int k = 0; k < 60; k++)
        assert_int_equal(run_ranks(2 + k % 2, short_rank, dir, NULL), 0);
    rmdir(dir);
}

static void test_arguments(void **state)
{
    (void)state;
    rlp_context *ctx = make_ctx();
    assert_non_null(ctx);
    rlp_comm *c = (rlp_comm *)0x1;
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    assert_int_equal(rlp_comm_options_init(NULL, RLP_COMM_OPTIONS_VERSION), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_options_init(&o, 99), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_create(NULL, ctx, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_create(&c, NULL, &o), RLP_E_INVALID_ARG);
    assert_null(c);
    unsetenv("RLPOST_RANK");
    unsetenv("RANK");
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG); /* no rank anywhere */
    assert_non_null(strstr(rlp_error_last(), "RLPOST_RANK"));
    setenv("RLPOST_RANK", "one", 1);
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "\"one\""));
    unsetenv("RLPOST_RANK");
    o.rank = 2;
    o.world_size = 2;
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG);
    o.rank = 0;
    o.world_size = -1;
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG);
    o.world_size = 2;
    unsetenv("RLPOST_RENDEZVOUS");
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG); /* no rendezvous */
    o.transport = 7;
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_INVALID_ARG);
    o.transport = RLP_COMM_NCCL;
    o.rendezvous = "/tmp/x";
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_E_UNSUPPORTED); /* NCCL on a CPU context */
    /* a group of one needs no rendezvous and its collectives are identities */
    o = (rlp_comm_options)RLP_COMM_OPTIONS_INIT;
    o.rank = 0;
    o.world_size = 1;
    assert_int_equal(rlp_comm_create(&c, ctx, &o), RLP_OK);
    double v[3] = {1.5, -2, 3};
    assert_int_equal(rlp_comm_all_reduce(c, v, 3, RLP_REDUCE_SUM), RLP_OK);
    assert_true(v[0] == 1.5 && v[1] == -2 && v[2] == 3);
    assert_int_equal(rlp_comm_broadcast(c, v, sizeof v, 0), RLP_OK);
    assert_int_equal(rlp_comm_barrier(c), RLP_OK);
    assert_int_equal(rlp_comm_all_reduce(c, NULL, 1, RLP_REDUCE_SUM), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_all_reduce(c, v, 1, 9), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_broadcast(c, v, 8, 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_broadcast(c, NULL, 8, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_info(NULL, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_comm_barrier(NULL), RLP_E_INVALID_ARG);
    rlp_comm_free(c);
    rlp_comm_free(NULL);
    rlp_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_collectives_three_ranks),
        cmocka_unit_test(test_size_mismatch_fails_every_rank),
        cmocka_unit_test(test_missing_rank_times_out),
        cmocka_unit_test(test_peer_leaves_or_dies),
        cmocka_unit_test(test_duplicate_rank_refused),
        cmocka_unit_test(test_world_size_mismatch_is_quick),
        cmocka_unit_test(test_stale_and_malformed_rendezvous),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_short_lived_groups),
        cmocka_unit_test(test_leaked_shm_swept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
