/* The public task API: options parsing, the three task kinds (K&K and
 * Countdown generators, JSONL datasets) behind one handle, prompt sets
 * that own their strings, and the cursor calls. Generation, loading,
 * ordering and templating live in their own files; this one only joins
 * them and must keep "the cursor moves only when a batch succeeds". */
#include "rlpost.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "task/arith.h"
#include "task/countdown.h"
#include "task/cursor.h"
#include "task/dataset.h"
#include "task/kk_generator.h"
#include "task/lookup.h"
#include "task/prompt_template.h"
#include "task/strbuf.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TASK_KK = 0, TASK_COUNTDOWN = 1, TASK_JSONL = 2, TASK_ARITH = 3, TASK_LOOKUP = 4 };

struct rlp_task {
    int kind;
    const char *name; /* "kk", "countdown", "arith", "jsonl": the cursor's owner name */
    char *label;      /* metadata "task" value, or NULL */
    uint64_t seed;
    uint64_t size;    /* items per epoch, 0 = endless */
    uint64_t fingerprint;
    rlpi_template tmpl;
    rlpi_order order;
    rlpi_cursor cursor;
    rlpi_kk_params kk;
    rlpi_kk_curriculum kk_curriculum; /* prompts == 0: none */
    rlpi_cd_params cd;
    rlpi_arith_set arith; /* the split's problems (arith) */
    rlpi_dataset *data;
    rlpi_lookup_kb *kb;    /* lookup: the knowledge base questions are asked about */
    int min_hops, max_hops; /* lookup */
};

typedef struct set_entry {
    rlp_task_item item; /* strings point into the fields below */
    char *question, *reference, *metadata, *text;
    int32_t *tokens;
} set_entry;

struct rlp_prompt_set {
    size_t n;
    rlp_prompt *prompts; /* (n) */
    set_entry *entries;  /* (n) */
};

/* ---- options ------------------------------------------------------------- */

static const char *const template_keys[] = {"template", "system_prompt", "user_template",
                                            "assistant_prefix", "chat"};

static int key_in(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i]))
            return 1;
    return 0;
}

static int check_keys(const json_t *opts, const char *what, const char *const *keys, size_t n_keys)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)opts, key, v)
    {
        (void)v;
        if (!key_in(key, keys, n_keys) &&
            !key_in(key, template_keys, sizeof template_keys / sizeof template_keys[0]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s options: unknown key \"%.64s\"", what, key);
    }
    return RLP_OK;
}

static int parse_options(json_t **out, const char *options_json, const char *what)
{
    *out = NULL;
    if (!options_json)
        return RLP_OK;
    int rc = rlpi_json_load_guarded(options_json, strlen(options_json), 8, what, out);
    if (rc == RLP_E_FORMAT) {
        /* bad options are a bad argument, not a bad file */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", rlp_error_last());
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s", msg);
    }
    if (rc)
        return rc;
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: options must be a JSON object", what);
    }
    return RLP_OK;
}

/* An integer option in [lo, hi]; absent leaves *v as it is. */
static int int_opt(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
    const json_t *j = o ? json_object_get(o, key) : NULL;
    if (!j)
        return RLP_OK;
    if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
        return rlpi_error_set(RLP_E_INVALID_ARG, "task options: \"%s\" must be an integer in [%lld, %lld]",
                              key, (long long)lo, (long long)hi);
    *v = json_integer_value(j);
    return RLP_OK;
}

