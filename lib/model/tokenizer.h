/* Internal tokenizer core: one engine for byte-level BPE (GPT-2 family:
 * SmolLM/SmolLM2, Qwen2/Qwen3, Llama-3) and SentencePiece-style BPE with
 * <0xNN> byte fallback (Llama-2, llama2.c), built from generic tables so
 * that every loader (tokenizer.json, llama2.c tokenizer.bin, GGUF) only
 * fills an rlpi_tokenizer_spec. It does no file I/O. */
#ifndef RLPI_MODEL_TOKENIZER_H
#define RLPI_MODEL_TOKENIZER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Tokenizer models (GGUF `tokenizer.ggml.model`: "gpt2" → BYTE_BPE,
 * "llama" → SPM). */
typedef enum rlpi_tok_model {
    RLPI_TOK_BYTE_BPE = 1, /* bytes → GPT-2 unicode map → merges by rank */
    RLPI_TOK_SPM = 2       /* chars (▁ for space) → merges; <0xNN> fallback */
} rlpi_tok_model;

/* Token types, numbered as GGUF `tokenizer.ggml.token_type`. */
typedef enum rlpi_tok_type {
    RLPI_TT_UNDEFINED = 0,
    RLPI_TT_NORMAL = 1,
    RLPI_TT_UNKNOWN = 2,
    RLPI_TT_CONTROL = 3,      /* special token: matched in text only with parse_special */
    RLPI_TT_USER_DEFINED = 4, /* non-special added token: always matched in text */
    RLPI_TT_UNUSED = 5,
    RLPI_TT_BYTE = 6          /* SPM <0xNN> byte-fallback token */
} rlpi_tok_type;

/* Normalizers applied to text between added tokens. */
typedef enum rlpi_tok_norm {
    RLPI_NORM_NONE = 0,
    RLPI_NORM_NFC = 1,      /* Unicode NFC (Qwen2/Qwen3 tokenizer.json) */
    RLPI_NORM_SPM_ESCAPE = 2 /* prepend ▁ to each text run, ' ' → ▁ (Llama-2) */
} rlpi_tok_norm;

/* Merge priorities: for BPE the rank comes from the merge list (lower wins),
 * for SPM from the merged token's score (higher wins). */
typedef enum rlpi_tok_merge_src {
    RLPI_MERGES_FROM_LIST = 0,
    RLPI_MERGES_FROM_SCORES = 1
} rlpi_tok_merge_src;

#define RLPI_TOK_MAX_PRE 4

/*
 * Everything a loader knows about a tokenizer. Arrays are borrowed for the
 * duration of rlpi_tokenizer_build() only (it copies what it keeps).
 *
 * GGUF mapping (for the GGUF loader):
 *   model        tokenizer.ggml.model: "gpt2" → RLPI_TOK_BYTE_BPE,
 *                "llama" → RLPI_TOK_SPM (merge_src = FROM_SCORES unless
 *                merges are present)
 *   pre_name     tokenizer.ggml.pre ("default", "gpt2", "smollm", "qwen2",
 *                "llama-bpe", "llama3"; "llama-bpe" also turns on
 *                ignore_merges, "qwen2" NFC); NULL = the model's default. An
 *                unknown name makes build fail with RLP_E_UNSUPPORTED.
 *   tokens       tokenizer.ggml.tokens, in vocabulary form (byte-level
 *                tokens as GPT-2 unicode, e.g. "Ġthe"; SPM as "▁the")
 *   scores       tokenizer.ggml.scores (may be NULL for BYTE_BPE)
 *   token_types  tokenizer.ggml.token_type (NULL → NORMAL, except that
 *                SPM tokens spelled <0xNN> become BYTE)
 *   merges       tokenizer.ggml.merges as "a b"
 *   bos/eos/unk/pad  tokenizer.ggml.*_token_id, -1 when absent
 *   add_bos      tokenizer.ggml.add_bos_token
 *   spm_no_dummy_prefix  !tokenizer.ggml.add_space_prefix (SPM only)
 *   chat_template tokenizer.chat_template (may be NULL)
 */
