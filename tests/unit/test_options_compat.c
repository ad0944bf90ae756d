/* Callers built against older headers: rlp_rl_options version 1 (the struct
 * before SAPO and the rollout correction) alone, and rlp_trainer_options
 * versions 1–3, whose embedded version-1 rl put every later field where a
 * version-4 struct no longer has it. Each is initialised into a buffer of
 * exactly the old size (ASan sees any write or read past it) and converted:
 * the caller's values survive, the fields its version lacks take their
 * defaults, and an unknown version is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/rl_math.h"
#include "algo/rl_options.h"
#include "train/trainer_options.h"

#include <stdlib.h>
#include <string.h>

static void test_rl_options_v1(void **state)
{
    (void)state;
    rlpi_rl_options_v1 *v1 = malloc(sizeof *v1);
    assert_int_equal(rlp_rl_options_init((rlp_rl_options *)(void *)v1, 1), RLP_OK);
    assert_int_equal(v1->version, 1);
    assert_true(v1->clip_low == 0.2f && v1->ppo_epochs == 1 && v1->adv_eps == 1e-6f);
    v1->clip_high = 0.28f;
    v1->temperature = 0.7f;
    v1->policy_loss = RLP_LOSS_GSPO;
    rlp_rl_options o;
    assert_int_equal(rlpi_rl_options_upgrade(&o, (const rlp_rl_options *)(const void *)v1, "opts"), RLP_OK);
    assert_int_equal(o.version, RLP_RL_OPTIONS_VERSION);
    assert_true(o.clip_high == 0.28f && o.temperature == 0.7f && o.policy_loss == RLP_LOSS_GSPO);
    /* what version 1 lacks: the defaults */
    assert_true(o.sapo_tau_pos == 1.0f && o.sapo_tau_neg == 1.05f && o.rollout_is == RLP_IS_OFF &&
                o.rollout_is_threshold == 2.0f && o.clip_cov_ub == 5.0f && o.kl_cov_ratio == 0.0002f);
    assert_int_equal(rlpi_rl_options_check(&o), RLP_OK);
    v1->version = 3;
    assert_int_equal(rlpi_rl_options_upgrade(&o, (const rlp_rl_options *)(const void *)v1, "opts"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rl_options_init(&o, 3), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rl_options_init(&o, 0), RLP_E_INVALID_ARG);
    /* the public check reads a version-1 struct too, and names the field it refuses */
    v1->version = 1;
    assert_int_equal(rlp_rl_options_check((const rlp_rl_options *)(const void *)v1), RLP_OK);
    v1->clip_low = 1.5f;
    assert_int_equal(rlp_rl_options_check((const rlp_rl_options *)(const void *)v1), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "clip_low"));
    free(v1);
    rlp_rl_options bad = RLP_RL_OPTIONS_INIT;
    bad.rollout_is = RLP_IS_TOKEN;
    bad.tis_cap = 2.0f;
    assert_int_equal(rlp_rl_options_check(&bad), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "rollout_is and tis_cap"));
    assert_int_equal(rlp_rl_options_check(NULL), RLP_E_INVALID_ARG);
    /* NULL: the defaults; the current version as it is */
    assert_int_equal(rlpi_rl_options_upgrade(&o, NULL, "opts"), RLP_OK);
    rlp_rl_options d = RLP_RL_OPTIONS_INIT, c = d;
    assert_memory_equal(&o, &d, sizeof o);
    c.rollout_rs = RLP_IS_GEOMETRIC;
    assert_int_equal(rlpi_rl_options_upgrade(&o, &c, "opts"), RLP_OK);
    assert_int_equal(o.rollout_rs, RLP_IS_GEOMETRIC);
}

static size_t v3_bytes(uint32_t version)
{
    return version >= 3   ? sizeof(rlpi_trainer_options_v3)
           : version == 2 ? offsetof(rlpi_trainer_options_v3, rollout_weights)
                          : offsetof(rlpi_trainer_options_v3, multiturn);
}

