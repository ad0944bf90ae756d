/* The NCCL glue of the CUDA module (cuda/nccl.c) without a GPU: the module
 * loads libnccl.so.2 and resolves every NCCL entry point it uses (a
 * misspelt or missing symbol fails here, not on the first multi-GPU run),
 * and ncclGetUniqueId — the one NCCL call that needs no GPU — works.
 * Collectives themselves need GPUs: tests/gpu/run.sh. Skips (77) where the
 * module or libnccl is absent. */
#include "backend/backend.h"
#include "rlpost.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char last[1024];

static int error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last, sizeof last, fmt, ap);
    va_end(ap);
    return code;
}

static void log_fn(const void *logger, int level, const char *fmt, ...)
{
    (void)logger;
    (void)level;
    (void)fmt;
}

int main(void)
{
    const char *path = getenv("RLPOST_CUDA_MODULE");
    if (!path || !*path) {
        printf("RLPOST_CUDA_MODULE not set (no CUDA build): skipped\n");
        return 77;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("the CUDA module does not load here (%s): skipped\n", dlerror());
        return 77;
    }
    typedef const rlpi_cuda_nccl_api *(*nccl_fn)(const rlpi_host_api *);
    nccl_fn get = (nccl_fn)(uintptr_t)dlsym(h, "rlpi_cuda_module_nccl");
    if (!get) {
        printf("the CUDA module was built without NCCL: skipped\n");
        return 77;
    }
    rlpi_host_api host = {RLPI_HOST_API_VERSION, error_set, log_fn};
    const rlpi_cuda_nccl_api *api = get(&host);
    if (!api) {
        if (strstr(last, "could not be loaded")) {
            printf("%s: skipped\n", last);
            return 77;
        }
        printf("FAIL: %s\n", last); /* NCCL is there but an entry point is not */
        return 1;
    }
    if (api->version != RLPI_CUDA_NCCL_API_VERSION || !api->init || !api->all_reduce || !api->broadcast ||
        !api->abort || !api->destroy) {
        printf("FAIL: incomplete NCCL table\n");
        return 1;
    }
    unsigned char a[128] = {0}, b[128] = {0}, zero[128] = {0};
    if (api->get_unique_id(a) != RLP_OK || api->get_unique_id(b) != RLP_OK) {
        printf("FAIL: ncclGetUniqueId: %s\n", last);
        return 1;
    }
    if (!memcmp(a, zero, sizeof a) || !memcmp(a, b, sizeof a)) {
        printf("FAIL: unique ids are empty or repeat\n");
        return 1;
    }
    printf("NCCL loaded, every entry point resolved, two distinct unique ids\n");
    return 0;
}
