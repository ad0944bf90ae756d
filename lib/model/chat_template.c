/* Chat templates as code: ChatML (Qwen2/2.5, with its tool turns), Qwen3's
 * ChatML (reasoning in <think> blocks, tool turns, the enable_thinking
 * switch; tool definitions go into the system message, written by the
 * caller as `rlpost serve` does), ChatML with SmolLM2's default system
 * prompt, Llama-3, Llama-2 and Gemma 3, chosen by name or by
 * recognising a model's Jinja source. Rendering produces text segments so
 * that scaffolding is encoded with special tokens parsed and message
 * content without (public-bugs case #1). No Jinja interpreter. */
#include "model/tokenizer.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define SMOLLM_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

static const struct {
    const char *name;
    int kind;
} names[] = {
    {"chatml", RLPI_CHAT_CHATML},   {"qwen", RLPI_CHAT_CHATML},   {"qwen2", RLPI_CHAT_CHATML},
    {"qwen3", RLPI_CHAT_QWEN3},    {"smollm2", RLPI_CHAT_CHATML_SMOLLM},
    {"smollm", RLPI_CHAT_CHATML_SMOLLM}, {"llama3", RLPI_CHAT_LLAMA3},
    {"llama-3", RLPI_CHAT_LLAMA3},  {"llama2", RLPI_CHAT_LLAMA2}, {"llama-2", RLPI_CHAT_LLAMA2},
    {"gemma", RLPI_CHAT_GEMMA3},    {"gemma3", RLPI_CHAT_GEMMA3}, {"gemma-3", RLPI_CHAT_GEMMA3},
};

const char *rlpi_chat_template_name(int kind)
{
    switch (kind) {
    case RLPI_CHAT_CHATML: return "chatml";
    case RLPI_CHAT_CHATML_SMOLLM: return "smollm2";
    case RLPI_CHAT_LLAMA3: return "llama3";
    case RLPI_CHAT_LLAMA2: return "llama2";
    case RLPI_CHAT_QWEN3: return "qwen3";
    case RLPI_CHAT_GEMMA3: return "gemma3";
    default: return NULL;
    }
}

const char *rlpi_chat_template_end_of_turn(int kind)
{
    switch (kind) {
    case RLPI_CHAT_CHATML:
    case RLPI_CHAT_CHATML_SMOLLM:
    case RLPI_CHAT_QWEN3: return "<|im_end|>";
    case RLPI_CHAT_LLAMA3: return "<|eot_id|>";
    case RLPI_CHAT_GEMMA3: return "<end_of_turn>";
    default: return NULL;
    }
}

int rlpi_chat_template_detect(int *kind, const char *src)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(src, names[i].name) == 0) {
            *kind = names[i].kind;
            return RLP_OK;
        }
    }
    if (strstr(src, "<|im_start|>") && strstr(src, "reasoning_content") && strstr(src, "</think>")) {
        *kind = RLPI_CHAT_QWEN3;
        return RLP_OK;
    }
    if (strstr(src, "<|im_start|>")) {
        *kind = strstr(src, "You are a helpful AI assistant named SmolLM") ? RLPI_CHAT_CHATML_SMOLLM
                                                                          : RLPI_CHAT_CHATML;
        return RLP_OK;
    }
    if (strstr(src, "<|start_header_id|>") && strstr(src, "<|eot_id|>")) {
        if (strstr(src, "Cutting Knowledge Date"))
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "chat template: Llama-3.1+ template (date header and tools) is "
                                  "not supported; set \"llama3\" to use the Llama-3.0 format");
        *kind = RLPI_CHAT_LLAMA3;
        return RLP_OK;
    }
    if (strstr(src, "[INST]") && strstr(src, "<<SYS>>")) {
        *kind = RLPI_CHAT_LLAMA2;
        return RLP_OK;
    }
    /* Gemma 2 and 3 share the turn markers; Gemma 2's template refuses a
     * system message where Gemma 3's folds it into the first user turn,
     * which renders Gemma 2 conversations (no system) identically. */
    if (strstr(src, "<start_of_turn>") && strstr(src, "<end_of_turn>")) {
        *kind = RLPI_CHAT_GEMMA3;
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED,
                          "chat template not recognised (known: chatml, qwen3, smollm2, llama3, llama2, "
                          "gemma3): "
                          "\"%.60s%s\"",
                          src, strlen(src) > 60 ? "..." : "");
}

