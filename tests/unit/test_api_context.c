/* The public context and backend API, through the shared object: every
 * function rejects NULL handles, NULL out-pointers and bad enum values with
 * RLP_E_INVALID_ARG and a message naming the argument, leaves its outputs
 * untouched on failure, and works on good input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define EXPECT_INVALID(call, needle)                                  \
    do {                                                              \
        rlp_error_clear();                                            \
        assert_int_equal((call), RLP_E_INVALID_ARG);                  \
        assert_int_equal(rlp_error_last_code(), RLP_E_INVALID_ARG);   \
        assert_non_null(strstr(rlp_error_last(), needle));            \
    } while (0)

static void version_functions(void **state)
{
    (void)state;
    assert_int_equal(rlp_version_number(), RLP_VERSION_NUMBER);
    assert_string_equal(rlp_version_string(), RLP_VERSION_STRING);
    assert_int_equal(rlp_abi_version(), RLP_ABI_VERSION);
}

static void options_init(void **state)
{
    (void)state;
    rlp_context_options o;
    memset(&o, 0xab, sizeof o);
    EXPECT_INVALID(rlp_context_options_init(NULL, RLP_CONTEXT_OPTIONS_VERSION), "opts");
    EXPECT_INVALID(rlp_context_options_init(&o, 0), "version");
    EXPECT_INVALID(rlp_context_options_init(&o, RLP_CONTEXT_OPTIONS_VERSION + 1), "version");
    assert_int_equal(rlp_context_options_init(&o, RLP_CONTEXT_OPTIONS_VERSION), RLP_OK);
    rlp_context_options init = RLP_CONTEXT_OPTIONS_INIT;
    assert_int_equal(o.version, init.version);
    assert_int_equal(o.device, 0);
    assert_int_equal(o.n_threads, 0);
    assert_true(o.seed == init.seed);
    assert_null(o.log_fn);
    assert_null(o.log_payload);
    assert_int_equal(o.backend, RLP_BACKEND_CPU);
    assert_int_equal(o.log_level, RLP_LOG_WARN);
    assert_int_equal(o.matmul_precision, RLP_MATMUL_FP32);
    /* a version-1 caller's struct ends before matmul_precision: init must
     * not write it */
    memset(&o, 0xab, sizeof o);
    assert_int_equal(rlp_context_options_init(&o, 1), RLP_OK);
    assert_int_equal(o.version, 1);
    assert_int_equal(o.log_level, RLP_LOG_WARN);
    int32_t untouched;
    memset(&untouched, 0xab, sizeof untouched);
    assert_int_equal(o.matmul_precision, untouched);
}

static void backend_queries(void **state)
{
    (void)state;
    int n = -5;
    assert_int_equal(rlp_backend_available(RLP_BACKEND_CPU), 1);
    EXPECT_INVALID(rlp_backend_available(-1), "-1");
    EXPECT_INVALID(rlp_backend_available(RLP_BACKEND_COUNT), "rlp_backend_kind");
    assert_string_equal(rlp_backend_name(RLP_BACKEND_CPU), "cpu");
    assert_string_equal(rlp_backend_name(RLP_BACKEND_CUDA), "cuda");
    rlp_error_clear();
    assert_null(rlp_backend_name(7));
    assert_int_equal(rlp_error_last_code(), RLP_E_INVALID_ARG);
    EXPECT_INVALID(rlp_backend_device_count(NULL, RLP_BACKEND_CPU), "out_count");
    EXPECT_INVALID(rlp_backend_device_count(&n, 9), "kind");
    assert_int_equal(n, -5);
    assert_int_equal(rlp_backend_device_count(&n, RLP_BACKEND_CPU), RLP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rlp_backend_device_count(&n, RLP_BACKEND_CUDA), RLP_OK);
    assert_true(n >= 0);
    assert_int_equal(rlp_backend_available(RLP_BACKEND_CUDA), n > 0);
}

static void create_rejects_bad_options(void **state)
{
    (void)state;
    rlp_context *ctx = (rlp_context *)(uintptr_t)0x1;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    EXPECT_INVALID(rlp_context_create(NULL, &o), "out");
    o.version = 0;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "version");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.backend = 42;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->backend");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.backend = -1;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->backend");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.device = 1;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->device");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = -3;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->n_threads");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.log_level = 17;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->log_level");
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.matmul_precision = RLP_MATMUL_AUTO + 1;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->matmul_precision");
    o.matmul_precision = -1;
    EXPECT_INVALID(rlp_context_create(&ctx, &o), "options->matmul_precision");
    assert_ptr_equal(ctx, (rlp_context *)(uintptr_t)0x1); /* untouched on failure */
}

typedef struct log_capture {
    pthread_mutex_t mu;
    int n;
    int last_level;
    char last[256];
} log_capture;

static void capture_log(int level, const char *message, void *payload)
{
    log_capture *lc = payload;
    pthread_mutex_lock(&lc->mu);
    lc->n++;
    if (level == RLP_LOG_INFO) { /* keep the creation message (a BLAS warning may follow it) */
        lc->last_level = level;
        snprintf(lc->last, sizeof lc->last, "%s", message);
    }
    pthread_mutex_unlock(&lc->mu);
}

