/* safetensors reader/writer: exact round trips in F32/F16/BF16, layout
 * rules of the format (8-byte padding with spaces, __metadata__, exact
 * tiling), atomic replacement, sharded indexes, fixtures written by the
 * reference `safetensors` package, and a corpus of broken headers that must
 * fail with RLP_E_FORMAT and a message naming the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "core/half.h"
#include "model/safetensors.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rlpost_st_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(tmpdir);
    return 0;
}

static char *tpath(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static uint32_t bits(float f)
{
    return rlpi_f32_to_bits(f);
}

/* Values a careless converter gets wrong: signed zero, subnormals, inf,
 * NaN, round-to-even ties in both half formats, F16 overflow. */
static const float SPECIAL[] = {0.0f, -0.0f, 1.0f, -2.5f, 1.0f / 3.0f, 1e-40f, -1e-45f,
                                65504.0f, 65519.0f, 65520.0f, 1.00390625f, 1.01171875f,
                                3.0e38f, 6.0e-8f, 2.9802322e-08f};

static void make_weights(rlpi_weights *w)
{
    rlpi_weights_init(w);
    rlpi_tensor *t;
    int64_t s1[1] = {15}, s2[2] = {3, 5}, s3[3] = {2, 1, 3};
    assert_int_equal(rlpi_weights_add(w, "special", 1, s1, &t), RLP_OK);
    memcpy(t->data, SPECIAL, sizeof SPECIAL);
    assert_int_equal(rlpi_weights_add(w, "model.layers.0.mlp.up_proj.weight", 2, s2, &t), RLP_OK);
    for (int i = 0; i < 15; i++)
        t->data[i] = (float)i * 0.37f - 2.0f;
    assert_int_equal(rlpi_weights_add(w, "z.ünïcode", 3, s3, &t), RLP_OK);
    for (int i = 0; i < 6; i++)
        t->data[i] = (float)(i + 1) / 7.0f;
}

/* F32: every bit survives, NaN payloads and -0 included; the header is
 * padded with spaces to a multiple of 8 and the file size is exact. */
static void f32_round_trip_is_bit_exact(void **state)
{
    (void)state;
    rlpi_weights w, r;
    make_weights(&w);
    rlpi_tensor *nan_t;
    int64_t s[1] = {2};
    assert_int_equal(rlpi_weights_add(&w, "nan", 1, s, &nan_t), RLP_OK);
    nan_t->data[0] = rlpi_bits_to_f32(0x7fc12345u);
    nan_t->data[1] = -INFINITY;
    rlpi_st_metadata meta, mr;
    rlpi_st_metadata_init(&meta);
    rlpi_st_metadata_init(&mr);
    assert_int_equal(rlpi_st_metadata_set(&meta, "format", "pt"), RLP_OK);
    assert_int_equal(rlpi_st_metadata_set(&meta, "note", "odd \"quoted\" ü"), RLP_OK);
    rlpi_st_write_opts o = {RLPI_ST_F32, &meta, false};
    assert_int_equal(rlpi_safetensors_write(tpath("a.safetensors"), &w, &o), RLP_OK);

    size_t len;
    uint8_t *b = slurp(tpath("a.safetensors"), &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + (15 + 15 + 6 + 2) * 4);
    assert_int_equal(b[8], '{');
    size_t last = 8 + hlen - 1;
    while (b[last] == ' ')
        last--;
    assert_int_equal(b[last], '}');
    free(b);

    rlpi_weights_init(&r);
    assert_int_equal(rlpi_safetensors_read(tpath("a.safetensors"), &r, &mr), RLP_OK);
    assert_int_equal(r.n, w.n);
    for (size_t i = 0; i < w.n; i++) {
        const rlpi_tensor *a = &w.tensors[i], *c = rlpi_weights_find(&r, a->name);
        assert_non_null(c);
        assert_string_equal(c->src_dtype, "F32");
        assert_int_equal(c->n_dims, a->n_dims);
        for (int d = 0; d < a->n_dims; d++)
            assert_int_equal(c->shape[d], a->shape[d]);
        for (size_t k = 0; k < a->n_elems; k++)
            assert_int_equal(bits(c->data[k]), bits(a->data[k]));
    }
    /* tensors come back in file (offset) order, which is writing order */
    assert_string_equal(r.tensors[0].name, "special");
    assert_string_equal(r.tensors[3].name, "nan");
    assert_int_equal(mr.n, 2);
    assert_string_equal(rlpi_st_metadata_get(&mr, "format"), "pt");
    assert_string_equal(rlpi_st_metadata_get(&mr, "note"), "odd \"quoted\" ü");
    assert_null(rlpi_st_metadata_get(&mr, "absent"));
    rlpi_st_metadata_free(&meta);
    rlpi_st_metadata_free(&mr);
    rlpi_weights_free(&w);
    rlpi_weights_free(&r);
}