static int bool_opt(const json_t *o, const char *key, int *v)
{
    const json_t *j = o ? json_object_get(o, key) : NULL;
    if (!j)
        return RLP_OK;
    if (!json_is_boolean(j))
        return rlpi_error_set(RLP_E_INVALID_ARG, "task options: \"%s\" must be true or false", key);
    *v = json_is_true(j);
    return RLP_OK;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* Seed, shuffle and the order; size must be set. */
static int common_options(rlp_task *t, const json_t *o)
{
    int64_t seed = 0;
    int shuffle = 1;
    int rc;
    if ((rc = int_opt(o, "seed", 0, INT64_MAX, &seed)) || (rc = bool_opt(o, "shuffle", &shuffle)))
        return rc;
    t->seed = (uint64_t)seed;
    return rlpi_order_init(&t->order, t->size, t->seed, shuffle);
}

static int kk_options(rlp_task *t, const json_t *o)
{
    static const char *const keys[] = {"seed", "size", "shuffle", "people", "min_people", "max_people", "width",
                                       "curriculum_start", "curriculum_end", "curriculum_prompts"};
    int rc = check_keys(o, "kk", keys, sizeof keys / sizeof keys[0]);
    int64_t people = 0, lo = 3, hi = 7, width = 2, size = 0, c_start = 0, c_end = 0, c_prompts = 0;
    if (rc || (rc = int_opt(o, "people", RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, &people)) ||
        (rc = int_opt(o, "min_people", RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, &lo)) ||
        (rc = int_opt(o, "max_people", RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, &hi)) ||
        (rc = int_opt(o, "width", 2, RLPI_KK_MAX_WIDTH, &width)) ||
        (rc = int_opt(o, "size", 0, UINT32_MAX, &size)) ||
        (rc = int_opt(o, "curriculum_start", RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, &c_start)) ||
        (rc = int_opt(o, "curriculum_end", RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, &c_end)) ||
        (rc = int_opt(o, "curriculum_prompts", 1, INT64_MAX, &c_prompts)))
        return rc;
    if (people && (json_object_get(o, "min_people") || json_object_get(o, "max_people")))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "kk options: give \"people\" or \"min_people\"/\"max_people\", not both");
    if (people)
        lo = hi = people;
    int curriculum = c_start || c_end || c_prompts;
    if (curriculum) {
        if (!c_start || !c_end || !c_prompts)
            return rlpi_error_set(RLP_E_INVALID_ARG, "kk options: a curriculum needs all of \"curriculum_start\", "
                                                     "\"curriculum_end\" and \"curriculum_prompts\"");
        if (json_object_get(o, "people") || json_object_get(o, "min_people") || json_object_get(o, "max_people"))
            return rlpi_error_set(RLP_E_INVALID_ARG, "kk options: the curriculum sets the people count; drop "
                                                     "\"people\", \"min_people\" and \"max_people\"");
        if (c_end < c_start)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "kk options: \"curriculum_end\" (%lld) is below \"curriculum_start\" (%lld)",
                                  (long long)c_end, (long long)c_start);
        lo = c_start;
        hi = c_end;
        t->kk_curriculum = (rlpi_kk_curriculum){(int)c_start, (int)c_end, (uint64_t)c_prompts};
    }
    t->kk = (rlpi_kk_params){(int)lo, (int)hi, (int)width};
    if ((rc = rlpi_kk_params_check(&t->kk)))
        return rlpi_error_wrap("kk options");
    t->size = (uint64_t)size;
    char buf[160];
    if (curriculum) /* the cursor of one curriculum must not restore into another */
        snprintf(buf, sizeof buf, "kk v1 curriculum %d-%d over %lld width %d", t->kk.min_people, t->kk.max_people,
                 (long long)c_prompts, t->kk.width);
    else
        snprintf(buf, sizeof buf, "kk v1 people %d-%d width %d", t->kk.min_people, t->kk.max_people,
                 t->kk.width);
    t->fingerprint = fnv_str(UINT64_C(0xcbf29ce484222325), buf);
    return common_options(t, o);
}

/* The lookup task: its KB comes from "kb_seed" (default: "seed"), so a
 * held-out split by seed asks about entities training never saw; the
 * metadata names (kb_seed, entities) for the environment to rebuild it. */
static int lookup_options(rlp_task *t, const json_t *o)
{
    static const char *const keys[] = {"seed", "size", "shuffle", "entities", "min_hops", "max_hops", "kb_seed"};
    int rc = check_keys(o, "lookup", keys, sizeof keys / sizeof keys[0]);
    int64_t entities = 200, lo = 2, hi = 4, size = 0, seed = 0, kb_seed = -1;
    if (rc || (rc = int_opt(o, "entities", RLPI_LOOKUP_MIN_ENTITIES, RLPI_LOOKUP_MAX_ENTITIES, &entities)) ||
        (rc = int_opt(o, "min_hops", 1, RLPI_LOOKUP_MAX_HOPS, &lo)) ||
        (rc = int_opt(o, "max_hops", 1, RLPI_LOOKUP_MAX_HOPS, &hi)) ||
        (rc = int_opt(o, "size", 0, UINT32_MAX, &size)) || (rc = int_opt(o, "seed", 0, INT64_MAX, &seed)) ||
        (rc = int_opt(o, "kb_seed", 0, INT64_MAX, &kb_seed)))
        return rc;
    if (hi < lo)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lookup options: \"max_hops\" (%lld) is below \"min_hops\" (%lld)",
                              (long long)hi, (long long)lo);
    if (kb_seed < 0)
        kb_seed = seed;
    t->min_hops = (int)lo;
    t->max_hops = (int)hi;
    t->size = (uint64_t)size;
    if ((rc = rlpi_lookup_kb_generate(&t->kb, (uint64_t)kb_seed, (size_t)entities)))
        return rlpi_error_wrap("lookup options");
    char buf[160];
    snprintf(buf, sizeof buf, "lookup v1 kb %lld entities %lld hops %d-%d", (long long)kb_seed, (long long)entities,
             t->min_hops, t->max_hops);
    t->fingerprint = fnv_str(UINT64_C(0xcbf29ce484222325), buf);
    return common_options(t, o);
}

