/**
 * @file rlpost/tokenizer.h
 * @brief librlpost: tokenizers, chat templates, streaming decoding (rlp_tokenizer).
 *
 * Part of the public API that rlpost.h includes as a whole (its comment
 * states the conventions every function follows); this header may also be
 * included alone.
 */
#ifndef RLPOST_TOKENIZER_H
#define RLPOST_TOKENIZER_H

#include "rlpost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */
/* ------------------------------------------------------------------------ */

/** Roles of the special token ids a tokenizer knows (rlp_tokenizer_special_id()). */
typedef enum rlp_token_role {
    RLP_TOKEN_BOS = 0, /**< beginning of sequence */
    RLP_TOKEN_EOS = 1, /**< end of sequence / end of turn */
    RLP_TOKEN_PAD = 2, /**< padding */
    RLP_TOKEN_UNK = 3  /**< unknown */
} rlp_token_role;

/** Flags of rlp_tokenizer_encode(). */
typedef enum rlp_encode_flags {
    RLP_ENCODE_ADD_BOS = 1,      /**< prepend the BOS id (if the tokenizer has one) */
    RLP_ENCODE_PARSE_SPECIAL = 2 /**< text spelling a special token (e.g. "<|im_end|>")
                                      becomes that token; without it the text is
                                      encoded as ordinary characters */
} rlp_encode_flags;

/** Flags of rlp_tokenizer_decode(). */
typedef enum rlp_decode_flags {
    RLP_DECODE_SKIP_SPECIAL = 1 /**< leave special (control) tokens out of the text */
} rlp_decode_flags;

/**
 * Loads a tokenizer from a file, recognised by its content:
 * - a Hugging Face `tokenizer.json` with a BPE model: byte-level BPE (GPT-2,
 *   SmolLM/SmolLM2, Qwen2/Qwen3, Llama-3) or Llama-2-style BPE with byte
 *   fallback. A `tokenizer_config.json` in the same folder, if present,
 *   supplies bos/eos/pad tokens, `add_bos_token` and `chat_template`.
 * - a llama2.c `tokenizer.bin` (SentencePiece-style BPE with scores).
 *
 * The file is treated as hostile: sizes, counts and ids are bounds-checked.
 *
 * @param[out] out  receives the tokenizer; free with rlp_tokenizer_free()
 * @param path      file path (NUL-terminated)
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL argument); RLP_E_IO (cannot read);
 *         RLP_E_FORMAT (malformed); RLP_E_UNSUPPORTED (a GGUF file — load it
 *         with its model — or a tokenizer.json component that is not
 *         supported, named in rlp_error_last()); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_load(rlp_tokenizer **out, const char *path);

/** Frees a tokenizer. NULL is a no-op. Detokenizers made from it must be
 *  freed first. */
RLP_API void rlp_tokenizer_free(rlp_tokenizer *tok);

/**
 * Encodes UTF-8 text to token ids.
 *
 * Special-token text is matched only with RLP_ENCODE_PARSE_SPECIAL; put it
 * only on text you wrote yourself, never on user, dataset or tool text
 * (whose "<|im_end|>" would otherwise close a chat turn). Non-special added
 * tokens are always matched, as Hugging Face tokenizers do. Ill-formed UTF-8
 * is encoded byte by byte (byte-level BPE) or through byte fallback.
 *
 * @param tok    the tokenizer
 * @param text   the text, @p len bytes (need not be NUL-terminated; may be
 *               NULL when @p len is 0)
 * @param len    bytes of @p text
 * @param flags  rlp_encode_flags, OR-ed
 * @param[out] ids  receives up to @p cap ids (int32); may be NULL when @p cap is 0
 * @param cap    capacity of @p ids in ids
 * @param[out] n_out  receives the number of ids the text encodes to — also
 *               when it returns RLP_E_OVERFLOW, so a caller can size a buffer
 * @return RLP_OK; RLP_E_OVERFLOW when @p cap is too small (the first @p cap
 *         ids are written); RLP_E_INVALID_ARG; RLP_E_NOMEM.
 * Thread-safe: several threads may encode with one tokenizer at once.
 */
RLP_API int rlp_tokenizer_encode(const rlp_tokenizer *tok, const char *text, size_t len,
                                 uint32_t flags, int32_t *ids, size_t cap, size_t *n_out);

