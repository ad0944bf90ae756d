/* The key table of `rlpost train`'s configuration and its strict merge:
 * every key of the effective config comes from the defaults below, so a
 * misspelt key or a value of the wrong JSON type is refused by name instead
 * of silently ignored. Semantic checks (ranges, files) live in cmd_train.c. */
#define _POSIX_C_SOURCE 200809L
#include "train_config.h"

#include <stdio.h>
#include <string.h>

/* Keep in step with docs/configuration.md. */
static const char defaults_json[] =
    "{"
    "\"model\": \"models/SmolLM2-135M-Instruct.Q4_1.gguf\","
    "\"tokenizer\": null,"
    "\"threads\": 0,"
    "\"backend\": \"cpu\","
    "\"matmul_precision\": \"auto\","
    "\"device\": null,"
    "\"seed\": 1,"
    "\"output\": \"runs/default\","
    "\"steps\": 10,"
    "\"group_size\": 8,"
    "\"prompts_per_step\": 4,"
    "\"task\": {\"name\": \"kk\", \"path\": null, \"template\": null, \"options\": {}},"
    "\"reward\": {\"name\": \"logic_rl_format\", \"library\": null, \"options\": {}, \"isolation\": \"thread\","
    "  \"workers\": 0, \"timeout_ms\": 10000, \"batch_size\": 1, \"max_restarts\": 20},"
    "\"sampling\": {\"temperature\": 1.0, \"top_p\": 1.0, \"top_k\": 0, \"min_p\": 0.0,"
    "  \"max_new_tokens\": 128, \"stop\": []},"
    "\"env\": {\"name\": null, \"url\": null, \"options\": {}, \"timeout_ms\": 30000, \"threads\": 8,"
    "  \"max_observation_bytes\": 65536},"
    "\"multiturn\": {\"max_turns\": 8, \"max_tokens\": 0, \"overlap\": true},"
    "\"algorithm\": {\"advantage\": \"grpo\", \"adv_eps\": 1e-6, \"adv_batch_norm\": false, \"gamma\": 1.0,"
    "  \"filter_equal_groups\": false, \"policy_loss\": \"ppo_clip\", \"clip_low\": 0.2, \"clip_high\": 0.2,"
    "  \"dual_clip\": 0.0, \"tis_cap\": 0.0, \"behav_cap\": 0.0, \"behav_mask\": false, \"kl_coef\": 0.0,"
    "  \"kl_estimator\": \"k3\", \"kl_in_reward\": false, \"entropy_coef\": 0.0, \"loss_agg\": \"token-mean\","
    "  \"agg_norm_constant\": 0.0, \"overlong_max\": 0, \"overlong_cache\": 0, \"ppo_epochs\": 1,"
    "  \"mini_batches\": 1, \"micro_batch_tokens\": 256, \"max_gen_batches\": null, \"overlong_filter\": false,"
    "  \"sapo_tau_pos\": 1.0, \"sapo_tau_neg\": 1.05, \"whiten\": \"population\", \"rollout_is\": \"off\","
    "  \"rollout_is_threshold\": 2.0, \"rollout_is_batch_normalize\": false, \"rollout_rs\": \"off\","
    "  \"rollout_rs_threshold\": 2.0, \"rollout_rs_threshold_lower\": 0.0, \"rollout_token_veto\": 0.0,"
    "  \"clip_cov_ratio\": 0.0002, \"clip_cov_lb\": 1.0, \"clip_cov_ub\": 5.0, \"kl_cov_ratio\": 0.0002,"
    "  \"ppo_kl_coef\": 1.0, \"gae_lambda\": 1.0},"
    "\"critic\": {\"path\": null, \"lr\": 0.0, \"warmup_steps\": 0, \"value_clip\": 0.5},"
    "\"optimizer\": {\"lr\": 1e-5, \"schedule\": \"constant\", \"warmup_steps\": 0, \"min_lr_ratio\": 0.0,"
    "  \"weight_decay\": 0.0, \"max_grad_norm\": 1.0, \"beta1\": 0.9, \"beta2\": 0.999, \"eps\": 1e-8},"
    "\"sync\": {\"mode\": \"sync\", \"staleness\": 0, \"weights_dir\": null},"
    "\"rollout\": {\"max_seq_len\": 0, \"urls\": [], \"inbox\": null, \"weights\": \"auto\"},"
    "\"eval\": {\"interval\": 0, \"n\": 200, \"samples\": 4, \"greedy\": true, \"seed\": null, \"path\": null,"
    "  \"task_options\": {},"
    "  \"accuracy_reward\": null, \"accuracy_threshold\": null, \"format\": null},"
    "\"checkpoint\": {\"interval\": 0, \"minutes\": 10.0, \"keep\": 2, \"dtype\": \"f32\", \"gguf\": null},"
    "\"samples\": {\"per_step\": 4},"
    "\"lora\": {\"rank\": 0, \"alpha\": 32.0, \"targets\": \"all\", \"rslora\": false, \"base_dtype\": \"f32\"},"
    "\"distributed\": {\"world_size\": 1, \"rendezvous\": null, \"transport\": \"auto\", \"timeout_s\": 600.0},"
    "\"swarm\": {\"listen\": null, \"token_file\": null, \"min_workers\": 0, \"join_timeout_s\": 600.0,"
    "  \"heartbeat_s\": 2.0, \"suspect_s\": 6.0, \"dead_s\": 30.0}"
    "}";

