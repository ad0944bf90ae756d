/* GGUF reader: a valid file's metadata and tensors read back exactly, and a
 * corpus of broken files (public-bugs.md case #4 among them) each fail with
 * RLP_E_FORMAT and a message naming the fault. Run under ASan/UBSan too:
 * nothing here may read outside a buffer or allocate more than the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "gguf_builder.h"
#include "model/gguf.h"
#include "model/quant.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- allocation accounting (linked with -Wl,--wrap=malloc,calloc,realloc) -- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static size_t max_alloc; /* largest single request since the last reset */

static void note_alloc(size_t n)
{
    if (n > max_alloc)
        max_alloc = n;
}
void *__wrap_malloc(size_t n)
{
    note_alloc(n);
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m)
{
    size_t t;
    note_alloc(__builtin_mul_overflow(n, m, &t) ? SIZE_MAX : t);
    return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n)
{
    note_alloc(n);
    return __real_realloc(p, n);
}

/* ---- the valid file every broken one departs from ------------------------ */

/* v3, alignment 32, keys: general.architecture, general.alignment, one of
 * each scalar type, an int32 array and a string array; tensors a (F32 [64],
 * offset 0) and b (Q8_0 [32, 2], offset 256) ending exactly at EOF. */
static void build_valid(gb *b)
{
    gb_header(b, 3, 2, 15);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "general.alignment", 32);
    gb_str(b, "t.u8"), gb_u32(b, 0), gb_bytes(b, "\xfe", 1);
    gb_str(b, "t.i8"), gb_u32(b, 1), gb_bytes(b, "\xfe", 1);
    gb_str(b, "t.u16"), gb_u32(b, 2), gb_bytes(b, "\x34\x12", 2);
    gb_str(b, "t.i16"), gb_u32(b, 3), gb_bytes(b, "\xfe\xff", 2);
    gb_str(b, "t.i32"), gb_u32(b, 5), gb_u32(b, (uint32_t)-7);
    float f = 0.625f;
    gb_str(b, "t.f32"), gb_u32(b, 6), gb_bytes(b, &f, 4);
    gb_str(b, "t.bool"), gb_u32(b, 7), gb_bytes(b, "\x01", 1);
    gb_str(b, "t.u64"), gb_u32(b, 10), gb_u64(b, UINT64_C(5000000000));
    gb_str(b, "t.i64"), gb_u32(b, 11), gb_u64(b, (uint64_t)INT64_C(-3));
    double d = -1.5;
    gb_str(b, "t.f64"), gb_u32(b, 12), gb_bytes(b, &d, 8);
    gb_str(b, "t.arr_i32"), gb_u32(b, 9), gb_u32(b, 5), gb_u64(b, 3);
    gb_u32(b, 1), gb_u32(b, (uint32_t)-2), gb_u32(b, 3);
    gb_str(b, "t.arr_str"), gb_u32(b, 9), gb_u32(b, 8), gb_u64(b, 3);
    gb_str(b, "Ġhello"), gb_str(b, ""), gb_str(b, "é");
    gb_str(b, "t.arr_f64"), gb_u32(b, 9), gb_u32(b, 12), gb_u64(b, 2);
    d = 0.25, gb_bytes(b, &d, 8), d = -8, gb_bytes(b, &d, 8);
    uint64_t ne_a[1] = {64}, ne_b[2] = {32, 2};
    gb_tensor(b, "a", 1, ne_a, RLPI_GGML_F32, 0);
    gb_tensor(b, "b", 2, ne_b, RLPI_GGML_Q8_0, 256);
    gb_pad(b, 32);
    for (int i = 0; i < 64; i++) {
        float v = (float)i - 0.5f;
        gb_bytes(b, &v, 4);
    }
    /* two Q8_0 blocks: d = 0.5 (fp16 0x3800), q = i - 16 */
    for (int blk = 0; blk < 2; blk++) {
        gb_bytes(b, "\x00\x38", 2);
        for (int i = 0; i < 32; i++) {
            int8_t q = (int8_t)(i - 16 + blk);
            gb_bytes(b, &q, 1);
        }
    }
}

