/* `rlpost reward NAME [--reference R] [--options JSON] [--metadata JSON]
 * [--prompt P]`: scores one completion read from stdin with a built-in
 * reward (or, when NAME is an http(s):// URL, an HTTP verifier) and prints
 * {"score": x, "valid": true|false, "reason": "..."}; score is null when
 * the sample is invalid. For debugging a reward on a single answer. */
#include "commands.h"
#include "json_out.h"

#include "rlpost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest completion read from stdin. */
#define MAX_INPUT ((size_t)64 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rlpost reward NAME [--reference R] [--options JSON] [--metadata JSON] [--prompt P]\n"
            "  reads one completion on stdin and prints {\"score\": ..., \"valid\": ..., \"reason\": ...}\n"
            "  NAME: an http(s):// verifier URL or one of:");
    for (size_t i = 0; rlp_reward_builtin_name(i); i++)
        fprintf(f, " %s", rlp_reward_builtin_name(i));
    fprintf(f, "\n");
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            if (cap >= MAX_INPUT) {
                fprintf(stderr, "rlpost reward: the completion is larger than %zu bytes\n", MAX_INPUT);
                free(buf);
                return NULL;
            }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        fprintf(stderr, "rlpost reward: cannot read the completion from stdin\n");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Replaces bytes that are not valid UTF-8 with '?' so the output is JSON. */
static void utf8_clean(char *s)
{
    unsigned char *u = (unsigned char *)s;
    for (size_t i = 0; u[i];) {
        size_t len = u[i] < 0x80 ? 1
                     : (u[i] & 0xe0) == 0xc0 ? 2
                     : (u[i] & 0xf0) == 0xe0 ? 3
                     : (u[i] & 0xf8) == 0xf0 ? 4
                                             : 0;
        size_t k = 1;
        while (len && k < len && (u[i + k] & 0xc0) == 0x80)
            k++;
        if (len == 0 || k < len) {
            u[i++] = '?';
            continue;
        }
        i += len;
    }
}

/* The shortest decimal that reads back as x. */
static void print_number(double x)
{
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, stdout);
}

int cmd_reward(int argc, char **argv)
{
    const char *name = NULL, *reference = NULL, *options = NULL, *metadata = NULL, *prompt = "";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--reference") && has) {
            reference = argv[++i];
        } else if (!strcmp(a, "--options") && has) {
            options = argv[++i];
        } else if (!strcmp(a, "--metadata") && has) {
            metadata = argv[++i];
        } else if (!strcmp(a, "--prompt") && has) {
            prompt = argv[++i];
        } else if (a[0] != '-' && !name) {
            name = a;
        } else {
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!name) {
        usage(stderr);
        return EXIT_USAGE;
    }
    rlp_reward_fn *fn = NULL;
    int rc;
    if (!strncmp(name, "http://", 7) || !strncmp(name, "https://", 8)) {
        if (options) {
            fprintf(stderr, "rlpost reward: --options is for built-ins, not HTTP verifiers\n");
            return EXIT_USAGE;
        }
        rlp_http_reward_options o = RLP_HTTP_REWARD_OPTIONS_INIT;
        o.url = name;
        rc = rlp_reward_fn_create_http(&fn, &o);
    } else {
        rc = rlp_reward_fn_create_builtin(&fn, name, options);
    }
    if (rc) {
        fprintf(stderr, "rlpost reward: %s\n", rlp_error_last());
        return rc == RLP_E_INVALID_ARG || rc == RLP_E_NOT_FOUND ? EXIT_USAGE : 1;
    }
    size_t len = 0;
    char *text = read_all(stdin, &len);
    if (!text) {
        rlp_reward_fn_free(fn);
        return 1;
    }
    rlp_reward_request req;
    memset(&req, 0, sizeof req);
    req.version = RLP_REWARD_REQUEST_VERSION;
    req.prompt_text = prompt;
    req.prompt_len = strlen(prompt);
    req.completion_text = text;
    req.completion_len = len;
    req.reference = reference; /* NULL: from the metadata's "reference" */
    req.metadata_json = metadata;
    rlp_reward_result res;
    rc = rlp_reward_fn_score_one(&res, fn, &req);
    free(text);
    rlp_reward_fn_free(fn);
    if (rc) {
        fprintf(stderr, "rlpost reward: %s\n", rlp_error_last());
        return 1;
    }
    utf8_clean(res.reason);
    printf("{\"score\": ");
    if (res.valid && isfinite(res.score))
        print_number(res.score);
    else
        printf("null");
    printf(", \"valid\": %s, \"reason\": ", res.valid ? "true" : "false");
    json_print_string(stdout, res.reason);
    printf("}\n");
    return 0;
}
