/* Built-in verifiers: the registry by name, the strict reader of their
 * JSON options (an unknown key is an error) and each built-in's
 * constructor. Each constructor reads its own keys; the registry reads the
 * keys every built-in shares. */
#ifndef RLPI_REWARD_BUILTIN_H
#define RLPI_REWARD_BUILTIN_H

#include "reward/scorer.h"
#include "reward/text.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RLPI_OPTS_MAX_KEYS 48

typedef struct rlpi_opts {
    json_t *obj;                              /* the options object, or NULL */
    const char *builtin;                      /* for messages */
    const char *seen[RLPI_OPTS_MAX_KEYS];     /* keys read so far */
    size_t n_seen;
} rlpi_opts;

/* Each reads `key` when present (leaving *v as it is otherwise) and
 * returns RLP_OK, or RLP_E_INVALID_ARG naming the built-in and the key
 * when its value has the wrong type or range. */
int rlpi_opt_double(rlpi_opts *o, const char *key, double *v);
int rlpi_opt_bool(rlpi_opts *o, const char *key, int *v);
int rlpi_opt_uint(rlpi_opts *o, const char *key, uint32_t *v);
/* *v borrowed from the options JSON: copy it. */
int rlpi_opt_string(rlpi_opts *o, const char *key, const char **v);
/* A string option naming one of n choices: *v = its index. An unknown
 * name is refused listing them ("use a, b or c"). */
int rlpi_opt_choice(rlpi_opts *o, const char *key, const char *const *names, int n, int *v);
/* "extract": "none" | "answer_tag" | "boxed" | "last_line" */
int rlpi_opt_extract(rlpi_opts *o, int *mode);

/* What every built-in shares, read by the registry. */
typedef struct rlpi_builtin_common {
    uint32_t threads, timeout_ms;
    int refine;
    float refine_eta;
    const char *name; /* borrowed from the options JSON, or the built-in's name */
} rlpi_builtin_common;

/* Creates built-in `name` with options (a JSON object or NULL). *opts_root
 * receives the parsed options (owning the strings in *common); decref it
 * after use. RLP_E_NOT_FOUND, RLP_E_INVALID_ARG, RLP_E_NOMEM. */
int rlpi_builtin_create(rlpi_scorer **out, rlpi_builtin_common *common, json_t **opts_root, const char *name,
                        const char *options_json);

const char *rlpi_builtin_name(size_t index);

/* Constructors, one per file. */
int rlpi_builtin_logic_rl_format(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_kk_answer(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_logic_rl(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_gsm8k(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_boxed_math(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_countdown(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_exact_match(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_regex_match(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_lookup_em(rlpi_scorer **out, rlpi_opts *o);      /* tool_rewards.c */
int rlpi_builtin_search_format(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_tool_call_format(rlpi_scorer **out, rlpi_opts *o);
int rlpi_builtin_reward_model(rlpi_scorer **out, rlpi_opts *o);  /* reward_model.c: ORM/PRM in process */

/* What the content of the <answer> block must parse as for the format to
 * pass ("answer" option; see logic_rl_format in rlpost.h). */
enum {
    RLPI_ANSWER_AUTO = 0,     /* from the metadata's "answer_type", else the reference */
    RLPI_ANSWER_ANY = 1,      /* tags only (Logic-RL's kk.py) */
    RLPI_ANSWER_NONEMPTY = 2, /* some text that is not a placeholder such as "answer" */
    RLPI_ANSWER_NUMBER = 3,
    RLPI_ANSWER_KK = 4,       /* "NAME is a knight|knave" for every person */
    RLPI_ANSWER_EQUATION = 5  /* Countdown's grammar */
};

/* Logic-RL's format check, shared by logic_rl_format, kk_answer and
 * logic_rl (logic_rl_format.c). */
typedef struct rlpi_format_cfg {
    char *prefix;      /* assistant_prefix, or NULL = "<think>" when the prompt ends with it */
    double correct, wrong;
    int answer;        /* RLPI_ANSWER_* */
} rlpi_format_cfg;

int rlpi_format_read(rlpi_opts *o, rlpi_format_cfg *cfg);
void rlpi_format_free(rlpi_format_cfg *cfg);

/* Results of rlpi_format_check. */
enum {
    RLPI_FORMAT_OK = 1,
    RLPI_FORMAT_FAILED = 0,   /* why says which rule */
    RLPI_FORMAT_NOMEM = -1,
    RLPI_FORMAT_INVALID = -2  /* the metadata is unusable (e.g. an unknown "answer_type"): why says so */
};
/* Checks the tags and then the <answer> content against cfg->answer. */
int rlpi_format_check(const rlpi_format_cfg *cfg, const rlp_reward_request *req, char *why, size_t cap);

/* Shared parsers, so that the format check and the answer scores read
 * answers one way. */
/* The role (1 knight, 2 knave, 0 none) that a (m) states for the person
 * `name` (len bytes) as kk.py's \bNAME\b\s+is\s+a\s+\b(knight|knave)\b,
 * ASCII case-insensitive (kk_answer.c). */
int rlpi_kk_stated_role(const char *a, size_t m, const char *name, size_t len);
/* 1 when a (m) holds any "WORD is a knight|knave" claim (kk_answer.c). */
int rlpi_kk_any_claim(const char *a, size_t m);
/* 1 when all of s (n) is a well-formed Countdown equation: integers,
 * + - * /, parentheses (countdown.c). */
int rlpi_countdown_well_formed(const char *s, size_t n);

/* Logic-RL's K&K answer score, shared by kk_answer and logic_rl
 * (kk_answer.c). */
typedef struct rlpi_kk_cfg {
    double correct, wrong, unparsable, count_mismatch;
    int require_format;
} rlpi_kk_cfg;

int rlpi_kk_read(rlpi_opts *o, rlpi_kk_cfg *cfg);
/* Sets *score and why; returns 1 (scored), 0 (invalid: no usable
 * reference, why says so) or -1 (out of memory). */
int rlpi_kk_score(const rlpi_kk_cfg *cfg, const rlp_reward_request *req, int format_ok, double *score, char *why,
                  size_t cap);

/* The reference as a number: a number (after trimming and light LaTeX
 * normalisation), or a whole GSM8K answer with a "#### N" line (gsm8k.c).
 * 1 (out set), 0 (not a number), -1 (out of memory). */
int rlpi_gsm8k_reference_number(const char *ref, rlpi_num *out);

#endif
