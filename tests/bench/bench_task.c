/* Prompts per second out of the task layer: K&K puzzles per size (with the
 * share of sampled puzzles that had a unique solution), Countdown problems,
 * and GSM8K served as plain text and through SmolLM2's chat template.
 * Best of three rounds; never asserts a time.
 * Usage: bench_task [GSM8K train.jsonl] [SmolLM2 tokenizer.json]. */
#include "rlpost.h"

#include "task/kk_generator.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best prompts/s over three batches of n. */
static double rate(rlp_task *t, size_t n, const rlp_tokenizer *tok)
{
    double best = 0;
    for (int r = 0; r < 3; r++) {
        rlp_prompt_set *set;
        double t0 = now();
        if (rlp_task_next_batch(&set, t, n, tok)) {
            fprintf(stderr, "next_batch: %s\n", rlp_error_last());
            exit(1);
        }
        double dt = now() - t0;
        rlp_prompt_set_free(set);
        if (dt > 0 && n / dt > best)
            best = n / dt;
    }
    return best;
}

int main(int argc, char **argv)
{
    printf("%-28s %12s %10s\n", "task", "prompts/s", "unique %");
    for (int k = RLPI_KK_MIN_PEOPLE; k <= RLPI_KK_MAX_PEOPLE; k++) {
        char opts[64], name[32];
        snprintf(opts, sizeof opts, "{\"people\": %d}", k);
        rlp_task *t;
        if (rlp_task_create(&t, "kk", opts))
            return 1;
        rlpi_kk_params p = {k, k, 2};
        uint64_t tries = 0;
        for (uint64_t i = 0; i < 2000; i++) {
            rlpi_kk_puzzle pz;
            if (rlpi_kk_generate(&pz, &p, 0, i))
                return 1;
            tries += pz.tries;
        }
        snprintf(name, sizeof name, "kk, %d people", k);
        printf("%-28s %12.0f %10.1f\n", name, rate(t, 2000, NULL), 100.0 * 2000 / (double)tries);
        rlp_task_free(t);
    }
    rlp_task *cd;
    if (rlp_task_create(&cd, "countdown", NULL))
        return 1;
    printf("%-28s %12.0f\n", "countdown, 3-4 numbers", rate(cd, 5000, NULL));
    rlp_task_free(cd);

    if (argc > 1) {
        double t0 = now();
        rlp_task *g;
        if (rlp_task_open_jsonl(&g, argv[1], NULL)) {
            printf("%s: %s (skipped)\n", argv[1], rlp_error_last());
            return 0;
        }
        uint64_t n = 0;
        rlp_task_size(&n, g);
        printf("%-28s %12.0f records/s (%llu records)\n", "gsm8k open", (double)n / (now() - t0),
               (unsigned long long)n);
        printf("%-28s %12.0f\n", "gsm8k, plain text", rate(g, 2000, NULL));
        rlp_tokenizer *tok;
        if (argc > 2 && rlp_tokenizer_load(&tok, argv[2]) == RLP_OK) {
            printf("%-28s %12.0f\n", "gsm8k, SmolLM2 chat ids", rate(g, 500, tok));
            rlp_tokenizer_free(tok);
        }
        rlp_task_free(g);
    }
    return 0;
}
