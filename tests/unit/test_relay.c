/* The relay transport (RLP_TRANSPORT_RELAY) against a real HTTP parent
 * (tests/unit/relay_server.py: Range support and switchable faults, with a
 * count of the bytes it served): a version mirrored byte for byte in the
 * FILE layout; a transfer cut after K bytes resumes with a Range at K
 * (bytes served = size, not size + K), also across pulls from the part
 * left on disk; a flipped byte is caught by the file's CRC-32 and the file
 * fetched again (manifest version 1), or by its chunk's CRC-32 and only
 * that chunk onwards fetched again (version 2: received = size + 1 chunk),
 * also for a damaged part on disk; three bad copies are RLP_E_FORMAT; a parent naming an older version is
 * ignored; an unreachable parent is RLP_E_NETWORK naming its URL, and
 * with a fallback URL the fallback serves; the mirror keeps two versions; a version published by the FILE transport is
 * loaded into an engine through the mirror. Skips without python3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/atomic_file.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/http.h"
#include "sync/sync.h"
#include "model/policy.h"
#include "rollout/engine.h"
#include "tiny_model.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static rlp_context *ctx;
static char tmpdir[256], origin[300], base_url[64];
static pid_t server_pid = -1;

#define BIG (3u << 20) /* bytes of the large file of each version */

/* ---- files ---------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    uint8_t *x = read_all(a, &na), *y = read_all(b, &nb);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

#define CHUNK (1u << 20) /* chunk size of the version-2 manifests written here */

/* The bytes of big.bin in version v. */
static uint8_t *big_bytes(uint64_t v)
{
    uint8_t *big = malloc(BIG);
    uint64_t s = 0x9E3779B97F4A7C15u * (v + 1);
    for (size_t i = 0; i < BIG; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        big[i] = (uint8_t)s;
    }
    return big;
}

/* A hand-made version in the FILE layout: config.json and big.bin (BIG
 * pseudo-random bytes of seed v), with the manifest made the latest;
 * versions from 4 on have manifest version 2 (a CRC-32 per CHUNK). */
static void write_version(uint64_t v)
{
    char dir[400], path[500], json[2048];
    snprintf(dir, sizeof dir, "%s/v%" PRIu64, origin, v);
    assert_int_equal(mkdir(dir, 0755), 0);
    char cfg[64];
    int cn = snprintf(cfg, sizeof cfg, "{\"version\": %" PRIu64 "}\n", v);
    uint8_t *big = big_bytes(v);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(rlpi_atomic_write_file(path, cfg, (size_t)cn), RLP_OK);
    snprintf(path, sizeof path, "%s/big.bin", dir);
    assert_int_equal(rlpi_atomic_write_file(path, big, BIG), RLP_OK);
    char chunks[256] = "";
    if (v >= 4) { /* version 2: big.bin's 3 chunks, config.json's one */
        snprintf(chunks, sizeof chunks, ", \"chunks\": [\"%08x\", \"%08x\", \"%08x\"]", rlpi_crc32(0, big, CHUNK),
                 rlpi_crc32(0, big + CHUNK, CHUNK), rlpi_crc32(0, big + 2 * CHUNK, BIG - 2 * CHUNK));
    }
    char cfg_chunks[64] = "";
    if (v >= 4)
        snprintf(cfg_chunks, sizeof cfg_chunks, ", \"chunks\": [\"%08x\"]", rlpi_crc32(0, cfg, (size_t)cn));
    snprintf(json, sizeof json,
             "{\"format\": \"rlpost-weights\", \"manifest_version\": %d, %s\"version\": %" PRIu64 ", \"path\": \"v%" PRIu64
             "\", \"checksum\": \"crc32\", \"files\": [{\"name\": \"big.bin\", \"size\": %u, \"crc32\": \"%08x\"%s}, "
             "{\"name\": \"config.json\", \"size\": %d, \"crc32\": \"%08x\"%s}], \"created_unix\": 0}",
             v >= 4 ? 2 : 1, v >= 4 ? "\"chunk_size\": 1048576, " : "", v, v, BIG, rlpi_crc32(0, big, BIG), chunks, cn,
             rlpi_crc32(0, cfg, (size_t)cn), cfg_chunks);
    free(big);
    snprintf(path, sizeof path, "%s/latest.json", origin);
    assert_int_equal(rlpi_atomic_write_file(path, json, strlen(json)), RLP_OK);
}

