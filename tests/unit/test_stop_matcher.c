/* The stop matcher (lib/rollout/stop_matcher.c) with Qwen3's tokenizer:
 * public-bugs.md case #6 (stop strings across token boundaries, held-back
 * text, text past the stop), case #2 (a character split across tokens),
 * stop ids, and random stop strings over random token streams against a
 * naive reference that searches the whole decoded text. Exits 77 (meson:
 * skipped) without ../shared/data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/rng.h"
#include "rlpost.h"
#include "rollout/stop_matcher.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static rlp_tokenizer *g_tok;

#define IM_START 151644
#define IM_END 151645
#define REPL "\xef\xbf\xbd" /* U+FFFD */

/* What one run of the matcher produced. */
typedef struct run_result {
    int stop_at;         /* index of the token after which it stopped, or -1 */
    char stream[4096];   /* concatenated deltas (and the finish delta) */
    size_t stream_len;
    char text[4096];     /* rlpi_stop_matcher_text at the end */
    size_t text_len;
    int matched;
    int32_t matched_id;
    size_t streamed_after[256]; /* stream length after each push */
    bool bad_delta;      /* a delta held U+FFFD or ill-formed UTF-8 */
} run_result;

static bool utf8_ok(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || i + len > n)
            return false;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xc0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

static void append(run_result *r, const char *d, size_t n)
{
    assert_true(r->stream_len + n < sizeof r->stream);
    memcpy(r->stream + r->stream_len, d, n);
    r->stream_len += n;
    r->stream[r->stream_len] = '\0';
    assert_int_equal(strlen(d), n); /* deltas are NUL-terminated */
    if (!utf8_ok(d, n) || memmem(d, n, REPL, 3))
        r->bad_delta = true;
}

/* Feeds ids until a stop (or the end, then finish()); with finish_after >=
 * 0, finishes after that many ids instead (a length stop). */
static void run_ids(rlpi_stop_matcher *m, const int32_t *ids, size_t n, run_result *r,
                    long finish_after)
{
    memset(r, 0, sizeof *r);
    r->stop_at = -1;
    size_t lim = finish_after >= 0 && (size_t)finish_after < n ? (size_t)finish_after : n;
    for (size_t i = 0; i < lim; i++) {
        bool stopped = true;
        const char *d = NULL;
        size_t dl = 99;
        int rc = rlpi_stop_matcher_push(m, ids[i], &stopped, &d, &dl);
        if (rc)
            fprintf(stderr, "%s\n", rlp_error_last());
        assert_int_equal(rc, RLP_OK);
        append(r, d, dl);
        if (i < 256)
            r->streamed_after[i] = r->stream_len;
        if (stopped) {
            r->stop_at = (int)i;
            break;
        }
    }
    if (r->stop_at < 0) {
        const char *d;
        size_t dl;
        assert_int_equal(rlpi_stop_matcher_finish(m, &d, &dl), RLP_OK);
        append(r, d, dl);
    }
    size_t tl;
    const char *t = rlpi_stop_matcher_text(m, &tl);
    assert_true(tl < sizeof r->text);
    memcpy(r->text, t, tl);
    r->text[tl] = '\0';
    r->text_len = tl;
    r->matched = rlpi_stop_matcher_matched_string(m);
    r->matched_id = rlpi_stop_matcher_matched_id(m);
}

static rlpi_stop_matcher *make(const char *const *stop, size_t n_stop, const int32_t *stop_ids,
                               size_t n_ids, bool include)
{
    rlpi_stop_config cfg = {stop, n_stop, stop_ids, n_ids, include};
    rlpi_stop_matcher *m = NULL;
    int rc = rlpi_stop_matcher_create(&m, g_tok, &cfg);
    if (rc)
        fprintf(stderr, "%s\n", rlp_error_last());
    assert_int_equal(rc, RLP_OK);
    return m;
}

static void run_once(const char *const *stop, size_t n_stop, const int32_t *stop_ids,
                     size_t n_ids, bool include, const int32_t *ids, size_t n, run_result *r)
{
    rlpi_stop_matcher *m = make(stop, n_stop, stop_ids, n_ids, include);
    run_ids(m, ids, n, r, -1);
    rlpi_stop_matcher_free(m);
}

/* Whatever the stop, the stream is the final text: never more, never a
 * byte that the text does not have at that place. */
