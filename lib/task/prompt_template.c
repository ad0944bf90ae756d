/* Prompt templates: presets that reproduce the prompts of Logic-RL and
 * TinyZero byte for byte, user overrides, and rendering to text or, through
 * a tokenizer's chat template, to ids. Question text only ever enters ids
 * as message content or plain-encoded text, never with special-token
 * parsing. */
#include "task/prompt_template.h"

#include "core/error.h"
#include "task/strbuf.h"

#include <stdlib.h>
#include <string.h>

/* Logic-RL's system prompt for instruct models, quoted verbatim (typos and
 * double space included, so that prompts match the published runs):
 * github.com/Unakar/Logic-RL, examples/data_preprocess/kk.py, make_prefix,
 * template_type 'qwen-instruct' (commit da010a8). There the system turn
 * reads "<|im_start|>system\n" + this + "<|im_end|>", the user turn
 * "<|im_start|>user\n{quiz}\n<|im_end|>", and the prompt ends with
 * "<|im_start|>assistant\n<think>": hence the trailing "\n" here, the
 * "{prompt}\n" user template and the "<think>" assistant prefix below. */
const char rlpi_logic_rl_system[] =
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the "
    "mind and then provides the user with the answer. The reasoning process and answer are "
    "enclosed within <think> </think> and<answer> </answer> tags, respectively, i.e., <think> "
    "reasoning process here </think><answer> answer here </answer>.  Now the user asks you to "
    "solve a logical reasoning problem. After thinking, when you finally reach a conclusion, "
    "clearly state the identity of each character within <answer> </answer> tags. i.e., <answer> "
    "(1) Zoey is a knight\n(2) ... </answer>.\n";

/* The same file's template_type 'base' (plain text for base models). */
const char rlpi_logic_rl_base_system[] =
    "The user asks a question, and the Assistant solves it.The assistant first thinks about the "
    "reasoning process in the mind and then provides the user with the final answer. The "
    "reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think><answer> answer here "
    "</answer>. Now the user asks you to solve a logical reasoning problem. After thinking, when "
    "you finally reach a conclusion, clearly state the identity of each character within "
    "<answer> </answer> tags. List the identity of each person one by one, for example, <answer> "
    "(1) Zoey is a knight\n(2) Oliver is a knight\n(3)... </answer>.";

/* TinyZero's Countdown prompts (github.com/Jiayi-Pan/TinyZero,
 * examples/data_preprocess/countdown.py, make_prefix, commit 4d92412):
 * 'qwen-instruct' puts a space before the question in the user turn and
 * opens the assistant turn with "Let me solve this step by step.\n<think>";
 * 'base' is plain text. */
static const char tinyzero_system[] =
    "You are a helpful assistant. You first thinks about the reasoning process in the mind and "
    "then provides the user with the answer.";
static const char tinyzero_base_system[] =
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer.";
static const char tinyzero_prefix[] = "Let me solve this step by step.\n<think>";

/* Tool-use prompts of the lookup task and the built-in "tools"
 * environment. "search" follows ASearcher's tags (arXiv:2508.07976:
 * <search>, <access>, <information>, <answer>); "hermes" describes the
 * tools as Qwen2.5's chat template does (a <tools> list of function
 * signatures and <tool_call> JSON), so that an instruct model trained on
 * that format recognises it. Both ask for the answer in <answer> tags,
 * which the lookup_em reward reads. */
const char rlpi_search_system[] =
    "You are a research assistant with a search engine over a private encyclopedia. None of its "
    "facts are common knowledge, so look everything up. Think step by step inside <think> </think>. "
    "To search, write <search> query </search>; the results come back inside <information> "
    "</information>. To read a whole document, write <access> title </access>. Search as often as "
    "you need, one query at a time. When you know the answer, write only the answer inside <answer> "
    "</answer>. For example: <search> founder of Vexaro Labs </search> ... <answer> Talvin Morasek "
    "</answer>";

