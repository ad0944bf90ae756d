/* Shared helpers of the driver's model subcommands. */
#ifndef RLPOST_MODEL_FILES_H
#define RLPOST_MODEL_FILES_H

#include "rlpost.h"

/* The tokenizer that belongs to MODEL: the GGUF itself, or
 * MODEL/tokenizer.json for an HF folder. NULL with a message on stderr. */
rlp_tokenizer *load_model_tokenizer(const char *model);

/* Encodes text into a malloc'd array (*n ids); NULL on error. */
int32_t *encode_text(const rlp_tokenizer *tok, const char *text, uint32_t flags, size_t *n);

/* Chat-templates one user message (with the generation prompt). */
int32_t *encode_chat(const rlp_tokenizer *tok, const char *user, size_t *n);

/* Chat-templates a conversation (with the generation prompt); message
 * content is never parsed for special tokens. */
int32_t *encode_chat_messages(const rlp_tokenizer *tok, const rlp_chat_message *msgs, size_t n_msgs, size_t *n);
/* The same with chat options (Qwen3's enable_thinking); NULL = defaults. */
int32_t *encode_chat_messages_opts(const rlp_tokenizer *tok, const rlp_chat_message *msgs, size_t n_msgs,
                                   const rlp_chat_options *opts, size_t *n);

#endif
