/* The public tokenizer API (rlp_tokenizer_*, rlp_detokenizer_*): argument
 * checks, file reading and format detection, the caller-buffer protocol
 * (RLP_E_OVERFLOW with the needed size), and the streaming decoder's
 * hold-back of incomplete UTF-8. The encoding itself is tokenizer.c's. */
#include "rlpost.h"

#include "core/error.h"
#include "model/tok_utf8.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "model/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENIZER_FILE ((size_t)1 << 30)

struct rlp_tokenizer {
    rlpi_tokenizer *core;
    int chat_kind; /* rlpi_chat_kind */
};

struct rlp_detokenizer {
    const rlp_tokenizer *tok;
    uint32_t flags;
    unsigned char *pend; /* bytes held back: an incomplete character */
    size_t plen, pcap;
    char *out;           /* the last delta */
    size_t olen, ocap;
    bool at_start;
};

static int read_file(const char *path, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rlpi_error_set(RLP_E_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_TOKENIZER_FILE) {
                free(buf);
                fclose(f);
                return rlpi_error_set(RLP_E_FORMAT, "%s: larger than %zu bytes", path,
                                      MAX_TOKENIZER_FILE);
            }
            cap = cap ? cap * 2 : 1 << 16;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                free(buf);
                fclose(f);
                return rlpi_error_set(RLP_E_IO, "%s: read error", path);
            }
            break;
        }
    }
    fclose(f);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return RLP_OK;
}

static rlp_tokenizer *wrap(rlpi_tokenizer *core)
{
    rlp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        rlpi_tokenizer_destroy(core);
        return NULL;
    }
    t->core = core;
    t->chat_kind = rlpi_chat_template_default(core);
    return t;
}

int rlpi_tokenizer_wrap_public(rlpi_tokenizer *core, rlp_tokenizer **out)
{
    rlp_tokenizer *t = wrap(core);
    if (!t)
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer: out of memory");
    *out = t;
    return RLP_OK;
}

RLP_API int rlp_tokenizer_load(rlp_tokenizer **out, const char *path)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    /* a GGUF model carries its tokenizer in metadata: map the file instead
     * of reading hundreds of megabytes of tensors */
    unsigned char magic[4] = {0};
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return rlpi_error_set(RLP_E_IO, "%s: %s", path, strerror(errno));
    size_t got = fread(magic, 1, 4, probe);
    fclose(probe);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        rlpi_gguf *g;
        int grc = rlpi_gguf_open(&g, path);
        rlpi_tokenizer *gcore = NULL;
        if (grc == RLP_OK) {
            grc = rlpi_tokenizer_from_gguf(&gcore, g);
            rlpi_gguf_close(g);
        }
        if (grc)
            return grc;
        return rlpi_tokenizer_wrap_public(gcore, out);
    }
    char *data;
    size_t len;
    int rc = read_file(path, &data, &len);
    if (rc)
        return rc;
    rlpi_tokenizer *core = NULL;
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    /* JSON: '{' then '"' or '}' (a tokenizer.bin whose max_token_length
     * is 123 starts with '{' too, followed by a zero byte) */
    size_t j = i + 1;
    while (j < len && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r'))
        j++;
    if (i < len && data[i] == '{' && j < len && (data[j] == '"' || data[j] == '}')) {
        /* tokenizer_config.json beside it, when there is one */
        char *cfg = NULL;
        size_t cfg_len = 0;
        const char *slash = strrchr(path, '/');
        size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
        char *cpath = malloc(dir + sizeof "tokenizer_config.json");
        if (!cpath) {
            free(data);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
        }
        memcpy(cpath, path, dir);
        memcpy(cpath + dir, "tokenizer_config.json", sizeof "tokenizer_config.json");
        FILE *probe = fopen(cpath, "rb");
        if (probe) {
            fclose(probe);
            rc = read_file(cpath, &cfg, &cfg_len);
        }
        free(cpath);
        if (rc == RLP_OK)
            rc = rlpi_tokenizer_from_json(&core, data, len, cfg, cfg_len);
        free(cfg);
    } else {
        rc = rlpi_tokenizer_from_llama2c(&core, (const unsigned char *)data, len);
    }
    free(data);
    if (rc)
        return rlpi_error_wrap("%s", path);
    rlp_tokenizer *t = wrap(core);
    if (!t)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    *out = t;
    return RLP_OK;
}