static bool has_token(const rlpi_tokenizer *tok, const char *s)
{
    return rlpi_tokenizer_find(tok, s, strlen(s)) >= 0;
}

int rlpi_chat_template_default(const rlpi_tokenizer *tok)
{
    const char *src = rlpi_tokenizer_chat_template_src(tok);
    int kind;
    if (src && rlpi_chat_template_detect(&kind, src) == RLP_OK)
        return kind;
    if (has_token(tok, "<|im_start|>") && has_token(tok, "<|im_end|>"))
        return RLPI_CHAT_CHATML;
    if (has_token(tok, "<|start_header_id|>") && has_token(tok, "<|eot_id|>"))
        return RLPI_CHAT_LLAMA3;
    /* before the SPM fallback: Gemma's vocabulary is SentencePiece too
     * (its GGUFs often carry no template) */
    if (has_token(tok, "<start_of_turn>") && has_token(tok, "<end_of_turn>"))
        return RLPI_CHAT_GEMMA3;
    if (rlpi_tokenizer_model(tok) == RLPI_TOK_SPM && rlpi_tokenizer_special(tok, RLP_TOKEN_BOS) >= 0)
        return RLPI_CHAT_LLAMA2;
    return RLPI_CHAT_NONE;
}

typedef struct segs {
    rlpi_text_seg *v;
    size_t n, cap;
    char **own; /* [n_own] strings the segments point into, freed after encoding */
    size_t n_own;
} segs;

static void segs_free(segs *s)
{
    for (size_t i = 0; i < s->n_own; i++)
        free(s->own[i]);
    free(s->own);
    free(s->v);
}

static int seg(segs *s, const char *text, size_t len, bool special)
{
    if (len == 0)
        return RLP_OK;
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 32;
        rlpi_text_seg *v = realloc(s->v, c * sizeof *v);
        if (!v)
            return rlpi_error_set(RLP_E_NOMEM, "chat template: out of memory");
        s->v = v;
        s->cap = c;
    }
    s->v[s->n].text = text;
    s->v[s->n].len = len;
    s->v[s->n].parse_special = special;
    s->n++;
    return RLP_OK;
}

/* One content segment made of `n` pieces (text, length pairs) joined.
 * The encoder matches added tokens within a segment only, so text whose
 * whitespace may join across a piece boundary into one added token
 * (Gemma's "\n\n\n") must be a single segment. */
static int seg_join(segs *s, size_t n, const char *const *p, const size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += len[i];
    char **own = realloc(s->own, (s->n_own + 1) * sizeof *own);
    if (!own)
        return rlpi_error_set(RLP_E_NOMEM, "chat template: out of memory");
    s->own = own;
    char *buf = malloc(total + 1);
    if (!buf)
        return rlpi_error_set(RLP_E_NOMEM, "chat template: out of memory");
    s->own[s->n_own++] = buf;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + at, p[i], len[i]);
        at += len[i];
    }
    buf[at] = 0;
    return seg(s, buf, total, false);
}

#define SCAF(s, lit) seg((s), (lit), strlen(lit), true)
#define TEXT(s, str) seg((s), (str), strlen(str), false)

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's trim / Python's str.strip() on ASCII whitespace. */
static void strip(const char *s, bool left, bool right, const char **b, size_t *len)
{
    size_t n = strlen(s), i = 0;
    while (left && i < n && is_ws(s[i]))
        i++;
    while (right && n > i && is_ws(s[n - 1]))
        n--;
    *b = s + i;
    *len = n - i;
}

static int check_role(const char *role, size_t i)
{
    size_t n = strlen(role);
    if (n == 0 || n > 32)
        return rlpi_error_set(RLP_E_INVALID_ARG, "chat template: msgs[%zu].role has length %zu", i, n);
    for (size_t k = 0; k < n; k++) {
        char c = role[k];
        if (!((c >= 'a' && c <= 'z') || c == '_'))
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "chat template: msgs[%zu].role \"%.32s\" is not a role name", i,
                                  role);
    }
    return RLP_OK;
}

/* A tool result as Qwen2.5's (and Qwen3's) template writes it: inside a
 * user turn, consecutive results sharing one turn. */
