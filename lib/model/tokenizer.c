/* The tokenizer engine: builds lookup tables from an rlpi_tokenizer_spec
 * and encodes (added-token split → normalize → regex pre-tokenize → BPE
 * by priority with a word cache) and decodes. Shared by every tokenizer
 * loader; it reads no files and knows no file formats. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tokenizer.h"

#include "core/checked.h"
#include "core/error.h"
#include "model/tok_map.h"
#include "model/tok_utf8.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split patterns, verbatim from the `pre_tokenizer` sections of the Hugging
 * Face tokenizer.json files of each family (GPT-2's is the one ByteLevel
 * uses when use_regex is true). */
#define PRE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PRE_LLAMA3                                                                        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "            \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PRE_QWEN2                                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                 \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PRE_DIGITS "\\p{N}" /* HF Digits(individual_digits=true) */

#define WCACHE_BUCKETS 8192
#define WCACHE_MAX_ENTRIES 100000
#define WCACHE_MAX_WORD 64

typedef struct wc_entry {
    struct wc_entry *next;
    uint64_t hash;
    uint32_t len, n_ids;
    int32_t ids[]; /* [n_ids], then the word's bytes */
} wc_entry;

struct rlpi_tokenizer {
    int model;
    size_t n_vocab;
    char *arena;        /* pieces and decoded bytes, NUL-separated */
    size_t *piece_off;  /* [n_vocab] */
    uint32_t *piece_len;
    size_t *bytes_off;
    uint32_t *bytes_len;
    uint8_t *type;      /* [n_vocab] rlpi_tok_type */
    rlpi_strmap vocab;
    rlpi_pairmap merges;
    int32_t byte_id[256]; /* BYTE_BPE: byte → its mapped char's token; SPM: <0xNN> */

    pcre2_code *re[RLPI_TOK_MAX_PRE];
    size_t n_re;
    size_t prefix_stage; /* split stage at which ByteLevel adds its prefix space */
    bool prefix_space, ignore_merges, add_bos, byte_fallback, strip_space, spm_prefix,
        spm_prefix_first, spm_prefix_unless_space;
    int normalizer;

    int32_t *added;          /* ids of matchable added tokens, by first byte then longest */
    size_t n_added;
    uint32_t added_start[257]; /* added[added_start[b] .. added_start[b+1]) start with b */

    int32_t bos, eos, unk, pad;
    char *chat_template;

    pthread_mutex_t cache_mu;
    wc_entry *cache[WCACHE_BUCKETS];
    size_t cache_n;
};

/* ------------------------------------------------------------------------ */
/* GPT-2 byte ↔ unicode map                                                 */
/* ------------------------------------------------------------------------ */

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves,
 * the other 68 bytes to U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++) {
        if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff)))
            n++;
    }
    return 0x100 + n;
}

static int cp_to_byte(uint32_t cp)
{
    static int table[0x144];
    static int init;
    if (!__atomic_load_n(&init, __ATOMIC_ACQUIRE)) {
        int t[0x144];
        for (unsigned i = 0; i < 0x144; i++)
            t[i] = -1;
        for (unsigned b = 0; b < 256; b++)
            t[byte_to_cp(b)] = (int)b;
        memcpy(table, t, sizeof t);
        __atomic_store_n(&init, 1, __ATOMIC_RELEASE);
    }
    return cp < 0x144 ? table[cp] : -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static uint32_t get_cp(const unsigned char *s, size_t len)
{
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
    case 3: return ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
               ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    }
}

/* Decoded bytes of a byte-level piece: each mapped char back to its byte;
 * chars outside the map are kept as UTF-8. Writes ≤ n bytes. */
static size_t unmap_byte_level(const char *p, size_t n, char *o)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0, k = 0, l;
    while (i < n) {
        if (rlpi_utf8_scan(s, n, i, &l) == RLPI_U8_OK) {
            int b = cp_to_byte(get_cp(s + i, l));
            if (b >= 0) {
                o[k++] = (char)b;
                i += l;
                continue;
            }
        }
        memcpy(o + k, s + i, l);
        k += l;
        i += l;
    }
    return k;
}

/* SPM pieces: ▁ → ' ', "<0xNN>" BYTE tokens → the byte. */
static size_t unmap_spm(const char *p, size_t n, int type, char *o)
{
    if (type == RLPI_TT_BYTE && n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>') {
        unsigned v;
        if (sscanf(p + 3, "%2x", &v) == 1) {
            o[0] = (char)v;
            return 1;
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
            o[k++] = ' ';
            i += 3;
        } else {
            o[k++] = p[i++];
        }
    }
    return k;
}

static bool is_byte_piece(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return false;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Build                                                                    */
/* ------------------------------------------------------------------------ */

void rlpi_tokenizer_spec_init(rlpi_tokenizer_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->model = RLPI_TOK_BYTE_BPE;
    spec->bos_id = spec->eos_id = spec->unk_id = spec->pad_id = -1;
}

static const char *piece_of(const void *owner, int32_t id, size_t *len)
{
    const rlpi_tokenizer *t = owner;
    *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

const char *rlpi_tokenizer_token_piece(const rlpi_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= tok->n_vocab || tok->type[id] == RLPI_TT_UNDEFINED)
        return NULL;
    return piece_of(tok, id, len);
}

const char *rlpi_tokenizer_token_bytes(const rlpi_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= tok->n_vocab || tok->type[id] == RLPI_TT_UNDEFINED)
        return NULL;
    *len = tok->bytes_len[id];
    return tok->arena + tok->bytes_off[id];
}