RLP_API void rlp_tokenizer_free(rlp_tokenizer *tok)
{
    if (!tok)
        return;
    rlpi_tokenizer_destroy(tok->core);
    free(tok);
}

static int copy_ids(const rlpi_ids *ids, int32_t *out, size_t cap, size_t *n_out)
{
    *n_out = ids->n;
    size_t k = ids->n < cap ? ids->n : cap;
    if (k)
        memcpy(out, ids->v, k * sizeof *out);
    if (ids->n > cap)
        return rlpi_error_set(RLP_E_OVERFLOW, "need room for %zu ids, have %zu", ids->n, cap);
    return RLP_OK;
}

RLP_API int rlp_tokenizer_encode(const rlp_tokenizer *tok, const char *text, size_t len,
                                 uint32_t flags, int32_t *ids, size_t cap, size_t *n_out)
{
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(text || len == 0, "text is NULL");
    RLPI_CHECK_ARG(ids || cap == 0, "ids is NULL");
    RLPI_CHECK_ARG(n_out, "n_out is NULL");
    RLPI_CHECK_ARG((flags & ~(uint32_t)(RLP_ENCODE_ADD_BOS | RLP_ENCODE_PARSE_SPECIAL | RLP_ENCODE_DEFAULT_BOS)) == 0,
                   "flags has unknown bits");
    rlpi_text_seg s = {text ? text : "", len, (flags & RLP_ENCODE_PARSE_SPECIAL) != 0};
    rlpi_ids v = {NULL, 0, 0};
    bool bos = (flags & RLP_ENCODE_ADD_BOS) != 0 ||
               ((flags & RLP_ENCODE_DEFAULT_BOS) != 0 && rlpi_tokenizer_add_bos(tok->core));
    int rc = rlpi_tokenizer_encode_segs(tok->core, &s, 1, bos, &v);
    if (rc == RLP_OK)
        rc = copy_ids(&v, ids, cap, n_out);
    rlpi_ids_free(&v);
    return rc == RLP_OK ? rc : rlpi_error_wrap("rlp_tokenizer_encode");
}

static int copy_text(const char *s, size_t n, char *out, size_t cap, size_t *len_out)
{
    *len_out = n;
    if (cap == 0)
        return rlpi_error_set(RLP_E_OVERFLOW, "need %zu bytes, have 0", n + 1);
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(out, s, k);
    out[k] = '\0';
    if (n + 1 > cap)
        return rlpi_error_set(RLP_E_OVERFLOW, "need %zu bytes, have %zu", n + 1, cap);
    return RLP_OK;
}

RLP_API int rlp_tokenizer_decode(const rlp_tokenizer *tok, const int32_t *ids, size_t n,
                                 uint32_t flags, char *text, size_t cap, size_t *len_out)
{
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(ids || n == 0, "ids is NULL");
    RLPI_CHECK_ARG(text || cap == 0, "text is NULL");
    RLPI_CHECK_ARG(len_out, "len_out is NULL");
    RLPI_CHECK_ARG((flags & ~(uint32_t)RLP_DECODE_SKIP_SPECIAL) == 0, "flags has unknown bits");
    char *s;
    size_t l;
    int rc = rlpi_tokenizer_decode(tok->core, ids, n, (flags & RLP_DECODE_SKIP_SPECIAL) != 0, &s, &l);
    if (rc)
        return rlpi_error_wrap("rlp_tokenizer_decode");
    rc = copy_text(s, l, text, cap, len_out);
    free(s);
    return rc == RLP_OK ? rc : rlpi_error_wrap("rlp_tokenizer_decode");
}

RLP_API int rlp_tokenizer_token_text(const char **out_text, size_t *out_len,
                                     const rlp_tokenizer *tok, int32_t id)
{
    RLPI_CHECK_ARG(out_text, "out_text is NULL");
    RLPI_CHECK_ARG(out_len, "out_len is NULL");
    RLPI_CHECK_ARG(tok, "tok is NULL");
    size_t l;
    const char *s = rlpi_tokenizer_token_bytes(tok->core, id, &l);
    if (!s)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_tokenizer_token_text: id %d is not a token id",
                              (int)id);
    *out_text = s;
    *out_len = l;
    return RLP_OK;
}