static void assert_stream_is_text(const run_result *r)
{
    assert_false(r->bad_delta);
    assert_int_equal(r->stream_len, r->text_len);
    assert_memory_equal(r->stream, r->text, r->text_len);
}

static void decode(const int32_t *ids, size_t n, char *out, size_t cap, size_t *len)
{
    int rc = rlp_tokenizer_decode(g_tok, ids, n, RLP_DECODE_SKIP_SPECIAL, out, cap, len);
    assert_int_equal(rc, RLP_OK);
}

/* ------------------------------------------------------------------------ */
/* Case #6                                                                  */
/* ------------------------------------------------------------------------ */

/* `<` `answer` `>` `4` `</` `a` `></` `answer` `>` */
static const int32_t CASE6[] = {27, 9217, 29, 19, 522, 64, 1472, 9217, 29};
/* `<` `answer` `>` `4` `</` `answer` `>\n\n` */
static const int32_t CASE6B[] = {27, 9217, 29, 19, 522, 9217, 1339};

static void case6_stop_string_across_tokens(void **state)
{
    (void)state;
    const char *stop[] = {"</answer>"};
    run_result r;
    run_once(stop, 1, NULL, 0, false, CASE6, 9, &r);
    /* ends after the last id, not at the false start "</a" */
    assert_int_equal(r.stop_at, 8);
    assert_int_equal(r.matched, 0);
    assert_int_equal(r.matched_id, -1);
    assert_string_equal(r.text, "<answer>4</a>");
    assert_stream_is_text(&r);
    /* the stream after each id: "<", "</" and "</a" held back while they
     * could still begin "</answer>"; "</a>" released once "></" breaks the
     * prefix; the new "</" held again, and never released (it was the stop) */
    const char *want[] = {"", "<answer", "<answer>", "<answer>4", "<answer>4", "<answer>4",
                          "<answer>4</a>", "<answer>4</a>", "<answer>4</a>"};
    for (int i = 0; i < 9; i++) {
        if (r.streamed_after[i] != strlen(want[i]) ||
            memcmp(r.stream, want[i], strlen(want[i])) != 0)
            fail_msg("after id %d streamed %zu bytes, want \"%s\"", i, r.streamed_after[i],
                     want[i]);
    }

    run_once(stop, 1, NULL, 0, true, CASE6, 9, &r);
    assert_int_equal(r.stop_at, 8);
    assert_int_equal(r.matched, 0);
    assert_string_equal(r.text, "<answer>4</a></answer>");
    assert_stream_is_text(&r);

    /* the last token carries "\n\n" past the stop: it is not in the text */
    run_once(stop, 1, NULL, 0, true, CASE6B, 7, &r);
    assert_int_equal(r.stop_at, 6);
    assert_string_equal(r.text, "<answer>4</answer>");
    assert_stream_is_text(&r);
    run_once(stop, 1, NULL, 0, false, CASE6B, 7, &r);
    assert_int_equal(r.stop_at, 6);
    assert_string_equal(r.text, "<answer>4");
    assert_stream_is_text(&r);
}

/* A stop string that begins inside one token and ends inside another
 * three tokens later, and one made of exactly three whole tokens. */
static void stop_spanning_three_tokens(void **state)
{
    (void)state;
    /* "nswer>4<" starts inside `answer`, spans `>` and `4`, ends inside `</` */
    const char *stop[] = {"nswer>4<"};
    run_result r;
    run_once(stop, 1, NULL, 0, false, CASE6, 9, &r);
    assert_int_equal(r.stop_at, 4);
    assert_string_equal(r.text, "<a");
    assert_stream_is_text(&r);
    run_once(stop, 1, NULL, 0, true, CASE6, 9, &r);
    assert_int_equal(r.stop_at, 4);
    assert_string_equal(r.text, "<answer>4<"); /* not the '/' of the same token */
    assert_stream_is_text(&r);
    /* exactly three whole tokens */
    const char *stop3[] = {"></answer>"};
    run_once(stop3, 1, NULL, 0, false, CASE6, 9, &r);
    assert_int_equal(r.stop_at, 8);
    assert_string_equal(r.text, "<answer>4</a");
    assert_stream_is_text(&r);
}