int rlpi_tokenizer_token_type(const rlpi_tokenizer *tok, int32_t id)
{
    if (id < 0 || (size_t)id >= tok->n_vocab)
        return RLPI_TT_UNDEFINED;
    return tok->type[id];
}

int32_t rlpi_tokenizer_find(const rlpi_tokenizer *tok, const char *piece, size_t len)
{
    return rlpi_strmap_find(&tok->vocab, piece, len);
}

size_t rlpi_tokenizer_n_vocab(const rlpi_tokenizer *tok) { return tok->n_vocab; }
int rlpi_tokenizer_model(const rlpi_tokenizer *tok) { return tok->model; }
bool rlpi_tokenizer_add_bos(const rlpi_tokenizer *tok) { return tok->add_bos; }
bool rlpi_tokenizer_strips_leading_space(const rlpi_tokenizer *tok) { return tok->strip_space; }
const char *rlpi_tokenizer_chat_template_src(const rlpi_tokenizer *tok) { return tok->chat_template; }

int32_t rlpi_tokenizer_special(const rlpi_tokenizer *tok, int which)
{
    switch (which) {
    case RLP_TOKEN_BOS: return tok->bos;
    case RLP_TOKEN_EOS: return tok->eos;
    case RLP_TOKEN_PAD: return tok->pad;
    case RLP_TOKEN_UNK: return tok->unk;
    default: return -1;
    }
}

static void cache_clear(rlpi_tokenizer *tok)
{
    for (size_t b = 0; b < WCACHE_BUCKETS; b++) {
        wc_entry *e = tok->cache[b];
        while (e) {
            wc_entry *n = e->next;
            free(e);
            e = n;
        }
        tok->cache[b] = NULL;
    }
    tok->cache_n = 0;
}

void rlpi_tokenizer_destroy(rlpi_tokenizer *tok)
{
    if (!tok)
        return;
    cache_clear(tok);
    pthread_mutex_destroy(&tok->cache_mu);
    for (size_t i = 0; i < tok->n_re; i++)
        pcre2_code_free(tok->re[i]);
    rlpi_strmap_free(&tok->vocab);
    rlpi_pairmap_free(&tok->merges);
    free(tok->arena);
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok->bytes_off);
    free(tok->bytes_len);
    free(tok->type);
    free(tok->added);
    free(tok->chat_template);
    free(tok);
}

static int compile_re(rlpi_tokenizer *tok, const char *pattern)
{
    if (tok->n_re >= RLPI_TOK_MAX_PRE)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer: more than %d pre-tokenizer splits",
                              RLPI_TOK_MAX_PRE);
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode,
                                   &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "tokenizer: pre-tokenizer regex does not compile at offset %zu: %s",
                              (size_t)erroff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    tok->re[tok->n_re++] = re;
    return RLP_OK;
}

int rlpi_tokenizer_pre_split(const char *name, const char **regex, bool *digits, bool *nfc, bool *ignore_merges)
{
    *regex = NULL;
    *digits = *nfc = *ignore_merges = false;
    if (!name || !strcmp(name, "default") || !strcmp(name, "gpt2") || !strcmp(name, "gpt-2"))
        return RLP_OK; /* ByteLevel's own GPT-2 split */
    if (!strcmp(name, "llama-bpe") || !strcmp(name, "llama3") || !strcmp(name, "llama-v3")) {
        *regex = PRE_LLAMA3;
        *ignore_merges = true;
        return RLP_OK;
    }
    if (!strcmp(name, "qwen2")) {
        *regex = PRE_QWEN2;
        *nfc = true;
        return RLP_OK;
    }
    if (!strcmp(name, "smollm")) {
        *digits = true;
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer: unknown pre-tokenizer \"%s\"", name);
}

static int setup_pre(rlpi_tokenizer *tok, const rlpi_tokenizer_spec *spec)
{
    int rc = RLP_OK;
    if (spec->n_pre > 0) {
        if (spec->n_pre > RLPI_TOK_MAX_PRE)
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer: %zu pre-tokenizer splits (max %d)",
                                  spec->n_pre, RLPI_TOK_MAX_PRE);
        for (size_t i = 0; i < spec->n_pre && rc == RLP_OK; i++) {
            if (!spec->pre_regex[i])
                return rlpi_error_set(RLP_E_INVALID_ARG, "tokenizer: pre_regex[%zu] is NULL", i);
            rc = compile_re(tok, spec->pre_regex[i]);
        }
        return rc;
    }
    const char *name = spec->pre_name;
    if (spec->model == RLPI_TOK_SPM) {
        if (name && strcmp(name, "default") != 0 && strcmp(name, "llama") != 0)
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "tokenizer: pre-tokenizer \"%s\" for a SentencePiece vocabulary",
                                  name);
        return RLP_OK;
    }
    if (!name || strcmp(name, "default") == 0 || strcmp(name, "gpt2") == 0 ||
        strcmp(name, "gpt-2") == 0)
        return compile_re(tok, PRE_GPT2);
    if (strcmp(name, "none") == 0) /* the text is one word (a tokenizer.json that splits nothing) */
        return RLP_OK;
    if (strcmp(name, "llama-bpe") == 0 || strcmp(name, "llama3") == 0 ||
        strcmp(name, "llama-v3") == 0) {
        tok->ignore_merges = true; /* Llama-3's tokenizer.json: "ignore_merges": true */
        return compile_re(tok, PRE_LLAMA3);
    }
    if (strcmp(name, "qwen2") == 0) {
        tok->normalizer = RLPI_NORM_NFC; /* Qwen2/Qwen3 tokenizer.json normalizer */
        return compile_re(tok, PRE_QWEN2);
    }
    if (strcmp(name, "smollm") == 0) {
        rc = compile_re(tok, PRE_DIGITS);
        return rc ? rc : compile_re(tok, PRE_GPT2);
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer: unknown pre-tokenizer \"%s\"", name);
}