RLP_API int rlp_tokenizer_vocab_size(size_t *out_size, const rlp_tokenizer *tok)
{
    RLPI_CHECK_ARG(out_size, "out_size is NULL");
    RLPI_CHECK_ARG(tok, "tok is NULL");
    *out_size = rlpi_tokenizer_n_vocab(tok->core);
    return RLP_OK;
}

RLP_API int rlp_tokenizer_special_id(int32_t *out_id, const rlp_tokenizer *tok, int role)
{
    RLPI_CHECK_ARG(out_id, "out_id is NULL");
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(role >= RLP_TOKEN_BOS && role <= RLP_TOKEN_UNK, "role is not an rlp_token_role");
    int32_t id = rlpi_tokenizer_special(tok->core, role);
    if (id < 0)
        return rlpi_error_set(RLP_E_NOT_FOUND, "rlp_tokenizer_special_id: the tokenizer has no %s token",
                              role == RLP_TOKEN_BOS   ? "BOS"
                              : role == RLP_TOKEN_EOS ? "EOS"
                              : role == RLP_TOKEN_PAD ? "padding"
                                                      : "unknown");
    *out_id = id;
    return RLP_OK;
}

RLP_API int rlp_tokenizer_set_chat_template(rlp_tokenizer *tok, const char *name_or_source)
{
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(name_or_source, "name_or_source is NULL");
    int kind;
    int rc = rlpi_chat_template_detect(&kind, name_or_source);
    if (rc)
        return rlpi_error_wrap("rlp_tokenizer_set_chat_template");
    tok->chat_kind = kind;
    return RLP_OK;
}

RLP_API const char *rlp_tokenizer_chat_template(const rlp_tokenizer *tok)
{
    RLPI_CHECK_ARG_NULL(tok, "tok is NULL");
    const char *name = rlpi_chat_template_name(tok->chat_kind);
    if (!name)
        rlpi_error_set(RLP_E_NOT_FOUND, "rlp_tokenizer_chat_template: the tokenizer has no chat template");
    return name;
}

RLP_API int rlp_chat_options_init(rlp_chat_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_CHAT_OPTIONS_VERSION, "unknown version");
    rlp_chat_options d = RLP_CHAT_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

static int apply_chat(const char *fn, const rlp_tokenizer *tok, const rlp_chat_message *msgs,
                      size_t n, bool gen, bool thinking, int32_t *ids, size_t cap, size_t *n_out)
{
    rlpi_chat_msg *m = malloc(n * sizeof *m);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; i < n; i++) {
        m[i].role = msgs[i].role;
        m[i].content = msgs[i].content;
    }
    rlpi_ids v = {NULL, 0, 0};
    int rc = rlpi_chat_template_apply_ex(tok->core, tok->chat_kind, m, n, gen, thinking, &v);
    free(m);
    if (rc == RLP_OK)
        rc = copy_ids(&v, ids, cap, n_out);
    rlpi_ids_free(&v);
    return rc == RLP_OK ? rc : rlpi_error_wrap("%s", fn);
}

RLP_API int rlp_tokenizer_apply_chat_template(const rlp_tokenizer *tok,
                                              const rlp_chat_message *msgs, size_t n,
                                              int add_generation_prompt, int32_t *ids,
                                              size_t cap, size_t *n_out)
{
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(msgs, "msgs is NULL");
    RLPI_CHECK_ARG(n > 0, "n is 0");
    RLPI_CHECK_ARG(ids || cap == 0, "ids is NULL");
    RLPI_CHECK_ARG(n_out, "n_out is NULL");
    return apply_chat("rlp_tokenizer_apply_chat_template", tok, msgs, n, add_generation_prompt != 0,
                      true, ids, cap, n_out);
}

RLP_API int rlp_tokenizer_apply_chat_template_opts(const rlp_tokenizer *tok,
                                                   const rlp_chat_message *msgs, size_t n,
                                                   const rlp_chat_options *opts, int32_t *ids,
                                                   size_t cap, size_t *n_out)
{
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(msgs, "msgs is NULL");
    RLPI_CHECK_ARG(n > 0, "n is 0");
    RLPI_CHECK_ARG(ids || cap == 0, "ids is NULL");
    RLPI_CHECK_ARG(n_out, "n_out is NULL");
    RLPI_CHECK_ARG(!opts || (opts->version >= 1 && opts->version <= RLP_CHAT_OPTIONS_VERSION),
                   "opts->version is not 1 … RLP_CHAT_OPTIONS_VERSION");
    rlp_chat_options d = RLP_CHAT_OPTIONS_INIT;
    if (!opts)
        opts = &d;
    return apply_chat("rlp_tokenizer_apply_chat_template_opts", tok, msgs, n,
                      opts->add_generation_prompt != 0, opts->enable_thinking != 0, ids, cap, n_out);
}