/* ------------------------------------------------------------------------ */
/* Stop ids, specials, several stop strings                                 */
/* ------------------------------------------------------------------------ */

static void stop_ids_end_without_text(void **state)
{
    (void)state;
    const int32_t stop_ids[] = {151643, IM_END};
    /* "<answer>4</" then <|im_end|> and more */
    const int32_t ids[] = {27, 9217, 29, 19, 522, IM_END, 64, 29};
    const char *stop[] = {"</answer>"};
    run_result r;
    run_once(stop, 1, stop_ids, 2, false, ids, 8, &r);
    assert_int_equal(r.stop_at, 5);
    assert_int_equal(r.matched_id, IM_END);
    assert_int_equal(r.matched, -1);
    /* the held "</" is released: it never became a stop string */
    assert_string_equal(r.text, "<answer>4</");
    assert_stream_is_text(&r);
    assert_null(strstr(r.text, "im_end"));
    /* a stop id first thing: empty text */
    run_once(stop, 1, stop_ids, 2, false, ids + 5, 3, &r);
    assert_int_equal(r.stop_at, 0);
    assert_int_equal(r.text_len, 0);
    assert_int_equal(r.stream_len, 0);
    /* a special token that is not a stop id adds no text either */
    const int32_t sp[] = {32, IM_START, 65, IM_END};
    run_once(NULL, 0, stop_ids, 2, false, sp, 4, &r);
    assert_int_equal(r.stop_at, 3);
    assert_string_equal(r.text, "Ab");
    assert_stream_is_text(&r);
    /* an ordinary token used as a stop id ends generation and adds no text */
    const int32_t four_stop[] = {19}; /* `4` */
    run_once(NULL, 0, four_stop, 1, false, CASE6, 9, &r);
    assert_int_equal(r.stop_at, 3);
    assert_int_equal(r.matched_id, 19);
    assert_string_equal(r.text, "<answer>");
}

static size_t encode(const char *text, int32_t *ids, size_t cap)
{
    size_t n;
    int rc = rlp_tokenizer_encode(g_tok, text, strlen(text), 0, ids, cap, &n);
    assert_int_equal(rc, RLP_OK);
    return n;
}

static void several_stop_strings(void **state)
{
    (void)state;
    int32_t ids[128];
    size_t n = encode("Let me think.\nAnswer: 42\n\nDone </answer>", ids, 128);
    const char *stop[] = {"</answer>", "\n\n", "Answer:"};
    run_result r;
    run_once(stop, 3, NULL, 0, false, ids, n, &r);
    assert_int_equal(r.matched, 2);
    assert_string_equal(r.text, "Let me think.\n");
    assert_stream_is_text(&r);
    run_once(stop, 2, NULL, 0, true, ids, n, &r);
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "Let me think.\nAnswer: 42\n\n");
    assert_stream_is_text(&r);
    /* the stop that completes first wins, whatever its place in the list
     * or its length: "bc" is complete at "xabc", "abcd" only one byte later */
    n = encode("xabcdy", ids, 128);
    const char *ov[] = {"abcd", "bc"};
    run_once(ov, 2, NULL, 0, false, ids, n, &r);
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "xa");
    /* completing at the same byte, the longer (earlier-starting) wins */
    const char *same_end[] = {"c", "abc", "bc"};
    run_once(same_end, 3, NULL, 0, false, ids, n, &r);
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "x");
    /* overlapping prefixes: "aab" inside "aaab" (the KMP fallback) */
    n = encode("zaaab!", ids, 128);
    const char *kmp[] = {"aab", "aaaa"};
    run_once(kmp, 2, NULL, 0, false, ids, n, &r);
    assert_int_equal(r.matched, 0);
    assert_string_equal(r.text, "za");
    assert_stream_is_text(&r);
}

/* ------------------------------------------------------------------------ */
/* Case #2: characters split across tokens                                  */
/* ------------------------------------------------------------------------ */

