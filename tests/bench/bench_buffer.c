/* Replay-buffer throughput on the public API: groups per second through a
 * memory buffer with P producers and C consumers (each group 4 small
 * trajectories, as GRPO with n = 4 and 16-token completions), durable
 * pushes per second through the spill with 1 and 8 producers (what group
 * commit buys: 1 producer pays one fdatasync per push), and the time to
 * reopen a spill of N groups. Baselines are in the same run: a single
 * producer-consumer pair, and one fdatasync per push. Prints one JSON line
 * per measurement; never asserts a time. Usage: bench_buffer [groups]. */
#include "rlpost.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SAMPLES 4
#define TOKENS 16

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rlp_batch *group(uint64_t gid)
{
    rlp_batch *b;
    if (rlp_batch_create(&b))
        abort();
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8}, comp[TOKENS];
    float lp[TOKENS];
    for (int i = 0; i < TOKENS; i++) {
        comp[i] = i + 10;
        lp[i] = -0.5f;
    }
    for (uint32_t j = 0; j < SAMPLES; j++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = gid, .prompt_tokens = prompt,
                            .n_prompt_tokens = 8, .completion_tokens = comp, .logprobs = lp,
                            .n_completion_tokens = TOKENS, .completion_text = "some completion text",
                            .finish_reason = RLP_FINISH_STOP, .temperature = 1, .reward = 1, .valid = 1,
                            .sample_index = j};
        if (rlp_batch_append(b, &t))
            abort();
    }
    return b;
}

typedef struct job {
    rlp_replay_buffer *buf;
    uint64_t base, n;
    size_t pull;
} job;

static void *producer(void *arg)
{
    job *j = arg;
    for (uint64_t i = 0; i < j->n; i++) {
        rlp_batch *b = group(j->base + i);
        if (rlp_replay_buffer_push(j->buf, b))
            abort();
        rlp_batch_free(b);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    job *j = arg;
    for (;;) {
        rlp_batch *out;
        int rc = rlp_replay_buffer_pull(&out, j->buf, j->pull, 0, RLP_WAIT_FOREVER);
        if (rc == RLP_E_CLOSED)
            return NULL;
        if (rc)
            abort();
        rlp_batch_free(out);
    }
}

/* groups/s moving n groups through P producers and C consumers */
static double memory_run(int P, int C, uint64_t n)
{
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.capacity = 1024;
    rlp_replay_buffer *buf;
    if (rlp_replay_buffer_create(&buf, &o))
        abort();
    pthread_t pt[16], ct[16];
    job pj[16], cj[16];
    double t0 = now();
    for (int i = 0; i < C; i++) {
        cj[i] = (job){buf, 0, 0, 1};
        pthread_create(&ct[i], NULL, consumer, &cj[i]);
    }
    for (int i = 0; i < P; i++) {
        pj[i] = (job){buf, (uint64_t)i * n, n / (uint64_t)P, 0};
        pthread_create(&pt[i], NULL, producer, &pj[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(pt[i], NULL);
    rlp_buffer_stats s;
    do {
        rlp_replay_buffer_stats(&s, buf);
    } while (s.size > 0 && usleep(100) == 0);
    double dt = now() - t0;
    rlp_replay_buffer_close(buf);
    for (int i = 0; i < C; i++)
        pthread_join(ct[i], NULL);
    rlp_replay_buffer_free(buf);
    return (double)(n / (uint64_t)P * (uint64_t)P) / dt;
}

/* durable pushes/s with P producers */
static double spill_run(const char *path, int P, uint64_t n, uint64_t *syncs)
{
    unlink(path);
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = path;
    rlp_replay_buffer *buf;
    if (rlp_replay_buffer_create(&buf, &o))
        abort();
    pthread_t pt[16];
    job pj[16];
    double t0 = now();
    for (int i = 0; i < P; i++) {
        pj[i] = (job){buf, (uint64_t)i * n, n / (uint64_t)P, 0};
        pthread_create(&pt[i], NULL, producer, &pj[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(pt[i], NULL);
    double dt = now() - t0;
    rlp_buffer_stats s;
    rlp_replay_buffer_stats(&s, buf);
    *syncs = s.spill_syncs;
    rlp_replay_buffer_free(buf);
    return (double)(n / (uint64_t)P * (uint64_t)P) / dt;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    static const int pc[][2] = {{1, 1}, {4, 3}, {8, 8}};
    for (size_t k = 0; k < sizeof pc / sizeof pc[0]; k++) {
        double best = 0;
        for (int r = 0; r < 3; r++) {
            double g = memory_run(pc[k][0], pc[k][1], n);
            best = g > best ? g : best;
        }
        printf("{\"bench\":\"buffer_memory\",\"producers\":%d,\"consumers\":%d,\"groups_per_s\":%.0f,"
               "\"trajectories_per_group\":%d}\n",
               pc[k][0], pc[k][1], best, SAMPLES);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/rlp_bench_spill_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    uint64_t spill_n = 2000;
    for (int P = 1; P <= 8; P *= 8) {
        uint64_t syncs;
        double g = spill_run(path, P, spill_n, &syncs);
        printf("{\"bench\":\"buffer_spill_push\",\"producers\":%d,\"durable_pushes_per_s\":%.0f,\"fdatasyncs\":%llu,"
               "\"pushes\":%llu}\n",
               P, g, (unsigned long long)syncs, (unsigned long long)spill_n);
    }
    double t0 = now();
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = path;
    rlp_replay_buffer *buf;
    if (rlp_replay_buffer_create(&buf, &o))
        abort();
    double dt = now() - t0;
    rlp_buffer_stats s;
    rlp_replay_buffer_stats(&s, buf);
    printf("{\"bench\":\"buffer_spill_reopen\",\"groups\":%llu,\"bytes\":%llu,\"seconds\":%.4f}\n",
           (unsigned long long)s.restored, (unsigned long long)s.spill_bytes, dt);
    rlp_replay_buffer_free(buf);
    unlink(path);
    return 0;
}