static int setup_added(rlpi_tokenizer *tok)
{
    size_t n = 0;
    for (size_t i = 0; i < tok->n_vocab; i++) {
        int t = tok->type[i];
        if ((t == RLPI_TT_CONTROL || t == RLPI_TT_USER_DEFINED || t == RLPI_TT_UNKNOWN) &&
            tok->piece_len[i] > 0)
            n++;
    }
    tok->added = malloc((n ? n : 1) * sizeof *tok->added);
    if (!tok->added)
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    /* Bucket by first byte, each bucket longest first (leftmost-longest). */
    uint32_t count[257] = {0};
    for (size_t i = 0; i < tok->n_vocab; i++) {
        int t = tok->type[i];
        if ((t == RLPI_TT_CONTROL || t == RLPI_TT_USER_DEFINED || t == RLPI_TT_UNKNOWN) &&
            tok->piece_len[i] > 0)
            count[(unsigned char)tok->arena[tok->piece_off[i]] + 1]++;
    }
    for (int b = 1; b <= 256; b++)
        count[b] += count[b - 1];
    memcpy(tok->added_start, count, sizeof count);
    uint32_t fill[256];
    memcpy(fill, count, sizeof fill);
    for (size_t i = 0; i < tok->n_vocab; i++) {
        int t = tok->type[i];
        if ((t == RLPI_TT_CONTROL || t == RLPI_TT_USER_DEFINED || t == RLPI_TT_UNKNOWN) &&
            tok->piece_len[i] > 0) {
            unsigned b = (unsigned char)tok->arena[tok->piece_off[i]];
            /* insertion sort into the bucket by length descending */
            uint32_t j = fill[b]++;
            while (j > count[b] && tok->piece_len[tok->added[j - 1]] < tok->piece_len[i]) {
                tok->added[j] = tok->added[j - 1];
                j--;
            }
            tok->added[j] = (int32_t)i;
        }
    }
    tok->n_added = n;
    return RLP_OK;
}

static bool mergeable(int type) { return type == RLPI_TT_NORMAL || type == RLPI_TT_USER_DEFINED; }

static int setup_merges_list(rlpi_tokenizer *tok, const rlpi_tokenizer_spec *spec)
{
    if (!rlpi_pairmap_init(&tok->merges, spec->n_merges))
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for %zu merges", spec->n_merges);
    char *buf = NULL;
    size_t cap = 0;
    int rc = RLP_OK;
    for (size_t m = 0; m < spec->n_merges && rc == RLP_OK; m++) {
        const char *s = spec->merges[m];
        if (!s) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer: merge %zu is missing", m);
            break;
        }
        size_t len = spec->merge_lens ? spec->merge_lens[m] : strlen(s);
        const char *sp = memchr(s, ' ', len);
        /* "a b": the separator is the first space after a non-empty left
         * side (pieces never start with a space in byte-level vocabularies). */
        if (sp == s && len > 1)
            sp = memchr(s + 1, ' ', len - 1);
        if (!sp || sp == s || sp + 1 == s + len) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer: merge %zu \"%.*s\" is not \"left right\"",
                                m, (int)(len > 60 ? 60 : len), s);
            break;
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t a = rlpi_strmap_find(&tok->vocab, s, ll);
        int32_t b = rlpi_strmap_find(&tok->vocab, sp + 1, rl);
        if (len + 1 > cap) {
            cap = len + 64;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
                break;
            }
            buf = nb;
        }
        memcpy(buf, s, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t ab = rlpi_strmap_find(&tok->vocab, buf, ll + rl);
        if (a < 0 || b < 0 || ab < 0) {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "tokenizer: merge %zu \"%.*s\": %s is not in the vocabulary", m,
                                (int)(len > 60 ? 60 : len), s,
                                a < 0 ? "the left token" : b < 0 ? "the right token" : "the merged token");
            break;
        }
        rlpi_pairmap_put(&tok->merges, a, b, (double)m, ab);
    }
    free(buf);
    return rc;
}

/* SentencePiece BPE merges the adjacent pair whose concatenation is the
 * best-scoring piece; every such pair is enumerated here once, so encode
 * uses the same pair table as byte-level BPE. */
static int setup_merges_scores(rlpi_tokenizer *tok, const rlpi_tokenizer_spec *spec)
{
    size_t total = 0;
    for (size_t i = 0; i < tok->n_vocab; i++)
        total += tok->piece_len[i];
    if (!rlpi_pairmap_init(&tok->merges, total))
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for the merge table");
    for (size_t i = 0; i < tok->n_vocab; i++) {
        if (!mergeable(tok->type[i]))
            continue;
        const unsigned char *p = (const unsigned char *)tok->arena + tok->piece_off[i];
        size_t n = tok->piece_len[i], k = 0, l;
        while (k < n) {
            rlpi_utf8_scan(p, n, k, &l);
            k += l;
            if (k >= n)
                break;
            int32_t a = rlpi_strmap_find(&tok->vocab, (const char *)p, k);
            int32_t b = rlpi_strmap_find(&tok->vocab, (const char *)p + k, n - k);
            if (a >= 0 && b >= 0 && mergeable(tok->type[a]) && mergeable(tok->type[b]))
                rlpi_pairmap_put(&tok->merges, a, b, spec->scores ? -(double)spec->scores[i] : (double)i,
                                 (int32_t)i);
        }
    }
    return RLP_OK;
}