const char rlpi_hermes_system[] =
    "You are a research assistant with a search engine over a private encyclopedia. None of its "
    "facts are common knowledge, so look everything up. When you know the answer, write only the "
    "answer inside <answer> </answer>.\n\n"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search the "
    "encyclopedia; returns the best matching passages.\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"query\": {\"type\": \"string\", \"description\": \"search terms\"}}, "
    "\"required\": [\"query\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"open\", \"description\": \"Read a whole "
    "document by its title or id.\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"id\": {\"type\": \"string\", \"description\": \"document title or id\"}}, \"required\": "
    "[\"id\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Evaluate "
    "an arithmetic expression (+ - * / ^ %, parentheses).\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"expression\": {\"type\": \"string\"}}, \"required\": [\"expression\"]}}}\n"
    "</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

static const struct preset {
    const char *name;
    const char *system, *user, *prefix;
    int chat;
} presets[] = {
    {"none", NULL, "{prompt}", NULL, 1},
    {"search", rlpi_search_system, "Question: {prompt}", NULL, 1},
    {"hermes", rlpi_hermes_system, "Question: {prompt}", NULL, 1},
    {"logic-rl", rlpi_logic_rl_system, "{prompt}\n", "<think>", 1},
    {"logic-rl-base", rlpi_logic_rl_base_system, "\n\nUser:{prompt}\nAssistant: ", "<think>", 0},
    {"tinyzero", tinyzero_system, " {prompt}", tinyzero_prefix, 1},
    {"tinyzero-base", tinyzero_base_system, "\nUser: {prompt}\nAssistant: ", tinyzero_prefix, 0},
};

void rlpi_template_free(rlpi_template *t)
{
    if (!t)
        return;
    free(t->system);
    free(t->user);
    free(t->assistant_prefix);
    memset(t, 0, sizeof *t);
}

/* strdup that keeps NULL and turns "" into NULL ("no system prompt"). */
static int dup_opt(char **dst, const char *s)
{
    free(*dst);
    *dst = NULL;
    if (!s || !*s)
        return RLP_OK;
    if (!(*dst = strdup(s)))
        return rlpi_error_set(RLP_E_NOMEM, "task template: out of memory");
    return RLP_OK;
}

static int string_opt(const json_t *options, const char *key, const char **out)
{
    json_t *v = options ? json_object_get(options, key) : NULL;
    if (!v)
        return 0;
    if (!json_is_string(v))
        return rlpi_error_set(RLP_E_INVALID_ARG, "task options: \"%s\" must be a string", key);
    *out = json_string_value(v);
    return 1;
}

int rlpi_template_from_options(rlpi_template *t, const json_t *options, const char *default_preset)
{
    memset(t, 0, sizeof *t);
    const char *name = default_preset;
    int rc = string_opt(options, "template", &name);
    if (rc < 0)
        return rc;
    const struct preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name))
            p = &presets[i];
    if (!p)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "task options: unknown \"template\" \"%.64s\" (none, logic-rl, "
                              "logic-rl-base, tinyzero, tinyzero-base, search, hermes)",
                              name);
    t->chat = p->chat;
    t->enable_thinking = 1;
    const char *system = p->system, *user = p->user, *prefix = p->prefix;
    if ((rc = string_opt(options, "system_prompt", &system)) < 0 ||
        (rc = string_opt(options, "user_template", &user)) < 0 ||
        (rc = string_opt(options, "assistant_prefix", &prefix)) < 0)
        return rc;
    json_t *chat = options ? json_object_get(options, "chat") : NULL;
    if (chat && json_is_object(chat)) {
        /* the keyword arguments vLLM and SGLang take as chat_template_kwargs */
        const char *key;
        json_t *v;
        json_object_foreach(chat, key, v) {
            if (strcmp(key, "enable_thinking") != 0)
                return rlpi_error_set(RLP_E_INVALID_ARG,
                                      "task options: unknown key \"chat.%.64s\" (known: enable_thinking)",
                                      key);
            if (!json_is_boolean(v))
                return rlpi_error_set(RLP_E_INVALID_ARG,
                                      "task options: \"chat.enable_thinking\" must be true or false");
            t->enable_thinking = json_is_true(v);
        }
        t->chat = 1;
    } else if (chat) {
        if (!json_is_boolean(chat))
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "task options: \"chat\" must be true, false or an object of chat "
                                  "options ({\"enable_thinking\": false})");
        t->chat = json_is_true(chat);
    }
    const char *ph = strstr(user, "{prompt}");
    if (!ph || strstr(ph + 1, "{prompt}"))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "task options: \"user_template\" must contain \"{prompt}\" exactly once");
    if ((rc = dup_opt(&t->system, system)) || (rc = dup_opt(&t->assistant_prefix, prefix)) ||
        (rc = dup_opt(&t->user, user))) {
        rlpi_template_free(t);
        return rc;
    }
    return RLP_OK;
}

