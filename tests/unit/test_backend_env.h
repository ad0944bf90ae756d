/* The backend a model test runs on: the CPU by default; with
 * RLPOST_TEST_BACKEND=cuda the CUDA backend (the gpu suite on a GPU, the
 * cuda_emu suite on the kernel emulator), the same checks under the same
 * tolerances. Shared by test_transformer_arch, test_lora and test_qbase.
 * Test-only; include once per test program. */
#ifndef RLPI_TEST_BACKEND_ENV_H
#define RLPI_TEST_BACKEND_ENV_H

#include "backend/backend.h"
#include "core/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool use_cuda; /* RLPOST_TEST_BACKEND=cuda */

/* Reads RLPOST_TEST_BACKEND. Returns 77 (meson's "skipped", after saying
 * why) when CUDA is asked for and no CUDA backend can be made, else 0. */
static inline int test_backend_from_env(void)
{
    const char *bk = getenv("RLPOST_TEST_BACKEND");
    use_cuda = bk && !strcmp(bk, "cuda");
    if (use_cuda) {
        rlpi_backend *probe;
        if (rlpi_backend_cuda_create(&probe, 0) != RLP_OK) {
            printf("skipped: no CUDA backend: %s\n", rlp_error_last());
            return 77;
        }
        rlpi_backend_destroy(probe);
    }
    return 0;
}

/* The chosen backend (2 CPU threads): 0, or -1 for cmocka's group setup. */
static inline int test_backend_create(rlpi_backend **be)
{
    return (use_cuda ? rlpi_backend_cuda_create(be, 0) : rlpi_backend_cpu_create(be, 2)) == RLP_OK ? 0 : -1;
}

#endif
