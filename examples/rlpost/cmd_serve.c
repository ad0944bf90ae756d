/* `rlpost serve MODEL [--host 127.0.0.1] [--port 8000] [--token-file PATH]
 *   [--max-batch b] [--max-seq-len n] [--max-body-bytes n] [--threads t]
 *   [--weights f32|q8_0|q4_0|auto] [--matmul-precision fp32|bf16|tf32|auto]
 *   [--batch-wait-ms ms] [--logprobs-mode sampling|tempered|raw]
 *   [--served-model-name NAME] [--weights-dir DIR [--weights-from URL]...
 *   [--weights-poll-s s]] [--max-pending n] [--header-timeout-ms ms]
 *   [--join TRAINER_URL [--advertise URL]]`:
 * an OpenAI-compatible rollout server on the local engine (see serve.h for
 * its parts). Prints one JSON line {"listening": URL, ...} on stdout once
 * it accepts connections; SIGINT/SIGTERM shut it down cleanly (requests in
 * flight are aborted and answered, queued ones get 503).
 * With --weights-dir DIR (a folder a trainer publishes to through the FILE
 * or HTTP transport) the server loads DIR's latest published version
 * before it listens, so a worker (re)started mid-run joins at the current
 * version instead of serving the initial weights.
 * With --weights-from URL as well, DIR is a mirror of a parent's folder
 * (the relay transport, RLP_TRANSPORT_RELAY): a thread pulls the parent's
 * newest version into DIR every --weights-poll-s seconds and loads it,
 * and the server serves DIR at GET /v1/rlpost/weights/ to its own
 * children (origin -> relay -> ...; docs/relay.md). A weight update
 * request (a trainer's HTTP transport) then waits for the relay to bring
 * the version it names instead of loading a path.
 * Trust: a token (--token-file, RLPOST_SERVE_TOKEN) guards every endpoint
 * but /health; without one the server binds loopback only, and weight
 * updates still need the token generated in DIR/.rlpost-serve-token
 * (0600), which the trainer publishing to DIR reads. Weight updates load
 * only folders below DIR (none without --weights-dir).
 * With --join TRAINER_URL the server joins a running `rlpost train`'s
 * swarm (swarm.listen): it registers with the token, heartbeats, and
 * leaves on SIGINT/SIGTERM (serve_join.c); its worker id is kept in
 * DIR/.rlpost-worker-id, so a restarted worker rejoins as itself. */
#include "cli_args.h"
#include "commands.h"
#include "json_out.h"

#include <stdio.h>
#include <string.h>

#ifndef RLPOST_HAVE_MHD

int cmd_serve(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "rlpost serve: this rlpost was built without libmicrohttpd; install libmicrohttpd-dev "
                    "(Debian) and reconfigure the build (meson setup --reconfigure BUILD_DIR)\n");
    return 1;
}

#else

#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef RLPOST_HAVE_JOIN
#include <curl/curl.h>
#endif