typedef struct rlpi_tokenizer_spec {
    int model;                        /* rlpi_tok_model */
    const char *pre_name;             /* named pre-tokenizer, or NULL */
    /* Explicit split regexes (PCRE2, applied in order, "Isolated"
     * behaviour); when n_pre > 0 they replace pre_name. */
    const char *pre_regex[RLPI_TOK_MAX_PRE];
    size_t n_pre;
    bool byte_level_prefix_space;     /* ByteLevel add_prefix_space */
    size_t byte_level_stage;          /* index of the split stage ByteLevel sits at
                                         (its own regex, or n_pre when it has none) */
    bool ignore_merges;               /* whole word in vocab → one token (Llama-3) */
    int normalizer;                   /* rlpi_tok_norm */
    int merge_src;                    /* rlpi_tok_merge_src */

    size_t n_vocab;                   /* entries in tokens[] (ids 0..n_vocab-1) */
    const char *const *tokens;        /* [n_vocab]; NULL entries are holes */
    const size_t *token_lens;         /* [n_vocab] or NULL (then strlen) */
    const float *scores;              /* [n_vocab] or NULL */
    const int32_t *token_types;       /* [n_vocab] or NULL */
    size_t n_merges;
    const char *const *merges;        /* [n_merges] "left right" */
    const size_t *merge_lens;         /* [n_merges] or NULL */

    int32_t bos_id, eos_id, unk_id, pad_id; /* -1 = none */
    bool add_bos;                     /* default for encode */
    bool byte_fallback;               /* unknown chars → <0xNN> tokens */
    bool spm_no_dummy_prefix;         /* GGUF tokenizer.ggml.add_space_prefix = false */
    bool spm_prefix_first;            /* ▁ prefix only on text at the very start of the
                                         input (HF Metaspace prepend_scheme "first") */
    bool spm_prefix_unless_space;     /* no ▁ prefix on text already starting with one
                                         (HF Metaspace, unlike the Prepend normalizer) */
    const char *chat_template;        /* template source, or NULL */
} rlpi_tokenizer_spec;

/* Fills a spec with neutral defaults (ids -1, no tables). */
void rlpi_tokenizer_spec_init(rlpi_tokenizer_spec *spec);

typedef struct rlpi_tokenizer rlpi_tokenizer;

/* Builds a tokenizer from a spec. RLP_E_FORMAT on inconsistent tables
 * (duplicate token, merge of unknown tokens, id out of range),
 * RLP_E_UNSUPPORTED on an unknown model or pre-tokenizer. */
int rlpi_tokenizer_build(rlpi_tokenizer **out, const rlpi_tokenizer_spec *spec);
void rlpi_tokenizer_destroy(rlpi_tokenizer *tok);

/* A growable id vector. */
typedef struct rlpi_ids {
    int32_t *v;
    size_t n, cap;
} rlpi_ids;
int rlpi_ids_push(rlpi_ids *ids, int32_t id);
void rlpi_ids_free(rlpi_ids *ids);

/* One run of input text; parse_special says whether CONTROL tokens spelled
 * inside it become their ids. USER_DEFINED tokens are always matched (as
 * HF tokenizers and llama.cpp do). Text runs that are not separated by a
 * matched token are encoded as one string, so splitting a prompt into
 * scaffolding and content segments does not change the ids. */
typedef struct rlpi_text_seg {
    const char *text;
    size_t len;
    bool parse_special;
} rlpi_text_seg;

/* Appends the ids of the segments to *ids (BOS first when add_bos and the
 * tokenizer has one). Thread-safe on one tokenizer. */
int rlpi_tokenizer_encode_segs(const rlpi_tokenizer *tok, const rlpi_text_seg *segs,
                               size_t n_segs, bool add_bos, rlpi_ids *ids);