static int render_tool_result(segs *s, const rlpi_chat_msg *m, size_t n, size_t i)
{
    int rc;
    if ((i == 0 || strcmp(m[i - 1].role, "tool") != 0) && (rc = SCAF(s, "<|im_start|>user")))
        return rc;
    if ((rc = SCAF(s, "\n<tool_response>\n")) || (rc = TEXT(s, m[i].content)) || (rc = SCAF(s, "\n</tool_response>")))
        return rc;
    if (i == n - 1 || strcmp(m[i + 1].role, "tool") != 0)
        return SCAF(s, "<|im_end|>\n");
    return RLP_OK;
}

/* ChatML; the Qwen2 kind renders "tool" messages as Qwen2.5 does (an
 * assistant's tool calls are <tool_call> text in its content, which the
 * generic turn already writes as Qwen2.5 does), SmolLM2's template has no
 * tool turns and keeps the role as written. */
static int render_chatml(segs *s, const rlpi_chat_msg *m, size_t n, bool gen, bool smollm)
{
    int rc = RLP_OK;
    if (smollm && strcmp(m[0].role, "system") != 0)
        rc = SCAF(s, "<|im_start|>system\n" SMOLLM_SYSTEM "<|im_end|>\n");
    for (size_t i = 0; i < n && rc == RLP_OK; i++) {
        if (!smollm && strcmp(m[i].role, "tool") == 0) {
            rc = render_tool_result(s, m, n, i);
            continue;
        }
        if ((rc = SCAF(s, "<|im_start|>")) || (rc = TEXT(s, m[i].role)) || (rc = SCAF(s, "\n")) ||
            (rc = TEXT(s, m[i].content)) || (rc = SCAF(s, "<|im_end|>\n")))
            break;
    }
    if (rc == RLP_OK && gen)
        rc = SCAF(s, "<|im_start|>assistant\n");
    return rc;
}

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends_with(const char *s, const char *p)
{
    size_t n = strlen(s), k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* s[b..e) with newlines stripped at the chosen ends (Python strip('\n')). */
static void strip_nl(const char *s, size_t *b, size_t *e, bool left, bool right)
{
    while (left && *b < *e && s[*b] == '\n')
        (*b)++;
    while (right && *e > *b && s[*e - 1] == '\n')
        (*e)--;
}

static const char *last_strstr(const char *s, size_t n, const char *p)
{
    const char *last = NULL;
    size_t k = strlen(p);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(s + i, p, k) == 0)
            last = s + i;
    }
    return last;
}

/* Qwen3's template (tools absent): the system message first; assistant
 * turns after the last real user query keep their reasoning in a
 * <think> block (an empty one on the final turn), earlier ones lose it;
 * consecutive tool results share one user turn. */
