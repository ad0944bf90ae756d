/* Crash test of the replay buffer's durable spill: each round forks a child
 * whose two threads push groups into a spilled buffer and report every
 * push that returned RLP_OK on a pipe before going on; the parent kills it
 * with SIGKILL at a random moment, re-opens the spill, consumes some
 * groups, and checks that every reported push is present exactly once,
 * that nothing consumed ever comes back, and that the only unreported
 * groups are the at most one push per thread that was in flight (durable
 * but not yet reported). A low compaction threshold makes kills land in
 * compactions too, and on odd rounds a test hook writes records in pieces
 * (a slow disk) so that kills tear records. RLP_CRASH_ROUNDS (default 24) and RLP_CRASH_SEED set
 * the rounds and the seed of the kill delays. Also: a write that fails
 * (file size limit) stops the buffer and leaves the file as it was.
 * Every other group carries a provenance (a function of its id) that
 * every restart must give back with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "buffer/spill.h"
#include "core/mapfile.h"
#include "rlpost.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY UINT64_MAX
#define FAILED (UINT64_MAX - 1)
#define THREADS 2
#define MAX_GROUPS 200000

static char tmpdir[256], spill_path[512];

static uint64_t gid_of(int round, int thread, uint32_t i)
{
    return (uint64_t)round << 32 | (uint64_t)thread << 24 | i;
}

/* Where group gid "came from": every other group has a provenance that is a
 * function of its gid, so a restart that lost or mixed it up shows. */
static bool has_prov(uint64_t gid)
{
    return (gid & 1) == 0;
}

static rlp_provenance prov_of(uint64_t gid)
{
    return (rlp_provenance){.version = RLP_PROVENANCE_VERSION,
                            .prompt_index = gid ^ 0x5555,
                            .epoch = gid >> 24,
                            .position = gid & 0xffffff,
                            .sampling_seed = ~gid,
                            .batch = gid * 3};
}

/* The provenance of a trajectory of group gid is what the child set. */
static bool prov_ok(bool has, const rlp_provenance *p, uint64_t gid)
{
    if (!has_prov(gid))
        return !has;
    rlp_provenance want = prov_of(gid);
    return has && p->version == want.version && p->prompt_index == want.prompt_index && p->epoch == want.epoch &&
        p->position == want.position && p->sampling_seed == want.sampling_seed && p->batch == want.batch;
}

/* ---- the child ---------------------------------------------------------------- */

typedef struct child_thread {
    rlp_replay_buffer *buf;
    int fd, round, thread;
} child_thread;

static void *child_pusher(void *p)
{
    child_thread *c = p;
    char text[200];
    for (uint32_t i = 0;; i++) {
        uint64_t gid = gid_of(c->round, c->thread, i);
        rlp_batch *b;
        if (rlp_batch_create(&b))
            _exit(5);
        /* 1..3 samples with some text, so records vary in size */
        for (uint32_t j = 0; j <= i % 3; j++) {
            int32_t prompt[2] = {1, (int32_t)j};
            int32_t comp[3] = {4, 5, 6};
            float lp[3] = {-1, -2, -3};
            snprintf(text, sizeof text, "group %llu sample %u: the quick brown fox jumps over the lazy dog",
                     (unsigned long long)gid, j);
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = gid, .prompt_tokens = prompt,
                                .n_prompt_tokens = 2, .completion_tokens = comp, .logprobs = lp,
                                .n_completion_tokens = 3, .completion_text = text, .policy_version = 0,
                                .finish_reason = RLP_FINISH_STOP, .temperature = 1, .reward = 1, .valid = 1,
                                .sample_index = j};
            if (rlp_batch_append(b, &t))
                _exit(6);
        }
        rlp_provenance p = prov_of(gid);
        if (has_prov(gid) && rlp_batch_set_group_provenance(b, gid, &p))
            _exit(9);
        if (rlp_replay_buffer_push(c->buf, b) != RLP_OK) {
            uint64_t f = FAILED;
            (void)!write(c->fd, &f, sizeof f);
            _exit(7);
        }
        rlp_batch_free(b);
        /* only now is the push known to have succeeded */
        if (write(c->fd, &gid, sizeof gid) != sizeof gid)
            _exit(8);
    }
    return NULL;
}

