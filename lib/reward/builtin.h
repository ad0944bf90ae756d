/* Built-in verifiers: the registry by name, the strict reader of their
 * JSON options (an unknown key is an error) and each built-in's
 * constructor. Each constructor reads its own keys; the registry reads the
 * keys every built-in shares. */
#ifndef RLPI_REWARD_BUILTIN_H
#define RLPI_REWARD_BUILTIN_H

#include "reward/scorer.h"

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

/* Logic-RL's format check, shared by logic_rl_format, kk_answer and
 * logic_rl (logic_rl_format.c). */
typedef struct rlpi_format_cfg {
    char *prefix;      /* assistant_prefix, or NULL = "<think>" when the prompt ends with it */
    double correct, wrong;
} rlpi_format_cfg;

int rlpi_format_read(rlpi_opts *o, rlpi_format_cfg *cfg);
void rlpi_format_free(rlpi_format_cfg *cfg);
/* 1 when the assistant's text passes; else 0 with why (cap bytes) set.
 * -1 when out of memory. */
int rlpi_format_check(const rlpi_format_cfg *cfg, const rlp_reward_request *req, char *why, size_t cap);

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

#endif