/* Half formats: the stored bits are the expected round-to-nearest-even
 * results (hand-computed), and reading gives their exact fp32 values. */
static void half_round_trips_round_to_nearest_even(void **state)
{
    (void)state;
    rlpi_weights w, r;
    make_weights(&w);
    /* expected F16 / BF16 bit patterns of SPECIAL[], as PyTorch's
     * .to(torch.float16 / torch.bfloat16) gives them (checked with torch) */
    static const uint16_t f16[] = {0x0000, 0x8000, 0x3c00, 0xc100, 0x3555, 0x0000, 0x8000,
                                   0x7bff, 0x7bff, 0x7c00, 0x3c04, 0x3c0c, 0x7c00, 0x0001, 0x0000};
    static const uint16_t bf16[] = {0x0000, 0x8000, 0x3f80, 0xc020, 0x3eab, 0x0001, 0x8000,
                                    0x4780, 0x4780, 0x4780, 0x3f80, 0x3f82, 0x7f62, 0x3381, 0x3300};
    for (int k = 0; k < 15; k++) {
        assert_int_equal(rlpi_f32_to_f16(SPECIAL[k]), f16[k]);
        assert_int_equal(rlpi_f32_to_bf16(SPECIAL[k]), bf16[k]);
    }
    const rlpi_st_dtype dts[2] = {RLPI_ST_F16, RLPI_ST_BF16};
    for (int di = 0; di < 2; di++) {
        rlpi_st_write_opts o = {dts[di], NULL, false};
        assert_int_equal(rlpi_safetensors_write(tpath("h.safetensors"), &w, &o), RLP_OK);
        size_t len;
        uint8_t *b = slurp(tpath("h.safetensors"), &len);
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | b[i];
        assert_int_equal(len, 8 + hlen + (15 + 15 + 6) * 2);
        /* "special" is first in the data section */
        for (int k = 0; k < 15; k++) {
            uint16_t h = (uint16_t)(b[8 + hlen + 2 * k] | b[8 + hlen + 2 * k + 1] << 8);
            assert_int_equal(h, di == 0 ? f16[k] : bf16[k]);
        }
        free(b);
        rlpi_weights_init(&r);
        assert_int_equal(rlpi_safetensors_read(tpath("h.safetensors"), &r, NULL), RLP_OK);
        const rlpi_tensor *t = rlpi_weights_find(&r, "special");
        assert_string_equal(t->src_dtype, di == 0 ? "F16" : "BF16");
        for (int k = 0; k < 15; k++) {
            float want = di == 0 ? rlpi_f16_to_f32(f16[k]) : rlpi_bf16_to_f32(bf16[k]);
            assert_int_equal(bits(t->data[k]), bits(want));
        }
        assert_true(t->data[4] == (di == 0 ? 0.333251953125f : 0.333984375f));
        rlpi_weights_free(&r);
    }
    rlpi_weights_free(&w);
}

/* Aliases (tied heads) are skipped or written as real copies. */
static void aliases_are_skipped_or_copied(void **state)
{
    (void)state;
    rlpi_weights w, r;
    make_weights(&w);
    assert_int_equal(rlpi_weights_add_alias(&w, "head", "special"), RLP_OK);
    rlpi_st_write_opts skip = {RLPI_ST_F32, NULL, true}, copy = {RLPI_ST_F32, NULL, false};
    assert_int_equal(rlpi_safetensors_write(tpath("s.safetensors"), &w, &skip), RLP_OK);
    rlpi_weights_init(&r);
    assert_int_equal(rlpi_safetensors_read(tpath("s.safetensors"), &r, NULL), RLP_OK);
    assert_int_equal(r.n, 3);
    assert_null(rlpi_weights_find(&r, "head"));
    rlpi_weights_free(&r);
    assert_int_equal(rlpi_safetensors_write(tpath("s.safetensors"), &w, &copy), RLP_OK);
    rlpi_weights_init(&r);
    assert_int_equal(rlpi_safetensors_read(tpath("s.safetensors"), &r, NULL), RLP_OK);
    const rlpi_tensor *h = rlpi_weights_find(&r, "head");
    assert_non_null(h);
    assert_int_equal(h->alias_of, -1);
    assert_memory_equal(h->data, SPECIAL, sizeof SPECIAL);
    rlpi_weights_free(&r);
    rlpi_weights_free(&w);
}

