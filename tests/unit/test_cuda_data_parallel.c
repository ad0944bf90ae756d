/* Data parallelism on CUDA contexts (the gpu suite; skips 77 without a GPU):
 * - NCCL, one rank: a group of one over NCCL (real ncclCommInitRank,
 *   all-reduce and broadcast on device memory), and a train step through
 *   it gives the same weights as without the group;
 * - two ranks on GPU 0 over SHM (device buffers staged through host
 *   memory) against one CUDA policy micro-batched at the same cut;
 * - with two or more GPUs, two ranks over NCCL, one GPU each, the same.
 * CUDA is never touched in the parent: a child checks for a GPU first
 * (a CUDA context does not survive fork). */
#include "model/policy.h"
#include "rank_runner.h"
#include "tiny_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int mk(int device, uint64_t seed, rlp_context **ctx, rlp_policy **p)
{
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.backend = RLP_BACKEND_CUDA;
    co.device = device;
    co.n_threads = 1;
    RANK_CHECK(rlp_context_create(ctx, &co) == RLP_OK, "cuda context: %s", rlp_error_last());
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", true);
    rlpi_weights w;
    RANK_CHECK(tiny_weights(&cfg, &w, seed) == RLP_OK, "weights");
    RANK_CHECK(rlpi_policy_create(p, *ctx, &cfg, &w, NULL) == RLP_OK, "policy: %s", rlp_error_last());
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 3e-3f;
    RANK_CHECK(rlp_policy_set_optimizer(*p, &oo) == RLP_OK, "optimizer");
    return 0;
}

static int32_t toks[4][32];
static const uint32_t LEN[4] = {30, 22, 17, 25};

static int dump(rlp_policy *p, const char *dir, const char *name)
{
    size_t n = rlpi_transformer_n_params(p->tf);
    float *h = malloc(n * 4);
    RANK_CHECK(h && rlpi_buffer_download(rlpi_transformer_params(p->tf), 0, h, n * 4) == RLP_OK, "download");
    char path[600];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    RANK_CHECK(f && fwrite(h, 4, n, f) == n, "write");
    fclose(f);
    free(h);
    return 0;
}

/* exit 0 when at least *(int *)arg GPUs are usable */
static int has_gpus(int rank, int world, const char *dir, void *arg)
{
    (void)rank, (void)world, (void)dir;
    int n = 0;
    if (rlp_backend_available(RLP_BACKEND_CUDA) != 1 || rlp_backend_device_count(&n, RLP_BACKEND_CUDA))
        return 1;
    return n >= *(int *)arg ? 0 : 1;
}

typedef struct dp_case {
    int transport, one_gpu_each;
} dp_case;

static int dp_rank(int rank, int world, const char *dir, void *arg)
{
    const dp_case *c = arg;
    rlp_context *ctx;
    rlp_policy *p;
    if (mk(c->one_gpu_each ? rank : 0, 3, &ctx, &p))
        return 1;
    rlp_comm *comm = NULL;
    if (world > 0) {
        char rdv[512];
        snprintf(rdv, sizeof rdv, "%s/rdv.json", dir);
        rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
        o.transport = c->transport;
        o.rank = rank;
        o.world_size = world;
        o.rendezvous = rdv;
        o.timeout_ms = 60000;
        RANK_CHECK(rlp_comm_create(&comm, ctx, &o) == RLP_OK, "comm: %s", rlp_error_last());
        RANK_CHECK(rlp_policy_set_comm(p, comm) == RLP_OK, "set_comm");
        double v[2] = {rank + 1.0, 2.0};
        RANK_CHECK(rlp_comm_all_reduce(comm, v, 2, RLP_REDUCE_SUM) == RLP_OK, "all_reduce: %s", rlp_error_last());
        RANK_CHECK(v[0] == world * (world + 1) / 2.0 && v[1] == 2.0 * world, "sums %g %g", v[0], v[1]);
        char msg[16] = "";
        if (rank == 0)
            strcpy(msg, "from rank 0");
        RANK_CHECK(rlp_comm_broadcast(comm, msg, sizeof msg, 0) == RLP_OK && !strcmp(msg, "from rank 0"), "bcast");
        RANK_CHECK(rlp_comm_barrier(comm) == RLP_OK, "barrier");
    }
    rlp_sequence s[4];
    int from = world <= 1 ? 0 : rank == 0 ? 0 : 2, to = world <= 1 ? 4 : rank == 0 ? 2 : 4;
    for (int i = from; i < to; i++)
        s[i - from] = (rlp_sequence){toks[i], LEN[i], 3};
    rlp_train_options to_ = RLP_TRAIN_OPTIONS_INIT;
    to_.micro_batch_tokens = world == 0 ? 52 : 0; /* 30 + 22 | 17 + 25: the rank cut */
    for (int step = 0; step < 2; step++)
        RANK_CHECK(rlp_policy_train_step(p, s, (size_t)(to - from), rlp_loss_nll, NULL, &to_, NULL) == RLP_OK,
                   "step: %s", rlp_error_last());
    char name[32];
    snprintf(name, sizeof name, "w%d_r%d", world, rank);
    int rc = dump(p, dir, name);
    rlp_policy_free(p);
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return rc;
}

