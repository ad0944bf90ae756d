/* A reward library for tests/cli/check_train_cli.sh, loaded by `rlpost
 * train` through "reward": {"library": ...} (dlopen). The score of a
 * completion is scale × its token count, so a test can check from
 * metrics.jsonl alone that these scores are what trained: the sum of the
 * rewards of a step equals scale × completion_tokens. Options:
 * {"scale": x} (default 1), {"invalid": true} marks every sample invalid
 * (a step then applies no optimizer step). */
#include <rlpost.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    double scale;
    int invalid;
} opts;

static int score(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    const opts *o = payload;
    if (o->invalid) {
        res->valid = 0;
        snprintf(res->reason, sizeof res->reason, "told to refuse every sample");
        return 0;
    }
    res->score = o->scale * (double)req->n_completion_tokens;
    res->valid = 1;
    return 0;
}

/* The value after "key": in a flat JSON object, or NULL. */
static const char *field(const char *json, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = json ? strstr(json, quoted) : NULL;
    if (!p)
        return NULL;
    p += strlen(quoted);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

int rlpost_reward_create(rlp_reward_fn **out, const char *options_json);

int rlpost_reward_create(rlp_reward_fn **out, const char *options_json)
{
    opts *o = calloc(1, sizeof *o);
    if (!o)
        return RLP_E_NOMEM;
    const char *v = field(options_json, "scale");
    o->scale = v ? strtod(v, NULL) : 1.0;
    v = field(options_json, "invalid");
    o->invalid = v && !strncmp(v, "true", 4);
    rlp_reward_options ro = RLP_REWARD_OPTIONS_INIT;
    ro.name = "reward_tokens";
    ro.n_threads = 1;
    ro.payload_free = free;
    int rc = rlp_reward_fn_create_callback(out, score, &ro, o);
    return rc;
}