static int countdown_options(rlp_task *t, const json_t *o)
{
    static const char *const keys[] = {"seed",       "size",       "shuffle",    "count",
                                       "min_count",  "max_count",  "min_number", "max_number",
                                       "min_target", "max_target", "integer_steps"};
    int rc = check_keys(o, "countdown", keys, sizeof keys / sizeof keys[0]);
    int64_t count = 0, lo = 3, hi = 4, nlo = 1, nhi = 99, tlo = 10, thi = 100, size = 0;
    int integer_steps = 1;
    if (rc || (rc = int_opt(o, "count", 2, RLPI_CD_MAX_NUMBERS, &count)) ||
        (rc = int_opt(o, "min_count", 2, RLPI_CD_MAX_NUMBERS, &lo)) ||
        (rc = int_opt(o, "max_count", 2, RLPI_CD_MAX_NUMBERS, &hi)) ||
        (rc = int_opt(o, "min_number", 1, 10000, &nlo)) ||
        (rc = int_opt(o, "max_number", 1, 10000, &nhi)) ||
        (rc = int_opt(o, "min_target", 1, 1000000000, &tlo)) ||
        (rc = int_opt(o, "max_target", 1, 1000000000, &thi)) ||
        (rc = bool_opt(o, "integer_steps", &integer_steps)) ||
        (rc = int_opt(o, "size", 0, UINT32_MAX, &size)))
        return rc;
    if (count && (json_object_get(o, "min_count") || json_object_get(o, "max_count")))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "countdown options: give \"count\" or \"min_count\"/\"max_count\", not both");
    if (count)
        lo = hi = count;
    t->cd = (rlpi_cd_params){(int)lo, (int)hi, nlo, nhi, tlo, thi, integer_steps};
    if ((rc = rlpi_cd_params_check(&t->cd)))
        return rlpi_error_wrap("countdown options");
    t->size = (uint64_t)size;
    char buf[192];
    snprintf(buf, sizeof buf, "countdown v1 count %d-%d numbers %lld-%lld target %lld-%lld int %d",
             t->cd.min_count, t->cd.max_count, (long long)nlo, (long long)nhi, (long long)tlo,
             (long long)thi, integer_steps);
    t->fingerprint = fnv_str(UINT64_C(0xcbf29ce484222325), buf);
    return common_options(t, o);
}

/* The problems of one split, in enumeration order: a finite task whose
 * epochs the order shuffles (seed), like a dataset's. */
