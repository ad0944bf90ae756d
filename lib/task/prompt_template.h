/* Prompt templates of a task: an optional system prompt, a user-message
 * template around the question, and an assistant prefix that opens the
 * assistant's turn (Logic-RL's "<think>"). Rendering to ids goes through
 * the tokenizer's chat template so that question text is never parsed for
 * special tokens (public-bugs case #1). Must not know about datasets. */
#ifndef RLPI_TASK_PROMPT_TEMPLATE_H
#define RLPI_TASK_PROMPT_TEMPLATE_H

#include "rlpost.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_template {
    char *system;           /* NULL: no system message */
    char *user;             /* contains "{prompt}" exactly once */
    char *assistant_prefix; /* NULL: none */
    int chat;               /* 1: render through the tokenizer's chat template when given one */
    int enable_thinking;    /* 0: Qwen3's non-thinking generation prompt (rlp_chat_options) */
} rlpi_template;

/* Fills *t from the option keys "template" (a preset name; default
 * `default_preset`), "system_prompt", "user_template", "assistant_prefix"
 * and "chat" of `options` (may be NULL). "chat" is true, false, or an
 * object of chat-template options (rendering through the chat template):
 * {"enable_thinking": bool}. RLP_E_INVALID_ARG naming the key. */
int rlpi_template_from_options(rlpi_template *t, const json_t *options, const char *default_preset);
void rlpi_template_free(rlpi_template *t);

/* The user message: the user template with the question in place of
 * "{prompt}". Malloc'd; NULL when out of memory. */
char *rlpi_template_user(const rlpi_template *t, const char *question);

/* The plain-text prompt: system + user message + assistant prefix, joined
 * as they are (presets put their own separators in the user template). */
char *rlpi_template_plain(const rlpi_template *t, const char *question);

/* Renders through `tok`'s chat template: [system], user, generation prompt,
 * then the assistant prefix encoded as plain text. *ids (malloc'd, *n_ids
 * of them) and *text (the ids decoded with special tokens shown). */
int rlpi_template_encode(const rlpi_template *t, const rlp_tokenizer *tok, const char *question,
                         int32_t **ids, size_t *n_ids, char **text);

/* Exact text of the presets' system prompts, for tests. */
extern const char rlpi_logic_rl_system[];
extern const char rlpi_logic_rl_base_system[];
extern const char rlpi_search_system[];
extern const char rlpi_hermes_system[];

#endif