/* Points the origin's manifest at version v again (its folder is kept). */
static void set_latest(uint64_t v, const char *saved)
{
    char path[400];
    snprintf(path, sizeof path, "%s/latest.json", origin);
    size_t n;
    char src[400];
    snprintf(src, sizeof src, "%s/%s", tmpdir, saved);
    uint8_t *b = read_all(src, &n);
    assert_non_null(b);
    assert_int_equal(rlpi_atomic_write_file(path, b, n), RLP_OK);
    free(b);
    (void)v;
}

static void save_latest(const char *as)
{
    char src[400], dst[400];
    snprintf(src, sizeof src, "%s/latest.json", origin);
    snprintf(dst, sizeof dst, "%s/%s", tmpdir, as);
    size_t n;
    uint8_t *b = read_all(src, &n);
    assert_non_null(b);
    assert_int_equal(rlpi_atomic_write_file(dst, b, n), RLP_OK);
    free(b);
}

/* ---- the parent ------------------------------------------------------------------- */

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    rlpi_http_response_append(ud, p, sz * n);
    return sz * n;
}

static json_t *ctl(const char *method_body)
{
    CURL *e = curl_easy_init();
    char url[128];
    rlpi_http_response r = {0};
    rlpi_http_response_reset(&r, 1 << 20);
    snprintf(url, sizeof url, "%s/ctl%s", base_url, method_body ? "" : "/stats");
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (method_body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, method_body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    json_t *j = json_loadb(r.data, r.len, 0, NULL);
    rlpi_http_response_free(&r);
    assert_non_null(j);
    return j;
}

static int64_t served(json_t *stats, const char *key, const char *rel)
{
    json_t *v = json_object_get(json_object_get(stats, key), rel);
    return v ? json_integer_value(v) : 0;
}

/* ---- synchronizers ---------------------------------------------------------------- */

static char log_text[4096];

static void on_log(int level, const char *msg, void *payload)
{
    (void)level, (void)payload;
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "%s\n", msg);
}

static rlp_synchronizer *relay(const char *mirror, const char *url, uint32_t retries)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, mirror);
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.transport = RLP_TRANSPORT_RELAY;
    o.dir = dir;
    o.urls = &url;
    o.n_urls = 1;
    o.timeout_ms = 5000;
    o.max_retries = retries;
    o.keep_versions = 2; /* the current and the previous version */
    o.log_fn = on_log;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    return s;
}

static uint64_t mirror_version(rlp_synchronizer *s)
{
    uint64_t v = 0;
    assert_int_equal(rlp_synchronizer_version(&v, s), RLP_OK);
    return v;
}

static void assert_mirrored(const char *mirror, uint64_t v)
{
    char a[500], b[500];
    const char *names[] = {"big.bin", "config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/v%" PRIu64 "/%s", origin, v, names[i]);
        snprintf(b, sizeof b, "%s/%s/v%" PRIu64 "/%s", tmpdir, mirror, v, names[i]);
        assert_true(same_file(a, b));
    }
}

/* Names of the mirror's entries, sorted, as one string ("latest.json v2 v3"). */
static void listing(const char *mirror, char *out, size_t n)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, mirror);
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (strcmp(ents[i]->d_name, ".") && strcmp(ents[i]->d_name, "..")) {
            size_t len = strlen(out);
            snprintf(out + len, n - len, "%s%s", len ? " " : "", ents[i]->d_name);
        }
        free(ents[i]);
    }
    free(ents);
}

/* ---- tests ------------------------------------------------------------------------ */

/* The file CRC that FILE publishes combine from chunk CRCs equals one pass. */
static void test_crc_combine(void **state)
{
    (void)state;
    uint8_t *big = big_bytes(99);
    uint32_t whole = rlpi_crc32(0, big, BIG);
    for (size_t cut = 0; cut <= BIG; cut += BIG / 7 + 1) {
        uint32_t a = rlpi_crc32(0, big, cut), b = rlpi_crc32(0, big + cut, BIG - cut);
        assert_int_equal(rlpi_crc32_combine(a, b, BIG - cut), whole);
    }
    assert_int_equal(rlpi_crc32_combine(rlpi_crc32(0, "12345", 5), rlpi_crc32(0, "6789", 4), 4), 0xcbf43926u);
    assert_int_equal(rlpi_crc32_combine(0x1234u, 0, 0), 0x1234u);
    /* rlpi_file_crc_chunks: chunks and the combined file CRC */
    char path[400];
    snprintf(path, sizeof path, "%s/crc.bin", tmpdir);
    assert_int_equal(rlpi_atomic_write_file(path, big, BIG), RLP_OK);
    int fd = open(path, O_RDONLY);
    uint32_t crc, *chunks;
    uint64_t size;
    size_t n;
    assert_int_equal(rlpi_file_crc_chunks(fd, path, CHUNK + 3, &crc, &size, &chunks, &n), RLP_OK);
    close(fd);
    assert_int_equal(crc, whole);
    assert_int_equal(size, BIG);
    assert_int_equal(n, (BIG + CHUNK + 2) / (CHUNK + 3));
    for (size_t k = 0; k < n; k++) {
        size_t from = k * (CHUNK + 3), len = BIG - from < CHUNK + 3 ? BIG - from : CHUNK + 3;
        assert_int_equal(chunks[k], rlpi_crc32(0, big + from, len));
    }
    free(chunks);
    unlink(path);
    free(big);
}

