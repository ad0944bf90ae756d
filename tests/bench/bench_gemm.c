/* GEMM throughput of the CPU backend at the transformer shapes of the main
 * job (SmolLM2-135M: d=576, ffn=1536, 9 heads of 64, a 8192-row vocabulary
 * chunk), forward and both backward GEMMs, as GFLOP/s and as a ratio to the
 * single-core fp32 FMA peak measured in the same run by a register-blocked
 * FMA loop. Each shape also runs with the backend in RLP_MATMUL_BF16 (the
 * oneDNN AMX/AVX512-BF16 path where there is one, else the emulation: the
 * header line says which), with the bf16/fp32 ratio, and the share of a
 * bf16 product that converting its weight operand (B) to bf16 costs — the
 * part a cached bf16 copy of the weights would save.
 * Usage: bench_gemm [threads] [tokens]. */
#include "../../examples/blas_kernels.h"
#include "backend/backend.h"
#include "backend/cpu_bf16.h"
#include "core/error.h"
#include "core/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Peak probe: 12 independent FMA chains (enough to cover FMA latency × 2
 * ports), with explicit FMA intrinsics so that no compiler flag decides
 * whether multiply-add is fused. The AVX-512 and AVX2 probes both run where
 * supported; the peak is the faster. */
#if defined(__x86_64__)
#include <immintrin.h>
#define CHAINS 12
__attribute__((target("avx2,fma"))) static double peak_avx2(long iters)
{
    __m256 acc[CHAINS];
    __m256 y = _mm256_set1_ps(0.999999f), x = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_set1_ps((float)i);
    double t0 = now();
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) /* unrolled: acc[] lives in registers */
            acc[i] = _mm256_fmadd_ps(acc[i], y, x);
    }
    double dt = now() - t0;
    float sink[8];
    for (int i = 1; i < CHAINS; i++)
        acc[0] = _mm256_add_ps(acc[0], acc[i]);
    _mm256_storeu_ps(sink, acc[0]);
    if (sink[0] == 12345.0f)
        printf(" ");
    return 2.0 * 8 * CHAINS * (double)iters / dt / 1e9;
}
__attribute__((target("avx512f"))) static double peak_avx512(long iters)
{
    __m512 acc[CHAINS];
    __m512 y = _mm512_set1_ps(0.999999f), x = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    double t0 = now();
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], y, x);
    }
    double dt = now() - t0;
    for (int i = 1; i < CHAINS; i++)
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    if (_mm512_reduce_add_ps(acc[0]) == 12345.0f)
        printf(" ");
    return 2.0 * 16 * CHAINS * (double)iters / dt / 1e9;
}
#endif

static double single_core_peak(void)
{
    double best = 0;
#if defined(__x86_64__)
    for (int r = 0; r < 3; r++) {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            double p = peak_avx2(20000000);
            best = p > best ? p : best;
        }
        if (__builtin_cpu_supports("avx512f")) {
            double p = peak_avx512(20000000);
            best = p > best ? p : best;
        }
    }
#endif
    return best;
}