static float *load(const char *dir, const char *name, size_t *n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float *h = malloc(*n * 4);
    if (h && fread(h, 4, *n, f) != *n) {
        free(h);
        h = NULL;
    }
    fclose(f);
    return h;
}

static int compare(const char *dir, const char *a, const char *b, double tol, const char *what)
{
    size_t na = 0, nb = 0;
    float *x = load(dir, a, &na), *y = load(dir, b, &nb);
    int bad = !x || !y || na != nb;
    double m = 0, rms = 0;
    for (size_t i = 0; !bad && i < na; i++) {
        m = fmax(m, fabs((double)x[i] - y[i]));
        rms += (double)y[i] * y[i];
    }
    double rel = bad ? INFINITY : m / sqrt(rms / (double)na);
    printf("%s %s: max |Δw| / rms(w) = %.3g (tolerance %.1g)\n", rel <= tol ? "ok  " : "FAIL", what, rel, tol);
    free(x);
    free(y);
    return rel <= tol ? 0 : 1;
}

int main(void)
{
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    int one = 1, two = 2;
    if (run_ranks_ex(1, 0, 1, has_gpus, dir, &one, NULL)) {
        printf("skipped: no usable GPU\n");
        rmdir(dir);
        return 77;
    }
    uint64_t s = 17;
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 32; t++)
            toks[i][t] = 3 + (int32_t)((tiny_rand(&s) + 1.0f) * 30.0f);
    dp_case alone = {RLP_COMM_AUTO, 0}, nccl1 = {RLP_COMM_NCCL, 0}, shm = {RLP_COMM_SHM, 0}, nccl2 = {RLP_COMM_NCCL, 1};
    /* the reference: one CUDA policy, no group, micro-batched at the rank cut */
    int fails = run_ranks_ex(0, 0, 1, dp_rank, dir, &alone, NULL);
    /* the CPU emulator of the CUDA module (cuda_data_parallel_emulated) has no NCCL */
    const char *no_nccl = getenv("RLPOST_TEST_NO_NCCL");
    int nccl = !(no_nccl && *no_nccl == '1');
    /* NCCL with one rank: the group is an identity, the weights the reference's bits */
    if (nccl) {
        fails += run_ranks_ex(1, 0, 1, dp_rank, dir, &nccl1, NULL);
        fails += compare(dir, "w1_r0", "w0_r0", 0.0, "NCCL group of one vs no group (bit-identical)");
    }
    /* two ranks on one GPU over SHM, device buffers staged through host memory */
    fails += run_ranks(2, dp_rank, dir, &shm);
    fails += compare(dir, "w2_r0", "w2_r1", 0.0, "SHM ranks on one GPU against each other (bit-identical)");
    fails += compare(dir, "w2_r0", "w0_r0", 1e-5, "2 SHM ranks on one GPU vs one process");
    if (nccl && run_ranks_ex(1, 0, 1, has_gpus, dir, &two, NULL) == 0) {
        fails += run_ranks(2, dp_rank, dir, &nccl2);
        fails += compare(dir, "w2_r0", "w2_r1", 0.0, "NCCL ranks on two GPUs against each other (bit-identical)");
        fails += compare(dir, "w2_r0", "w0_r0", 1e-5, "2 NCCL ranks vs one process");
    } else
        printf("two NCCL ranks need NCCL and two GPUs (not run)\n");
    const char *names[] = {"w0_r0", "w1_r0", "w2_r0", "w2_r1"};
    for (int i = 0; i < 4; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s.bin", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return fails ? 1 : 0;
}