static void valid_file_reads_back(void **state)
{
    (void)state;
    gb b = {0};
    build_valid(&b);
    rlpi_gguf *g = NULL;
    assert_int_equal(rlpi_gguf_open_memory(&g, b.p, b.n, "valid.gguf"), RLP_OK);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 32);
    assert_int_equal(g->n_kv, 15);
    rlpi_gguf_str s;
    assert_int_equal(rlpi_gguf_get_str(g, "general.architecture", &s), RLP_OK);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "llama", 5);

    uint32_t u;
    int32_t i;
    uint64_t u64;
    float f;
    bool bo;
    assert_int_equal(rlpi_gguf_get_u32(g, "t.u8", &u), RLP_OK);
    assert_int_equal(u, 254);
    assert_int_equal(rlpi_gguf_get_i32(g, "t.i8", &i), RLP_OK);
    assert_int_equal(i, -2);
    assert_int_equal(rlpi_gguf_get_u32(g, "t.u16", &u), RLP_OK);
    assert_int_equal(u, 0x1234);
    assert_int_equal(rlpi_gguf_get_i32(g, "t.i16", &i), RLP_OK);
    assert_int_equal(i, -2);
    assert_int_equal(rlpi_gguf_get_i32(g, "t.i32", &i), RLP_OK);
    assert_int_equal(i, -7);
    /* a negative value is not a u32, a u64 beyond 2^32 not an i32/u32 */
    assert_int_equal(rlpi_gguf_get_u32(g, "t.i32", &u), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "t.i32"));
    assert_int_equal(rlpi_gguf_get_u32(g, "t.u64", &u), RLP_E_FORMAT);
    assert_int_equal(rlpi_gguf_get_u64(g, "t.u64", &u64), RLP_OK);
    assert_true(u64 == UINT64_C(5000000000));
    assert_int_equal(rlpi_gguf_get_i32(g, "t.i64", &i), RLP_OK);
    assert_int_equal(i, -3);
    assert_int_equal(rlpi_gguf_get_f32(g, "t.f32", &f), RLP_OK);
    assert_true(f == 0.625f);
    assert_int_equal(rlpi_gguf_get_f32(g, "t.f64", &f), RLP_OK);
    assert_true(f == -1.5f);
    assert_int_equal(rlpi_gguf_get_f32(g, "t.i32", &f), RLP_E_FORMAT);
    assert_int_equal(rlpi_gguf_get_bool(g, "t.bool", &bo), RLP_OK);
    assert_true(bo);
    assert_int_equal(rlpi_gguf_get_u32(g, "no.such.key", &u), RLP_E_NOT_FOUND);
    assert_non_null(strstr(rlp_error_last(), "no.such.key"));

    int32_t *ia;
    uint64_t n;
    assert_int_equal(rlpi_gguf_get_i32_array(g, "t.arr_i32", &ia, &n), RLP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ia[0], 1);
    assert_int_equal(ia[1], -2);
    assert_int_equal(ia[2], 3);
    free(ia);
    rlpi_gguf_str *sa;
    assert_int_equal(rlpi_gguf_get_str_array(g, "t.arr_str", &sa, &n), RLP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(sa[0].len, strlen("Ġhello"));
    assert_memory_equal(sa[0].ptr, "Ġhello", sa[0].len);
    assert_int_equal(sa[1].len, 0);
    assert_int_equal(sa[2].len, 2);
    assert_memory_equal(sa[2].ptr, "é", 2);
    free(sa);
    float *fa;
    assert_int_equal(rlpi_gguf_get_f32_array(g, "t.arr_f64", &fa, &n), RLP_OK);
    assert_int_equal(n, 2);
    assert_true(fa[0] == 0.25f && fa[1] == -8.0f);
    free(fa);
    assert_int_equal(rlpi_gguf_get_f32_array(g, "t.arr_str", &fa, &n), RLP_E_FORMAT);
    assert_int_equal(rlpi_gguf_get_str_array(g, "t.u8", &sa, &n), RLP_E_FORMAT);

    assert_int_equal(g->n_tensors, 2);
    const rlpi_gguf_tensor *a = rlpi_gguf_tensor_at(g, 0), *tb = rlpi_gguf_find_tensor(g, "b");
    assert_string_equal(a->name, "a");
    assert_ptr_equal(rlpi_gguf_find_tensor(g, "a"), a);
    assert_null(rlpi_gguf_find_tensor(g, "c"));
    assert_null(rlpi_gguf_tensor_at(g, 2));
    assert_int_equal(a->nbytes, 256);
    assert_int_equal(tb->nbytes, 68);
    assert_int_equal(tb->n_elems, 64);
    assert_int_equal(tb->ne[1], 2);
    assert_int_equal(tb->ne[2], 1);
    /* the data section starts at the first 32-byte boundary after the infos */
    assert_int_equal(g->data_offset % 32, 0);
    assert_int_equal(g->data_offset + 256 + 68, b.n);
    float out[64];
    assert_int_equal(rlpi_dequantize(a->type, a->data, a->nbytes, out, 64), RLP_OK);
    assert_true(out[0] == -0.5f && out[63] == 62.5f);
    assert_int_equal(rlpi_dequantize(tb->type, tb->data, tb->nbytes, out, 64), RLP_OK);
    assert_true(out[0] == -8.0f && out[31] == 7.5f && out[32] == -7.5f && out[63] == 8.0f);
    rlpi_gguf_close(g);
    gb_free(&b);
}

