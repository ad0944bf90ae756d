/* Tokenizer from GGUF metadata. */
#ifndef RLPI_MODEL_GGUF_TOKENIZER_H
#define RLPI_MODEL_GGUF_TOKENIZER_H

#include "model/gguf.h"
#include "model/tokenizer.h"

/* Builds the tokenizer a GGUF file describes (tokenizer.ggml.*,
 * tokenizer.chat_template). RLP_E_NOT_FOUND when the file has none,
 * RLP_E_UNSUPPORTED for a tokenizer model other than gpt2/llama or an
 * unknown pre-tokenizer, RLP_E_FORMAT for inconsistent tables. */
int rlpi_tokenizer_from_gguf(rlpi_tokenizer **out, const rlpi_gguf *g);

/* Writes DIR/tokenizer.json and DIR/tokenizer_config.json (Hugging Face
 * format) for the byte-level BPE tokenizer a GGUF file describes, with the
 * pre-tokenizer its `tokenizer.ggml.pre` names. RLP_E_UNSUPPORTED for a
 * SentencePiece vocabulary. Files are written to a temporary name and
 * renamed. */
int rlpi_tokenizer_json_from_gguf(const rlpi_gguf *g, const char *dir);

#endif
