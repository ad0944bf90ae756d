/* The read-only weights endpoint of `rlpost serve` / `rlpost weights-serve`
 * (examples/rlpost/serve_weights.c), without a server: which paths open
 * (latest.json, v<N>/<name>) and which are refused (.., absolute, hidden,
 * symlinks to inside or outside the folder, folders, names with a slash),
 * the version in progress (.relay-next.json: its manifest served, its
 * part files opened as growing with the manifest's size, a reader that
 * waits for bytes), and Range parsing against RFC 9110 (a-, a-b, -n,
 * clamping, several ranges, junk, 416 cases). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve.h"

#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[256];

static void put(const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int open_status(const char *rel, uint64_t *size, bool *manifest, bool *growing)
{
    int fd = -1;
    int st = serve_weights_open(root, rel, &fd, size, manifest, growing);
    if (fd >= 0)
        close(fd);
    return st;
}

static void test_paths(void **state)
{
    (void)state;
    uint64_t size = 0;
    bool manifest, growing;
    assert_int_equal(open_status("latest.json", &size, &manifest, &growing), 200);
    assert_true(manifest);
    assert_false(growing);
    assert_int_equal(size, strlen("{\"version\": 3}"));
    assert_int_equal(open_status("v3/model.safetensors", &size, &manifest, &growing), 200);
    assert_false(manifest);
    assert_int_equal(size, 5);
    const char *refused[] = {"../secret", "v3/../latest.json", "/etc/hostname", ".rlpost-serve-token", "v3/.hidden",
                             "v3", "v3/", "", "v3/sub/x", "vx/model.safetensors", "v/model.safetensors",
                             "v3/link_out", "v3/link_in", "v9/hostname", "config.json", "v3\\..\\latest.json",
                             "v123456789012345678901/a"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int st = open_status(refused[i], &size, &manifest, &growing);
        if (st != 404)
            fail_msg("%s: %d, not 404", refused[i], st);
    }
}

/* The relay's version in progress: manifest, growing part file, reader. */
typedef struct writer_arg {
    const char *path;
    unsigned delay_ms;
} writer_arg;