/**
 * Decodes token ids to UTF-8 text. Byte sequences that are not well-formed
 * UTF-8 (e.g. a character cut off at the end) become U+FFFD, one per
 * maximal ill-formed subpart (as Python's `errors="replace"`). For
 * SentencePiece vocabularies the leading space of the first word is removed.
 *
 * @param tok    the tokenizer
 * @param ids    @p n token ids
 * @param n      number of ids
 * @param flags  rlp_decode_flags
 * @param[out] text  receives the text and a terminating NUL
 * @param cap    capacity of @p text in bytes (may be 0 with @p text NULL)
 * @param[out] len_out  receives the text length without the NUL, also on
 *               RLP_E_OVERFLOW (then @p cap must be at least len + 1)
 * @return RLP_OK; RLP_E_OVERFLOW; RLP_E_INVALID_ARG (NULL, or an id outside
 *         the vocabulary, named in the message); RLP_E_NOMEM.
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_decode(const rlp_tokenizer *tok, const int32_t *ids, size_t n,
                                 uint32_t flags, char *text, size_t cap, size_t *len_out);

/**
 * The bytes one token decodes to (GPT-2 byte mapping undone, ▁ as a space,
 * `<0xNN>` as the byte, special tokens as their text). They need not be
 * valid UTF-8 on their own and may contain NUL (the `<0x00>` token).
 *
 * @param[out] out_text  receives a borrowed pointer, valid until the
 *                       tokenizer is freed; NUL-terminated
 * @param[out] out_len   receives the length in bytes
 * @param tok  the tokenizer
 * @param id   a token id
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL or id outside the vocabulary).
 * Thread-safe.
 */
RLP_API int rlp_tokenizer_token_text(const char **out_text, size_t *out_len,
                                     const rlp_tokenizer *tok, int32_t id);

/**
 * Number of token ids (one past the largest id, added tokens included).
 * @param[out] out_size  receives the size
 * @param tok            the tokenizer
 * @return RLP_OK or RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_tokenizer_vocab_size(size_t *out_size, const rlp_tokenizer *tok);

/**
 * The id of a special token.
 * @param[out] out_id  receives the id
 * @param tok          the tokenizer
 * @param role         an rlp_token_role
 * @return RLP_OK; RLP_E_NOT_FOUND when the tokenizer has no such token;
 *         RLP_E_INVALID_ARG. Thread-safe.
 */
RLP_API int rlp_tokenizer_special_id(int32_t *out_id, const rlp_tokenizer *tok, int role);

/** One chat message. Both strings are UTF-8, NUL-terminated, borrowed. */
typedef struct rlp_chat_message {
    const char *role;    /**< "system", "user" or "assistant" */
    const char *content; /**< message text; never parsed for special tokens */
} rlp_chat_message;

/**
 * Chooses the chat template: a name ("chatml", "qwen3", "smollm2", "llama3",
 * "llama2", "gemma3" or "gemma") or the Jinja source of a model's template, recognised by its
 * distinctive parts. A tokenizer starts with the template of its
 * tokenizer_config.json (or GGUF), else the one its special tokens imply
 * (`<start_of_turn>`: gemma3; `<|im_start|>`: chatml; Llama-3's header
 * tokens: llama3; a SentencePiece vocabulary with BOS: llama2).
 *
 * @param tok        the tokenizer
 * @param name_or_source  NUL-terminated
 * @return RLP_OK; RLP_E_UNSUPPORTED (unknown template, an excerpt of it in
 *         the message); RLP_E_INVALID_ARG.
 * Not thread-safe against concurrent use of @p tok.
 */
RLP_API int rlp_tokenizer_set_chat_template(rlp_tokenizer *tok, const char *name_or_source);

/**
 * Name of the chat template in use ("chatml", "qwen3", "smollm2", "llama3",
 * "llama2", "gemma3"), or NULL when the tokenizer has none (rlp_error_last() says so).
 * Static string. Thread-safe.
 */
RLP_API const char *rlp_tokenizer_chat_template(const rlp_tokenizer *tok);

/**
 * Renders a conversation with the tokenizer's chat template and encodes it.
 * The template's own scaffolding (e.g. `<|im_start|>user\n`) is encoded with
 * special tokens parsed; message content never is, so a message that spells
 * "<|im_end|>" cannot end its turn. Templates: ChatML (Qwen2), Qwen3's
 * ChatML (reasoning kept in a <think> block only after the last user query;
 * tool definitions not supported), ChatML for SmolLM2 (with its default system prompt "You are a helpful AI assistant
 * named SmolLM, trained by Hugging Face" when the first message is not a
 * system message)), Llama-3 (3.0), Llama-2, Gemma 3 (a system message
 * folded into the first user turn, "assistant" written "model", contents
 * trimmed; user/assistant must alternate, no tool turns). Templates that
 * begin with a BOS (Llama-3, Llama-2, Gemma 3) write it themselves: the
 * ids hold exactly one BOS, so encode nothing in front of them.
 * Same as rlp_tokenizer_apply_chat_template_opts() with enable_thinking 1.
 *
 * @param tok    the tokenizer
 * @param msgs   @p n messages
 * @param n      number of messages (≥ 1)
 * @param add_generation_prompt  non-zero: end with the assistant turn opener
 * @param[out] ids   receives up to @p cap ids
 * @param cap    capacity of @p ids
 * @param[out] n_out  the number of ids, also on RLP_E_OVERFLOW
 * @return RLP_OK; RLP_E_OVERFLOW; RLP_E_INVALID_ARG (NULL, or a role the
 *         template does not accept); RLP_E_UNSUPPORTED (no chat template);
 *         RLP_E_NOMEM.
 * Thread-safe (with itself and encode).
 */
