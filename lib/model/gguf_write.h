/* GGUF writer for a model: the inverse of gguf_model.c. From a config and
 * HF-named fp32 weights it writes what llama.cpp's converter would
 * (convert_hf_to_gguf.py): `<arch>.*` hyper-parameters, GGUF tensor names
 * with ggml's reversed dims, q/k rows permuted for the families whose arch
 * row says so, a tied head left out, 1-D tensors in F32, matrices in the
 * requested type; plus the tokenizer's `tokenizer.*` metadata. The file is
 * written atomically (a temporary renamed into place). It does not load
 * models or know where the weights came from. */
#ifndef RLPI_MODEL_GGUF_WRITE_H
#define RLPI_MODEL_GGUF_WRITE_H

#include "model/config.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/weights.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rlpi_gguf_write_opts {
    uint32_t type;        /* ggml type of 2-D weights: RLPI_GGML_F32/F16/BF16/Q8_0/Q4_0/Q4_K */
    int32_t embed_type;   /* ggml type of token_embd / output; -1 = `type` */
    const char *name;     /* general.name; NULL = the architecture name */
} rlpi_gguf_write_opts;

/* Where the `tokenizer.*` keys come from: every such key of `gguf` (the
 * file the policy's tokenizer was read from) copied as stored; else keys
 * built from the tokenizer `core` (read from the tokenizer.json at
 * `json_path`, whose pre-tokenizer names tokenizer.ggml.pre) by
 * rlpi_gguf_tokenizer_kv; none when both are NULL (llama2.c models). */
typedef struct rlpi_gguf_tok_src {
    const rlpi_gguf *gguf;
    const rlpi_tokenizer *core;
    const char *json_path;
    const char *chat_template; /* written as tokenizer.chat_template instead of the source's; NULL = the source's */
} rlpi_gguf_tok_src;

/* The metadata section under construction: bytes and the KV count. */
typedef struct rlpi_gguf_wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;                 /* an allocation failed: the bytes are incomplete */
} rlpi_gguf_wbuf;
typedef struct rlpi_gguf_kvw {
    rlpi_gguf_wbuf b;
    uint64_t n;
} rlpi_gguf_kvw;
void rlpi_gguf_put(rlpi_gguf_wbuf *b, const void *src, size_t n);
void rlpi_gguf_put_u32(rlpi_gguf_wbuf *b, uint32_t v);
void rlpi_gguf_put_u64(rlpi_gguf_wbuf *b, uint64_t v);
/* Starts a KV: the key and the value type; the caller appends the value. */
void rlpi_gguf_kv_key(rlpi_gguf_kvw *k, const char *key, uint32_t type);

/* Appends the `tokenizer.*` keys of a byte-level BPE tokenizer (gguf_write_
 * tok.c): model "gpt2", pre (from the tokenizer.json's pre-tokenizer),
 * tokens padded to `n_vocab` with "[PADi]" UNUSED entries as llama.cpp's
 * converter does, token_type, merges in rank order, special ids, add_bos,
 * chat_template. RLP_E_UNSUPPORTED for SentencePiece tokenizers and
 * pre-tokenizers without a GGUF name; RLP_E_IO / RLP_E_FORMAT for the JSON. */
int rlpi_gguf_tokenizer_kv(rlpi_gguf_kvw *k, const rlpi_tokenizer *core, const char *json_path, int32_t n_vocab,
                           const char *chat_template);

/* Writes `path`. Quantized types need rows (the innermost GGUF dim) that
 * are a multiple of their block (32; Q4_K 256); other rows fall back to Q8_0
 * (Q4_K, rows of whole 32-blocks) or F16, as llama.cpp's
 * converter does. Returns RLP_OK; RLP_E_INVALID_ARG (NULL, a type it cannot
 * write); RLP_E_UNSUPPORTED (an architecture without an arch row, a tensor
 * name it cannot map, naming it); RLP_E_FORMAT (a tensor whose shape
 * disagrees with the config); RLP_E_IO (naming the file; no partial file is
 * left); RLP_E_NOMEM. */
int rlpi_gguf_write_model(const char *path, const rlpi_model_config *cfg, const rlpi_weights *w,
                          const rlpi_gguf_tok_src *tok, const rlpi_gguf_write_opts *opts);

/* llama_ftype (general.file_type) of a file whose matrices are `type`. */
uint32_t rlpi_gguf_file_type(uint32_t type);

#endif