/* The bytes token `id` decodes to (byte-level mapping undone, ▁ → ' ',
 * <0xNN> → byte, special tokens as their text). NULL for a bad id. */
const char *rlpi_tokenizer_token_bytes(const rlpi_tokenizer *tok, int32_t id, size_t *len);
/* The token as spelled in the vocabulary ("Ġthe"). */
const char *rlpi_tokenizer_token_piece(const rlpi_tokenizer *tok, int32_t id, size_t *len);
int rlpi_tokenizer_token_type(const rlpi_tokenizer *tok, int32_t id);
int32_t rlpi_tokenizer_find(const rlpi_tokenizer *tok, const char *piece, size_t len);
size_t rlpi_tokenizer_n_vocab(const rlpi_tokenizer *tok);
int rlpi_tokenizer_model(const rlpi_tokenizer *tok);
bool rlpi_tokenizer_add_bos(const rlpi_tokenizer *tok);
bool rlpi_tokenizer_strips_leading_space(const rlpi_tokenizer *tok);
int32_t rlpi_tokenizer_special(const rlpi_tokenizer *tok, int which); /* rlp_token_role */
const char *rlpi_tokenizer_chat_template_src(const rlpi_tokenizer *tok);
/* The merge table as (left id, right id) pairs in priority order (BPE:
 * the merge list's order, duplicates dropped as the builder drops them):
 * *pairs is a malloc'd array of 2 * *n ids the caller frees. RLP_E_NOMEM. */
int rlpi_tokenizer_merge_pairs(const rlpi_tokenizer *tok, int32_t **pairs, size_t *n);

/* Lossy decode: token bytes concatenated, an SPM leading space stripped,
 * optionally CONTROL tokens skipped, ill-formed UTF-8 replaced by U+FFFD
 * (one per maximal ill-formed subpart, as Python's errors="replace").
 * Result is NUL-terminated, malloc'd, *len excludes the NUL. */
int rlpi_tokenizer_decode(const rlpi_tokenizer *tok, const int32_t *ids, size_t n,
                          bool skip_special, char **out, size_t *len);

/* UTF-8 helpers shared with the streaming decoder. */
/* Length of the longest prefix of s[0..n) that ends on a complete
 * character or an ill-formed subpart, keeping back a trailing incomplete
 * but still valid sequence (≤ 3 bytes). */
size_t rlpi_utf8_complete_prefix(const unsigned char *s, size_t n);
/* Appends s[0..n) to *buf with ill-formed subparts replaced by U+FFFD.
 * buf grows by at most 3n bytes; returns false on allocation failure. */
bool rlpi_utf8_lossy_append(char **buf, size_t *len, size_t *cap,
                            const unsigned char *s, size_t n);

/* Loaders (tokenizer_json.c, tokenizer_bin.c); they set the error message.
 * The JSON loader also reads a sibling tokenizer_config.json when given
 * one (config_json may be NULL). */
int rlpi_tokenizer_from_json(rlpi_tokenizer **out, const char *json, size_t len,
                             const char *config_json, size_t config_len);
int rlpi_tokenizer_from_llama2c(rlpi_tokenizer **out, const unsigned char *data, size_t len);

/* Chat templates (chat_template.c). */
typedef enum rlpi_chat_kind {
    RLPI_CHAT_NONE = 0,
    RLPI_CHAT_CHATML = 1,          /* Qwen2/Qwen3 */
    RLPI_CHAT_CHATML_SMOLLM = 2,   /* ChatML + SmolLM2's default system prompt */
    RLPI_CHAT_LLAMA3 = 3,
    RLPI_CHAT_LLAMA2 = 4,
    RLPI_CHAT_QWEN3 = 5,           /* ChatML + Qwen3's <think> handling and tool turns */
    RLPI_CHAT_GEMMA3 = 6           /* Gemma 3: system folded into the first user turn */
} rlpi_chat_kind;

