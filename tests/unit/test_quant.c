/* Dequantization: hand-computed blocks, exact fp16/bf16 conversion, and every
 * supported type against gguf-py's numpy dequantizer
 * (tests/reference/fixtures/quant_types.gguf, see make_gguf_fixtures.py).
 *
 * Tolerance: exact (bitwise) equality. Both sides compute each value with
 * the same one or two IEEE fp32 operations in the same order (d*q, d*q + m,
 * (d*sc)*q - dmin*m) from the same exactly-converted fp16 scales, and neither
 * contracts to FMA (quant.c forbids it), so any difference is a layout bug. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "test_support.h"

#include <math.h>
#include <string.h>

#ifdef __FLT16_MAX__
__extension__ typedef _Float16 native_f16;
#endif

static void half_and_bfloat_convert_exactly(void **state)
{
    (void)state;
    assert_true(rlpi_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(rlpi_fp16_to_fp32(0xc000) == -2.0f);
    assert_true(rlpi_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(rlpi_fp16_to_fp32(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    assert_true(rlpi_fp16_to_fp32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(rlpi_fp16_to_fp32(0x83ff) == -ldexpf(1023.0f, -24));
    assert_true(rlpi_fp16_to_fp32(0x3555) == 0.333251953125f);
    float negz = rlpi_fp16_to_fp32(0x8000);
    assert_true(negz == 0.0f && signbit(negz));
    assert_true(isinf(rlpi_fp16_to_fp32(0x7c00)) && rlpi_fp16_to_fp32(0x7c00) > 0);
    assert_true(isnan(rlpi_fp16_to_fp32(0x7e00)));
    assert_true(rlpi_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(rlpi_bf16_to_fp32(0xc0a0) == -5.0f);
    assert_true(rlpi_bf16_to_fp32(0x0001) == ldexpf(1.0f, -133));
}

/* All 65536 half floats against the compiler's own _Float16 conversion
 * (an independent implementation; skipped where the compiler has none).
 * Bitwise equal, except that NaNs need only stay NaN with their sign (the
 * hardware may quiet a signalling NaN). */
static void half_matches_native_for_every_bit_pattern(void **state)
{
    (void)state;
#ifdef __FLT16_MAX__
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        native_f16 nh;
        memcpy(&nh, &h, 2);
        float want = (float)nh, got = rlpi_fp16_to_fp32(h);
        if (isnan(want) ? !isnan(got) || signbit(got) != signbit(want) : memcmp(&got, &want, 4) != 0)
            fail_msg("fp16 0x%04x: got %a, native %a", b, (double)got, (double)want);
    }
#else
    skip();
#endif
}

/* One Q4_0 and one Q4_1 block worked by hand: d = 0.5 (0x3800), m = -1
 * (0xbc00); byte j holds element j in its low nibble, j+16 in its high. */
static void q4_blocks_by_hand(void **state)
{
    (void)state;
    uint8_t q40[18] = {0x00, 0x38};
    uint8_t q41[20] = {0x00, 0x38, 0x00, 0xbc};
    for (int j = 0; j < 16; j++)
        q40[2 + j] = q41[4 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q4_0, q40, sizeof q40, y, 32), RLP_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * (float)(j - 8));
        assert_true(y[j + 16] == 0.5f * (float)(7 - j));
    }
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q4_1, q41, sizeof q41, y, 32), RLP_OK);
    assert_true(y[0] == -1.0f && y[15] == 6.5f && y[16] == 6.5f && y[31] == -1.0f);
}

/* Q6_K: all 6-bit values 33 (ql nibble 1, qh bits 2) -> q = 1, scale i+1 per
 * 16 elements, d = 2: y = 2*(s)*1 with s the element's scale. */
static void q6_k_scale_layout(void **state)
{
    (void)state;
    uint8_t b[210];
    memset(b, 0x11, 128);      /* ql: both nibbles 1 */
    memset(b + 128, 0xaa, 64); /* qh: every 2-bit field = 2 -> +32 */
    for (int i = 0; i < 16; i++)
        b[192 + i] = (uint8_t)(int8_t)(i % 2 ? -(i + 1) : i + 1);
    b[208] = 0x00, b[209] = 0x40; /* d = 2 */
    float y[256];
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q6_K, b, sizeof b, y, 256), RLP_OK);
    for (int i = 0; i < 256; i++) {
        int s = i / 16 + 1;
        float want = 2.0f * (float)(s % 2 ? s : -s);
        if (y[i] != want)
            fail_msg("y[%d] = %g, want %g", i, (double)y[i], (double)want);
    }
}

static void wrong_geometry_and_types_are_refused(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    float y[64];
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q8_0, buf, 34, y, 31), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q8_0, buf, 33, y, 32), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q2_K, buf, 64, y, 64), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "Q2_K"));
    assert_int_equal(rlpi_dequantize(4, buf, 64, y, 64), RLP_E_UNSUPPORTED);
    assert_null(rlpi_ggml_type(4));
    assert_null(rlpi_ggml_type(1000));
    assert_int_equal(rlpi_ggml_type(RLPI_GGML_Q4_K)->type_size, 144);
    assert_int_equal(rlpi_ggml_type(RLPI_GGML_Q6_K)->blck, 256);
}

static void every_type_matches_gguf_py(void **state)
{
    (void)state;
    char path[1024];
    rlpi_gguf *g = NULL;
    int rc = rlpi_gguf_open(&g, source_path(path, sizeof path, "tests/reference/fixtures/quant_types.gguf"));
    if (rc)
        fail_msg("%s", rlp_error_last());
    static const char *const names[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "bf16"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char ename[64];
        snprintf(ename, sizeof ename, "%s.expected", names[k]);
        const rlpi_gguf_tensor *t = rlpi_gguf_find_tensor(g, names[k]), *e = rlpi_gguf_find_tensor(g, ename);
        assert_non_null(t);
        assert_non_null(e);
        assert_int_equal(e->type, RLPI_GGML_F32);
        assert_int_equal(t->n_elems, 1024);
        assert_int_equal(e->n_elems, t->n_elems);
        float got[1024], want[1024];
        assert_int_equal(rlpi_dequantize(t->type, t->data, t->nbytes, got, 1024), RLP_OK);
        memcpy(want, e->data, sizeof want);
        size_t nonzero = 0;
        for (size_t i = 0; i < 1024; i++) {
            if (memcmp(&got[i], &want[i], 4) != 0)
                fail_msg("%s[%zu] = %.9g, gguf-py %.9g", names[k], i, (double)got[i], (double)want[i]);
            nonzero += got[i] != 0;
        }
        /* the fixture is not degenerate: a decoder writing zeros would fail */
        assert_true(nonzero > 900);
    }
    rlpi_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_and_bfloat_convert_exactly),
        cmocka_unit_test(half_matches_native_for_every_bit_pattern),
        cmocka_unit_test(q4_blocks_by_hand),
        cmocka_unit_test(q6_k_scale_layout),
        cmocka_unit_test(wrong_geometry_and_types_are_refused),
        cmocka_unit_test(every_type_matches_gguf_py),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
