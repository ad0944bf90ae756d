/* `rlpost rollout-worker CONFIG.json [--set k=v]... [--batches N]`: a
 * rollout worker in a process of its own (or on another machine sharing
 * the folders), for a trainer started with the same configuration and
 * rollout.inbox: it loads the model, task and reward of the configuration,
 * reads each version the trainer publishes in sync.weights_dir (default
 * OUTPUT/weights), and writes its scored groups as batch files into
 * rollout.inbox (rlp_rollout_worker with outbox_dir, docs/trainer.md). It
 * gates by its own synchronizer (η = sync.staleness); several workers
 * should differ in seed (--set seed=N) so that they draw other prompts.
 * Runs until Ctrl-C / SIGTERM or N batches; prints a summary line. */
#define _GNU_SOURCE 1
#include "cli_args.h"
#include "commands.h"
#include "train.h"
#include "train_config.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

int cmd_rollout_worker(int argc, char **argv)
{
    /* from the start: a stop that comes during setup still ends cleanly */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    run rr = {.overlap = -1, .no_trainer = 1}, *r = &rr;
    const char *batches_arg;
    int rc = train_parse_args(argc, argv, "rollout-worker", "--batches", r, &batches_arg);
    if (rc)
        return rc == TRAIN_ARGS_HELP ? EXIT_SUCCESS : rc;
    char *end = NULL;
    long long batches = batches_arg ? strtoll(batches_arg, &end, 10) : 0;
    if (batches_arg && (*end || batches < 1)) {
        fprintf(stderr, "rlpost rollout-worker: --batches: '%s' is not a count ≥ 1\n", batches_arg);
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    const char *inbox = cfg_str(r->cfg, "rollout.inbox");
    if (!inbox || strcmp(cfg_str(r->cfg, "sync.mode"), "async")) {
        fprintf(stderr, "rlpost rollout-worker: needs the trainer's configuration with sync.mode \"async\" and "
                "rollout.inbox (the folder the trainer takes the batches from)\n");
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    fmt(r->out, sizeof r->out, "%s", cfg_str(r->cfg, "output"));
    if ((rc = train_setup(r, cfg_str(r->cfg, "model"), 0)) != 0) {
        fprintf(stderr, "rlpost rollout-worker: %s\n", r->err);
        train_teardown(r);
        return rc;
    }
    char wdir[PATH_MAX];
    const char *wd = cfg_str(r->cfg, "sync.weights_dir");
    if (wd)
        fmt(wdir, sizeof wdir, "%s", wd);
    else
        fmt(wdir, sizeof wdir, "%s/weights", r->out);
    if (train_mkdir_p(wdir) || train_mkdir_p(inbox)) {
        fprintf(stderr, "rlpost rollout-worker: cannot create '%s' or '%s': %s\n", wdir, inbox, strerror(errno));
        train_teardown(r);
        return 1;
    }
    const uint32_t G = (uint32_t)cfg_int(r->cfg, "prompts_per_step");
    rlp_rollout_options eo = RLP_ROLLOUT_OPTIONS_INIT;
    long long mb = (long long)G * cfg_int(r->cfg, "group_size");
    eo.max_batch = (uint32_t)(mb < 256 ? mb : 256);
    eo.max_seq_len = (uint32_t)cfg_int(r->cfg, "rollout.max_seq_len");
    const char *rw = cfg_str(r->cfg, "rollout.weights");
    eo.weights = cli_rollout_weights(rw); /* checked by train_setup */
    eo.share_weights = 0; /* its own copy: each pull loads the trainer's newer version into it */
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.transport = RLP_TRANSPORT_FILE;
    so.dir = wdir;
    so.max_staleness = (uint32_t)cfg_int(r->cfg, "sync.staleness");
    so.batch_groups = G;
    rlp_rollout_engine *engine = NULL;
    rlp_synchronizer *sync = NULL;
    rlp_rollout_worker *w = NULL;
    rlp_rollout_worker_options wo;
    rlp_rollout_worker_options_init(&wo, RLP_ROLLOUT_WORKER_OPTIONS_VERSION);
    wo.prompts_per_batch = G;
    wo.seed = (uint64_t)cfg_int(r->cfg, "seed");
    wo.sampling = r->sampling;
    wo.tokenizer = r->ext_tok;
    wo.outbox_dir = inbox;
    train_multiturn(r, &wo.multiturn);
    if ((rc = rlp_rollout_engine_create(&engine, r->policy, &eo)) || (rc = rlp_synchronizer_create(&sync, &so)) ||
        (rc = rlp_rollout_worker_create(&w, engine, r->task, r->reward, sync, NULL, &wo)) ||
        (rc = rlp_rollout_worker_start(w))) {
        fprintf(stderr, "rlpost rollout-worker: %s\n", rlp_error_last());
        rlp_rollout_worker_free(w);
        rlp_synchronizer_free(sync);
        rlp_rollout_engine_free(engine);
        train_teardown(r);
        return rc == RLP_E_INVALID_ARG ? EXIT_USAGE : 1;
    }
    fprintf(stderr, "rollout-worker: %u groups a batch into %s, versions from %s%s\n", G, inbox, wdir,
            batches ? "" : " (Ctrl-C stops)");
    rlp_rollout_worker_stats st = {.version = 1};
    const char *why = NULL;
    int failed = 0;
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rlp_rollout_worker_stats_get(&st, w);
        if ((failed = rlp_rollout_worker_error(w, &why) != RLP_OK) || stop_requested ||
            (batches && (long long)st.batches >= batches) || !st.running)
            break;
    }
    rlp_rollout_worker_stop(w);
    rlp_rollout_worker_stats_get(&st, w);
    if (failed)
        fprintf(stderr, "rlpost rollout-worker: %s\n", why);
    uint64_t version = 0;
    rlp_rollout_engine_version(&version, engine);
    printf("{\"batches\": %llu, \"groups\": %llu, \"tokens\": %llu, \"version\": %llu, \"generate_seconds\": %.3f, "
           "\"idle_seconds\": %.3f}\n", (unsigned long long)st.batches, (unsigned long long)st.groups_pushed,
           (unsigned long long)st.tokens, (unsigned long long)version, st.generate_seconds, st.idle_seconds);
    fflush(stdout);
    rlp_rollout_worker_free(w);
    rlp_synchronizer_free(sync);
    rlp_rollout_engine_free(engine);
    train_teardown(r);
    return failed ? 1 : 0;
}
