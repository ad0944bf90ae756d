/* Checkpoints of a trainer: the weights, the optimizer state and
 * state.json (the step, the policy version, the task cursor after the last
 * trained prompt, the options a resume must match, and the host's keys). */
#include "trainer_impl.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "model/lora.h"
#include "model/policy.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rlpi_train_cursor_at(const char *tmpl, size_t cap, uint64_t epoch, uint64_t position, char **out)
{
    json_t *c = json_loadb(tmpl, strnlen(tmpl, cap), 0, NULL);
    if (!json_is_object(c)) {
        json_decref(c);
        return rlpi_error_set(RLP_E_INTERNAL, "the task's cursor is not a JSON object");
    }
    json_t *size = json_object_get(c, "size");
    if (json_is_integer(size) && json_integer_value(size) > 0 && position >= (uint64_t)json_integer_value(size)) {
        /* the end of an epoch is written as the next one's start */
        epoch += position / (uint64_t)json_integer_value(size);
        position %= (uint64_t)json_integer_value(size);
    }
    json_object_set_new(c, "epoch", json_integer((json_int_t)epoch));
    json_object_set_new(c, "position", json_integer((json_int_t)position));
    *out = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    return *out ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "out of memory");
}

/* What a resume must match: a run continued with other groups or another
 * seed would not be the run its first steps belong to. */
static json_t *identity(const rlp_trainer *t)
{
    return json_pack("{s:i, s:i, s:I, s:i}", "prompts_per_step", (int)t->o.prompts_per_step, "group_size",
                     (int)t->o.sampling.n, "seed", (json_int_t)t->o.seed, "mode", (int)t->o.mode);
}

static const char *mode_name(int mode)
{
    return mode == RLP_TRAIN_ASYNC ? "async" : mode == RLP_TRAIN_PULL ? "pull" : "sync";
}

