/* Provenance of trajectories through the public batch API, linked like a
 * host: set per trajectory and per group, read back by a version-2
 * rlp_batch_get, carried by get + append copies and rlp_batch_extend; a
 * caller built against the version-1 rlp_trajectory (a shorter struct) is
 * neither written nor read past its end; misuse (NULL, unknown versions,
 * an index outside the batch, an unknown group) fails with a message and
 * changes nothing. (The replay buffer and its spill: test_replay_buffer.c,
 * test_buffer_crash.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <string.h>

/* rlp_trajectory as RLP_TRAJECTORY_VERSION 1 declared it: what a program
 * built against the older header passes. */
typedef struct traj_v1 {
    uint32_t version;
    uint64_t group_id;
    const int32_t *prompt_tokens;
    size_t n_prompt_tokens;
    const int32_t *completion_tokens;
    size_t n_completion_tokens;
    const float *logprobs;
    const uint64_t *token_versions;
    const char *prompt_text;
    const char *completion_text;
    uint64_t policy_version;
    int32_t finish_reason;
    int32_t stop_index;
    float temperature;
    float reward;
    int32_t valid;
    const char *error;
    const char *metadata_json;
    uint32_t sample_index;
    const float *token_rewards;
} traj_v1;

static const int32_t PROMPT[2] = {5, 6};
static const int32_t COMP[2] = {7, 8};
static const float LP[2] = {-0.5f, -2.0f};

static void append_one(rlp_batch *b, uint64_t gid, uint32_t j)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    t.group_id = gid;
    t.prompt_tokens = PROMPT;
    t.n_prompt_tokens = 2;
    t.completion_tokens = COMP;
    t.logprobs = LP;
    t.n_completion_tokens = 2;
    t.completion_text = "c";
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.temperature = 1.0f;
    t.reward = 1.0f;
    t.valid = 1;
    t.sample_index = j;
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
}

/* groups 10, 20, 30 of two samples each, interleaved: 10 20 10 30 20 30 */
static rlp_batch *three_groups(void)
{
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    static const uint64_t order[6] = {10, 20, 10, 30, 20, 30};
    for (int i = 0; i < 6; i++)
        append_one(b, order[i], (uint32_t)(i / 3));
    return b;
}

static rlp_provenance prov_of(uint64_t k)
{
    rlp_provenance p = {.version = RLP_PROVENANCE_VERSION};
    /* every field distinct and using the high bits, so a swapped or
     * truncated field shows */
    p.prompt_index = 0x0100000000000000ull + k;
    p.epoch = 0x0200000000000000ull + k;
    p.position = 0x0300000000000000ull + k;
    p.sampling_seed = 0xF400000000000000ull + k;
    p.batch = 0x0500000000000000ull + k;
    return p;
}

static void assert_prov(const rlp_trajectory *t, uint64_t k)
{
    rlp_provenance p = prov_of(k);
    assert_int_equal(t->has_provenance, 1);
    assert_int_equal(t->provenance.version, RLP_PROVENANCE_VERSION);
    assert_int_equal(t->provenance.prompt_index, p.prompt_index);
    assert_int_equal(t->provenance.epoch, p.epoch);
    assert_int_equal(t->provenance.position, p.position);
    assert_int_equal(t->provenance.sampling_seed, p.sampling_seed);
    assert_int_equal(t->provenance.batch, p.batch);
}

static void assert_no_prov(const rlp_trajectory *t)
{
    static const rlp_provenance zero;
    assert_int_equal(t->has_provenance, 0);
    assert_memory_equal(&t->provenance, &zero, sizeof zero);
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0x5A, sizeof t); /* what get does not write shows */
    t.version = RLP_TRAJECTORY_VERSION;
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    assert_int_equal(t.version, RLP_TRAJECTORY_VERSION);
    return t;
}

/* Per trajectory and per group; a version-2 get returns it, a trajectory
 * without any says so with all-zero fields. */