/* Every strict prefix of the valid file is rejected (never read past). */
static void every_truncation_is_rejected(void **state)
{
    (void)state;
    gb b = {0};
    build_valid(&b);
    for (size_t len = 0; len < b.n; len++) {
        /* a fresh allocation of exactly `len` bytes, so ASan sees any overread */
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, b.p, len);
        rlpi_gguf *g = NULL;
        int rc = rlpi_gguf_open_memory(&g, copy, len, "prefix");
        if (rc != RLP_E_FORMAT)
            fail_msg("prefix of %zu bytes: rc %d (%s)", len, rc, rlp_error_last());
        assert_null(g);
        free(copy);
    }
    gb_free(&b);
}

/* ---- the broken-file corpus ---------------------------------------------- */

typedef void (*build_fn)(gb *);

/* header + one key/value (given as raw bytes by the callback) */
static void kv_file(gb *b, void (*kv)(gb *))
{
    gb_header(b, 3, 0, 1);
    kv(b);
}

static void bad_magic(gb *b) { build_valid(b), memcpy(b->p, "GGUX", 4); }
static void truncated_header(gb *b) { gb_bytes(b, "GGUF\x03\x00\x00\x00\x01\x00", 10); }
static void unknown_version(gb *b) { gb_header(b, 7, 0, 0); }
static void absurd_n_tensors(gb *b) { gb_header(b, 3, UINT64_C(1) << 63, 0), gb_fill(b, 64, 1); }
static void absurd_n_kv(gb *b) { gb_header(b, 3, 0, UINT64_C(1) << 63), gb_fill(b, 64, 1); }
static void key_len_huge_kv(gb *b) { gb_str_len(b, "general.name", UINT64_C(1) << 63), gb_u32(b, 4), gb_u32(b, 1); }
static void key_len_huge(gb *b) { kv_file(b, key_len_huge_kv); }
static void str_len_huge_kv(gb *b) { gb_str(b, "general.name"), gb_u32(b, 8), gb_str_len(b, "x", UINT64_C(1) << 63); }
static void str_len_huge(gb *b) { kv_file(b, str_len_huge_kv); }
static void arr_len_huge_kv(gb *b)
{
    gb_str(b, "tokenizer.ggml.tokens"), gb_u32(b, 9), gb_u32(b, 8), gb_u64(b, UINT64_C(1) << 63);
    gb_str(b, "a");
}
static void arr_len_huge(gb *b) { kv_file(b, arr_len_huge_kv); }
static void arr_u32_len_huge_kv(gb *b)
{
    gb_str(b, "tokenizer.ggml.token_type"), gb_u32(b, 9), gb_u32(b, 5), gb_u64(b, (UINT64_C(1) << 62) + 1);
    gb_u32(b, 1);
}
static void arr_u32_len_huge(gb *b) { kv_file(b, arr_u32_len_huge_kv); }
static void nested_array_kv(gb *b) { gb_str(b, "x"), gb_u32(b, 9), gb_u32(b, 9), gb_u64(b, 1), gb_u32(b, 4), gb_u64(b, 0); }
static void nested_array(gb *b) { kv_file(b, nested_array_kv); }
static void unknown_vtype_kv(gb *b) { gb_str(b, "x"), gb_u32(b, 13), gb_u64(b, 0); }
static void unknown_vtype(gb *b) { kv_file(b, unknown_vtype_kv); }
static void unknown_elem_kv(gb *b) { gb_str(b, "x"), gb_u32(b, 9), gb_u32(b, 99), gb_u64(b, 1), gb_u64(b, 0); }
static void unknown_elem(gb *b) { kv_file(b, unknown_elem_kv); }
static void bad_utf8_key_kv(gb *b) { gb_str(b, "general.\xff"), gb_u32(b, 4), gb_u32(b, 1); }
static void bad_utf8_key(gb *b) { kv_file(b, bad_utf8_key_kv); }
static void overlong_utf8_key_kv(gb *b) { gb_str(b, "a\xc0\xaf"), gb_u32(b, 4), gb_u32(b, 1); }
static void overlong_utf8_key(gb *b) { kv_file(b, overlong_utf8_key_kv); }
static void nul_in_key_kv(gb *b) { gb_u64(b, 3), gb_bytes(b, "a\0b", 3), gb_u32(b, 4), gb_u32(b, 1); }
static void nul_in_key(gb *b) { kv_file(b, nul_in_key_kv); }
static void empty_key_kv(gb *b) { gb_str(b, ""), gb_u32(b, 4), gb_u32(b, 1); }
static void empty_key(gb *b) { kv_file(b, empty_key_kv); }
static void bad_bool_kv(gb *b) { gb_str(b, "x"), gb_u32(b, 7), gb_bytes(b, "\x02", 1); }
static void bad_bool(gb *b) { kv_file(b, bad_bool_kv); }
static void alignment0_kv(gb *b) { gb_kv_u32(b, "general.alignment", 0); }
static void alignment_zero(gb *b) { kv_file(b, alignment0_kv), gb_fill(b, 32, 0); }
static void alignment3_kv(gb *b) { gb_kv_u32(b, "general.alignment", 3); }
static void alignment_not_pow2(gb *b) { kv_file(b, alignment3_kv); }
static void alignment_str_kv(gb *b) { gb_kv_str(b, "general.alignment", "32"); }
static void alignment_wrong_type(gb *b) { kv_file(b, alignment_str_kv); }
static void duplicate_key(gb *b)
{
    gb_header(b, 3, 0, 2);
    gb_kv_u32(b, "llama.block_count", 1);
    gb_kv_u32(b, "llama.block_count", 2);
}