static int arith_options(rlp_task *t, const json_t *o)
{
    static const char *const keys[] = {"seed", "shuffle", "ops", "max_add", "max_mul", "holdout", "split"};
    int rc = check_keys(o, "arith", keys, sizeof keys / sizeof keys[0]);
    int64_t max_add = 30, max_mul = 12, holdout = 4;
    rlpi_arith_params p = {RLPI_ARITH_ADD | RLPI_ARITH_MUL, 0, 0, 0, RLPI_ARITH_ALL};
    if (rc || (rc = int_opt(o, "max_add", 1, RLPI_ARITH_MAX_OPERAND, &max_add)) ||
        (rc = int_opt(o, "max_mul", 2, RLPI_ARITH_MAX_OPERAND, &max_mul)) ||
        (rc = int_opt(o, "holdout", 2, RLPI_ARITH_MAX_HOLDOUT, &holdout)))
        return rc;
    const json_t *ops = o ? json_object_get(o, "ops") : NULL;
    if (ops) {
        p.ops = 0;
        size_t i;
        const json_t *v;
        if (!json_is_array(ops) || json_array_size(ops) == 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "arith options: \"ops\" must be a non-empty array of "
                                                     "\"+\", \"-\", \"*\"");
        json_array_foreach(ops, i, v)
        {
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            unsigned bit = !strcmp(s, "+") ? RLPI_ARITH_ADD : !strcmp(s, "-") ? RLPI_ARITH_SUB
                         : !strcmp(s, "*") ? RLPI_ARITH_MUL : 0;
            if (!bit)
                return rlpi_error_set(RLP_E_INVALID_ARG, "arith options: ops[%zu] is not \"+\", \"-\" or \"*\"",
                                      i);
            p.ops |= bit;
        }
    }
    const json_t *split = o ? json_object_get(o, "split") : NULL;
    if (split) {
        const char *s = json_is_string(split) ? json_string_value(split) : "";
        p.split = !strcmp(s, "all") ? RLPI_ARITH_ALL : !strcmp(s, "train") ? RLPI_ARITH_TRAIN
                : !strcmp(s, "eval") ? RLPI_ARITH_EVAL : -1;
    }
    p.max_add = (int)max_add;
    p.max_mul = (int)max_mul;
    p.holdout = (int)holdout;
    if ((rc = rlpi_arith_enumerate(&t->arith, &p)))
        return rlpi_error_wrap("arith options");
    t->size = t->arith.n;
    char buf[128];
    snprintf(buf, sizeof buf, "arith v1 ops %u add %d mul %d holdout %d split %d", p.ops, p.max_add, p.max_mul,
             p.holdout, p.split);
    t->fingerprint = fnv_str(UINT64_C(0xcbf29ce484222325), buf);
    return common_options(t, o);
}

/* Metadata keys the task itself writes; a dataset field may not take them. */
static const char *const reserved_keys[] = {"reference", "task", "index", "line", "epoch",
                                            "assistant_prefix", "answer_type"};