RLP_API int rlp_tokenizer_apply_chat_template(const rlp_tokenizer *tok,
                                              const rlp_chat_message *msgs, size_t n,
                                              int add_generation_prompt, int32_t *ids,
                                              size_t cap, size_t *n_out);

/** Version of rlp_chat_options understood by this header. */
#define RLP_CHAT_OPTIONS_VERSION 1

/** Options of rlp_tokenizer_apply_chat_template_opts() (the keyword
 *  arguments of a Jinja template's render call). Fields are only ever
 *  appended; set @ref version. */
typedef struct rlp_chat_options {
    uint32_t version;          /**< RLP_CHAT_OPTIONS_VERSION */
    int add_generation_prompt; /**< non-zero (default): end with the assistant turn opener */
    int enable_thinking;       /**< Qwen3 only, others ignore it: 0 ends the generation
                                    prompt with an empty, closed reasoning block
                                    ("<think>\n\n</think>\n\n"), as Qwen3's template does
                                    with enable_thinking=False, so the model answers
                                    without reasoning; non-zero (default) renders as
                                    rlp_tokenizer_apply_chat_template() */
} rlp_chat_options;

#define RLP_CHAT_OPTIONS_INIT { RLP_CHAT_OPTIONS_VERSION, 1, 1 }

/** Fills @p opts with the defaults (RLP_CHAT_OPTIONS_INIT).
 *  @return RLP_OK; RLP_E_INVALID_ARG (NULL, or @p version not 1 …
 *  RLP_CHAT_OPTIONS_VERSION). Thread-safe. */
RLP_API int rlp_chat_options_init(rlp_chat_options *opts, uint32_t version);

/**
 * rlp_tokenizer_apply_chat_template() with options.
 *
 * @param tok    the tokenizer
 * @param msgs   @p n messages
 * @param n      number of messages (≥ 1)
 * @param opts   options (version 1 … RLP_CHAT_OPTIONS_VERSION); NULL means
 *               RLP_CHAT_OPTIONS_INIT
 * @param[out] ids   receives up to @p cap ids
 * @param cap    capacity of @p ids
 * @param[out] n_out  the number of ids, also on RLP_E_OVERFLOW
 * @return as rlp_tokenizer_apply_chat_template(); RLP_E_INVALID_ARG also
 *         for an unknown @p opts->version.
 * Thread-safe (with itself and encode).
 */
RLP_API int rlp_tokenizer_apply_chat_template_opts(const rlp_tokenizer *tok,
                                                   const rlp_chat_message *msgs, size_t n,
                                                   const rlp_chat_options *opts, int32_t *ids,
                                                   size_t cap, size_t *n_out);

/** Streaming decoder: turns ids arriving one at a time into text deltas. */
typedef struct rlp_detokenizer rlp_detokenizer;

/**
 * Creates a streaming decoder. It holds back the bytes of a character that
 * is split across tokens until the character is complete, so no delta ever
 * contains U+FFFD for such a character, no character is sent twice, and the
 * concatenated deltas plus the final flush equal rlp_tokenizer_decode() of
 * all ids.
 *
 * @param[out] out  receives the decoder; free with rlp_detokenizer_free()
 * @param tok       the tokenizer; must outlive the decoder
 * @param flags     rlp_decode_flags
 * @return RLP_OK, RLP_E_INVALID_ARG or RLP_E_NOMEM. Thread-safe.
 */
RLP_API int rlp_detokenizer_create(rlp_detokenizer **out, const rlp_tokenizer *tok,
                                   uint32_t flags);

/**
 * Feeds one id.
 * @param[out] out_text  receives the new text (possibly "", never NULL),
 *                       NUL-terminated, owned by the decoder and valid until
 *                       its next call
 * @param[out] out_len   receives its length
 * @param det  the decoder
 * @param id   the next token id
 * @return RLP_OK; RLP_E_INVALID_ARG (NULL or id outside the vocabulary);
 *         RLP_E_NOMEM. One thread at a time per decoder.
 */
RLP_API int rlp_detokenizer_push(const char **out_text, size_t *out_len, rlp_detokenizer *det,
                                 int32_t id);

/**
 * Ends the stream: returns the held-back bytes, lossily decoded (an
 * incomplete character becomes U+FFFD), and resets the decoder for a new
 * stream. Same out-parameters and errors as rlp_detokenizer_push().
 */
RLP_API int rlp_detokenizer_flush(const char **out_text, size_t *out_len, rlp_detokenizer *det);

/** Frees a streaming decoder. NULL is a no-op. */
RLP_API void rlp_detokenizer_free(rlp_detokenizer *det);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLPOST_TOKENIZER_H */