static void split_character_streams_whole(void **state)
{
    (void)state;
    const int32_t ids[] = {32, 18137, 122, 246, 65};     /* "A 龘b" */
    const int32_t emoji[] = {32, 11162, 99, 247, 65};    /* "A 🦙b" */
    run_result r;
    run_once(NULL, 0, NULL, 0, false, ids, 5, &r);
    assert_int_equal(r.stop_at, -1);
    assert_string_equal(r.text, "A \xe9\xbe\x98" "b");
    assert_stream_is_text(&r);
    /* the character appears once, when complete ("A", " ", "", "龘", "b";
     * holding the space too is allowed) */
    assert_true(r.streamed_after[1] <= 2 && r.streamed_after[2] == r.streamed_after[1]);
    assert_int_equal(r.streamed_after[3], 5);
    run_once(NULL, 0, NULL, 0, false, emoji, 5, &r);
    assert_string_equal(r.text, "A \xf0\x9f\xa6\x99" "b");
    assert_stream_is_text(&r);
    /* a stop string that is the split character, and one right after it */
    const char *s1[] = {"\xe9\xbe\x98"};
    run_once(s1, 1, NULL, 0, false, ids, 5, &r);
    assert_int_equal(r.stop_at, 3);
    assert_string_equal(r.text, "A ");
    assert_stream_is_text(&r);
    const char *s2[] = {"\xe9\xbe\x98" "b"};
    run_once(s2, 1, NULL, 0, true, ids, 5, &r);
    assert_int_equal(r.stop_at, 4);
    assert_string_equal(r.text, "A \xe9\xbe\x98" "b");
    /* length stop after id 122: the flush is the lossy decode of "A \xe9\xbe" */
    rlpi_stop_matcher *m = make(s2, 1, NULL, 0, false);
    run_ids(m, ids, 5, &r, 3);
    char want[64];
    size_t wl;
    decode(ids, 3, want, sizeof want, &wl);
    assert_int_equal(r.stream_len, wl);
    assert_memory_equal(r.stream, want, wl);
    assert_int_equal(r.text_len, wl);
    assert_non_null(strstr(r.text, REPL));
    rlpi_stop_matcher_free(m);
}

/* ------------------------------------------------------------------------ */
/* finish(), reset(), errors                                                */
/* ------------------------------------------------------------------------ */

static void finish_releases_held_text(void **state)
{
    (void)state;
    const char *stop[] = {"</answer>"};
    rlpi_stop_matcher *m = make(stop, 1, NULL, 0, false);
    run_result r;
    run_ids(m, CASE6, 9, &r, 6); /* "<answer>4</a", "</a" held, then finish */
    assert_int_equal(r.streamed_after[5], strlen("<answer>4"));
    assert_string_equal(r.stream, "<answer>4</a");
    assert_string_equal(r.text, "<answer>4</a");
    assert_int_equal(r.matched, -1);
    /* finish twice, or push after it: nothing more, a state error */
    const char *d;
    size_t dl;
    bool stopped;
    assert_int_equal(rlpi_stop_matcher_finish(m, &d, &dl), RLP_OK);
    assert_int_equal(dl, 0);
    assert_int_equal(rlpi_stop_matcher_push(m, 29, &stopped, &d, &dl), RLP_E_STATE);
    /* reset: the same matcher runs the whole case again, identically */
    rlpi_stop_matcher_reset(m);
    run_ids(m, CASE6, 9, &r, -1);
    assert_int_equal(r.stop_at, 8);
    assert_string_equal(r.text, "<answer>4</a>");
    assert_int_equal(rlpi_stop_matcher_push(m, 29, &stopped, &d, &dl), RLP_E_STATE);
    assert_int_equal(rlpi_stop_matcher_finish(m, &d, &dl), RLP_OK); /* after a stop: empty */
    assert_int_equal(dl, 0);
    assert_string_equal(d, "");
    /* reset in the middle of a split character and of a held prefix drops
     * both: nothing of the old completion leaks into the new one */
    rlpi_stop_matcher_reset(m);
    const int32_t part[] = {32, 522, 18137, 122};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rlpi_stop_matcher_push(m, part[i], &stopped, &d, &dl), RLP_OK);
        assert_false(stopped);
    }
    rlpi_stop_matcher_reset(m);
    const int32_t b[] = {65};
    run_ids(m, b, 1, &r, -1);
    assert_string_equal(r.text, "b");
    rlpi_stop_matcher_free(m);
}