/* Keys whose default is null, and the type a non-null value must have. */
static const struct {
    const char *key;
    json_type type;
} nullable[] = {
    {"tokenizer", JSON_STRING},         {"task.path", JSON_STRING},     {"task.template", JSON_STRING},
    {"reward.library", JSON_STRING},    {"eval.seed", JSON_INTEGER},    {"eval.path", JSON_STRING},
    {"eval.accuracy_reward", JSON_STRING}, {"eval.accuracy_threshold", JSON_REAL}, {"eval.format", JSON_TRUE},
    {"sync.weights_dir", JSON_STRING},  {"env.name", JSON_STRING},       {"env.url", JSON_STRING},  {"rollout.inbox", JSON_STRING}, {"checkpoint.gguf", JSON_STRING}, {"device", JSON_INTEGER},        {"distributed.rendezvous", JSON_STRING},
    {"algorithm.max_gen_batches", JSON_INTEGER}, {"critic.path", JSON_STRING},
    {"swarm.listen", JSON_STRING},      {"swarm.token_file", JSON_STRING},
};

/* Objects whose content is free (handed to the library, which checks it). */
static const char *const free_objects[] = {"task.options", "reward.options", "eval.task_options", "env.options"};

json_t *train_config_defaults(void)
{
    return json_loads(defaults_json, 0, NULL);
}

static const char *type_name(json_type t)
{
    switch (t) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "true or false";
    default: return "null";
    }
}

static int type_ok(json_type want, const json_t *v)
{
    switch (want) {
    case JSON_REAL: return json_is_number(v);
    case JSON_TRUE:
    case JSON_FALSE: return json_is_boolean(v);
    default: return json_typeof(v) == want;
    }
}

/* Merges src into dst (both objects at dotted path prefix). */
static int merge(json_t *dst, json_t *src, const char *prefix, char *err, size_t cap)
{
    const char *key;
    json_t *v;
    json_object_foreach(src, key, v) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
        json_t *d = json_object_get(dst, key);
        if (!d) {
            snprintf(err, cap, "%s: unknown configuration key (docs/configuration.md lists them)", path);
            return -1;
        }
        int is_free = 0;
        for (size_t i = 0; i < sizeof free_objects / sizeof free_objects[0]; i++)
            is_free |= !strcmp(path, free_objects[i]);
        if (is_free) {
            if (!json_is_object(v)) {
                snprintf(err, cap, "%s: must be an object", path);
                return -1;
            }
            json_object_set(dst, key, v);
            continue;
        }
        if (json_is_object(d)) {
            if (!json_is_object(v)) {
                snprintf(err, cap, "%s: must be an object", path);
                return -1;
            }
            if (merge(d, v, path, err, cap))
                return -1;
            continue;
        }
        json_type want = json_typeof(d);
        if (json_is_null(d) || json_is_null(v)) {
            int found = 0;
            for (size_t i = 0; i < sizeof nullable / sizeof nullable[0]; i++)
                if (!strcmp(path, nullable[i].key)) {
                    want = nullable[i].type;
                    found = 1;
                }
            if (json_is_null(v)) {
                if (!found) {
                    snprintf(err, cap, "%s: must be %s, not null", path, type_name(want));
                    return -1;
                }
                json_object_set(dst, key, v);
                continue;
            }
        }
        if (json_is_boolean(d))
            want = JSON_TRUE;
        if (!type_ok(want, v)) {
            snprintf(err, cap, "%s: must be %s", path, type_name(want));
            return -1;
        }
        json_object_set(dst, key, v);
    }
    return 0;
}