static void test_trainer_options_v1_to_v3(void **state)
{
    (void)state;
    for (uint32_t v = 1; v <= 3; v++) {
        rlpi_trainer_options_v3 *old = malloc(v3_bytes(v));
        assert_int_equal(rlp_trainer_options_init((rlp_trainer_options *)(void *)old, v), RLP_OK);
        assert_int_equal(old->version, v);
        assert_int_equal(old->rl.version, 1);
        assert_true(old->prompts_per_step == 8 && old->worker_retries == 2 && old->stall_polls == 10);
        old->prompts_per_step = 5;
        old->rl.clip_high = 0.33f;
        old->rl.mini_batches = 2;
        old->max_batch = 17;
        old->stall_polls = 3;
        old->rollout_inbox = "inbox";
        if (v >= 2)
            old->multiturn.max_turns = 4;
        if (v >= 3)
            old->rollout_weights = RLP_ROLLOUT_WEIGHTS_Q8_0;
        rlp_trainer_options o;
        assert_int_equal(rlpi_trainer_options_upgrade(&o, (const rlp_trainer_options *)(const void *)old), RLP_OK);
        assert_int_equal(o.version, RLP_TRAINER_OPTIONS_VERSION);
        assert_true(o.prompts_per_step == 5 && o.max_batch == 17 && o.stall_polls == 3);
        assert_string_equal(o.rollout_inbox, "inbox");
        assert_true(o.rl.version == RLP_RL_OPTIONS_VERSION && o.rl.clip_high == 0.33f && o.rl.mini_batches == 2);
        assert_true(o.rl.sapo_tau_neg == 1.05f && o.rl.rollout_rs == RLP_IS_OFF && o.max_gen_batches == 0);
        rlp_multiturn_options mt;
        rlp_multiturn_options_init(&mt, RLP_MULTITURN_OPTIONS_VERSION);
        assert_int_equal(o.multiturn.max_turns, v >= 2 ? 4u : mt.max_turns);
        assert_int_equal(o.rollout_weights, v >= 3 ? RLP_ROLLOUT_WEIGHTS_Q8_0 : RLP_ROLLOUT_WEIGHTS_F32);
        /* a version-3 struct claiming an rl of version 2 is not a version-3 struct */
        old->rl.version = 2;
        assert_int_equal(rlpi_trainer_options_upgrade(&o, (const rlp_trainer_options *)(const void *)old),
                         RLP_E_INVALID_ARG);
        free(old);
    }
    rlp_trainer_options cur;
    assert_int_equal(rlp_trainer_options_init(&cur, RLP_TRAINER_OPTIONS_VERSION), RLP_OK);
    cur.max_gen_batches = 6;
    rlp_trainer_options o;
    assert_int_equal(rlpi_trainer_options_upgrade(&o, &cur), RLP_OK);
    assert_memory_equal(&o, &cur, sizeof o);
    cur.version = RLP_TRAINER_OPTIONS_VERSION + 1;
    assert_int_equal(rlpi_trainer_options_upgrade(&o, &cur), RLP_E_INVALID_ARG);
}

/* version 4: the current layout cut before the critic (version 5 appended it) */
static void test_trainer_options_v4(void **state)
{
    (void)state;
    volatile size_t n4 = offsetof(rlp_trainer_options, critic_path); /* volatile: the compiler must not know the
                                                                      * allocation is shorter than the type */
    rlp_trainer_options *old = malloc(n4); /* exactly a version-4 caller's struct: ASan sees any access past it */
    assert_int_equal(rlp_trainer_options_init(old, 4), RLP_OK);
    assert_int_equal(old->version, 4);
    assert_int_equal(old->rl.version, RLP_RL_OPTIONS_VERSION);
    old->max_gen_batches = 3;
    old->rl.advantage = RLP_ADV_RLOO;
    rlp_trainer_options o;
    assert_int_equal(rlpi_trainer_options_upgrade(&o, old), RLP_OK);
    assert_int_equal(o.version, RLP_TRAINER_OPTIONS_VERSION);
    assert_true(o.max_gen_batches == 3 && o.rl.advantage == RLP_ADV_RLOO);
    assert_true(o.critic_path == NULL && o.critic_lr == 0.0f && o.critic_warmup == 0);
    assert_true(o.value_clip == 0.5f && o.gae_lambda == 1.0f);
    free(old);
}

static void test_trainer_options_v5(void **state)
{
    (void)state;
    volatile size_t n5 = offsetof(rlp_trainer_options, remote_workers);
    rlp_trainer_options *old = malloc(n5); /* exactly a version-5 caller's struct */
    assert_int_equal(rlp_trainer_options_init(old, 5), RLP_OK);
    assert_int_equal(old->version, 5);
    old->critic_warmup = 4;
    old->gae_lambda = 0.25f;
    rlp_trainer_options o;
    assert_int_equal(rlpi_trainer_options_upgrade(&o, old), RLP_OK);
    assert_int_equal(o.version, RLP_TRAINER_OPTIONS_VERSION);
    assert_true(o.critic_warmup == 4 && o.gae_lambda == 0.25f);
    assert_int_equal(o.remote_workers, 0);
    free(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rl_options_v1),
        cmocka_unit_test(test_trainer_options_v1_to_v3),
        cmocka_unit_test(test_trainer_options_v4),
        cmocka_unit_test(test_trainer_options_v5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
