/* Single-thread dequantization throughput per ggml type (elements/s and
 * input MB/s) over 16M elements of random valid blocks, plus a memcpy of
 * the fp32 output size as the same-run baseline. Usage: bench_dequant [M elems]. */
#include "core/error.h"
#include "model/quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 16) << 20;
    static const uint32_t types[] = {RLPI_GGML_F32,  RLPI_GGML_F16,  RLPI_GGML_BF16, RLPI_GGML_Q8_0,
                                     RLPI_GGML_Q4_0, RLPI_GGML_Q4_1, RLPI_GGML_Q5_0, RLPI_GGML_Q5_1,
                                     RLPI_GGML_Q4_K, RLPI_GGML_Q5_K, RLPI_GGML_Q6_K};
    float *dst = malloc(n * sizeof *dst), *cpy = malloc(n * sizeof *cpy);
    uint8_t *src = malloc(n * 4);
    if (!dst || !cpy || !src)
        return 1;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n * 4; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (uint8_t)x;
    }
    memset(cpy, 1, n * sizeof *cpy);
    memset(dst, 0, n * sizeof *dst); /* fault the pages in before timing */
    double t0, base = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        t0 = now();
        memcpy(dst, cpy, n * sizeof *dst);
        double dt = now() - t0;
        base = dt < base ? dt : base;
    }
    printf("{\"bench\":\"dequant\",\"elems\":%zu,\"memcpy_fp32_melem_s\":%.0f,\"types\":[\n", n, n / base / 1e6);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const rlpi_ggml_type_info *ti = rlpi_ggml_type(types[k]);
        size_t bytes = n / ti->blck * ti->type_size;
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            t0 = now();
            if (rlpi_dequantize(types[k], src, bytes, dst, n) != RLP_OK) {
                fprintf(stderr, "%s: %s\n", ti->name, rlp_error_last());
                return 1;
            }
            double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        printf("  {\"type\":\"%s\",\"melem_s\":%.0f,\"in_mb_s\":%.0f,\"vs_memcpy\":%.2f}%s\n", ti->name,
               n / best / 1e6, bytes / best / 1e6, base / best, k + 1 < sizeof types / sizeof types[0] ? "," : "");
    }
    printf("]}\n");
    free(dst);
    free(cpy);
    free(src);
    return 0;
}
