/* Process-isolated rewards (rlp_reward_fn_create_isolated()) against a
 * hostile reward library (reward_crashy.c): a NULL dereference, abort(),
 * a stack overflow and _exit() cost only their own samples, each marked
 * with the signal or status, and the handle goes on scoring; a hang is
 * killed at its deadline; a library that always crashes fails the score
 * call once the restart cap is reached; workers die with their parent
 * and none is left a zombie. And the reason for all this: the same
 * library in-process ("thread" isolation) takes the process down.
 * A worker that sends malformed answers (fake_reward_worker.py) is
 * refused field by field.
 *   test_reward_isolated CRASHY_LIBRARY FAKE_WORKER */
#include <rlpost.h>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *crashy;
static const char *fake_worker; /* fake_reward_worker.py */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static rlp_batch *batch_of(const char *const *texts, size_t n)
{
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    static const int32_t toks[3] = {5, 7, 11};
    static const float lps[3] = {-1.0f, -1.0f, -1.0f};
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = 1 + i / 4;
        t.sample_index = (uint32_t)(i % 4);
        t.completion_tokens = toks;
        t.n_completion_tokens = 3;
        t.logprobs = lps;
        t.prompt_text = "p";
        t.completion_text = texts[i];
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    }
    return b;
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    return t;
}

static void expect_invalid(const rlp_batch *b, size_t i, const char *needle)
{
    rlp_trajectory t = get(b, i);
    if (t.valid || !t.error || !strstr(t.error, needle))
        fail_msg("sample %zu: valid %d, error '%s', expected '%s'", i, t.valid, t.error ? t.error : "(null)",
                 needle);
}

static rlp_reward_fn *isolated(uint32_t workers, uint32_t timeout_ms, uint32_t max_restarts, const char *opts_json)
{
    rlp_isolation_options o;
    assert_int_equal(rlp_isolation_options_init(&o, RLP_ISOLATION_OPTIONS_VERSION), RLP_OK);
    o.n_workers = workers;
    o.timeout_ms = timeout_ms;
    o.max_restarts = max_restarts;
    rlp_reward_fn *fn = NULL;
    int rc = rlp_reward_fn_create_isolated(&fn, crashy, opts_json, &o);
    if (rc != RLP_OK)
        fail_msg("create_isolated: %s", rlp_error_last());
    return fn;
}

