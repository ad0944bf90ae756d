/* The CPU backend's sample_rows slot: rlpi_sample() (lib/backend/sampler.c)
 * on each row, rows spread over the backend's thread pool, with one sampler
 * scratch per pool thread kept for the backend's lifetime. It must not
 * sample differently from rlpi_sample: the host sampler is the reference
 * the CUDA kernel is tested against. */
#include "backend/cpu_kernels.h"

#include "core/error.h"
#include "core/threadpool.h"
#include "backend/sampler.h"
#include "rlpost.h"

#include <pthread.h>
#include <stdlib.h>

struct rlpi_cpu_sampler {
    pthread_mutex_t mu; /* one sample_rows at a time owns the scratch */
    int n;
    rlpi_sampler_scratch scratch[]; /* (n) one per pool thread id */
};

int rlpi_cpu_sampler_create(rlpi_cpu_sampler **out, int n_threads)
{
    rlpi_cpu_sampler *s = calloc(1, sizeof *s + (size_t)n_threads * sizeof s->scratch[0]);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "cpu backend: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->n = n_threads;
    *out = s;
    return RLP_OK;
}

void rlpi_cpu_sampler_free(rlpi_cpu_sampler *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        rlpi_sampler_scratch_free(&s->scratch[i]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

typedef struct sample_arg {
    rlpi_cpu_sampler *s;
    int32_t *tokens;
    float *logprobs;
    const float *logits;
    const int32_t *rows;
    int32_t vocab;
    const rlpi_sampler_params *params;
    const double *u;
    int64_t first_bad; /* lowest draw that failed (n if none) */
} sample_arg;

static void sample_range(void *p, int64_t b, int64_t e, int tid)
{
    sample_arg *a = p;
    for (int64_t i = b; i < e; i++) {
        size_t row = (size_t)(a->rows ? a->rows[i] : i);
        if (rlpi_sample(a->logits + row * (size_t)a->vocab, a->vocab, &a->params[i], a->u[i], &a->s->scratch[tid],
                        &a->tokens[i], &a->logprobs[i]) != RLP_OK) {
            /* the message is this worker's; the caller redoes the draw */
            int64_t cur = __atomic_load_n(&a->first_bad, __ATOMIC_RELAXED);
            while (i < cur && !__atomic_compare_exchange_n(&a->first_bad, &cur, i, 0, __ATOMIC_RELAXED,
                                                           __ATOMIC_RELAXED)) {
            }
            return;
        }
    }
}

int rlpi_cpu_sample_rows(rlpi_threadpool *pool, rlpi_cpu_sampler *s, int32_t *tokens, float *logprobs,
                         const float *logits, const int32_t *rows, int64_t n, int64_t vocab,
                         const rlpi_sampler_params *params, const double *u)
{
    sample_arg a = {.s = s, .tokens = tokens, .logprobs = logprobs, .logits = logits, .rows = rows,
                    .vocab = (int32_t)vocab, .params = params, .u = u, .first_bad = n};
    pthread_mutex_lock(&s->mu);
    rlpi_threadpool_parallel_for(pool, n, 1, sample_range, &a);
    int rc = RLP_OK;
    if (a.first_bad < n) {
        /* error messages are per thread: draw the failed row again here to
         * report it (deterministic, so it fails the same way) */
        int64_t i = a.first_bad;
        size_t row = (size_t)(rows ? rows[i] : i);
        rc = rlpi_sample(logits + row * (size_t)vocab, (int32_t)vocab, &params[i], u[i], &s->scratch[0],
                         &tokens[i], &logprobs[i]);
        if (rc != RLP_OK)
            rlpi_error_wrap("sample rows: draw %lld (logits row %lld)", (long long)i, (long long)row);
        else /* cannot happen; never report success for a failed draw */
            rc = rlpi_error_set(RLP_E_INTERNAL, "sample rows: draw %lld failed once only", (long long)i);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