int rlpi_tokenizer_build(rlpi_tokenizer **out, const rlpi_tokenizer_spec *spec)
{
    if (!out || !spec)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_tokenizer_build: NULL argument");
    if (spec->model != RLPI_TOK_BYTE_BPE && spec->model != RLPI_TOK_SPM)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer: unknown model kind %d", spec->model);
    if (spec->n_vocab == 0 || !spec->tokens)
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer: empty vocabulary");
    /* merge priorities are floats (tok_map.h): exact below 2^24 */
    if (spec->n_vocab > ((size_t)1 << 24))
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer: vocabulary of %zu tokens is too large",
                              spec->n_vocab);
    if (spec->n_merges > ((size_t)1 << 24))
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer: %zu merges is too many", spec->n_merges);
    if (spec->n_merges > 0 && !spec->merges)
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer: merges missing");
    const int32_t special[4] = {spec->bos_id, spec->eos_id, spec->unk_id, spec->pad_id};
    static const char *const special_name[4] = {"bos", "eos", "unknown", "padding"};
    for (int i = 0; i < 4; i++) {
        if (special[i] < -1 || (special[i] >= 0 && ((size_t)special[i] >= spec->n_vocab ||
                                                    !spec->tokens[special[i]])))
            return rlpi_error_set(RLP_E_FORMAT, "tokenizer: %s token id %d is not in the vocabulary",
                                  special_name[i], (int)special[i]);
    }

    rlpi_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    pthread_mutex_init(&tok->cache_mu, NULL);
    tok->model = spec->model;
    tok->n_vocab = spec->n_vocab;
    tok->normalizer = spec->normalizer;
    tok->prefix_space = spec->byte_level_prefix_space;
    tok->prefix_stage = spec->byte_level_stage;
    tok->ignore_merges = spec->ignore_merges;
    tok->add_bos = spec->add_bos;
    tok->byte_fallback = spec->byte_fallback || spec->model == RLPI_TOK_SPM;
    tok->bos = spec->bos_id;
    tok->eos = spec->eos_id;
    tok->unk = spec->unk_id;
    tok->pad = spec->pad_id;
    int rc = RLP_OK;
    size_t n = spec->n_vocab, total = 0;
    tok->piece_off = malloc(n * sizeof *tok->piece_off);
    tok->bytes_off = malloc(n * sizeof *tok->bytes_off);
    tok->piece_len = malloc(n * sizeof *tok->piece_len);
    tok->bytes_len = malloc(n * sizeof *tok->bytes_len);
    tok->type = malloc(n);
    if (!tok->piece_off || !tok->bytes_off || !tok->piece_len || !tok->bytes_len || !tok->type) {
        rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for %zu tokens", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (spec->tokens[i])
            len = spec->token_lens ? spec->token_lens[i] : strlen(spec->tokens[i]);
        if (len > UINT32_MAX / 2 || !rlpi_add_size(&total, total, 2 * len + 2)) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer: token %zu is too long", i);
            goto fail;
        }
    }
    tok->arena = malloc(total ? total : 1);
    if (!tok->arena) {
        rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for %zu bytes of tokens", total);
        goto fail;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = spec->tokens[i];
        size_t len = s ? (spec->token_lens ? spec->token_lens[i] : strlen(s)) : 0;
        int type = s ? RLPI_TT_NORMAL : RLPI_TT_UNDEFINED;
        if (s && spec->token_types) {
            type = spec->token_types[i];
            if (type < RLPI_TT_NORMAL || type > RLPI_TT_BYTE)
                type = RLPI_TT_NORMAL; /* GGUF readers see 0 for "undefined": treat as normal */
        } else if (s && spec->model == RLPI_TOK_SPM && is_byte_piece(s, len)) {
            type = RLPI_TT_BYTE;
        }
        tok->type[i] = (uint8_t)type;
        tok->piece_off[i] = off;
        tok->piece_len[i] = (uint32_t)len;
        if (len)
            memcpy(tok->arena + off, s, len);
        tok->arena[off + len] = '\0';
        off += len + 1;
        tok->bytes_off[i] = off;
        size_t bl;
        if (type == RLPI_TT_CONTROL || type == RLPI_TT_USER_DEFINED || type == RLPI_TT_UNKNOWN ||
            !s) {
            memcpy(tok->arena + off, s ? s : "", len);
            bl = len;
        } else if (spec->model == RLPI_TOK_BYTE_BPE) {
            bl = unmap_byte_level(s, len, tok->arena + off);
        } else {
            bl = unmap_spm(s, len, type, tok->arena + off);
        }
        tok->arena[off + bl] = '\0';
        tok->bytes_len[i] = (uint32_t)bl;
        off += len + 1;
    }
    if (!rlpi_strmap_init(&tok->vocab, n, tok, piece_of)) {
        rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (tok->type[i] != RLPI_TT_UNDEFINED)
            (void)rlpi_strmap_insert(&tok->vocab, (int32_t)i); /* duplicates: first id wins */
    }
    for (unsigned b = 0; b < 256; b++) {
        char buf[8];
        size_t l;
        if (spec->model == RLPI_TOK_BYTE_BPE)
            l = put_utf8(buf, byte_to_cp(b));
        else
            l = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        tok->byte_id[b] = rlpi_strmap_find(&tok->vocab, buf, l);
    }
    if (spec->model == RLPI_TOK_SPM && spec->merge_src == RLPI_MERGES_FROM_SCORES)
        rc = setup_merges_scores(tok, spec);
    else
        rc = setup_merges_list(tok, spec);
    if (rc)
        goto fail;
    if ((rc = setup_pre(tok, spec)) != RLP_OK)
        goto fail;
    if ((rc = setup_added(tok)) != RLP_OK)
        goto fail;
    if (spec->model == RLPI_TOK_SPM && spec->normalizer == RLPI_NORM_NONE)
        tok->normalizer = RLPI_NORM_SPM_ESCAPE;
    tok->spm_prefix = !spec->spm_no_dummy_prefix;
    tok->spm_prefix_first = spec->spm_prefix_first;
    tok->spm_prefix_unless_space = spec->spm_prefix_unless_space;
    tok->strip_space = tok->normalizer == RLPI_NORM_SPM_ESCAPE && tok->spm_prefix;
    if (spec->chat_template) {
        tok->chat_template = strdup(spec->chat_template);
        if (!tok->chat_template) {
            rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
    }
    *out = tok;
    return RLP_OK;
fail:
    rlpi_tokenizer_destroy(tok);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Encode                                                                   */
/* ------------------------------------------------------------------------ */

int rlpi_ids_push(rlpi_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t c = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, c * sizeof *v);
        if (!v)
            return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for %zu ids", c);
        ids->v = v;
        ids->cap = c;
    }
    ids->v[ids->n++] = id;
    return RLP_OK;
}