/* header + one or two F32 tensors with the given geometry, data of `data` bytes */
static void tensors_file(gb *b, uint32_t n, const char *n1, uint32_t t1, uint64_t ne1, uint64_t off1, const char *n2,
                         uint32_t t2, uint64_t ne2, uint64_t off2, size_t data)
{
    gb_header(b, 3, n, 0);
    gb_tensor(b, n1, 1, &ne1, t1, off1);
    if (n > 1)
        gb_tensor(b, n2, 1, &ne2, t2, off2);
    gb_pad(b, 32);
    gb_fill(b, data, 3);
}
static void offset_past_end(gb *b) { tensors_file(b, 2, "a", 0, 64, 0, "b", 0, 8, UINT64_C(1) << 40, 288); }
static void tensor_exceeds_end(gb *b) { tensors_file(b, 1, "w", 0, 1000, 0, NULL, 0, 0, 0, 256); }
static void overlapping(gb *b) { tensors_file(b, 2, "a", 0, 64, 0, "b", 0, 8, 224, 288); }
static void misaligned_offset(gb *b) { tensors_file(b, 2, "a", 0, 64, 0, "b", 0, 8, 260, 320); }
static void unknown_tensor_type(gb *b) { tensors_file(b, 1, "w", 4, 32, 0, NULL, 0, 0, 0, 256); }
static void block_size_mismatch(gb *b) { tensors_file(b, 1, "w", RLPI_GGML_Q4_0, 33, 0, NULL, 0, 0, 0, 256); }
static void duplicate_tensor(gb *b) { tensors_file(b, 2, "w", 0, 8, 0, "w", 0, 8, 32, 64); }
static void bad_utf8_tensor(gb *b) { tensors_file(b, 1, "blk.\xe2\x28", 0, 8, 0, NULL, 0, 0, 0, 32); }
static void too_many_dims(gb *b)
{
    uint64_t ne[5] = {1, 1, 1, 1, 1};
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", 5, ne, 0, 0);
    gb_pad(b, 32);
    gb_fill(b, 32, 0);
}
static void negative_dim(gb *b)
{
    uint64_t ne[2] = {UINT64_MAX, 1};
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", 2, ne, 0, 0);
    gb_pad(b, 32);
    gb_fill(b, 32, 0);
}
static void elem_count_overflow(gb *b)
{
    uint64_t ne[4] = {UINT64_C(1) << 32, UINT64_C(1) << 32, 2, 1};
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", 4, ne, 0, 0);
    gb_pad(b, 32);
    gb_fill(b, 32, 0);
}
/* public-bugs.md case #4, byte for byte as the upstream regression file */
static void case4_size_wraps_after_padding(gb *b)
{
    gb_header(b, 3, 2, 1);
    gb_kv_u32(b, "general.alignment", 32);
    uint64_t ne_a[1] = {64}, ne_b[4] = {4, 1073741823, 1073741825, 1};
    gb_tensor(b, "a", 1, ne_a, RLPI_GGML_F32, 0);
    gb_tensor(b, "b", 4, ne_b, RLPI_GGML_F32, 256);
    gb_pad(b, 32);
    gb_fill(b, 256, 9);
}
static void data_section_past_end(gb *b)
{
    gb_header(b, 3, 1, 0);
    uint64_t ne = 0;
    gb_tensor(b, "w", 1, &ne, 0, 0);
    /* infos end unaligned and the file stops there: the data section would
     * start past EOF */
}