static int jsonl_mapping(rlpi_dataset_mapping *m, const json_t *o, char **label, const char **preset)
{
    memset(m, 0, sizeof *m);
    m->prompt_field = "question";
    m->reference_field = "answer";
    *preset = "none";
    const json_t *fmt = o ? json_object_get(o, "format") : NULL;
    if (fmt) {
        if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "kk"))
            return rlpi_error_set(RLP_E_INVALID_ARG, "jsonl options: \"format\" must be \"kk\"");
        m->prompt_field = "quiz";
        m->reference_field = "solution_text_format";
        m->kk = 1;
        static const char *const kk_fields[] = {"names", "solution", "solution_text_format",
                                                "statements"};
        for (size_t i = 0; i < 4; i++)
            m->extra_fields[m->n_extra++] = kk_fields[i];
        *preset = "logic-rl";
        if (!(*label = strdup("kk")))
            return rlpi_error_set(RLP_E_NOMEM, "jsonl options: out of memory");
    }
    const json_t *v;
    if ((v = o ? json_object_get(o, "prompt_field") : NULL)) {
        if (!json_is_string(v) || !json_string_length(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "jsonl options: \"prompt_field\" must be a non-empty string");
        m->prompt_field = json_string_value(v);
    }
    if ((v = o ? json_object_get(o, "reference_field") : NULL)) {
        if (json_is_null(v))
            m->reference_field = NULL;
        else if (json_is_string(v) && json_string_length(v))
            m->reference_field = json_string_value(v);
        else
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "jsonl options: \"reference_field\" must be a non-empty string or null");
    }
    if ((v = o ? json_object_get(o, "metadata_fields") : NULL)) {
        if (!json_is_array(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "jsonl options: \"metadata_fields\" must be an array");
        size_t i;
        json_t *f;
        json_array_foreach(v, i, f)
        {
            if (!json_is_string(f) || !json_string_length(f))
                return rlpi_error_set(RLP_E_INVALID_ARG,
                                      "jsonl options: metadata_fields[%zu] is not a non-empty string", i);
            const char *name = json_string_value(f);
            if (key_in(name, reserved_keys, sizeof reserved_keys / sizeof reserved_keys[0]))
                return rlpi_error_set(RLP_E_INVALID_ARG,
                                      "jsonl options: metadata field \"%.64s\" would overwrite the task's own key",
                                      name);
            if (key_in(name, m->extra_fields, m->n_extra))
                continue;
            if (m->n_extra == RLPI_DATASET_MAX_EXTRA)
                return rlpi_error_set(RLP_E_INVALID_ARG, "jsonl options: more than %d metadata fields",
                                      RLPI_DATASET_MAX_EXTRA);
            m->extra_fields[m->n_extra++] = name;
        }
    }
    if ((v = o ? json_object_get(o, "task") : NULL)) {
        if (!json_is_string(v) || !json_string_length(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "jsonl options: \"task\" must be a non-empty string");
        free(*label);
        if (!(*label = strdup(json_string_value(v))))
            return rlpi_error_set(RLP_E_NOMEM, "jsonl options: out of memory");
    }
    int64_t max_line = 0, max_records = 0;
    int rc;
    if ((rc = int_opt(o, "max_line_bytes", 1, INT64_MAX, &max_line)) ||
        (rc = int_opt(o, "max_records", 1, (int64_t)RLPI_DATASET_MAX_RECORDS, &max_records)) ||
        (rc = bool_opt(o, "skip_invalid", &m->skip_invalid)))
        return rc;
    m->max_line_bytes = (size_t)max_line;
    m->max_records = (uint64_t)max_records;
    return RLP_OK;
}

/* ---- handles ------------------------------------------------------------- */

RLP_API void rlp_task_free(rlp_task *task)
{
    if (!task)
        return;
    rlpi_template_free(&task->tmpl);
    rlpi_order_free(&task->order);
    rlpi_dataset_free(task->data);
    rlpi_arith_set_free(&task->arith);
    rlpi_lookup_kb_free(task->kb);
    free(task->label);
    free(task);
}

RLP_API int rlp_task_create(rlp_task **out, const char *name, const char *options_json)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(name, "name is NULL");
    int kind = !strcmp(name, "kk")          ? TASK_KK
             : !strcmp(name, "countdown") ? TASK_COUNTDOWN
             : !strcmp(name, "arith")     ? TASK_ARITH
             : !strcmp(name, "lookup")    ? TASK_LOOKUP
                                          : -1;
    if (kind < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlp_task_create: unknown task \"%.64s\" (kk, countdown, arith, lookup)", name);
    json_t *o = NULL;
    int rc = parse_options(&o, options_json, "rlp_task_create options");
    if (rc)
        return rc;
    rlp_task *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(o);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_task_create: out of memory");
    }
    t->kind = kind;
    t->name = kind == TASK_KK ? "kk" : kind == TASK_COUNTDOWN ? "countdown" : kind == TASK_LOOKUP ? "lookup" : "arith";
    rc = kind == TASK_KK          ? kk_options(t, o)
       : kind == TASK_COUNTDOWN ? countdown_options(t, o)
       : kind == TASK_LOOKUP    ? lookup_options(t, o)
                                : arith_options(t, o);
    if (!rc)
        rc = rlpi_template_from_options(&t->tmpl, o,
                                        kind == TASK_KK          ? "logic-rl"
                                        : kind == TASK_COUNTDOWN ? "tinyzero"
                                        : kind == TASK_LOOKUP    ? "search"
                                                                 : "none");
    if (!rc && !(t->label = strdup(t->name)))
        rc = rlpi_error_set(RLP_E_NOMEM, "rlp_task_create: out of memory");
    json_decref(o);
    if (rc) {
        rlp_task_free(t);
        return rlpi_error_wrap("rlp_task_create(\"%s\")", name);
    }
    *out = t;
    return RLP_OK;
}

RLP_API int rlp_task_open_jsonl(rlp_task **out, const char *path, const char *options_json)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    static const char *const keys[] = {"seed",         "shuffle",        "prompt_field",
                                       "reference_field", "metadata_fields", "task",
                                       "format",       "skip_invalid",   "max_line_bytes",
                                       "max_records"};
    json_t *o = NULL;
    int rc = parse_options(&o, options_json, "rlp_task_open_jsonl options");
    if (rc)
        return rc;
    rlp_task *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(o);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_task_open_jsonl: out of memory");
    }
    t->kind = TASK_JSONL;
    t->name = "jsonl";
    rlpi_dataset_mapping m;
    const char *preset = "none";
    if (!(rc = check_keys(o, "jsonl", keys, sizeof keys / sizeof keys[0])) &&
        !(rc = jsonl_mapping(&m, o, &t->label, &preset)) &&
        !(rc = rlpi_template_from_options(&t->tmpl, o, preset)) &&
        !(rc = rlpi_dataset_load(&t->data, path, &m))) {
        t->size = t->data->n;
        t->fingerprint = t->data->fingerprint;
        rc = common_options(t, o);
    }
    json_decref(o); /* the mapping's strings point into o: used up by now */
    if (rc) {
        rlp_task_free(t);
        return rlpi_error_wrap("rlp_task_open_jsonl");
    }
    *out = t;
    return RLP_OK;
}