void rlpi_ids_free(rlpi_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} sym;

typedef struct cand {
    double prio;
    int32_t left, right;   /* symbol positions */
    int32_t lid, rid;      /* their ids when pushed (stale check) */
    int32_t merged;
} cand;

typedef struct enc {
    const rlpi_tokenizer *tok;
    rlpi_ids *ids;
    char *pend;             /* text since the last matched added token */
    size_t plen, pcap;
    sym *syms;
    size_t syms_cap;
    cand *heap;
    size_t heap_n, heap_cap;
    char *tmp;              /* normalization / mapping scratch */
    size_t tmp_cap;
    pcre2_match_data *md;
    bool at_input_start;    /* nothing encoded yet (Metaspace "first") */
} enc;

static bool cand_less(const cand *a, const cand *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static int heap_push(enc *e, cand c)
{
    if (e->heap_n == e->heap_cap) {
        size_t nc = e->heap_cap ? e->heap_cap * 2 : 64;
        cand *h = realloc(e->heap, nc * sizeof *h);
        if (!h)
            return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
        e->heap = h;
        e->heap_cap = nc;
    }
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[p]))
            break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
    return RLP_OK;
}

static cand heap_pop(enc *e)
{
    cand top = e->heap[0];
    cand last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&e->heap[l], best)) {
            m = l;
            best = &e->heap[l];
        }
        if (r < n && cand_less(&e->heap[r], best))
            m = r;
        if (m == i)
            break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n > 0)
        e->heap[i] = last;
    return top;
}

static int try_pair(enc *e, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return RLP_OK;
    double prio;
    int32_t merged;
    if (!rlpi_pairmap_get(&e->tok->merges, e->syms[l].id, e->syms[r].id, &prio, &merged))
        return RLP_OK;
    cand c = {prio, l, r, e->syms[l].id, e->syms[r].id, merged};
    return heap_push(e, c);
}

static int reserve_syms(enc *e, size_t n)
{
    if (n <= e->syms_cap)
        return RLP_OK;
    if (n > (size_t)INT32_MAX)
        return rlpi_error_set(RLP_E_OVERFLOW, "tokenizer: a word of %zu symbols is too long", n);
    sym *s = realloc(e->syms, n * sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    e->syms = s;
    e->syms_cap = n;
    return RLP_OK;
}

/* Merges e->syms[0..n) by priority (lowest first, then leftmost), as HF
 * tokenizers' BPE word merge and SentencePiece's BPE both do, and appends
 * the surviving ids to out. */
static int bpe_merge(enc *e, size_t n, rlpi_ids *out)
{
    int rc = RLP_OK;
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n && rc == RLP_OK; i++)
        rc = try_pair(e, (int32_t)i, (int32_t)i + 1);
    while (rc == RLP_OK && e->heap_n > 0) {
        cand c = heap_pop(e);
        sym *L = &e->syms[c.left];
        if (L->id != c.lid || L->next != c.right || e->syms[c.right].id != c.rid)
            continue; /* stale: one side has merged since */
        sym *R = &e->syms[c.right];
        L->id = c.merged;
        L->next = R->next;
        if (R->next >= 0)
            e->syms[R->next].prev = c.left;
        R->id = -1;
        rc = try_pair(e, L->prev, c.left);
        if (rc == RLP_OK)
            rc = try_pair(e, c.left, L->next);
    }
    for (int32_t i = 0; rc == RLP_OK && n > 0 && i >= 0; i = e->syms[i].next)
        rc = rlpi_ids_push(out, e->syms[i].id);
    return rc;
}

static int ensure_tmp(enc *e, size_t n)
{
    if (n <= e->tmp_cap)
        return RLP_OK;
    char *t = realloc(e->tmp, n);
    if (!t)
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    e->tmp = t;
    e->tmp_cap = n;
    return RLP_OK;
}

static int push_unknown(enc *e, unsigned byte)
{
    if (e->tok->unk >= 0)
        return rlpi_ids_push(e->ids, e->tok->unk);
    return rlpi_error_set(RLP_E_UNSUPPORTED,
                          "tokenizer: byte 0x%02x has no token and the vocabulary has no unknown token",
                          byte);
}