/* Recognises a Jinja template source by its distinctive substrings, or a
 * name ("chatml", "qwen3", "smollm2", "llama3", "llama2", "gemma3").
 * RLP_E_UNSUPPORTED naming an excerpt of anything else. */
int rlpi_chat_template_detect(int *kind, const char *src);
const char *rlpi_chat_template_name(int kind);
/* Canonical Jinja source of a built-in kind, for writers of model files
 * (GGUF tokenizer.chat_template, tokenizer_config.json) so that llama.cpp,
 * Ollama or transformers render what rlpi_chat_template_apply() does;
 * rlpi_chat_template_detect() maps it back to `kind`. Static string; NULL
 * for RLPI_CHAT_NONE or an unknown kind. Qwen3's is the official template
 * (enable_thinking honoured); Gemma 3's the official one; ChatML's writes
 * tool results as Qwen2.5 does and has no default system prompt. */
const char *rlpi_chat_template_jinja(int kind);
/* The text of the token that ends an assistant turn in template `kind`
 * ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"), for whoever decides where
 * generation stops: Gemma 3's GGUF names <eos> as its EOS, but its chat
 * model ends a turn with <end_of_turn> (llama.cpp stops on both). NULL for
 * llama2 (its EOS </s> ends the turn) and unknown kinds. Static string. */
const char *rlpi_chat_template_end_of_turn(int kind);
/* The template a tokenizer uses when none was set: from its template
 * source, else guessed from its special tokens; RLPI_CHAT_NONE if none. */
int rlpi_chat_template_default(const rlpi_tokenizer *tok);

typedef struct rlpi_chat_msg {
    const char *role;
    const char *content;
} rlpi_chat_msg;

/* Renders messages with template `kind` and encodes: scaffolding with
 * special tokens parsed, content with parse_special off. No BOS is added
 * by the encoder: templates that start with one (llama3, llama2, gemma3)
 * write it themselves, so the ids hold exactly one. Same as
 * rlpi_chat_template_apply_ex() with enable_thinking true. */
int rlpi_chat_template_apply(const rlpi_tokenizer *tok, int kind, const rlpi_chat_msg *msgs,
                             size_t n, bool add_generation_prompt, rlpi_ids *ids);
/* enable_thinking false: Qwen3's generation prompt gets an empty
 * "<think>\n\n</think>\n\n" block (the model answers without reasoning),
 * as Qwen3's official template does; other kinds ignore it. */
int rlpi_chat_template_apply_ex(const rlpi_tokenizer *tok, int kind, const rlpi_chat_msg *msgs,
                                size_t n, bool add_generation_prompt, bool enable_thinking,
                                rlpi_ids *ids);

/* What a named byte-level pre-tokenizer does, for writers of tokenizer.json:
 * an explicit split regex before ByteLevel (NULL: ByteLevel's own GPT-2
 * split), a Digits(individual) split first, an NFC normalizer, and
 * ignore_merges. RLP_E_UNSUPPORTED for an unknown name. */
int rlpi_tokenizer_pre_split(const char *name, const char **regex, bool *digits, bool *nfc, bool *ignore_merges);

/* Wraps a core tokenizer as a public rlp_tokenizer (takes ownership of
 * `core`, also on failure). */
struct rlp_tokenizer;
int rlpi_tokenizer_wrap_public(rlpi_tokenizer *core, struct rlp_tokenizer **out);
/* The core of a public tokenizer (borrowed). */
const rlpi_tokenizer *rlpi_tokenizer_core_of(const struct rlp_tokenizer *tok);
/* The chat template kind a public tokenizer renders with (its source's, a
 * guess, or what rlp_tokenizer_set_chat_template chose). */
int rlpi_tokenizer_chat_kind_of(const struct rlp_tokenizer *tok);

#endif
