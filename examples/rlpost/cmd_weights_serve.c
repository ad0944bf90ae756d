/* `rlpost weights-serve DIR [--host 127.0.0.1] [--port 8001] [--token-file PATH]
 *   [--weights-from URL [--weights-poll-s 1]] [--header-timeout-ms ms]`:
 * serves a weights folder read-only at GET /v1/rlpost/weights/ for the
 * relay transport (RLP_TRANSPORT_RELAY, docs/relay.md), without a model:
 * - as the origin, beside a trainer that publishes DIR (sync.weights_dir
 *   of `rlpost train`, or any FILE-transport publisher), so that the
 *   trainer host needs no rollout engine and the server outlives a
 *   trainer restart;
 * - with --weights-from, as a relay-only node (SHARDCAST's middle node):
 *   DIR is a mirror of the parent, served on to children as it arrives.
 * Prints {"listening": URL, ...} on stdout once it accepts connections;
 * SIGINT/SIGTERM stop it. Same token rules as `rlpost serve`: without a
 * token it binds loopback only. */
#include "cli_args.h"
#include "commands.h"
#include "json_out.h"

#include <stdio.h>
#include <string.h>

#ifndef RLPOST_HAVE_MHD

int cmd_weights_serve(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "rlpost weights-serve: this rlpost was built without libmicrohttpd\n");
    return 1;
}

#else

#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

static void usage(void)
{
    fprintf(stderr,
            "usage: rlpost weights-serve DIR [--host 127.0.0.1] [--port 8001] [--token-file PATH]\n"
            "         [--weights-from URL] [--weights-poll-s s] [--header-timeout-ms ms]\n"
            "  Serves DIR (a folder in the FILE transport's layout: latest.json, v<N>/) read-only at\n"
            "  GET /v1/rlpost/weights/ with HTTP Range, for relays (`rlpost serve --weights-from`).\n"
            "  --weights-from URL: DIR is a mirror of the parent URL, relayed as it arrives (repeat it to\n"
            "  name fallbacks, tried in order while the parent fails).\n"
            "  --token-file PATH or RLPOST_SERVE_TOKEN: the bearer token (also sent to the parent);\n"
            "  without one the server binds loopback only.\n");
}

int cmd_weights_serve(int argc, char **argv)
{
    const char *dir = NULL, *host = "127.0.0.1", *token_file = NULL, *token = NULL, *from = NULL;
    const char *from_urls[8];
    size_t n_from = 0;
    long long port = 8001, header_ms = 10000;
    double poll_s = 1.0;
    int bad = 0;
    for (int i = 2; i < argc && !bad; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (a[0] != '-') {
            bad = dir != NULL;
            dir = a;
            continue;
        }
        if (!val) {
            bad = 1;
        } else if (!strcmp(a, "--host")) {
            host = val;
        } else if (!strcmp(a, "--port")) {
            bad = cli_int(val, 0, 65535, &port);
        } else if (!strcmp(a, "--token-file")) {
            token_file = val;
        } else if (!strcmp(a, "--header-timeout-ms")) {
            bad = cli_int(val, 100, 600000, &header_ms);
        } else if (!strcmp(a, "--weights-from")) {
            from = from ? from : val; /* repeated: the parent, then fallbacks */
            bad = !serve_weights_from_add(val, from_urls, &n_from, 8);
        } else if (!strcmp(a, "--weights-poll-s")) {
            bad = !serve_poll_s_parse(val, &poll_s);
        } else {
            bad = 1;
        }
        if (bad)
            fprintf(stderr, "rlpost weights-serve: bad argument '%s'%s%s\n", a, val ? " " : "", val ? val : "");
        i++;
    }
    char token_buf[SERVE_TOKEN_MAX + 1];
    if (!bad && serve_token_resolve("rlpost weights-serve", token, token_file, token_buf, sizeof token_buf, &token) != 0)
        bad = 1;
    if (bad || !dir) {
        usage();
        return EXIT_USAGE;
    }
    if (serve_signals_block() != 0) {
        fprintf(stderr, "rlpost weights-serve: pipe: %s\n", strerror(errno));
        return 1;
    }
    struct addrinfo *ai = NULL;
    if (serve_listen_addr("rlpost weights-serve", host, port, token != NULL, &ai) != 0)
        return EXIT_USAGE;
    char root[PATH_MAX];
    if ((mkdir(dir, 0755) != 0 && errno != EEXIST) || !realpath(dir, root)) {
        fprintf(stderr, "rlpost weights-serve: %s: %s\n", dir, strerror(errno));
        freeaddrinfo(ai);
        return 1;
    }
    int status = 1;
    serve_server srv;
    memset(&srv, 0, sizeof srv);
    pthread_mutex_init(&srv.mu, NULL);
    pthread_mutex_init(&srv.update_mu, NULL);
    pthread_cond_init(&srv.queue_cv, NULL);
    /* no engine: serve_http answers the weights folder and /health only */
    srv.cfg = (serve_config){.model_name = "weights", .token = token, .weights_root = root, .max_pending = 1,
                             .header_timeout_ms = (uint32_t)header_ms, .max_body_bytes = 1024};
    serve_follow fol;
    memset(&fol, 0, sizeof fol);
    serve_http *d = serve_http_start(&srv, ai->ai_addr, ai->ai_family == AF_INET6);
    if (!d) {
        fprintf(stderr, "rlpost weights-serve: cannot listen on %s port %lld\n", host, port);
        goto done;
    }
    char addr[128], url[192];
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(addr, sizeof addr, "%s", host);
    snprintf(url, sizeof url, ai->ai_family == AF_INET6 ? "http://[%s]:%u" : "http://%s:%u", addr, serve_http_port(d));
    printf("{\"listening\": ");
    json_print_string(stdout, url);
    printf(", \"weights_dir\": ");
    json_print_string(stdout, root);
    printf(", \"auth\": %s, \"weights_from\": ", token ? "true" : "false");
    if (from)
        json_print_string(stdout, from);
    else
        printf("null");
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, "rlpost weights-serve: %s on %s%s%s\n", root, url, from ? ", relaying " : "", from ? from : "");
    if (from && serve_follow_start(&fol, &srv, root, from_urls, n_from, token, (unsigned)(poll_s * 1000 + 0.5)))
        goto done;
    int sig = serve_signals_wait();
    fprintf(stderr, "rlpost weights-serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    status = 0;
done:
    serve_follow_stop(&fol);
    serve_http_stop(d);
    freeaddrinfo(ai);
    pthread_mutex_destroy(&srv.mu);
    pthread_mutex_destroy(&srv.update_mu);
    pthread_cond_destroy(&srv.queue_cv);
    return status;
}

#endif
