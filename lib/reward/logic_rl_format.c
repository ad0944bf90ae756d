/* Logic-RL's format reward: <think>, </think>, <answer>, </answer> each
 * exactly once and in that order in the assistant's text. The rule is
 * validate_response_structure() of Unakar/Logic-RL,
 * verl/utils/reward_score/kk.py (Xie et al. 2025, arXiv:2502.14768); this
 * is our own implementation of it. There, the text checked is everything
 * after the assistant header, which includes a <think> the prompt opened;
 * here that is the "assistant_prefix". On top of kk.py's rule, the
 * <answer> content must parse as an answer of the task's type ("answer"),
 * so that a placeholder copied from a prompt ("<answer> answer </answer>")
 * earns no format bonus. Must not judge whether the answer is right. */
#include "reward/builtin.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "reward/metadata.h"
#include "reward/text.h"

#include <jansson.h>
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

/* The answer types by RLPI_ANSWER_* value. */
static const char *const ANSWER_NAMES[] = {"auto", "any", "nonempty", "number", "kk", "equation"};
#define N_ANSWER_NAMES (sizeof ANSWER_NAMES / sizeof ANSWER_NAMES[0])

/* RLPI_ANSWER_* of a name (len bytes), or -1. */
static int answer_kind(const char *s, size_t len)
{
    for (size_t i = 0; i < N_ANSWER_NAMES; i++)
        if (strlen(ANSWER_NAMES[i]) == len && memcmp(ANSWER_NAMES[i], s, len) == 0)
            return (int)i;
    return -1;
}

int rlpi_format_read(rlpi_opts *o, rlpi_format_cfg *cfg)
{
    cfg->prefix = NULL;
    cfg->correct = 1.0;
    cfg->wrong = -1.0;
    cfg->answer = RLPI_ANSWER_AUTO;
    const char *prefix = NULL, *answer = NULL;
    int rc;
    if ((rc = rlpi_opt_string(o, "assistant_prefix", &prefix)) ||
        (rc = rlpi_opt_double(o, "format_correct", &cfg->correct)) ||
        (rc = rlpi_opt_double(o, "format_wrong", &cfg->wrong)) || (rc = rlpi_opt_string(o, "answer", &answer)))
        return rc;
    if (answer && (cfg->answer = answer_kind(answer, strlen(answer))) < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "reward built-in %s: option \"answer\" is \"%.40s\"; use auto, any, nonempty, number, "
                              "kk or equation",
                              o->builtin, answer);
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

/* ---- the <answer> content ---------------------------------------------------- */

/* Words that stand for an answer without being one (what a model copies
 * from a prompt's example), as is_placeholder() normalises the content. */
static const char *const PLACEHOLDERS[] = {
    "answer",      "your answer",        "the answer",        "final answer",     "your final answer",
    "answer here", "your answer here",   "final answer here", "the final answer", "answer goes here",
    "placeholder", "insert answer here", "insert answer",     "todo",             "tbd",
    "xxx",
};

/* Whether c is one of the characters trimmed around a placeholder. */
static int placeholder_trim(unsigned char c)
{
    return rlpi_is_space(c) || (c && strchr(".,:;!?\"'`*_[](){}<>-", c) != NULL);
}

/* 1 when [b, e) of s is a placeholder: nothing but punctuation (including
 * the UTF-8 ellipsis) once trimmed, or one of PLACEHOLDERS, ASCII
 * case-insensitive with runs of whitespace read as one space. */
static int is_placeholder(const char *s, size_t b, size_t e)
{
    for (;;) {
        while (b < e && placeholder_trim((unsigned char)s[b]))
            b++;
        while (e > b && placeholder_trim((unsigned char)s[e - 1]))
            e--;
        if (e - b >= 3 && memcmp(s + b, "\xe2\x80\xa6", 3) == 0) /* … */
            b += 3;
        else if (e - b >= 3 && memcmp(s + e - 3, "\xe2\x80\xa6", 3) == 0)
            e -= 3;
        else
            break;
    }
    if (b == e)
        return 1;
    char buf[32];
    size_t n = 0;
    for (size_t i = b; i < e; i++) {
        unsigned char c = (unsigned char)s[i];
        if (rlpi_is_space(c)) {
            if (buf[n - 1] == ' ') /* n > 0: s[b] is not a space */
                continue;
            c = ' ';
        }
        if (n + 1 >= sizeof buf)
            return 0; /* longer than any placeholder */
        buf[n++] = (char)rlpi_lower(c);
    }
    for (size_t k = 0; k < sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0]; k++)
        if (strlen(PLACEHOLDERS[k]) == n && memcmp(PLACEHOLDERS[k], buf, n) == 0)
            return 1;
    return 0;
}