static void usage(void)
{
    fprintf(stderr,
            "usage: rlpost serve MODEL [--host 127.0.0.1] [--port 8000] [--token-file PATH] [--max-batch b]\n"
            "         [--max-seq-len n] [--max-body-bytes n] [--threads t] [--batch-wait-ms ms]\n"
            "         [--weights f32|q8_0|q4_0|auto]   decode weights (default f32; q8_0: int8 copy, q4_0:\n"
            "                               4-bit copy, re-quantized at each weight update)\n"
            "         [--matmul-precision fp32|bf16|tf32|auto]  GEMM precision (default fp32); a worker of\n"
            "                               a trainer gets the trainer's matmul_precision for rollouts\n"
            "                               rounded as the trainer's are\n"
            "         [--logprobs-mode sampling|tempered|raw] [--served-model-name NAME]\n"
            "         [--weights-dir DIR]   load DIR's latest published version before serving; weight\n"
            "                               updates load only folders below DIR\n"
            "         [--weights-from URL]  with --weights-dir: mirror the parent server URL's weights folder\n"
            "                               into DIR (HTTP Range resume, CRC-32 per file), load each new\n"
            "                               version, and serve DIR to children (GET /v1/rlpost/weights/...);\n"
            "                               repeat it to name fallbacks (grandparent, origin) for when the\n"
            "                               parent fails\n"
            "         [--weights-poll-s s]  how often the parent is asked (default 1)\n"
            "         [--max-pending n]     generation requests at once (default 256); beyond: 503\n"
            "         [--header-timeout-ms ms]  time for a request's headers (default 10000)\n"
            "         [--join TRAINER_URL]  join a running `rlpost train`'s swarm (its swarm.listen): register\n"
            "                               with the token, heartbeat, leave on exit; needs --weights-dir (the\n"
            "                               worker id is kept there) and a token\n"
            "         [--advertise URL]     the URL the trainer calls this server at (default: the listening\n"
            "                               one; required with --host 0.0.0.0 or ::)\n"
            "  --token-file PATH: the bearer token of every endpoint but /health (first line of PATH);\n"
            "  or the environment: RLPOST_SERVE_TOKEN. Without a token the server binds loopback only\n"
            "  and weight updates need the token it keeps in DIR/" SERVE_TOKEN_FILE " (mode 0600).\n"
            "  --token T still works but is deprecated: `ps` shows it to every local user.\n");
}

/* The last path component (a trailing '/' ignored), as the model's name. */
static void base_name(const char *path, char *out, size_t n)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/')
        start--;
    snprintf(out, n, "%.*s", (int)(len - start), path + start);
}

/* Brings the engine to the latest version published in @p dir (its
 * manifest, checksums verified) through a reader-only synchronizer: one
 * that never publishes learns the version from the manifest. Nothing
 * published yet is not an error: the model's own weights are version 0. */
static int load_published(rlp_rollout_engine *engine, const char *dir)
{
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_FILE;
    so.dir = dir;
    rlp_synchronizer *sync = NULL;
    int rc = rlp_synchronizer_create(&sync, &so);
    if (rc == RLP_OK)
        rc = rlp_synchronizer_pull(sync, engine);
    if (rc != RLP_OK) {
        fprintf(stderr, "rlpost serve: --weights-dir %s: %s\n", dir, rlp_error_last());
    } else {
        uint64_t v = 0;
        rlp_rollout_engine_version(&v, engine);
        fprintf(stderr, "rlpost serve: --weights-dir %s: weight version %llu\n", dir, (unsigned long long)v);
    }
    rlp_synchronizer_free(sync);
    return rc;
}

