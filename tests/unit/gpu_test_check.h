/* Checks of the CPU-against-CUDA tests (test_cuda_ops.c, test_cuda_policy.c),
 * which are plain programs rather than cmocka suites because they must exit
 * 77 (skip) before any test runs when no GPU is present. DIE ends the
 * program on a setup failure; OK wraps a call that must succeed. */
#ifndef RLPOST_TESTS_GPU_TEST_CHECK_H
#define RLPOST_TESTS_GPU_TEST_CHECK_H

#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>

#define DIE(...)                                                                    \
    do {                                                                            \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                             \
        fprintf(stderr, __VA_ARGS__);                                               \
        fprintf(stderr, " (%s)\n", rlp_error_last());                               \
        exit(1);                                                                    \
    } while (0)

#define OK(call)                                                                    \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != RLP_OK)                                                          \
            DIE("%s returned %d", #call, rc_);                                      \
    } while (0)

#endif