static void put_user(rlpi_sb *b, const rlpi_template *t, const char *question)
{
    const char *ph = strstr(t->user, "{prompt}");
    rlpi_sb_append(b, t->user, (size_t)(ph - t->user));
    rlpi_sb_puts(b, question);
    rlpi_sb_puts(b, ph + strlen("{prompt}"));
}

char *rlpi_template_user(const rlpi_template *t, const char *question)
{
    rlpi_sb b = {0};
    put_user(&b, t, question);
    return rlpi_sb_take(&b);
}

char *rlpi_template_plain(const rlpi_template *t, const char *question)
{
    rlpi_sb b = {0};
    if (t->system)
        rlpi_sb_puts(&b, t->system);
    put_user(&b, t, question);
    if (t->assistant_prefix)
        rlpi_sb_puts(&b, t->assistant_prefix);
    return rlpi_sb_take(&b);
}

int rlpi_template_encode(const rlpi_template *t, const rlp_tokenizer *tok, const char *question,
                         int32_t **ids_out, size_t *n_out, char **text_out)
{
    char *user = rlpi_template_user(t, question);
    if (!user)
        return rlpi_error_set(RLP_E_NOMEM, "task prompt: out of memory");
    rlp_chat_message msgs[2];
    size_t n_msgs = 0;
    if (t->system)
        msgs[n_msgs++] = (rlp_chat_message){"system", t->system};
    msgs[n_msgs++] = (rlp_chat_message){"user", user};

    int32_t *ids = NULL;
    char *text = NULL;
    size_t n_chat = 0, n_prefix = 0, len = 0;
    const char *prefix = t->assistant_prefix ? t->assistant_prefix : "";
    rlp_chat_options co = RLP_CHAT_OPTIONS_INIT;
    co.enable_thinking = t->enable_thinking;
    int rc = rlp_tokenizer_apply_chat_template_opts(tok, msgs, n_msgs, &co, NULL, 0, &n_chat);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW)
        goto fail;
    /* the assistant prefix is model output to be, i.e. plain text: its
     * "<think>" must stay the ids a model would sample for "<think>" */
    rc = *prefix ? rlp_tokenizer_encode(tok, prefix, strlen(prefix), 0, NULL, 0, &n_prefix)
                 : RLP_OK;
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW)
        goto fail;
    if (n_chat + n_prefix == 0 || !(ids = malloc((n_chat + n_prefix) * sizeof *ids))) {
        rc = rlpi_error_set(RLP_E_NOMEM, "task prompt: out of memory");
        goto fail;
    }
    if ((rc = rlp_tokenizer_apply_chat_template_opts(tok, msgs, n_msgs, &co, ids, n_chat, &n_chat)))
        goto fail;
    if (*prefix && (rc = rlp_tokenizer_encode(tok, prefix, strlen(prefix), 0, ids + n_chat,
                                              n_prefix, &n_prefix)))
        goto fail;
    rc = rlp_tokenizer_decode(tok, ids, n_chat + n_prefix, 0, NULL, 0, &len);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW)
        goto fail;
    if (!(text = malloc(len + 1))) {
        rc = rlpi_error_set(RLP_E_NOMEM, "task prompt: out of memory");
        goto fail;
    }
    if ((rc = rlp_tokenizer_decode(tok, ids, n_chat + n_prefix, 0, text, len + 1, &len)))
        goto fail;
    free(user);
    *ids_out = ids;
    *n_out = n_chat + n_prefix;
    *text_out = text;
    return RLP_OK;
fail:
    free(user);
    free(ids);
    free(text);
    return rlpi_error_wrap("task prompt");
}
