/* The interface every kind of reward implements (callbacks, built-ins, the
 * HTTP verifier): score a run of samples into pre-initialised results. A
 * scorer knows nothing about batches, threads or deadlines; the executor
 * (executor.h) runs it and the handle (reward_fn.c) applies what comes out.
 * Scorers are reference-counted because a call abandoned past its deadline
 * may still be running one after its handle was freed. */
#ifndef RLPI_REWARD_SCORER_H
#define RLPI_REWARD_SCORER_H

#include "rlpost.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Why a sample ended up invalid (or RLPI_RW_OK). */
enum {
    RLPI_RW_OK = 0,
    RLPI_RW_REJECTED = 1,  /* the scorer said valid = 0 (no reference, bad metadata, …) */
    RLPI_RW_ERROR = 2,     /* the call returned an error (or an HTTP request failed) */
    RLPI_RW_TIMEOUT = 3,   /* the call overran its deadline (or an HTTP request timed out) */
    RLPI_RW_NONFINITE = 4, /* NaN/Inf score or token score */
    RLPI_RW_NOWORKER = 5,  /* every worker was stuck in an abandoned call */
    RLPI_RW_CRASH = 6      /* the worker process scoring it died (isolated.c) */
};

typedef struct rlpi_scorer_ops {
    /* Scores n >= 1 samples into res (n, initialised as rlp_reward_result
     * documents). May set fail[i] to an RLPI_RW_* kind (with res[i].reason)
     * for a sample that failed on its own; fail is zeroed. Returns 0, or
     * non-zero when the whole call failed (res[0].reason may say why). */
    int (*score)(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail);
    /* Frees impl (and a callback's payload when it was handed over). */
    void (*destroy)(void *impl);
} rlpi_scorer_ops;

typedef struct rlpi_scorer {
    atomic_int refs;
    const rlpi_scorer_ops *ops;
    void *impl;
    size_t chunk;          /* samples per call: 1 (single form), k (batch form), 0 = all in one call */
    int token_scores;      /* may give per-token scores: buffers are provided */
    int bounds_own_time;   /* 1: the scorer enforces its own deadlines (HTTP); no executor deadline */
    int needs_reference;   /* 0: the scorer never reads request->reference (skip reading the metadata) */
    /* Optional (NULL = always fine): after a run, on the scoring thread,
     * non-zero (with the error message set) when the scorer cannot go on
     * and the score call must fail, e.g. its worker processes keep dying. */
    int (*check)(void *impl);
} rlpi_scorer;

/* A scorer with one reference; destroy(impl) runs when the last goes.
 * On failure impl is destroyed too. RLP_OK or RLP_E_NOMEM. */
int rlpi_scorer_create(rlpi_scorer **out, const rlpi_scorer_ops *ops, void *impl, size_t chunk);
void rlpi_scorer_ref(rlpi_scorer *sc);
void rlpi_scorer_unref(rlpi_scorer *sc);

/* Appends src to the NUL-terminated dst (cap bytes), truncating. */
void rlpi_cat(char *dst, size_t cap, const char *src);

/* printf into a result's reason (truncated to fit). */
void rlpi_reason(rlp_reward_result *res, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