/* ------------------------------------------------------------------------ */
/* Streaming decoder                                                        */
/* ------------------------------------------------------------------------ */

RLP_API int rlp_detokenizer_create(rlp_detokenizer **out, const rlp_tokenizer *tok, uint32_t flags)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG((flags & ~(uint32_t)RLP_DECODE_SKIP_SPECIAL) == 0, "flags has unknown bits");
    rlp_detokenizer *d = calloc(1, sizeof *d);
    if (!d)
        return rlpi_error_set(RLP_E_NOMEM, "rlp_detokenizer_create: out of memory");
    d->tok = tok;
    d->flags = flags;
    d->at_start = true;
    *out = d;
    return RLP_OK;
}

RLP_API void rlp_detokenizer_free(rlp_detokenizer *det)
{
    if (!det)
        return;
    free(det->pend);
    free(det->out);
    free(det);
}

/* Emits pend[0..k) lossily as the delta and keeps pend[k..). */
static int emit(rlp_detokenizer *d, size_t k, const char **out_text, size_t *out_len)
{
    d->olen = 0;
    if (!rlpi_buf_append(&d->out, &d->olen, &d->ocap, "", 0) ||
        (k > 0 && !rlpi_utf8_lossy_append(&d->out, &d->olen, &d->ocap, d->pend, k)))
        return rlpi_error_set(RLP_E_NOMEM, "detokenizer: out of memory");
    if (d->plen > k)
        memmove(d->pend, d->pend + k, d->plen - k);
    d->plen -= k;
    *out_text = d->out;
    *out_len = d->olen;
    return RLP_OK;
}

RLP_API int rlp_detokenizer_push(const char **out_text, size_t *out_len, rlp_detokenizer *det,
                                 int32_t id)
{
    RLPI_CHECK_ARG(out_text, "out_text is NULL");
    RLPI_CHECK_ARG(out_len, "out_len is NULL");
    RLPI_CHECK_ARG(det, "det is NULL");
    const rlpi_tokenizer *core = det->tok->core;
    size_t bl;
    const char *b = rlpi_tokenizer_token_bytes(core, id, &bl);
    if (!b)
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlp_detokenizer_push: id %d is not a token id",
                              (int)id);
    bool special = rlpi_tokenizer_token_type(core, id) == RLPI_TT_CONTROL;
    if (special && (det->flags & RLP_DECODE_SKIP_SPECIAL))
        bl = 0;
    /* same leading-space rule as rlpi_tokenizer_decode */
    if (det->at_start && !special && rlpi_tokenizer_strips_leading_space(core) && bl > 0 &&
        b[0] == ' ') {
        b++;
        bl--;
    }
    if (!special)
        det->at_start = false;
    size_t need = det->plen + bl;
    if (need > det->pcap) {
        size_t c = need * 2 + 16;
        unsigned char *p = realloc(det->pend, c);
        if (!p)
            return rlpi_error_set(RLP_E_NOMEM, "rlp_detokenizer_push: out of memory");
        det->pend = p;
        det->pcap = c;
    }
    if (bl)
        memcpy(det->pend + det->plen, b, bl);
    det->plen = need;
    return emit(det, rlpi_utf8_complete_prefix(det->pend, det->plen), out_text, out_len);
}

RLP_API int rlp_detokenizer_flush(const char **out_text, size_t *out_len, rlp_detokenizer *det)
{
    RLPI_CHECK_ARG(out_text, "out_text is NULL");
    RLPI_CHECK_ARG(out_len, "out_len is NULL");
    RLPI_CHECK_ARG(det, "det is NULL");
    int rc = emit(det, det->plen, out_text, out_len);
    det->at_start = true;
    return rc;
}

const rlpi_tokenizer *rlpi_tokenizer_core_of(const rlp_tokenizer *tok)
{
    return tok ? tok->core : NULL;
}

int rlpi_tokenizer_chat_kind_of(const rlp_tokenizer *tok)
{
    return tok ? tok->chat_kind : RLPI_CHAT_NONE;
}
