/* Test helper shared by the tokenizer tests: writes the "Llama-3-style"
 * tokenizer.json (SmolLM2's vocabulary with Llama-3's split regex and
 * ignore_merges), the same file tests/reference/make_tokenizer_fixtures.py
 * builds in memory for fixtures/llama3style.jsonl. */
#ifndef RLPOST_TESTS_TOK_TEST_UTIL_H
#define RLPOST_TESTS_TOK_TEST_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA3_REGEX                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "            \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Returns the path of the written file (static storage), or NULL. */
static inline const char *write_llama3_style(const char *smollm2_json)
{
    json_t *d = json_load_file(smollm2_json, 0, NULL);
    if (!d)
        return NULL;
    json_object_set_new(
        d, "pre_tokenizer",
        json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]}", "type", "Sequence",
                  "pretokenizers", "type", "Split", "pattern", "Regex", LLAMA3_REGEX, "behavior",
                  "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                  "trim_offsets", 1, "use_regex", 0));
    json_object_set_new(json_object_get(d, "model"), "ignore_merges", json_true());
    static char dir[128], file[160];
    snprintf(dir, sizeof dir, "/tmp/rlpost_l3_%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    int rc = json_dump_file(d, file, JSON_COMPACT);
    json_decref(d);
    return rc == 0 ? file : NULL;
}

#endif
