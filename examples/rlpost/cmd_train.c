/* `rlpost train` and `rlpost eval`: configuration → trainer options → step
 * loop → metrics JSONL and plot. The run loop itself is the library's
 * (rlp_trainer, lib/train: the three modes, the rollout thread, the gate,
 * checkpoint state); here are what a command line adds around it: the
 * output folder, --resume of a checkpoint or of a run that died before its
 * first one, Ctrl-C, periodic evaluations and checkpoints, the progress
 * line and the summary. Configuration → handles is train_setup.c,
 * evaluations train_eval.c, files train_files.c, ranks train_dist.c. */
#define _GNU_SOURCE 1
#include "cli_args.h"
#include "commands.h"
#include "json_out.h"
#include "rlpost.h"
#include "train.h"
#include "train_config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;
static rlp_trainer *volatile the_trainer; /* a step waiting for rollouts returns at once */

static void on_sigint(int sig)
{
    (void)sig;
    stop_requested = 1;
    if (the_trainer)
        rlp_trainer_interrupt(the_trainer);
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C ends the process at once */
}

static double mean_of(const double *v, size_t n)
{
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += v[i];
            k++;
        }
    return k ? s / (double)k : NAN;
}

static void fmt_eta(double s, char *buf, size_t cap)
{
    if (!isfinite(s) || s < 0)
        fmt(buf, cap, "?");
    else if (s >= 3600)
        fmt(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else
        fmt(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

/* ------------------------------------------------------------------------ */
/* rlpost train                                                             */
/* ------------------------------------------------------------------------ */

/* The last step's record (the trainer's JSON), with null for the figures
 * of a scorer this run does not have, so that every run's metrics.jsonl
 * has the same keys. */
static json_t *step_json(run *r)
{
    size_t len = 0;
    rlp_trainer_step_json(r->trainer, NULL, 0, &len);
    char *text = malloc(len + 1);
    json_t *m = text && !rlp_trainer_step_json(r->trainer, text, len + 1, &len) ? json_loads(text, 0, NULL) : NULL;
    free(text);
    static const char *const keys[] = {"format_rate", "format_reward_mean", "accuracy", "answer_parse_rate"};
    for (size_t i = 0; m && i < sizeof keys / sizeof *keys; i++)
        if (!json_object_get(m, keys[i]))
            json_object_set_new(m, keys[i], json_null());
    return m;
}

int cmd_train(int argc, char **argv)
{
    double t_start = now_s();
    run rr = {.overlap = -1}, *r = &rr;
    const char *resume;
    int rc = train_parse_args(argc, argv, "train", "--resume", r, &resume);
    if (rc)
        return rc == TRAIN_ARGS_HELP ? EXIT_SUCCESS : rc;
    fmt(r->out, sizeof r->out, "%s", cfg_str(r->cfg, "output"));
    /* several ranks: the launcher checks the configuration once, then forks
     * them here, before any thread exists */
    int part = train_dist_resolve(r);
    if (part < 0 || (part == 1 && train_check_config(r))) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    if (part == 1 && train_dist_launch(r, &rc)) {
        json_decref(r->cfg);
        return rc;
    }
    const int lead = r->rank == 0; /* writes the run's files; the other ranks only train */

    /* --- everything that can be refused, before anything is written --- */
    char ckpt[PATH_MAX] = {0};
    json_t *state = NULL;
    int restart = 0; /* --resume of a run that stopped before its first checkpoint */
    if (resume && train_find_checkpoint(resume, ckpt, sizeof ckpt)) {
        /* No checkpoint. If DIR is this configuration's output folder and
         * holds a run (it died before its first checkpoint), that run
         * starts again from step 0 over its own files; anything else has
         * nothing to resume. */
        char a[PATH_MAX], b[PATH_MAX], path[PATH_MAX];
        fmt(path, sizeof path, "%s/config.json", resume);
        json_t *prev = lead ? json_load_file(path, 0, NULL) : NULL;
        int same = realpath(resume, a) && realpath(r->out, b) && !strcmp(a, b);
        if (lead && (!same || !prev)) {
            fprintf(stderr, "rlpost train: --resume %s: no checkpoint there (state.json or checkpoints/latest)%s\n",
                    resume, !same ? "; a run that stopped before its first checkpoint is started again by resuming "
                                    "its output folder (the configuration's \"output\")" : "");
            json_decref(prev);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        const char *changed = train_changed_setting(prev, r->cfg);
        if (changed) {
            fprintf(stderr, "rlpost train: --resume %s: \"%s\" differs from that run's configuration (its "
                    "config.json)\n", resume, changed);
            json_decref(prev);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        json_decref(prev);
        if (lead)
            fprintf(stderr, "rlpost train: --resume %s: the run stopped before its first checkpoint; starting it "
                    "again from step 0 (its metrics, evaluations and samples are written anew)\n", resume);
        restart = 1;
        resume = NULL;
    }
    if (resume) {
        char path[PATH_MAX];
        fmt(path, sizeof path, "%s/state.json", ckpt);
        json_error_t je;
        state = json_load_file(path, 0, &je);
        if (!state || !json_is_integer(json_object_get(state, "step")) || !json_object_get(state, "cursor")) {
            fprintf(stderr, "rlpost train: --resume %s: %s\n", path, state ? "missing step or cursor" : je.text);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        const char *changed = train_changed_setting(json_object_get(state, "config"), r->cfg);
        if (changed) {
            fprintf(stderr, "rlpost train: --resume %s: \"%s\" differs from the checkpoint's configuration\n",
                    resume, changed);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    }
    struct stat st;
    if (!lead) {
        /* the output folder is rank 0's */
    } else if (!stat(r->out, &st)) {
        if (!S_ISDIR(st.st_mode) || access(r->out, W_OK | X_OK)) {
            fprintf(stderr, "rlpost train: output: '%s' is not a writable folder\n", r->out);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        char path[PATH_MAX];
        fmt(path, sizeof path, "%s/metrics.jsonl", r->out);
        if (!resume && !restart && !access(path, F_OK)) {
            fprintf(stderr, "rlpost train: output: '%s' already holds a run; resume it with --resume %s or choose "
                    "another folder\n", r->out, r->out);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        /* a resume continues in the configuration's output folder: one that holds another run (the
         * checkpoint is not its own) would have its records cut at the checkpoint's step and overwritten */
        char co[PATH_MAX], ro[PATH_MAX];
        size_t rl = realpath(r->out, ro) ? strlen(ro) : 0;
        if (resume && !access(path, F_OK) &&
            !(rl && realpath(ckpt, co) && !strncmp(co, ro, rl) && (co[rl] == '/' || co[rl] == 0))) {
            fprintf(stderr, "rlpost train: --resume %s: the run continues in output '%s', which holds another run; "
                    "set output to the resumed run's folder (--set output='\"%s\"'), or to a new folder to "
                    "branch from the checkpoint\n", resume, r->out, resume);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    } else {
        char parent[PATH_MAX];
        fmt(parent, sizeof parent, "%s", r->out);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == 0) { /* trailing slashes */
            *slash = 0;
            slash = strrchr(parent, '/');
        }
        if (!slash)
            fmt(parent, sizeof parent, ".");
        else if (slash == parent)
            parent[1] = 0;
        else
            *slash = 0;
        /* the nearest existing ancestor must be writable */
        while (stat(parent, &st)) {
            char *s = strrchr(parent, '/');
            if (!s) {
                fmt(parent, sizeof parent, ".");
                break;
            }
            if (s == parent) {
                parent[1] = 0;
                break;
            }
            *s = 0;
        }
        if (stat(parent, &st) || !S_ISDIR(st.st_mode) || access(parent, W_OK | X_OK)) {
            fprintf(stderr, "rlpost train: output: cannot create '%s' ('%s' is not a writable folder)\n", r->out,
                    parent);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    }
    char weights_dir[PATH_MAX];
    fmt(weights_dir, sizeof weights_dir, "%s", ckpt);
    if ((rc = train_setup(r, resume ? weights_dir : cfg_str(r->cfg, "model"), 1)) != 0) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        json_decref(state);
        train_teardown(r);
        return rc;
    }
    long long start = 0, steps = cfg_int(r->cfg, "steps");
    if (resume) {
        if ((rc = rlp_trainer_resume(r->trainer, ckpt))) {
            fprintf(stderr, "rlpost train: --resume %s: %s\n", ckpt, rlp_error_last());
            json_decref(state);
            train_teardown(r);
            return EXIT_USAGE;
        }
        start = (long long)json_integer_value(json_object_get(state, "step"));
        fprintf(stderr, "resumed from %s at step %lld\n", ckpt, start);
    }
    json_decref(state);

    /* --- the output folder --- */
    if (lead && train_mkdir_p(r->out)) {
        fprintf(stderr, "rlpost train: output: cannot create '%s': %s\n", r->out, strerror(errno));
        train_teardown(r);
        return EXIT_USAGE;
    }
    if (lead) {
        char path[PATH_MAX];
        char *text = json_dumps(r->cfg, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
        fmt(path, sizeof path, "%s/config.json", r->out);
        int bad = train_write_atomic(path, text);
        free(text);
        if (bad) {
            fprintf(stderr, "rlpost train: output: cannot write '%s': %s\n", path, strerror(errno));
            train_teardown(r);
            return EXIT_USAGE;
        }
        fmt(path, sizeof path, "%s/metrics.jsonl", r->out);
        /* a resumed run keeps what its checkpoint's steps wrote; a new (or
         * restarted) one starts its files empty */
        static const char *files[] = {"metrics.jsonl", "eval.jsonl", "samples.jsonl"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            fmt(path, sizeof path, "%s/%s", r->out, files[i]);
            FILE *f = NULL;
            if (resume ? train_truncate_jsonl(path, start) : (f = fopen(path, "w")) == NULL || fclose(f)) {
                fprintf(stderr, "rlpost train: output: cannot write '%s': %s\n", path, strerror(errno));
                train_teardown(r);
                return EXIT_USAGE;
            }
        }
    }
    the_trainer = r->trainer;
    signal(SIGINT, on_sigint);
    /* the swarm: workers join through the coordinator; step 1 waits for swarm.min_workers */
    if (r->swarm && (train_swarm_start(r) || train_swarm_wait(r, &stop_requested))) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        train_teardown(r);
        return stop_requested ? 0 : 1;
    }

    json_t *first_eval = NULL, *last_eval = NULL;
    int eval_failed = 0;
    if (lead && start == 0 && cfg_int(r->cfg, "eval.n") > 0) {
        if ((first_eval = train_evaluate(r, 0, r->out, NULL)) != NULL)
            train_append_jsonl(r->out, "eval.jsonl", first_eval);
        else
            eval_failed = 1;
    }
    size_t n_hist = (size_t)steps + 1;
    double *hist_reward = calloc(n_hist, sizeof(double)), *hist_format = calloc(n_hist, sizeof(double));
    double *hist_fmt_rate = calloc(n_hist, sizeof(double));
    if (!hist_reward || !hist_format || !hist_fmt_rate) {
        fprintf(stderr, "rlpost train: out of memory for %lld steps of history\n", steps);
        free(hist_reward);
        free(hist_format);
        free(hist_fmt_rate);
        json_decref(first_eval);
        train_teardown(r);
        return 1;
    }
    for (size_t i = 0; i < n_hist; i++)
        hist_reward[i] = hist_format[i] = hist_fmt_rate[i] = NAN;
    long long eval_every = cfg_int(r->cfg, "eval.interval"), ckpt_every = cfg_int(r->cfg, "checkpoint.interval");
    /* a checkpoint at least every checkpoint.minutes of training (rank 0's
     * clock: only rank 0 writes them), so a crash costs minutes, not the run */
    double ckpt_period_s = 60.0 * cfg_num(r->cfg, "checkpoint.minutes"), last_ckpt_s = now_s();
    double loop_start = now_s(), stale_max = 0;
    long long step = start, last_ckpt = -1;
    int failed = 0, interrupted = 0;
    /* where metrics.jsonl's format and accuracy figures are among the trainer's metrics */
    int i_fmt = r->format_fn ? 0 : -1, i_acc = r->acc_fn ? (r->format_fn != NULL) : -1;
    while (step < steps) {
        long long k = step + 1;
        rlp_step_record rec = {.version = RLP_STEP_RECORD_VERSION};
        rc = rlp_trainer_step(r->trainer, &rec);
        if (rc == RLP_E_CLOSED) {
            /* interrupted while the step waited for rollouts (async) */
            interrupted = 1;
            fprintf(stderr, "interrupted while waiting for rollouts: %s\n",
                    step > start ? "checkpointing the last step" : "no step to checkpoint");
            if (step > start && last_ckpt != step) {
                if (train_checkpoint(r, step))
                    failed = 1;
                last_ckpt = step;
            }
            break;
        }
        if (rc) {
            fprintf(stderr, "rlpost train: %s (%s)\n", rlp_error_last(), rlp_status_str(rc));
            /* a stalled gate: the steps so far are good, and a resume
             * restarts the gate at their version */
            if (rc == RLP_E_TIMEOUT && lead && step > start && last_ckpt != step && !train_checkpoint(r, step))
                last_ckpt = step;
            failed = 1;
            break;
        }
        step = k;
        train_swarm_set_version(r->coord, rec.policy_version);
        double reward = rec.reward_mean, format_rate = i_fmt >= 0 ? rec.metric_rate[i_fmt] : NAN;
        double accuracy = i_acc >= 0 ? rec.metric_rate[i_acc] : NAN;
        hist_reward[k] = reward;
        hist_format[k] = i_fmt >= 0 ? rec.metric_mean[i_fmt] : NAN;
        hist_fmt_rate[k] = format_rate;
        stale_max = fmax(stale_max, rec.rl.staleness_max);
        if (rec.reward_crashed && lead)
            fprintf(stderr, "reward: %llu samples invalid: their reward worker died (see samples.jsonl)\n",
                    (unsigned long long)rec.reward_crashed);
        if (lead) {
            json_t *m = step_json(r);
            if (!m) {
                fprintf(stderr, "rlpost train: step %lld: %s\n", k, rlp_error_last());
                failed = 1;
                break;
            }
            json_object_set_new(m, "elapsed_seconds", json_real(now_s() - t_start));
            train_append_jsonl(r->out, "metrics.jsonl", m);
            json_decref(m);
        }
        double per = (now_s() - loop_start) / (double)(k - start);
        char eta[32];
        fmt_eta(per * (double)(steps - k), eta, sizeof eta);
        /* every mode's idle times (sync: each side waits while the other works) */
        if (lead)
            fprintf(stderr, "step %lld/%lld | reward %.3f | format %.3f | acc %.3f | loss %.4f | %.0f tok/s | stale %.0f "
                "| %.1f s/step | idle trainer %.1f s, rollout %.1f s | buffer %llu | ETA %s\n", k, steps, reward,
                format_rate, accuracy, rec.rl.loss, isfinite(rec.tokens_per_second) ? rec.tokens_per_second : 0.0,
                rec.rl.staleness_max, rec.step_seconds, rec.trainer_idle_seconds, rec.rollout_idle_seconds,
                (unsigned long long)rec.buffer_size, eta);

        /* Read the flag once: with several ranks every rank must act on the
         * reduced value, not on a signal that lands after the reduction
         * (that rank alone would stop, and its peers would wait for it). */
        int stop = stop_requested != 0;
        if (r->comm) {
            /* a rank interrupted during the step stops them all here, together */
            double f = stop;
            if (rlp_comm_all_reduce(r->comm, &f, 1, RLP_REDUCE_MAX)) {
                fprintf(stderr, "rlpost train: step %lld: distributed: %s\n", k, rlp_error_last());
                failed = 1;
                break;
            }
            stop = f > 0;
        }
        if (stop) {
            if (lead)
                fprintf(stderr, "interrupted: checkpointing step %lld of %lld\n", k, steps);
            interrupted = 1;
            if (lead && train_checkpoint(r, k))
                failed = 1;
            last_ckpt = k;
            break;
        }
        if (lead && k < steps && eval_every > 0 && k % eval_every == 0) {
            json_t *e = train_evaluate(r, k, r->out, NULL);
            if (e) {
                train_append_jsonl(r->out, "eval.jsonl", e);
                json_decref(e);
            } else {
                eval_failed = 1;
            }
        }
        if (k < steps && ((ckpt_every > 0 && k % ckpt_every == 0) ||
                          (lead && ckpt_period_s > 0 && now_s() - last_ckpt_s >= ckpt_period_s))) {
            if (lead && train_checkpoint(r, k)) {
                failed = 1;
                break;
            }
            last_ckpt = k;
            last_ckpt_s = now_s();
        }
    }
    /* the rollout side stops here (a generate call in flight is aborted),
     * so that the last evaluation has the cores to itself */
    rlp_trainer_stop(r->trainer);
    if (!lead) {
        /* rank 0 evaluates, checkpoints and reports */
        free(hist_reward);
        free(hist_format);
        free(hist_fmt_rate);
        json_decref(first_eval);
        train_teardown(r);
        return failed ? 1 : 0;
    }
    /* a run resumed after its last step has had its final evaluation */
    if (!failed && !interrupted && step == steps) {
        if (start < steps && (last_eval = train_evaluate(r, step, r->out, NULL)) != NULL)
            train_append_jsonl(r->out, "eval.jsonl", last_eval);
        else if (start < steps && cfg_int(r->cfg, "eval.n") > 0)
            eval_failed = 1; /* asked for and not done: the run does not end well */
        if (last_ckpt != step && train_checkpoint(r, step))
            failed = 1;
    }
    /* the final model for llama.cpp / Ollama (checkpoint.gguf) */
    char gguf_path[PATH_MAX + 16] = "";
    if (!failed && !interrupted && step == steps && r->gguf_type >= 0) {
        fmt(gguf_path, sizeof gguf_path, "%s/model.gguf", r->out);
        rlp_gguf_save_options go;
        rlp_gguf_save_options_init(&go, RLP_GGUF_SAVE_OPTIONS_VERSION);
        go.type = r->gguf_type;
        /* the tokenizer keys of the model the run started from: a resumed
         * policy's tokenizer is its checkpoint's tokenizer.json */
        const char *model = cfg_str(r->cfg, "model");
        FILE *mf = model ? fopen(model, "rb") : NULL;
        char magic[4] = {0};
        if (mf && fread(magic, 1, 4, mf) == 4 && !memcmp(magic, "GGUF", 4))
            go.tokenizer_gguf = model;
        if (mf)
            fclose(mf);
        if (rlp_policy_save_gguf(r->policy, gguf_path, &go) != RLP_OK) {
            fprintf(stderr, "rlpost train: checkpoint.gguf: %s\n", rlp_error_last());
            gguf_path[0] = '\0';
            failed = 1;
        }
    }
    const char *png = train_plot(r->out);

    /* summary */
    size_t first_n = 0, last_n = 0;
    double fr[3], lr[3], ff[3], lf[3], fq[3], lq[3];
    for (long long k = 1; k <= step && first_n < 3; k++, first_n++) {
        fr[first_n] = hist_reward[k];
        ff[first_n] = hist_format[k];
        fq[first_n] = hist_fmt_rate[k];
    }
    for (long long k = step; k >= 1 && last_n < 3; k--, last_n++) {
        lr[last_n] = hist_reward[k];
        lf[last_n] = hist_format[k];
        lq[last_n] = hist_fmt_rate[k];
    }
    json_t *sum = json_object();
    json_object_set_new(sum, "steps", json_integer(steps));
    json_object_set_new(sum, "steps_completed", json_integer(step));
    json_object_set_new(sum, "resumed_from", json_integer(start));
    json_object_set_new(sum, "interrupted", json_boolean(interrupted));
    json_object_set_new(sum, "sync_mode", json_string(cfg_str(r->cfg, "sync.mode")));
    json_object_set_new(sum, "staleness_max", json_real(stale_max));
    {
        /* the precision the trainer's GEMMs ran in (auto resolved) */
        int mm = RLP_MATMUL_FP32;
        rlp_context_matmul_precision(&mm, r->ctx);
        json_object_set_new(sum, "matmul_precision", json_string(cli_matmul_name(mm)));
    }
    {
        /* the ranks and the transport their process group took (AUTO resolved) */
        static const char *const names[] = {"auto", "shm", "nccl", "mpi", "gloo"};
        int32_t transport = -1;
        if (r->comm)
            rlp_comm_info(r->comm, NULL, NULL, &transport);
        json_object_set_new(sum, "world_size", json_integer(r->world));
        json_object_set_new(sum, "transport", transport >= 0 && transport <= 4 ? json_string(names[transport])
                                                                                 : json_null());
    }
    {
        /* ASYNC: where every group went (accepted + restored = consumed +
         * dropped_stale + size), for accounting a run */
        rlp_buffer_stats bs;
        rlp_rollout_worker_stats ws = {.version = 1};
        if (r->trainer && rlp_trainer_async_stats(&bs, &ws, r->trainer) == RLP_OK)
            json_object_set_new(sum, "groups",
                                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "pushed", (json_int_t)ws.groups_pushed,
                                          "accepted", (json_int_t)bs.accepted, "restored", (json_int_t)bs.restored,
                                          "consumed", (json_int_t)bs.consumed, "dropped_stale",
                                          (json_int_t)bs.dropped_stale, "rejected", (json_int_t)bs.rejected,
                                          "held", (json_int_t)bs.size));
    }
    if (r->coord) /* the ledger: each worker's joins, state and counters (docs/metrics.md) */
        json_object_set_new(sum, "swarm", train_swarm_summary(r));
    json_object_set_new(sum, "output", json_string(r->out));
    if (gguf_path[0])
        json_object_set_new(sum, "gguf", json_string(gguf_path));
    json_object_set_new(sum, "wall_seconds", json_real(now_s() - t_start));
    json_object_set_new(sum, "reward_first3", jnum(mean_of(fr, first_n)));
    json_object_set_new(sum, "reward_last3", jnum(mean_of(lr, last_n)));
    json_object_set_new(sum, "format_reward_first3", jnum(mean_of(ff, first_n)));
    json_object_set_new(sum, "format_reward_last3", jnum(mean_of(lf, last_n)));
    json_object_set_new(sum, "format_rate_first3", jnum(mean_of(fq, first_n)));
    json_object_set_new(sum, "format_rate_last3", jnum(mean_of(lq, last_n)));
    if (!first_eval && start > 0) {
        /* resumed: the run's first evaluation is in its eval.jsonl */
        char path[PATH_MAX], line[1 << 16];
        fmt(path, sizeof path, "%s/eval.jsonl", r->out);
        FILE *f = fopen(path, "r");
        if (f && fgets(line, sizeof line, f))
            first_eval = json_loads(line, 0, NULL);
        if (f)
            fclose(f);
    }
    json_t *change = train_eval_change(first_eval, last_eval);
    json_object_set_new(sum, "heldout_change", change ? change : json_null());
    static const char *const bulky[] = {"greedy_correct", "sampled_correct"}; /* in eval.jsonl */
    for (size_t i = 0; i < 2; i++) {
        json_object_del(first_eval, bulky[i]);
        json_object_del(last_eval, bulky[i]);
    }
    json_object_set_new(sum, "eval_first", first_eval ? first_eval : json_null());
    json_object_set_new(sum, "eval_last", last_eval ? last_eval : json_null());
    json_object_set_new(sum, "plot", png ? json_string(png) : json_null());
    char ck[PATH_MAX];
    fmt(ck, sizeof ck, "%s/checkpoints/step_%lld", r->out, step);
    json_object_set_new(sum, "checkpoint", last_ckpt >= 0 || (!failed && step == steps && start < steps)
                                               ? json_string(ck)
                                               : json_null());
    json_dumpf(sum, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(sum);
    free(hist_reward);
    free(hist_format);
    free(hist_fmt_rate);
    train_teardown(r);
    if (failed)
        return 1;
    if (eval_failed) {
        fprintf(stderr, "rlpost train: an evaluation asked for (eval.n > 0) did not happen; see above\n");
        return 1;
    }
    if (interrupted)
        return 0;
    if (step < steps) {
        fprintf(stderr, "rlpost train: ended after %lld of %lld steps\n", step, steps);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* rlpost eval                                                              */
/* ------------------------------------------------------------------------ */

int cmd_eval(int argc, char **argv)
{
    run rr = {.overlap = -1}, *r = &rr;
    const char *ckpt_arg;
    int rc = train_parse_args(argc, argv, "eval", "--checkpoint", r, &ckpt_arg);
    if (rc)
        return rc == TRAIN_ARGS_HELP ? EXIT_SUCCESS : rc;
    char ckpt[PATH_MAX];
    if (ckpt_arg && train_find_checkpoint(ckpt_arg, ckpt, sizeof ckpt)) {
        /* a plain model folder or file is fine too */
        fmt(ckpt, sizeof ckpt, "%s", ckpt_arg);
    }
    if (cfg_int(r->cfg, "eval.n") <= 0) {
        fprintf(stderr, "rlpost eval: eval.n: must be ≥ 1\n");
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    if ((rc = train_setup(r, ckpt_arg ? ckpt : cfg_str(r->cfg, "model"), 0)) != 0) {
        fprintf(stderr, "rlpost eval: %s\n", r->err);
        train_teardown(r);
        return rc;
    }
    /* the step a checkpoint of `rlpost train` was taken at (its weights
     * do not carry the version: optimizer.safetensors does); else the
     * policy's version (0 for a model) */
    uint64_t version = 0;
    rlp_policy_version(&version, r->policy);
    long long step = (long long)version;
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/state.json", ckpt);
    json_t *state = ckpt_arg ? json_load_file(path, 0, NULL) : NULL;
    if (json_is_integer(json_object_get(state, "step")))
        step = (long long)json_integer_value(json_object_get(state, "step"));
    json_decref(state);
    json_t *samples = NULL;
    json_t *rec = train_evaluate(r, step, NULL, &samples);
    if (!rec) {
        train_teardown(r);
        return 1;
    }
    /* a few completions of each mode, as they were written */
    long long shown[2] = {0, 0};
    size_t i;
    json_t *x;
    json_array_foreach(samples, i, x)
    {
        int sampled = !strcmp(json_string_value(json_object_get(x, "mode")), "sampled");
        if (shown[sampled]++ >= 3)
            continue;
        const json_t *ok = json_object_get(x, "correct"), *ref = json_object_get(x, "reference");
        fprintf(stderr, "--- %s, prompt %lld%s: %s (reference %s)\n", sampled ? "sampled" : "greedy",
                (long long)json_integer_value(json_object_get(x, "prompt_index")),
                json_is_string(ref) ? "" : "", json_is_true(ok) ? "correct" : json_is_false(ok) ? "wrong" : "unscored",
                json_is_string(ref) ? json_string_value(ref) : "none");
        fprintf(stderr, "%s\n", json_string_value(json_object_get(x, "completion")));
    }
    json_decref(samples);
    json_object_set_new(rec, "model", json_string(ckpt_arg ? ckpt : cfg_str(r->cfg, "model")));
    json_dumpf(rec, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fputc('\n', stdout);
    json_decref(rec);
    train_teardown(r);
    return 0;
}