static const struct corpus_case {
    const char *name;
    build_fn build;
    int rc;
    const char *msg; /* must occur in rlp_error_last() */
} corpus[] = {
    {"bad_magic", bad_magic, RLP_E_FORMAT, "bad magic"},
    {"truncated_header", truncated_header, RLP_E_FORMAT, "truncated"},
    {"unknown_version", unknown_version, RLP_E_FORMAT, "version 7"},
    {"absurd_n_tensors", absurd_n_tensors, RLP_E_FORMAT, "9223372036854775808 tensors"},
    {"absurd_n_kv", absurd_n_kv, RLP_E_FORMAT, "9223372036854775808 metadata keys"},
    {"key_len_2p63", key_len_huge, RLP_E_FORMAT, "length 9223372036854775808"},
    {"str_len_2p63", str_len_huge, RLP_E_FORMAT, "general.name"},
    {"arr_len_2p63", arr_len_huge, RLP_E_FORMAT, "'tokenizer.ggml.tokens': array of 9223372036854775808"},
    {"arr_u32_len_2p62", arr_u32_len_huge, RLP_E_FORMAT, "tokenizer.ggml.token_type"},
    {"nested_array", nested_array, RLP_E_FORMAT, "nested"},
    {"unknown_value_type", unknown_vtype, RLP_E_FORMAT, "unknown value type 13"},
    {"unknown_array_elem", unknown_elem, RLP_E_FORMAT, "unknown array element type 99"},
    {"bad_utf8_key", bad_utf8_key, RLP_E_FORMAT, "UTF-8"},
    {"overlong_utf8_key", overlong_utf8_key, RLP_E_FORMAT, "UTF-8"},
    {"nul_in_key", nul_in_key, RLP_E_FORMAT, "UTF-8"},
    {"empty_key", empty_key, RLP_E_FORMAT, "length 0"},
    {"bad_bool", bad_bool, RLP_E_FORMAT, "bool value 2"},
    {"alignment_zero", alignment_zero, RLP_E_FORMAT, "alignment 0 is not"},
    {"alignment_not_pow2", alignment_not_pow2, RLP_E_FORMAT, "alignment 3 is not"},
    {"alignment_wrong_type", alignment_wrong_type, RLP_E_FORMAT, "general.alignment has type string"},
    {"duplicate_key", duplicate_key, RLP_E_FORMAT, "duplicate key 'llama.block_count'"},
    {"offset_past_end", offset_past_end, RLP_E_FORMAT, "tensor 'b': bytes [1099511627776"},
    {"tensor_exceeds_end", tensor_exceeds_end, RLP_E_FORMAT, "tensor 'w': bytes [0, 4000) exceed"},
    {"overlapping", overlapping, RLP_E_FORMAT, "'a' [0, 256) and 'b' [224, 256) overlap"},
    {"misaligned_offset", misaligned_offset, RLP_E_FORMAT, "tensor 'b': offset 260"},
    {"unknown_tensor_type", unknown_tensor_type, RLP_E_FORMAT, "'w' has unknown type id 4"},
    {"block_size_mismatch", block_size_mismatch, RLP_E_FORMAT, "'w': row length 33 is not a multiple"},
    {"duplicate_tensor", duplicate_tensor, RLP_E_FORMAT, "duplicate tensor 'w'"},
    {"bad_utf8_tensor", bad_utf8_tensor, RLP_E_FORMAT, "tensor 0 name at offset 24 is not valid UTF-8"},
    {"too_many_dims", too_many_dims, RLP_E_FORMAT, "'w' has 5 dims"},
    {"negative_dim", negative_dim, RLP_E_FORMAT, "'w': dim 0"},
    {"elem_count_overflow", elem_count_overflow, RLP_E_FORMAT, "'w': element count overflows"},
    {"case4_size_wraps", case4_size_wraps_after_padding, RLP_E_FORMAT, "tensor 'b'"},
    {"data_section_past_end", data_section_past_end, RLP_E_FORMAT, "data section"},
};