static const int32_t *cache_get(rlpi_tokenizer *tok, const char *s, size_t n, uint64_t h,
                                uint32_t *n_ids)
{
    for (wc_entry *c = tok->cache[h & (WCACHE_BUCKETS - 1)]; c; c = c->next) {
        if (c->hash == h && c->len == n && memcmp((const char *)(c->ids + c->n_ids), s, n) == 0) {
            *n_ids = c->n_ids;
            return c->ids;
        }
    }
    return NULL;
}

static void cache_put(rlpi_tokenizer *tok, const char *s, size_t n, uint64_t h,
                      const int32_t *ids, size_t n_ids)
{
    if (tok->cache_n >= WCACHE_MAX_ENTRIES)
        cache_clear(tok);
    wc_entry *c = malloc(sizeof *c + n_ids * sizeof(int32_t) + n);
    if (!c)
        return; /* the cache is only an accelerator */
    c->hash = h;
    c->len = (uint32_t)n;
    c->n_ids = (uint32_t)n_ids;
    memcpy(c->ids, ids, n_ids * sizeof(int32_t));
    memcpy((char *)(c->ids + n_ids), s, n);
    size_t b = h & (WCACHE_BUCKETS - 1);
    c->next = tok->cache[b];
    tok->cache[b] = c;
    tok->cache_n++;
}

/* One pre-tokenized word of a byte-level vocabulary. */
static int encode_word_bytes(enc *e, const char *s, size_t n)
{
    rlpi_tokenizer *tok = (rlpi_tokenizer *)e->tok; /* cache is internally locked */
    if (n == 0)
        return RLP_OK;
    uint64_t h = 0;
    bool cacheable = n <= WCACHE_MAX_WORD;
    if (cacheable) {
        h = rlpi_hash_bytes(s, n);
        pthread_mutex_lock(&tok->cache_mu);
        uint32_t k;
        const int32_t *hit = cache_get(tok, s, n, h, &k);
        int rc = RLP_OK;
        for (uint32_t i = 0; hit && i < k && rc == RLP_OK; i++)
            rc = rlpi_ids_push(e->ids, hit[i]);
        pthread_mutex_unlock(&tok->cache_mu);
        if (hit)
            return rc;
    }
    size_t start = e->ids->n;
    int rc = RLP_OK;
    bool done = false;
    if (tok->ignore_merges) {
        size_t need;
        if (!rlpi_mul_size(&need, n, 2))
            return rlpi_error_set(RLP_E_OVERFLOW, "tokenizer: word too long");
        if ((rc = ensure_tmp(e, need)) != RLP_OK)
            return rc;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += put_utf8(e->tmp + k, byte_to_cp((unsigned char)s[i]));
        int32_t id = rlpi_strmap_find(&tok->vocab, e->tmp, k);
        if (id >= 0) {
            rc = rlpi_ids_push(e->ids, id);
            done = true;
        }
    }
    if (!done && rc == RLP_OK) {
        if ((rc = reserve_syms(e, n)) != RLP_OK)
            return rc;
        size_t m = 0;
        for (size_t i = 0; i < n && rc == RLP_OK; i++) {
            int32_t id = tok->byte_id[(unsigned char)s[i]];
            if (id < 0) {
                /* flush what we have, then the unknown */
                if (m) {
                    e->syms[m - 1].next = -1;
                    rc = bpe_merge(e, m, e->ids);
                    m = 0;
                }
                if (rc == RLP_OK)
                    rc = push_unknown(e, (unsigned char)s[i]);
                continue;
            }
            e->syms[m].id = id;
            e->syms[m].prev = (int32_t)m - 1;
            e->syms[m].next = i + 1 < n ? (int32_t)m + 1 : -1;
            m++;
        }
        if (m) {
            e->syms[m - 1].next = -1;
            if (rc == RLP_OK)
                rc = bpe_merge(e, m, e->ids);
        }
    }
    if (rc == RLP_OK && cacheable) {
        pthread_mutex_lock(&tok->cache_mu);
        cache_put(tok, s, n, h, e->ids->v + start, e->ids->n - start);
        pthread_mutex_unlock(&tok->cache_mu);
    }
    return rc;
}

/* SentencePiece text (already escaped): chars → pieces (or <0xNN> bytes,
 * which never merge), then merges by score. */
static int encode_spm(enc *e, const char *s, size_t n)
{
    const rlpi_tokenizer *tok = e->tok;
    int rc = reserve_syms(e, n);
    if (rc)
        return rc;
    const unsigned char *u = (const unsigned char *)s;
    size_t m = 0, i = 0, l;
    while (i < n) {
        int st = rlpi_utf8_scan(u, n, i, &l);
        int32_t id = st == RLPI_U8_OK ? rlpi_strmap_find(&tok->vocab, s + i, l) : -1;
        if (id >= 0 && mergeable(tok->type[id])) {
            e->syms[m].id = id;
            e->syms[m].prev = (int32_t)m - 1;
            e->syms[m].next = (int32_t)m + 1;
            m++;
        } else if (tok->byte_fallback && tok->byte_id[u[i]] >= 0) {
            for (size_t k = 0; k < l; k++) {
                int32_t b = tok->byte_id[u[i + k]];
                if (b < 0) {
                    b = tok->unk;
                    if (b < 0)
                        return push_unknown(e, u[i + k]);
                }
                e->syms[m].id = b;
                e->syms[m].prev = (int32_t)m - 1;
                e->syms[m].next = (int32_t)m + 1;
                m++;
            }
        } else {
            if (tok->unk < 0)
                return push_unknown(e, u[i]);
            e->syms[m].id = tok->unk;
            e->syms[m].prev = (int32_t)m - 1;
            e->syms[m].next = (int32_t)m + 1;
            m++;
        }
        i += l;
    }
    if (m == 0)
        return RLP_OK;
    e->syms[m - 1].next = -1;
    return bpe_merge(e, m, e->ids);
}

