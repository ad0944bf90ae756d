/* libFuzzer target: request bodies of `rlpost serve` (serve_api.c), what
 * any client on the network sends to /v1/completions and
 * /v1/chat/completions. Byte 0 picks the endpoint (bit 0) and the chat
 * template (bits 1-3); the rest is the body. A body must be refused with
 * a message or become a job the generation thread can run unchecked:
 * prompts within the context and the vocabulary, sampling options inside
 * the ranges the engine accepts, stop strings and ids as counted. */
#include "../../examples/rlpost/serve.h"
#include "fuzz_small_tokenizer.h"
#include "model/tokenizer.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQ_LEN 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const templates[] = {"chatml", "qwen3", "smollm2", "llama3", "llama2", "gemma3"};

static void check_job(const serve_server *srv, const serve_job *job)
{
    const rlp_sampling_options *s = &job->sampling;
    if (job->n_prompts == 0 || !job->prompts || !job->prompt_lens || (job->kind == JOB_CHAT && job->n_prompts != 1))
        abort();
    for (size_t i = 0; i < job->n_prompts; i++) {
        if (job->prompt_lens[i] == 0 || job->prompt_lens[i] >= srv->cfg.max_seq_len)
            abort();
        for (size_t k = 0; k < job->prompt_lens[i]; k++)
            if (job->prompts[i][k] < 0 || job->prompts[i][k] >= srv->cfg.vocab_size)
                abort();
    }
    if (s->n < 1 || s->n > SERVE_MAX_N || job->n_prompts * s->n > SERVE_MAX_SAMPLES ||
        job->remaining != job->n_prompts * s->n || !job->choice_chars || !job->choice_started ||
        !job->choice_version)
        abort();
    if (s->max_new_tokens < 1 || s->max_new_tokens > srv->cfg.max_seq_len)
        abort();
    if (!isfinite(s->temperature) || s->temperature < 0 || s->temperature > 100 || !(s->top_p > 0) ||
        s->top_p > 1 || s->top_k < 0 || !(s->min_p >= 0) || s->min_p > 1)
        abort();
    if (s->n_stop > SERVE_MAX_STOPS || (s->n_stop && s->stop != (const char *const *)job->stop))
        abort();
    for (size_t i = 0; i < s->n_stop; i++) {
        size_t l = strlen(job->stop[i]);
        if (l == 0 || l > SERVE_MAX_STOP_BYTES)
            abort();
    }
    if (s->n_stop_token_ids > SERVE_MAX_STOP_IDS)
        abort();
    for (size_t i = 0; i < s->n_stop_token_ids; i++)
        if (s->stop_token_ids[i] < 0 || s->stop_token_ids[i] >= srv->cfg.vocab_size)
            abort();
    if (s->logprobs_mode != RLP_LOGPROBS_SAMPLING && s->logprobs_mode != RLP_LOGPROBS_TEMPERED &&
        s->logprobs_mode != RLP_LOGPROBS_RAW)
        abort();
    if (job->kind == JOB_COMPLETION ? job->logprobs < -1 || job->logprobs > SERVE_MAX_LOGPROBS
                                    : job->logprobs != 0 && job->logprobs != 1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static serve_server srv;
    static rlp_tokenizer *toks[sizeof templates / sizeof templates[0]];
    if (!toks[0]) {
        char *json = fuzz_small_tokenizer_json();
        for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++) {
            rlpi_tokenizer *core = NULL;
            if (!json || rlpi_tokenizer_from_json(&core, json, strlen(json), NULL, 0) != RLP_OK ||
                rlpi_tokenizer_wrap_public(core, &toks[i]) != RLP_OK ||
                rlp_tokenizer_set_chat_template(toks[i], templates[i]) != RLP_OK)
                abort();
        }
        free(json);
        srv.cfg.model_name = "fuzz";
        srv.cfg.max_body_bytes = 1 << 20;
        srv.cfg.max_seq_len = MAX_SEQ_LEN;
        srv.cfg.vocab_size = FUZZ_TOK_N_VOCAB;
        srv.cfg.logprobs_mode = RLP_LOGPROBS_SAMPLING;
    }
    if (size == 0)
        return 0;
    srv.tok = toks[(data[0] >> 1) % (sizeof templates / sizeof templates[0])];
    size_t len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size: ASan sees a read past the body */
    if (!body)
        return 0;
    memcpy(body, data + 1, len);
    char err[512];
    err[0] = '\0';
    serve_job *job = data[0] & 1 ? serve_parse_chat(&srv, body, len, err, sizeof err)
                                 : serve_parse_completion(&srv, body, len, err, sizeof err);
    if (job) {
        check_job(&srv, job);
        serve_job_free(job);
    } else if (err[0] == '\0' || !memchr(err, '\0', sizeof err)) {
        abort(); /* a refusal must say why (the 400's message) */
    }
    free(body);
    return 0;
}