static int render_qwen3(segs *s, const rlpi_chat_msg *m, size_t n, bool gen, bool thinking)
{
    int rc = RLP_OK;
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (strcmp(m[k].role, "user") == 0 &&
            !(starts_with(m[k].content, "<tool_response>") && ends_with(m[k].content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n && rc == RLP_OK; i++) {
        const char *role = m[i].role, *c = m[i].content;
        if (strcmp(role, "user") == 0 || strcmp(role, "system") == 0) {
            if ((rc = SCAF(s, "<|im_start|>")) || (rc = TEXT(s, role)) || (rc = SCAF(s, "\n")) ||
                (rc = TEXT(s, c)) || (rc = SCAF(s, "<|im_end|>\n")))
                break;
        } else if (strcmp(role, "assistant") == 0) {
            size_t n_c = strlen(c), cb = 0, ce = n_c, rb = 0, re = 0;
            const char *close = strstr(c, "</think>");
            if (close) {
                const char *last = last_strstr(c, n_c, "</think>");
                cb = (size_t)(last - c) + strlen("</think>");
                strip_nl(c, &cb, &ce, true, false);
                re = (size_t)(close - c);
                const char *open = last_strstr(c, re, "<think>");
                rb = open ? (size_t)(open - c) + strlen("<think>") : 0;
                strip_nl(c, &rb, &re, true, true); /* rstrip, split, lstrip, then strip */
            }
            if ((rc = SCAF(s, "<|im_start|>assistant\n")))
                break;
            if (i > last_query && (i == n - 1 || re > rb)) {
                strip_nl(c, &cb, &ce, true, false);
                if ((rc = SCAF(s, "<think>\n")) || (rc = seg(s, c + rb, re - rb, false)) ||
                    (rc = SCAF(s, "\n</think>\n\n")))
                    break;
            }
            if ((rc = seg(s, c + cb, ce - cb, false)) || (rc = SCAF(s, "<|im_end|>\n")))
                break;
        } else if (strcmp(role, "tool") == 0) {
            if ((rc = render_tool_result(s, m, n, i)))
                break;
        } else {
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "chat template qwen3: msgs[%zu].role \"%s\" (system, user, assistant "
                                  "or tool)",
                                  i, role);
        }
    }
    if (rc == RLP_OK && gen)
        rc = SCAF(s, "<|im_start|>assistant\n");
    /* Qwen3's "non-thinking mode": an already closed, empty reasoning
     * block, so the model goes straight to the answer */
    if (rc == RLP_OK && gen && !thinking)
        rc = SCAF(s, "<think>\n\n</think>\n\n");
    return rc;
}

/* Meta's Llama-3 (3.0) template: bos, then per message a header, the
 * trimmed content and <|eot_id|>. */
static int render_llama3(segs *s, const rlpi_chat_msg *m, size_t n, bool gen)
{
    int rc = SCAF(s, "<|begin_of_text|>");
    for (size_t i = 0; i < n && rc == RLP_OK; i++) {
        const char *b;
        size_t len;
        strip(m[i].content, true, true, &b, &len);
        if ((rc = SCAF(s, "<|start_header_id|>")) || (rc = TEXT(s, m[i].role)) ||
            (rc = SCAF(s, "<|end_header_id|>\n\n")) || (rc = seg(s, b, len, false)) ||
            (rc = SCAF(s, "<|eot_id|>")))
            break;
    }
    if (rc == RLP_OK && gen)
        rc = SCAF(s, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return rc;
}

/* Meta's Llama-2-chat template (as in its tokenizer_config.json): an
 * optional system message folded into the first user turn, user and
 * assistant strictly alternating; the prompt already ends where the
 * assistant writes, so add_generation_prompt adds nothing. */
static int render_llama2(segs *s, const rlpi_tokenizer *tok, const rlpi_chat_msg *m, size_t n)
{
    const char *sys = NULL;
    size_t first = 0;
    if (strcmp(m[0].role, "system") == 0) {
        sys = m[0].content;
        first = 1;
    }
    size_t bl = 0, el = 0;
    const char *bos = rlpi_tokenizer_token_piece(tok, rlpi_tokenizer_special(tok, RLP_TOKEN_BOS), &bl);
    const char *eos = rlpi_tokenizer_token_piece(tok, rlpi_tokenizer_special(tok, RLP_TOKEN_EOS), &el);
    int rc = RLP_OK;
    for (size_t i = first; i < n && rc == RLP_OK; i++) {
        bool user = strcmp(m[i].role, "user") == 0;
        if (user != ((i - first) % 2 == 0) || (!user && strcmp(m[i].role, "assistant") != 0))
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "chat template llama2: msgs[%zu].role \"%s\": roles must be an "
                                  "optional system, then user/assistant alternating",
                                  i, m[i].role);
        const char *b;
        size_t len;
        if (user) {
            if (bos && (rc = seg(s, bos, bl, true)))
                break;
            if ((rc = SCAF(s, "[INST] ")))
                break;
            if (i == first && sys) {
                if ((rc = SCAF(s, "<<SYS>>\n")) || (rc = TEXT(s, sys)) ||
                    (rc = SCAF(s, "\n<</SYS>>\n\n")))
                    break;
                strip(m[i].content, false, true, &b, &len);
            } else {
                strip(m[i].content, true, true, &b, &len);
            }
            if ((rc = seg(s, b, len, false)) || (rc = SCAF(s, " [/INST]")))
                break;
        } else {
            strip(m[i].content, true, true, &b, &len);
            if ((rc = SCAF(s, " ")) || (rc = seg(s, b, len, false)) || (rc = SCAF(s, " ")))
                break;
            if (eos && (rc = seg(s, eos, el, true)))
                break;
        }
    }
    return rc;
}

/* Google's Gemma 3 template (google/gemma-3-*-it): <bos>, then user and
 * model turns strictly alternating, each content trimmed; a system
 * message's text (untrimmed) and "\n\n" open the first user turn; the
 * role "assistant" is written "model". Like Llama-2, the BOS is the
 * tokenizer's own token, written here so that the encoder adds none. */
static int render_gemma3(segs *s, const rlpi_tokenizer *tok, const rlpi_chat_msg *m, size_t n,
                         bool gen)
{
    const char *sys = NULL;
    size_t first = 0;
    if (strcmp(m[0].role, "system") == 0) {
        sys = m[0].content;
        first = 1;
    }
    size_t bl = 0;
    const char *bos = rlpi_tokenizer_token_piece(tok, rlpi_tokenizer_special(tok, RLP_TOKEN_BOS), &bl);
    int rc = bos ? seg(s, bos, bl, true) : RLP_OK;
    for (size_t i = first; i < n && rc == RLP_OK; i++) {
        bool user = strcmp(m[i].role, "user") == 0;
        bool model = strcmp(m[i].role, "assistant") == 0 || strcmp(m[i].role, "model") == 0;
        if (user != ((i - first) % 2 == 0) || (!user && !model))
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "chat template gemma3: msgs[%zu].role \"%s\": roles must be an "
                                  "optional system, then user/assistant alternating (Gemma 3 has "
                                  "no tool turns)",
                                  i, m[i].role);
        const char *b;
        size_t len;
        strip(m[i].content, true, true, &b, &len);
        /* the "\n" after the role, the untrimmed system text, its "\n\n"
         * and the content as one run: Gemma's newline runs are added
         * tokens, matched only within one segment (seg_join) */
        bool pre = i == first && sys;
        const char *p[4] = {"\n", pre ? sys : "", pre ? "\n\n" : "", b};
        size_t pl[4] = {1, pre ? strlen(sys) : 0, pre ? 2 : 0, len};
        if ((rc = SCAF(s, user ? "<start_of_turn>user" : "<start_of_turn>model")) ||
            (rc = seg_join(s, 4, p, pl)) || (rc = SCAF(s, "<end_of_turn>\n")))
            break;
    }
    if (rc == RLP_OK && gen)
        rc = SCAF(s, "<start_of_turn>model\n");
    return rc;
}