int rlp_trainer_checkpoint(rlp_trainer *t, const char *dir, int dtype, const char *host_json)
{
    RLPI_CHECK_ARG(t && dir && *dir, "trainer and dir are required");
    json_t *host = NULL;
    if (host_json) {
        json_error_t je;
        host = json_loads(host_json, 0, &je);
        if (!json_is_object(host)) {
            json_decref(host);
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: host_json is not a JSON object (%s)", __func__,
                                  host ? "not an object" : je.text);
        }
    }
    if (mkdir(dir, 0777) && errno != EEXIST) {
        json_decref(host);
        return rlpi_error_set(RLP_E_IO, "%s: cannot create '%s': %s", __func__, dir, strerror(errno));
    }
    /* LoRA: the frozen base and the adapters (PEFT folder adapter/), apart */
    bool lora = rlpi_policy_has_lora(t->policy);
    int rc = rlpi_policy_save_hf(t->policy, dir, dtype, !lora);
    /* a model without a tokenizer of its own still has its weights saved */
    if (rc == RLP_E_UNSUPPORTED)
        rc = RLP_OK;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter", dir);
    if (!rc && lora)
        rc = rlpi_lora_save_peft(t->policy->tf, path, NULL);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (!rc)
        rc = rlp_policy_save_optimizer(t->policy, path);
    if (!rc)
        rc = rlpi_train_critic_save(t, dir, dtype);
    if (rc) {
        json_decref(host);
        return rlpi_error_wrap("%s: %s", __func__, dir);
    }
    char cursor[RLPI_CURSOR_CAP];
    size_t clen;
    if (t->o.mode == RLP_TRAIN_ASYNC)
        snprintf(cursor, sizeof cursor, "%s", t->cursor); /* the worker has drawn prompts beyond it */
    else
        rlp_task_cursor_save(t->task, cursor, sizeof cursor, &clen);
    uint64_t version = 0;
    rlp_policy_version(&version, t->policy);
    json_t *state = host ? host : json_object();
    json_object_set_new(state, "step", json_integer((json_int_t)t->steps_done));
    json_object_set_new(state, "version", json_integer((json_int_t)version));
    json_object_set_new(state, "cursor", json_loads(cursor, 0, NULL));
    json_object_set_new(state, "seed", json_integer((json_int_t)t->o.seed));
    json_object_set_new(state, "sampling_seed_next",
                        json_integer((json_int_t)(rlpi_train_mix_seed(t->o.seed, t->steps_done + 1) >> 1)));
    json_object_set_new(state, "sync_mode", json_string(mode_name(t->o.mode)));
    json_object_set_new(state, "trainer", identity(t));
    char *text = json_dumps(state, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(state);
    if (!text)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    snprintf(path, sizeof path, "%s/state.json", dir);
    rc = rlpi_atomic_write_file(path, text, strlen(text));
    free(text);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

int rlp_trainer_resume(rlp_trainer *t, const char *dir)
{
    RLPI_CHECK_ARG(t && dir, "trainer and dir are required");
    if (t->steps_done != t->start_step || t->have_last || t->worker || t->sync)
        return rlpi_error_set(RLP_E_STATE, "%s: call it before the first step", __func__);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.json", dir);
    json_error_t je;
    json_t *state = json_load_file(path, 0, &je);
    if (!state) {
        FILE *f = fopen(path, "r");
        int missing = !f && errno == ENOENT;
        if (f)
            fclose(f);
        return rlpi_error_set(missing ? RLP_E_NOT_FOUND : RLP_E_FORMAT, "%s: %s: %s", __func__, path,
                              missing ? "no such file (not a checkpoint)" : je.text);
    }
    json_t *step = json_object_get(state, "step"), *cursor = json_object_get(state, "cursor");
    json_t *version = json_object_get(state, "version"), *id = json_object_get(state, "trainer");
    int rc = RLP_OK;
    if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_object(cursor))
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %s: missing step or cursor", __func__, path);
    /* a checkpoint of this trainer's options (older ones carry none) */
    json_t *now = identity(t);
    const char *key;
    json_t *v;
    json_object_foreach(now, key, v)
    {
        json_t *saved = json_object_get(id, key);
        if (!rc && saved && !json_equal(saved, v))
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s: the checkpoint was taken with %s = %lld, this trainer "
                                "has %lld", __func__, path, key, (long long)json_integer_value(saved),
                                (long long)json_integer_value(v));
    }
    json_decref(now);
    uint64_t pv = 0;
    rlp_policy_version(&pv, t->policy);
    /* LoRA: the policy holds the checkpoint's base; its adapters come from adapter/ */
    bool lora = rlpi_policy_has_lora(t->policy);
    snprintf(path, sizeof path, "%s/adapter/adapter_config.json", dir);
    bool has_adapter = access(path, F_OK) == 0;
    if (!rc && lora != has_adapter)
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "%s: %s %s LoRA adapters and the policy %s: resume with the run's "
                            "lora settings",
                            __func__, dir, has_adapter ? "holds" : "holds no", lora ? "has them" : "has none");
    snprintf(path, sizeof path, "%s/adapter", dir);
    if (!rc && lora && (rc = rlpi_lora_load_peft(t->policy->tf, path)))
        rlpi_error_wrap("%s", __func__);
    if (!rc && lora)
        t->policy->weights_gen++;
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (!rc && (rc = rlp_policy_load_optimizer(t->policy, path)))
        rlpi_error_wrap("%s", __func__);
    if (!rc && (rc = rlpi_train_critic_load(t, dir)))
        rlpi_error_wrap("%s", __func__);
    rlp_policy_version(&pv, t->policy);
    if (!rc && json_is_integer(version) && (uint64_t)json_integer_value(version) != pv)
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s holds version %lld, the policy has %llu: load the policy "
                            "from the checkpoint", __func__, dir, (long long)json_integer_value(version),
                            (unsigned long long)pv);
    char *text = rc ? NULL : json_dumps(cursor, JSON_COMPACT);
    if (!rc && !text)
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    if (!rc && (rc = rlp_task_cursor_restore(t->task, text, strlen(text))))
        rlpi_error_wrap("%s: %s: cursor", __func__, dir);
    if (!rc) {
        snprintf(t->cursor, sizeof t->cursor, "%s", text);
        t->steps_done = t->start_step = (uint64_t)json_integer_value(step);
    }
    free(text);
    json_decref(state);
    return rc;
}