static void no_stop_stream_equals_decode(void **state)
{
    (void)state;
    int32_t ids[256];
    const char *text = "Natürlich: 3 + 4 = 7, 龘 and 🦙 </answe <answer>";
    size_t n = encode(text, ids, 256);
    const char *stop[] = {"</answer>", "\n\n\n"};
    run_result r;
    run_once(stop, 2, NULL, 0, false, ids, n, &r);
    assert_int_equal(r.stop_at, -1);
    assert_string_equal(r.text, text);
    assert_stream_is_text(&r);
    char dec[512];
    size_t dl;
    decode(ids, n, dec, sizeof dec, &dl);
    assert_int_equal(r.stream_len, dl);
    assert_memory_equal(r.stream, dec, dl);
}

static void bad_arguments(void **state)
{
    (void)state;
    static char sentinel;
    rlpi_stop_matcher *m = (rlpi_stop_matcher *)(void *)&sentinel;
    rlpi_stop_config cfg = {NULL, 0, NULL, 0, false};
    assert_int_equal(rlpi_stop_matcher_create(NULL, g_tok, &cfg), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_create(&m, NULL, &cfg), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, NULL), RLP_E_INVALID_ARG);
    cfg.n_stop = 1; /* stop NULL */
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    const char *empty[] = {"ok", ""};
    cfg.stop = empty;
    cfg.n_stop = 2;
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "stop[1]"));
    const char *null_one[] = {NULL};
    cfg.stop = null_one;
    cfg.n_stop = 1;
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    const char *bad_utf8[] = {"\xe9\xbe"};
    cfg.stop = bad_utf8;
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "UTF-8"));
    cfg.stop = NULL;
    cfg.n_stop = 0;
    cfg.n_stop_ids = 1; /* stop_ids NULL */
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    const int32_t out_of_range[] = {IM_END, 151669};
    cfg.stop_ids = out_of_range;
    cfg.n_stop_ids = 2;
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "151669"));
    const int32_t negative[] = {-1};
    cfg.stop_ids = negative;
    cfg.n_stop_ids = 1;
    assert_int_equal(rlpi_stop_matcher_create(&m, g_tok, &cfg), RLP_E_INVALID_ARG);
    assert_ptr_equal(m, (rlpi_stop_matcher *)(void *)&sentinel); /* untouched on failure */

    m = make(NULL, 0, NULL, 0, false);
    bool stopped;
    const char *d;
    size_t dl;
    assert_int_equal(rlpi_stop_matcher_push(m, 151669, &stopped, &d, &dl), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_push(m, -5, &stopped, &d, &dl), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_push(NULL, 5, &stopped, &d, &dl), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_push(m, 5, NULL, &d, &dl), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_push(m, 5, &stopped, NULL, &dl), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_push(m, 5, &stopped, &d, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_stop_matcher_finish(NULL, &d, &dl), RLP_E_INVALID_ARG);
    /* the failed pushes left it usable, and empty */
    size_t tl = 7;
    assert_string_equal(rlpi_stop_matcher_text(m, &tl), "");
    assert_int_equal(tl, 0);
    assert_int_equal(rlpi_stop_matcher_push(m, 32, &stopped, &d, &dl), RLP_OK);
    assert_string_equal(d, "A");
    rlpi_stop_matcher_free(m);
    rlpi_stop_matcher_free(NULL);
    rlpi_stop_matcher_reset(NULL);
    assert_int_equal(rlpi_stop_matcher_matched_string(NULL), -1);
    assert_int_equal(rlpi_stop_matcher_matched_id(NULL), -1);
}

/* ------------------------------------------------------------------------ */
/* Random stop strings over random token streams vs a naive reference       */
/* ------------------------------------------------------------------------ */

/* Pieces that make near-misses likely: parts of stop strings, multi-byte
 * characters the tokenizer splits, and special-token text that must stay
 * plain text. */
static const char *const PIECES[] = {
    "<", ">", "/", "a", "answer", "</", "</a", "</answer>", "4", "2", " ", "\n", "\n\n", "ab",
    "aab", "\xc3\xa9", "\xe9\xbe\x98", "\xf0\x9f\xa6\x99", "Answer:", "<|im_end|>", "x", "b",
};

/* Length of the longest suffix of t[0..n) that is a proper prefix of s. */
static size_t naive_hold(const char *t, size_t n, const char *s)
{
    size_t L = strlen(s);
    for (size_t h = L - 1 < n ? L - 1 : n; h > 0; h--)
        if (memcmp(t + n - h, s, h) == 0)
            return h;
    return 0;
}