static void broken_files_fail_with_named_fault(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        gb b = {0};
        corpus[i].build(&b);
        /* exact-size copy: an overread is an ASan error, not luck */
        uint8_t *copy = malloc(b.n ? b.n : 1);
        memcpy(copy, b.p, b.n);
        rlpi_gguf *g = NULL;
        rlp_error_clear();
        int rc = rlpi_gguf_open_memory(&g, copy, b.n, corpus[i].name);
        if (rc != corpus[i].rc || !strstr(rlp_error_last(), corpus[i].msg))
            fail_msg("%s: rc %d, message \"%s\"; want rc %d and \"%s\"", corpus[i].name, rc, rlp_error_last(),
                     corpus[i].rc, corpus[i].msg);
        assert_null(g);
        free(copy);
        gb_free(&b);
    }
}

/* What a hostile file can make the reader allocate is bounded by its size:
 * every count is checked against the bytes left before the arrays sized by
 * it are allocated, and per-entry structs are < 3x the smallest encoding.
 * Checked on the whole corpus and on files whose counts are the largest
 * that pass the bound (the reader then allocates, and fails later). */
static void allocations_are_bounded_by_file_size(void **state)
{
    (void)state;
    const size_t bound_factor = 3, slack = 1024;
    gb files[sizeof corpus / sizeof corpus[0] + 3];
    size_t nf = 0;
    memset(files, 0, sizeof files);
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++)
        corpus[i].build(&files[nf++]);
    build_valid(&files[nf++]);
    /* 64 KiB after the header, claiming as many keys / tensors as could fit */
    gb *k = &files[nf++], *t = &files[nf++];
    gb_header(k, 3, 0, 65536 / 14), gb_fill(k, 65536, 5);
    gb_header(t, 3, 65536 / 33, 0), gb_fill(t, 65536, 5);
    for (size_t i = 0; i < nf; i++) {
        uint8_t *copy = malloc(files[i].n ? files[i].n : 1);
        memcpy(copy, files[i].p, files[i].n);
        max_alloc = 0;
        rlpi_gguf *g = NULL;
        int rc = rlpi_gguf_open_memory(&g, copy, files[i].n, "bounded");
        if (max_alloc > bound_factor * files[i].n + slack)
            fail_msg("file %zu (%zu bytes, rc %d): allocated %zu bytes at once", i, files[i].n, rc, max_alloc);
        if (i >= nf - 2 && max_alloc < files[i].n) /* the bound is really exercised */
            fail_msg("file %zu: largest allocation only %zu bytes", i, max_alloc);
        rlpi_gguf_close(g);
        free(copy);
        gb_free(&files[i]);
    }
}