typedef struct shape {
    const char *name;
    int ta, tb;
    int64_t m, n, k;
} shape;

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv); /* the kernels rlpost runs */
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int64_t T = argc > 2 ? atoll(argv[2]) : 512;
    double peak = single_core_peak();
    printf("single-core fp32 FMA peak: %.1f GFLOP/s (AVX2/AVX-512 FMA probe, measured now; 0 = no probe for this CPU)\n", peak);
    const shape shapes[] = {
        {"qkv   fwd  x·Wᵀ (T,576)x(960,576)ᵀ", 0, 1, T, 960, 576},
        {"o     fwd  (T,576)x(576,576)ᵀ", 0, 1, T, 576, 576},
        {"gate+up fwd (T,576)x(3072,576)ᵀ", 0, 1, T, 3072, 576},
        {"down  fwd  (T,1536)x(576,1536)ᵀ", 0, 1, T, 576, 1536},
        {"head  fwd  (T,576)x(8192,576)ᵀ", 0, 1, T, 8192, 576},
        {"down  dX   (T,576)x(576,1536)", 0, 0, T, 1536, 576},
        {"down  dW   (T,576)ᵀx(T,1536)", 1, 0, 576, 1536, T},
        {"head  dW   (T,8192)ᵀx(T,576)", 1, 0, 8192, 576, T},
    };
    int counts[2] = {1, threads};
    for (int ci = 0; ci < (threads > 1 ? 2 : 1); ci++) {
        rlpi_backend *be;
        if (rlpi_backend_cpu_create(&be, counts[ci]) != RLP_OK) {
            fprintf(stderr, "%s\n", rlp_error_last());
            return 1;
        }
        printf("\n%s, T=%lld tokens; bf16 path: %s\n", be->description, (long long)T, rlpi_cpu_bf16_path());
        printf("%-40s %10s %12s %10s %10s %9s %9s\n", "shape", "GFLOP/s", "vs 1-core pk", "per core", "bf16 GF/s",
               "bf16/fp32", "B cvt");
        rlpi_rng rng;
        rlpi_rng_seed(&rng, 1, 0);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const shape *sh = &shapes[s];
            size_t na = (size_t)(sh->m * sh->k), nb = (size_t)(sh->k * sh->n), nc = (size_t)(sh->m * sh->n);
            rlpi_buffer *A, *B, *C;
            if (rlpi_buffer_alloc(be, na * 4, &A) || rlpi_buffer_alloc(be, nb * 4, &B) ||
                rlpi_buffer_alloc(be, nc * 4, &C)) {
                fprintf(stderr, "%s\n", rlp_error_last());
                return 1;
            }
            float *ha = rlpi_buffer_host(A), *hb = rlpi_buffer_host(B);
            for (size_t i = 0; i < na; i++) ha[i] = (float)rlpi_rng_f64(&rng);
            for (size_t i = 0; i < nb; i++) hb[i] = (float)rlpi_rng_f64(&rng);
            rlpi_gemm g = {.trans_a = sh->ta, .trans_b = sh->tb, .m = sh->m, .n = sh->n, .k = sh->k,
                           .alpha = 1, .beta = 0, .batch = 1,
                           .a = {A, 0, sh->ta ? sh->m : sh->k, 0},
                           .b = {B, 0, sh->tb ? sh->k : sh->n, 0},
                           .c = {C, 0, sh->n, 0}};
            double rate[2];
            for (int mode = 0; mode < 2; mode++) {
                be->matmul = mode ? RLP_MATMUL_BF16 : RLP_MATMUL_FP32;
                rlpi_gemm_f32(be, &g); /* warm-up */
                int reps = 0;
                double t0 = now(), dt;
                do {
                    rlpi_gemm_f32(be, &g);
                    reps++;
                    dt = now() - t0;
                } while (dt < 0.5 && reps < 1000);
                rate[mode] = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k * reps / dt / 1e9;
            }
            be->matmul = RLP_MATMUL_FP32;
            /* B's conversion alone, on one thread (the GEMM converts with all) */
            uint16_t *tmp = malloc(nb * sizeof *tmp);
            int creps = 0;
            double t0 = now(), dt;
            do {
                rlpi_cpu_bf16_convert(tmp, hb, (int64_t)nb);
                creps++;
                dt = now() - t0;
            } while (dt < 0.2 && creps < 1000);
            free(tmp);
            double gemm_s = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k / (rate[1] * 1e9);
            double gflops = rate[0];
            printf("%-40s %10.1f %11.2fx %9.2fx %10.1f %8.2fx %8.1f%%\n", sh->name, gflops,
                   peak > 0 ? gflops / peak : 0, peak > 0 ? gflops / peak / counts[ci] : 0, rate[1], rate[1] / rate[0],
                   100.0 * dt / creps / counts[ci] / gemm_s);
            rlpi_buffer_free(A);
            rlpi_buffer_free(B);
            rlpi_buffer_free(C);
        }
        rlpi_backend_destroy(be);
    }
    return 0;
}
