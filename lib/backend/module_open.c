/* Opening librlpost's run-time modules (librlpost-cuda.so, librlpost-mpi.so,
 * librlpost-gloo.so) with dlopen, and the host interface they call back
 * through. One search order for all of them: an explicit path from the
 * environment, next to the librlpost that holds this code, the install
 * path, then the bare name (LD_LIBRARY_PATH); every failed attempt's
 * reason is kept, so the caller's error says why each one failed. */
#include "backend/backend.h"

#include "core/error.h"
#include "core/log.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

const rlpi_host_api *rlpi_module_host_api(void)
{
    return &host_api;
}

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

static void *open_in(const char *dir, size_t dir_len, const char *file, char *why, size_t why_len)
{
    char path[4096];
    if (dir_len + 1 + strlen(file) + 1 > sizeof path)
        return NULL;
    memcpy(path, dir, dir_len);
    path[dir_len] = '/';
    strcpy(path + dir_len + 1, file);
    return try_open(path, why, why_len);
}

void *rlpi_module_open(const char *env_var, const char *file, const char *install_dir, char *why, size_t why_len)
{
    why[0] = '\0';
    void *h = NULL;
    const char *env = env_var ? getenv(env_var) : NULL;
    if (env && *env)
        h = try_open(env, why, why_len);
    Dl_info info;
    if (!h && dladdr(&module_anchor, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            h = open_in(info.dli_fname, (size_t)(slash - info.dli_fname), file, why, why_len);
    }
    if (!h && install_dir && *install_dir)
        h = open_in(install_dir, strlen(install_dir), file, why, why_len);
    if (!h)
        h = try_open(file, why, why_len);
    return h;
}
