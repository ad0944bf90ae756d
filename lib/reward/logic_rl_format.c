/* Logic-RL's format reward: <think>, </think>, <answer>, </answer> each
 * exactly once and in that order in the assistant's text. The rule is
 * validate_response_structure() of Unakar/Logic-RL,
 * verl/utils/reward_score/kk.py (Xie et al. 2025, arXiv:2502.14768); this
 * is our own implementation of it. There, the text checked is everything
 * after the assistant header, which includes a <think> the prompt opened;
 * here that is the "assistant_prefix". Must not look at the answer. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/metadata.h"
#include "reward/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const TAGS[4] = {"<think>", "</think>", "<answer>", "</answer>"};
static const size_t TAG_LEN[4] = {7, 8, 8, 9};

/* Counts of the four tags and the offset of each one's first occurrence
 * (n when absent), in one pass over the '<' bytes. */
static void scan_tags(const char *s, size_t n, size_t count[4], size_t first[4])
{
    for (int k = 0; k < 4; k++) {
        count[k] = 0;
        first[k] = n;
    }
    for (const char *p = s; (p = memchr(p, '<', (size_t)(s + n - p))) != NULL; p++) {
        size_t left = (size_t)(s + n - p);
        for (int k = 0; k < 4; k++)
            if (left >= TAG_LEN[k] && memcmp(p, TAGS[k], TAG_LEN[k]) == 0) {
                if (count[k]++ == 0)
                    first[k] = (size_t)(p - s);
                break;
            }
    }
}

int rlpi_format_read(rlpi_opts *o, rlpi_format_cfg *cfg)
{
    cfg->prefix = NULL;
    cfg->correct = 1.0;
    cfg->wrong = -1.0;
    const char *prefix = NULL;
    int rc;
    if ((rc = rlpi_opt_string(o, "assistant_prefix", &prefix)) ||
        (rc = rlpi_opt_double(o, "format_correct", &cfg->correct)) ||
        (rc = rlpi_opt_double(o, "format_wrong", &cfg->wrong)))
        return rc;
    if (prefix && !(cfg->prefix = strdup(prefix)))
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    return RLP_OK;
}

void rlpi_format_free(rlpi_format_cfg *cfg)
{
    free(cfg->prefix);
    cfg->prefix = NULL;
}

/* The text the prompt already put in the assistant's turn, when the
 * option does not say: the metadata's "assistant_prefix" (rlp_task
 * prompts carry it), else "<think>" when the prompt ends with it (trailing
 * whitespace aside), as Logic-RL's template does. *owned is malloc'd or
 * NULL. */
static const char *auto_prefix(const rlp_reward_request *req, char **owned)
{
    *owned = NULL;
    if (req->metadata_json && strstr(req->metadata_json, "\"assistant_prefix\"")) {
        int bad;
        *owned = rlpi_metadata_field(req->metadata_json, "assistant_prefix", 0, &bad);
        if (*owned)
            return *owned;
    }
    size_t b = 0, e = req->prompt_len;
    rlpi_trim(req->prompt_text, &b, &e);
    return e - b >= 7 && memcmp(req->prompt_text + e - 7, "<think>", 7) == 0 ? "<think>" : "";
}

int rlpi_format_check(const rlpi_format_cfg *cfg, const rlp_reward_request *req, char *why, size_t cap)
{
    char *owned = NULL;
    const char *prefix = cfg->prefix ? cfg->prefix : auto_prefix(req, &owned);
    size_t lp = strlen(prefix);
    const char *text = req->completion_text;
    size_t n = req->completion_len;
    char *joined = NULL;
    if (lp) {
        joined = malloc(lp + n + 1);
        if (!joined) {
            free(owned);
            return -1;
        }
        memcpy(joined, prefix, lp);
        memcpy(joined + lp, text, n);
        text = joined;
        n += lp;
    }
    size_t count[4], first[4];
    scan_tags(text, n, count, first);
    free(joined);
    free(owned);
    for (int k = 0; k < 4; k++)
        if (count[k] != 1) {
            snprintf(why, cap, "format: %s appears %zu times", TAGS[k], count[k]);
            return 0;
        }
    for (int k = 0; k < 3; k++)
        if (first[k] > first[k + 1]) {
            snprintf(why, cap, "format: %s comes after %s", TAGS[k], TAGS[k + 1]);
            return 0;
        }
    if (cap > 9)
        memcpy(why, "format ok", 10);
    return 1;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const rlpi_format_cfg *cfg = impl;
    for (size_t i = 0; i < n; i++) {
        int ok = rlpi_format_check(cfg, &req[i], res[i].reason, sizeof res[i].reason);
        if (ok < 0) {
            rlpi_reason(&res[i], "out of memory");
            return RLP_E_NOMEM;
        }
        res[i].score = ok ? cfg->correct : cfg->wrong;
    }
    return 0;
}

static void destroy(void *impl)
{
    rlpi_format_free(impl);
    free(impl);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_logic_rl_format(rlpi_scorer **out, rlpi_opts *o)
{
    rlpi_format_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    int rc = rlpi_format_read(o, cfg);
    if (rc) {
        destroy(cfg);
        return rc;
    }
    rc = rlpi_scorer_create(out, &ops, cfg, 1);
    if (rc == RLP_OK)
        (*out)->needs_reference = 0;
    return rc;
}