/* No child of this process is left, running or zombie. */
static void expect_no_children(void)
{
    errno = 0;
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static void test_crashes_cost_only_their_samples(void **state)
{
    (void)state;
    const char *texts[] = {"fine", "segv", "abc", "abort", "recurse", "ok", "exit", "error", "nan"};
    size_t n = sizeof texts / sizeof *texts;
    rlp_reward_fn *fn = isolated(2, 20000, 20, NULL);
    assert_string_equal(rlp_reward_fn_name(fn), "isolated");
    for (int round = 0; round < 2; round++) { /* the restarted workers score the second round */
        rlp_batch *b = batch_of(texts, n);
        rlp_reward_stats st;
        memset(&st, 0, sizeof st);
        st.version = RLP_REWARD_STATS_VERSION;
        assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
        assert_true(get(b, 0).valid && get(b, 0).reward == 4.0f);
        assert_true(get(b, 2).valid && get(b, 2).reward == 3.0f);
        assert_true(get(b, 5).valid && get(b, 5).reward == 2.0f);
        expect_invalid(b, 1, "reward worker killed by SIGSEGV");
        expect_invalid(b, 3, "reward worker killed by SIGABRT");
        expect_invalid(b, 4, "reward worker killed by SIGSEGV"); /* stack overflow */
        expect_invalid(b, 6, "reward worker exited with status 3");
        expect_invalid(b, 7, "told to fail");
        expect_invalid(b, 8, "must be finite");
        assert_true(isnan(get(b, 1).reward));
        assert_int_equal(st.scored, n);
        assert_int_equal(st.valid, 3);
        assert_int_equal(st.invalid, 6);
        assert_int_equal(st.crashed, 4);
        assert_int_equal(st.errors, 1);
        assert_int_equal(st.nonfinite, 1);
        assert_int_equal(st.timeouts, 0);
        rlp_batch_free(b);
    }
    rlp_reward_fn_free(fn);
    expect_no_children();
}

/* A caller built against stats version 1 has no room for crashed: the
 * library must not write it. */
static void test_stats_version_1_is_not_overrun(void **state)
{
    (void)state;
    rlp_reward_fn *fn = isolated(1, 20000, 20, NULL);
    const char *texts[] = {"segv", "ok"};
    rlp_batch *b = batch_of(texts, 2);
    unsigned char mem[sizeof(rlp_reward_stats)];
    memset(mem, 0xAB, sizeof mem);
    rlp_reward_stats *st = (rlp_reward_stats *)(void *)mem;
    st->version = 1;
    assert_int_equal(rlp_reward_fn_score(fn, b, st), RLP_OK);
    assert_int_equal(st->invalid, 1);
    for (size_t i = offsetof(rlp_reward_stats, crashed); i < sizeof mem; i++)
        assert_int_equal(mem[i], 0xAB);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_hang_is_killed_at_deadline(void **state)
{
    (void)state;
    rlp_reward_fn *fn = isolated(1, 300, 20, NULL);
    const char *texts[] = {"hang", "after"};
    rlp_batch *b = batch_of(texts, 2);
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    double t0 = now_s();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    double took = now_s() - t0;
    expect_invalid(b, 0, "timed out after 300 ms (reward worker killed)");
    /* the one worker was killed and restarted for the next sample */
    assert_true(get(b, 1).valid && get(b, 1).reward == 5.0f);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.crashed, 0);
    assert_true(took < 10.0);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
    expect_no_children();
}

static void test_always_crashing_fails_the_call(void **state)
{
    (void)state;
    rlp_reward_fn *fn = isolated(1, 20000, 2, NULL);
    const char *texts[] = {"segv", "segv", "segv", "segv", "segv", "segv"};
    rlp_batch *b = batch_of(texts, 6);
    rlp_trajectory before = get(b, 0);
    int rc = rlp_reward_fn_score(fn, b, NULL);
    assert_int_equal(rc, RLP_E_CALLBACK);
    assert_non_null(strstr(rlp_error_last(), "more than 2 restarts within 60 s"));
    assert_non_null(strstr(rlp_error_last(), "killed by SIGSEGV"));
    /* an error leaves the batch as it was */
    rlp_trajectory after = get(b, 0);
    assert_int_equal(after.valid, before.valid);
    assert_true(after.reward == before.reward && !after.error);
    /* and the handle stays broken: no spinning on later calls */
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_E_CALLBACK);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
    expect_no_children();
}