static void *append_later(void *arg)
{
    writer_arg *w = arg;
    struct timespec ts = {0, (long)w->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    FILE *f = fopen(w->path, "a");
    fputs("world", f);
    fclose(f);
    return NULL;
}

static void test_in_progress(void **state)
{
    (void)state;
    char p[512];
    snprintf(p, sizeof p, "%s/.v4.part", root);
    assert_int_equal(mkdir(p, 0755), 0);
    put(".v4.part/big.bin", "hello");
    put(".relay-next.json",
        "{\"version\": 4, \"path\": \"v4\", "
        "\"files\": [{\"name\": \"big.bin\", \"size\": 10, \"crc32\": \"00000000\"}]}");
    uint64_t size = 0;
    bool manifest, growing;
    int fd = -1;
    /* latest.json is the newer manifest, the one in progress */
    assert_int_equal(serve_weights_open(root, "latest.json", &fd, &size, &manifest, &growing), 200);
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    assert_non_null(strstr(buf, "\"version\": 4"));
    /* a file of v4 not yet complete: its final size, growing */
    assert_int_equal(serve_weights_open(root, "v4/big.bin", &fd, &size, &manifest, &growing), 200);
    assert_true(growing);
    assert_int_equal(size, 10);
    assert_int_equal(serve_weights_read(root, 4, fd, 0, buf, 5), 5);
    assert_memory_equal(buf, "hello", 5);
    /* past what is there: waits for the writer */
    snprintf(p, sizeof p, "%s/.v4.part/big.bin", root);
    writer_arg w = {p, 100};
    pthread_t t;
    pthread_create(&t, NULL, append_later, &w);
    assert_int_equal(serve_weights_read(root, 4, fd, 5, buf, 16), 5);
    assert_memory_equal(buf, "world", 5);
    pthread_join(t, NULL);
    /* the relay client gives v4 up (a newer version is named): a reader
     * waiting past the end stops at once, not after 30 s */
    put(".relay-next.json", "{\"version\": 6, \"path\": \"v6\", \"files\": []}");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(serve_weights_read(root, 4, fd, 10, buf, 16), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9 < 2.0);
    put(".relay-next.json",
        "{\"version\": 4, \"path\": \"v4\", "
        "\"files\": [{\"name\": \"big.bin\", \"size\": 10, \"crc32\": \"00000000\"}]}");
    close(fd);
    /* a file the manifest does not list, or another version: refused */
    assert_int_equal(open_status("v4/other.bin", &size, &manifest, &growing), 404);
    assert_int_equal(open_status("v5/big.bin", &size, &manifest, &growing), 404);
    /* complete: renamed to v4, served whole from there */
    char q[512];
    snprintf(q, sizeof q, "%s/v4", root);
    snprintf(p, sizeof p, "%s/.v4.part", root);
    assert_int_equal(rename(p, q), 0);
    assert_int_equal(open_status("v4/big.bin", &size, &manifest, &growing), 200);
    assert_false(growing);
    assert_int_equal(size, 10);
    /* an older version in progress never hides latest.json */
    put(".relay-next.json", "{\"version\": 2, \"path\": \"v2\", \"files\": []}");
    assert_int_equal(serve_weights_open(root, "latest.json", &fd, &size, &manifest, &growing), 200);
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    assert_string_equal(buf, "{\"version\": 3}");
}

static void test_ranges(void **state)
{
    (void)state;
    uint64_t a = 0, b = 0;
    assert_int_equal(serve_range_parse(NULL, 100, &a, &b), 0);
    assert_int_equal(serve_range_parse("bytes=10-", 100, &a, &b), 1);
    assert_true(a == 10 && b == 99);
    assert_int_equal(serve_range_parse("bytes=10-19", 100, &a, &b), 1);
    assert_true(a == 10 && b == 19);
    assert_int_equal(serve_range_parse("bytes=90-500", 100, &a, &b), 1); /* clamped */
    assert_true(a == 90 && b == 99);
    assert_int_equal(serve_range_parse("bytes=-10", 100, &a, &b), 1);
    assert_true(a == 90 && b == 99);
    assert_int_equal(serve_range_parse("bytes=-500", 100, &a, &b), 1);
    assert_true(a == 0 && b == 99);
    assert_int_equal(serve_range_parse("bytes=99-99", 100, &a, &b), 1);
    assert_true(a == 99 && b == 99);
    assert_int_equal(serve_range_parse("bytes=100-", 100, &a, &b), -1);
    assert_int_equal(serve_range_parse("bytes=0-", 0, &a, &b), -1);
    assert_int_equal(serve_range_parse("bytes=-0", 100, &a, &b), -1);
    /* ignored: the whole file */
    const char *whole[] = {"bytes=0-5,10-20", "items=0-5", "bytes=5", "bytes=a-", "bytes=20-10", "bytes=-",
                           "bytes= 1-2", "bytes=+1-2", "bytes=99999999999999999999-", "bytes=1-x"};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (serve_range_parse(whole[i], 100, &a, &b) != 0)
            fail_msg("%s: not ignored", whole[i]);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/rlp_sw_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root))
        return -1;
    char p[512], outside[512];
    snprintf(p, sizeof p, "%s/v3", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/v3/sub", root);
    mkdir(p, 0755);
    put("latest.json", "{\"version\": 3}");
    put("v3/model.safetensors", "12345");
    put("v3/.hidden", "x");
    put("v3/sub/x", "x");
    put(".rlpost-serve-token", "secret");
    put("config.json", "{}");
    snprintf(outside, sizeof outside, "%s.secret", root);
    FILE *f = fopen(outside, "w");
    fputs("secret", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/v3/link_out", root);
    if (symlink(outside, p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/v3/link_in", root);
    if (symlink("model.safetensors", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/v9", root);
    if (symlink("/etc", p) != 0)
        return -1;
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    char outside[512];
    snprintf(outside, sizeof outside, "%s.secret", root);
    unlink(outside);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_in_progress),
        cmocka_unit_test(test_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
