/* Loads the CUDA backend module (librlpost-cuda.so) with dlopen on first
 * use. librlpost.so itself never links the CUDA libraries, so it loads on
 * any machine; where the module, the CUDA runtime or a GPU is missing,
 * asking for CUDA returns RLP_E_BACKEND with the reason. */
#include "backend/backend.h"

#include "core/error.h"
#include "core/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODULE_NAME "librlpost-cuda.so"

typedef int (*device_count_fn)(const rlpi_host_api *host, int *out);
typedef int (*create_fn)(const rlpi_host_api *host, int device, rlpi_backend **out);
typedef const rlpi_cuda_nccl_api *(*nccl_fn)(const rlpi_host_api *host);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static device_count_fn module_device_count;
static create_fn module_create;
static nccl_fn module_nccl; /* optional: older modules lack it */
static char load_error[1024];

#ifdef RLPI_HAVE_CUDA
static void load_module(void)
{
    char why[sizeof load_error];
#ifdef RLPI_CUDA_MODULE_PATH
    /* the install directory: RLPI_CUDA_MODULE_PATH less its file name */
    char install[1024];
    snprintf(install, sizeof install, "%s", RLPI_CUDA_MODULE_PATH);
    char *slash = strrchr(install, '/');
    if (slash)
        *slash = '\0';
    void *h = rlpi_module_open("RLPOST_CUDA_MODULE", MODULE_NAME, slash ? install : NULL, why, sizeof why);
#else
    void *h = rlpi_module_open("RLPOST_CUDA_MODULE", MODULE_NAME, NULL, why, sizeof why);
#endif
    if (!h) {
        snprintf(load_error, sizeof load_error, "the CUDA backend module could not be loaded: %.960s",
                 why);
        return;
    }
    module_device_count = (device_count_fn)(uintptr_t)dlsym(h, "rlpi_cuda_module_device_count");
    module_create = (create_fn)(uintptr_t)dlsym(h, "rlpi_cuda_module_create");
    module_nccl = (nccl_fn)(uintptr_t)dlsym(h, "rlpi_cuda_module_nccl");
    if (!module_device_count || !module_create) {
        module_device_count = NULL;
        module_create = NULL;
        snprintf(load_error, sizeof load_error,
                 "%s does not export the CUDA backend entry points", MODULE_NAME);
    }
    /* the handle stays open for the life of the process: backends created
     * from it may outlive any one caller */
}
#else
static void load_module(void)
{
    snprintf(load_error, sizeof load_error,
             "this librlpost was built without CUDA (meson option cuda=disabled, or no CUDA "
             "toolkit was found at build time)");
}
#endif

int rlpi_backend_cuda_device_count(void)
{
    pthread_once(&load_once, load_module);
    if (!module_device_count) {
        rlpi_error_set(RLP_E_BACKEND, "%s", load_error);
        return 0;
    }
    int n = 0;
    if (module_device_count(rlpi_module_host_api(), &n) != RLP_OK)
        return 0;
    return n;
}

int rlpi_backend_cuda_create(rlpi_backend **out, int device)
{
    pthread_once(&load_once, load_module);
    if (!module_create)
        return rlpi_error_set(RLP_E_BACKEND, "%s", load_error);
    return module_create(rlpi_module_host_api(), device, out);
}

const rlpi_cuda_nccl_api *rlpi_backend_cuda_nccl(void)
{
    pthread_once(&load_once, load_module);
    if (!module_create) {
        rlpi_error_set(RLP_E_BACKEND, "%s", load_error);
        return NULL;
    }
    if (!module_nccl) {
        rlpi_error_set(RLP_E_UNSUPPORTED, "%s was built without NCCL support", MODULE_NAME);
        return NULL;
    }
    return module_nccl(rlpi_module_host_api());
}