static int parse_mode(const char *s, int32_t *out)
{
    if (!strcmp(s, "sampling"))
        *out = RLP_LOGPROBS_SAMPLING;
    else if (!strcmp(s, "tempered"))
        *out = RLP_LOGPROBS_TEMPERED;
    else if (!strcmp(s, "raw"))
        *out = RLP_LOGPROBS_RAW;
    else
        return -1;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    const char *model = NULL, *host = "127.0.0.1", *token = NULL, *name = NULL, *weights_dir = NULL;
    const char *token_file = NULL, *weights_from = NULL, *from_urls[8], *join = NULL, *advertise = NULL;
    size_t n_from = 0;
    double poll_s = 1.0;
    int weights = RLP_ROLLOUT_WEIGHTS_F32, matmul = RLP_MATMUL_FP32;
    long long port = 8000, max_batch = 32, max_seq_len = 0, body = 1 << 20, threads = 0, wait_ms = 5;
    long long max_pending = 256, header_ms = 10000;
    int32_t mode = RLP_LOGPROBS_SAMPLING;
    int bad = 0;
    for (int i = 2; i < argc && !bad; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (a[0] != '-') {
            bad = model != NULL;
            model = a;
            continue;
        }
        if (!val) {
            bad = 1;
        } else if (!strcmp(a, "--host")) {
            host = val;
        } else if (!strcmp(a, "--port")) {
            bad = cli_int(val, 0, 65535, &port);
        } else if (!strcmp(a, "--token")) {
            token = val;
            fprintf(stderr, "rlpost serve: warning: --token puts the token where `ps` shows it to every local "
                            "user; use --token-file PATH or RLPOST_SERVE_TOKEN (--token is deprecated)\n");
        } else if (!strcmp(a, "--token-file")) {
            token_file = val;
        } else if (!strcmp(a, "--max-pending")) {
            bad = cli_int(val, 1, 65536, &max_pending);
        } else if (!strcmp(a, "--header-timeout-ms")) {
            bad = cli_int(val, 100, 600000, &header_ms);
        } else if (!strcmp(a, "--max-batch")) {
            bad = cli_int(val, 1, 4096, &max_batch);
        } else if (!strcmp(a, "--weights")) {
            bad = (weights = cli_rollout_weights(val)) < 0;
        } else if (!strcmp(a, "--matmul-precision")) {
            bad = (matmul = cli_matmul_precision(val)) < 0;
        } else if (!strcmp(a, "--max-seq-len")) {
            bad = cli_int(val, 0, 1 << 20, &max_seq_len);
        } else if (!strcmp(a, "--max-body-bytes")) {
            bad = cli_int(val, 1024, 1LL << 30, &body);
        } else if (!strcmp(a, "--threads")) {
            bad = cli_int(val, 0, 1024, &threads);
        } else if (!strcmp(a, "--batch-wait-ms")) {
            bad = cli_int(val, 0, 1000, &wait_ms);
        } else if (!strcmp(a, "--logprobs-mode")) {
            bad = parse_mode(val, &mode);
        } else if (!strcmp(a, "--served-model-name")) {
            name = val;
        } else if (!strcmp(a, "--weights-from")) {
            weights_from = val; /* repeated: the parent, then fallbacks */
            bad = !serve_weights_from_add(val, from_urls, &n_from, 8);
        } else if (!strcmp(a, "--weights-poll-s")) {
            bad = !serve_poll_s_parse(val, &poll_s);
        } else if (!strcmp(a, "--weights-dir")) {
            weights_dir = val;
            bad = !*val;
        } else if (!strcmp(a, "--join")) {
            join = val;
            bad = strncmp(val, "http://", 7) && strncmp(val, "https://", 8);
        } else if (!strcmp(a, "--advertise")) {
            advertise = val;
            bad = (strncmp(val, "http://", 7) && strncmp(val, "https://", 8)) || strlen(val) >= RLP_SERVER_URL_MAX;
        } else {
            bad = 1;
        }
        if (bad)
            fprintf(stderr, "rlpost serve: bad argument '%s'%s%s\n", a, val ? " " : "", val ? val : "");
        i++;
    }
    char token_buf[SERVE_TOKEN_MAX + 1];
    if (!bad && serve_token_resolve("rlpost serve", token, token_file, token_buf, sizeof token_buf, &token) != 0)
        bad = 1;
    if (!bad && weights_from && !weights_dir) {
        fprintf(stderr, "rlpost serve: --weights-from needs --weights-dir (the local mirror)\n");
        bad = 1;
    }
    if (!bad && (join || advertise)) {
#ifndef RLPOST_HAVE_JOIN
        fprintf(stderr, "rlpost serve: --join needs an rlpost built with libcurl\n");
        bad = 1;
#endif
        if (!join || !weights_dir || !token) {
            fprintf(stderr, "rlpost serve: %s\n", !join ? "--advertise goes with --join"
                                                       : !weights_dir ? "--join needs --weights-dir (the worker id is kept there)"
                                                                      : "--join needs a token (--token-file or RLPOST_SERVE_TOKEN): "
                                                                        "the trainer's coordinator demands it");
            bad = 1;
        }
    }
    if (bad || !model) {
        usage();
        return EXIT_USAGE;
    }
#ifdef RLPOST_HAVE_JOIN
    if (join)
        curl_global_init(CURL_GLOBAL_DEFAULT); /* before any thread (the library's is once, and a no-op then) */
    if (join && !weights_from)
        fprintf(stderr, "rlpost serve: warning: --join without --weights-from: the trainer's weight updates name "
                        "folders on its own machine, which this server loads only if they lie below --weights-dir "
                        "(a shared file system); otherwise follow the trainer's folder with --weights-from "
                        "(rlpost weights-serve on the trainer's weights folder, docs/swarm.md)\n");
#endif
    char name_buf[256];
    if (!name) {
        base_name(model, name_buf, sizeof name_buf);
        name = name_buf;
    }
    json_t *name_check = json_string(name);
    if (!name_check) {
        fprintf(stderr, "rlpost serve: the model name must be UTF-8 (use --served-model-name)\n");
        return EXIT_USAGE;
    }
    json_decref(name_check);

    /* every thread started from here on inherits the mask, so that only
     * the main thread (and threads older than main()) run the handler */
    if (serve_signals_block() != 0) {
        fprintf(stderr, "rlpost serve: pipe: %s\n", strerror(errno));
        return 1;
    }

    struct addrinfo *ai = NULL;
    if (serve_listen_addr("rlpost serve", host, port, token != NULL, &ai) != 0)
        return EXIT_USAGE;

    int status = 1;
    rlp_context *ctx = NULL;
    rlp_policy *policy = NULL;
    serve_http *d = NULL;
    serve_follow fol;
    memset(&fol, 0, sizeof fol);
#ifdef RLPOST_HAVE_JOIN
    serve_join jn;
    memset(&jn, 0, sizeof jn);
#endif
    char root[PATH_MAX], token_path[PATH_MAX + 64] = "", update_token[SERVE_TOKEN_MAX + 1];
    serve_server srv;
    memset(&srv, 0, sizeof srv);
    pthread_mutex_init(&srv.mu, NULL);
    pthread_mutex_init(&srv.update_mu, NULL);
    pthread_cond_init(&srv.queue_cv, NULL);

    rlp_model_info mi = {.version = RLP_MODEL_INFO_VERSION};
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = (int32_t)threads;
    co.matmul_precision = matmul;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = (uint32_t)max_batch;
    ro.weights = weights;
    ro.share_weights = 0; /* its own copy: /update_weights_from_disk replaces it */
    if (rlp_model_inspect(&mi, model) != RLP_OK || rlp_context_create(&ctx, &co) != RLP_OK ||
        rlp_policy_load(&policy, ctx, model, &po) != RLP_OK) {
        fprintf(stderr, "rlpost serve: %s\n", rlp_error_last());
        goto done;
    }
    uint32_t ctx_len = mi.context_length > 0 ? (uint32_t)mi.context_length : 2048;
    ro.max_seq_len = max_seq_len ? (uint32_t)max_seq_len : (ctx_len < 2048 ? ctx_len : 2048);
    if (ro.max_seq_len > ctx_len || ro.max_seq_len < 2) {
        fprintf(stderr, "rlpost serve: --max-seq-len %u outside [2, %u] (the model's context)\n", ro.max_seq_len,
                ctx_len);
        status = EXIT_USAGE;
        goto done;
    }
    if (rlp_rollout_engine_create(&srv.engine, policy, &ro) != RLP_OK) {
        fprintf(stderr, "rlpost serve: %s\n", rlp_error_last());
        goto done;
    }
    rlp_policy_free(policy); /* the engine holds its own copy (and tokenizer) */
    policy = NULL;
    if (weights_dir && load_published(srv.engine, weights_dir) != RLP_OK)
        goto done;
    if (weights_dir && !realpath(weights_dir, root)) { /* (load_published made it) */
        fprintf(stderr, "rlpost serve: --weights-dir %s: %s\n", weights_dir, strerror(errno));
        goto done;
    }
    if (weights_dir && !token) {
        char terr[4400];
        if (serve_token_dir(root, update_token, sizeof update_token, token_path, sizeof token_path, terr,
                            sizeof terr) != 0) {
            fprintf(stderr, "rlpost serve: %s\n", terr);
            goto done;
        }
        fprintf(stderr, "rlpost serve: weight updates need the bearer token in %s (mode 0600; the trainer "
                        "publishing to %s reads it)\n", token_path, weights_dir);
    }
    srv.tok = rlp_rollout_engine_tokenizer(srv.engine);
    if (!srv.tok)
        fprintf(stderr, "rlpost serve: %s has no tokenizer: only token-id prompts will work\n", model);
    srv.cfg = (serve_config){.model_name = name, .token = token, .max_body_bytes = (size_t)body,
                             .update_token = token ? token : weights_dir ? update_token : NULL,
                             .weights_root = weights_dir ? root : NULL, .max_pending = (size_t)max_pending,
                             .header_timeout_ms = (uint32_t)header_ms,
                             .max_seq_len = ro.max_seq_len, .vocab_size = mi.vocab_size, .logprobs_mode = mode,
                             .batch_wait_ms = (uint32_t)wait_ms};
    srv.seed_base = (uint64_t)time(NULL) * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)getpid();
    if (serve_sched_start(&srv) != RLP_OK) {
        fprintf(stderr, "rlpost serve: cannot start the generation thread\n");
        goto done;
    }
    d = serve_http_start(&srv, ai->ai_addr, ai->ai_family == AF_INET6);
    if (!d) {
        fprintf(stderr, "rlpost serve: cannot listen on %s port %lld (in use, or not an address of this host)\n",
                host, port);
        goto done;
    }
    char addr[128];
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(addr, sizeof addr, "%s", host);
    char url[192];
    snprintf(url, sizeof url, ai->ai_family == AF_INET6 ? "http://[%s]:%u" : "http://%s:%u", addr,
             serve_http_port(d));
    uint64_t version = 0;
    rlp_rollout_engine_version(&version, srv.engine);
    printf("{\"listening\": ");
    json_print_string(stdout, url);
    printf(", \"model\": ");
    json_print_string(stdout, name);
    printf(", \"weight_version\": %llu, \"max_batch\": %u, \"max_seq_len\": %u, \"max_body_bytes\": %zu, "
           "\"auth\": %s, \"weight_updates\": %s, \"token_file\": ",
           (unsigned long long)version, ro.max_batch, ro.max_seq_len, srv.cfg.max_body_bytes,
           token ? "true" : "false", weights_dir ? "true" : "false");
    if (token_path[0])
        json_print_string(stdout, token_path);
    else
        printf("null");
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, "rlpost serve: %s on %s (max_batch %u, max_seq_len %u)\n", name, url, ro.max_batch,
            ro.max_seq_len);
    if (weights_from &&
        serve_follow_start(&fol, &srv, root, from_urls, n_from, token, (unsigned)(poll_s * 1000 + 0.5)) != 0)
        goto done;
    if (weights_from)
        srv.follow = &fol; /* weight updates wait for the relay (a trainer's HTTP transport still works) */
