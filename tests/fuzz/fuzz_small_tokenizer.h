/* A small byte-level BPE tokenizer.json for the fuzz targets that need a
 * tokenizer but do not fuzz it (chat templates, `rlpost serve` requests):
 * the 256 GPT-2 byte tokens, a few merges, and the special tokens of every
 * chat template the library renders, so each template's scaffolding
 * encodes to single special ids that the targets can count. */
#ifndef RLPOST_FUZZ_SMALL_TOKENIZER_H
#define RLPOST_FUZZ_SMALL_TOKENIZER_H

#include <jansson.h>
#include <stdlib.h>

/* ids of the added tokens: FUZZ_TOK_SPECIAL_BASE + index in fuzz_tok_added */
#define FUZZ_TOK_SPECIAL_BASE 262
static const struct {
    const char *text;
    int special;
} fuzz_tok_added[] = {
    {"<|im_start|>", 1},      {"<|im_end|>", 1},   {"<|begin_of_text|>", 1}, {"<|start_header_id|>", 1},
    {"<|end_header_id|>", 1}, {"<|eot_id|>", 1},   {"<|endoftext|>", 1},     {"<think>", 0},
    {"</think>", 0},          {"<tool_response>", 0}, {"</tool_response>", 0},
};
enum {
    FUZZ_TOK_IM_START = FUZZ_TOK_SPECIAL_BASE,
    FUZZ_TOK_IM_END,
    FUZZ_TOK_BEGIN_OF_TEXT,
    FUZZ_TOK_START_HEADER,
    FUZZ_TOK_END_HEADER,
    FUZZ_TOK_EOT,
    FUZZ_TOK_ENDOFTEXT,
    FUZZ_TOK_N_VOCAB = FUZZ_TOK_SPECIAL_BASE + (int)(sizeof fuzz_tok_added / sizeof fuzz_tok_added[0])
};

/* The tokenizer.json text (malloc'd), or NULL when out of memory. */
static inline char *fuzz_small_tokenizer_json(void)
{
    json_t *vocab = json_object();
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        /* GPT-2's bytes_to_unicode: printable Latin-1 maps to itself */
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)extra++;
        char s[3] = {0};
        if (cp < 0x80) {
            s[0] = (char)cp;
        } else {
            s[0] = (char)(0xC0 | (cp >> 6));
            s[1] = (char)(0x80 | (cp & 0x3F));
        }
        json_object_set_new(vocab, s, json_integer(b));
    }
    static const char *merged[] = {"\xC4\xA0t", "he", "in", "er", "\xC4\xA0the", "on"};
    static const char *merges[] = {"\xC4\xA0 t", "h e", "i n", "e r", "\xC4\xA0t he", "o n"};
    json_t *m = json_array();
    for (int i = 0; i < 6; i++) {
        json_object_set_new(vocab, merged[i], json_integer(256 + i));
        json_array_append_new(m, json_string(merges[i]));
    }
    json_t *added = json_array();
    for (int i = 0; i < FUZZ_TOK_N_VOCAB - FUZZ_TOK_SPECIAL_BASE; i++)
        json_array_append_new(added, json_pack("{s:i,s:s,s:b}", "id", FUZZ_TOK_SPECIAL_BASE + i, "content",
                                               fuzz_tok_added[i].text, "special", fuzz_tok_added[i].special));
    json_t *root = json_pack("{s:o,s:{s:s,s:o,s:o},s:{s:s,s:b},s:{s:s}}", "added_tokens", added, "model",
                             "type", "BPE", "vocab", vocab, "merges", m, "pre_tokenizer", "type", "ByteLevel",
                             "add_prefix_space", 0, "decoder", "type", "ByteLevel");
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

#endif