static void test_mirror_and_resume(void **state)
{
    (void)state;
    const char *url = base_url;
    rlp_synchronizer *s = relay("m1", url, 3);
    assert_int_equal(rlp_synchronizer_publish(s, NULL), RLP_E_INVALID_ARG);

    /* a version, byte for byte, with the parent's manifest */
    write_version(1);
    save_latest("latest1.json");
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 1);
    assert_mirrored("m1", 1);
    char a[500], b[500];
    snprintf(a, sizeof a, "%s/latest.json", origin);
    snprintf(b, sizeof b, "%s/m1/latest.json", tmpdir);
    assert_true(same_file(a, b));
    rlp_sync_stats st = {0};
    rlp_synchronizer_stats(&st, s);
    assert_true(st.bytes_published >= BIG);

    /* nothing newer: only the manifest is asked for */
    json_decref(ctl("{\"reset\": true}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    json_t *j = ctl(NULL);
    assert_int_equal(served(j, "requests", "latest.json"), 1);
    assert_int_equal(json_object_size(json_object_get(j, "requests")), 1);
    json_decref(j);

    /* cut after K bytes: the transfer resumes at K, it does not restart */
    const unsigned K = 1000003;
    write_version(2);
    json_decref(ctl("{\"reset\": true, \"cut\": {\"name\": \"v2/big.bin\", \"after\": 1000003}}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 2);
    assert_mirrored("m1", 2);
    j = ctl(NULL);
    assert_int_equal(served(j, "bytes", "v2/big.bin"), BIG); /* K, then BIG - K; a restart would be BIG + K */
    assert_int_equal(served(j, "requests", "v2/big.bin"), 2);
    json_t *r0 = json_array_get(json_object_get(j, "ranges"), 0);
    assert_string_equal(json_string_value(json_array_get(r0, 0)), "v2/big.bin");
    assert_int_equal(json_integer_value(json_array_get(r0, 1)), K);
    json_decref(j);

    /* cut, then the parent answers 503 past the retries: the pull fails
     * naming the URL, the part stays on disk, and the next pull resumes
     * from it */
    write_version(3);
    save_latest("latest3.json");
    json_decref(ctl("{\"reset\": true, \"cut\": {\"name\": \"v3/big.bin\", \"after\": 1000003, \"then_503\": 50}}"));
    rlp_synchronizer *s1 = relay("m1", url, 1);
    assert_int_equal(rlp_synchronizer_pull(s1, NULL), RLP_E_NETWORK);
    assert_non_null(strstr(rlp_error_last(), "/v1/rlpost/weights/v3/big.bin"));
    assert_non_null(strstr(rlp_error_last(), "503"));
    assert_int_equal(mirror_version(s1), 2);
    char part[500];
    snprintf(part, sizeof part, "%s/m1/.v3.part/big.bin", tmpdir);
    struct stat pst;
    assert_int_equal(stat(part, &pst), 0);
    assert_int_equal(pst.st_size, K);
    rlp_synchronizer_free(s1);
    json_decref(ctl("{\"reset\": true}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_mirrored("m1", 3);
    j = ctl(NULL);
    assert_int_equal(served(j, "bytes", "v3/big.bin"), BIG - K);
    json_decref(j);

    /* the mirror keeps the current and the previous version, no parts */
    char ls[512];
    listing("m1", ls, sizeof ls);
    assert_string_equal(ls, "latest.json v2 v3");

    /* a parent behind the mirror is ignored */
    set_latest(1, "latest1.json");
    json_decref(ctl("{\"reset\": true}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 3);
    j = ctl(NULL);
    assert_int_equal(json_object_size(json_object_get(j, "requests")), 1); /* latest.json only */
    json_decref(j);
    rlp_synchronizer_free(s);
}

static uint64_t received(const rlp_synchronizer *s)
{
    rlp_sync_stats st = {0};
    rlp_synchronizer_stats(&st, s);
    return st.bytes_published;
}

static size_t origin_manifest_bytes(void)
{
    char p[400];
    struct stat st;
    snprintf(p, sizeof p, "%s/latest.json", origin);
    assert_int_equal(stat(p, &st), 0);
    return (size_t)st.st_size;
}

static void test_corruption(void **state)
{
    (void)state;
    rlp_synchronizer *s = relay("m2", base_url, 3);
    /* manifest version 1 (a CRC-32 per file): one flipped byte is caught
     * when the file is complete, and the whole file is fetched again */
    set_latest(3, "latest3.json");
    log_text[0] = '\0';
    json_decref(ctl("{\"reset\": true, \"corrupt\": {\"name\": \"v3/big.bin\", \"offset\": 123457, \"times\": 1}}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 3);
    assert_mirrored("m2", 3);
    json_t *j = ctl(NULL);
    assert_int_equal(served(j, "bytes", "v3/big.bin"), 2 * BIG);
    json_decref(j);
    assert_non_null(strstr(log_text, "CRC-32"));

    /* version 2 (a CRC-32 per 1 MiB chunk): a byte flipped in the second
     * chunk stops the transfer at that chunk's end, and only that chunk
     * onwards comes again (Range from 1 MiB): received = size + 1 chunk */
    write_version(4);
    log_text[0] = '\0';
    uint64_t before = received(s);
    json_decref(ctl("{\"reset\": true, \"corrupt\": {\"name\": \"v4/big.bin\", \"offset\": 1572871, \"times\": 1}}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 4);
    assert_mirrored("m2", 4);
    assert_int_equal(received(s) - before, BIG + CHUNK + strlen("{\"version\": 4}\n") + origin_manifest_bytes());
    j = ctl(NULL);
    json_t *r0 = json_array_get(json_object_get(j, "ranges"), 0);
    assert_string_equal(json_string_value(json_array_get(r0, 0)), "v4/big.bin");
    assert_int_equal(json_integer_value(json_array_get(r0, 1)), CHUNK);
    json_decref(j);
    assert_non_null(strstr(log_text, "the chunk at byte 1048576 failed its CRC-32"));

    /* bad every time: RLP_E_FORMAT after 3 tries, the mirror stays at 4 */
    write_version(5);
    json_decref(ctl("{\"reset\": true, \"corrupt\": {\"name\": \"v5/big.bin\", \"offset\": 7, \"times\": 10}}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "v5/big.bin"));
    assert_non_null(strstr(rlp_error_last(), "chunk at byte 0"));
    assert_int_equal(mirror_version(s), 4);
    json_decref(ctl("{\"reset\": true}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 5);
    assert_mirrored("m2", 5);

    /* a part left on disk whose second chunk is damaged: the first chunk is
     * kept, the download resumes at the damaged one */
    write_version(6);
    char part[500];
    snprintf(part, sizeof part, "%s/m2/.v6.part", tmpdir);
    assert_int_equal(mkdir(part, 0755), 0);
    snprintf(part, sizeof part, "%s/m2/.v6.part/big.bin", tmpdir);
    uint8_t *big = big_bytes(6);
    big[CHUNK + 5] ^= 1;
    assert_int_equal(rlpi_atomic_write_file(part, big, 2 * CHUNK + 100), RLP_OK);
    free(big);
    json_decref(ctl("{\"reset\": true}"));
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_mirrored("m2", 6);
    j = ctl(NULL);
    r0 = json_array_get(json_object_get(j, "ranges"), 0);
    assert_int_equal(json_integer_value(json_array_get(r0, 1)), CHUNK);
    assert_int_equal(served(j, "bytes", "v6/big.bin"), BIG - CHUNK);
    json_decref(j);
    rlp_synchronizer_free(s);

    /* nobody there: RLP_E_NETWORK naming the URL */
    rlp_synchronizer *dead = relay("m3", "http://127.0.0.1:1", 1);
    assert_int_equal(rlp_synchronizer_pull(dead, NULL), RLP_E_NETWORK);
    assert_non_null(strstr(rlp_error_last(), "http://127.0.0.1:1/v1/rlpost/weights/latest.json"));
    rlp_synchronizer_free(dead);

    /* a dead parent with a fallback (the grandparent, the origin): the
     * next URL serves, with a warning naming both */
    char dir[400];
    snprintf(dir, sizeof dir, "%s/m3", tmpdir);
    const char *urls[] = {"http://127.0.0.1:1", base_url};
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.transport = RLP_TRANSPORT_RELAY;
    o.dir = dir;
    o.urls = urls;
    o.n_urls = 2;
    o.max_retries = 1;
    o.timeout_ms = 5000;
    o.log_fn = on_log;
    log_text[0] = '\0';
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(mirror_version(s), 6);
    assert_mirrored("m3", 6);
    assert_non_null(strstr(log_text, "127.0.0.1:1"));
    assert_non_null(strstr(log_text, base_url));
    rlp_synchronizer_free(s);
}

/* A version the FILE transport published reaches an engine through the mirror. */
static void test_engine_load(void **state)
{
    (void)state;
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", false);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, 77), RLP_OK);
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    rlp_policy *p, *q;
    assert_int_equal(rlpi_policy_create(&p, ctx, &cfg, &w, &po), RLP_OK);
    rlpi_weights_free(&w);
    assert_int_equal(tiny_weights(&cfg, &w, 5), RLP_OK);
    assert_int_equal(rlpi_policy_create(&q, ctx, &cfg, &w, &po), RLP_OK);
    rlpi_weights_free(&w);
    p->version = 10;
    rlp_sync_options fo = RLP_SYNC_OPTIONS_INIT;
    fo.transport = RLP_TRANSPORT_FILE;
    fo.dir = origin;
    fo.keep_versions = 100;
    rlp_synchronizer *pub;
    assert_int_equal(rlp_synchronizer_create(&pub, &fo), RLP_OK);
    assert_int_equal(rlp_synchronizer_publish(pub, p), RLP_OK);

    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = 2;
    ro.max_seq_len = 16;
    rlp_rollout_engine *e;
    assert_int_equal(rlp_rollout_engine_create(&e, q, &ro), RLP_OK);
    rlp_synchronizer *s = relay("m4", base_url, 3);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_E_STATE); /* a relay only pulls */
    assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK);
    uint64_t v = 0;
    rlp_rollout_engine_version(&v, e);
    assert_int_equal(v, 10);
    rlpi_weights a, b;
    assert_int_equal(rlpi_transformer_export(e->policy->tf, &a), RLP_OK);
    assert_int_equal(rlpi_transformer_export(p->tf, &b), RLP_OK);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        const rlpi_tensor *x = &a.tensors[i], *y = rlpi_weights_find(&b, x->name);
        assert_non_null(y);
        assert_memory_equal(rlpi_tensor_data(&a, x), rlpi_tensor_data(&b, y), x->n_elems * sizeof(float));
    }
    rlpi_weights_free(&a);
    rlpi_weights_free(&b);
    rlp_sync_stats st = {0};
    rlp_synchronizer_stats(&st, s);
    assert_int_equal(st.weight_loads, 1);
    rlp_synchronizer_free(s);
    rlp_synchronizer_free(pub);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
    rlp_policy_free(q);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 1;
    if (rlp_context_create(&ctx, &o) != RLP_OK)
        return -1;
    snprintf(tmpdir, sizeof tmpdir, "%s/rlp_relay_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(origin, sizeof origin, "%s/origin", tmpdir);
    mkdir(origin, 0755);
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    char script[600], port_file[400];
    snprintf(script, sizeof script, "%s/tests/unit/relay_server.py", root ? root : ".");
    snprintf(port_file, sizeof port_file, "%s/port", tmpdir);
    if (access(script, R_OK) != 0 || system("python3 -c 'import http.server' 2>/dev/null") != 0) {
        fprintf(stderr, "relay test: no python3 or %s: skipped\n", script);
        exit(77);
    }
    server_pid = fork();
    if (server_pid == 0) {
        execlp("python3", "python3", script, origin, port_file, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(port_file, "r");
        int port = 0;
        if (f && fscanf(f, "%d", &port) == 1 && port > 0) {
            fclose(f);
            snprintf(base_url, sizeof base_url, "http://127.0.0.1:%d", port);
            return 0;
        }
        if (f)
            fclose(f);
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int teardown(void **state)
{
    (void)state;
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        waitpid(server_pid, NULL, 0);
    }
    rm_tree(tmpdir);
    rlp_context_free(ctx);
    return 0;
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc_combine),
        cmocka_unit_test(test_mirror_and_resume),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_engine_load),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