static void test_token_scores_and_reference(void **state)
{
    (void)state;
    rlp_isolation_options o = RLP_ISOLATION_OPTIONS_INIT;
    o.n_workers = 1;
    o.batch_size = 4; /* several samples per request */
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, crashy, NULL, &o), RLP_OK);
    const char *texts[] = {"tokens", "x", "tokens", "yy", "tokens"};
    rlp_batch *b = batch_of(texts, 5);
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_OK);
    for (size_t i = 0; i < 5; i += 2) {
        rlp_trajectory t = get(b, i);
        assert_true(t.valid && t.reward == 2.0f);
        assert_non_null(t.token_rewards);
        assert_true(t.token_rewards[0] == 5.0f && t.token_rewards[1] == 7.0f && t.token_rewards[2] == 11.0f);
    }
    assert_true(get(b, 3).valid && get(b, 3).reward == 2.0f);
    rlp_batch_free(b);
    /* an explicit reference travels to the worker's handle */
    rlp_reward_request req;
    memset(&req, 0, sizeof req);
    req.version = RLP_REWARD_REQUEST_VERSION;
    req.completion_text = "ref";
    req.completion_len = 3;
    req.reference = "42.5";
    rlp_reward_result res;
    assert_int_equal(rlp_reward_fn_score_one(&res, fn, &req), RLP_OK);
    assert_true(res.valid && res.score == 42.5);
    rlp_reward_fn_free(fn);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    rlp_reward_fn *fn = NULL;
    rlp_isolation_options o = RLP_ISOLATION_OPTIONS_INIT;
    assert_int_equal(rlp_reward_fn_create_isolated(NULL, crashy, NULL, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, NULL, NULL, &o), RLP_E_INVALID_ARG);
    o.n_workers = 65;
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, crashy, NULL, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "n_workers"));
    o.n_workers = 1;
    o.version = 99;
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, crashy, NULL, &o), RLP_E_INVALID_ARG);
    o.version = RLP_ISOLATION_OPTIONS_VERSION;
    o.worker_path = "/nonexistent/rlpost-reward-worker";
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, crashy, NULL, &o), RLP_E_NOT_FOUND);
    o.worker_path = NULL;
    /* a library that does not load fails creation with dlopen's message */
    assert_int_equal(rlp_reward_fn_create_isolated(&fn, "/nonexistent/reward.so", NULL, &o), RLP_E_CALLBACK);
    assert_non_null(strstr(rlp_error_last(), "/nonexistent/reward.so"));
    assert_null(fn);
    assert_int_equal(rlp_isolation_options_init(NULL, RLP_ISOLATION_OPTIONS_VERSION), RLP_E_INVALID_ARG);
    expect_no_children();
}

/* The worker of a parent that dies (SIGKILL, no clean-up) exits. */
static void test_worker_dies_with_parent(void **state)
{
    (void)state;
    /* The orphaned worker is re-parented to us, not to the machine's init:
     * a container whose PID 1 never reaps leaves a dead worker a zombie,
     * and kill(pid, 0) succeeds on a zombie (CI failed on exactly that).
     * As subreaper we reap it and see how it ended. */
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    char pid_file[] = "/tmp/rlpost-iso-pid-XXXXXX";
    int fd = mkstemp(pid_file);
    assert_true(fd >= 0);
    close(fd);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char opts[128];
        snprintf(opts, sizeof opts, "{\"pid_file\":\"%s\"}", pid_file);
        rlp_isolation_options o = RLP_ISOLATION_OPTIONS_INIT;
        o.n_workers = 1;
        o.timeout_ms = 0;
        rlp_reward_fn *fn = NULL;
        if (rlp_reward_fn_create_isolated(&fn, crashy, opts, &o) != RLP_OK)
            _exit(2);
        const char *texts[] = {"hang"};
        rlp_batch *b = NULL;
        rlp_batch_create(&b);
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.completion_text = texts[0];
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        rlp_batch_append(b, &t);
        rlp_reward_fn_score(fn, b, NULL); /* never returns: no deadline */
        _exit(3);
    }
    long worker = 0;
    for (int i = 0; i < 500 && worker == 0; i++) {
        FILE *f = fopen(pid_file, "r");
        if (f) {
            if (fscanf(f, "%ld", &worker) != 1)
                worker = 0;
            fclose(f);
        }
        usleep(10000);
    }
    assert_true(worker > 0);
    usleep(100000); /* it is in the hanging call by now */
    assert_int_equal(kill((pid_t)worker, 0), 0);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    int gone = 0;
    /* It checks every 200 ms; 10 s leaves room for a loaded sanitizer run. */
    for (int i = 0; i < 1000 && !gone; i++) {
        pid_t r = waitpid((pid_t)worker, &status, WNOHANG);
        gone = r == (pid_t)worker || (r < 0 && errno == ECHILD &&
                                      kill((pid_t)worker, 0) != 0 && errno == ESRCH);
        if (!gone)
            usleep(10000);
    }
    unlink(pid_file);
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    assert_true(gone);
}