/* --set of a dotted key below a free object ("reward.options.X.Y"): the
 * value set at that key inside the configuration's object, objects made
 * on the way. 1 done (value consumed), 0 not such a key, -1 a non-object
 * on the way (value left to the caller). */
static int set_inside_free(json_t *cfg, const char *key, json_t *value)
{
    for (size_t i = 0; i < sizeof free_objects / sizeof free_objects[0]; i++) {
        size_t n = strlen(free_objects[i]);
        if (strncmp(key, free_objects[i], n) || key[n] != '.' || !key[n + 1])
            continue;
        json_t *o = cfg_get(cfg, free_objects[i]);
        char rest[256];
        snprintf(rest, sizeof rest, "%s", key + n + 1);
        char *part = rest, *dot;
        while ((dot = strchr(part, '.'))) {
            *dot = 0;
            json_t *next = json_object_get(o, part);
            if (!next) {
                next = json_object();
                json_object_set_new(o, part, next);
            } else if (!json_is_object(next)) {
                return -1;
            }
            o = next;
            part = dot + 1;
        }
        json_object_set_new(o, part, value);
        return 1;
    }
    return 0;
}

json_t *train_config_load(const char *path, char *const *sets, size_t n_sets, char *err, size_t cap)
{
    json_t *cfg = train_config_defaults();
    if (!cfg) {
        snprintf(err, cap, "internal error: bad default configuration");
        return NULL;
    }
    if (path) {
        json_error_t je;
        json_t *file = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!file) {
            snprintf(err, cap, "%s:%d: %s", path, je.line, je.text);
            json_decref(cfg);
            return NULL;
        }
        if (!json_is_object(file)) {
            snprintf(err, cap, "%s: the configuration must be a JSON object", path);
            json_decref(file);
            json_decref(cfg);
            return NULL;
        }
        int rc = merge(cfg, file, "", err, cap);
        json_decref(file);
        if (rc) {
            json_decref(cfg);
            return NULL;
        }
    }
    for (size_t i = 0; i < n_sets; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i]) {
            snprintf(err, cap, "--set %s: expected key=value", sets[i]);
            json_decref(cfg);
            return NULL;
        }
        json_t *value = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        if (!value)
            value = json_string(eq + 1);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        /* a key inside one of the free objects (reward.options.reward_model.model=...): set just that key,
         * keeping the object's others; the object itself (reward.options={...}) is replaced whole below */
        int inside = set_inside_free(cfg, key, value);
        if (inside < 0) {
            snprintf(err, cap, "--set %s: a key inside an option object needs objects on the way to it", key);
            json_decref(value);
            json_decref(cfg);
            return NULL;
        }
        if (inside)
            continue;
        /* build {"a": {"b": value}} from "a.b" and merge it */
        json_t *patch = value;
        char *dot;
        while ((dot = strrchr(key, '.'))) {
            json_t *o = json_object();
            json_object_set_new(o, dot + 1, patch);
            patch = o;
            *dot = 0;
        }
        json_t *top = json_object();
        json_object_set_new(top, key, patch);
        int rc = merge(cfg, top, "", err, cap);
        json_decref(top);
        if (rc) {
            json_decref(cfg);
            return NULL;
        }
    }
    return cfg;
}

json_t *cfg_get(const json_t *cfg, const char *dotted)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", dotted);
    json_t *v = (json_t *)cfg;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    return v;
}

double cfg_num(const json_t *cfg, const char *dotted)
{
    return json_number_value(cfg_get(cfg, dotted));
}

long long cfg_int(const json_t *cfg, const char *dotted)
{
    return (long long)json_integer_value(cfg_get(cfg, dotted));
}

int cfg_bool(const json_t *cfg, const char *dotted)
{
    return json_is_true(cfg_get(cfg, dotted));
}

const char *cfg_str(const json_t *cfg, const char *dotted)
{
    return json_string_value(cfg_get(cfg, dotted));
}
