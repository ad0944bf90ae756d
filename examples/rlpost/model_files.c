/* Tokenizer lookup and encoding helpers for the driver (public API only). */
#include "model_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

rlp_tokenizer *load_model_tokenizer(const char *model)
{
    struct stat st;
    char path[4096];
    if (stat(model, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/tokenizer.json", model);
    else
        snprintf(path, sizeof path, "%s", model);
    rlp_tokenizer *t;
    if (rlp_tokenizer_load(&t, path) != RLP_OK) {
        fprintf(stderr, "rlpost: no tokenizer for %s: %s\n", model, rlp_error_last());
        return NULL;
    }
    return t;
}

/* the buffer protocol: RLP_E_OVERFLOW tells the size needed */
int32_t *encode_text(const rlp_tokenizer *tok, const char *text, uint32_t flags, size_t *n)
{
    size_t need = 0;
    int rc = rlp_tokenizer_encode(tok, text, strlen(text), flags, NULL, 0, &need);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW) {
        fprintf(stderr, "rlpost: encode: %s\n", rlp_error_last());
        return NULL;
    }
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || rlp_tokenizer_encode(tok, text, strlen(text), flags, ids, need, n) != RLP_OK) {
        fprintf(stderr, "rlpost: encode: %s\n", rlp_error_last());
        free(ids);
        return NULL;
    }
    return ids;
}

int32_t *encode_chat(const rlp_tokenizer *tok, const char *user, size_t *n)
{
    rlp_chat_message msg = {"user", user};
    return encode_chat_messages(tok, &msg, 1, n);
}

int32_t *encode_chat_messages(const rlp_tokenizer *tok, const rlp_chat_message *msgs, size_t n_msgs, size_t *n)
{
    return encode_chat_messages_opts(tok, msgs, n_msgs, NULL, n);
}

int32_t *encode_chat_messages_opts(const rlp_tokenizer *tok, const rlp_chat_message *msgs, size_t n_msgs,
                                   const rlp_chat_options *opts, size_t *n)
{
    size_t need = 0;
    int rc = rlp_tokenizer_apply_chat_template_opts(tok, msgs, n_msgs, opts, NULL, 0, &need);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW) {
        fprintf(stderr, "rlpost: chat template: %s\n", rlp_error_last());
        return NULL;
    }
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || rlp_tokenizer_apply_chat_template_opts(tok, msgs, n_msgs, opts, ids, need, n) != RLP_OK) {
        fprintf(stderr, "rlpost: chat template: %s\n", rlp_error_last());
        free(ids);
        return NULL;
    }
    return ids;
}