/* 1 when [b, e) (trimmed) is a number: rlpi_num_parse of it, allowing one
 * trailing '.', or of the content of a \boxed{} that is all of it (inside
 * optional '$'); -1 when out of memory. */
static int is_number(const char *s, size_t b, size_t e)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t ee = e;
        if (pass == 1) {
            if (e - b < 2 || s[e - 1] != '.')
                break;
            ee = e - 1;
            while (ee > b && rlpi_is_space((unsigned char)s[ee - 1]))
                ee--;
        }
        rlpi_num x;
        int r = rlpi_num_parse(s + b, ee - b, &x);
        if (r > 0)
            rlpi_num_clear(&x);
        if (r)
            return r;
        /* \boxed{N}, $\boxed{N}$ */
        size_t bb = b, be = ee;
        while (bb < be && (s[bb] == '$' || rlpi_is_space((unsigned char)s[bb])))
            bb++;
        while (be > bb && (s[be - 1] == '$' || rlpi_is_space((unsigned char)s[be - 1])))
            be--;
        size_t kb, ke;
        if (be - bb > 6 && memcmp(s + bb, "\\boxed", 6) == 0 && rlpi_last_boxed(s + bb, be - bb, &kb, &ke) == 1 &&
            bb + ke + 1 == be) {
            kb += bb;
            ke += bb;
            rlpi_trim(s, &kb, &ke);
            r = rlpi_num_parse(s + kb, ke - kb, &x);
            if (r > 0)
                rlpi_num_clear(&x);
            if (r)
                return r;
        }
    }
    return 0;
}

/* The metadata's "names" (an array of strings), or NULL. */
static json_t *metadata_names(const char *meta, json_t **root)
{
    *root = NULL;
    if (!meta || !strstr(meta, "\"names\"") ||
        rlpi_json_load_guarded(meta, strlen(meta), RLPI_JSON_MAX_DEPTH, "metadata", root))
        return NULL;
    json_t *names = json_is_object(*root) ? json_object_get(*root, "names") : NULL;
    return json_is_array(names) && json_array_size(names) > 0 ? names : NULL;
}

/* Writes `format: <answer> content "…" ` and the rest to why: the content
 * shortened to 40 bytes (at a UTF-8 boundary), control characters as spaces. */
static void content_reason(char *why, size_t cap, const char *s, size_t b, size_t e, const char *what)
{
    char shown[48];
    size_t n = 0, lim = 40;
    if (e - b > lim) {
        size_t k = b + lim;
        while (k > b && ((unsigned char)s[k] & 0xc0) == 0x80)
            k--;
        lim = k - b;
    }
    for (size_t i = b; i < e && n < lim; i++)
        shown[n++] = (unsigned char)s[i] < 0x20 ? ' ' : s[i];
    shown[n] = '\0';
    snprintf(why, cap, "format: <answer> content \"%s%s\" %s", shown, e - b > n ? "..." : "", what);
}

/* The answer type auto mode picks: the metadata's "answer_type", else
 * "number" for a numeric reference, else "nonempty". RLPI_FORMAT_INVALID
 * (why set) for an unknown "answer_type", RLPI_FORMAT_NOMEM. */
static int auto_kind(const rlp_reward_request *req, int *kind, char *why, size_t cap)
{
    if (req->metadata_json && strstr(req->metadata_json, "\"answer_type\"")) {
        int bad;
        char *t = rlpi_metadata_field(req->metadata_json, "answer_type", 0, &bad);
        if (t) {
            *kind = answer_kind(t, strlen(t));
            if (*kind <= RLPI_ANSWER_AUTO)
                snprintf(why, cap, "metadata \"answer_type\" is \"%.40s\"; use any, nonempty, number, kk or equation",
                         t);
            free(t);
            return *kind <= RLPI_ANSWER_AUTO ? RLPI_FORMAT_INVALID : RLPI_FORMAT_OK;
        }
    }
    *kind = RLPI_ANSWER_NONEMPTY;
    if (req->reference) {
        rlpi_num x;
        int r = rlpi_gsm8k_reference_number(req->reference, &x);
        if (r < 0)
            return RLPI_FORMAT_NOMEM;
        if (r > 0) {
            rlpi_num_clear(&x);
            *kind = RLPI_ANSWER_NUMBER;
        }
    }
    return RLPI_FORMAT_OK;
}