/* Splits s[0..n) with regex `stage` (HF Split, behaviour Isolated: matches
 * and the gaps between them are both pieces) and recurses. */
static int split_stage(enc *e, size_t stage, const char *s, size_t n)
{
    const rlpi_tokenizer *tok = e->tok;
    if (n == 0)
        return RLP_OK;
    if (tok->prefix_space && stage == tok->prefix_stage && s[0] != ' ') {
        /* HF ByteLevel(add_prefix_space) prepends a space to every split
         * that reaches it, not just to the start of the text */
        char *p = malloc(n + 1);
        if (!p)
            return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
        p[0] = ' ';
        memcpy(p + 1, s, n);
        int rc = split_stage(e, stage, p, n + 1);
        free(p);
        return rc;
    }
    if (stage == tok->n_re)
        return encode_word_bytes(e, s, n);
    size_t pos = 0, gap = 0;
    int rc = RLP_OK;
    while (pos < n) {
        int r = pcre2_match(tok->re[stage], (PCRE2_SPTR)s, n, pos, 0, e->md, NULL);
        if (r < 0) {
            if (r != PCRE2_ERROR_NOMATCH)
                return rlpi_error_set(RLP_E_INTERNAL, "tokenizer: pre-tokenizer regex failed (%d)", r);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* empty match: step one character */
            size_t l;
            rlpi_utf8_scan((const unsigned char *)s, n, ms, &l);
            pos = ms + (ms < n ? l : 1);
            continue;
        }
        if (ms > gap && (rc = split_stage(e, stage + 1, s + gap, ms - gap)) != RLP_OK)
            return rc;
        if ((rc = split_stage(e, stage + 1, s + ms, me - ms)) != RLP_OK)
            return rc;
        pos = gap = me;
    }
    if (gap < n)
        rc = split_stage(e, stage + 1, s + gap, n - gap);
    return rc;
}

/* A run of text between added tokens: normalize, pre-tokenize, BPE. */
static int encode_text(enc *e, const char *s, size_t n)
{
    const rlpi_tokenizer *tok = e->tok;
    int rc = RLP_OK;
    char *nfc = NULL;
    if (n == 0)
        return RLP_OK;
    if (tok->normalizer == RLPI_NORM_NFC) {
        bool ascii = true;
        for (size_t i = 0; i < n && ascii; i++)
            ascii = (unsigned char)s[i] < 0x80;
        if (!ascii) {
            size_t nl;
            int st = rlpi_utf8_nfc(s, n, &nfc, &nl);
            if (st == RLPI_NFC_FAIL)
                return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory in NFC");
            if (st == RLPI_NFC_DONE) {
                s = nfc;
                n = nl;
            }
        }
    }
    if (tok->model == RLPI_TOK_SPM) {
        /* ▁ prefix, ' ' → ▁ (SentencePiece add_dummy_prefix + escape) */
        size_t need;
        if (!rlpi_mul_size(&need, n, 3) || !rlpi_add_size(&need, need, 3)) {
            free(nfc);
            return rlpi_error_set(RLP_E_OVERFLOW, "tokenizer: text too long");
        }
        if ((rc = ensure_tmp(e, need)) == RLP_OK) {
            size_t k = 0;
            bool has_space = s[0] == ' ' || (n >= 3 && memcmp(s, "\xe2\x96\x81", 3) == 0);
            if (tok->normalizer == RLPI_NORM_SPM_ESCAPE && tok->spm_prefix &&
                (!tok->spm_prefix_first || e->at_input_start) &&
                !(tok->spm_prefix_unless_space && has_space)) {
                memcpy(e->tmp, "\xe2\x96\x81", 3);
                k = 3;
            }
            for (size_t i = 0; i < n; i++) {
                if (s[i] == ' ' && tok->normalizer == RLPI_NORM_SPM_ESCAPE) {
                    memcpy(e->tmp + k, "\xe2\x96\x81", 3);
                    k += 3;
                } else {
                    e->tmp[k++] = s[i];
                }
            }
            /* encode_spm uses e->syms, not e->tmp: safe to pass tmp */
            rc = encode_spm(e, e->tmp, k);
        }
        free(nfc);
        return rc;
    }
    rc = split_stage(e, 0, s, n);
    free(nfc);
    return rc;
}

static int flush_text(enc *e)
{
    int rc = encode_text(e, e->pend, e->plen);
    e->plen = 0;
    e->at_input_start = false;
    return rc;
}

static int pend_append(enc *e, const char *s, size_t n)
{
    size_t need;
    if (!rlpi_add_size(&need, e->plen, n))
        return rlpi_error_set(RLP_E_OVERFLOW, "tokenizer: text too long");
    if (need > e->pcap) {
        size_t c = e->pcap ? e->pcap : 256;
        while (c < need) {
            if (!rlpi_mul_size(&c, c, 2))
                return rlpi_error_set(RLP_E_OVERFLOW, "tokenizer: text too long");
        }
        char *p = realloc(e->pend, c);
        if (!p)
            return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
        e->pend = p;
        e->pcap = c;
    }
    memcpy(e->pend + e->plen, s, n);
    e->plen = need;
    return RLP_OK;
}

