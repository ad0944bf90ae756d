/* The registry of built-in verifiers and the strict reader of their JSON
 * options: every key must be one the built-in (or the common set) reads,
 * so a misspelt option fails creation instead of silently keeping its
 * default. Scoring itself lives in one file per built-in. */
#include "reward/builtin.h"

#include "core/error.h"
#include "core/json_guard.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static json_t *take(rlpi_opts *o, const char *key)
{
    if (o->n_seen < RLPI_OPTS_MAX_KEYS)
        o->seen[o->n_seen++] = key;
    return o->obj ? json_object_get(o->obj, key) : NULL;
}

int rlpi_opt_double(rlpi_opts *o, const char *key, double *v)
{
    json_t *j = take(o, key);
    if (!j)
        return RLP_OK;
    if (!json_is_number(j) || !isfinite(json_number_value(j)))
        return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"%s\" must be a finite number",
                              o->builtin, key);
    *v = json_number_value(j);
    return RLP_OK;
}

int rlpi_opt_bool(rlpi_opts *o, const char *key, int *v)
{
    json_t *j = take(o, key);
    if (!j)
        return RLP_OK;
    if (!json_is_boolean(j))
        return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"%s\" must be true or false",
                              o->builtin, key);
    *v = json_is_true(j);
    return RLP_OK;
}

int rlpi_opt_uint(rlpi_opts *o, const char *key, uint32_t *v)
{
    json_t *j = take(o, key);
    if (!j)
        return RLP_OK;
    if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) > (json_int_t)UINT32_MAX)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "reward built-in %s: option \"%s\" must be an integer in [0, 4294967295]",
                              o->builtin, key);
    *v = (uint32_t)json_integer_value(j);
    return RLP_OK;
}

int rlpi_opt_string(rlpi_opts *o, const char *key, const char **v)
{
    json_t *j = take(o, key);
    if (!j)
        return RLP_OK;
    if (!json_is_string(j))
        return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"%s\" must be a string",
                              o->builtin, key);
    *v = json_string_value(j);
    return RLP_OK;
}

int rlpi_opt_choice(rlpi_opts *o, const char *key, const char *const *names, int n, int *v)
{
    const char *s = NULL;
    int rc = rlpi_opt_string(o, key, &s);
    if (rc || !s)
        return rc;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *v = i;
            return RLP_OK;
        }
    char list[256] = ""; /* "a, b or c" */
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 names[i]);
    return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"%s\" is \"%s\"; use %s", o->builtin, key,
                          s, list);
}

int rlpi_opt_extract(rlpi_opts *o, int *mode)
{
    static const char *const names[] = {"none", "answer_tag", "boxed", "last_line"};
    return rlpi_opt_choice(o, "extract", names, 4, mode);
}

typedef struct entry {
    const char *name;
    int (*create)(rlpi_scorer **out, rlpi_opts *o);
} entry;

static const entry builtins[] = {
    {"logic_rl_format", rlpi_builtin_logic_rl_format},
    {"kk_answer", rlpi_builtin_kk_answer},
    {"logic_rl", rlpi_builtin_logic_rl},
    {"gsm8k", rlpi_builtin_gsm8k},
    {"boxed_math", rlpi_builtin_boxed_math},
    {"countdown", rlpi_builtin_countdown},
    {"exact_match", rlpi_builtin_exact_match},
    {"regex_match", rlpi_builtin_regex_match},
    {"lookup_em", rlpi_builtin_lookup_em},
    {"search_format", rlpi_builtin_search_format},
    {"tool_call_format", rlpi_builtin_tool_call_format},
    {"reward_model", rlpi_builtin_reward_model},
};

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

const char *rlpi_builtin_name(size_t index)
{
    return index < N_BUILTINS ? builtins[index].name : NULL;
}

static int read_common(rlpi_opts *o, rlpi_builtin_common *c)
{
    static const char *const refine_names[] = {"none", "clip", "delta", "clip_delta"};
    double eta = 0.0;
    int rc;
    if ((rc = rlpi_opt_uint(o, "threads", &c->threads)) || (rc = rlpi_opt_uint(o, "timeout_ms", &c->timeout_ms)) ||
        (rc = rlpi_opt_double(o, "refine_eta", &eta)) || (rc = rlpi_opt_string(o, "name", &c->name)))
        return rc;
    if (c->threads > 64)
        return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"threads\" is %u (at most 64)",
                              o->builtin, c->threads);
    c->refine_eta = (float)eta;
    return rlpi_opt_choice(o, "refine", refine_names, 4, &c->refine);
}

/* The first key of the options that nobody read, or NULL. */
static const char *unknown_key(const rlpi_opts *o)
{
    const char *key;
    json_t *v;
    json_object_foreach(o->obj, key, v)
    {
        (void)v;
        int known = 0;
        for (size_t i = 0; i < o->n_seen && !known; i++)
            known = strcmp(o->seen[i], key) == 0;
        if (!known)
            return key;
    }
    return NULL;
}

int rlpi_builtin_create(rlpi_scorer **out, rlpi_builtin_common *common, json_t **opts_root, const char *name,
                        const char *options_json)
{
    *opts_root = NULL;
    const entry *e = NULL;
    for (size_t i = 0; i < N_BUILTINS && !e; i++)
        if (strcmp(builtins[i].name, name) == 0)
            e = &builtins[i];
    if (!e) {
        char known[256] = "";
        for (size_t i = 0; i < N_BUILTINS; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", builtins[i].name);
        return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_reward_fn_create_builtin: no built-in named \"%s\" (known: %s)",
                              name, known);
    }
    json_t *root = NULL;
    if (options_json) {
        int rc = rlpi_json_load_guarded(options_json, strlen(options_json), RLPI_JSON_MAX_DEPTH, "reward options",
                                        &root);
        if (rc) {
            char msg[512]; /* the message is about to be overwritten */
            snprintf(msg, sizeof msg, "%s", rlp_error_last());
            return rlpi_error_set(rc == RLP_E_NOMEM ? rc : RLP_E_INVALID_ARG, "rlp_reward_fn_create_builtin(%s): %s",
                                  name, msg);
        }
        if (!json_is_object(root)) {
            json_decref(root);
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "rlp_reward_fn_create_builtin(%s): options must be a JSON object", name);
        }
    }
    rlpi_opts o;
    memset(&o, 0, sizeof o);
    o.obj = root;
    o.builtin = e->name;
    memset(common, 0, sizeof *common);
    common->timeout_ms = 10000;
    common->name = e->name;
    int rc = read_common(&o, common);
    rlpi_scorer *sc = NULL;
    if (rc == RLP_OK)
        rc = e->create(&sc, &o);
    const char *bad = rc == RLP_OK && root ? unknown_key(&o) : NULL;
    if (bad) {
        char known[512] = "";
        for (size_t i = 0; i < o.n_seen; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", o.seen[i]);
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: unknown option \"%s\" (known: %s)", e->name, bad,
                            known);
    }
    if (rc) {
        rlpi_scorer_unref(sc);
        json_decref(root);
        return rc;
    }
    *out = sc;
    *opts_root = root;
    return RLP_OK;
}
