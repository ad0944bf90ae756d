/* Loads the CUDA backend module (librlpost-cuda.so) with dlopen on first
 * use. librlpost.so itself never links the CUDA libraries, so it loads on
 * any machine; where the module, the CUDA runtime or a GPU is missing,
 * asking for CUDA returns RLP_E_BACKEND with the reason. */
#include "backend/backend.h"

#include "core/error.h"
#include "core/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
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

static void host_log(const void *logger, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rlpi_log((const rlpi_logger *)logger, level, "%s", msg);
}

static const rlpi_host_api host_api = {
    .version = RLPI_HOST_API_VERSION,
    .error_set = rlpi_error_set,
    .log = host_log,
};

#ifdef RLPI_HAVE_CUDA
/* an object in this library, whose address dladdr maps back to our file */
static const char module_anchor;

static void *try_open(const char *path, char *why, size_t why_len)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(why);
        const char *err = dlerror();
        int w = snprintf(why + used, why_len - used, "%s%s", used ? "; " : "", err ? err : path);
        if (w < 0 || (size_t)w >= why_len - used)
            why[why_len - 1] = '\0'; /* cut short: the reasons so far say enough */
    }
    return h;
}

static void load_module(void)
{
    char why[sizeof load_error] = "";
    void *h = NULL;
    const char *env = getenv("RLPOST_CUDA_MODULE");
    if (env && *env)
        h = try_open(env, why, sizeof why);
    if (!h) {
        /* next to the librlpost that contains this code */
        Dl_info info;
        if (dladdr(&module_anchor, &info) && info.dli_fname) {
            char path[4096];
            const char *slash = strrchr(info.dli_fname, '/');
            if (slash && (size_t)(slash - info.dli_fname) + sizeof MODULE_NAME + 1 < sizeof path) {
                memcpy(path, info.dli_fname, (size_t)(slash - info.dli_fname) + 1);
                strcpy(path + (slash - info.dli_fname) + 1, MODULE_NAME);
                h = try_open(path, why, sizeof why);
            }
        }
    }
#ifdef RLPI_CUDA_MODULE_PATH
    if (!h)
        h = try_open(RLPI_CUDA_MODULE_PATH, why, sizeof why);
#endif
    if (!h)
        h = try_open(MODULE_NAME, why, sizeof why);
    if (!h) {
        snprintf(load_error, sizeof load_error, "the CUDA backend module could not be loaded: %s",
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
    if (module_device_count(&host_api, &n) != RLP_OK)
        return 0;
    return n;
}

int rlpi_backend_cuda_create(rlpi_backend **out, int device)
{
    pthread_once(&load_once, load_module);
    if (!module_create)
        return rlpi_error_set(RLP_E_BACKEND, "%s", load_error);
    return module_create(&host_api, device, out);
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
    return module_nccl(&host_api);
}