/* Longest added token spelled at s[0..n) that may be matched here. */
static int32_t match_added(const rlpi_tokenizer *tok, const char *s, size_t n, bool parse_special)
{
    unsigned b = (unsigned char)s[0];
    for (uint32_t k = tok->added_start[b]; k < tok->added_start[b + 1]; k++) {
        int32_t id = tok->added[k];
        size_t l = tok->piece_len[id];
        if (l > n || memcmp(tok->arena + tok->piece_off[id], s, l) != 0)
            continue;
        if (tok->type[id] != RLPI_TT_USER_DEFINED && !parse_special)
            continue;
        return id;
    }
    return -1;
}

int rlpi_tokenizer_encode_segs(const rlpi_tokenizer *tok, const rlpi_text_seg *segs,
                               size_t n_segs, bool add_bos, rlpi_ids *ids)
{
    enc e;
    memset(&e, 0, sizeof e);
    e.tok = tok;
    e.ids = ids;
    e.at_input_start = true;
    int rc = RLP_OK;
    if (tok->n_re > 0) {
        e.md = pcre2_match_data_create(4, NULL);
        if (!e.md)
            return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    }
    if (add_bos && tok->bos >= 0)
        rc = rlpi_ids_push(ids, tok->bos);
    for (size_t g = 0; g < n_segs && rc == RLP_OK; g++) {
        const char *s = segs[g].text;
        size_t n = segs[g].len, run = 0;
        for (size_t i = 0; i < n && rc == RLP_OK;) {
            int32_t id = tok->n_added ? match_added(tok, s + i, n - i, segs[g].parse_special) : -1;
            if (id < 0) {
                i++;
                continue;
            }
            if (i > run && (rc = pend_append(&e, s + run, i - run)) != RLP_OK)
                break;
            if ((rc = flush_text(&e)) != RLP_OK)
                break;
            rc = rlpi_ids_push(ids, id);
            i += tok->piece_len[id];
            run = i;
        }
        if (rc == RLP_OK && n > run)
            rc = pend_append(&e, s + run, n - run);
    }
    if (rc == RLP_OK)
        rc = flush_text(&e);
    free(e.pend);
    free(e.syms);
    free(e.heap);
    free(e.tmp);
    if (e.md)
        pcre2_match_data_free(e.md);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Decode                                                                   */
/* ------------------------------------------------------------------------ */

int rlpi_tokenizer_decode(const rlpi_tokenizer *tok, const int32_t *ids, size_t n,
                          bool skip_special, char **out, size_t *len)
{
    char *raw = NULL;
    size_t rl = 0, rc_cap = 0;
    bool at_start = true;
    for (size_t i = 0; i < n; i++) {
        size_t bl;
        const char *b = rlpi_tokenizer_token_bytes(tok, ids[i], &bl);
        if (!b) {
            free(raw);
            return rlpi_error_set(RLP_E_INVALID_ARG, "decode: ids[%zu] = %d is not a token id", i,
                                  (int)ids[i]);
        }
        int t = tok->type[ids[i]];
        bool special = t == RLPI_TT_CONTROL;
        if (special && skip_special)
            continue;
        if (at_start && !special && tok->strip_space && bl > 0 && b[0] == ' ') {
            b++;
            bl--;
        }
        if (!special)
            at_start = false;
        if (!rlpi_buf_append(&raw, &rl, &rc_cap, b, bl)) {
            free(raw);
            return rlpi_error_set(RLP_E_NOMEM, "decode: out of memory");
        }
    }
    char *o = NULL;
    size_t ol = 0, oc = 0;
    if (!rlpi_buf_append(&o, &ol, &oc, "", 0) ||
        !rlpi_utf8_lossy_append(&o, &ol, &oc, (const unsigned char *)(raw ? raw : ""), rl)) {
        free(raw);
        free(o);
        return rlpi_error_set(RLP_E_NOMEM, "decode: out of memory");
    }
    free(raw);
    *out = o;
    *len = ol;
    return RLP_OK;
}

/* ------------------------------------------------------------------------ */
/* The merge list, for writers (GGUF out)                                   */
/* ------------------------------------------------------------------------ */

typedef struct ranked_pair {
    float prio;
    int32_t left, right;
} ranked_pair;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked_pair *x = a, *y = b;
    return x->prio < y->prio ? -1 : x->prio > y->prio ? 1 : 0;
}

int rlpi_tokenizer_merge_pairs(const rlpi_tokenizer *tok, int32_t **pairs, size_t *n)
{
    *pairs = NULL;
    *n = 0;
    size_t count = 0, slots = tok->merges.slots ? tok->merges.mask + 1 : 0;
    for (size_t i = 0; i < slots; i++)
        count += tok->merges.slots[i].key != UINT64_MAX;
    ranked_pair *r = malloc((count ? count : 1) * sizeof *r);
    int32_t *out = malloc((count ? count : 1) * 2 * sizeof *out);
    if (!r || !out) {
        free(r);
        free(out);
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory for the merge list");
    }
    size_t k = 0;
    for (size_t i = 0; i < slots; i++) {
        const rlpi_pair_slot *s = &tok->merges.slots[i];
        if (s->key == UINT64_MAX)
            continue;
        r[k].prio = s->prio;
        r[k].left = (int32_t)(s->key >> 32);
        r[k].right = (int32_t)(s->key & 0xffffffffu);
        k++;
    }
    qsort(r, count, sizeof *r, cmp_ranked);
    for (size_t i = 0; i < count; i++) {
        out[2 * i] = r[i].left;
        out[2 * i + 1] = r[i].right;
    }
    free(r);
    *pairs = out;
    *n = count;
    return RLP_OK;
}