static void cpu_context_lifecycle(void **state)
{
    (void)state;
    log_capture lc = {.mu = PTHREAD_MUTEX_INITIALIZER};
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 2;
    o.seed = 77;
    o.log_fn = capture_log;
    o.log_payload = &lc;
    o.log_level = RLP_LOG_DEBUG;
    rlp_context *ctx = NULL;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_OK);
    assert_non_null(ctx);
    assert_true(lc.n >= 1); /* the creation message */
    assert_int_equal(lc.last_level, RLP_LOG_INFO);
    assert_non_null(strstr(lc.last, "cpu: 2 threads"));

    int kind = -1, threads = -1;
    uint64_t seed = 0;
    assert_int_equal(rlp_context_backend(&kind, ctx), RLP_OK);
    assert_int_equal(kind, RLP_BACKEND_CPU);
    assert_int_equal(rlp_context_n_threads(&threads, ctx), RLP_OK);
    assert_int_equal(threads, 2);
    assert_int_equal(rlp_context_seed(&seed, ctx), RLP_OK);
    assert_true(seed == 77);
    assert_non_null(strstr(rlp_context_device_name(ctx), "OpenBLAS"));

    EXPECT_INVALID(rlp_context_backend(NULL, ctx), "out_kind");
    EXPECT_INVALID(rlp_context_backend(&kind, NULL), "ctx");
    EXPECT_INVALID(rlp_context_n_threads(NULL, ctx), "out_threads");
    EXPECT_INVALID(rlp_context_n_threads(&threads, NULL), "ctx");
    EXPECT_INVALID(rlp_context_seed(NULL, ctx), "out_seed");
    EXPECT_INVALID(rlp_context_seed(&seed, NULL), "ctx");
    EXPECT_INVALID(rlp_context_set_log_level(NULL, RLP_LOG_INFO), "ctx");
    EXPECT_INVALID(rlp_context_set_log_level(ctx, 99), "level");
    EXPECT_INVALID(rlp_context_set_log_level(ctx, -1), "level");
    rlp_error_clear();
    assert_null(rlp_context_device_name(NULL));
    assert_int_equal(rlp_error_last_code(), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_context_set_log_level(ctx, RLP_LOG_NONE), RLP_OK);
    rlp_context_free(ctx);
    rlp_context_free(NULL); /* no-op */

    /* matmul precision: bf16 is named in the device description; TF32 on
     * the CPU runs as fp32 (and is not named); a version-1 struct ignores
     * the field, whatever it holds */
    int mm = -1;
    o = (rlp_context_options)RLP_CONTEXT_OPTIONS_INIT;
    o.matmul_precision = RLP_MATMUL_BF16;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_OK);
    assert_non_null(strstr(rlp_context_device_name(ctx), ", bf16 GEMMs"));
    /* whether this CPU runs bf16 on its own instructions (the AUTO rule) */
    int bf16_native = strstr(rlp_context_device_name(ctx), "bf16 GEMMs (oneDNN)") != NULL;
    assert_int_equal(rlp_context_matmul_precision(&mm, ctx), RLP_OK);
    assert_int_equal(mm, RLP_MATMUL_BF16);
    EXPECT_INVALID(rlp_context_matmul_precision(NULL, ctx), "out_precision");
    EXPECT_INVALID(rlp_context_matmul_precision(&mm, NULL), "ctx");
    rlp_context_free(ctx);
    o.matmul_precision = RLP_MATMUL_TF32;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_OK);
    assert_null(strstr(rlp_context_device_name(ctx), "GEMMs"));
    assert_int_equal(rlp_context_matmul_precision(&mm, ctx), RLP_OK);
    assert_int_equal(mm, RLP_MATMUL_FP32);
    rlp_context_free(ctx);
    /* AUTO: bf16 exactly where bf16 runs natively, else fp32; never reads
     * back as AUTO */
    o.matmul_precision = RLP_MATMUL_AUTO;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_OK);
    assert_int_equal(rlp_context_matmul_precision(&mm, ctx), RLP_OK);
    assert_int_equal(mm, bf16_native ? RLP_MATMUL_BF16 : RLP_MATMUL_FP32);
    assert_true((strstr(rlp_context_device_name(ctx), "bf16 GEMMs (oneDNN)") != NULL) == bf16_native);
    assert_null(strstr(rlp_context_device_name(ctx), "(emulated)"));
    rlp_context_free(ctx);
    assert_int_equal(rlp_context_create(&ctx, NULL), RLP_OK);
    assert_int_equal(rlp_context_matmul_precision(&mm, ctx), RLP_OK);
    assert_int_equal(mm, RLP_MATMUL_FP32);
    rlp_context_free(ctx);
    o.version = 1;
    o.matmul_precision = 99;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_OK);
    assert_null(strstr(rlp_context_device_name(ctx), "GEMMs"));
    rlp_context_free(ctx);

    /* defaults: n_threads 0 resolves to the core count */
    assert_int_equal(rlp_context_create(&ctx, NULL), RLP_OK);
    assert_int_equal(rlp_context_n_threads(&threads, ctx), RLP_OK);
    assert_true(threads >= 1);
    rlp_context_free(ctx);
}

static void cuda_request_without_gpu_is_an_error(void **state)
{
    (void)state;
    if (rlp_backend_available(RLP_BACKEND_CUDA) == 1)
        skip();
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.backend = RLP_BACKEND_CUDA;
    rlp_context *ctx = NULL;
    assert_int_equal(rlp_context_create(&ctx, &o), RLP_E_BACKEND);
    assert_null(ctx);
    assert_non_null(strstr(rlp_error_last(), "cuda"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_functions),
        cmocka_unit_test(options_init),
        cmocka_unit_test(backend_queries),
        cmocka_unit_test(create_rejects_bad_options),
        cmocka_unit_test(cpu_context_lifecycle),
        cmocka_unit_test(cuda_request_without_gpu_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