static void test_set_and_get(void **state)
{
    (void)state;
    rlp_batch *b = three_groups();
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory t = get(b, i);
        assert_no_prov(&t);
    }
    rlp_provenance p = prov_of(1);
    assert_int_equal(rlp_batch_set_group_provenance(b, 10, &p), RLP_OK);
    p = prov_of(2);
    assert_int_equal(rlp_batch_set_provenance(b, 4, &p), RLP_OK); /* one sample of group 20 */
    rlp_trajectory t = get(b, 0);
    assert_prov(&t, 1);
    t = get(b, 2);
    assert_prov(&t, 1);
    t = get(b, 4);
    assert_prov(&t, 2);
    t = get(b, 1);
    assert_no_prov(&t);
    t = get(b, 3);
    assert_no_prov(&t);
    /* set again: replaced */
    p = prov_of(3);
    assert_int_equal(rlp_batch_set_group_provenance(b, 20, &p), RLP_OK);
    t = get(b, 1);
    assert_prov(&t, 3);
    t = get(b, 4);
    assert_prov(&t, 3);
    t = get(b, 0);
    assert_prov(&t, 1);
    rlp_batch_free(b);
}

/* get + append (the copy every host writes), a trajectory appended with its
 * provenance, and extend all keep it. */
static void test_copies_keep_it(void **state)
{
    (void)state;
    rlp_batch *b = three_groups();
    rlp_provenance p = prov_of(7);
    assert_int_equal(rlp_batch_set_group_provenance(b, 30, &p), RLP_OK);
    rlp_batch *c;
    assert_int_equal(rlp_batch_create(&c), RLP_OK);
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory t = get(b, i);
        assert_int_equal(rlp_batch_append(c, &t), RLP_OK);
    }
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory t = get(c, i);
        if (i == 3 || i == 5)
            assert_prov(&t, 7);
        else
            assert_no_prov(&t);
    }
    /* appended with provenance given in the trajectory */
    rlp_trajectory t = get(b, 0);
    t.has_provenance = 1;
    t.provenance = prov_of(8);
    assert_int_equal(rlp_batch_append(c, &t), RLP_OK);
    t = get(c, 6);
    assert_prov(&t, 8);
    /* has_provenance 0: whatever provenance holds is ignored */
    t.has_provenance = 0;
    t.provenance.version = 99;
    assert_int_equal(rlp_batch_append(c, &t), RLP_OK);
    t = get(c, 7);
    assert_no_prov(&t);
    /* extend moves them with their provenance */
    rlp_batch *d;
    assert_int_equal(rlp_batch_create(&d), RLP_OK);
    append_one(d, 1, 0);
    assert_int_equal(rlp_batch_extend(d, c), RLP_OK);
    size_t n;
    assert_int_equal(rlp_batch_size(&n, d), RLP_OK);
    assert_int_equal(n, 9);
    t = get(d, 0);
    assert_no_prov(&t);
    t = get(d, 4);
    assert_prov(&t, 7);
    t = get(d, 7);
    assert_prov(&t, 8);
    rlp_batch_free(b);
    rlp_batch_free(c);
    rlp_batch_free(d);
}

/* A version-1 caller: get writes only the version-1 struct (the bytes after
 * it stay as they were) and leaves version at 1; append reads only the
 * version-1 struct (bytes after it that would be a bad provenance are not
 * looked at) and gives a trajectory without provenance. */
