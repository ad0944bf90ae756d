/* GSM8K (the shared data folder's copy of openai/grade-school-math) loads
 * with the default field mapping: question → prompt, answer → reference.
 * Exits 77 (skipped) when the folder is absent. */
#include "rlpost.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void cursor_at(const rlp_task *t, uint64_t epoch, uint64_t position)
{
    uint64_t e = 99, p = 99;
    assert_int_equal(rlp_task_epoch(&e, t), RLP_OK);
    assert_int_equal(rlp_task_position(&p, t), RLP_OK);
    assert_int_equal(e, epoch);
    assert_int_equal(p, position);
}

static void gsm8k_out_of_the_box(void **state)
{
    (void)state;
    const char *dir = getenv("RLPOST_SHARED_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/gsm8k/test.jsonl", dir ? dir : "../shared/data");
    rlp_task *t;
    assert_int_equal(rlp_task_open_jsonl(&t, path, "{\"shuffle\": false, \"task\": \"gsm8k\"}"), RLP_OK);
    uint64_t n = 0;
    assert_int_equal(rlp_task_size(&n, t), RLP_OK);
    assert_int_equal(n, 1319);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 1319, NULL), RLP_OK);
    rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
    assert_int_equal(rlp_prompt_set_item(&it, set, 0), RLP_OK);
    /* the first record, with its escaped U+2019 decoded */
    const char *first = "Janet\xe2\x80\x99s ducks lay 16 eggs per day.";
    assert_true(!strncmp(it.question, first, strlen(first)));
    assert_string_equal(it.reference + strlen(it.reference) - 8, "\n#### 18");
    json_t *m = json_loads(it.metadata_json, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(m, "reference")), it.reference);
    assert_string_equal(json_string_value(json_object_get(m, "task")), "gsm8k");
    assert_int_equal(json_integer_value(json_object_get(m, "line")), 1);
    json_decref(m);
    /* without a template the prompt is the question itself */
    assert_string_equal(rlp_prompt_set_prompts(set)[0].text, it.question);
    for (size_t i = 0; i < 1319; i++) {
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        assert_non_null(strstr(it.reference, "#### "));
        assert_int_equal(it.index, i);
    }
    rlp_prompt_set_free(set);
    cursor_at(t, 1, 0);
    rlp_task_free(t);
    snprintf(path, sizeof path, "%s/gsm8k/train.jsonl", dir ? dir : "../shared/data");
    assert_int_equal(rlp_task_open_jsonl(&t, path, NULL), RLP_OK);
    assert_int_equal(rlp_task_size(&n, t), RLP_OK);
    assert_int_equal(n, 7473);
    rlp_task_free(t);
}

int main(void)
{
    const char *dir = getenv("RLPOST_SHARED_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/gsm8k/test.jsonl", dir ? dir : "../shared/data");
    if (access(path, R_OK) != 0) {
        printf("%s not found: skipped\n", path);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gsm8k_out_of_the_box),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
