/* The SHM process group's all-reduce on a gradient-sized buffer
 * (SmolLM2-135M: 134.5M fp32 values, 538 MB) with W forked ranks, against
 * the baseline of one memcpy of the same buffer measured in the same run
 * (the all-reduce moves each byte in and out of shared memory and reads the
 * other ranks' slots, so a few memcpy times is the floor on one machine).
 * Also the latency of a barrier and of an 8-value all-reduce (the step's
 * statistics). Prints one JSON line per rank-0 measurement; never asserts a
 * time. Usage: bench_comm [ranks] [millions of floats] [reps]. */
#include "backend/context.h"
#include "dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int rank_main(int rank, int world, size_t n, int reps, const char *rdv)
{
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    rlp_context *ctx;
    if (rlp_context_create(&ctx, &co))
        return 1;
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    o.transport = RLP_COMM_SHM;
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    rlp_comm *comm;
    if (rlp_comm_create(&comm, ctx, &o)) {
        fprintf(stderr, "rank %d: %s\n", rank, rlp_error_last());
        return 1;
    }
    rlpi_buffer *g, *copy;
    if (rlpi_buffer_alloc(ctx->backend, n * 4, &g) || rlpi_buffer_alloc(ctx->backend, n * 4, &copy))
        return 1;
    float *h = rlpi_buffer_host(g), *c = rlpi_buffer_host(copy);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 1000) * 1e-3f;
    memset(c, 0, n * 4);
    double best_memcpy = 1e30, best_ar = 1e30, t;
    for (int r = 0; r < reps; r++) {
        t = now();
        memcpy(c, h, n * 4);
        t = now() - t;
        best_memcpy = t < best_memcpy ? t : best_memcpy;
        rlp_comm_barrier(comm);
        t = now();
        if (rlpi_comm_all_reduce_buffer(comm, g, 0, n, RLP_REDUCE_SUM))
            return 1;
        t = now() - t;
        best_ar = t < best_ar ? t : best_ar;
    }
    double lat_barrier = 1e30, lat_small = 1e30, v[8] = {0};
    for (int r = 0; r < 200; r++) {
        t = now();
        rlp_comm_barrier(comm);
        t = now() - t;
        lat_barrier = t < lat_barrier ? t : lat_barrier;
        t = now();
        rlp_comm_all_reduce(comm, v, 8, RLP_REDUCE_SUM);
        t = now() - t;
        lat_small = t < lat_small ? t : lat_small;
    }
    if (rank == 0) {
        double gb = (double)n * 4 / 1e9;
        printf("{\"bench\": \"comm_all_reduce\", \"ranks\": %d, \"floats\": %zu, \"seconds\": %.4f, \"GB_per_s\": %.2f, "
               "\"memcpy_seconds\": %.4f, \"memcpy_GB_per_s\": %.2f, \"ratio_to_memcpy\": %.2f}\n",
               world, n, best_ar, gb / best_ar, best_memcpy, gb / best_memcpy, best_ar / best_memcpy);
        printf("{\"bench\": \"comm_latency\", \"ranks\": %d, \"barrier_us\": %.1f, \"all_reduce_8_us\": %.1f}\n", world,
               lat_barrier * 1e6, lat_small * 1e6);
        fflush(stdout);
    }
    rlpi_buffer_free(g);
    rlpi_buffer_free(copy);
    rlp_comm_free(comm);
    rlp_context_free(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int world = argc > 1 ? atoi(argv[1]) : 2;
    size_t n = (size_t)((argc > 2 ? atof(argv[2]) : 134.5) * 1e6);
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (world < 1 || world > 64 || n == 0 || reps < 1) {
        fprintf(stderr, "usage: bench_comm [ranks 1-64] [millions of floats] [reps]\n");
        return 2;
    }
    char rdv[256];
    snprintf(rdv, sizeof rdv, "/tmp/rlpost-bench-comm-%ld.json", (long)getpid());
    fflush(stdout);
    pid_t pids[64];
    for (int r = 0; r < world; r++)
        if ((pids[r] = fork()) == 0)
            _exit(rank_main(r, world, n, reps, rdv));
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    return bad;
}
