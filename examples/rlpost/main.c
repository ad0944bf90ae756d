/* rlpost — the reference driver of librlpost, built on its public API only.
 * Machine-readable results go to stdout (JSON/JSONL), progress and logs to
 * stderr; exit 0 on success, 2 on bad arguments, 1 on other failures. */
#include "commands.h"
#include "../blas_kernels.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"version", cmd_version, "library version, ABI version and available backends"},
    {"info", cmd_info, "MODEL: architecture, parameters, dtypes, tokenizer, chat template"},
    {"tokenize", cmd_tokenize, "MODEL TEXT: token ids as a JSON array"},
    {"logprobs", cmd_logprobs, "MODEL --text T: per-token logprobs and entropies"},
    {"generate", cmd_generate, "MODEL --prompt P: sampled completions with tokens, logprobs, finish reasons"},
    {"serve", cmd_serve, "MODEL [--port p] [--token-file PATH] [--weights-dir DIR]: OpenAI-compatible rollout server"},
    {"weights-serve", cmd_weights_serve, "DIR [--port p] [--token-file PATH] [--weights-from URL]: serve a weights "
                                         "folder to relays (no model)"},
    {"task", cmd_task, "kk|countdown --seed S --n N [--people K]: generated problems as JSONL"},
    {"reward", cmd_reward, "NAME [--reference R] [--options JSON]: score one completion from stdin"},
    {"export", cmd_export, "MODEL OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k]: write the model as a GGUF for llama.cpp/Ollama"},
    {"train", cmd_train, "CONFIG.json [--set key=value]... [--resume DIR]: RL post-training (the main job)"},
    {"eval", cmd_eval, "CONFIG.json [--checkpoint DIR]: held-out accuracy and format rate"},
    {"rollout-worker", cmd_rollout_worker, "CONFIG.json [--batches N]: rollouts for a trainer's rollout.inbox, "
                                           "in a process of its own"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: rlpost COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv);
    rlpost_bound_dnnl_cache();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc, argv);
    fprintf(stderr, "rlpost: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