/* Whole characters of b[0..n) (b is well-formed UTF-8 as a whole). */
static size_t whole_chars(const char *b, size_t n)
{
    size_t k = n;
    while (k > 0 && ((unsigned char)b[k - 1] & 0xc0) == 0x80)
        k--;
    if (k == 0)
        return 0;
    unsigned char c = (unsigned char)b[k - 1];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
    return (k - 1) + len <= n ? n : k - 1;
}

static void random_streams_match_naive_reference(void **state)
{
    (void)state;
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 77, 6);
    const size_t n_pieces = sizeof PIECES / sizeof PIECES[0];
    int stops_by_string = 0, stops_by_id = 0, no_stop = 0, lossy_cuts = 0;
    for (int iter = 0; iter < 600; iter++) {
        /* the text, and ids made by encoding random byte chunks of it
         * (chunk ends fall inside characters and inside words) */
        char text[1024];
        size_t tl = 0;
        size_t np = 5 + rlpi_rng_below(&rng, 30);
        for (size_t k = 0; k < np; k++) {
            const char *p = PIECES[rlpi_rng_below(&rng, n_pieces)];
            memcpy(text + tl, p, strlen(p));
            tl += strlen(p);
        }
        text[tl] = '\0';
        int32_t ids[1024];
        bool special[1024];
        size_t bytes_of[1024]; /* text bytes each id adds */
        size_t n = 0;
        for (size_t at = 0; at < tl;) {
            size_t len = 1 + rlpi_rng_below(&rng, 8);
            if (len > tl - at)
                len = tl - at;
            size_t got;
            assert_int_equal(rlp_tokenizer_encode(g_tok, text + at, len, 0, ids + n,
                                                  1024 - n, &got),
                             RLP_OK);
            for (size_t k = n; k < n + got; k++) {
                const char *tt;
                size_t ttl;
                assert_int_equal(rlp_tokenizer_token_text(&tt, &ttl, g_tok, ids[k]), RLP_OK);
                special[k] = false;
                bytes_of[k] = ttl;
            }
            n += got;
            at += len;
            /* now and then a special token: a stop id or plain <|im_start|> */
            if (rlpi_rng_below(&rng, 25) == 0 && n < 1000) {
                ids[n] = rlpi_rng_below(&rng, 2) ? IM_START : IM_END;
                special[n] = true;
                bytes_of[n] = 0;
                n++;
            }
        }
        char dec[2048];
        size_t dl;
        decode(ids, n, dec, sizeof dec, &dl);
        assert_int_equal(dl, tl); /* byte-level BPE: ids spell the text back */
        assert_memory_equal(dec, text, tl);

        /* stops: substrings of the text at character boundaries, or pieces */
        const char *stops[3];
        char store[3][64];
        size_t n_stop = rlpi_rng_below(&rng, 4); /* 0..3 */
        for (size_t s = 0; s < n_stop; s++) {
            if (rlpi_rng_below(&rng, 3) == 0 || tl < 2) {
                snprintf(store[s], sizeof store[s], "%s", PIECES[rlpi_rng_below(&rng, n_pieces)]);
            } else {
                size_t a = rlpi_rng_below(&rng, tl), len = 1 + rlpi_rng_below(&rng, 12);
                while (a > 0 && ((unsigned char)text[a] & 0xc0) == 0x80)
                    a--;
                size_t e = a + len < tl ? a + len : tl;
                while (e < tl && ((unsigned char)text[e] & 0xc0) == 0x80)
                    e++;
                memcpy(store[s], text + a, e - a);
                store[s][e - a] = '\0';
            }
            stops[s] = store[s];
        }
        const int32_t stop_ids[] = {IM_END};
        size_t n_ids = rlpi_rng_below(&rng, 2);
        bool include = rlpi_rng_below(&rng, 2);

        /* the reference: the first byte offset at which a stop string is
         * complete in the whole text (longest first there, then list order) */
        size_t end = 0;
        int want_idx = -1;
        for (size_t e = 1; e <= tl && want_idx < 0; e++) {
            for (size_t s = 0; s < n_stop; s++) {
                size_t L = strlen(stops[s]);
                if (L <= e && memcmp(text + e - L, stops[s], L) == 0 &&
                    (want_idx < 0 || L > strlen(stops[want_idx])))
                    want_idx = (int)s;
            }
            end = e;
        }
        /* ... the token that completes it, and the first stop id */
        int want_stop = -1;
        size_t cum = 0;
        for (size_t i = 0; i < n; i++) {
            if (special[i] && ids[i] == IM_END && n_ids) {
                want_stop = (int)i;
                want_idx = -2; /* by id */
                break;
            }
            cum += bytes_of[i];
            if (want_idx >= 0 && cum >= end) {
                want_stop = (int)i;
                break;
            }
        }
        char want[2048];
        size_t want_len;
        if (want_idx >= 0) {
            want_len = include ? end : end - strlen(stops[want_idx]);
            memcpy(want, text, want_len);
            stops_by_string++;
        } else if (want_idx == -2) {
            /* everything before the id, a cut character decoded lossily */
            decode(ids, (size_t)want_stop, want, sizeof want, &want_len);
            stops_by_id++;
        } else {
            want_len = tl;
            memcpy(want, text, tl);
            no_stop++;
        }

        rlpi_stop_matcher *m = make(n_stop ? stops : NULL, n_stop, stop_ids, n_ids, include);
        run_result r;
        run_ids(m, ids, n, &r, -1);
        rlpi_stop_matcher_free(m);
        if (r.stop_at != want_stop || r.text_len != want_len ||
            memcmp(r.text, want, want_len) != 0 ||
            r.matched != (want_idx >= 0 ? want_idx : -1) ||
            r.matched_id != (want_idx == -2 ? IM_END : -1)) {
            fprintf(stderr, "iter %d, text \"%s\", include %d, %zu stop ids, stops:", iter, text,
                    include, n_ids);
            for (size_t s = 0; s < n_stop; s++)
                fprintf(stderr, " \"%s\"", stops[s]);
            fail_msg("stopped at %d (want %d), text \"%s\" (want %zu bytes), matched %d/%d",
                     r.stop_at, want_stop, r.text, want_len, r.matched, (int)r.matched_id);
        }
        assert_int_equal(r.stream_len, r.text_len);
        assert_memory_equal(r.stream, r.text, r.text_len);
        /* U+FFFD only where a stop id cut a character */
        if (!memmem(want, want_len, REPL, 3))
            assert_false(r.bad_delta);
        else
            lossy_cuts++;
        /* while running: exactly the whole characters that can no longer
         * become part of a stop string were streamed, no more, no less */
        size_t last = r.stop_at >= 0 ? (size_t)r.stop_at : n;
        cum = 0;
        for (size_t i = 0; i < last && i < 256; i++) {
            cum += bytes_of[i];
            size_t c = whole_chars(text, cum);
            size_t hold = 0;
            for (size_t s = 0; s < n_stop && !include; s++) {
                size_t h = naive_hold(text, c, stops[s]);
                hold = h > hold ? h : hold;
            }
            if (r.streamed_after[i] != c - hold)
                fail_msg("iter %d after id %zu: streamed %zu, want %zu (text \"%s\")", iter, i,
                         r.streamed_after[i], c - hold, text);
        }
    }
    printf("random streams: %d stopped by a string, %d by an id (%d inside a character), %d ran "
           "out\n",
           stops_by_string, stops_by_id, lossy_cuts, no_stop);
    assert_true(stops_by_string > 100 && stops_by_id > 20 && no_stop > 20);
}

int main(void)
{
    const char *data = getenv("RLPOST_SHARED_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer.json", data ? data : "../shared/data");
    if (access(path, R_OK) != 0) {
        printf("skip: %s not present\n", path);
        return 77;
    }
    if (rlp_tokenizer_load(&g_tok, path) != RLP_OK) {
        fprintf(stderr, "%s: %s\n", path, rlp_error_last());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(case6_stop_string_across_tokens),
        cmocka_unit_test(stop_spanning_three_tokens),
        cmocka_unit_test(stop_ids_end_without_text),
        cmocka_unit_test(several_stop_strings),
        cmocka_unit_test(split_character_streams_whole),
        cmocka_unit_test(finish_releases_held_text),
        cmocka_unit_test(no_stop_stream_equals_decode),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(random_streams_match_naive_reference),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rlp_tokenizer_free(g_tok);
    return rc;
}