/* A worker that answers with lies is killed, its samples are invalid,
 * and nothing it claims is read past what it sent. */
static void test_malformed_answers_are_refused(void **state)
{
    (void)state;
    static const char *const modes[] = {"count", "huge", "kind", "reason", "tokens"};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        setenv("RLPOST_FAKE_WORKER_MODE", modes[m], 1);
        rlp_isolation_options o = RLP_ISOLATION_OPTIONS_INIT;
        o.n_workers = 1;
        o.worker_path = fake_worker;
        rlp_reward_fn *fn = NULL;
        if (rlp_reward_fn_create_isolated(&fn, crashy, NULL, &o) != RLP_OK)
            fail_msg("%s: %s", modes[m], rlp_error_last());
        rlp_batch *b = NULL;
        assert_int_equal(rlp_batch_create(&b), RLP_OK);
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.completion_text = "no tokens";
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
        rlp_reward_stats st;
        memset(&st, 0, sizeof st);
        st.version = RLP_REWARD_STATS_VERSION;
        assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
        expect_invalid(b, 0, "reward worker sent a malformed answer");
        assert_int_equal(st.errors, 1);
        rlp_batch_free(b);
        rlp_reward_fn_free(fn);
    }
    unsetenv("RLPOST_FAKE_WORKER_MODE");
    expect_no_children();
}

/* A worker keeps none of the host's descriptors open: the write end of
 * a pipe the host closes gives its reader an end of file at once. */
static void test_host_descriptors_are_not_inherited(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer's posix_spawn interceptor drops the close-from file
     * action (the worker keeps every descriptor): a limit of that build */
    skip();
#endif
    int p[2];
    assert_int_equal(pipe(p), 0); /* not close-on-exec, as a careless host makes it */
    rlp_reward_fn *fn = isolated(1, 20000, 20, NULL);
    close(p[1]);
    struct pollfd pfd = {p[0], POLLIN, 0};
    assert_int_equal(poll(&pfd, 1, 2000), 1);
    char c;
    assert_int_equal(read(p[0], &c, 1), 0);
    close(p[0]);
    rlp_reward_fn_free(fn);
}

/* Why isolation exists: in-process, the same crash ends the process. */
static void test_thread_isolation_dies(void **state)
{
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        /* the test framework's handlers (and a sanitizer's) would turn the
         * signal into a report: a host without them dies of the signal */
        signal(SIGSEGV, SIG_DFL);
        void *h = dlopen(crashy, RTLD_NOW | RTLD_LOCAL);
        int (*entry)(rlp_reward_fn **, const char *);
        *(void **)&entry = h ? dlsym(h, "rlpost_reward_create") : NULL;
        rlp_reward_fn *fn = NULL;
        if (!entry || entry(&fn, NULL) != RLP_OK)
            _exit(2);
        const char *texts[] = {"segv"};
        rlp_batch *b = batch_of(texts, 1);
        rlp_reward_fn_score(fn, b, NULL);
        _exit(0); /* not reached */
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSEGV);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CRASHY_LIBRARY FAKE_WORKER\n", argv[0]);
        return 1;
    }
    crashy = argv[1];
    fake_worker = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_isolation_dies),
        cmocka_unit_test(test_crashes_cost_only_their_samples),
        cmocka_unit_test(test_stats_version_1_is_not_overrun),
        cmocka_unit_test(test_hang_is_killed_at_deadline),
        cmocka_unit_test(test_always_crashing_fails_the_call),
        cmocka_unit_test(test_token_scores_and_reference),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_malformed_answers_are_refused),
        cmocka_unit_test(test_host_descriptors_are_not_inherited),
        cmocka_unit_test(test_worker_dies_with_parent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
