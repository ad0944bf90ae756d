/* Runs one function in `world` forked processes (the ranks of a process
 * group) and reports how many failed. The children must not use cmocka
 * asserts (a failing one would jump back into the child's copy of the
 * test runner): they return 0 or print why and return 1. Contexts are
 * created in the children only, never in the parent before a fork. */
#ifndef RLPOST_TESTS_RANK_RUNNER_H
#define RLPOST_TESTS_RANK_RUNNER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*rank_fn)(int rank, int world, const char *dir, void *arg);

#define RANK_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "rank check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            return 1;                                                                \
        }                                                                            \
    } while (0)

/* A fresh temporary folder for one run's rendezvous and result files. */
static inline void rank_tmpdir(char *buf, size_t n)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/rlpost-ranks-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(buf))
        buf[0] = '\0';
}

/* Forks ranks first..first+count-1 of `world`; returns the number of ranks
 * that failed (exit status ≠ 0 or killed). delay_us[r] (may be NULL) makes
 * rank r start late. */
static inline int run_ranks_ex(int world, int first, int count, rank_fn fn, const char *dir, void *arg,
                               const unsigned *delay_us)
{
    pid_t pids[64];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < count; i++) {
        int r = first + i;
        pids[i] = fork();
        if (pids[i] == 0) {
            if (delay_us && delay_us[r])
                usleep(delay_us[r]);
            int rc = fn(r, world, dir, arg);
            fflush(stderr);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0;
    for (int i = 0; i < count; i++) {
        int status = 0;
        if (pids[i] < 0 || waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    }
    return failed;
}

static inline int run_ranks(int world, rank_fn fn, const char *dir, void *arg)
{
    return run_ranks_ex(world, 0, world, fn, dir, arg, NULL);
}

#endif