RLP_API int rlp_task_size(uint64_t *out_size, const rlp_task *task)
{
    RLPI_CHECK_ARG(out_size && task, "NULL argument");
    *out_size = task->size;
    return RLP_OK;
}

RLP_API int rlp_task_skipped(uint64_t *out_count, const rlp_task *task)
{
    RLPI_CHECK_ARG(out_count && task, "NULL argument");
    *out_count = task->data ? task->data->skipped : 0;
    return RLP_OK;
}

RLP_API int rlp_task_epoch(uint64_t *out_epoch, const rlp_task *task)
{
    RLPI_CHECK_ARG(out_epoch && task, "NULL argument");
    *out_epoch = task->cursor.epoch;
    return RLP_OK;
}

RLP_API int rlp_task_position(uint64_t *out_position, const rlp_task *task)
{
    RLPI_CHECK_ARG(out_position && task, "NULL argument");
    *out_position = task->cursor.position;
    return RLP_OK;
}

static rlpi_cursor_owner owner_of(const rlp_task *t)
{
    return (rlpi_cursor_owner){t->name, t->seed, t->size, t->fingerprint};
}

RLP_API int rlp_task_cursor_save(const rlp_task *task, char *buf, size_t cap, size_t *len_out)
{
    RLPI_CHECK_ARG(task, "task is NULL");
    RLPI_CHECK_ARG(len_out, "len_out is NULL");
    RLPI_CHECK_ARG(buf || cap == 0, "buf is NULL");
    rlpi_cursor_owner owner = owner_of(task);
    int rc = rlpi_cursor_save(&task->cursor, &owner, buf, cap, len_out);
    return rc ? rlpi_error_wrap("rlp_task_cursor_save") : RLP_OK;
}

RLP_API int rlp_task_cursor_restore(rlp_task *task, const char *json, size_t len)
{
    RLPI_CHECK_ARG(task, "task is NULL");
    RLPI_CHECK_ARG(json || len == 0, "json is NULL");
    rlpi_cursor_owner owner = owner_of(task);
    int rc = rlpi_cursor_load(&task->cursor, &owner, json ? json : "", len);
    return rc ? rlpi_error_wrap("rlp_task_cursor_restore") : RLP_OK;
}

/* ---- items --------------------------------------------------------------- */