static void test_version1_caller(void **state)
{
    (void)state;
    assert_int_equal(sizeof(traj_v1), offsetof(rlp_trajectory, has_provenance));
    rlp_batch *b = three_groups();
    rlp_provenance p = prov_of(4);
    assert_int_equal(rlp_batch_set_group_provenance(b, 10, &p), RLP_OK);
    struct {
        traj_v1 t;
        uint8_t after[sizeof(rlp_trajectory) - sizeof(traj_v1) + 16];
    } buf;
    memset(&buf, 0xEE, sizeof buf);
    buf.t.version = 1;
    assert_int_equal(rlp_batch_get((rlp_trajectory *)(void *)&buf.t, b, 0), RLP_OK);
    assert_int_equal(buf.t.version, 1);
    assert_int_equal(buf.t.group_id, 10);
    assert_int_equal(buf.t.n_completion_tokens, 2);
    assert_int_equal(buf.t.completion_tokens[1], 8);
    for (size_t i = 0; i < sizeof buf.after; i++)
        assert_int_equal(buf.after[i], 0xEE);
    /* the bytes after it read as has_provenance = -286331154 and provenance
     * version 0xEEEEEEEE: a library that read them would set or refuse */
    rlp_batch *c;
    assert_int_equal(rlp_batch_create(&c), RLP_OK);
    assert_int_equal(rlp_batch_append(c, (const rlp_trajectory *)(const void *)&buf.t), RLP_OK);
    rlp_trajectory t = get(c, 0);
    assert_int_equal(t.group_id, 10);
    assert_no_prov(&t);
    rlp_batch_free(b);
    rlp_batch_free(c);
}

#define EXPECT(call, code, needle)                                                                                     \
    do {                                                                                                               \
        rlp_error_clear();                                                                                             \
        assert_int_equal((call), (code));                                                                              \
        if (!strstr(rlp_error_last(), (needle)))                                                                       \
            fail_msg("message \"%s\" lacks \"%s\"", rlp_error_last(), (needle));                                       \
    } while (0)

static void test_misuse(void **state)
{
    (void)state;
    rlp_batch *b = three_groups();
    rlp_provenance good = prov_of(5), bad = prov_of(6);
    EXPECT(rlp_batch_set_provenance(NULL, 0, &good), RLP_E_INVALID_ARG, "batch is NULL");
    EXPECT(rlp_batch_set_provenance(b, 0, NULL), RLP_E_INVALID_ARG, "provenance is NULL");
    bad.version = 0;
    EXPECT(rlp_batch_set_provenance(b, 0, &bad), RLP_E_INVALID_ARG, "provenance version 0 is unknown");
    bad.version = RLP_PROVENANCE_VERSION + 1;
    EXPECT(rlp_batch_set_provenance(b, 0, &bad), RLP_E_INVALID_ARG, "provenance version 2 is unknown");
    EXPECT(rlp_batch_set_provenance(b, 6, &good), RLP_E_INVALID_ARG, "index 6 outside the batch of 6");
    EXPECT(rlp_batch_set_provenance(b, SIZE_MAX, &good), RLP_E_INVALID_ARG, "outside the batch");
    EXPECT(rlp_batch_set_group_provenance(NULL, 10, &good), RLP_E_INVALID_ARG, "batch is NULL");
    EXPECT(rlp_batch_set_group_provenance(b, 10, NULL), RLP_E_INVALID_ARG, "provenance is NULL");
    EXPECT(rlp_batch_set_group_provenance(b, 10, &bad), RLP_E_INVALID_ARG, "unknown");
    EXPECT(rlp_batch_set_group_provenance(b, 11, &good), RLP_E_NOT_FOUND,
           "no trajectory of the batch (6) has group_id 11");
    /* appending a trajectory whose provenance has an unknown version */
    rlp_batch *c;
    assert_int_equal(rlp_batch_create(&c), RLP_OK);
    rlp_trajectory t = get(b, 0);
    t.has_provenance = 1;
    t.provenance = bad;
    EXPECT(rlp_batch_append(c, &t), RLP_E_INVALID_ARG, "rlp_batch_append: provenance version 2 is unknown");
    t.version = 0;
    EXPECT(rlp_batch_get(&t, b, 0), RLP_E_INVALID_ARG, "version");
    size_t n;
    assert_int_equal(rlp_batch_size(&n, c), RLP_OK);
    assert_int_equal(n, 0);
    /* nothing was changed by the failures */
    for (size_t i = 0; i < 6; i++) {
        rlp_trajectory u = get(b, i);
        assert_no_prov(&u);
    }
    rlp_batch_free(b);
    rlp_batch_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_get),
        cmocka_unit_test(test_copies_keep_it),
        cmocka_unit_test(test_version1_caller),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