/* Case #4 in detail: the size is exactly 2^64-16 (no multiplication
 * overflows), so only the offset/padding checks can catch it. */
static void case4_names_tensor_b(void **state)
{
    (void)state;
    gb b = {0};
    case4_size_wraps_after_padding(&b);
    rlpi_gguf *g = NULL;
    assert_int_equal(rlpi_gguf_open_memory(&g, b.p, b.n, "case4.gguf"), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "case4.gguf: tensor 'b': offset 256 + 18446744073709551600 bytes overflows"));
    gb_free(&b);
}

static void version1_and_big_endian_are_unsupported(void **state)
{
    (void)state;
    gb b = {0};
    rlpi_gguf *g = NULL;
    gb_header(&b, 1, 0, 0);
    assert_int_equal(rlpi_gguf_open_memory(&g, b.p, b.n, "v1"), RLP_E_UNSUPPORTED);
    gb_free(&b);
    gb_header(&b, 0x03000000u, 0, 0);
    assert_int_equal(rlpi_gguf_open_memory(&g, b.p, b.n, "be"), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "big-endian"));
    gb_free(&b);
    /* v2 has the same layout as v3 */
    gb_header(&b, 2, 0, 1);
    gb_kv_u32(&b, "k", 9);
    assert_int_equal(rlpi_gguf_open_memory(&g, b.p, b.n, "v2"), RLP_OK);
    uint32_t u;
    assert_int_equal(rlpi_gguf_get_u32(g, "k", &u), RLP_OK);
    assert_int_equal(u, 9);
    rlpi_gguf_close(g);
    gb_free(&b);
}

static void open_reports_io_and_maps_files(void **state)
{
    (void)state;
    rlpi_gguf *g = NULL;
    assert_int_equal(rlpi_gguf_open(&g, "/nonexistent/dir/model.gguf"), RLP_E_IO);
    assert_non_null(strstr(rlp_error_last(), "/nonexistent/dir/model.gguf"));
    assert_int_equal(rlpi_gguf_open(&g, "/"), RLP_E_IO);

    char path[] = "/tmp/rlpost_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    gb b = {0};
    build_valid(&b);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    assert_int_equal(rlpi_gguf_open(&g, path), RLP_OK);
    assert_int_equal(g->n_tensors, 2);
    assert_ptr_not_equal(g->map, NULL);
    rlpi_gguf_close(g);
    /* an empty file is a format error, not a failed mmap */
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(rlpi_gguf_open(&g, path), RLP_E_FORMAT);
    close(fd);
    unlink(path);
    gb_free(&b);
    rlpi_gguf_close(NULL);
}

/* RLPOST_WRITE_GGUF_SEEDS=<dir>: write the corpus as fuzz seeds and exit. */
static int write_seeds(const char *dir)
{
    for (size_t i = 0; i <= sizeof corpus / sizeof corpus[0]; i++) {
        gb b = {0};
        char path[512];
        if (i < sizeof corpus / sizeof corpus[0]) {
            corpus[i].build(&b);
            snprintf(path, sizeof path, "%s/%s.gguf", dir, corpus[i].name);
        } else {
            build_valid(&b);
            snprintf(path, sizeof path, "%s/valid.gguf", dir);
        }
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        gb_free(&b);
    }
    return 0;
}

int main(void)
{
    const char *seeds = getenv("RLPOST_WRITE_GGUF_SEEDS");
    if (seeds)
        return write_seeds(seeds);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_file_reads_back),
        cmocka_unit_test(every_truncation_is_rejected),
        cmocka_unit_test(broken_files_fail_with_named_fault),
        cmocka_unit_test(case4_names_tensor_b),
        cmocka_unit_test(allocations_are_bounded_by_file_size),
        cmocka_unit_test(version1_and_big_endian_are_unsupported),
        cmocka_unit_test(open_reports_io_and_maps_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
