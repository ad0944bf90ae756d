/* The CUDA backend against the CPU backend: buffer round trips, fill, and
 * strided block copy, GEMM over random shapes and every transpose combination (relative error
 * within 1e-5·√k of the CPU result; cuBLAS runs in strict fp32 mode), then
 * the same shapes with both backends in RLP_MATMUL_BF16 within the same
 * bound (both multiply the same bf16-rounded operands, whose products are
 * exact in fp32: only the order of the fp32 sums differs). Exits 77
 * (skipped) where no GPU is visible. */
#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                   \
    do {                                                                           \
        if (!(x)) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,      \
                    rlp_error_last());                                             \
            return 1;                                                              \
        }                                                                          \
    } while (0)

int main(void)
{
    if (rlpi_backend_cuda_device_count() == 0) {
        printf("skipped: %s\n", rlp_error_last());
        return 77;
    }
    rlpi_backend *gpu, *cpu;
    CHECK(rlpi_backend_cuda_create(&gpu, 0) == RLP_OK);
    CHECK(rlpi_backend_cpu_create(&cpu, 2) == RLP_OK);
    printf("%s\n", gpu->description);

    /* round trip and fill */
    float host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (float)i * 0.5f;
    rlpi_buffer *g1, *g2;
    CHECK(rlpi_buffer_alloc(gpu, sizeof host, &g1) == RLP_OK);
    CHECK(rlpi_buffer_alloc(gpu, sizeof host, &g2) == RLP_OK);
    CHECK(rlpi_buffer_upload(g1, 0, host, sizeof host) == RLP_OK);
    CHECK(rlpi_buffer_copy(g2, 0, g1, 0, sizeof host) == RLP_OK);
    CHECK(rlpi_buffer_fill_f32(g2, 10, 5, -1.0f) == RLP_OK);
    CHECK(rlpi_buffer_download(g2, 0, back, sizeof back) == RLP_OK);
    for (int i = 0; i < 1000; i++)
        CHECK(back[i] == (i >= 10 && i < 15 ? -1.0f : host[i]));
    /* strided block copy: columns [3, 7) of a (100, 10) matrix into a (100, 4) one */
    CHECK(rlpi_buffer_fill_f32(g2, 0, 1000, 0.0f) == RLP_OK);
    CHECK(rlpi_buffer_copy_2d(g2, 0, 16, g1, 12, 40, 16, 100) == RLP_OK);
    CHECK(rlpi_buffer_download(g2, 0, back, sizeof back) == RLP_OK);
    for (int i = 0; i < 1000; i++)
        CHECK(back[i] == (i < 400 ? host[(i / 4) * 10 + 3 + i % 4] : 0.0f));
    rlpi_buffer_free(g1);
    rlpi_buffer_free(g2);

    double worst[2] = {0, 0};
    for (int mode = 0; mode < 2; mode++) {
        gpu->matmul = cpu->matmul = mode ? RLP_MATMUL_BF16 : RLP_MATMUL_FP32;
        rlpi_rng rng;
        rlpi_rng_seed(&rng, 99, 0);
        for (int rep = 0; rep < 40; rep++) {
            int ta = rep & 1, tb = (rep >> 1) & 1;
            int64_t m = 1 + (int64_t)rlpi_rng_below(&rng, 300), n = 1 + (int64_t)rlpi_rng_below(&rng, 300);
            int64_t k = 1 + (int64_t)rlpi_rng_below(&rng, 300), batch = 1 + (int64_t)rlpi_rng_below(&rng, 3);
            int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            size_t na = (size_t)(batch * ar * ac), nb = (size_t)(batch * br * bc), nc = (size_t)(batch * m * n);
            float *ha = malloc(na * 4), *hb = malloc(nb * 4), *hc = malloc(nc * 4), *rc = malloc(nc * 4);
            for (size_t i = 0; i < na; i++) ha[i] = (float)rlpi_rng_f64(&rng) - 0.5f;
            for (size_t i = 0; i < nb; i++) hb[i] = (float)rlpi_rng_f64(&rng) - 0.5f;
            rlpi_backend *bes[2] = {cpu, gpu};
            float *outs[2] = {hc, rc};
            for (int b = 0; b < 2; b++) {
                rlpi_buffer *A, *B, *C;
                CHECK(rlpi_buffer_alloc(bes[b], na * 4, &A) == RLP_OK);
                CHECK(rlpi_buffer_alloc(bes[b], nb * 4, &B) == RLP_OK);
                CHECK(rlpi_buffer_alloc(bes[b], nc * 4, &C) == RLP_OK);
                CHECK(rlpi_buffer_upload(A, 0, ha, na * 4) == RLP_OK);
                CHECK(rlpi_buffer_upload(B, 0, hb, nb * 4) == RLP_OK);
                rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f,
                               .beta = 0.0f, .batch = batch,
                               .a = {A, 0, ac, ar * ac}, .b = {B, 0, bc, br * bc}, .c = {C, 0, n, m * n}};
                CHECK(rlpi_gemm_f32(bes[b], &g) == RLP_OK);
                CHECK(rlpi_buffer_download(C, 0, outs[b], nc * 4) == RLP_OK);
                rlpi_buffer_free(A);
                rlpi_buffer_free(B);
                rlpi_buffer_free(C);
            }
            for (size_t i = 0; i < nc; i++) {
                float r = fabsf(hc[i] - rc[i]) / ((1.0f + fabsf(hc[i])) * sqrtf((float)k));
                CHECK(r <= 1e-5f);
                worst[mode] = fmax(worst[mode], r);
            }
            free(ha); free(hb); free(hc); free(rc);
        }
    }
    printf("worst |gpu - cpu| / ((1 + |cpu|)·sqrt(k)): fp32 %.2e, bf16 %.2e (tol 1e-5)\n", worst[0], worst[1]);
    rlpi_backend_destroy(gpu);
    rlpi_backend_destroy(cpu);
    printf("CUDA backend matches CPU on 40 GEMM shapes in fp32 and in bf16\n");
    return 0;
}