static char *dump_compact(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* Problem `index` of a generator, drawn at cursor c: question, reference,
 * metadata object. */
static int generate_item(const rlp_task *t, rlpi_cursor c, uint64_t index, set_entry *e, json_t *meta)
{
    int rc;
    int fail = 0;
    if (t->kind == TASK_KK) {
        rlpi_kk_params kp = t->kk;
        if (t->kk_curriculum.prompts) {
            /* the stream position over all epochs (saturating): a pure
             * function of the cursor, so resume continues the curriculum */
            uint64_t p = c.position;
            if (t->size)
                p = c.epoch > (UINT64_MAX - c.position) / t->size ? UINT64_MAX : c.epoch * t->size + c.position;
            kp.min_people = kp.max_people = rlpi_kk_curriculum_people(&t->kk_curriculum, p);
        }
        rlpi_kk_puzzle pz;
        if ((rc = rlpi_kk_generate(&pz, &kp, t->seed, index)))
            return rc;
        e->question = rlpi_kk_render_quiz(&pz);
        e->reference = rlpi_kk_render_solution(&pz);
        char *statements = rlpi_kk_render_statements(&pz);
        json_t *names = json_array(), *sol = json_array();
        for (int i = 0; names && sol && i < pz.n_people; i++) {
            fail |= json_array_append_new(names, json_string(pz.names[i]));
            fail |= json_array_append_new(sol, json_boolean((pz.solution >> i) & 1u));
        }
        fail |= !e->reference || !statements;
        fail |= json_object_set_new(meta, "names", names);
        fail |= json_object_set_new(meta, "solution", sol);
        fail |= json_object_set_new(meta, "solution_text_format", json_string(e->reference ? e->reference : ""));
        fail |= json_object_set_new(meta, "statements", json_string(statements ? statements : ""));
        fail |= json_object_set_new(meta, "answer_type", json_string("kk")); /* for the format reward */
        free(statements);
    } else if (t->kind == TASK_LOOKUP) {
        rlpi_lookup_question q;
        if ((rc = rlpi_lookup_question_generate(&q, t->kb, t->seed, index, t->min_hops, t->max_hops)))
            return rc;
        e->question = q.text;
        e->reference = strdup(q.answer);
        fail |= json_object_set_new(meta, "hops", json_integer(q.hops));
        fail |= json_object_set_new(meta, "kb_seed", json_integer((json_int_t)t->kb->seed));
        fail |= json_object_set_new(meta, "entities", json_integer((json_int_t)t->kb->n));
        fail |= json_object_set_new(meta, "answer_type", json_string("lookup"));
    } else if (t->kind == TASK_ARITH) {
        const rlpi_arith_problem *pb = &t->arith.items[index];
        char q[64], ref[32];
        rlpi_arith_render(pb, q, sizeof q);
        snprintf(ref, sizeof ref, "%lld", (long long)rlpi_arith_answer(pb));
        e->question = strdup(q);
        e->reference = strdup(ref);
        fail |= json_object_set_new(meta, "answer_type", json_string("number"));
        fail |= json_object_set_new(meta, "op", json_string(rlpi_arith_op_name(pb->op)));
        fail |= json_object_set_new(meta, "a", json_integer(pb->a));
        fail |= json_object_set_new(meta, "b", json_integer(pb->b));
    } else {
        rlpi_cd_problem pb;
        if ((rc = rlpi_cd_generate(&pb, &t->cd, t->seed, index)))
            return rc;
        rlpi_sb q = {0};
        json_t *nums = json_array();
        /* TinyZero's question, numbers printed as a Python list does */
        rlpi_sb_puts(&q, "Using the numbers [");
        for (int i = 0; i < pb.count; i++) {
            rlpi_sb_printf(&q, "%s%lld", i ? ", " : "", (long long)pb.numbers[i]);
            fail |= json_array_append_new(nums, json_integer(pb.numbers[i]));
        }
        rlpi_sb_printf(&q, "], create an equation that equals %lld.", (long long)pb.target);
        rlpi_sb_puts(&q, " You can use basic arithmetic operations (+, -, *, /) and each number can "
                         "only be used once. Show your work in <think> </think> tags. And return the "
                         "final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 "
                         "</answer>.");
        e->question = rlpi_sb_take(&q);
        e->reference = strdup(pb.solution);
        fail |= json_object_set_new(meta, "numbers", nums);
        fail |= json_object_set_new(meta, "target", json_integer(pb.target));
        fail |= json_object_set_new(meta, "answer_type", json_string("equation")); /* for the format reward */
    }
    if (fail || !e->question || !e->reference)
        return rlpi_error_set(RLP_E_NOMEM, "task: out of memory");
    return RLP_OK;
}

static int dataset_item(const rlp_task *t, uint64_t index, set_entry *e, json_t *meta)
{
    const rlpi_dataset *d = t->data;
    const char *ref = rlpi_dataset_reference(d, (size_t)index);
    e->question = strdup(rlpi_dataset_prompt(d, (size_t)index));
    e->reference = ref ? strdup(ref) : NULL;
    int fail = !e->question || (ref && !e->reference);
    if (d->extras[index])
        fail |= json_object_update(meta, d->extras[index]);
    fail |= json_object_set_new(meta, "line", json_integer((json_int_t)d->line[index]));
    return fail ? rlpi_error_set(RLP_E_NOMEM, "task: out of memory") : RLP_OK;
}

static int make_entry(const rlp_task *t, rlpi_cursor c, uint64_t index, const rlp_tokenizer *tok,
                      set_entry *e, rlp_prompt *p)
{
    json_t *meta = json_object();
    if (!meta)
        return rlpi_error_set(RLP_E_NOMEM, "task: out of memory");
    /* "reference" first: the key every reward reads */
    int fail = json_object_set_new(meta, "reference", json_null());
    if (t->label)
        fail |= json_object_set_new(meta, "task", json_string(t->label));
    int rc = fail ? rlpi_error_set(RLP_E_NOMEM, "task: out of memory")
         : t->kind == TASK_JSONL ? dataset_item(t, index, e, meta)
                                 : generate_item(t, c, index, e, meta);
    if (rc) {
        json_decref(meta);
        return rc;
    }
    if (e->reference)
        fail |= json_object_set_new(meta, "reference", json_string(e->reference));
    else
        fail |= json_object_del(meta, "reference");
    fail |= json_object_set_new(meta, "index", json_integer((json_int_t)index));
    fail |= json_object_set_new(meta, "epoch", json_integer((json_int_t)c.epoch));
    if (t->tmpl.assistant_prefix)
        fail |= json_object_set_new(meta, "assistant_prefix", json_string(t->tmpl.assistant_prefix));
    if (fail || !(e->metadata = dump_compact(meta)))
        return rlpi_error_set(RLP_E_NOMEM, "task: out of memory");

    size_t n_tokens = 0;
    if (tok && t->tmpl.chat) {
        if ((rc = rlpi_template_encode(&t->tmpl, tok, e->question, &e->tokens, &n_tokens, &e->text)))
            return rc;
    } else if (!(e->text = rlpi_template_plain(&t->tmpl, e->question))) {
        return rlpi_error_set(RLP_E_NOMEM, "task: out of memory");
    }
    e->item = (rlp_task_item){RLP_TASK_ITEM_VERSION, c.epoch, c.position, index,
                              e->question, e->reference, e->metadata};
    *p = (rlp_prompt){e->tokens, n_tokens, e->text, 0, e->metadata, NULL};
    return RLP_OK;
}

RLP_API void rlp_prompt_set_free(rlp_prompt_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; set->entries && i < set->n; i++) {
        set_entry *e = &set->entries[i];
        free(e->question);
        free(e->reference);
        free(e->metadata);
        free(e->text);
        free(e->tokens);
    }
    free(set->entries);
    free(set->prompts);
    free(set);
}