static void child_main(int fd, int round)
{
    /* every other round, a slow disk: records go out in pieces, so the
     * kill often lands inside one and the restart must cut a torn tail */
    if (round % 2) {
        rlpi_spill_test.chunk = 64;
        rlpi_spill_test.delay_us = 300;
    }
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = spill_path;
    o.max_staleness = RLP_STALENESS_UNBOUNDED;
    o.compact_bytes = 16384;
    rlp_replay_buffer *buf;
    if (rlp_replay_buffer_create(&buf, &o) != RLP_OK) {
        fprintf(stderr, "child: %s\n", rlp_error_last());
        uint64_t f = FAILED;
        (void)!write(fd, &f, sizeof f);
        _exit(3);
    }
    uint64_t r = READY;
    if (write(fd, &r, sizeof r) != sizeof r)
        _exit(4);
    pthread_t th[THREADS];
    child_thread ct[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ct[i] = (child_thread){buf, fd, round, i};
        pthread_create(&th[i], NULL, child_pusher, &ct[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    _exit(0);
}

/* ---- the parent ---------------------------------------------------------------- */

/* A set of gids as a sorted array (small enough to rebuild). */
typedef struct gid_set {
    uint64_t *v;
    size_t n;
} gid_set;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void set_add(gid_set *s, uint64_t g)
{
    s->v = realloc(s->v, (s->n + 1) * sizeof *s->v);
    assert_non_null(s->v);
    s->v[s->n++] = g;
}

static void set_sort(gid_set *s)
{
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
}

static bool set_has(const gid_set *s, uint64_t g)
{
    return s->n && bsearch(&g, s->v, s->n, sizeof g, cmp_u64) != NULL;
}

static bool read_u64(int fd, uint64_t *v, int timeout_ms)
{
    size_t got = 0;
    while (got < sizeof *v) {
        struct pollfd p = {fd, POLLIN, 0};
        if (timeout_ms >= 0 && poll(&p, 1, timeout_ms) <= 0)
            return false;
        ssize_t n = read(fd, (char *)v + got, sizeof *v - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The groups in the spill file right now, through the buffer's own reader. */
static void spill_contents(gid_set *out)
{
    rlpi_mapped_file m;
    assert_int_equal(rlpi_map_file(spill_path, &m), RLP_OK);
    rlpi_spill_scan scan;
    assert_int_equal(rlpi_spill_scan_image(m.data, m.size, spill_path, &scan), RLP_OK);
    assert_int_equal(scan.torn, 0); /* the buffer that opened it cut any torn tail */
    for (size_t i = 0; i < scan.n_groups; i++) {
        const rlpi_group *g = scan.groups[i];
        for (size_t k = 0; k < g->n; k++)
            assert_true(prov_ok(g->trajs[k].has_provenance, &g->trajs[k].provenance, g->trajs[0].group_id));
        set_add(out, g->trajs[0].group_id);
    }
    rlpi_spill_scan_free(&scan);
    rlpi_unmap_file(&m);
}

static int count_leftovers(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void test_kill9_rounds(void **state)
{
    (void)state;
    int rounds = getenv("RLP_CRASH_ROUNDS") ? atoi(getenv("RLP_CRASH_ROUNDS")) : 24;
    uint64_t seed = getenv("RLP_CRASH_SEED") ? strtoull(getenv("RLP_CRASH_SEED"), NULL, 0) : 0x5eedc0ffee;
    uint64_t rng = seed | 1;
    gid_set known = {0};    /* pushes known to have succeeded (reported, or found durable) */
    gid_set consumed = {0}; /* taken by the parent's pulls */
    uint64_t total_reported = 0, torn_rounds = 0, extras = 0, compactions = 0;
    unlink(spill_path);
    /* Past the planned rounds it goes on (up to 8 times as many) until both
     * paths were taken: on a loaded machine the pushers fsync slowly and a
     * kill 1-40 ms in may find few pushes reported; more rounds, not a
     * looser check, keep what the test covers. */
    int round = 0;
    for (; round < rounds || (round < 8 * rounds && !(total_reported > 100 && torn_rounds > 0)); round++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_main(fds[1], round);
        }
        close(fds[1]);
        uint64_t v;
        assert_true(read_u64(fds[0], &v, 30000));
        assert_true(v == READY);
        /* a random moment: 1..40 ms into the pushing */
        long delay_us = 1000 + (long)(rng_next(&rng) % 39000);
        usleep((useconds_t)delay_us);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        /* every success the child reported before it died */
        uint32_t last[THREADS];
        bool any[THREADS] = {false};
        uint64_t n_round = 0;
        while (read_u64(fds[0], &v, -1)) {
            assert_true(v != FAILED);
            int th = (int)(v >> 24 & 0xff);
            uint32_t i = (uint32_t)(v & 0xffffff);
            assert_true(th < THREADS && (v >> 32) == (uint64_t)round);
            assert_true(!any[th] || i == last[th] + 1); /* each thread reports in order */
            any[th] = true;
            last[th] = i;
            set_add(&known, v);
            n_round++;
        }
        close(fds[0]);
        total_reported += n_round;
        set_sort(&known);

        /* restart: the buffer re-reads the spill */
        rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
        o.spill_path = spill_path;
        o.max_staleness = RLP_STALENESS_UNBOUNDED;
        o.compact_bytes = 16384;
        rlp_replay_buffer *buf;
        assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
        assert_int_equal(count_leftovers(), 0);
        rlp_buffer_stats s;
        assert_int_equal(rlp_replay_buffer_stats(&s, buf), RLP_OK);
        torn_rounds += s.torn_bytes > 0;
        uint64_t size = s.size;
        /* consume between half and all of it */
        uint64_t take = size ? size / 2 + rng_next(&rng) % (size - size / 2 + 1) : 0;
        gid_set here = {0}, taken = {0}, found = {0}; /* what this restart saw; consumed; found unreported */
        for (uint64_t k = 0; k < take; k++) {
            rlp_batch *out;
            assert_int_equal(rlp_replay_buffer_pull(&out, buf, 1, 0, 0), RLP_OK);
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            size_t n_out;
            assert_int_equal(rlp_batch_size(&n_out, out), RLP_OK);
            for (size_t j = n_out; j-- > 0;) { /* every sample; t ends as the first */
                assert_int_equal(rlp_batch_get(&t, out, j), RLP_OK);
                assert_true(prov_ok(t.has_provenance, &t.provenance, t.group_id));
            }
            set_add(&here, t.group_id);
            set_add(&taken, t.group_id);
            rlp_batch_free(out);
        }
        assert_int_equal(rlp_replay_buffer_stats(&s, buf), RLP_OK);
        compactions += s.compactions;
        rlp_replay_buffer_free(buf);
        spill_contents(&here);
        assert_int_equal(here.n, size);
        set_sort(&here);
        for (size_t i = 1; i < here.n; i++)
            assert_true(here.v[i] != here.v[i - 1]); /* exactly once */
        for (size_t i = 0; i < here.n; i++) {
            uint64_t g = here.v[i];
            assert_false(set_has(&consumed, g)); /* nothing consumed comes back */
            if (set_has(&known, g))
                continue;
            /* beyond the reported pushes, only the push each thread had in
             * flight when it was killed (durable, not yet reported) */
            int th = (int)(g >> 24 & 0xff);
            uint32_t idx = (uint32_t)(g & 0xffffff);
            assert_true((g >> 32) == (uint64_t)round && th < THREADS);
            assert_true(idx == (any[th] ? last[th] + 1 : 0));
            set_add(&found, g);
        }
        extras += found.n;
        for (size_t i = 0; i < found.n; i++)
            set_add(&known, found.v[i]);
        set_sort(&known);
        /* every push known to have succeeded is here, unless consumed before */
        for (size_t i = 0; i < known.n; i++)
            assert_true(set_has(&here, known.v[i]) != set_has(&consumed, known.v[i]));
        for (size_t i = 0; i < taken.n; i++)
            set_add(&consumed, taken.v[i]);
        set_sort(&consumed);
        free(here.v);
        free(taken.v);
        free(found.v);
    }
    /* the end: everything known and not consumed, once */
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = spill_path;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    rlp_buffer_stats s;
    assert_int_equal(rlp_replay_buffer_stats(&s, buf), RLP_OK);
    assert_int_equal(s.size, known.n - consumed.n);
    rlp_replay_buffer_free(buf);
    print_message("kill -9: %d rounds (seed %#llx), %llu pushes reported, %llu durable but unreported, %llu "
                  "consumed, %llu restarts cut a torn tail, %llu compactions by the restarts\n",
                  round, (unsigned long long)seed, (unsigned long long)total_reported, (unsigned long long)extras,
                  (unsigned long long)consumed.n, (unsigned long long)torn_rounds, (unsigned long long)compactions);
    assert_true(rounds < 20 || (total_reported > 100 && torn_rounds > 0)); /* both paths were taken */
    free(known.v);
    free(consumed.v);
    unlink(spill_path);
}

/* One group of `n_trajs` trajectories with long texts. */
static rlp_batch *big_group(uint64_t gid, int n_trajs)
{
    rlp_batch *b;
    if (rlp_batch_create(&b))
        return NULL;
    static char text[4000];
    memset(text, 'x', sizeof text - 1);
    for (int j = 0; j < n_trajs; j++) {
        int32_t prompt[1] = {1};
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = gid, .prompt_tokens = prompt,
                            .n_prompt_tokens = 1, .completion_text = text, .finish_reason = RLP_FINISH_STOP,
                            .temperature = 1, .reward = 0, .valid = 1};
        if (rlp_batch_append(b, &t))
            return NULL;
    }
    return b;
}

/* In a child (the size limit is per process): two pushes succeed, then the
 * file may not grow; exit 0 when every call answered as it should. */
static int write_failure_child(void)
{
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = spill_path;
    rlp_replay_buffer *buf;
    if (rlp_replay_buffer_create(&buf, &o))
        return 10;
    for (uint64_t g = 1; g <= 2; g++) {
        rlp_batch *b = big_group(g, 1);
        if (!b || rlp_replay_buffer_push(buf, b))
            return 11;
        rlp_batch_free(b);
    }
    struct stat st;
    stat(spill_path, &st);
    signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead */
    struct rlimit lim = {(rlim_t)st.st_size + 1000, (rlim_t)st.st_size + 1000};
    if (setrlimit(RLIMIT_FSIZE, &lim))
        return 12;
    rlp_batch *b = big_group(3, 3); /* ~12 KB: does not fit */
    if (rlp_replay_buffer_push(buf, b) != RLP_E_IO)
        return 13;
    if (!strstr(rlp_error_last(), "append failed"))
        return 14;
    size_t n;
    rlp_batch_size(&n, b);
    if (n != 3) /* unchanged on failure */
        return 15;
    rlp_batch_free(b);
    struct stat after;
    stat(spill_path, &after);
    if (after.st_size != st.st_size) /* cut back: no partial record left */
        return 16;
    b = big_group(4, 1);
    if (rlp_replay_buffer_push(buf, b) != RLP_E_IO) /* the buffer stopped */
        return 17;
    rlp_batch_free(b);
    rlp_batch *out;
    if (rlp_replay_buffer_pull(&out, buf, 1, 0, 0) != RLP_E_IO)
        return 18;
    rlp_replay_buffer_free(buf);
    return 0;
}

static void test_write_failure(void **state)
{
    (void)state;
    unlink(spill_path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(write_failure_child());
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the file holds exactly the two pushes that succeeded */
    rlp_buffer_options o = RLP_BUFFER_OPTIONS_INIT;
    o.spill_path = spill_path;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &o), RLP_OK);
    rlp_buffer_stats s;
    assert_int_equal(rlp_replay_buffer_stats(&s, buf), RLP_OK);
    assert_int_equal(s.size, 2);
    assert_int_equal(s.torn_bytes, 0);
    rlp_replay_buffer_free(buf);
    unlink(spill_path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "%s/rlp_crash_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(spill_path, sizeof spill_path, "%s/buffer.spill", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_rounds),
        cmocka_unit_test(test_write_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
