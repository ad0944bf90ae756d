/* libFuzzer target: chat templates on untrusted text: the template source
 * a model ships (tokenizer_config.json's chat_template, GGUF's
 * tokenizer.chat_template) and the messages a client sends (`rlpost serve`
 * /v1/chat/completions, dataset prompts). Input: byte 0 bit 0 is
 * add_generation_prompt; the rest is split at 0x1E into a
 * tokenizer_config.json (also tried as a bare template source) and up to
 * 16 messages "role 0x1F content". Every template must render or refuse,
 * and message content must never become a special token (public-bugs
 * case #1): the template's special tokens are counted against what its
 * scaffolding alone puts there. */
#include "fuzz_small_tokenizer.h"
#include "model/tokenizer.h"

#include "rlpost.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MSGS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t count(const rlpi_ids *ids, int32_t id)
{
    size_t k = 0;
    for (size_t i = 0; i < ids->n; i++)
        k += ids->v[i] == id;
    return k;
}

static void check_counts(int kind, const rlpi_chat_msg *m, size_t n, bool gen, const rlpi_ids *ids)
{
    size_t im_start = 0, im_end = 0, header = 0, eot = 0, bot = 0;
    if (kind == RLPI_CHAT_CHATML_SMOLLM) {
        size_t sys = strcmp(m[0].role, "system") != 0;
        im_start = n + sys + gen;
        im_end = n + sys;
    } else if (kind == RLPI_CHAT_QWEN3 || kind == RLPI_CHAT_CHATML) {
        /* one turn per non-tool message and per run of tool results (Qwen2.5 and Qwen3) */
        size_t turns = 0;
        for (size_t i = 0; i < n; i++)
            turns += strcmp(m[i].role, "tool") != 0 || i == 0 || strcmp(m[i - 1].role, "tool") != 0;
        im_start = turns + gen;
        im_end = turns;
    } else if (kind == RLPI_CHAT_LLAMA3) {
        bot = 1;
        header = n + gen;
        eot = n;
    } else {
        return; /* Llama-2's markers are plain text */
    }
    if (count(ids, FUZZ_TOK_IM_START) != im_start || count(ids, FUZZ_TOK_IM_END) != im_end ||
        count(ids, FUZZ_TOK_START_HEADER) != header || count(ids, FUZZ_TOK_END_HEADER) != header ||
        count(ids, FUZZ_TOK_EOT) != eot || count(ids, FUZZ_TOK_BEGIN_OF_TEXT) != bot ||
        count(ids, FUZZ_TOK_ENDOFTEXT) != 0)
        abort();
}

static bool roles_ok(const rlpi_chat_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(m[i].role);
        if (l == 0 || l > 32 || strspn(m[i].role, "abcdefghijklmnopqrstuvwxyz_") != l)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *tok_json;
    if (!tok_json && !(tok_json = fuzz_small_tokenizer_json()))
        abort();
    if (size == 0)
        return 0;
    bool gen = data[0] & 1;
    /* fields as NUL-terminated copies (content with a NUL ends there, as
     * in the C API) */
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    size_t len = size - 1;
    char *fields[MAX_MSGS + 1];
    size_t n_fields = 0;
    char *p = text;
    while (n_fields < MAX_MSGS + 1) {
        fields[n_fields++] = p;
        char *sep = memchr(p, 0x1E, len - (size_t)(p - text));
        if (!sep)
            break;
        *sep = '\0';
        p = sep + 1;
    }
    rlpi_chat_msg m[MAX_MSGS];
    size_t n = 0;
    for (size_t i = 1; i < n_fields; i++, n++) {
        char *us = strchr(fields[i], 0x1F);
        if (us) {
            *us = '\0';
            m[n].role = fields[i];
            m[n].content = us + 1;
        } else {
            m[n].role = "user";
            m[n].content = fields[i];
        }
    }

    /* a bare template source, as GGUF metadata gives it */
    int kind;
    if (rlpi_chat_template_detect(&kind, fields[0]) == RLP_OK && !rlpi_chat_template_name(kind))
        abort();
    /* the same text as tokenizer_config.json next to a good tokenizer.json;
     * text that cannot be a JSON object reuses the tokenizer without one
     * (building a tokenizer per input would dominate the run time) */
    static rlpi_tokenizer *plain;
    if (!plain && rlpi_tokenizer_from_json(&plain, tok_json, strlen(tok_json), NULL, 0) != RLP_OK)
        abort(); /* the fixed tokenizer.json must load */
    rlpi_tokenizer *own = NULL;
    const char *cfg = fields[0] + strspn(fields[0], " \t\r\n");
    if (cfg[0] == '{')
        (void)rlpi_tokenizer_from_json(&own, tok_json, strlen(tok_json), cfg, strlen(cfg));
    const rlpi_tokenizer *tok = own ? own : plain;

    if (n > 0) {
        int kinds[7] = {RLPI_CHAT_CHATML, RLPI_CHAT_CHATML_SMOLLM, RLPI_CHAT_LLAMA3, RLPI_CHAT_LLAMA2,
                        RLPI_CHAT_QWEN3, RLPI_CHAT_GEMMA3, rlpi_chat_template_default(tok)};
        bool ok_roles = roles_ok(m, n), thinking = !(data[0] & 2);
        for (int k = 0; k < 7; k++) {
            rlpi_ids ids = {NULL, 0, 0};
            int rc = rlpi_chat_template_apply_ex(tok, kinds[k], m, n, gen, thinking, &ids);
            if (rc == RLP_OK)
                check_counts(kinds[k], m, n, gen, &ids);
            else if (ok_roles && (kinds[k] == RLPI_CHAT_CHATML || kinds[k] == RLPI_CHAT_CHATML_SMOLLM ||
                                  kinds[k] == RLPI_CHAT_LLAMA3))
                abort(); /* these take any well-formed role */
            rlpi_ids_free(&ids);
        }
    }
    rlpi_tokenizer_destroy(own);
    free(text);
    return 0;
}