RLP_API int rlp_task_next_batch(rlp_prompt_set **out, rlp_task *task, size_t n,
                                const rlp_tokenizer *tok)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(task, "task is NULL");
    RLPI_CHECK_ARG(n > 0, "n is 0");
    RLPI_CHECK_ARG(n <= SIZE_MAX / sizeof(set_entry), "n is too large");
    rlp_prompt_set *set = calloc(1, sizeof *set);
    if (set) {
        set->n = n;
        set->prompts = calloc(n, sizeof *set->prompts);
        set->entries = calloc(n, sizeof *set->entries);
    }
    if (!set || !set->prompts || !set->entries) {
        rlp_prompt_set_free(set);
        return rlpi_error_set(RLP_E_NOMEM, "rlp_task_next_batch: out of memory");
    }
    /* work on a copy: the task's cursor moves only if the whole batch is made */
    rlpi_cursor c = task->cursor;
    int rc = RLP_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        uint64_t index;
        if (!(rc = rlpi_order_item(&task->order, c, &index)) &&
            !(rc = make_entry(task, c, index, tok, &set->entries[i], &set->prompts[i])))
            rc = rlpi_cursor_advance(&c, task->size);
    }
    if (rc) {
        rlp_prompt_set_free(set);
        return rlpi_error_wrap("rlp_task_next_batch");
    }
    task->cursor = c;
    *out = set;
    return RLP_OK;
}

RLP_API int rlp_prompt_set_size(size_t *out_count, const rlp_prompt_set *set)
{
    RLPI_CHECK_ARG(out_count && set, "NULL argument");
    *out_count = set->n;
    return RLP_OK;
}

RLP_API const rlp_prompt *rlp_prompt_set_prompts(const rlp_prompt_set *set)
{
    return set ? set->prompts : NULL;
}

RLP_API int rlp_prompt_set_item(rlp_task_item *out, const rlp_prompt_set *set, size_t index)
{
    RLPI_CHECK_ARG(out && set, "NULL argument");
    RLPI_CHECK_ARG(out->version == RLP_TASK_ITEM_VERSION, "out->version is not RLP_TASK_ITEM_VERSION");
    RLPI_CHECK_ARG(index < set->n, "index out of range");
    *out = set->entries[index].item;
    return RLP_OK;
}
