/* Strict parsing of numeric command-line values for the driver's
 * subcommands: the whole string must be a number inside the stated range,
 * so "--top-p 1.5" or "--n 3x" is a usage error (exit 2), never a silent
 * default. Each returns 0 on success and -1 on a bad value. */
#ifndef RLPOST_CLI_ARGS_H
#define RLPOST_CLI_ARGS_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rlpost.h"

static inline int cli_float(const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = (float)v;
    return 0;
}

static inline int cli_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static inline int cli_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A rollout-weights name ("f32", "q8_0", "q4_0", "auto": --weights of generate and
 * serve, rollout.weights of train) as its rlp_rollout_weights, or -1. */
static inline int cli_rollout_weights(const char *v)
{
    return !v ? -1
           : !strcmp(v, "f32")  ? RLP_ROLLOUT_WEIGHTS_F32
           : !strcmp(v, "q8_0") ? RLP_ROLLOUT_WEIGHTS_Q8_0
           : !strcmp(v, "q4_0") ? RLP_ROLLOUT_WEIGHTS_Q4_0
           : !strcmp(v, "auto") ? RLP_ROLLOUT_WEIGHTS_AUTO
                                : -1;
}

/* A config's or flag's matmul precision: an rlp_matmul_precision, or -1
 * for anything else. "tf32" is accepted everywhere (the CPU runs it as
 * fp32). */
static inline int cli_matmul_precision(const char *v)
{
    return !v ? -1
           : !strcmp(v, "fp32") ? RLP_MATMUL_FP32
           : !strcmp(v, "tf32") ? RLP_MATMUL_TF32
           : !strcmp(v, "bf16") ? RLP_MATMUL_BF16
           : !strcmp(v, "auto") ? RLP_MATMUL_AUTO
                                : -1;
}

/* The name of a resolved precision (what rlp_context_matmul_precision
 * reads), as the config spells it. */
static inline const char *cli_matmul_name(int precision)
{
    return precision == RLP_MATMUL_BF16 ? "bf16" : precision == RLP_MATMUL_TF32 ? "tf32" : "fp32";
}

#endif