/* Replacement is atomic: a failed write leaves the old file and no
 * temporary; a successful one leaves only the target. */
static void writes_are_atomic(void **state)
{
    (void)state;
    rlpi_weights w;
    make_weights(&w);
    assert_int_equal(rlpi_safetensors_write(tpath("t.safetensors"), &w, NULL), RLP_OK);
    struct stat st;
    assert_int_equal(stat(tpath("t.safetensors"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    /* no temporaries left behind */
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while ((e = readdir(d)))
        assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
    assert_int_equal(rlpi_safetensors_write("/nonexistent-dir/x.safetensors", &w, NULL), RLP_E_IO);
    assert_non_null(strstr(rlp_error_last(), "/nonexistent-dir/x.safetensors"));
    rlpi_weights_free(&w);
}

/* Two shards and an index; then the ways an index can lie. */
static void sharded_checkpoints_load(void **state)
{
    (void)state;
    rlpi_weights w, a, b, r;
    make_weights(&w);
    rlpi_weights_init(&a);
    rlpi_weights_init(&b);
    /* shallow split: shard 1 = tensor 0, shard 2 = tensors 1, 2 */
    a.tensors = w.tensors;
    a.n = 1;
    b.tensors = w.tensors + 1;
    b.n = 2;
    assert_int_equal(rlpi_safetensors_write(tpath("model-00001-of-00002.safetensors"), &a, NULL), 0);
    assert_int_equal(rlpi_safetensors_write(tpath("model-00002-of-00002.safetensors"), &b, NULL), 0);
    const char *good = "{\"metadata\": {\"total_size\": 144}, \"weight_map\": {"
                       "\"special\": \"model-00001-of-00002.safetensors\","
                       "\"model.layers.0.mlp.up_proj.weight\": \"model-00002-of-00002.safetensors\","
                       "\"z.ünïcode\": \"model-00002-of-00002.safetensors\"}}";
    spit(tpath("model.safetensors.index.json"), good, strlen(good));
    rlpi_weights_init(&r);
    assert_int_equal(rlpi_safetensors_read_index(tpath("model.safetensors.index.json"), &r, NULL),
                     RLP_OK);
    assert_int_equal(r.n, 3);
    assert_memory_equal(rlpi_weights_find(&r, "z.ünïcode")->data, w.tensors[2].data, 6 * 4);
    rlpi_weights_free(&r);

    struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"weight_map\": {\"special\": \"model-00002-of-00002.safetensors\","
         "\"model.layers.0.mlp.up_proj.weight\": \"model-00002-of-00002.safetensors\","
         "\"z.ünïcode\": \"model-00002-of-00002.safetensors\"}}",
         "'special' listed for model-00002-of-00002.safetensors is not in it"},
        {"{\"weight_map\": {\"special\": \"model-00001-of-00002.safetensors\","
         "\"z.ünïcode\": \"model-00002-of-00002.safetensors\"}}",
         "weight_map says nothing"},
        {"{\"weight_map\": {\"special\": \"../model-00001-of-00002.safetensors\"}}",
         "not a plain file name"},
        {"{\"weight_map\": {}}", "weight_map missing, empty"},
        {"{\"weight_map\": {\"special\": \"missing.safetensors\"}}", "cannot open"},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "nested deeper"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spit(tpath("bad.index.json"), bad[i].json, strlen(bad[i].json));
        rlpi_weights_init(&r);
        int rc = rlpi_safetensors_read_index(tpath("bad.index.json"), &r, NULL);
        assert_int_not_equal(rc, RLP_OK);
        if (!strstr(rlp_error_last(), bad[i].msg))
            fail_msg("case %zu: message '%s' lacks '%s'", i, rlp_error_last(), bad[i].msg);
        rlpi_weights_free(&r);
    }
    unlink(tpath("bad.index.json"));
    rlpi_weights_free(&w);
}

/* ---- broken-file corpus ------------------------------------------------ */

/* Builds 8-byte length + header + `data_len` zero bytes. */
static uint8_t *image(const char *header, size_t data_len, size_t *len)
{
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *b = calloc(*len + 1, 1);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static void expect_fail(const uint8_t *b, size_t len, int code, const char *msg, const char *what)
{
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_st_metadata m;
    rlpi_st_metadata_init(&m);
    int rc = rlpi_safetensors_parse(b, len, "bad.safetensors", &w, &m);
    if (rc != code)
        fail_msg("%s: got %d (%s), want %d", what, rc, rlp_error_last(), code);
    if (!strstr(rlp_error_last(), msg))
        fail_msg("%s: message '%s' lacks '%s'", what, rlp_error_last(), msg);
    rlpi_weights_free(&w);
    rlpi_st_metadata_free(&m);
}

static void broken_headers_are_format_errors(void **state)
{
    (void)state;
    static const struct {
        const char *what, *header;
        size_t data;
        int code;
        const char *msg;
    } cases[] = {
        {"truncated JSON", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]", 0, RLP_E_FORMAT, "invalid JSON"},
        {"array header", "[1,2,3]", 0, RLP_E_FORMAT, "does not start with '{'"},
        {"null header", "null", 0, RLP_E_FORMAT, "does not start with '{'"},
        {"past end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
         RLP_E_FORMAT, "'a': data_offsets end 8 past the data section (4 bytes)"},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, RLP_E_FORMAT, "tensors 'a' and 'b' overlap"},
        {"gap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, RLP_E_FORMAT,
         "4 unindexed bytes before tensor 'a'"},
        {"trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9,
         RLP_E_FORMAT, "5 trailing bytes"},
        {"dtype/shape mismatch", "{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}",
         8, RLP_E_FORMAT, "'a': F16 shape needs 6 bytes but data_offsets span 8"},
        {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "'a': shape[0] is not a non-negative integer"},
        {"float shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "shape[0] is not a non-negative integer"},
        {"shape overflow",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
         "\"data_offsets\":[0,4]}}",
         4, RLP_E_FORMAT, "'a': element count overflows"},
        {"byte size overflow",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "'a': byte size overflows"},
        {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
         RLP_E_FORMAT, "non-negative integers"},
        {"reversed offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
         RLP_E_FORMAT, "end before they begin"},
        {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4,
         RLP_E_FORMAT, "array of 2 integers"},
        {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, RLP_E_FORMAT,
         "'a': dtype missing"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "'a': unknown dtype 'Q9'"},
        {"unsupported dtype", "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
         RLP_E_UNSUPPORTED, "tensor 'w': dtype I64 is not supported"},
        {"five dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         RLP_E_UNSUPPORTED, "5 dimensions"},
        {"scalar", "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
         RLP_E_UNSUPPORTED, "0 dimensions"},
        {"entry not object", "{\"a\":3}", 0, RLP_E_FORMAT, "'a': entry is not an object"},
        {"empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "empty name"},
        {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", 0, RLP_E_FORMAT,
         "__metadata__ value of 'k' is not a string"},
        {"metadata not object", "{\"__metadata__\":[]}", 0, RLP_E_FORMAT,
         "__metadata__ is not an object"},
        {"duplicate key",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, RLP_E_FORMAT, "duplicate"},
        {"NUL in key", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         RLP_E_FORMAT, "invalid JSON"},
        {"invalid UTF-8 key", "{\"a\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, RLP_E_FORMAT, "invalid JSON"},
        {"overlong UTF-8 key", "{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, RLP_E_FORMAT, "invalid JSON"},
        {"nested metadata", "{\"__metadata__\":{\"k\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}",
         0, RLP_E_FORMAT, "nested deeper than 32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = image(cases[i].header, cases[i].data, &len);
        expect_fail(b, len, cases[i].code, cases[i].msg, cases[i].what);
        free(b);
    }
}

static void bad_lengths_and_deep_nesting(void **state)
{
    (void)state;
    uint8_t small[7] = {0};
    expect_fail(small, sizeof small, RLP_E_FORMAT, "7 bytes, too short", "short file");
    expect_fail(small, 0, RLP_E_FORMAT, "0 bytes", "empty file");

    size_t len;
    uint8_t *b = image("{}", 0, &len);
    const uint64_t lens[] = {3, 1000, RLPI_ST_MAX_HEADER + 1, UINT64_MAX, (uint64_t)1 << 63};
    const char *msgs[] = {"runs past the end of the 10-byte file", "header length 1000 runs past",
                          "exceeds the 100000000-byte limit", "18446744073709551615 exceeds",
                          "exceeds"};
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < 8; i++)
            b[i] = (uint8_t)(lens[k] >> (8 * i));
        expect_fail(b, len, RLP_E_FORMAT, msgs[k], "bad header length");
    }
    free(b);
    /* empty header object is a valid file with no tensors */
    b = image("{}", 0, &len);
    rlpi_weights w;
    rlpi_weights_init(&w);
    assert_int_equal(rlpi_safetensors_parse(b, len, "x", &w, NULL), RLP_OK);
    assert_int_equal(w.n, 0);
    free(b);

    /* 10^5 '[' would make a recursive parser run deep: refused up front */
    enum { n = 100000 };
    static char deep[n + 8];
    memcpy(deep, "{\"a\":", 5);
    memset(deep + 5, '[', n - 5);
    deep[n] = '\0';
    b = image(deep, 0, &len);
    expect_fail(b, len, RLP_E_FORMAT, "nested deeper than 32", "deep nesting");
    free(b);
    /* brackets inside strings do not count as nesting */
    strcpy(deep, "{\"__metadata__\":{\"k\":\"");
    size_t p = strlen(deep);
    memset(deep + p, '[', 1000);
    strcpy(deep + p + 1000, "\"}}");
    b = image(deep, 0, &len);
    rlpi_st_metadata m;
    rlpi_st_metadata_init(&m);
    assert_int_equal(rlpi_safetensors_parse(b, len, "x", &w, &m), RLP_OK);
    assert_int_equal(strlen(rlpi_st_metadata_get(&m, "k")), 1000);
    rlpi_st_metadata_free(&m);
    free(b);

    /* a missing file and a folder are I/O errors, not format errors */
    assert_int_equal(rlpi_safetensors_read(tpath("nope.safetensors"), &w, NULL), RLP_E_NOT_FOUND);
    assert_int_equal(rlpi_safetensors_read(tmpdir, &w, NULL), RLP_E_IO);
    rlpi_weights_free(&w);
}

/* ---- fixtures from the reference implementation ------------------------ */

/* tests/reference/make_safetensors_fixtures.py wrote these with the
 * `safetensors` package; expected.json holds each tensor's fp32 bit
 * patterns as torch computed them (.float()), compared exactly. */
static void reference_fixtures_match(void **state)
{
    (void)state;
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    if (!root)
        skip();
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/safetensors", root);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    json_error_t err;
    json_t *exp = json_load_file(path, 0, &err);
    if (!exp)
        fail_msg("cannot read %s: %s", path, err.text);
    const char *fname;
    json_t *fobj;
    int n_files = 0, n_tensors = 0;
    json_object_foreach(exp, fname, fobj) {
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        rlpi_weights w;
        rlpi_weights_init(&w);
        rlpi_st_metadata m;
        rlpi_st_metadata_init(&m);
        json_t *want_err = json_object_get(fobj, "error");
        int rc = rlpi_safetensors_read(path, &w, &m);
        if (want_err) {
            if (rc != RLP_E_UNSUPPORTED)
                fail_msg("%s: want unsupported, got %d (%s)", fname, rc, rlp_error_last());
            assert_non_null(strstr(rlp_error_last(), json_string_value(want_err)));
        } else {
            if (rc != RLP_OK)
                fail_msg("%s: %s", fname, rlp_error_last());
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(fobj, "metadata"), k, v)
                assert_string_equal(rlpi_st_metadata_get(&m, k), json_string_value(v));
            json_t *tensors = json_object_get(fobj, "tensors");
            assert_int_equal(w.n, json_object_size(tensors));
            json_object_foreach(tensors, k, v) {
                const rlpi_tensor *t = rlpi_weights_find(&w, k);
                if (!t)
                    fail_msg("%s: tensor %s missing", fname, k);
                assert_string_equal(t->src_dtype, json_string_value(json_object_get(v, "dtype")));
                json_t *shape = json_object_get(v, "shape");
                assert_int_equal((size_t)t->n_dims, json_array_size(shape));
                for (int d = 0; d < t->n_dims; d++)
                    assert_int_equal(t->shape[d], json_integer_value(json_array_get(shape, (size_t)d)));
                json_t *vals = json_object_get(v, "f32_bits");
                assert_int_equal(t->n_elems, json_array_size(vals));
                for (size_t e = 0; e < t->n_elems; e++)
                    assert_int_equal(bits(t->data[e]),
                                     (uint32_t)json_integer_value(json_array_get(vals, e)));
                n_tensors++;
            }
        }
        n_files++;
        rlpi_weights_free(&w);
        rlpi_st_metadata_free(&m);
    }
    json_decref(exp);
    assert_true(n_files >= 3);
    assert_true(n_tensors >= 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f32_round_trip_is_bit_exact),
        cmocka_unit_test(half_round_trips_round_to_nearest_even),
        cmocka_unit_test(aliases_are_skipped_or_copied),
        cmocka_unit_test(writes_are_atomic),
        cmocka_unit_test(sharded_checkpoints_load),
        cmocka_unit_test(broken_headers_are_format_errors),
        cmocka_unit_test(bad_lengths_and_deep_nesting),
        cmocka_unit_test(reference_fixtures_match),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