/* Whether the content [b, e) of s parses as an answer of `kind`. */
static int check_content(int kind, const rlp_reward_request *req, const char *s, size_t b, size_t e, char *why,
                         size_t cap)
{
    rlpi_trim(s, &b, &e);
    switch (kind) {
    case RLPI_ANSWER_ANY:
        return RLPI_FORMAT_OK;
    case RLPI_ANSWER_NONEMPTY:
        if (is_placeholder(s, b, e)) {
            if (b == e)
                snprintf(why, cap, "format: <answer> is empty");
            else
                content_reason(why, cap, s, b, e, "is a placeholder, not an answer");
            return RLPI_FORMAT_FAILED;
        }
        return RLPI_FORMAT_OK;
    case RLPI_ANSWER_NUMBER: {
        int r = is_number(s, b, e);
        if (r < 0)
            return RLPI_FORMAT_NOMEM;
        if (!r)
            content_reason(why, cap, s, b, e, "is not a number");
        return r ? RLPI_FORMAT_OK : RLPI_FORMAT_FAILED;
    }
    case RLPI_ANSWER_EQUATION:
        if (rlpi_countdown_well_formed(s + b, e - b))
            return RLPI_FORMAT_OK;
        content_reason(why, cap, s, b, e, "is not an equation of integers, + - * / and parentheses");
        return RLPI_FORMAT_FAILED;
    default: { /* RLPI_ANSWER_KK */
        json_t *root;
        json_t *names = metadata_names(req->metadata_json, &root);
        int ok = 1;
        if (!names) {
            ok = rlpi_kk_any_claim(s + b, e - b);
            if (!ok)
                content_reason(why, cap, s, b, e, "has no \"NAME is a knight|knave\"");
        }
        for (size_t k = 0; names && ok && k < json_array_size(names); k++) {
            json_t *v = json_array_get(names, k);
            const char *name = json_is_string(v) ? json_string_value(v) : "";
            size_t len = json_is_string(v) ? json_string_length(v) : 0;
            ok = rlpi_kk_stated_role(s + b, e - b, name, len) != 0;
            if (!ok) {
                char what[96];
                snprintf(what, sizeof what, "has no \"%.40s is a knight|knave\"", name);
                content_reason(why, cap, s, b, e, what);
            }
        }
        json_decref(root);
        return ok ? RLPI_FORMAT_OK : RLPI_FORMAT_FAILED;
    }
    }
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
            return RLPI_FORMAT_NOMEM;
        }
        memcpy(joined, prefix, lp);
        memcpy(joined + lp, text, n);
        text = joined;
        n += lp;
    }
    free(owned);
    size_t count[4], first[4];
    scan_tags(text, n, count, first);
    int rc = RLPI_FORMAT_OK;
    for (int k = 0; k < 4 && rc == RLPI_FORMAT_OK; k++)
        if (count[k] != 1) {
            snprintf(why, cap, "format: %s appears %zu times", TAGS[k], count[k]);
            rc = RLPI_FORMAT_FAILED;
        }
    for (int k = 0; k < 3 && rc == RLPI_FORMAT_OK; k++)
        if (first[k] > first[k + 1]) {
            snprintf(why, cap, "format: %s comes after %s", TAGS[k], TAGS[k + 1]);
            rc = RLPI_FORMAT_FAILED;
        }
    int kind = cfg->answer;
    if (rc == RLPI_FORMAT_OK && kind == RLPI_ANSWER_AUTO)
        rc = auto_kind(req, &kind, why, cap);
    if (rc == RLPI_FORMAT_OK)
        rc = check_content(kind, req, text, first[2] + TAG_LEN[2], first[3], why, cap);
    free(joined);
    if (rc == RLPI_FORMAT_OK && cap > 9)
        memcpy(why, "format ok", 10);
    return rc;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const rlpi_format_cfg *cfg = impl;
    for (size_t i = 0; i < n; i++) {
        int ok = rlpi_format_check(cfg, &req[i], res[i].reason, sizeof res[i].reason);
        if (ok == RLPI_FORMAT_NOMEM) {
            rlpi_reason(&res[i], "out of memory");
            return RLP_E_NOMEM;
        }
        if (ok == RLPI_FORMAT_INVALID) {
            res[i].valid = 0;
            continue;
        }
        res[i].score = ok == RLPI_FORMAT_OK ? cfg->correct : cfg->wrong;
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
        (*out)->needs_reference = cfg->answer == RLPI_ANSWER_AUTO; /* a numeric reference means "number" */
    return rc;
}