int rlpi_chat_template_apply(const rlpi_tokenizer *tok, int kind, const rlpi_chat_msg *msgs,
                             size_t n, bool add_generation_prompt, rlpi_ids *ids)
{
    return rlpi_chat_template_apply_ex(tok, kind, msgs, n, add_generation_prompt, true, ids);
}

int rlpi_chat_template_apply_ex(const rlpi_tokenizer *tok, int kind, const rlpi_chat_msg *msgs,
                                size_t n, bool add_generation_prompt, bool enable_thinking,
                                rlpi_ids *ids)
{
    if (n == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "chat template: no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return rlpi_error_set(RLP_E_INVALID_ARG, "chat template: msgs[%zu] has a NULL %s", i,
                                  msgs[i].role ? "content" : "role");
        int rc = check_role(msgs[i].role, i);
        if (rc)
            return rc;
    }
    segs s = {NULL, 0, 0, NULL, 0};
    int rc;
    switch (kind) {
    case RLPI_CHAT_CHATML:
    case RLPI_CHAT_CHATML_SMOLLM:
        rc = render_chatml(&s, msgs, n, add_generation_prompt, kind == RLPI_CHAT_CHATML_SMOLLM);
        break;
    case RLPI_CHAT_QWEN3: rc = render_qwen3(&s, msgs, n, add_generation_prompt, enable_thinking); break;
    case RLPI_CHAT_GEMMA3: rc = render_gemma3(&s, tok, msgs, n, add_generation_prompt); break;
    case RLPI_CHAT_LLAMA3: rc = render_llama3(&s, msgs, n, add_generation_prompt); break;
    case RLPI_CHAT_LLAMA2: rc = render_llama2(&s, tok, msgs, n); break;
    default:
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "chat template: the tokenizer has no chat template");
    }
    if (rc == RLP_OK)
        rc = rlpi_tokenizer_encode_segs(tok, s.v, s.n, false, ids);
    segs_free(&s);
    return rc;
}