#ifdef RLPOST_HAVE_JOIN
    if (join) {
        bool wildcard = !strcmp(addr, "0.0.0.0") || !strcmp(addr, "::");
        if (!advertise && wildcard) {
            fprintf(stderr, "rlpost serve: --join with --host %s needs --advertise URL (the address the trainer "
                            "calls)\n", host);
            status = EXIT_USAGE;
            goto done;
        }
        if (serve_join_start(&jn, srv.engine, join, advertise ? advertise : url, root, token) != 0)
            goto done;
    }
#endif

    int sig = serve_signals_wait();
    fprintf(stderr, "rlpost serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    status = 0;
done:
#ifdef RLPOST_HAVE_JOIN
    serve_join_stop(&jn); /* leave first: the trainer stops sending requests here */
#endif
    srv.follow = NULL;
    serve_follow_stop(&fol); /* no weight load after this */
    serve_sched_stop(&srv); /* every waiting handler gets its answer ... */
    serve_http_stop(d);     /* ... before the connection threads are joined */
    rlp_rollout_engine_free(srv.engine);
    rlp_policy_free(policy);
    rlp_context_free(ctx);
    freeaddrinfo(ai);
    pthread_mutex_destroy(&srv.mu);
    pthread_mutex_destroy(&srv.update_mu);
    pthread_cond_destroy(&srv.queue_cv);
    return status;
}

#endif
