/* Picks OpenBLAS's kernels for this CPU before anything runs, for the
 * example programs (rlpost and the small examples) and the benchmarks
 * (tests/bench include this file, so that they time what rlpost runs).
 * Debian 12's OpenBLAS 0.3.21 does not know recent Xeons and falls back to
 * its SSE3 "Prescott" kernels, 5× slower at the GEMMs that decide
 * train-step and decode speed (docs/PERFORMANCE.md). OpenBLAS reads
 * OPENBLAS_CORETYPE once, when it is loaded, so a program sets it and
 * re-executes itself; child processes (a benchmark's Python baseline)
 * inherit it. This is a host program's business, not the library's: a
 * library must not change its host's environment. Opt out with
 * RLPOST_KEEP_BLAS=1 or by setting OPENBLAS_CORETYPE yourself. Call first
 * thing in main(). */
#ifndef RLPOST_EXAMPLES_BLAS_KERNELS_H
#define RLPOST_EXAMPLES_BLAS_KERNELS_H

#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void rlpost_select_blas_kernels(char **argv)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (getenv("OPENBLAS_CORETYPE") || getenv("RLPOST_KEEP_BLAS"))
        return;
    __builtin_cpu_init();
    const char *core = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        core = "Haswell";
    if (!core)
        return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("RLPOST_KEEP_BLAS", "1", 1); /* never loop */
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc): go on with whatever OpenBLAS chose */
    unsetenv("OPENBLAS_CORETYPE");
#else
    (void)argv;
#endif
}

/* Bounds oneDNN's primitive cache (the bf16 GEMMs, lib/backend/cpu_bf16.c)
 * to 64 entries unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is already set.
 * A train step's micro-batches differ in length, so each step brings new
 * GEMM shapes, and oneDNN's default of 1,024 cached primitives (JIT code
 * and descriptors on the heap) kept growing the default job's heap: in
 * use 23 -> 45 MB over 4 steps, against a steady 33 MB with 64, at the same
 * step time (docs/PERFORMANCE.md, "Issue 22: batch-1 decode at the memory
 * bound, and the peak RSS goal"). 64 holds every shape of a step. oneDNN
 * reads the variable at its first primitive, so call this early in main().
 * A host program's choice, like the BLAS kernels above: the library leaves
 * the process-wide cache alone. */
static inline void rlpost_bound_dnnl_cache(void)
{
    setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64", 0);
}

#endif
