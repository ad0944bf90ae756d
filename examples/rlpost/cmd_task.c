/* `rlpost task kk|countdown --seed S --n N [--people K] [--options JSON]`:
 * generated problems as JSONL on stdout, one object per line with the
 * problem text ("prompt"), its reference answer and the metadata a reward
 * function receives. --options adds task options (see rlp_task_create()),
 * e.g. '{"width": 3}'; keys given as flags must not be repeated there. */
#include "commands.h"
#include "json_out.h"

#include "rlpost.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: rlpost task kk|countdown [--seed S] [--n N] [--people K] [--options JSON]\n");
}

/* A decimal integer in [lo, hi], the whole string. */
static int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int cmd_task(int argc, char **argv)
{
    const char *name = NULL, *extra = NULL;
    long long seed = 0, n = 10, people = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--seed") && has_value) {
            if (!parse_int(argv[++i], 0, (long long)(~0ULL >> 1), &seed))
                return usage(), EXIT_USAGE;
        } else if (!strcmp(a, "--n") && has_value) {
            if (!parse_int(argv[++i], 1, 100000000, &n))
                return usage(), EXIT_USAGE;
        } else if (!strcmp(a, "--people") && has_value) {
            if (!parse_int(argv[++i], 2, 8, &people))
                return usage(), EXIT_USAGE;
        } else if (!strcmp(a, "--options") && has_value) {
            extra = argv[++i];
        } else if (!name && a[0] != '-') {
            name = a;
        } else {
            usage();
            return EXIT_USAGE;
        }
    }
    if (!name || (people && strcmp(name, "kk"))) {
        usage();
        return EXIT_USAGE;
    }
    /* the flags as JSON keys, followed by the keys of --options */
    const char *rest = "}";
    if (extra) {
        const char *p = extra + strspn(extra, " \t\r\n");
        if (*p != '{') {
            fprintf(stderr, "rlpost task: --options must be a JSON object\n");
            return EXIT_USAGE;
        }
        p++;
        p += strspn(p, " \t\r\n");
        rest = p;
    }
    size_t cap = strlen(rest) + 128;
    char *opts = malloc(cap);
    if (!opts)
        return 1;
    int w = snprintf(opts, cap, "{\"seed\": %lld", seed);
    if (people)
        w += snprintf(opts + w, cap - (size_t)w, ", \"people\": %lld", people);
    snprintf(opts + w, cap - (size_t)w, "%s%s", *rest == '}' ? "" : ", ", rest);

    rlp_task *task;
    int rc = rlp_task_create(&task, name, opts);
    free(opts);
    if (rc) {
        fprintf(stderr, "rlpost task: %s\n", rlp_error_last());
        return rc == RLP_E_INVALID_ARG ? EXIT_USAGE : 1;
    }
    for (long long done = 0; done < n;) {
        size_t chunk = n - done > 256 ? 256 : (size_t)(n - done);
        rlp_prompt_set *set;
        if ((rc = rlp_task_next_batch(&set, task, chunk, NULL))) {
            fprintf(stderr, "rlpost task: %s\n", rlp_error_last());
            rlp_task_free(task);
            return 1;
        }
        for (size_t i = 0; i < chunk; i++) {
            rlp_task_item it = {RLP_TASK_ITEM_VERSION, 0, 0, 0, NULL, NULL, NULL};
            rlp_prompt_set_item(&it, set, i);
            printf("{\"prompt\": ");
            json_print_string(stdout, it.question);
            printf(", \"reference\": ");
            json_print_string(stdout, it.reference ? it.reference : "");
            printf(", \"metadata\": %s}\n", it.metadata_json);
        }
        rlp_prompt_set_free(set);
        done += (long long)chunk;
    }
    rlp_task_free(task);
    return fflush(stdout) == 0 ? 0 : 1;
}
